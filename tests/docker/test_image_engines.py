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
