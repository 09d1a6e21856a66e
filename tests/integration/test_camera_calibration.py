"""A run calibrates int8 on its own camera's frames (issue 46 item 1), real processes: the master samples the
camera's first frames (skipping its black ones), the workers build their int8 stages with that calibration, the
report says which frames calibrated the run, and a run with another `frames:` reuses the stored calibration and
builds no stage again."""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from cnnvideo.model import engines

from .helpers import base_config, run_local

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not engines.ort_available()[0], reason="onnxruntime is not installed")]


@pytest.fixture(scope="module")
def camera_video(tmp_path_factory):
    """A clip whose first 5 frames are black (a covered lens), then a scene."""
    from cnnvideo.video.frames import synthetic_frames, write_video

    frames = [np.zeros((96, 128, 3), np.uint8)] * 5 + list(synthetic_frames(35, (96, 128), seed=3))
    return write_video(str(tmp_path_factory.mktemp("camera") / "camera.avi"), iter(frames))


def test_a_run_calibrates_on_its_own_cameras_frames(tmp_path, camera_video):
    cache = str(tmp_path / "cache")
    data = base_config(camera_video, cache, model="mobilenet_v2", engine="onnxruntime", precision="int8",
                       frames=8, scheduler="lbs", trainer={"frames": 12},
                       int8={"calibration": "camera", "calibration_frames": 4, "calibration_stride": 3})
    proc, report, _ = run_local(tmp_path, data, name="first")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["completed"] == report["frames"] == 8
    cal = report["int8_calibration"]
    assert cal["source"] == camera_video and cal["count"] == 4 and cal["stored"] is False
    assert cal["skipped"].get("black") == 5 and cal["frame_indices"] == [5, 8, 11, 14]
    assert len(cal["digest"]) == 16 and 0 < cal["wire_bytes"] < 100_000
    assert [e["ran"] for e in report["engines"]] == [["onnxruntime-int8"], ["onnxruntime-int8"]]
    assert proc.stderr.count("int8 calibration %s of %s" % (cal["digest"], camera_video)) == 2  # each worker
    assert "skipped 5 black" in proc.stderr
    stages = sorted(glob.glob(os.path.join(cache, "onnx", "*-int8-*.onnx")))

    data["frames"] = 12  # another `frames:`: the same calibration, no stage built again
    proc, report, _ = run_local(tmp_path, data, name="second")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["int8_calibration"]["digest"] == cal["digest"] and report["int8_calibration"]["stored"] is True
    assert sorted(glob.glob(os.path.join(cache, "onnx", "*-int8-*.onnx"))) == stages
    assert "built into" not in proc.stderr, [ln for ln in proc.stderr.splitlines() if "built into" in ln][:3]


def test_a_worker_refuses_a_calibration_of_another_model_with_one_line(tmp_path, camera_video):
    """StartRun (or a Prepare) carrying a calibration of another model (or frame size) is refused (INVALID_ARGUMENT,
    one line); the same calibration for this worker's model is taken."""
    import subprocess
    import sys

    import grpc

    from cnnvideo import config
    from cnnvideo.model.engines import camera_calibration as cc
    from cnnvideo.model.engines import model_key
    from cnnvideo.model.loading import load_graph
    from cnnvideo.rpc import cnnvideo_pb2 as pb
    from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
    from cnnvideo.rpc import convert, net
    from cnnvideo.video.frames import read_frames

    from .helpers import REPO, env, master_settings, stop_procs, write_config

    addr = "127.0.0.1:%d" % net.free_port()
    data = base_config(camera_video, str(tmp_path / "cache"), model="mobilenet_v2", engine="onnxruntime",
                       precision="int8", trainer={"frames": 12}, cluster={"trainer": "127.0.0.1:%d" % net.free_port(),
                                                                         "workers": [addr]},
                       int8={"calibration_frames": 4, "calibration_stride": 3}, bandwidth=[3.0])
    path = write_config(str(tmp_path / "w.yml"), data)
    log = open(str(tmp_path / "w0.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "cnnvideo", "worker", "-c", path, "-i", "0"], env=env(), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=log)
    try:
        assert net.wait_healthy(addr, 300, alive=lambda: proc.poll() is None), open(str(tmp_path / "w0.log")).read()
        cfg = config.load(path)
        graph = load_graph(cfg)
        clip = read_frames(camera_video, tuple(cfg.frame_size), limit=20, loop=False)
        frames = [(f, i / 25.0) for i, f in enumerate(clip)]
        sample = cc.sample_frames(frames, 3, 3, camera_video)
        other = cc.measure(graph, "resnet50 96x128 weights 0123456789abcdef", sample)
        own = cc.measure(graph, model_key(cfg, graph), sample)
        stub = pb_grpc.WorkerStub(net.channel(addr, 64 << 20))
        setup = pb.RunSetup(run_id="r1", mode="delta", n_workers=1, settings=master_settings(cfg),
                            calibration=convert.calibration_to_pb(other))
        with pytest.raises(grpc.RpcError) as exc:
            stub.StartRun(setup, timeout=60)
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "refused" in exc.value.details() and "\n" not in exc.value.details(), exc.value.details()
        # a Prepare carrying it (a recalibration's) is refused the same way
        plan = pb.StagePlan(cuts=[0, graph.num_segments], stage_of=[0])
        with pytest.raises(grpc.RpcError) as exc:
            stub.Prepare(pb.PrepareRequest(plan=plan, calibration=convert.calibration_to_pb(other)), timeout=60)
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "refused" in exc.value.details() and "\n" not in exc.value.details(), exc.value.details()
        setup.calibration.CopyFrom(convert.calibration_to_pb(own))
        assert stub.StartRun(setup, timeout=120).ok
    finally:
        stop_procs([proc])
        log.close()
