"""torchvision's Faster R-CNN (MobileNetV3-Large FPN) in a real 2-worker `cnnvideo local` run: the backbone body is
split between the workers, the heads run on the last one, and the master's check finds the split run exact
against the unsplit torch model in fp32 (issue 22 item 5)."""
import json
import os

import pytest

from tests.integration.helpers import REPO, base_config, hop, run_local

pytestmark = pytest.mark.slow

MODEL = "fasterrcnn_mobilenet_v3_large_fpn"
PERSON = 1


def _video():
    path = os.path.join(REPO, "media", "vtest.avi")
    if not os.path.isfile(path):
        pytest.skip("media/vtest.avi missing (make video)")
    return path


def _weights_finding_people(path):
    """A state-dict file of the random (seed 0) detector whose class head leans to `person` (bias +5): random
    weights score every class about 1/91, under the heads' 0.05, so they find nothing; these find boxes on every
    frame, which the check then compares box by box. It also exercises `weights: <file>`."""
    import torch

    from cnnvideo.model.zoo import load_model

    model, _ = load_model(MODEL, "random", 0)
    state = model.state_dict()
    state["roi_heads.box_predictor.cls_score.bias"][PERSON] += 5.0
    torch.save(state, path)
    return path


def test_two_worker_run_is_exact_and_splits_the_backbone(tmp_path):
    """5 frames of vtest.avi at 120x160 over 2 workers (lbs: the body is split, the heads on worker 1), lossless
    fp32 delta: every frame completes, the raw output matches the unsplit model exactly (max abs err 0), every
    frame holds people and each of their boxes matches the unsplit model's (F1 1.0, all boxes), results.jsonl
    carries them in frame pixels."""
    weights = _weights_finding_people(str(tmp_path / "frcnn-person.pth"))
    data = base_config(_video(), str(tmp_path / "cache"), model=MODEL, weights=weights, frame_size=[120, 160],
                       frames=5, in_flight=2, scheduler="lbs", trainer={"frames": 6},
                       cluster={"trainer": "127.0.0.1:1", "workers": ["127.0.0.1:2", "127.0.0.1:3"]})
    proc, report, out = run_local(tmp_path, data, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["completed"] == 5 and report["model"] == MODEL
    assert "frcnn-person.pth" in report["weights_used"]
    first, second = report["plan"]
    assert first[0] == "preprocess" and first[-1].startswith("body.") and second[-1] == "head", report["plan"]
    assert hop(report, "w0->w1")["bytes_sent"] > 0
    assert report["max_abs_err"] == 0.0
    agreement = report["detection_agreement"]
    assert agreement["frames"] == 5 and agreement["f1"] == 1.0 and agreement["frames_same"] == 5
    assert agreement["reference_boxes"] == agreement["split_boxes"] == agreement["matched"] > 0
    assert all(n > 0 for _, n in report["people_per_frame"]), report["people_per_frame"]
    with open(os.path.join(out, "results.jsonl")) as fh:
        boxes = [b for line in fh if line.strip() for b in json.loads(line).get("boxes", [])]
    assert boxes and all(b["label"] == "person" and b["score"] >= 0.5 for b in boxes)
    assert all(0 <= b["box"][0] < b["box"][2] <= 160 and 0 <= b["box"][1] < b["box"][3] <= 120 for b in boxes)
