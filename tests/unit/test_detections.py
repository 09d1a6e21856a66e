"""Detections end to end (cnnvideo.results.detections and the master's parts): the real person detector's outputs
decoded into boxes in frame pixels, split-vs-unsplit agreement, counts, drawing, the report and live pages, and
the settings refused for the wrong kind of model. No mocks: the ONNX model runs in ONNX Runtime."""
import json
import os
import re
import sys

import numpy as np
import pytest

from cnnvideo.config import Detect
from cnnvideo.errors import ConfigError
from cnnvideo.events.types import Detection
from cnnvideo.master.detecting import MasterDetections
from cnnvideo.master.results_log import ResultsLog
from cnnvideo.master.thumbs import Thumbnails
from cnnvideo.master.view import ViewState
from cnnvideo.results import detections as dt
from cnnvideo.results import report as rpt
from cnnvideo.results.liveview import LiveView
from cnnvideo.video.frames import photo_clip, read_frames, read_image, write_video

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import browser  # noqa: E402

ort = pytest.importorskip("onnxruntime")
cv2 = pytest.importorskip("cv2")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PHOTOS = os.path.join(ROOT, "media", "photos")
FRAME = (480, 720)  # the default config frame_size (height, width)
SPEC = dt.DETECTORS["person-ssdlite"]


@pytest.fixture(scope="module")
def detector(person_detector):
    """The real model: a function RGB frame -> {output name: array}."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(person_detector, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda rgb: dict(zip(names, session.run(None, {"image_tensor:0": np.ascontiguousarray(rgb)[None]})))


def photo(name):
    path = os.path.join(PHOTOS, name)
    if not os.path.isfile(path):
        pytest.skip("%s not present: run scripts/fetch_photos.sh" % path)
    return read_image(path, FRAME)


def det(label, score, box):
    return Detection(label, score, box)


def test_person_photo_gives_one_person_box_in_frame_pixels(detector):
    """darknet's person.jpg at the 480x720 frame size decodes (threshold 0.5) into exactly one person whose box
    is in pixels of that frame around the person (x ~ 0.29-0.43 of the width, y ~ 0.24-0.90 of the height)."""
    dets = dt.decode(detector(photo("person.jpg")), SPEC, FRAME[1], FRAME[0])
    assert len(dets) == 1 and dets[0].label == "person" and dets[0].score >= 0.9, dets
    x1, y1, x2, y2 = dets[0].box
    h, w = FRAME
    assert abs(x1 - 0.29 * w) < 0.03 * w and abs(x2 - 0.43 * w) < 0.03 * w, dets[0].box
    assert abs(y1 - 0.24 * h) < 0.03 * h and abs(y2 - 0.90 * h) < 0.03 * h, dets[0].box


def test_dog_photo_gives_no_detection_at_half(detector):
    """dog.jpg (a dog, a bicycle, a truck; nobody) decodes into no detection at the default threshold 0.5."""
    assert dt.decode(detector(photo("dog.jpg")), SPEC, FRAME[1], FRAME[0]) == []


def test_identical_runs_agree_with_f1_one(detector):
    """Lossless: the same outputs on both sides (person.jpg, dog.jpg and a copy of the model's outputs) give
    precision = recall = F1 = 1.0 with every box matched at IoU 1, also when a frame has no box."""
    agree = dt.DetectionAgreement()
    for name in ("person.jpg", "dog.jpg"):
        out = detector(photo(name))
        same = {k: v.copy() for k, v in out.items()}
        assert agree.add(dt.decode(out, SPEC, 720, 480), dt.decode(same, SPEC, 720, 480)) == (1.0, 1.0, 1.0)
    s = agree.summary()
    assert (s["precision"], s["recall"], s["f1"], s["frames_same"], s["matched"]) == (1.0, 1.0, 1.0, 2, 1)
    assert s["mean_iou"] == 1.0 and s["max_score_diff"] == 0.0
    assert dt.DetectionAgreement().summary()["f1"] is None  # nothing checked: no figure
    # the master's side takes a last stage's outputs as a list in output order as well as a mapping
    out = detector(photo("person.jpg"))
    md = MasterDetections.for_config("person-ssdlite", {"score_threshold": 0.5}, FRAME, output_names=list(out))
    assert md.check(list(out.values()), out) == (1.0, 1.0, 1.0)
    assert md.report()["detection_agreement"]["f1"] == 1.0
    assert MasterDetections.for_config("alexnet", None, FRAME) is None


def test_one_missed_and_one_extra_box_give_the_right_precision_and_recall():
    """Hand-made frames: the reference has 3 people, the split run finds 2 of them (one shifted a little, IoU
    > 0.5) plus one extra box nowhere near, and a box with a different label at the third person's place does
    not match: precision 2/4, recall 2/3, F1 4/7; a second identical frame adds 2/2 and 2/2."""
    ref = [det("person", 0.9, (10, 10, 50, 110)), det("person", 0.8, (100, 10, 140, 110)),
           det("person", 0.7, (200, 10, 240, 110))]
    split = [det("person", 0.88, (12, 10, 52, 112)), det("person", 0.81, (100, 10, 140, 110)),
             det("person", 0.6, (400, 300, 440, 400)), det("dog", 0.7, (200, 10, 240, 110))]
    pairs = dt.match(split, ref)
    assert sorted((i, j) for i, j, _ in pairs) == [(0, 0), (1, 1)]
    agree = dt.DetectionAgreement()
    p, r, f1 = agree.add(split, ref)
    assert (p, r) == (0.5, pytest.approx(2 / 3)) and f1 == pytest.approx(4 / 7)
    agree.add(ref[:2], ref[:2])
    s = agree.summary()
    assert (s["split_boxes"], s["reference_boxes"], s["matched"]) == (6, 5, 4)
    assert s["precision"] == pytest.approx(4 / 6, abs=1e-6) and s["recall"] == pytest.approx(4 / 5, abs=1e-6)
    assert s["f1"] == pytest.approx(2 * (4 / 6) * (4 / 5) / (4 / 6 + 4 / 5), abs=1e-6)


def test_greedy_matching_goes_by_score():
    """Two split boxes overlap one reference box: the higher-scoring one takes it even if listed second."""
    ref = [det("person", 0.9, (0, 0, 100, 100))]
    split = [det("person", 0.3, (0, 0, 100, 100)), det("person", 0.95, (5, 5, 100, 100))]
    assert [(i, j) for i, j, _ in dt.match(split, ref)] == [(1, 0)]


def test_moving_patch_clip_keeps_the_person_in_every_frame(detector, tmp_path):
    """person.jpg as a static-camera clip (sensor noise, a grey square moving along the bottom edge, below the
    person), written to an MJPG AVI and read back at the frame size: every frame has a person >= 0.5 and the
    master's decoder counts one person per frame."""
    still = photo("person.jpg")
    path = write_video(str(tmp_path / "person.avi"), photo_clip(still, 16, seed=3, patch=24))
    md = MasterDetections.for_config("person-ssdlite", None, FRAME)
    n = 0
    for f, rgb in enumerate(read_frames(path, FRAME, loop=False)):
        dets = md.frame(f, detector(rgb))
        assert dets and dets[0].label == "person" and dets[0].score >= 0.5, (f, dets)
        n += 1
    assert n == 16
    rep = md.report()
    assert rep["detections"]["person"]["frames_with"] == 16 and rep["people_per_frame"][0] == [0, 1]


def test_decode_torchvision_boxes_clips_filters_and_counts():
    """An `xyxy_pixels` detector (torchvision style, boxes in pixels of a 320x240 input) decodes into the
    640x480 frame scaled by 2, clipped to it; the count output limits the rows, the label filter and threshold
    apply, a box wholly outside is dropped, and results come best score first."""
    spec = dt.DetectorSpec("tv", boxes="boxes", scores="scores", classes="labels", count="n",
                           box_format="xyxy_pixels", labels={1: "person", 3: "car"}, input_size=(240, 320))
    out = {"boxes": np.array([[10, 20, 30, 60], [-5, 100, 400, 250], [0, 0, 5, 5], [330, 10, 360, 20],
                              [1, 1, 2, 2]], np.float32),
           "scores": np.array([0.6, 0.9, 0.4, 0.8, 0.99], np.float32),
           "labels": np.array([1, 3, 1, 1, 1], np.int64), "n": np.array([4])}
    dets = dt.decode(out, spec, 640, 480)
    assert [(d.label, round(d.score, 2), d.box) for d in dets] == [
        ("car", 0.9, (0.0, 200.0, 640.0, 480.0)), ("person", 0.6, (20.0, 40.0, 60.0, 120.0))]
    only = dt.decode(out, dt.with_settings(spec, {"labels": ["person"], "score_threshold": 0.3}), 640, 480)
    assert [d.label for d in only] == ["person", "person"]
    with pytest.raises(ValueError, match="output 'scores' missing"):
        dt.decode({"boxes": out["boxes"], "labels": out["labels"], "n": out["n"]}, spec, 640, 480)


def test_raw_error_is_blind_to_tied_rows_swapping_but_not_to_a_moved_box():
    """The online check's raw error for a detector: two rows that swap places (NMS ordering two boxes whose
    scores tie to 1e-7, as a 3-worker CI run did at rows 88 and 89) read as their tiny float difference, not as
    the 0.53 an element-wise diff gave; a box that really moved, a changed count or another class still count
    in full."""
    spec = dt.spec_for("person-ssdlite")
    rng = np.random.default_rng(0)
    ref = {spec.boxes: rng.random((1, 100, 4), np.float32), spec.scores: np.sort(rng.random((1, 100)))[:, ::-1],
           spec.classes: np.ones((1, 100), np.float32), spec.count: np.array([100.0], np.float32)}
    split = {k: v.copy() for k, v in ref.items()}
    split[spec.boxes][0, [88, 89]] = ref[spec.boxes][0, [89, 88]] + 1e-7
    split[spec.scores][0, [88, 89]] = ref[spec.scores][0, [89, 88]]
    assert np.abs(split[spec.boxes] - ref[spec.boxes]).max() > 0.01  # what the element-wise diff saw
    assert dt.raw_error(split, ref, spec) < 1e-6
    moved = {k: v.copy() for k, v in ref.items()}
    moved[spec.boxes][0, 5, 1] += 0.25
    assert dt.raw_error(moved, ref, spec) == pytest.approx(0.25, abs=1e-6)
    counted = {k: v.copy() for k, v in ref.items()}
    counted[spec.count] = np.array([99.0], np.float32)
    assert dt.raw_error(counted, ref, spec) == pytest.approx(1.0)
    relabelled = {k: v.copy() for k, v in ref.items()}
    relabelled[spec.classes][0, 3] = 2.0
    assert dt.raw_error(relabelled, ref, spec) == pytest.approx(1.0)


def test_counts_and_caption():
    """DetectionCounts totals boxes, frames with one and the most in a frame per label; captions pluralise."""
    counts = dt.DetectionCounts()
    p = det("person", 0.9, (0, 0, 1, 1))
    for frame in ([p, p, p], [], [p, det("car", 0.7, (0, 0, 2, 2))]):
        counts.add(frame)
    assert counts.summary() == {"car": {"boxes": 1, "frames_with": 1, "max_per_frame": 1},
                                "person": {"boxes": 4, "frames_with": 2, "max_per_frame": 3}}
    assert dt.caption([p, p, p]) == "3 people" and dt.caption([p]) == "1 person" and dt.caption([]) == "0 people"
    assert dt.caption([p, det("car", 0.7, (0, 0, 2, 2))]) == "1 person, 1 car"


def test_drawn_box_edge_has_the_box_colour():
    """draw_boxes returns a copy (the frame is untouched) whose pixel on the box edge is the box green, with the
    label text above the box."""
    rgb = np.full((120, 160, 3), 90, np.uint8)
    out = dt.draw_boxes(rgb, [det("person", 0.93, (40, 50, 100, 110))])
    assert (rgb == 90).all()
    assert tuple(out[80, 40]) == dt.BOX_COLOUR_RGB and tuple(out[50, 70]) == dt.BOX_COLOUR_RGB
    assert tuple(out[80, 70]) == (90, 90, 90)  # inside stays the frame
    assert (out[30:48, 40:100] != 90).any()  # the label above the box


def test_results_log_thumbnails_and_report_page_escape_model_labels(tmp_path):
    """A detector run's results.jsonl lines carry `boxes`; the thumbnails show boxes with a "N people" caption;
    report.html escapes a label from a model file (`<script>`) in its summary and captions."""
    log = ResultsLog(str(tmp_path / "results.jsonl"))
    dets = [det("person", 0.91234, (10.04, 20, 50, 90)), det("<script>x</script>", 0.6, (60, 10, 90, 40))]
    for f in (0, 1):
        log.sent(f, [0, 1], 100.0 + f, 10)
        log.result(f, 100.5 + f, [], "w0->m", 5, boxes=dets if f == 0 else [])
    log.close()
    lines = [json.loads(x) for x in open(str(tmp_path / "results.jsonl"))]
    assert lines[0]["boxes"][0] == {"label": "person", "score": 0.9123, "box": [10.0, 20.0, 50.0, 90.0]}
    assert lines[1]["boxes"] == [] and list(lines[0]).index("boxes") == list(lines[0]).index("top5") + 1

    th = Thumbnails()
    rgb = np.full((100, 128, 3), 90, np.uint8)
    th.add(0, rgb, dets)
    th.add(1, rgb, [])
    records = [rpt.FrameRecord(f, [0, 1], done_at=1.0) for f in (0, 1)]
    strip = th.pick(records)
    assert [s[2:] for s in strip] == [("1 person, 1 <script>x</script>", None), ("0 people", None)]
    counts = dt.DetectionCounts()
    counts.add(dets)
    report = {"model": "person-ssdlite", "detections": counts.summary(),
              "detection_agreement": dt.DetectionAgreement().summary(), "hops": []}
    page = open(rpt.write_html(report, records, [], str(tmp_path / "report.html"), ["m"], thumbs=strip)).read()
    assert "<script>x" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    assert "1 person, 1 &lt;script&gt;" in page and "0 people" in page


def test_live_page_shows_the_person_count_and_escapes_labels():
    """The live view's state carries the latest frame's counts: headless chromium shows the person count and a
    model label `<img ...>` as text (no element made from it); the served frame has the box drawn on it."""
    vs = ViewState(["m", "w0"])
    dets = [det("person", 0.9, (20, 30, 80, 110)), det("person", 0.8, (100, 30, 150, 110)),
            det("<img src=x id=evil>", 0.7, (2, 2, 6, 6))]
    vs.note_result(7, 0.2, dt.caption(dets), 1.0, detections=dt.label_counts(dets))
    view = LiveView(0, lambda: vs.state(0.0, {"processed": 8}, [], dict))
    view.start()
    try:
        view.set_frame(np.full((120, 160, 3), 90, np.uint8), dets)
        jpeg = view.frame_jpeg()
        shown = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
        edge = shown[90, 20].astype(int)  # on the left edge of the first box, below its label: green (JPEG)
        assert edge[1] > 200 and edge[0] < 60 and edge[2] < 60, edge
        dom = browser.dump_dom("http://127.0.0.1:%d/" % view.port)
    finally:
        view.stop()
    assert re.search(r'id="people"[^>]*>2<', dom), dom[:3000]
    assert 'id="evil"' not in dom and "&lt;img src=x id=evil&gt;: 1" in dom
    assert re.search(r'id="result"[^>]*>2 people, 1 &lt;img', dom)


def test_check_settings_refuses_the_wrong_kind_of_setting():
    """Detector settings on a classifier, classifier settings on a detector, a bad threshold, an unknown label
    and an unknown detect key are each one-line ConfigErrors naming the key; fitting settings pass."""
    cases = [
        (("alexnet", False, {"score_threshold": 0.4}), "'detect.score_threshold' is a detector setting"),
        (("alexnet", False, Detect(labels=["person"])), "'detect.labels' is a detector setting"),
        (("person-ssdlite", True, None, {"weights": "imagenet"}), "'weights' ('imagenet') is a classifier"),
        (("person-ssdlite", True, {"score_threshold": 1.5}), "'detect.score_threshold' must be a number in 0..1"),
        (("person-ssdlite", True, {"labels": ["dog"]}), "'detect.labels': model 'person-ssdlite' has no label"),
        (("person-ssdlite", True, {"labels": "person"}), "'detect.labels' must be a list"),
        (("person-ssdlite", True, {"treshold": 0.3}), "unknown config key 'detect.treshold'"),
    ]
    for args, message in cases:
        with pytest.raises(ConfigError, match=re.escape(message)) as err:
            dt.check_settings(*args)
        assert "\n" not in str(err.value)
    dt.check_settings("alexnet", False, Detect())  # defaults: not set
    dt.check_settings("person-ssdlite", True, {"score_threshold": 0.3, "labels": ["person"]}, {"weights": "random"})
    assert dt.is_detector("person-ssdlite") and dt.is_detector("/m/person-ssdlite.onnx")
    assert not dt.is_detector("alexnet")
    assert dt.detector_for_outputs(["num_detections:0", "detection_boxes:0", "detection_scores:0",
                                    "detection_classes:0"]) is SPEC
    assert dt.spec_for("person-ssdlite", Detect(score_threshold=0.3)).score_threshold == 0.3
