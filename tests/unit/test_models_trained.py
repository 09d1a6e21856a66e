"""Trained weights: the offline MobileNetV2 checkpoint's hash, the dog photo's class, and clear errors for bad
weights files (missing, corrupted, hash mismatch, another architecture) naming the file."""
import os
import shutil

import numpy as np
import pytest
import torch
from torch import nn

from cnnvideo.model import zoo as models
from cnnvideo.model.zoo import ModelError, load_model
from cnnvideo.results import labels

MOBILENET_SHA256 = "b03531047ffacf1e2488318dcd2aba1126cde36e3bfe1aa5cb07700aeeee9889"


def test_imagenet_mobilenet_loads_the_hash_checked_offline_file(trained_weights):
    """weights: imagenet for mobilenet_v2 loads IMAGENET1K_V1 from the torch hub cache; the file loaded has the
    checkpoint's published sha256, and the model's parameters are that file's."""
    model, info = load_model("mobilenet_v2", "imagenet")
    assert info.source == "IMAGENET1K_V1" and info.path == trained_weights
    assert models.sha256_of(info.path) == MOBILENET_SHA256 == info.sha256
    state = torch.load(info.path, map_location="cpu", weights_only=True)
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key


def test_dog_photo_is_a_dog_class(trained_weights, dog_photo):
    """Trained MobileNetV2 (unsplit) classifies darknet's dog.jpg at 240x320 as a dog breed (ImageNet 151-268)."""
    from cnnvideo.model.engines.torch_engine import TorchStage
    from cnnvideo.model.graph import LayerGraph
    from cnnvideo.video.frames import read_image

    frame = read_image(dog_photo, (240, 320))
    graph = LayerGraph.from_model(models.build_model("mobilenet_v2", "imagenet"), (240, 320))
    best = labels.topk(TorchStage(graph, 0, len(graph.cuts) - 1).run(frame), 5)
    assert 151 <= best[0][0] <= 268, best
    assert best[0][1] == labels.categories()[best[0][0]]


def test_hub_file_failing_its_hash_is_refused(tmp_path, monkeypatch):
    """A corrupted checkpoint in the hub cache is refused with the file and the hash problem named (torchvision
    itself checks hashes only on download)."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    path = models.hub_checkpoint(models.imagenet_weights("mobilenet_v2").url)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as fh:
        fh.write(b"not the checkpoint")
    with pytest.raises(ModelError, match="fails its hash check") as err:
        load_model("mobilenet_v2", "imagenet")
    assert path in str(err.value) and MOBILENET_SHA256 in str(err.value)


def test_imagenet_missing_names_the_fetch_script(tmp_path, monkeypatch):
    """Without the file (and without network), the error names scripts/fetch_weights.sh for mobilenet_v2."""
    import torch.hub

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))

    def offline(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(torch.hub, "download_url_to_file", offline)
    with pytest.raises(ModelError, match="fetch_weights.sh") as err:
        load_model("mobilenet_v2", "imagenet")
    assert "network unreachable" in str(err.value) and "\n" not in str(err.value)


def test_weights_file_with_hash_prefix_in_its_name_is_checked(tmp_path):
    """A state-dict file named torchvision-style (<name>-<sha256 prefix>.pth) must match that prefix."""
    path = str(tmp_path / "mine-deadbeef.pth")
    torch.save(models.build_model("mobilenet_v2", seed=1).state_dict(), path)
    with pytest.raises(ModelError, match="mine-deadbeef.pth.*does not start with deadbeef"):
        load_model("mobilenet_v2", path)
    good = str(tmp_path / ("mine-%s.pth" % models.sha256_of(path)[:8]))
    shutil.copy(path, good)
    assert load_model("mobilenet_v2", good)[1].sha256 == models.sha256_of(path)


def test_corrupted_weights_file_is_one_clear_line(tmp_path):
    """A truncated .pth is 'not a readable torch state dict', with the path, on one line."""
    src = str(tmp_path / "full.pth")
    torch.save(models.build_model("mobilenet_v2", seed=1).state_dict(), src)
    bad = str(tmp_path / "truncated.pth")
    with open(src, "rb") as fh, open(bad, "wb") as out:
        out.write(fh.read()[:100000])
    with pytest.raises(ModelError, match="truncated.pth is not a readable torch state dict") as err:
        load_model("mobilenet_v2", bad)
    assert "\n" not in str(err.value)


def test_other_architecture_names_missing_and_unexpected_keys(tmp_path):
    """alexnet's state dict given to mobilenet_v2: counts and first names of missing and unexpected keys."""
    path = str(tmp_path / "alexnet.pth")
    torch.save(models.build_model("alexnet").state_dict(), path)
    with pytest.raises(ModelError) as err:
        load_model("mobilenet_v2", path)
    msg = str(err.value)
    assert "alexnet.pth does not fit mobilenet_v2" in msg and "missing keys" in msg and "unexpected keys" in msg
    small = str(tmp_path / "shape.pth")
    sd = models.build_model("mobilenet_v2").state_dict()
    sd["classifier.1.bias"] = torch.zeros(10)
    torch.save(sd, small)
    with pytest.raises(ModelError, match="classifier.1.bias has shape"):
        load_model("mobilenet_v2", small)


def test_non_tensor_pickle_is_refused(tmp_path):
    """A file that is not a dict of tensors is refused (weights-only loading never runs its code)."""
    path = str(tmp_path / "obj.pth")
    torch.save({"x": [1, 2]}, path)
    with pytest.raises(ModelError, match="obj.pth"):
        load_model("mobilenet_v2", path)


def test_model_error_is_a_config_error():
    """Bad weights stop a role like any bad config value: the CLI prints one line and exits 2."""
    from cnnvideo.config import ConfigError

    assert issubclass(ModelError, ConfigError)


def test_random_weights_info():
    """Random weights say so, with their seed."""
    _, info = load_model("alexnet", "random", 3)
    assert not info.trained and info.describe() == "alexnet, random (seed 3)"


def test_weights_info_for_a_file(tmp_path):
    """A file's WeightsInfo carries its absolute path and sha256."""
    path = str(tmp_path / "w.pth")
    torch.save(nn.Sequential().state_dict(), path)
    torch.save(models.build_model("mobilenet_v2", seed=2).state_dict(), path)
    _, info = load_model("mobilenet_v2", path)
    assert info.path == os.path.abspath(path) and info.sha256 == models.sha256_of(path) and info.trained
    assert np.isfinite(len(info.describe()))
