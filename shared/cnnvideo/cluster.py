"""One description of a cluster, the one every way of deploying renders: its cameras (one master each), its pool of
workers (a count, one CPU cap, one link rate where they are alike), the trainer, the CPU caps and the links.

`cnnvideo local` (tools/launcher.py, tools/local_cameras.py), compose (scripts/compose_workers.py: the compose
file, its netem helper's links), the Pi compose file and the Swarm stack all take their roles, names, caps and
links from a Cluster, and add only what their way of running needs (a process, a service, a placement). The rules
live here once:
- masters: one per camera; `master` when the cluster has one camera, `master-<camera>` each when it has several;
- workers: `worker<i>` (i < workers), all alike unless a cap or a link rate is given per worker;
- links (issue 44's pool, docs/deploy/compose.md): link i is the link INTO worker i (every master and every other
  worker sends to worker i at its rate), the return link into the masters (every worker sends results to every
  master at its rate); a chain links master <> worker0 <> ... <> worker<n-1> <> master instead.

A Cluster is plain data (no config loading, no YAML) so that scripts/compose_workers.py reads it with the
standard library alone. `from_config` builds one from a typed config. Scaling the workers as one service
(issue 45) needs `workers` as a count and `alike()` true: one cap and one link rate for all.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

from cnnvideo.config_types import Config

TOPOLOGIES = ("pool", "chain")
Number = Union[int, float, str]  # a str: a value templated at deploy time (`${HOP0_RATE:-3}`)


@dataclass(frozen=True)
class Link:
    """One link's settings: rate in MB/s (10^6 bytes/s), delay and jitter in ms, loss in percent. Any of them may
    be a text templated at deploy time (compose's `${HOP0_RATE:-3}`)."""

    rate: Number = 3.0
    delay_ms: Number = 0
    jitter_ms: Number = 0
    loss_pct: Number = 0

    def settings(self) -> str:
        """The netem helper's text after a link's names: rate=3,delay=0,jitter=0,loss=0."""
        return "rate=%s,delay=%s,jitter=%s,loss=%s" % tuple(
            "%g" % v if isinstance(v, (int, float)) else v for v in (self.rate, self.delay_ms, self.jitter_ms,
                                                                      self.loss_pct))

    @staticmethod
    def templated(prefix: str, rate: Number = 3) -> "Link":
        """A link whose settings are read from the environment at deploy time (<prefix>_RATE, _DELAY_MS, ...)."""
        return Link("${%s_RATE:-%s}" % (prefix, rate), "${%s_DELAY_MS:-0}" % prefix, "${%s_JITTER_MS:-0}" % prefix,
                    "${%s_LOSS_PCT:-0}" % prefix)


@dataclass
class Cluster:
    """A cluster's roles, caps and links. `worker_cpus` / `link_in`: one value for every worker, or one per worker;
    `cameras`: the camera names in file order (one camera may be unnamed: its master is `master`)."""

    cameras: Tuple[str, ...] = ("",)
    workers: int = 2
    worker_cpus: Union[Optional[Number], Tuple[Optional[Number], ...]] = None  # None: uncapped
    link_in: Union[Link, Tuple[Link, ...]] = field(default_factory=Link)
    link_return: Link = field(default_factory=Link)
    master_cpus: Optional[Number] = None
    trainer_cpus: Optional[Number] = None
    topology: str = "pool"

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("a cluster needs at least one worker, got %d" % self.workers)
        if self.topology not in TOPOLOGIES:
            raise ValueError("topology must be one of %s, got %r" % (", ".join(TOPOLOGIES), self.topology))
        if not self.cameras:
            raise ValueError("a cluster needs at least one camera")
        for what, value in (("worker CPU caps", self.worker_cpus), ("link rates", self.link_in)):
            if isinstance(value, tuple) and len(value) != self.workers:
                raise ValueError("%d %s for %d workers" % (len(value), what, self.workers))

    # --------------------------------------------------------------------------- roles
    @property
    def several(self) -> bool:
        return len(self.cameras) > 1

    def masters(self) -> List[Tuple[str, str]]:
        """(role name, camera) of every master: ("master", camera) for one camera, ("master-<camera>", camera) each
        for several."""
        if not self.several:
            return [("master", self.cameras[0])]
        return [("master-%s" % cam, cam) for cam in self.cameras]

    def master_names(self) -> List[str]:
        return [name for name, _ in self.masters()]

    def worker_names(self) -> List[str]:
        return ["worker%d" % i for i in range(self.workers)]

    def alike(self) -> bool:
        """True when every worker has one cap and one link rate (what one scaled `worker` service can run)."""
        return not isinstance(self.worker_cpus, tuple) and not isinstance(self.link_in, tuple)

    def worker_cap(self, i: int) -> Optional[Number]:
        return self.worker_cpus[i] if isinstance(self.worker_cpus, tuple) else self.worker_cpus

    def link_into(self, i: int) -> Link:
        """The link into worker i (i < workers), or the return link into the masters (i = workers)."""
        if i == self.workers:
            return self.link_return
        return self.link_in[i] if isinstance(self.link_in, tuple) else self.link_in

    def cpu_caps(self) -> Dict[str, Number]:
        """{role name: CPU share} of every capped role: trainer, each master, worker<i>."""
        caps: Dict[str, Number] = {}
        if self.trainer_cpus is not None:
            caps["trainer"] = self.trainer_cpus
        if self.master_cpus is not None:
            caps.update({name: self.master_cpus for name in self.master_names()})
        for i, name in enumerate(self.worker_names()):
            if self.worker_cap(i) is not None:
                caps[name] = self.worker_cap(i)
        return caps

    # --------------------------------------------------------------------------- links
    def paths(self) -> List[Tuple[str, str, int]]:
        """(sender, receiver, link) of every directed path the pool uses, grouped by receiver: every master and
        every other worker send to worker i over link i; every worker sends results to every master over the
        return link (index `workers`)."""
        workers = self.worker_names()
        masters = self.master_names()
        paths = [(src, dst, i) for i, dst in enumerate(workers) for src in masters + workers if src != dst]
        return paths + [(w, m, self.workers) for m in masters for w in workers]

    def link_specs(self) -> List[str]:
        """The netem helper's link specs: `src>dst,SETTINGS` per pool path (each shaped at its receiver's link), or
        for a chain `a<>b,SETTINGS` per hop (the hops between workers once, each master's two hops its own)."""
        if self.topology == "pool":
            return ["%s>%s,%s" % (src, dst, self.link_into(k).settings()) for src, dst, k in self.paths()]
        specs: List[str] = []
        settings = [self.link_into(k).settings() for k in range(self.workers + 1)]
        for master in self.master_names():
            chain = [master] + self.worker_names() + [master]
            specs += [spec for spec in ("%s<>%s,%s" % (a, b, s) for a, b, s in zip(chain[:-1], chain[1:], settings))
                      if spec not in specs]
        return specs

    def link_args(self) -> List[str]:
        """link_specs as the helper's arguments: --link SPEC ..."""
        out: List[str] = []
        for spec in self.link_specs():
            out += ["--link", spec]
        return out


def per_worker(value, workers: int, what: str):
    """One value for every worker as it is; a list or tuple of `workers` values as a tuple (ValueError otherwise)."""
    if isinstance(value, (list, tuple)):
        if len(value) != workers:
            raise ValueError("%d %s for %d workers" % (len(value), what, workers))
        values = tuple(value)
        return values[0] if len(set(values)) == 1 else values
    return value


def from_rates(cameras: Sequence[str], workers: int, rates, cpus, topology: str = "pool",
               master_cpus: Optional[Number] = None, trainer_cpus: Optional[Number] = None) -> Cluster:
    """A Cluster from link rates (MB/s of every link, or the workers+1 links: into worker0..n-1, into the masters)
    and worker caps (one, or one per worker); a rate may be a Link already."""
    if isinstance(rates, (list, tuple)):
        if len(rates) != workers + 1:
            raise ValueError("%d link rates for %d links (into each of %d workers, and into the masters)"
                             % (len(rates), workers + 1, workers))
        links = tuple(r if isinstance(r, Link) else Link(r) for r in rates)
        link_in, link_return = per_worker(links[:workers], workers, "link rates"), links[workers]
    else:
        link_in = link_return = rates if isinstance(rates, Link) else Link(rates)
    return Cluster(tuple(cameras) or ("",), workers, per_worker(cpus, workers, "worker CPU caps"), link_in,
                   link_return, master_cpus, trainer_cpus, topology)


def from_config(cfg: Config, topology: str = "pool") -> Cluster:
    """The Cluster a typed config describes: its cameras (the `video:` shorthand is one unnamed camera), its
    workers, `cpus` (worker<i>, else workers) and `bandwidth` (the hop into each worker; the return link at the
    last hop's rate)."""
    names = tuple(c.name for c in cfg.cameras) if len(cfg.cameras) > 1 else ("",)
    bandwidth = [b / 1e6 for b in cfg.bandwidth_bytes()]
    caps = [cfg.cpu_share("worker%d" % i) for i in range(cfg.n_workers)]
    return from_rates(names, cfg.n_workers, bandwidth + [bandwidth[-1]], caps, topology,
                      cfg.cpu_share("master"), cfg.cpu_share("trainer"))
