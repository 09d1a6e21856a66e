"""The hop protocol every role follows: which worker reports a frame's result, which sender a cut gets,
when a hop carries a keyframe, and the per-hop plan epochs that make a missed keyframe detectable.

Master and workers both import this module, so the rules cannot drift apart:

- the **reporter** of a frame is the last worker with a non-empty segment range; it sends the model
  output to the master, later workers never see the frame;
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


def check_plan(cuts: Sequence[int], n_workers: int, num_segments: int) -> None:
    """ValueError unless `cuts` is a plan of n_workers workers over num_segments segments."""
    if len(cuts) != n_workers + 1:
        raise ValueError("plan has %d cuts, expected %d (workers + 1)" % (len(cuts), n_workers + 1))
    if cuts[0] != 0 or cuts[-1] != num_segments:
        raise ValueError("plan must start at cut 0 and end at cut %d, got %r" % (num_segments, list(cuts)))
    if any(a > b for a, b in zip(cuts, cuts[1:])):
        raise ValueError("plan cuts must be non-decreasing, got %r" % list(cuts))


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

    def resync(self) -> None:
        """After a resync every hop starts over: its next frame keyframes, in a new epoch."""
        self.last_cut = [None] * self.n_workers
        self.epochs = [e + 1 for e in self.epochs]


class InputHop:
    """A worker's check of the epochs on its input hop: a new epoch must start with a keyframe."""

    def __init__(self, hop: int) -> None:
        self.hop = hop
        self.epoch: Optional[int] = None

    def admit(self, epoch: int, keyframe: bool) -> None:
        """Accept a payload of `epoch`; HopError if the epoch moved and the payload is not whole."""
        if self.epoch is not None and epoch != self.epoch and not keyframe:
            raise HopError("hop %d moved to epoch %d without a keyframe (resync needed)" % (self.hop, epoch))
        self.epoch = epoch


class OutputHop:
    """A worker's sending side of a hop: the sender per cut and when it must keyframe."""

    def __init__(self, settings: HopSettings) -> None:
        self.settings = settings
        self.last_cut = -1
        self.sent = 0
        self._senders = {}  # type: dict

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
        self.last_cut = cut
        self.sent += 1
        return data, keyframe

    def encode_unchanged(self, cut: int, planned: bool = False) -> Optional[Tuple[bytes, bool]]:
        """(payload, False) for a tensor at `cut` equal to the one this hop's last message carried (the caller knows
        it: a stage whose input did not change): the empty update, made without comparing. None when the message
        must be whole (a keyframe is never skipped) or the last message was of another cut: then encode()."""
        if self.keyframe(cut, planned):
            return None
        data = self._senders[0 if cut == 0 else 1].encode_unchanged()
        self.sent += 1
        return data, False


__all__ = ["HopPlanner", "HopSettings", "InputHop", "OutputHop", "check_plan", "reporter"]
