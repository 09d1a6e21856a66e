"""bench tradeoff: lossless points agree exactly, bytes fall as thresholds rise, answers meet their targets, and
the picture has one point per swept setting."""
import numpy as np

from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import build_model
from cnnvideo.tools.bench import tradeoff
from cnnvideo.video.frames import synthetic_frames


def _result():
    graph = LayerGraph.from_model(build_model("mobilenet_v2", "random", 0), (48, 64))
    frames = list(synthetic_frames(5, (48, 64), seed=2, noise=3))
    cuts = tradeoff.candidate_cuts(graph, "features.3.add,features.14.conv.3")
    result = {"model": "mobilenet_v2", "weights": "random", "video": "synthetic", "frames": 5, "frame_size": [48, 64]}
    result.update(tradeoff.sweep(graph, frames, cuts, input_thresholds=(0, 2, 8),
                                 settings=((0.0, False), (0.0, True), (0.5, False), (5.0, False))))
    result["answers"] = tradeoff.answers(result)
    return graph, frames, result


def test_sweep_points_and_answers():
    """Lossless points agree 100%; more threshold never sends more; every answer meets its agreement target."""
    graph, frames, result = _result()
    assert len(result["input"]) == 3 and len(result["later"]) == 2 * 4
    by_t = {p["input_threshold"]: p for p in result["input"]}
    assert by_t[0]["top1_agreement"] == 1.0
    assert by_t[8]["bytes_per_frame"] <= by_t[2]["bytes_per_frame"] <= by_t[0]["bytes_per_frame"]
    for name in ("features.3.add", "features.14.conv.3"):
        pts = {(p["threshold"], p["fp16"]): p for p in result["later"] if p["name"] == name}
        assert pts[(0.0, False)]["top1_agreement"] == 1.0
        assert pts[(5.0, False)]["bytes_per_frame"] <= pts[(0.5, False)]["bytes_per_frame"]
        assert pts[(0.0, True)]["bytes_per_frame"] < pts[(0.0, False)]["bytes_per_frame"]  # fp16 halves values
    lossless = result["answers"]["lossless"]
    assert lossless["m->w0"]["input_threshold"] == 0 and lossless["best_later"]["threshold"] == 0.0
    for target in tradeoff.TARGETS:
        pair = result["answers"]["agreement>=%g" % target]
        assert pair["m->w0"]["top1_agreement"] >= target and pair["best_later"]["top1_agreement"] >= target
        assert pair["best_later"]["ratio"] <= lossless["best_later"]["ratio"]
    both = tradeoff.combined(graph, frames, lossless["m->w0"], lossless["best_later"])
    assert both["top1_agreement"] == 1.0


def test_picture_has_a_point_per_setting():
    """The SVG draws every input and later point, and both target lines."""
    _, _, result = _result()
    svg = tradeoff.picture(result)
    assert svg.startswith("<svg") and svg.count("<circle") == 3 + 8 and svg.count("stroke-dasharray") == 4
    assert np.isfinite(len(tradeoff.summary_table(result)))
