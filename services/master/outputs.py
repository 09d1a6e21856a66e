"""The output store: the one place a finished frame's model output is kept, and handed to any sinks.

Outputs go one row each into a scratch file, so memory does not grow with the run; a sink (a callable
`sink(frame, output)`, e.g. a per-result writer) sees every stored output once, in arrival order.
"""
from __future__ import annotations

import glob
import logging
import os
from typing import Callable, Dict, List

import numpy as np

log = logging.getLogger(__name__)

Sink = Callable[[int, np.ndarray], None]


class OutputError(RuntimeError):
    """An output does not fit the ones stored before it."""


class OutputStore:
    """Model outputs of completed frames, one row each in a scratch file under the report folder."""

    PATTERN = ".outputs-*.raw"

    def __init__(self, path: str) -> None:
        self.path = path
        self.fh = None
        self.shape: tuple = ()
        self.dtype = np.dtype(np.float32)
        self.rows: Dict[int, int] = {}
        self.sinks: List[Sink] = []

    @classmethod
    def remove_stale(cls, folder: str, keep: str = "") -> List[str]:
        """Delete scratch files that a killed master left in `folder` (all but `keep`)."""
        gone = []
        for p in glob.glob(os.path.join(folder, cls.PATTERN)):
            if os.path.abspath(p) != os.path.abspath(keep):
                try:
                    os.remove(p)
                    gone.append(p)
                except OSError:
                    pass
        if gone:
            log.info("removed %d scratch file(s) of an earlier, interrupted master", len(gone))
        return gone

    def add_sink(self, sink: Sink) -> None:
        """Call sink(frame, output) for every output stored from now on."""
        self.sinks.append(sink)

    def put(self, f: int, y: np.ndarray) -> None:
        """Store frame f's output (once per frame), then hand it to the sinks."""
        if self.fh is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self.fh = open(self.path, "w+b")
            self.shape, self.dtype = y.shape, y.dtype
        if y.shape != self.shape or y.dtype != self.dtype:
            raise OutputError("frame %d: output %r %s differs from earlier outputs %r %s"
                              % (f, y.shape, y.dtype, self.shape, self.dtype))
        if f in self.rows:
            raise OutputError("frame %d: output stored twice" % f)
        self.fh.seek(0, os.SEEK_END)
        self.rows[f] = self.fh.tell() // max(y.nbytes, 1)
        self.fh.write(np.ascontiguousarray(y).tobytes())
        for sink in self.sinks:
            sink(f, y)

    def get(self, f: int) -> np.ndarray:
        n = int(np.prod(self.shape)) * self.dtype.itemsize
        self.fh.seek(self.rows[f] * n)
        return np.frombuffer(self.fh.read(n), dtype=self.dtype).reshape(self.shape)

    def frames(self) -> List[int]:
        return sorted(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def save_npy(self, path: str) -> None:
        """outputs.npy: a (frames, numel) array in frame order, written row by row."""
        numel = int(np.prod(self.shape))
        tmp = path + ".tmp"
        with open(tmp, "wb") as out:
            np.lib.format.write_array_header_1_0(out, {"descr": np.lib.format.dtype_to_descr(self.dtype),
                                                       "fortran_order": False, "shape": (len(self.rows), numel)})
            for f in self.frames():
                out.write(self.get(f).tobytes())
        os.replace(tmp, path)

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None
            try:
                os.remove(self.path)
            except OSError:
                pass
