"""int8 stages quantized where the CPU is (issue 46 item 2), real processes: with a cold cache the master quantizes
each stage of the first plan once and pushes its file; the workers load it (their logs say so) and quantize
nothing; the answers are those of workers that quantize their own stages (`int8.quantize: worker`), and no frame
is lost. A re-plan's stages are quantized on the master in the background and pushed before frames take it."""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from cnnvideo.model import engines

from .helpers import LocalRun, base_config, run_local, write_config

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not engines.ort_available()[0], reason="onnxruntime is not installed")]


@pytest.fixture(scope="module")
def camera_video(tmp_path_factory):
    from cnnvideo.video.frames import synthetic_frames, write_video

    return write_video(str(tmp_path_factory.mktemp("camera") / "camera.avi"),
                       iter(list(synthetic_frames(30, (96, 128), seed=5))))


THREE = ["127.0.0.1:50060", "127.0.0.1:50061", "127.0.0.1:50062"]  # (`cnnvideo local` picks free ports)


def _config(video, cache, quantize):
    """A pool (stage 0..16 on two replicas, 16..74 on one) of mobilenet_v2 int8 on a camera's calibration."""
    return base_config(video, cache, model="mobilenet_v2", engine="onnxruntime", precision="int8", frames=8,
                       scheduler="fixed", scheduler_options={"cuts": [0, 16, 74], "groups": [[0, 1], [2]]},
                       cluster={"workers": THREE}, bandwidth=[3], trainer={"frames": 12},
                       int8={"calibration": "camera", "calibration_frames": 4, "calibration_stride": 3,
                             "quantize": quantize})


def test_the_workers_load_the_stages_the_master_quantized(tmp_path, camera_video):
    proc, report, _ = run_local(tmp_path, _config(camera_video, str(tmp_path / "cache-m"), "master"), name="m")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["completed"] == report["frames"] == 8 and report["lost"] == 0
    err = proc.stderr
    # the whole model for the workers' profiles (the trainer's video's calibration), then each stage of the pool
    assert err.count("int8 file ready on the master") == 3, err[-3000:]
    assert err.count("video calibration) for its workers") == 1
    assert err.count("received from the master") == 6  # each worker: its profile stage, its run's stage
    # (the workers share the cache folder here: one that builds a stage after another finds its copy there)
    assert 3 <= err.count("fetched from the master") <= 6
    assert not [ln for ln in err.splitlines() if ln.startswith("[w") and "built into" in ln]
    assert "quantizing int8 here" not in err, [ln for ln in err.splitlines() if "quantizing int8 here" in ln]
    assert not glob.glob(str(tmp_path / "cache-m" / "onnx" / "tmp" / "*"))  # no quantizer scratch on the workers
    assert [e["ran"] for e in report["engines"]] == [["onnxruntime-int8"]] * 3
    assert report["pool"]["groups"] == [[0, 1], [2]]

    # the same run with each worker quantizing its own stage: the same answers
    proc2, before, _ = run_local(tmp_path, _config(camera_video, str(tmp_path / "cache-w"), "worker"), name="w")
    assert proc2.returncode == 0, proc2.stderr[-3000:]
    assert proc2.stderr.count("quantizing int8 here") >= 2 and "received from the master" not in proc2.stderr
    assert before["plan"] == report["plan"]
    for key in ("max_abs_err", "top1_agreement"):
        assert report.get(key) == before.get(key), key
    assert np.isfinite(report["max_abs_err"])

    # again on the first run's cache: each worker has its stages, answers each push on the header alone and is sent
    # none of the files' data (the run's PutStage calls still succeed: nothing is quantized anywhere)
    proc3, again, _ = run_local(tmp_path, _config(camera_video, str(tmp_path / "cache-m"), "master"), name="m2")
    assert proc3.returncode == 0, proc3.stderr[-3000:]
    err = proc3.stderr
    assert err.count("already in the cache; its data not taken from the master") == 6, err[-3000:]
    assert "received from the master" not in err and "not pushed" not in err
    assert "quantizing int8 here" not in err
    assert again["completed"] == 8 and again["lost"] == 0 and again["max_abs_err"] == report["max_abs_err"]


def test_on_the_trainer_videos_calibration_too(tmp_path, camera_video):
    """`int8.calibration: video`: the run's stages are on the profile's calibration; the master builds them too."""
    data = base_config(camera_video, str(tmp_path / "cache"), model="mobilenet_v2", engine="onnxruntime",
                       precision="int8", frames=6, scheduler="fixed", scheduler_options={"cuts": [0, 16, 74]},
                       trainer={"frames": 12},
                       int8={"calibration": "video", "calibration_frames": 4, "calibration_stride": 3})
    proc, report, _ = run_local(tmp_path, data, name="video")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["completed"] == 6 and report["lost"] == 0
    err = proc.stderr
    assert err.count("video calibration) for its workers") == 3, err[-3000:]  # 0..74 (profiles), 0..16, 16..74
    assert "quantizing int8 here" not in err, [ln for ln in err.splitlines() if "quantizing int8 here" in ln]


def test_a_replan_warms_stages_the_master_quantized(tmp_path):
    """A stale profile makes `adaptive` re-plan mid-run to cuts no worker has built: the master quantizes the new
    plan's stages in the background and pushes them, the frames keep their plan meanwhile, and the workers load
    the files (no worker quantizes a run's stage). Not timed: the clip loops until 10 frames after the switch
    have been sent, then the run is stopped (it ran serial, racing 160 frames against the quantization)."""
    import re

    from cnnvideo.video.frames import synthetic_frames, write_video

    video = write_video(str(tmp_path / "cam.avi"), iter(list(synthetic_frames(60, (160, 240), seed=2))))
    cache = str(tmp_path / "cache")
    data = base_config(video, cache, model="mobilenet_v2", engine="onnxruntime", precision="int8", frames=3,
                       scheduler="optimal", trainer={"frames": 12}, frame_size=[160, 240], bandwidth=[1000.0],
                       cost_model={"master_turnaround_s": 0.0},
                       int8={"calibration": "camera", "calibration_frames": 4, "calibration_stride": 3})
    proc, report, _ = run_local(tmp_path, data, name="profile")  # profiles both workers into the cache
    assert proc.returncode == 0, proc.stderr[-3000:]
    for path in glob.glob(str(tmp_path / "cache" / "costs" / "*onnxruntime-int8*.npz")):
        with np.load(path, allow_pickle=False) as z:
            arrays = {n: z[n] for n in z.files}
        k = arrays["seconds"].size
        arrays["seconds"][: int(0.6 * k)] *= 0.02
        arrays["seconds"][int(0.6 * k):] *= 20.0
        with open(path, "wb") as fh:
            np.savez(fh, **arrays)
    data.update(frames=0, scheduler="adaptive", group_size=10, in_flight=4, source={"loop": True},
                scheduler_options={"min_samples": 1, "pool": False})
    run = LocalRun(write_config(str(tmp_path / "adaptive.yml"), data), str(tmp_path / "adaptive"))
    switch = re.compile(r"built on every worker after [0-9.]+ s: frames (\d+)\.\. take it")
    try:
        run.wait_for(lambda: any(switch.search(ln) for ln in run.lines), 900)
        first = min(int(switch.search(ln).group(1)) for ln in run.lines if switch.search(ln))
        run.wait_for(lambda: run.sent >= first + 10, 300)
        code, report, err = run.stop(300)
    finally:
        run.close()
    assert code == 0, err[-3000:]
    assert report["completed"] == report["frames"] > first and report["lost"] == 0
    warmed = [w for w in report["plan_warming"] if w["switched_frame"] is not None]
    assert warmed, (report["plan_decisions"], report["plan_warming"])
    assert "quantizing int8 here" not in err, [ln for ln in err.splitlines() if "quantizing int8 here" in ln]
    for w in warmed:
        assert w["switched_frame"] > w["asked_frame"] and w["refused"] is None, w
        a, b, c = w["cuts"]
        for lo, hi in ((a, b), (b, c)):
            if hi > lo:  # (an empty stage runs no layers: there is no file to build; CI met a plan 0..74..74)
                assert "int8 stage %d..%d on the master" % (lo, hi) in err
                assert "stage %d..%d int8" % (lo, hi) in err  # received by its worker


def test_a_worker_that_joins_loads_its_stage_from_the_master(tmp_path, camera_video):
    """A worker with an empty cache of its own joins a running int8 pool: before its StartRun the master pushes its
    stage's file (quantized there at setup), and the joiner loads it instead of quantizing."""

    from cnnvideo.rpc.net import free_port

    from .test_join import FPS, TOKEN, _read, _worker

    join = "127.0.0.1:%d" % free_port()
    data = _config(camera_video, str(tmp_path / "cache"), "master")
    data.update(frames=0, scheduler="replicas", scheduler_options={}, in_flight=3,
                source={"realtime": True, "fps": FPS, "drop": "none", "loop": True},
                cluster={"workers": THREE[:2], "join": join, "join_token": TOKEN}, bandwidth=[3])
    out = str(tmp_path / "join")
    run = LocalRun(write_config(str(tmp_path / "join.yml"), data), out)
    joiner = None
    try:
        run.wait_for(lambda: run.sent >= 20, 300)
        joiner = _worker(os.path.join(out, "config.yml"), join, str(tmp_path / "w2.log"), token=TOKEN,
                         cache_dir=str(tmp_path / "joiner-cache"))
        run.wait_for(lambda: run.count("joined the pool") >= 1, 300)
        run.wait_for(lambda: "fetched from the master" in _read(str(tmp_path / "w2.log")), 120)
        code, report, text = run.stop(300)
    finally:
        run.close([joiner])
    assert code == 0, text[-4000:]
    assert report["completed"] == report["frames"] > 20 and report["lost"] == 0
    said = _read(str(tmp_path / "w2.log"))
    assert "received from the master" in said and "fetched from the master" in said, said[-3000:]
    assert "quantizing int8 here" not in said, said[-3000:]
