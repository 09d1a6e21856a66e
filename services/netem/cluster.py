"""Containers of one compose project as shaping targets, and the Shaper that keeps their tc rules in sync."""
from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from . import tc
from .links import Link, LinkError, links_from

log = logging.getLogger(__name__)

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"

Runner = Callable[[List[str], bool], str]  # (argv, may_fail) -> stdout


class NetemError(RuntimeError):
    """A command that had to succeed failed."""


@dataclass(frozen=True)
class Target:
    """A running container: its service name, init process id and IPv4 address per network."""

    name: str
    container_id: str
    pid: int
    ips: Dict[str, str] = field(default_factory=dict)


def target_from_attrs(attrs: dict) -> Optional[Target]:
    """A Target from `docker inspect` data (None if not running or not a compose service)."""
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    state = attrs.get("State") or {}
    name = labels.get(SERVICE_LABEL)
    if not name or not state.get("Running") or not state.get("Pid"):
        return None
    networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
    ips = {net: info["IPAddress"] for net, info in networks.items() if (info or {}).get("IPAddress")}
    return Target(name=name, container_id=attrs.get("Id", ""), pid=int(state["Pid"]), ips=ips)


def targets_from_attrs(all_attrs: Iterable[dict]) -> Dict[str, Target]:
    """Targets keyed by service name; with several replicas of a service, the first one by id wins."""
    targets: Dict[str, Target] = {}
    for attrs in sorted(all_attrs, key=lambda a: a.get("Id", "")):
        target = target_from_attrs(attrs)
        if target is not None:
            targets.setdefault(target.name, target)
    return targets


def shared_network(src: Target, dst: Target) -> Optional[str]:
    """The first network (by name) both containers are on, or None."""
    common = sorted(set(src.ips) & set(dst.ips))
    return common[0] if common else None


def desired_peers(src: Target, links: List[Link], targets: Dict[str, Target]) -> Tuple[Dict[int, tuple], Optional[str]]:
    """({peer index: (peer IP, shape)}, src's own IP on the shared network) for src's running peers."""
    peers: Dict[int, tuple] = {}
    own_ip = None
    for index, link in enumerate(links_from(links, src.name)):
        dst = targets.get(link.dst)
        net = shared_network(src, dst) if dst else None
        if net is None:
            log.info("%s -> %s: peer not running or on no shared network; not shaped yet", src.name, link.dst)
            continue
        peers[index] = (dst.ips[net], link.shape)
        own_ip = own_ip or src.ips[net]
    return peers, own_ip


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
        self.applied: Dict[str, Tuple[int, str, Dict[int, tuple]]] = {}  # name -> (pid, dev, peers)
        self._warned = False

    def sources(self) -> List[str]:
        return sorted({link.src for link in self.links})

    def sync(self, targets: Dict[str, Target]) -> None:
        """Apply/update rules in every running source container; forget containers that went away."""
        for name in self.sources():
            src = targets.get(name)
            if src is None:
                self.applied.pop(name, None)
                continue
            self.sync_one(src, targets)

    def sync_one(self, src: Target, targets: Dict[str, Target]) -> None:
        """Apply the difference between src's applied rules and its links' desired rules."""
        peers, own_ip = desired_peers(src, self.links, targets)
        if own_ip is None:
            return
        self._warn_if_no_netem(peers)
        dev = self.device(src.pid, own_ip)
        before = self.applied.get(src.name)
        old = before[2] if before and before[:2] == (src.pid, dev) else None  # new container: start afresh
        if old is None:  # older iproute2 lacks gso_max_segs: shaping still works, just coarser
            self.run(tc.in_netns(src.pid, tc.one_segment_per_packet(dev)), True)
        for i, argv in enumerate(tc.plan(dev, old, peers, self.netem)):
            self.run(tc.in_netns(src.pid, argv), old is None and i == 0)  # deleting a missing root may fail
        self.applied[src.name] = (src.pid, dev, peers)
        log.info("%s (%s): %s", src.name, dev, describe(peers, self.links_named(src.name)))

    def links_named(self, src: str) -> List[str]:
        return [link.dst for link in links_from(self.links, src)]

    def device(self, pid: int, ip: str) -> str:
        """The interface holding `ip` inside the container's network namespace."""
        dev = tc.iface_for_ip(self.run(tc.in_netns(pid, tc.list_addresses()), False), ip)
        if dev is None:
            raise NetemError("no interface with address %s in process %d's network namespace" % (ip, pid))
        return dev

    def adopt(self, targets: Dict[str, Target]) -> None:
        """Record the devices of running sources without changing their rules (so clear() can remove them)."""
        for name in self.sources():
            src = targets.get(name)
            peers, own_ip = desired_peers(src, self.links, targets) if src else ({}, None)
            if own_ip is not None:
                self.applied[name] = (src.pid, self.device(src.pid, own_ip), peers)

    def clear(self) -> None:
        """Remove every rule this shaper applied (containers that are gone are skipped)."""
        for name, (pid, dev, _) in sorted(self.applied.items()):
            try:
                self.run(tc.in_netns(pid, tc.delete_root(dev)), True)
                log.info("%s: rules removed", name)
            except (NetemError, OSError, LinkError) as exc:
                log.warning("%s: could not remove rules: %s", name, exc)
        self.applied.clear()

    def _warn_if_no_netem(self, peers: Dict[int, tuple]) -> None:
        if not self.netem and not self._warned and any(tc.impaired(shape) for _, shape in peers.values()):
            log.warning("this kernel has no sch_netem: delay, jitter and loss are NOT applied, only rates")
            self._warned = True


def describe(peers: Dict[int, tuple], names: List[str]) -> str:
    """One line: 'worker0 172.18.0.3 3 MB/s 20 ms +-2 ms 0.1% loss; ...'."""
    parts = []
    for index, (ip, shape) in sorted(peers.items()):
        text = "%s %s %g MB/s" % (names[index], ip, shape.rate)
        if tc.impaired(shape):
            text += " %g ms +-%g ms %g%% loss" % (shape.delay, shape.jitter, shape.loss)
        parts.append(text)
    return "; ".join(parts) or "no peers running"
