"""The trainer SIGKILLed during a `cnnvideo local` run: once while it fits (before the master has the
predictors) and once after the master fetched them. `cnnvideo local` restarts it both times (like compose
`restart: on-failure`); the master retries GetPredictors while the trainer is down; the second restart serves
the predictors from the on-disk cache (no re-fit, cache file untouched, `cached` set in the reply)."""
from __future__ import annotations

import glob
import os
import signal

import pytest

from .helpers import LocalRun, base_config, master_settings, write_config

pytestmark = pytest.mark.slow


def _get_predictors(address: str, cfg: dict):
    """What a master would get from the trainer at `address` now."""
    import grpc

    from cnnvideo import config as config_mod
    from cnnvideo.rpc import cnnvideo_pb2 as pb
    from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc

    with grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 256 << 20)]) as chan:
        req = pb.PredictorRequest(settings=master_settings(config_mod.from_dict(cfg), trainer=True))
        return pb_grpc.TrainerStub(chan).GetPredictors(req, timeout=60)


def test_trainer_killed_while_fitting_and_after_setup_run_completes(tmp_path, synthetic_video):
    cache_dir = str(tmp_path / "cache")
    data = base_config(synthetic_video, cache_dir, frame_size=[64, 96], frames=300, in_flight=2, scheduler="lbs",
                       trainer={"frames": 200},
                       reliability={"restart": True, "max_restarts": 5, "retries": 3, "peer_wait_s": 120.0})
    out = str(tmp_path / "run")
    run = LocalRun(write_config(str(tmp_path / "t.yml"), data), out)
    pattern = os.path.join(cache_dir, "predictors", "*.npz")

    # kill 1: the trainer is fitting (its progress bar redrew twice: ~2 s into a fit of 200 frames), nothing
    # cached yet, and the master has started (by then it usually waits in GetPredictors and has to retry)
    run.wait_for(lambda: run.count("[trainer] trainer: frames") >= 3 and "master" in run.pids, 300)
    assert not glob.glob(pattern), "predictors cached before the kill"
    first = run.pids["trainer"]
    os.kill(first, signal.SIGKILL)
    run.wait_for(lambda: run.pids["trainer"] != first, 60)
    run.wait_for(lambda: run.count("[master] ") and run.count("setup done in"), 300)
    assert run.count("fitted predictors for") == 1, "the restarted trainer should fit once (cold cache)"
    (cache,) = glob.glob(pattern)
    mtime = os.stat(cache).st_mtime_ns

    # kill 2: the master has its predictors and is running; the restarted trainer loads them from the cache
    second = run.pids["trainer"]
    os.kill(second, signal.SIGKILL)
    run.wait_for(lambda: run.pids["trainer"] != second, 60)
    run.wait_for(lambda: run.count("predictors loaded from cache") >= 1, 120)
    address = yaml_load(os.path.join(out, "config.yml"))["cluster"]["trainer"]
    reply = _get_predictors(address, data)
    assert reply.cached and reply.fit_s == 0.0  # served from disk, not re-fitted

    code, report, text = run.finish(600)
    assert code == 0, text[-4000:]
    assert report["frames"] == 300 and report["completed"] == 300 and report["lost"] == 0, text[-3000:]
    assert report["supervisor_restarts"] == {"trainer": 2}
    assert report["restarts"] == 0  # no worker restarted
    assert report["max_abs_err"] is not None and report["max_abs_err"] <= 1e-4
    assert text.count("fitted predictors for") == 1 and text.count("predictors loaded from cache") == 1
    assert os.stat(cache).st_mtime_ns == mtime, "the restarted trainer rewrote its cache"
    retried = "retrying in" in text  # the master was in GetPredictors when the trainer died (usual, not certain)
    print("\ntrainer killed twice: %d/%d frames, lost %d, supervisor restarts %s, master retried GetPredictors: %s, "
          "predictors %.1f s of setup, max_abs_err %.2g, wall %.1f s" % (
              report["completed"], report["frames"], report["lost"], report["supervisor_restarts"], retried,
              report["setup_s"]["predictors"], report["max_abs_err"], report["wall_s"]))


def yaml_load(path: str):
    import yaml

    with open(path) as fh:
        return yaml.safe_load(fh)
