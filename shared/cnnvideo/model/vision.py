"""torchvision, imported without loading torch._dynamo: `torchvision = load_torchvision()`.

torchvision 0.2x imports `torch._dynamo.utils` when it is imported (ops/roi_align.py), for one function that it
calls only when roi_align runs. Loading dynamo is most of torchvision's import: 1.9 of 2.1 s of CPU on a 2-core
x86 host with torch 2.14 and torchvision 0.29, paid by every role, worker that joins and CLI call that builds a
torchvision model, and several times that on a Pi. Nothing here compiles, so during torchvision's import that one
module is a stand-in whose function loads the real one when first called; the stand-in is then removed, and any
later `import torch._dynamo` loads the real package as usual. With a torch that has no dynamo, or one already
loaded, torchvision is imported as it is.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types

_LOCK = threading.Lock()
_UTILS = "torch._dynamo.utils"


def is_compile_supported(device_type) -> bool:
    """torch._dynamo.utils.is_compile_supported, loaded on the first call (the stand-in's only function)."""
    return importlib.import_module(_UTILS).is_compile_supported(device_type)


def _stand_in() -> types.ModuleType:
    module = types.ModuleType(_UTILS)
    module.is_compile_supported = is_compile_supported
    return module


def load_torchvision():
    """The torchvision module, imported on the first call (see the module docstring)."""
    if "torchvision" in sys.modules:
        return sys.modules["torchvision"]
    import torch  # noqa: F401 (find_spec of a submodule needs its package)

    has_dynamo = importlib.util.find_spec("torch._dynamo") is not None
    if not has_dynamo or _UTILS in sys.modules or "torch._dynamo" in sys.modules:
        return importlib.import_module("torchvision")
    with _LOCK:
        stand_in = _stand_in()
        sys.modules[_UTILS] = stand_in
        try:
            return importlib.import_module("torchvision")
        except Exception:  # a torchvision that needs more of dynamo: forget the partial import, then the plain one
            for name in [n for n in sys.modules if n.split(".")[0] == "torchvision" or n.startswith("torch._dynamo")]:
                del sys.modules[name]
            return importlib.import_module("torchvision")
        finally:
            if sys.modules.get(_UTILS) is stand_in:
                del sys.modules[_UTILS]
