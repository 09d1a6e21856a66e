"""`engine: auto` end to end: `cnnvideo local` (trainer, 2 workers, master as real processes) on AlexNet (random
weights); each worker profiles torch and ONNX Runtime, and report.json says per stage which engine ran and the
profiled times it was chosen by, consistent with the profiles the workers cached."""
from __future__ import annotations

import glob
import os
import re

import numpy as np
import pytest

from cnnvideo.model import engines

from .helpers import base_config, run_local

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not engines.ort_available()[0], reason="onnxruntime is not installed")]
NOTE = re.compile(r"auto: stage (\d+)\.\.(\d+) on (\S+) \(profiled (.*)\)")


def _cached_seconds(cache: str, worker: int, label: str) -> np.ndarray:
    """The segment seconds of worker `worker`'s cached profile on engine `label` (one file per worker, engine)."""
    found = [p for p in glob.glob(os.path.join(cache, "costs", "*.npz")) if "-w%d-" % worker in p
             and p.endswith("-%s.npz" % label)]
    assert len(found) == 1, (worker, label, os.listdir(os.path.join(cache, "costs")))
    with np.load(found[0]) as data:
        return data["seconds"]


def test_engine_auto_runs_each_stage_on_its_fastest_profiled_engine(tmp_path, synthetic_video):
    """A 2-worker lbs run (both compute) completes within 1e-4 of torch; for each worker's stage the report's note
    names the engine that ran, that engine has the lowest of the times compared, and those times are the sums of
    the stage's segments in the worker's own cached profiles of torch and ORT."""
    cache = str(tmp_path / "cache")
    data = base_config(synthetic_video, cache, engine="auto", frames=8, scheduler="lbs", trainer={"frames": 12})
    proc, report, _ = run_local(tmp_path, data, name="auto")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["completed"] == report["frames"] == 8 and report["lost"] == 0
    assert report["max_abs_err"] <= 1e-4 and report["engine"] == "auto"
    cuts = report["cuts"]
    for w, e in enumerate(report["engines"]):
        notes = [NOTE.search(n) for n in e["notes"]]
        notes = [m for m in notes if m and (int(m.group(1)), int(m.group(2))) == (cuts[w], cuts[w + 1])]
        assert len(notes) == 1, (w, cuts, e)
        start, end, chosen, compared = notes[0].groups()
        times = {label: float(t) for label, t in re.findall(r"(\S+) ([\d.]+) s", compared)}
        assert set(times) == {"torch-fp32", "onnxruntime-fp32"} and chosen == min(times, key=times.get)
        assert e["ran"] == [chosen], e
        for label, t in times.items():
            want = float(_cached_seconds(cache, w, label)[int(start):int(end)].sum())
            assert t == pytest.approx(want, abs=1e-4), (w, label, t, want)
