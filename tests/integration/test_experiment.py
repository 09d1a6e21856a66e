"""`cnnvideo experiment` end to end on a 2-point matrix (lbs vs optimal, 8 small frames, 3 workers from the
spec) with the local backend, so the runner, the summaries and the plots cannot rot without docker."""
import csv
import json
import os
import subprocess
import sys

import pytest
import yaml

from cnnvideo.tools import experiment

from .helpers import REPO, env

pytestmark = pytest.mark.slow


def test_two_point_matrix_local(tmp_path, synthetic_video):
    spec = {
        "name": "two-point",
        "backend": "local",
        "out": str(tmp_path / "results"),
        "work": str(tmp_path / "work"),
        "frames": 8,
        "workers": 3,
        "base": {"model": "alexnet", "weights": "random", "video": synthetic_video, "frame_size": [96, 128],
                 "profile_iters": 1, "group_size": 4, "trainer": {"frames": 16},
                 "cache_dir": str(tmp_path / "cache")},
        "matrix": {"scheduler": ["lbs", "optimal"], "in_flight": [3], "bandwidth": [3], "variant": ["delta"]},
    }
    path = tmp_path / "exp.yml"
    path.write_text(yaml.safe_dump(spec))
    proc = subprocess.run([sys.executable, "-m", "cnnvideo", "experiment", "-c", str(path)], cwd=REPO, env=env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:]
    out = tmp_path / "results" / "two-point"
    rows = list(csv.DictReader(open(str(out / "results.csv"))))
    assert [r["scheduler"] for r in rows] == ["lbs", "optimal"]
    assert "bytes_w2_m" in rows[0] and "pred_c2" in rows[0]  # the spec's 3 workers, not an assumed 2
    assert float(rows[0]["bytes_w1_w2"]) > 0  # the third worker's hop is in the table (lbs gives every worker work)
    for r in rows:
        assert int(r["completed"]) == 8 and float(r["fps"]) > 0 and float(r["pred_fps"]) > 0
        cuts = [int(c) for c in r["cuts"].split("-")]
        if len(cuts) == 4 and cuts[2] < cuts[3]:  # a chain may leave the third worker empty (w1 then reports;
            # optimal may also pick a pool plan: fewer cuts, one per stage)
            assert float(r["bytes_w1_w2"]) > 0
        assert float(r["max_abs_err"]) == 0.0
    for report in map(json.loads, open(str(out / "reports.jsonl"))):
        # delta mode sends less than dense float32 on every input hop that carried frames (a pool plan may feed
        # w1 and w2 and leave w0 to a later stage, so the CSV's m->w0 column can be empty)
        inputs = [h for h in report["hops"] if h["name"].startswith("m->") and h["bytes_dense"]]
        assert inputs and all(h["ratio"] < 1.0 for h in inputs), report["hops"]
    md = (out / "results.md").read_text()
    assert "cnnvideo experiment -c" in md and "Best scheduler vs lbs" in md and "Cost model accuracy" in md
    page = (out / "results.html").read_text()
    assert page.count("<svg") >= 4 and "Gantt" in page
    assert os.path.getsize(str(out / "reports.jsonl")) > 0


def test_expand_and_ids():
    spec = {"frames": 5, "variants": {"t2": {"mode": "delta", "delta": {"input_threshold": 2}}},
            "matrix": {"bandwidth": [1, 3], "scheduler": ["lbs"], "variant": ["full", "t2"]},
            "runs": [{"scheduler": "adaptive", "change": {"after_frame": 10, "link": "worker0<>worker1", "rate": 1}}]}
    runs = experiment.expand(spec)
    assert len(runs) == 5
    assert runs[0]["id"] == "lbs_full_m3_bw1"
    assert runs[-1]["id"] == "adaptive_delta_m3_bw3_chgworker0worker1-1-at10"
    cfg = experiment.run_config(spec, runs[1])
    assert cfg["delta"] == {"input_threshold": 2} and cfg["bandwidth"] == [1.0, 1.0] and cfg["frames"] == 5
    # the runner plans one trainer/worker configuration per group of runs with equal result-changing settings
    assert experiment.settings_key(spec, runs[0]) == experiment.settings_key(spec, runs[2])  # full, bw 1 and 3
    assert experiment.settings_key(spec, runs[1]) != experiment.settings_key(spec, runs[0])  # input threshold 2
    assert [r["variant"] for r in experiment.grouped(spec, runs)] == ["full", "full", "delta", "t2", "t2"]
