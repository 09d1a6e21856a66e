"""`cnnvideo plan` on a tiny config prints every scheduler without any network."""
import json
import os

import pytest
import yaml

from cnnvideo.model import engines
from cnnvideo.plan.schedulers import SCHEDULERS
from cnnvideo.tools import cli

# `fixed` runs the config's own cuts: the plan lists it only for a config that uses it
LISTED = [s for s in SCHEDULERS if s != "fixed"]


def _config(tmp_path, video, **extra):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({
        **extra,
        "model": "alexnet",
        "video": video,
        "frame_size": [96, 128],
        "cluster": {"workers": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]},
        "bandwidth": [3.0, 2.0, 1.0],
        "cpus": {"worker0": 0.1, "workers": 0.2},
        "profile_iters": 1,
        "cache_dir": str(tmp_path / "cache"),
    }))
    return str(path)


def test_plan_table_lists_every_scheduler(tmp_path, synthetic_video, capsys):
    """The table has one row per scheduler with its time and split."""
    assert cli.main(["plan", "-c", _config(tmp_path, synthetic_video)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()[3:]
    end = next(i for i, line in enumerate(lines) if line.startswith("---"))
    assert [line.split()[0] for line in lines[:end]] == LISTED
    assert "w2:" in out
    # then the best plan of each shape by the pool model (cnnvideo.plan.pool)
    assert sorted(line.split()[0] for line in lines[end + 1:]) == ["chain", "edge", "hybrid", "replicas"]
    assert "w0+w1+w2:" in out  # full replication's split names its replicas


def test_plan_lists_fixed_with_its_cuts_when_the_config_uses_it(tmp_path, synthetic_video, capsys):
    """A config with `scheduler: fixed` gets a `fixed` row whose cuts are the configured ones."""
    assert cli.main(["plan", "-c", _config(tmp_path, synthetic_video), "--json"]) == 0
    k = len(json.loads(capsys.readouterr().out)["cuts"]) - 1
    path = _config(tmp_path, synthetic_video, scheduler="fixed", scheduler_options={"cuts": [0, 1, 2, k]})
    assert cli.main(["plan", "-c", path, "--json"]) == 0
    rows = {r["scheduler"]: r["cuts"] for r in json.loads(capsys.readouterr().out)["schedulers"]}
    assert rows["fixed"] == [0, 1, 2, k] and set(rows) == set(SCHEDULERS)


def test_plan_json_consistent(tmp_path, synthetic_video, capsys):
    """--json gives valid plans (W+1 cuts ending at K; a pool plan one more cut than its stages), optimal has the
    least per-frame time of the chains and the best shape's the least of all, shares applied."""
    assert cli.main(["plan", "-c", _config(tmp_path, synthetic_video), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    k = len(data["cuts"]) - 1
    assert data["cpu_share"] == [0.1, 0.2, 0.2]
    times = {}
    for row in data["schedulers"]:
        stages = len(row["groups"]) if "groups" in row else 3
        assert len(row["cuts"]) == stages + 1 and row["cuts"][0] == 0 and row["cuts"][-1] == k
        assert sum(s["segments"] for s in row["split"]) == k
        times[row["scheduler"]] = row["per_frame_s"]
    assert set(times) == set(LISTED)
    chains = [t for name, t in times.items() if name != "replicas"]
    assert times["optimal"] <= min(chains) * (1 + 1e-12)
    best_shape = min(r["per_frame_s"] for r in data["shapes"])
    assert best_shape <= min(times.values()) * (1 + 1e-9)


def test_plan_rejects_unknown_scheduler_option(tmp_path, synthetic_video, capsys):
    """A scheduler_options key the configured scheduler does not take is a config error (exit 2) naming it."""
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"video": synthetic_video, "scheduler": "lbs", "scheduler_options": {"zz": 1}}))
    assert cli.main(["plan", "-c", str(path)]) == 2
    assert "zz" in capsys.readouterr().err


def test_plan_uses_the_predictors_the_trainer_cached(tmp_path, synthetic_video, capsys):
    """The trainer fits and caches its predictors; `cnnvideo plan` on the same config finds that file (one name,
    cnnvideo.artifacts) and plans with exactly those predictors instead of fitting its own."""
    import numpy as np

    from cnnvideo import artifacts, config
    from cnnvideo.trainer.role import TrainerRole

    path = _config(tmp_path, synthetic_video)
    with open(path, "a") as fh:
        fh.write("trainer: {frames: 6}\n")
    trainer = TrainerRole(config.load(path))
    fitted = trainer.fit()
    cache = artifacts.predictor_path(config.load(path))
    assert os.path.isfile(cache) and not trainer.cached
    assert cli.main(["plan", "-c", path, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["predictors"] == "trainer cache %s" % cache
    expected = fitted.predict_bytes(fitted.input_nz)
    assert np.allclose([c["bytes_delta"] for c in data["cuts"]], expected)


ORT = pytest.mark.skipif(not engines.ort_available()[0], reason="onnxruntime is not installed")


def _plan_json(tmp_path, video, capsys, **extra):
    path = _config(tmp_path, video)
    if extra:  # over the config's own keys (a config file may not give a key twice)
        with open(path) as fh:
            data = yaml.safe_load(fh)
        data.update(extra)
        with open(path, "w") as fh:
            fh.write(yaml.safe_dump(data))
    assert cli.main(["plan", "-c", path, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_profiles_torch_fp32_without_building_engine_stages(tmp_path, synthetic_video, capsys):
    """On the default engine the profile is torch's own: no ONNX stage is exported."""
    data = _plan_json(tmp_path, synthetic_video, capsys)
    assert data["engine"] == "torch-fp32"
    assert not os.path.isdir(str(tmp_path / "cache" / "onnx"))


@ORT
@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.slow  # exports or quantises a model: `make test` runs it, `make test-fast` does not
def test_plan_profiles_on_the_configured_engine_and_precision(tmp_path, synthetic_video, capsys, precision):
    """`cnnvideo plan` with engine onnxruntime profiles real ORT stages (exported into cache_dir/onnx), as a worker
    does, and says so; it used to profile torch fp32 whatever the config asked."""
    extra = {"engine": "onnxruntime", "precision": precision, "frames": 4,
             "int8": {"calibration_frames": 4, "calibration_stride": 2},
             "trainer": {"frames": 4}}  # the video's calibration starts after the trainer's frames
    data = _plan_json(tmp_path, synthetic_video, capsys, **extra)
    assert data["engine"] == "onnxruntime-%s" % precision
    assert [f for f in os.listdir(str(tmp_path / "cache" / "onnx")) if f.endswith(".onnx")]
    assert all(row["per_frame_s"] > 0 for row in data["schedulers"])


@ORT
def test_plan_names_an_onnx_models_own_weights(tmp_path, synthetic_video, capsys):
    """An ONNX model's weights are in its file: the plan names the file and its hash, not the unused `weights`
    key's default `random` (which it used to print for the trained person detector)."""
    from tests.onnx_export import export_torchvision

    model = tmp_path / "mnv2.onnx"
    export_torchvision("mobilenet_v2", str(model), (96, 128))
    data = _plan_json(tmp_path, synthetic_video, capsys, model=str(model), engine="onnxruntime")
    assert "ONNX file" in data["weights"] and str(model) in data["weights"] and "sha256" in data["weights"]
    assert "random" not in data["weights"]


def test_plan_takes_the_stored_overhead_of_each_workers_cap_else_the_devices(tmp_path):
    """`cnnvideo plan` reads what runs here stored (master.overheads): a worker at cap 0.1 gets the figures stored for
    that cap, one at a cap no run measured the device's, and none without either."""
    from cnnvideo import artifacts
    from cnnvideo.config_types import Config
    from cnnvideo.plan import overhead
    from cnnvideo.plan.costinputs import share_cpu
    from cnnvideo.plan.profiling import device_tag
    from cnnvideo.tools.planner import stored_overheads

    cfg = Config()
    cfg.cache_dir = str(tmp_path)
    cpus = [share_cpu(0.1), share_cpu(0.2)]
    assert stored_overheads(cfg, cpus) == [None, None]
    at_cap = overhead.Stored(1.1, 300.0, 100, 2, "at-0.1")
    overhead.save(artifacts.overhead_path(cfg, overhead.store_key(device_tag(), 0.01, 0.1)), at_cap)
    assert stored_overheads(cfg, cpus) == [at_cap, None]
    anywhere = overhead.Stored(1.2, 400.0, 100, 2, "device")
    overhead.save(artifacts.overhead_path(cfg, device_tag()), anywhere)
    assert stored_overheads(cfg, cpus) == [at_cap, anywhere]
