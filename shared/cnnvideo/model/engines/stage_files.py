"""Stage files that travel: the master builds a stage's ONNX file once (an int8 stage is quantized there, where the
CPU is) and pushes it to the workers that run the stage; a worker checks it and keeps it for the build that asks
for exactly its stage key, instead of quantizing under its CPU cap (406 s for the whole detector at 0.1 of a core).

Why a push (Worker.PutStage, client streaming) and not a fetch from the master: a pool of listed workers has no
address for the master (it dials them; only `cluster.join` gives it a server), and every StartRun and Prepare that
needs a stage is the master's own call, so it pushes just before. The file travels in chunks of CHUNK_BYTES (under
gRPC's message limit); the receiver bounds the size (MAX_FILE_BYTES) before it holds the bytes, checks their sha256
and keeps them by key. The bytes are an ONNX protobuf, parsed by ONNX Runtime, never unpickled; the session the
worker builds from them checks the key in the file's metadata too (ort_engine.load_cached)."""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional, Tuple

from cnnvideo.config_types import PRECISIONS  # what a stage file may be (its precision names its file)

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20  # 1 MB a message: far under the configured gRPC limit (cfg.max_message_bytes)
MAX_FILE_BYTES = 512 << 20  # a stage file larger than this is refused (vgg16's whole int8 model is ~140 MB)
INBOX_BYTES = 256 << 20  # files a worker holds for builds to come; past it the oldest not yet used is dropped


class StageFileError(ValueError):
    """A stage file that cannot be taken (framing, size, digest): one line saying why."""


@dataclass(frozen=True)
class StageFile:
    """One stage's ONNX file and what it claims to be."""

    start: int
    end: int
    precision: str
    key: str  # ort_engine.stage_key of the build that made it
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def label(self, size: Optional[int] = None) -> str:
        """One line naming the file; `size`: the bytes announced, for a header whose data was not taken."""
        return "stage %d..%d %s (%d bytes, key sha1 %s)" % (self.start, self.end, self.precision,
                                                           len(self.data) if size is None else size,
                                                           key_tag(self.key))


def key_tag(key: str) -> str:
    """A short name of a stage key for log lines (its sha1, 12 hex: the key itself is a long sentence)."""
    return hashlib.sha1(key.encode()).hexdigest()[:12]


def chunks(f: StageFile, chunk_bytes: int = CHUNK_BYTES) -> Iterator[dict]:
    """The fields of each StageChunk message of `f`: the header on the first, then the data in chunk_bytes pieces."""
    digest = f.sha256
    n = max(1, -(-len(f.data) // chunk_bytes))
    for i in range(n):
        piece = f.data[i * chunk_bytes:(i + 1) * chunk_bytes]
        if i == 0:
            yield dict(start=f.start, end=f.end, precision=f.precision, key=f.key, sha256=digest, size=len(f.data),
                       data=piece)
        else:
            yield dict(data=piece)


def header(msg, max_bytes: int = MAX_FILE_BYTES) -> StageFile:
    """What the first chunk message says the file is (a StageFile with no data yet); StageFileError (one line) when
    it has no header (key, cuts), a precision that is not int8 or fp32, or a size over `max_bytes`. A receiver may
    answer on it alone: a worker that has the stage of that key in its cache takes none of the data."""
    if not msg.key or msg.end <= msg.start or msg.start < 0:
        raise StageFileError("stage file without a header (key, cuts) in its first chunk")
    if msg.precision not in PRECISIONS:
        raise StageFileError("stage %d..%d file of precision %r refused: one of %s"
                             % (msg.start, msg.end, str(msg.precision)[:20], "/".join(PRECISIONS)))
    if not 0 <= msg.size <= max_bytes:
        raise StageFileError("stage %d..%d file of %d bytes refused: the limit is %d"
                             % (msg.start, msg.end, msg.size, max_bytes))
    return StageFile(int(msg.start), int(msg.end), str(msg.precision), str(msg.key), b"")


def assemble(messages: Iterable, max_bytes: int = MAX_FILE_BYTES) -> StageFile:
    """The StageFile the chunk messages (StageChunk, or anything with its fields) carry; StageFileError (one line)
    when the header is wrong (see header), the size is not the one announced, or the sha256 differs. The
    announced size is checked before any data is held, and the data is never more than it."""
    head = None
    size = digest = None
    buf = bytearray()
    for msg in messages:
        if head is None:
            head = header(msg, max_bytes)
            size, digest = int(msg.size), str(msg.sha256)
        if len(buf) + len(msg.data) > size:
            raise StageFileError("stage %d..%d file is longer than the %d bytes announced"
                                 % (head.start, head.end, size))
        buf.extend(msg.data)
    if head is None:
        raise StageFileError("empty stage file stream")
    if len(buf) != size:
        raise StageFileError("stage %d..%d file ended at %d of the %d bytes announced"
                             % (head.start, head.end, len(buf), size))
    f = dataclasses.replace(head, data=bytes(buf))
    if f.sha256 != digest:
        raise StageFileError("stage %d..%d file refused: its sha256 is %s, the sender said %s"
                             % (f.start, f.end, f.sha256[:16], digest[:16]))
    return f


class StageInbox:
    """The stage files a worker was given, kept by (start, end, precision) until the build of that stage takes the
    one of its own key (thread-safe; at most `max_bytes` held, the oldest dropped first)."""

    def __init__(self, max_bytes: int = INBOX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._files: "OrderedDict[Tuple[int, int, str, str], StageFile]" = OrderedDict()
        self._lock = threading.Lock()

    def put(self, f: StageFile) -> None:
        with self._lock:
            self._files[(f.start, f.end, f.precision, f.key)] = f
            self._files.move_to_end((f.start, f.end, f.precision, f.key))
            while sum(len(x.data) for x in self._files.values()) > self.max_bytes and len(self._files) > 1:
                self._files.popitem(last=False)

    def take(self, start: int, end: int, precision: str, key: str) -> Tuple[Optional[bytes], str]:
        """(the file's bytes, '') for exactly this stage and key (removed from the inbox: the caller caches it), else
        (None, why: no file for the stage, or files of other keys only: another model, calibration or versions)."""
        with self._lock:
            f = self._files.pop((start, end, precision, key), None)
            others = [k for (s, e, p, k) in self._files if (s, e, p) == (start, end, precision)]
        if f is not None:
            return f.data, ""
        if others:
            return None, ("the master's file of stage %d..%d has key %s, this worker builds key %s (other versions, "
                          "calibration or model?)" % (start, end, key_tag(others[-1]), key_tag(key)))
        return None, "no file of stage %d..%d from the master" % (start, end)

    def __len__(self) -> int:
        with self._lock:
            return len(self._files)
