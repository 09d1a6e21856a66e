"""A test with a real answer: a static-camera clip of darknet's dog.jpg (sensor noise plus one small moving patch)
through a 3-worker split of trained MobileNetV2 in real `cnnvideo local` processes. Every frame's top-1, as the
master reports it (report.json and results.jsonl), is the unsplit model's top-1 on the photo: a dog class."""
import json
import os

import pytest

from cnnvideo.results import labels
from cnnvideo.video.frames import photo_clip, read_image, write_video

from .helpers import base_config, run_local

pytestmark = pytest.mark.slow
SIZE = (240, 320)  # the photo's 3:4 aspect (576x768)
FRAMES = 12


def _photo_top1(photo):
    from cnnvideo.model.engines.torch_engine import TorchStage
    from cnnvideo.model.graph import LayerGraph
    from cnnvideo.model.zoo import build_model

    graph = LayerGraph.from_model(build_model("mobilenet_v2", "imagenet"), SIZE)
    return labels.top1(TorchStage(graph, 0, len(graph.cuts) - 1).run(photo))


def test_dog_clip_through_three_workers_keeps_the_photo_class(tmp_path, trained_weights, dog_photo):
    """12 noisy frames with a moving patch, lbs over 3 workers (each runs a stage): every frame's top-1 equals the
    unsplit model's on the clean photo (a dog, ImageNet 151-268), top1_agreement with the master's check is 1.0,
    and results.jsonl has one line per frame with its top-5, plan and bytes per hop."""
    photo = read_image(dog_photo, SIZE)
    expected = _photo_top1(photo)
    assert 151 <= expected <= 268, labels.name(expected)
    video = write_video(str(tmp_path / "dog.avi"), photo_clip(photo, FRAMES, seed=3, noise=2.0, patch=12))
    cfg = base_config(video, str(tmp_path / "cache"), model="mobilenet_v2", weights="imagenet",
                      frame_size=list(SIZE), frames=FRAMES, scheduler="lbs", bandwidth=[3.0],
                      cluster={"trainer": "127.0.0.1:1", "workers": ["127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"]},
                      trainer={"frames": 6})
    proc, report, out = run_local(tmp_path, cfg, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "IMAGENET1K_V1" in proc.stderr and trained_weights in proc.stderr  # it says which weights it used
    assert report["completed"] == FRAMES and len(report["workers"]) == 3
    assert all(len(layers) > 0 for layers in report["plan"]), report["plan"]  # a real 3-way split
    tops = {p["frame"]: p["top5"] for p in report["per_frame"]}
    assert sorted(tops) == list(range(FRAMES))
    for f, top5 in tops.items():
        assert top5[0][0] == expected, (f, top5)
        assert top5[0][1] == labels.name(expected) and len(top5) == 5
    assert report["top1_agreement"] == 1.0 and report["top5_overlap"] > 0.9
    with open(os.path.join(out, "results.jsonl")) as fh:
        lines = [json.loads(line) for line in fh]
    assert sorted(r["frame"] for r in lines) == list(range(FRAMES))
    for r in lines:
        assert r["top5"][0][0] == expected and r["result_time"] >= r["capture_time"]
        assert len(r["cuts"]) == 4 and r["bytes"]["m->w0"] > 0 and r["bytes"]["w2->m"] > 0
    html = open(os.path.join(out, "report.html")).read()
    assert html.count('class="thumb"') >= 1 and labels.name(expected) in html
