"""torchvision's Faster R-CNN split by cnnvideo.model.detector (issue 22 item 5): its cuts run through the backbone
body, a chain of stages gives the unsplit graph's packed detections bit for bit and the same boxes as torchvision's
own model, the packed [rows, 6] tensor round-trips to frame-pixel detections with COCO labels, config accepts the
detectors with their weights, and `cnnvideo plan` lists their cuts and every scheduler's split.

The detectors have random weights (no checkpoint is reachable here); their ROI heads' score threshold is set to 0
where a test needs boxes (a random head scores every class about 1/91, under the default 0.05)."""
import argparse
import json

import numpy as np
import pytest
import torch

from cnnvideo import config as config_mod
from cnnvideo.model.detector import DetectorNet, pack_detections
from cnnvideo.model.engines.torch_engine import TorchStage
from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import DETECTOR_NAMES, load_model
from cnnvideo.results import detections as dt

pytestmark = pytest.mark.slow

FRAME = (120, 160)


def _frame(shape, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (1,) + tuple(shape) + (3,), dtype=np.uint8)


def _torchvision(model, frame):
    """torchvision's own unsplit forward of one uint8 (1, H, W, 3) frame: its {boxes, scores, labels}."""
    with torch.no_grad():
        out = model([torch.from_numpy(frame[0]).permute(2, 0, 1).to(torch.float32) / 255.0])[0]
    return {k: v.numpy() for k, v in out.items()}


def _chain(graph, cuts, frame):
    x = frame
    for a, b in zip(cuts[:-1], cuts[1:]):
        x = TorchStage(graph, a, b).run(x)
    return x


@pytest.fixture(scope="module")
def mobilenet():
    """fasterrcnn_mobilenet_v3_large_fpn from the zoo (random, seed 0), boxes kept at any score, and its graph."""
    model, info = load_model("fasterrcnn_mobilenet_v3_large_fpn")
    assert not info.trained
    model.roi_heads.score_thresh = 0.0
    return model, LayerGraph.from_model(model, FRAME)


def test_mobilenet_cuts_run_through_the_backbone_body_and_end_in_packed_detections(mobilenet):
    """The cuts are the frame, preprocess, the resized frame (800 px as torchvision resizes it), the body's blocks up
    to its first FPN tap (features 13), then the head's packed [100, 6] float32 output."""
    _, graph = mobilenet
    names = [c.name for c in graph.cuts]
    assert names[:3] == ["input", "preprocess", "resize"]
    assert graph.cuts[2].shape == (1, 3, 800, 1088)
    body = [n for n in names if n.startswith("body.")]
    assert len(body) >= 40 and body[-1].startswith("body.13.")
    assert names[-1] == "head" and graph.cuts[-1].shape == (100, 6) and graph.cuts[-1].dtype == "float32"
    assert graph.torch_only(len(names) - 2, len(names) - 1) and not graph.torch_only(0, len(names) - 2)


def test_mobilenet_split_at_several_cuts_equals_unsplit_and_torchvision(mobilenet):
    """Chains of torch stages cut inside the body give the unsplit graph's packed output within 1e-5 (in fact bit
    for bit), and that output is torchvision's own forward: the same boxes (frame pixels), scores and labels."""
    model, graph = mobilenet
    frame = _frame(FRAME)
    last = len(graph.cuts) - 1
    whole = TorchStage(graph, 0, last).run(frame)
    ref = _torchvision(model, frame)
    n = len(ref["scores"])
    assert n == 100  # score threshold 0: a full table, so the comparison covers real rows
    np.testing.assert_allclose(whole[:n, :4], ref["boxes"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(whole[:n, 4], ref["scores"], atol=1e-6, rtol=0)
    assert np.array_equal(whole[:n, 5].astype(np.int64), ref["labels"])
    assert (whole[:, [0, 2]] <= FRAME[1]).all() and (whole[:, [1, 3]] <= FRAME[0]).all()
    body = [c.index for c in graph.cuts if c.name.startswith("body.")]
    for cuts in ([0, body[0], last], [0, 2, body[len(body) // 2], last], [0, body[5], body[-1], last]):
        assert np.abs(_chain(graph, cuts, frame) - whole).max() <= 1e-5, cuts


def test_resnet50_split_inside_layer1_equals_unsplit_and_torchvision():
    """fasterrcnn_resnet50_fpn (random, resized to 64 px instead of 800 to keep it cheap): cuts run through its stem
    and layer1 (its first FPN tap), and a 3-stage chain matches the unsplit graph and torchvision within 1e-5."""
    model, _ = load_model("fasterrcnn_resnet50_fpn")
    model.transform.min_size, model.transform.max_size = (64,), 96
    model.roi_heads.score_thresh = 0.0
    graph = LayerGraph.from_model(model, (48, 64))
    names = [c.name for c in graph.cuts]
    assert "body.maxpool" in names and any(n.startswith("body.layer1.") for n in names)
    assert not any(n.startswith(("body.layer2", "body.layer3", "body.layer4")) for n in names)
    frame = _frame((48, 64), seed=1)
    last = len(graph.cuts) - 1
    whole = TorchStage(graph, 0, last).run(frame)
    ref = _torchvision(model, frame)
    n = len(ref["scores"])
    assert n > 0
    np.testing.assert_allclose(whole[:n, :4], ref["boxes"], atol=1e-5, rtol=0)
    assert np.array_equal(whole[:n, 5].astype(np.int64), ref["labels"])
    mid = names.index("body.maxpool")
    assert np.abs(_chain(graph, [0, mid, last - 1, last], frame) - whole).max() <= 1e-5


def test_packed_detections_round_trip_with_padding_and_full_tables():
    """pack_detections pads with zero rows and unpack_packed returns exactly the detections (padded or not, with
    or without a batch axis); extra rows are dropped; a wrong shape is a one-line ValueError naming it."""
    boxes = torch.tensor([[1.0, 2.0, 30.0, 40.0], [5.0, 6.0, 7.5, 8.5], [0.0, 0.0, 10.0, 10.0]])
    scores = torch.tensor([0.9, 0.6, 0.07])
    labels = torch.tensor([1, 3, 90])
    for rows in (5, 3):
        packed = pack_detections(boxes, scores, labels, rows).numpy()
        assert packed.shape == (rows, 6) and packed.dtype == np.float32
        assert not packed[3:].any()
        for arr in (packed, packed[None]):
            out = dt.unpack_packed(arr)
            np.testing.assert_array_equal(out["boxes"], boxes.numpy())
            np.testing.assert_array_equal(out["scores"], scores.numpy())
            assert out["labels"].tolist() == [1, 3, 90]
    assert dt.unpack_packed(pack_detections(boxes, scores, labels, 2).numpy())["labels"].tolist() == [1, 3]
    assert len(dt.unpack_packed(np.zeros((100, 6), np.float32))["scores"]) == 0
    with pytest.raises(ValueError, match=r"\[rows, 6\].*\(100, 4\)"):
        dt.unpack_packed(np.zeros((100, 4), np.float32))


def test_master_decodes_packed_output_into_coco_labels_in_frame_pixels():
    """The master's decoder reads a packed output as detections with COCO names (1 = person, 3 = car), keeps
    scores >= the threshold and boxes in frame pixels (clipped to the frame), so two equal outputs agree (F1 1)."""
    from cnnvideo.master.detecting import MasterDetections

    packed = pack_detections(torch.tensor([[10.0, 20.0, 50.0, 100.0], [100.0, 0.0, 170.0, 60.0],
                                           [0.0, 0.0, 5.0, 5.0]]),
                             torch.tensor([0.95, 0.8, 0.2]), torch.tensor([1, 3, 1]), 100).numpy()
    md = MasterDetections.for_config("fasterrcnn_mobilenet_v3_large_fpn", None, FRAME)
    dets = md.frame(0, packed)
    assert [(d.label, round(d.score, 2)) for d in dets] == [("person", 0.95), ("car", 0.8)]
    assert dets[0].box == (10.0, 20.0, 50.0, 100.0) and dets[1].box == (100.0, 0.0, 160.0, 60.0)
    assert md.check(packed, packed.copy()) == (1.0, 1.0, 1.0)
    assert md.report()["people_per_frame"] == [[0, 1]]


def _cfg(**over):
    data = {"model": "fasterrcnn_mobilenet_v3_large_fpn", "weights": "random", "video": "none.avi",
            "frame_size": [60, 80]}
    data.update(over)
    return config_mod.from_dict(data, check_files=False)


def test_config_accepts_the_detectors_with_any_weights_and_checks_their_labels():
    """Each zoo detector name is a registered packed detector and validates with weights random and imagenet
    (torchvision's COCO weights) and takes `detect:` settings; a label COCO does not have is refused naming it."""
    assert all(dt.is_detector(n) and dt.DETECTORS[n].packed for n in DETECTOR_NAMES)  # the two lists agree
    for name in DETECTOR_NAMES:
        for weights in ("random", "imagenet"):
            assert _cfg(model=name, weights=weights).model == name
    assert _cfg(detect={"labels": ["person", "car"], "score_threshold": 0.3}).detect.labels == ["person", "car"]
    with pytest.raises(config_mod.ConfigError, match="no label 'unicorn'"):
        _cfg(detect={"labels": ["unicorn"]})


def test_plan_lists_the_cuts_and_every_schedulers_split(tmp_path, capsys, synthetic_video):
    """`cnnvideo plan --json` on the 320 px sibling (cheapest; the same DetectorNet) lists the detector's cuts with
    their dense bytes, and every scheduler's split covers all layers once, in order, over two workers (a chain) or
    over its stages (a pool plan)."""
    from cnnvideo.plan.schedulers import SCHEDULERS
    from tools import planner

    path = tmp_path / "c.yml"
    path.write_text(json.dumps({
        "model": "fasterrcnn_mobilenet_v3_large_320_fpn", "video": synthetic_video, "frame_size": [60, 80],
        "profile_iters": 1, "cache_dir": str(tmp_path / "cache"),
        "cluster": {"trainer": "127.0.0.1:1", "workers": ["127.0.0.1:2", "127.0.0.1:3"]}}))
    assert planner.run(argparse.Namespace(config=str(path), json=True)) == 0
    out = json.loads(capsys.readouterr().out)
    names = [c["name"] for c in out["cuts"]]
    assert names[:3] == ["input", "preprocess", "resize"] and names[-1] == "head"
    assert sum(n.startswith("body.") for n in names) >= 40
    assert out["cuts"][-1]["bytes_dense"] == 100 * 6 * 4
    assert [r["scheduler"] for r in out["schedulers"]] == [s for s in SCHEDULERS if s != "fixed"]  # fixed: no plan
    for row in out["schedulers"]:
        layers = [name for s in row["split"] for name in s["layers"]]
        stages = len(row["groups"]) if "groups" in row else 2
        assert len(row["split"]) == stages and layers[0] == "preprocess" and layers[-1] == "head", row["scheduler"]
        assert len(layers) == len(set(layers)) == 184, row["scheduler"]


def test_detector_net_keeps_torchvision_modules():
    """DetectorNet re-arranges the detector's own modules (no copies): its state holds the very same tensors."""
    model, _ = load_model("fasterrcnn_mobilenet_v3_large_320_fpn")
    net = DetectorNet(model, (60, 80))
    assert net.head.rpn is model.rpn and net.head.roi_heads is model.roi_heads and net.head.fpn is model.backbone.fpn
    assert net.body["0"] is model.backbone.body["0"]


def test_onnxruntime_engine_exports_the_body_and_keeps_the_heads_on_torch(tmp_path):
    """With engine onnxruntime (even on_error: stop) a body stage runs in ORT within 1e-5 of torch, and the stage
    holding the heads runs on torch with a note saying why (their ONNX export is not exact) instead of failing;
    export_stage refuses it with that reason."""
    from cnnvideo.model.engines.base import EngineError, EngineSpec, ort_available
    from cnnvideo.model.engines.factory import StageFactory
    from cnnvideo.model.engines.ort_engine import export_stage

    if not ort_available()[0]:
        pytest.skip("onnxruntime not installed")
    model, _ = load_model("fasterrcnn_mobilenet_v3_large_320_fpn")
    graph = LayerGraph.from_model(model, (60, 80))
    last, mid = len(graph.cuts) - 1, [c.index for c in graph.cuts if c.name.startswith("body.")][3]
    factory = StageFactory(graph, EngineSpec("onnxruntime", "fp32", 1, "stop"), str(tmp_path), "frcnn test")
    frame = _frame((60, 80))
    body, heads = factory.stage(0, mid), factory.stage(mid, last)
    assert (body.engine, heads.engine) == ("onnxruntime", "torch")
    assert np.abs(body.run(frame) - TorchStage(graph, 0, mid).run(frame)).max() <= 1e-5
    assert heads.run(body.run(frame)).shape == (100, 6)
    assert len(factory.notes) == 1 and "holds Head" in factory.notes[0]
    with pytest.raises(EngineError, match="cannot be exported to ONNX: it holds Head"):
        export_stage(graph, mid, last)
