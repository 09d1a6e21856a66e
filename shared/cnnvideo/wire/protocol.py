"""The hop protocol every role follows: a frame's route, which stage reports its result, which sender a cut gets,
when a hop carries a keyframe, and the per-hop plan epochs that make a missed keyframe detectable.

Master and workers both import this module, so the rules cannot drift apart:

- a plan has S **stages** (cuts[s] .. cuts[s+1]); a stage runs on one worker (a chain: stage w on worker w) or on
  several replicas (a pool). Each frame's **route** names the worker of each stage that runs it;
- every **link** (the master or a worker, to one receiver) keeps its own closed-loop reference: a sender holds one
  OutputHop per receiver and a receiver one InputHop and HopReceiver per sender, so a replica that sees every
  Nth frame gets deltas against the frame it saw last, and a resync of one link touches no other;
- the **reporter** of a frame is the last stage with a non-empty segment range; it sends the model
  output to the master, later stages never see the frame;
- the **sender** at cut 0 (the uint8 frame) takes the pixel threshold, every later cut the float
  threshold and fp16 (`HopSettings.sender`);
- a hop **keyframes** in full mode, on the first frame, when its cut changes, every `keyframe_every`
  frames, and after a resync; the master bumps the hop's **epoch** whenever its cut changes (and every
  hop's epoch at a resync), and a receiver refuses a non-keyframe payload of a new epoch
  (`InputHop.admit`): a delta is never applied to the base of another cut.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from cnnvideo.wire.hop import HopError, HopSender


def reporter(cuts: Sequence[int]) -> int:
    """The worker that reports the frame's result: the last one whose segment range is non-empty (0 if none)."""
    for w in range(len(cuts) - 2, -1, -1):
        if cuts[w] < cuts[w + 1]:
            return w
    return 0


def chain_route(n_stages: int) -> List[int]:
    """The route of a chain: stage s on worker s."""
    return list(range(int(n_stages)))


def check_route(cuts: Sequence[int], route: Sequence[int], n_workers: int, num_segments: int) -> None:
    """ValueError unless `route` names one distinct worker (0..n_workers-1) for each stage of `cuts`, and `cuts`
    are a plan over num_segments segments."""
    if not 2 <= len(cuts) <= n_workers + 1:
        raise ValueError("plan has %d cuts, expected 2..%d (stages + 1, at most one stage per worker)"
                         % (len(cuts), n_workers + 1))
    if cuts[0] != 0 or cuts[-1] != num_segments:
        raise ValueError("plan must start at cut 0 and end at cut %d, got %r" % (num_segments, list(cuts)))
    if any(a > b for a, b in zip(cuts, cuts[1:])):
        raise ValueError("plan cuts must be non-decreasing, got %r" % list(cuts))
    if len(route) != len(cuts) - 1:
        raise ValueError("route has %d workers for %d stages" % (len(route), len(cuts) - 1))
    if any(not 0 <= w < n_workers for w in route) or len(set(route)) != len(route):
        raise ValueError("route %r must name distinct workers 0..%d" % (list(route), n_workers - 1))


MAX_STAGE_OF = 4096  # entries a plan's stage_of may have (a malformed message must not make a worker loop for long)


def check_stage_of(cuts: Sequence[int], stage_of: Sequence[int], n_workers: int, num_segments: int) -> List[int]:
    """The stage of each of the n_workers workers a run knows (-1: unused), from a plan's `stage_of`; ValueError
    unless each entry is a stage of `cuts` or -1 and every stage has a worker. The plan may name workers past the
    run's n_workers (they joined the pool since: this worker is told of them next) or fewer (the rest unused)."""
    if len(stage_of) > MAX_STAGE_OF:
        raise ValueError("stage_of has %d entries (at most %d)" % (len(stage_of), MAX_STAGE_OF))
    n_stages = len(cuts) - 1
    check_route(cuts, chain_route(n_stages), max(n_workers, len(stage_of)), num_segments)
    if any(not -1 <= s < n_stages for s in stage_of):
        raise ValueError("stage_of %r names a stage outside 0..%d" % (list(stage_of), n_stages - 1))
    empty = sorted(set(range(n_stages)) - set(stage_of))
    if empty:
        raise ValueError("stage %d has no worker (stage_of %r)" % (empty[0], list(stage_of)))
    return (list(stage_of) + [-1] * n_workers)[:n_workers]


@dataclass(frozen=True)
class HopSettings:
    """The settings that decide what a hop sends (they change results: every role must use the same)."""

    mode: str = "delta"  # full | delta
    input_threshold: float = 0.0  # pixel levels on the uint8 frame (cut 0)
    threshold: float = 0.0  # on later cuts
    fp16: bool = False  # later cuts' values as float16
    compress: str = "auto"

    @classmethod
    def from_delta(cls, delta, mode: str = "delta") -> "HopSettings":
        """From a config's `delta` section (or anything with input_threshold, threshold, fp16)."""
        return cls(mode=mode, input_threshold=float(delta.input_threshold), threshold=float(delta.threshold),
                   fp16=bool(delta.fp16))

    @property
    def full(self) -> bool:
        return self.mode == "full"

    def sender(self, cut: int) -> HopSender:
        """The HopSender for the tensor at `cut` (cut 0 is the uint8 frame: pixel threshold, no fp16)."""
        if cut == 0:
            return HopSender(threshold=self.input_threshold, compress=self.compress)
        return HopSender(threshold=self.threshold, fp16=self.fp16, compress=self.compress)


class HopPlanner:
    """The master's view of every hop: which frames keyframe where, and each hop's plan epoch."""

    def __init__(self, n_workers: int, mode: str = "delta", keyframe_every: int = 0) -> None:
        self.n_workers = int(n_workers)
        self.full = mode == "full"
        self.keyframe_every = int(keyframe_every)
        self.last_cut: List[Optional[int]] = [None] * self.n_workers
        self.epochs = [0] * self.n_workers

    def plan(self, frame: int, cuts: Sequence[int]) -> Tuple[List[bool], List[int]]:
        """(keyframe per hop, epoch per hop) for `frame` sent with `cuts`; hops past the reporter stay False."""
        periodic = self.keyframe_every > 0 and frame % self.keyframe_every == 0
        keyframe = [False] * self.n_workers
        for w in range(reporter(cuts) + 1):
            changed = self.last_cut[w] != cuts[w]
            keyframe[w] = self.full or changed or periodic
            if changed and self.last_cut[w] is not None:
                self.epochs[w] += 1
            self.last_cut[w] = cuts[w]
        return keyframe, list(self.epochs)

    def grow(self, n_workers: int) -> None:
        """The pool grew to `n_workers` (a worker joined): a plan may now have that many hops."""
        extra = max(int(n_workers) - self.n_workers, 0)
        self.n_workers += extra
        self.last_cut += [None] * extra
        self.epochs += [0] * extra

    def resync(self) -> None:
        """After a resync every hop starts over: its next frame keyframes, in a new epoch."""
        self.last_cut = [None] * self.n_workers
        self.epochs = [e + 1 for e in self.epochs]


class InputHop:
    """A receiver's check of one link (one sender into this worker): a delta applies only to a base of the same cut.
    (A re-plan that moves the link's cut keyframes it; a resync starts a new generation, which drops the link.)"""

    def __init__(self, hop: int) -> None:
        self.hop = hop
        self.cut: Optional[int] = None

    def admit(self, keyframe: bool, cut: int) -> None:
        """Accept a payload at `cut`; HopError if it is a delta on a base of another cut."""
        if not keyframe and self.cut is not None and cut != self.cut:
            raise HopError("link into hop %d moved from cut %d to %d without a keyframe (resync needed)"
                           % (self.hop, self.cut, cut))
        self.cut = cut


class OutputHop:
    """A worker's sending side of a hop: the sender per cut and when it must keyframe."""

    def __init__(self, settings: HopSettings) -> None:
        self.settings = settings
        self.last_cut = -1
        self.sent = 0
        self._senders = {}  # type: dict
        self._last = None  # the sender of the last message

    def keyframe(self, cut: int, planned: bool) -> bool:
        """Whether the tensor at `cut` goes whole: full mode, the master planned it, the first message, or the
        cut differs from the previous message's (the receiver holds no base for it)."""
        return self.settings.full or planned or self.sent == 0 or cut != self.last_cut

    def encode(self, cut: int, x, planned: bool = False) -> Tuple[bytes, bool]:
        """(payload, keyframe) for the tensor x at `cut`."""
        key = 0 if cut == 0 else 1  # cut 0 has its own sender (uint8 frame, pixel threshold)
        sender = self._senders.get(key)
        if sender is None:
            sender = self._senders[key] = self.settings.sender(cut)
        keyframe = self.keyframe(cut, planned)
        data = sender.encode(x, keyframe=keyframe)
        self._last = sender
        self.last_cut = cut
        self.sent += 1
        return data, keyframe

    def last_nnz(self) -> int:
        """Values the last message changed (0: an empty update)."""
        return int(self._last.last_nnz) if self._last is not None else 0

    def encode_unchanged(self, cut: int, planned: bool = False) -> Optional[Tuple[bytes, bool]]:
        """(payload, False) for a tensor at `cut` equal to the one this hop's last message carried (the caller knows
        it: a stage whose input did not change): the empty update, made without comparing. None when the message
        must be whole (a keyframe is never skipped) or the last message was of another cut: then encode()."""
        if self.keyframe(cut, planned):
            return None
        self._last = self._senders[0 if cut == 0 else 1]
        data = self._last.encode_unchanged()
        self.sent += 1
        return data, False


__all__ = ["HopPlanner", "HopSettings", "InputHop", "OutputHop", "chain_route", "check_route",
           "check_stage_of", "reporter"]
