"""Naming layers and finding cuts, the same way for a torch LayerGraph and an OnnxGraph (no torch, no onnx)."""
from __future__ import annotations

from typing import Sequence, Set, Type, Union

import numpy as np


def find_cut(cuts: Sequence, name_or_index: Union[int, str], error: Type[Exception], what: str = "") -> int:
    """Index of the cut given by index or name among `cuts` (each with `.index` and `.name`); `error` naming the
    cut (and `what`, the model) if there is none."""
    if isinstance(name_or_index, (int, np.integer)) and not isinstance(name_or_index, bool):
        index = int(name_or_index)
        if 0 <= index < len(cuts):
            return index
        raise error("cut index %d out of range 0..%d" % (index, len(cuts) - 1))
    for cut in cuts:
        if cut.name == name_or_index:
            return cut.index
    names = [c.name for c in cuts]
    preview = ", ".join(names[:12]) + (", ... (%d in all)" % len(names) if len(names) > 12 else "")
    raise error("unknown cut %r%s (cuts: %s)" % (name_or_index, " of %s" % what if what else "", preview))


def unique_name(base: str, taken: Set[str]) -> str:
    """`base`, or `base_1`, `base_2`, ... if already taken (repeated calls of one module or op); added to `taken`."""
    name, count = base, 0
    while name in taken:
        count += 1
        name = "%s_%d" % (base, count)
    taken.add(name)
    return name
