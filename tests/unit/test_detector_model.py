"""The trained person detector (scripts/fetch_detector.sh): the ONNX file the project ships into the model cache
loads in ONNX Runtime with the documented input and outputs, finds the person in darknet's person.jpg and no
person in dog.jpg. Skipped without the file, failed when CNNVIDEO_REQUIRE_TRAINED=1 (CI fetched it)."""
import os

import numpy as np
import pytest

from cnnvideo import artifacts

ort = pytest.importorskip("onnxruntime")
cv2 = pytest.importorskip("cv2")

INPUT = "image_tensor:0"
OUTPUTS = ["num_detections:0", "detection_boxes:0", "detection_scores:0", "detection_classes:0"]
PERSON = 1


@pytest.fixture(scope="module")
def session(person_detector):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(person_detector, opts, providers=["CPUExecutionProvider"])


def photo(dog_photo, name):
    """darknet's photo `name` (next to dog.jpg, from scripts/fetch_photos.sh) as uint8 RGB HxWx3."""
    bgr = cv2.imread(os.path.join(os.path.dirname(dog_photo), name))
    assert bgr is not None, name
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def persons(session, rgb):
    """[(score, box y1,x1,y2,x2 normalised)] of the class-1 detections, best first."""
    out = dict(zip([o.name for o in session.get_outputs()], session.run(None, {INPUT: rgb[None]})))
    n = int(out["num_detections:0"][0])
    boxes, scores, classes = (out[k][0][:n] for k in OUTPUTS[1:])
    found = [(float(s), b) for b, s, c in zip(boxes, scores, classes) if int(c) == PERSON]
    return sorted(found, key=lambda f: -f[0])


def test_model_cache_path_honours_cnnvideo_models(tmp_path, monkeypatch):
    """artifacts.person_detector_path() is <models_dir>/person-ssdlite.onnx, models_dir() being $CNNVIDEO_MODELS
    when set (the images set it) and ~/.cache/cnnvideo/models otherwise."""
    monkeypatch.setenv("CNNVIDEO_MODELS", str(tmp_path))
    assert artifacts.person_detector_path() == os.path.join(str(tmp_path), "person-ssdlite.onnx")
    monkeypatch.delenv("CNNVIDEO_MODELS")
    assert artifacts.models_dir() == os.path.expanduser("~/.cache/cnnvideo/models")


def test_detector_has_the_documented_input_and_outputs(session):
    """The file is the converted SSDLite graph: one uint8 NHWC input image_tensor:0 (any size) and the four
    detection outputs, so code can feed it frames as they are."""
    (inp,) = session.get_inputs()
    assert inp.name == INPUT and inp.type == "tensor(uint8)" and len(inp.shape) == 4 and inp.shape[3] == 3
    assert sorted(o.name for o in session.get_outputs()) == sorted(OUTPUTS)


def test_person_photo_gives_a_confident_person(session, dog_photo):
    """person.jpg (someone standing between a dog and a horse) gives a person with score >= 0.9, its box an
    upright region inside the image: the weights are trained, not random, and boxes are y1,x1,y2,x2."""
    found = persons(session, photo(dog_photo, "person.jpg"))
    assert found and found[0][0] >= 0.9, found[:3]
    y1, x1, y2, x2 = found[0][1]
    assert 0 <= y1 < y2 <= 1 and 0 <= x1 < x2 <= 1
    assert y2 - y1 > x2 - x1  # a standing person is taller than wide


def test_dog_photo_gives_no_person(session, dog_photo):
    """dog.jpg (a dog, a bicycle and a truck, nobody) gives no person with score >= 0.3: the detector does not
    call everything a person."""
    found = persons(session, photo(dog_photo, "dog.jpg"))
    assert not found or found[0][0] < 0.3, found[:3]


def test_any_frame_size_is_accepted(session, dog_photo):
    """The graph resizes internally: person.jpg at half size (and a non-multiple-of-32 size) still gives the
    person >= 0.9, so frames need no resizing before the detector."""
    rgb = photo(dog_photo, "person.jpg")
    small = np.ascontiguousarray(cv2.resize(rgb, (rgb.shape[1] // 2 + 1, rgb.shape[0] // 2 + 3)))
    found = persons(session, small)
    assert found and found[0][0] >= 0.9, found[:3]
