"""cnnvideo.model.vision imports torchvision without torch._dynamo, and torchvision still works: checked in fresh
interpreters, since the test process itself may have loaded either already."""
import importlib.util
import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("torch._dynamo") is None:
    pytest.skip("this torch has no dynamo: torchvision is imported as it is", allow_module_level=True)


def _run(code: str):
    out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_torchvision_loads_without_dynamo_and_its_models_and_ops_run():
    """After the import no torch._dynamo module is loaded; alexnet runs, roi_align (the op that wanted dynamo) runs,
    and only then does `import torch._dynamo.utils` load the real module, which the stand-in's function calls."""
    got = _run(
        "import json, sys, torch\n"
        "from cnnvideo.model.vision import load_torchvision, is_compile_supported\n"
        "torchvision = load_torchvision()\n"
        "before = sorted(m for m in sys.modules if m.startswith('torch._dynamo'))\n"
        "out = torchvision.models.alexnet()(torch.rand(1, 3, 64, 64))\n"
        "roi = torchvision.ops.roi_align(torch.rand(1, 3, 16, 16), torch.tensor([[0, 0., 0., 8., 8.]]), (2, 2))\n"
        "import torch._dynamo.utils as real\n"
        "print(json.dumps({'before': before, 'out': list(out.shape), 'roi': list(roi.shape),\n"
        "                  'real': real.is_compile_supported is not is_compile_supported,\n"
        "                  'same': is_compile_supported('cpu') == real.is_compile_supported('cpu')}))\n")
    assert got == {"before": [], "out": [1, 1000], "roi": [1, 3, 2, 2], "real": True, "same": True}


def test_with_dynamo_already_loaded_torchvision_is_imported_as_it_is():
    """A process that loaded torch._dynamo first gets the plain torchvision, with the real function."""
    got = _run(
        "import json, torch._dynamo.utils as real\n"
        "from cnnvideo.model.vision import load_torchvision\n"
        "load_torchvision()\n"
        "from torchvision.ops import roi_align\n"
        "print(json.dumps(roi_align.__globals__['is_compile_supported'] is real.is_compile_supported))\n")
    assert got is True


def test_a_torchvision_that_needs_more_of_dynamo_is_imported_plainly():
    """If torchvision's import fails with the stand-in in place (a version that imports more of dynamo), the partial
    import is forgotten and torchvision is imported as it is: here a stand-in that lacks what roi_align imports."""
    got = _run(
        "import json, sys\n"
        "from cnnvideo.model import vision\n"
        "vision._stand_in = lambda: vision.types.ModuleType(vision._UTILS)  # without is_compile_supported\n"
        "torchvision = vision.load_torchvision()\n"
        "from torchvision.ops import roi_align\n"
        "import torch._dynamo.utils as utils\n"
        "print(json.dumps([roi_align.__globals__['is_compile_supported'] is utils.is_compile_supported,\n"
        "                  torchvision.models.alexnet is not None]))\n")
    assert got == [True, True]
