"""Shaping targets: one running container each, named `<service>-<n>` after its compose container number, and
which link shapes the traffic from one target to another."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, Iterable, List, Optional, Tuple

from .links import Link

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
NUMBER_LABEL = "com.docker.compose.container-number"


@dataclass(frozen=True)
class Target:
    """A running container: its name (`worker-2`), compose service, id, init process id and IPv4 per network."""

    name: str
    service: str
    container_id: str
    pid: int
    ips: Dict[str, str] = field(default_factory=dict)


def container_number(labels: Dict[str, str]) -> Optional[int]:
    """The compose container number label as a positive int, or None (absent or malformed)."""
    try:
        number = int(labels.get(NUMBER_LABEL) or "")
    except ValueError:
        return None
    return number if number > 0 else None


def target_from_attrs(attrs: dict, number: Optional[int] = None) -> Optional[Target]:
    """A Target from `docker inspect` data, numbered `number` if given, else by its number label; None if not
    running, not a compose service or without a number."""
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    state = attrs.get("State") or {}
    service = labels.get(SERVICE_LABEL)
    number = number or container_number(labels)
    if not service or not number or not state.get("Running") or not state.get("Pid"):
        return None
    networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
    ips = {net: info["IPAddress"] for net, info in networks.items() if (info or {}).get("IPAddress")}
    return Target(name="%s-%d" % (service, number), service=service, container_id=attrs.get("Id", ""),
                  pid=int(state["Pid"]), ips=ips)


def targets_from_attrs(all_attrs: Iterable[dict]) -> Dict[str, Target]:
    """Running compose containers keyed by target name. One without a number label (or with a number another
    running container of its service holds) takes its service's lowest free number, in container id order."""
    targets: Dict[str, Target] = {}
    unnumbered: List[Target] = []
    for attrs in sorted(all_attrs, key=lambda a: a.get("Id", "")):
        target = target_from_attrs(attrs)
        if target is not None and target.name not in targets:
            targets[target.name] = target
        elif target_from_attrs(attrs, 1) is not None:  # running, a service, no usable number
            unnumbered.append(target_from_attrs(attrs, 1))
    for target in unnumbered:
        number = next(n for n in range(1, len(targets) + 2) if "%s-%d" % (target.service, n) not in targets)
        targets["%s-%d" % (target.service, number)] = replace(target, name="%s-%d" % (target.service, number))
    return targets


def _rank(name: str, target: Target) -> Optional[int]:
    """1 if a link end names this very target, 0 if it names its service, None if neither."""
    return 1 if name == target.name else 0 if name == target.service else None


def is_source(links: Iterable[Link], target: Target) -> bool:
    """True if some link's source names the target or its service."""
    return any(_rank(link.src, target) is not None for link in links)


def concerns(links: Iterable[Link], target: Target) -> bool:
    """True if some link's source or destination names the target or its service."""
    return any(_rank(link.src, target) is not None or _rank(link.dst, target) is not None for link in links)


def link_between(links: Iterable[Link], src: Target, dst: Target) -> Optional[Link]:
    """The link shaping src's traffic to dst (None for src itself): the one naming the most of the two as targets
    rather than services; with one of each, the one naming the source target wins."""
    if src.name == dst.name:
        return None
    best: Optional[Tuple[Tuple[int, int], Link]] = None
    for link in links:
        s, d = _rank(link.src, src), _rank(link.dst, dst)
        if s is not None and d is not None and (best is None or (s + d, s) > best[0]):
            best = ((s + d, s), link)
    return best[1] if best else None


def pair_links(links: List[Link], targets: Dict[str, Target]) -> Dict[Tuple[str, str], Link]:
    """{(source target, destination target): link} for every ordered pair of distinct running targets a link
    concerns."""
    pairs = {}
    for src in targets.values():
        for dst in targets.values():
            link = link_between(links, src, dst)
            if link is not None:
                pairs[(src.name, dst.name)] = link
    return pairs
