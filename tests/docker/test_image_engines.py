"""The role image's engines really run inside it: ONNX Runtime fp32 and int8 (whose quantiser needs the onnx and
ml_dtypes wheels docker_setup.sh puts in the build context), on trained MobileNetV2 and frames of the image's own
vtest.avi. Without those wheels an int8 worker silently fell back to torch in every compose run."""
import json

import pytest
from dockerutil import build_image, docker

pytestmark = pytest.mark.docker


def test_worker_image_runs_onnxruntime_fp32_and_int8(engine, wheels_present):
    image = build_image("worker")
    out = docker("run", "--rm", "--network", "none", "--cpus", "1", image, "bench", "engine", "--json",
                 "--model", "mobilenet_v2", "--weights", "imagenet", "--frame-size", "96", "128", "--frames", "4",
                 "--repeat", "1", "--calibration-frames", "8", "--video", "/usr/share/cnnvideo/vtest.avi",
                 "--engines", "torch-fp32,onnxruntime-fp32,onnxruntime-int8", timeout=600)
    summary = json.loads(out)["summary"]
    assert sorted(summary) == ["onnxruntime-fp32", "onnxruntime-int8", "torch-fp32"], summary
    assert summary["onnxruntime-fp32"]["max_abs_err"] <= 1e-4, summary  # the same fp32 model, exported
    int8 = summary["onnxruntime-int8"]
    assert 0.0 <= int8["top1_agreement"] <= 1.0 and int8["max_abs_err"] > 0, int8  # quantised: not the fp32 graph


def test_worker_image_imports_onnx_after_a_role_has_imported_torch(engine, wheels_present):
    """A role imports cnnvideo, then torch (the model), then the engines: with Debian's C++ protobuf, torch's own
    onnx.proto in the shared descriptor pool made onnx 1.17 fail to import after it, so every compose worker ran
    torch (the bench above imports onnx first and never saw it). cnnvideo's package import puts onnx first."""
    image = build_image("worker")
    code = ("import cnnvideo, torch; from cnnvideo.model.engines import ort_available; "
            "import onnxruntime.quantization; import onnx.reference; print(ort_available())")
    out = docker("run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-c", code, timeout=300)
    assert out.strip().startswith("(True,"), out
