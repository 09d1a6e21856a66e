"""Model zoo: names, seeded random weights, weights files, in-place ops off, Preprocess."""
import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from cnnvideo.model import zoo as models
from cnnvideo.model.zoo import MODEL_NAMES, ModelError, Preprocess, build_model, is_torchvision_model


def _state_equal(a, b):
    """True if two state dicts have the same keys and bit-identical tensors."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_model_names_are_torchvision_builders():
    """Every zoo name is a torchvision classification builder; helpers and detection models are not."""
    assert all(is_torchvision_model(n) for n in MODEL_NAMES)
    assert not is_torchvision_model("fasterrcnn_resnet50_fpn")
    assert not is_torchvision_model("get_weight")
    assert not is_torchvision_model("no_such_net")


def test_unknown_model_raises_with_name_and_known_names():
    """An unknown name raises ModelError (a ValueError) naming it and the known models."""
    with pytest.raises(ModelError) as err:
        build_model("no_such_net")
    assert isinstance(err.value, ValueError)
    assert "no_such_net" in str(err.value) and "resnet50" in str(err.value)


@pytest.mark.parametrize("name", ["googlenet", "mobilenet_v2"])
def test_random_weights_identical_across_builds(name):
    """Two builds with the same seed are bit-identical; another seed differs; caller RNG state is untouched."""
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_model(name, seed=7).state_dict()
    after = torch.rand(1)
    b = build_model(name, seed=7).state_dict()
    assert _state_equal(a, b)
    assert not _state_equal(a, build_model(name, seed=8).state_dict())
    assert torch.equal(before, after)


def _digest_in_subprocess(name):
    """SHA-256 of a model's state dict computed in a fresh Python process."""
    code = (
        "import hashlib, torch\n"
        "from cnnvideo.model.zoo import build_model\n"
        "sd = build_model(%r, seed=3).state_dict()\n"
        "h = hashlib.sha256()\n"
        "[h.update(k.encode() + sd[k].contiguous().numpy().tobytes()) for k in sorted(sd)]\n"
        "print(h.hexdigest())\n" % name
    )
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.check_output([sys.executable, "-c", code], env=env).decode().strip()


@pytest.mark.slow  # exports or quantises a model: `make test` runs it, `make test-fast` does not
def test_random_weights_identical_across_processes():
    """Seeded random weights are the same in two separate processes (and in this one)."""
    sd = build_model("mobilenet_v2", seed=3).state_dict()
    h = hashlib.sha256()
    for k in sorted(sd):
        h.update(k.encode() + sd[k].contiguous().numpy().tobytes())
    assert _digest_in_subprocess("mobilenet_v2") == _digest_in_subprocess("mobilenet_v2") == h.hexdigest()


def test_models_in_eval_mode_without_inplace_ops():
    """build_model returns an eval-mode model with every `inplace` flag off (resnet50 has ReLU(inplace=True))."""
    model = build_model("resnet50")
    assert not model.training
    flags = [m.inplace for m in model.modules() if hasattr(m, "inplace")]
    assert flags and not any(flags)


def test_googlenet_has_no_aux_heads_or_input_transform():
    """googlenet is built with aux_logits=False and transform_input=False."""
    model = build_model("googlenet")
    assert model.aux1 is None and model.aux2 is None and not model.transform_input


def test_weights_file_roundtrip(tmp_path):
    """A saved state dict loads back bit-identically via weights=<path>."""
    sd = build_model("mobilenet_v2", seed=5).state_dict()
    path = str(tmp_path / "w.pt")
    torch.save(sd, path)
    assert _state_equal(build_model("mobilenet_v2", weights=path).state_dict(), sd)


def test_a_prebuilt_model_is_taken_once_and_equals_a_fresh_build(tmp_path):
    """zoo.prebuild keeps the model for the next load_model of the same name, weights and seed (a role forked from
    tools/prefork.py), which equals a fresh build; the next load builds again; another seed, and a file's weights,
    are not taken from it."""
    models.prebuild("mobilenet_v2", "random", 4)
    kept = models._PREBUILT[("mobilenet_v2", "random", 4)][0]
    assert models.load_model("mobilenet_v2", "random", 5)[0] is not kept
    assert models.load_model("mobilenet_v2", "random", 4)[0] is kept and not models._PREBUILT
    again = models.load_model("mobilenet_v2", "random", 4)[0]
    assert again is not kept and _state_equal(again.state_dict(), kept.state_dict())
    path = str(tmp_path / "w.pt")
    torch.save(kept.state_dict(), path)
    models.prebuild("mobilenet_v2", path)
    assert not models._PREBUILT


def test_weights_file_errors_are_clear(tmp_path):
    """A missing file, or a file for another model, raises ModelError naming the path."""
    missing = str(tmp_path / "missing.pt")
    with pytest.raises(ModelError, match="missing.pt"):
        build_model("mobilenet_v2", weights=missing)
    wrong = str(tmp_path / "wrong.pt")
    torch.save(nn.Linear(2, 2).state_dict(), wrong)
    with pytest.raises(ModelError, match="wrong.pt"):
        build_model("mobilenet_v2", weights=wrong)


def test_imagenet_failure_message(monkeypatch):
    """When pretrained weights cannot be fetched, ModelError says so and suggests alternatives."""
    import torchvision.models as tvm

    def offline(**kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(tvm, "alexnet", offline)
    with pytest.raises(ModelError) as err:
        build_model("alexnet", weights="imagenet")
    assert "ImageNet" in str(err.value) and "network unreachable" in str(err.value)


def test_preprocess_normalises_uint8_frame():
    """Preprocess maps uint8 NHWC RGB to float32 NCHW, /255 then ImageNet mean/std per channel."""
    frame = np.random.RandomState(0).randint(0, 256, size=(1, 4, 5, 3)).astype(np.uint8)
    out = Preprocess()(torch.from_numpy(frame))
    assert out.dtype == torch.float32 and tuple(out.shape) == (1, 3, 4, 5)
    mean = np.array(models.IMAGENET_MEAN, dtype=np.float32)
    std = np.array(models.IMAGENET_STD, dtype=np.float32)
    expected = ((frame.astype(np.float32) / 255.0 - mean) / std).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(out.numpy(), expected, atol=1e-6)
