"""A plan: where the CNN is cut into stages, and which workers serve each stage (stages x replicas).

Stage s runs segments cuts[s] .. cuts[s+1]-1 on every worker of groups[s] (its replicas); each frame visits one
replica of each stage, the one its route names. A chain is the plan with one worker per stage (`Plan(cuts)`:
stage s on worker s), full replication the plan with one stage on every worker. Every plan has groups, and every
frame a route: no code needs to know which kind it holds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

Groups = Tuple[Tuple[int, ...], ...]


@dataclass(frozen=True)
class Plan:
    """Cuts 0 = cuts[0] <= ... <= cuts[S] = K of S stages, and the workers of each stage (default: a chain)."""

    cuts: Tuple[int, ...]
    groups: Optional[Groups] = None  # the workers of each stage; None builds the chain's ((0,), (1,), ...)

    def __post_init__(self) -> None:
        cuts = tuple(int(c) for c in self.cuts)
        object.__setattr__(self, "cuts", cuts)
        if len(cuts) < 2 or cuts[0] != 0 or any(b < a for a, b in zip(cuts, cuts[1:])):
            raise ValueError("plan cuts must start at 0 and be non-decreasing, got %r" % (cuts,))
        raw = self.groups if self.groups is not None else [(s,) for s in range(len(cuts) - 1)]
        groups = tuple(tuple(int(w) for w in g) for g in raw)
        object.__setattr__(self, "groups", groups)
        named = [w for g in groups for w in g]
        if len(groups) != len(cuts) - 1:
            raise ValueError("plan has %d stages of cuts and %d groups of workers" % (len(cuts) - 1, len(groups)))
        if any(not g for g in groups):
            raise ValueError("plan stage %d has no worker" % [len(g) for g in groups].index(0))
        if len(set(named)) != len(named) or any(w < 0 for w in named):
            raise ValueError("plan names a worker twice or a negative worker: %r" % (groups,))

    @property
    def n_stages(self) -> int:
        """S."""
        return len(self.cuts) - 1

    @property
    def n_segments(self) -> int:
        """Number of segments K the plan covers."""
        return self.cuts[-1]

    def stage_of(self, n_workers: int) -> List[int]:
        """The stage of each of n_workers workers (-1: the plan leaves it out)."""
        out = [-1] * int(n_workers)
        for s, g in enumerate(self.groups):
            for w in g:
                if w < n_workers:
                    out[w] = s
        return out

    def shape(self) -> str:
        """What kind of plan: `chain` (one worker per stage), `replicas` (one stage on several workers) or
        `hybrid`."""
        if all(len(g) == 1 for g in self.groups):
            return "chain"
        return "replicas" if len(self.groups) == 1 else "hybrid"

    def stage_bounds(self) -> List[Tuple[int, int]]:
        """(start cut, end cut) of each stage."""
        return list(zip(self.cuts[:-1], self.cuts[1:]))

    def stage_layers(self, graph) -> List[List[int]]:
        """Layer indices of each stage, from a LayerGraph's segment_layers."""
        return [[i for k in range(a, b) for i in graph.segment_layers(k)] for a, b in self.stage_bounds()]

    def cut_names(self, graph) -> List[str]:
        """Names of the cuts, for printing."""
        return [graph.cuts[c].name for c in self.cuts]

    def to_list(self) -> List[int]:
        """The cuts as a plain list (for JSON/proto)."""
        return list(self.cuts)

    @classmethod
    def from_list(cls, cuts: Sequence[int], n_segments: Optional[int] = None) -> "Plan":
        """A chain from a list of cuts; check the last cut equals n_segments when given."""
        plan = cls(tuple(int(c) for c in cuts))
        if n_segments is not None and plan.cuts[-1] != n_segments:
            raise ValueError("plan must end at cut %d, got %r" % (n_segments, plan.cuts))
        return plan

    @classmethod
    def from_stage_of(cls, cuts: Sequence[int], stage_of: Sequence[int]) -> "Plan":
        """The plan whose worker w serves stage stage_of[w] (-1: none); ValueError when a stage has no worker."""
        groups = [[] for _ in range(len(cuts) - 1)]
        for w, s in enumerate(stage_of):
            if s >= len(groups) or s < -1:
                raise ValueError("stage_of %r names a stage outside 0..%d" % (list(stage_of), len(groups) - 1))
            if s >= 0:
                groups[s].append(w)
        return cls(tuple(cuts), tuple(tuple(g) for g in groups))

    def __str__(self) -> str:
        return "Plan(%s; %s)" % (",".join(str(c) for c in self.cuts),
                                 " | ".join("+".join("w%d" % w for w in g) for g in self.groups))
