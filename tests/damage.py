"""Ways to damage a cache file on disk, for the tests that check a damaged cache is detected and rebuilt:
cut in half, one byte flipped a third of the way in, or replaced by 300 random bytes."""
import os

import numpy as np
import pytest


def truncate(path: str) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) // 2)


def flip(path: str) -> None:
    with open(path, "r+b") as fh:
        fh.seek(os.path.getsize(path) // 3)
        b = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([b[0] ^ 0xFF]))


def garbage(path: str) -> None:
    with open(path, "wb") as fh:
        fh.write(np.random.default_rng(0).bytes(300))


# @DAMAGES on a test taking `damage`: one case per kind
DAMAGES = pytest.mark.parametrize("damage", [truncate, flip, garbage], ids=["truncated", "bit-flip", "garbage"])
