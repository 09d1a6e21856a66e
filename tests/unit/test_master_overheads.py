"""The master's measured overhead: a long enough run's stage reports are stored per device and the next run's plan
is built with them; a short run, a run of several cameras or `measured_overhead: false` stores and uses nothing."""
import numpy as np

from cnnvideo.config_types import Config
from cnnvideo.master.overheads import Overheads
from cnnvideo.plan import overhead
from cnnvideo.rpc import cnnvideo_pb2 as pb


def _cfg(tmp_path, **cost_model):
    cfg = Config()
    cfg.cache_dir = str(tmp_path)
    for k, v in cost_model.items():
        setattr(cfg.cost_model, k, v)
    return cfg


def _run(cfg, frames, devices=("pi", "pi"), cap=0.1):
    seg = np.full((len(devices), 2), 0.05)  # 10 ms CPU a frame at wall/CPU 10
    codec = np.full((len(devices), 3), 0.005)  # 0.5 ms CPU to encode and 0.5 to decode at each cut
    o = Overheads(cfg, list(devices), seg, [10.0] * len(devices), [(cap * 0.1, 0.1)] * len(devices), (codec, codec))
    cpu = [3.0] * len(devices)
    for f in range(frames + 1):
        for w in range(len(devices)):
            cpu[w] += 0.015
            stages = [pb.StageTiming(stage="decode", cpu=0.001), pb.StageTiming(stage="compute", cpu=0.012),
                      pb.StageTiming(stage="encode", cpu=0.0005), pb.StageTiming(stage="send")]
            o.stage_report(w, pb.StageReport(frame_id=f, worker_id=w, start_cut=0, end_cut=2, stages=stages,
                                             bytes_in=40000, bytes_out=2000, process_cpu=cpu[w]))
    return o


def test_a_long_run_stores_per_device_and_the_next_plan_uses_it(tmp_path):
    cfg = _cfg(tmp_path)
    first = _run(cfg, overhead.MIN_FRAMES)
    seg, per_message = first.plan_inputs(np.full((2, 2), 0.05))
    assert per_message == cfg.cost_model.net_cpu_us_per_message  # nothing stored yet
    out = first.finish("run1")
    assert out["stored"] == ["pi/cap 0.1", "pi"] and out["used"] == {}
    w0 = out["workers"]["w0"]
    assert w0["cpu_per_frame_ms"] == 15.0 and w0["stage_cpu_ms"] == 13.5 and w0["compute_ratio"] == 1.2
    assert w0["profiled_codec_ms"] == 1.0
    second = _run(cfg, 5)
    seg, per_message = second.plan_inputs(np.full((2, 2), 0.05))
    np.testing.assert_allclose(seg, 0.06)
    # 15 ms less 12 computed, 1 of profiled codec and 42 kB x 25 ns, over 3 messages
    np.testing.assert_allclose(per_message, (3000 - 1000 - 42000 * 0.025) / 3, rtol=1e-6)
    again = second.finish("run2")
    assert again["stored"] == [] and again["used"]["w1"]["from_run"] == "run1"


def test_figures_are_kept_per_cap_and_a_new_cap_gets_the_devices_last(tmp_path):
    """A run at cap 0.1 and one at cap 0.2 store apart; a run at cap 0.05 (none stored) plans with the device's last
    figures, and the 0.1 run's figures stay its cap's."""
    cfg = _cfg(tmp_path)
    first = _run(cfg, overhead.MIN_FRAMES, cap=0.1)
    first.plan_inputs(np.full((2, 2), 0.05))
    first.finish("at-0.1")
    second = _run(cfg, overhead.MIN_FRAMES, cap=0.2)
    second.plan_inputs(np.full((2, 2), 0.05))
    assert second.used[0].run_id == "at-0.1"  # no figures at 0.2 yet: the device's
    assert second.finish("at-0.2")["stored"] == ["pi/cap 0.2", "pi"]
    for cap, run in ((0.1, "at-0.1"), (0.2, "at-0.2"), (0.05, "at-0.2")):
        o = _run(cfg, 1, cap=cap)
        o.plan_inputs(np.full((2, 2), 0.05))
        assert [s.run_id for s in o.used] == [run, run]


def test_off_short_or_several_cameras_store_and_use_nothing(tmp_path):
    off = _cfg(tmp_path, measured_overhead=False)
    assert _run(off, overhead.MIN_FRAMES).finish("r")["stored"] == []
    cfg = _cfg(tmp_path)
    assert _run(cfg, overhead.MIN_FRAMES - 1).finish("r")["stored"] == []
    cfg.cameras = {"a": {}, "b": {}}
    assert _run(cfg, overhead.MIN_FRAMES).finish("r")["stored"] == []
    assert _run(cfg, 1, devices=("", "")).plan_inputs(np.ones((2, 2)))[1] == cfg.cost_model.net_cpu_us_per_message
