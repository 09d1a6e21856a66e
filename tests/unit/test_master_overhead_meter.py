"""The master's measured overhead: a long enough run's stage reports are stored per device and the next run's plan
is built with them; a short run, a run of several cameras or `measured_overhead: false` stores and uses nothing; a
run that did not finish normally, or whose figures are at a clamp or off the stored history, is refused and kept
apart."""
import json
import os

import numpy as np

from cnnvideo.artifacts import overhead_path
from cnnvideo.config_types import Config
from cnnvideo.master.overhead_meter import Overheads
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
    """A first run of MIN_FRAMES stores its medians per cap and per device; the next plan scales the profile by its
    compute ratio and charges its message CPU, and names the run it used."""
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
    """`measured_overhead: false`, a run under MIN_FRAMES and a run of several cameras store nothing; workers of no
    known device plan with the configured overhead."""
    off = _cfg(tmp_path, measured_overhead=False)
    assert _run(off, overhead.MIN_FRAMES).finish("r")["stored"] == []
    cfg = _cfg(tmp_path)
    assert _run(cfg, overhead.MIN_FRAMES - 1).finish("r")["stored"] == []
    cfg.cameras = cfg.cameras * 2  # two cameras
    assert _run(cfg, overhead.MIN_FRAMES).finish("r")["stored"] == []
    assert _run(cfg, 1, devices=("", "")).plan_inputs(np.ones((2, 2)))[1] == cfg.cost_model.net_cpu_us_per_message


def _sick(cfg, frames, ratio=1.8):
    """A run whose compute took `ratio` x the profile (the healthy _run takes 1.2 x)."""
    seg = np.full((2, 2), 0.05)
    codec = np.full((2, 3), 0.005)
    o = Overheads(cfg, ["pi", "pi"], seg, [10.0, 10.0], [(0.01, 0.1)] * 2, (codec, codec))
    cpu = [3.0, 3.0]
    compute = 0.010 * ratio
    for f in range(frames + 1):
        for w in range(2):
            cpu[w] += compute + 0.003
            stages = [pb.StageTiming(stage="decode", cpu=0.001), pb.StageTiming(stage="compute", cpu=compute),
                      pb.StageTiming(stage="encode", cpu=0.0005)]
            o.stage_report(w, pb.StageReport(frame_id=f, worker_id=w, start_cut=0, end_cut=2, stages=stages,
                                             bytes_in=40000, bytes_out=2000, process_cpu=cpu[w]))
    return o


def test_an_interrupted_run_stores_nothing_and_says_so(tmp_path):
    """A run that did not finish normally (here stopped by a signal before its last frame) stores no figures: the
    next plan uses the configured overhead, report.json's `overhead` says why nothing was stored, and the figures
    are kept apart in the file's `rejected` list."""
    cfg = _cfg(tmp_path)
    o = _run(cfg, overhead.MIN_FRAMES)
    o.plan_inputs(np.full((2, 2), 0.05))
    out = o.finish("stopped", "interrupted by signal 15 after 110 of 240 frames (104 completed)")
    assert out["stored"] == [] and out["finished_normally"] is False
    row = out["figures"]["pi/cap 0.1"]
    assert row["status"] == "not stored" and "did not finish normally" in row["why"] and "signal 15" in row["why"]
    assert "pi" not in out["figures"]  # no device-wide figures either
    nxt = _run(cfg, 1)
    assert nxt.plan_inputs(np.full((2, 2), 0.05))[1] == cfg.cost_model.net_cpu_us_per_message
    assert nxt.used == [None, None]
    kept = overhead.read(overhead_path(cfg, "pi/cap 0.1"))
    assert kept.current is None and [r["run_id"] for r in kept.rejected] == ["stopped"]
    assert kept.rejected[0]["reason"] == "unfinished"


def test_a_normal_run_that_agrees_is_stored_and_planned_with(tmp_path):
    """A second normal run whose figures agree with the first's is stored (history of two) and the next plan names
    it; report.json's `figures` says `stored`."""
    cfg = _cfg(tmp_path)
    _run(cfg, overhead.MIN_FRAMES).finish("good1")
    out = _run(cfg, overhead.MIN_FRAMES).finish("good2", None)
    assert out["finished_normally"] is True and out["stored"] == ["pi/cap 0.1", "pi"]
    assert out["figures"]["pi/cap 0.1"]["status"] == "stored"
    hist = overhead.read(overhead_path(cfg, "pi/cap 0.1"))
    assert [s.run_id for s in hist.accepted] == ["good1", "good2"] and hist.rejected == []
    nxt = _run(cfg, 1)
    nxt.plan_inputs(np.full((2, 2), 0.05))
    assert [s.run_id for s in nxt.used] == ["good2", "good2"]


def test_a_run_off_the_history_is_refused_kept_apart_and_the_next_plan_uses_the_old_figures(tmp_path, caplog):
    """A run that finished normally but whose compute ran 1.8x the profile against 1.2x stored is refused with one
    logged line saying why, kept in `rejected`, and the next plan still uses the earlier run's figures (compute
    x1.2)."""
    cfg = _cfg(tmp_path)
    _run(cfg, overhead.MIN_FRAMES).finish("good")
    with caplog.at_level("WARNING", logger="cnnvideo.master.overhead_meter"):
        out = _sick(cfg, overhead.MIN_FRAMES).finish("sick")
    assert out["stored"] == [] and out["finished_normally"] is True
    row = out["figures"]["pi/cap 0.1"]
    assert row["status"] == "refused" and row["compute_ratio"] == 1.8 and "off x1.200" in row["why"]
    lines = [r.getMessage() for r in caplog.records if "not stored" in r.getMessage()]
    assert len(lines) == 1 and "run sick" in lines[0] and "compute x1.800" in lines[0], lines
    kept = overhead.read(overhead_path(cfg, "pi/cap 0.1"))
    assert kept.current.run_id == "good" and [r["run_id"] for r in kept.rejected] == ["sick"]
    assert kept.rejected[0]["reason"] == "off_history" and kept.rejected[0]["after"] == "good"
    assert overhead.load(overhead_path(cfg, "pi")).run_id == "good"  # the device-wide figures too
    nxt = _run(cfg, 1)
    seg, _ = nxt.plan_inputs(np.full((2, 2), 0.05))
    assert [s.run_id for s in nxt.used] == ["good", "good"]
    np.testing.assert_allclose(seg, 0.06)


def test_figures_at_a_clamp_bound_are_refused_even_with_no_history(tmp_path):
    """The first run ever, finished normally, whose compute ratio sits at the 2.0 clamp (the issue's sick run), is
    refused: nothing is planned with it."""
    cfg = _cfg(tmp_path)
    out = _sick(cfg, overhead.MIN_FRAMES, ratio=3.0).finish("clamped")
    assert out["stored"] == [] and out["figures"]["pi/cap 0.1"]["status"] == "refused"
    assert "clamp" in out["figures"]["pi/cap 0.1"]["why"]
    assert overhead.load_for(cfg, "pi", 0.01, 0.1) is None


def test_a_file_stored_before_the_history_still_loads_and_becomes_its_history(tmp_path):
    """A file as runs stored it before this change (the figures alone, no history) is planned with, is the history
    a new run is checked against, and gets the new lists when the next run is stored."""
    cfg = _cfg(tmp_path)
    path = overhead_path(cfg, "pi/cap 0.1")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"compute_ratio": 1.2, "message_us": 316.0, "frames": 60, "workers": 2, "run_id": "old",
                   "format": 2}, f)
    o = _run(cfg, overhead.MIN_FRAMES)
    o.plan_inputs(np.full((2, 2), 0.05))
    assert [s.run_id for s in o.used] == ["old", "old"]
    assert _sick(cfg, overhead.MIN_FRAMES).finish("sick")["figures"]["pi/cap 0.1"]["status"] == "refused"
    assert o.finish("new")["figures"]["pi/cap 0.1"]["status"] == "stored"
    with open(path) as f:
        d = json.load(f)
    assert d["run_id"] == "new" and [h["run_id"] for h in d["history"]] == ["old", "new"]
    assert [r["run_id"] for r in d["rejected"]] == ["sick"]
