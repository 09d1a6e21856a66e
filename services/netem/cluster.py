"""The Shaper: keeps each shaped container's tc rules equal to what the links say for the running targets, changing
them in place as replicas come and go."""
from __future__ import annotations

import itertools
import logging
import subprocess
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from . import tc
from .links import Link, LinkError
from .targets import (  # noqa: F401
    NUMBER_LABEL,
    PROJECT_LABEL,
    SERVICE_LABEL,
    Target,
    concerns,
    is_source,
    pair_links,
    target_from_attrs,
    targets_from_attrs,
)

log = logging.getLogger(__name__)

Runner = Callable[[List[str], bool], str]  # (argv, may_fail) -> stdout
Pairs = Dict[Tuple[str, str], Link]  # (source target, destination target) -> link
Wanted = Dict[str, Tuple[str, tc.Shape]]  # peer target name -> (peer IP, shape)


class NetemError(RuntimeError):
    """A command that had to succeed failed."""


def shared_network(src: Target, dst: Target) -> Optional[str]:
    """The first network (by name) both containers are on, or None."""
    common = sorted(set(src.ips) & set(dst.ips))
    return common[0] if common else None


def desired_peers(src: Target, pairs: Pairs, targets: Dict[str, Target]) -> Tuple[Wanted, Optional[str]]:
    """({peer target: (its IP on a shared network, shape)}, src's own IP there) for src's running peers."""
    wanted: Wanted = {}
    own_ip = None
    for (name, peer), link in sorted(pairs.items()):
        if name != src.name:
            continue
        net = shared_network(src, targets[peer])
        if net is None:
            log.info("%s -> %s: on no shared network; not shaped", name, peer)
            continue
        wanted[peer] = (targets[peer].ips[net], link.shape)
        own_ip = own_ip or src.ips[net]
    return wanted, own_ip


def assign_slots(old: Dict[str, int], names: Iterable[str]) -> Dict[str, int]:
    """Peer target -> tc peer index: peers still there keep theirs (never renumbered), new ones (by name) take the
    lowest free indices, so indices stay below the number of peers at once; none beyond tc.MAX_PEERS."""
    names = set(names)
    slots = {name: index for name, index in old.items() if name in names}
    used = set(slots.values())
    free = (i for i in itertools.count() if i not in used)
    for name in sorted(names - set(slots)):
        index = next(free)
        if index < tc.MAX_PEERS:
            slots[name] = index
    return slots


@dataclass(frozen=True)
class Applied:
    """The rules set up in one container: which container (id, pid), on which device, each peer's index and the
    peers' rules as applied (None: unknown, the next sync starts afresh)."""

    container_id: str
    pid: int
    dev: str
    slots: Dict[str, int] = field(default_factory=dict)
    peers: Optional[tc.Peers] = None


def subprocess_runner(argv: List[str], may_fail: bool = False) -> str:
    """Run argv; raise NetemError with its stderr unless may_fail."""
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if proc.returncode != 0 and not may_fail:
        raise NetemError("%s: exit %d: %s" % (" ".join(argv), proc.returncode, proc.stderr.strip()))
    return proc.stdout


def netem_supported(run: Runner = subprocess_runner) -> bool:
    """True if the kernel has sch_netem (delay, jitter, loss); rates need only htb."""
    try:
        run(tc.netem_probe(), False)
        return True
    except (NetemError, OSError):
        return False


class Shaper:
    """Brings every source container's egress rules to what the links say, remembering what it applied."""

    def __init__(self, links: List[Link], run: Runner = subprocess_runner, netem: bool = True) -> None:
        self.links = links
        self.run = run
        self.netem = netem
        self.applied: Dict[str, Applied] = {}  # target name -> its rules
        self.known: Optional[Dict[str, Tuple[str, int]]] = None  # the links' targets at the last sync: (id, pid)
        self._warned = False

    def sync(self, targets: Dict[str, Target]) -> None:
        """Apply/update rules in every running source container; forget containers that went away."""
        pairs = pair_links(self.links, targets)
        self._log_arrivals(targets, pairs)
        for name in sorted(set(self.applied) - set(targets)):
            del self.applied[name]  # its network namespace went with it
        for name, src in sorted(targets.items()):
            wanted, own_ip = desired_peers(src, pairs, targets)
            if wanted or name in self.applied:
                self.sync_one(src, wanted, own_ip)

    def sync_one(self, src: Target, wanted: Wanted, own_ip: Optional[str]) -> None:
        """Apply the difference between src's applied rules and `wanted`, keeping its peers' indices."""
        state = self.applied.get(src.name)
        if state is not None and (state.container_id, state.pid) != (src.container_id, src.pid):
            del self.applied[src.name]  # a new container or a restart: a new namespace, start afresh
            state = None
        if state is None:
            if not wanted or own_ip is None:
                return
            state = Applied(src.container_id, src.pid, self.device(src.pid, own_ip))
        slots = assign_slots(state.slots, wanted)
        for name in sorted(set(wanted) - set(slots)):
            log.warning("%s -> %s: more than %d peers; not shaped", src.name, name, tc.MAX_PEERS)
        peers = {slots[name]: wanted[name] for name in slots}
        self._warn_if_no_netem(peers)
        old = state.peers
        self.applied[src.name] = replace(state, slots={}, peers=None)  # unknown until every command has run
        if old is None:  # older iproute2 lacks gso_max_segs: shaping still works, just coarser
            self.run(tc.in_netns(src.pid, tc.one_segment_per_packet(state.dev)), True)
        for i, argv in enumerate(tc.plan(state.dev, old, peers, self.netem)):
            self.run(tc.in_netns(src.pid, argv), old is None and i == 0)  # deleting a missing root may fail
        self.applied[src.name] = replace(state, slots=slots, peers=peers)
        if peers != old:
            log.info("%s (%s): %s", src.name, state.dev, describe(slots, peers))

    def device(self, pid: int, ip: str) -> str:
        """The interface holding `ip` inside the container's network namespace."""
        dev = tc.iface_for_ip(self.run(tc.in_netns(pid, tc.list_addresses()), False), ip)
        if dev is None:
            raise NetemError("no interface with address %s in process %d's network namespace" % (ip, pid))
        return dev

    def adopt(self, targets: Dict[str, Target]) -> None:
        """Record the device of every running container a link's source names, without changing its rules (so
        clear() can remove them)."""
        pairs = pair_links(self.links, targets)
        for name, src in sorted(targets.items()):
            if not is_source(self.links, src) or not src.ips:
                continue
            own_ip = desired_peers(src, pairs, targets)[1] or src.ips[sorted(src.ips)[0]]
            self.applied[name] = Applied(src.container_id, src.pid, self.device(src.pid, own_ip))

    def clear(self) -> None:
        """Remove every rule this shaper applied (containers that are gone are skipped)."""
        for name, state in sorted(self.applied.items()):
            try:
                self.run(tc.in_netns(state.pid, tc.delete_root(state.dev)), True)
                log.info("%s: rules removed", name)
            except (NetemError, OSError, LinkError) as exc:
                log.warning("%s: could not remove rules: %s", name, exc)
        self.applied.clear()

    def _log_arrivals(self, targets: Dict[str, Target], pairs: Pairs) -> None:
        """One line per target of the links that appeared, restarted or went away since the last sync."""
        now = {name: (t.container_id, t.pid) for name, t in targets.items() if concerns(self.links, t)}
        before, self.known = self.known, now
        if before is None:
            return
        for name in sorted(now):
            peers = {b if a == name else a for a, b in pairs if name in (a, b)}
            if name not in before:
                log.info("%s appeared: shaping it and its %d peers", name, len(peers))
            elif before[name] != now[name]:
                log.info("%s restarted: shaping it afresh and its %d peers", name, len(peers))
        for name in sorted(set(before) - set(now)):
            sources = sum(name in state.slots for other, state in self.applied.items() if other != name)
            log.info("%s went away: removing the rules toward it from %d peers", name, sources)

    def _warn_if_no_netem(self, peers: tc.Peers) -> None:
        if not self.netem and not self._warned and any(tc.impaired(shape) for _, shape in peers.values()):
            log.warning("this kernel has no sch_netem: delay, jitter and loss are NOT applied, only rates")
            self._warned = True


def describe(slots: Dict[str, int], peers: tc.Peers) -> str:
    """One line, by peer name: 'master-1 172.18.0.6 3 MB/s 20 ms +-2 ms 0.1% loss; worker-1 ...'."""
    parts = []
    for name, index in sorted(slots.items()):
        ip, shape = peers[index]
        text = "%s %s %g MB/s" % (name, ip, shape.rate)
        if tc.impaired(shape):
            text += " %g ms +-%g ms %g%% loss" % (shape.delay, shape.jitter, shape.loss)
        parts.append(text)
    return "; ".join(parts) or "no peers running"
