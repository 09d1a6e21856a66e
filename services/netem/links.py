"""Link specs: which containers shape traffic to which peers, at what rate, delay, jitter and loss.

A link end names a compose service (`worker`: every running container of it) or one target (`worker-2`: the
container numbered 2 of service worker); targets.link_between picks the link for a pair of containers."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional

from .tc import LIMITS, UNITS, LinkError, Shape, check_value  # noqa: F401 (re-exported)

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


@dataclass(frozen=True)
class Link:
    """Traffic from `src`'s containers to `dst`'s (services or target names) is shaped by `shape` (on src's
    egress); `worker>worker` shapes each worker's traffic to every other worker."""

    src: str
    dst: str
    shape: Shape


def check_name(name: str) -> str:
    """A container or compose service name (letters, digits, _ . -), else LinkError."""
    if not NAME_RE.match(name or ""):
        raise LinkError("bad container/service name %r" % name)
    return name


def parse_number(key: str, text: str) -> float:
    """One number from text, with an optional unit suffix that must match the key's unit."""
    units = {"rate": ("mb/s", "mbps", "mb"), "delay": ("ms",), "jitter": ("ms",), "loss": ("%",)}
    raw = text.strip().lower()
    for suffix in units[key]:
        if raw.endswith(suffix):
            raw = raw[: -len(suffix)]
            break
    try:
        return float(raw)
    except ValueError:
        raise LinkError("%s must be a number in %s, got %r" % (key, UNITS[key], text)) from None


def parse_link(spec: str) -> List[Link]:
    """Parse 'SRC>DST,rate=3,delay=20,jitter=2,loss=0.5' ('SRC<>DST' = both directions) into links."""
    head, _, rest = spec.strip().partition(",")
    both = "<>" in head
    src, sep, dst = head.partition("<>" if both else ">")
    if not sep:
        raise LinkError("link %r must start with SRC>DST or SRC<>DST" % spec)
    values: Dict[str, float] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, text = item.partition("=")
        key = key.strip().lower()
        if not eq or key not in LIMITS:
            raise LinkError("link %r: unknown setting %r (known: %s)" % (spec, item, ", ".join(LIMITS)))
        if key in values:
            raise LinkError("link %r: %s given twice" % (spec, key))
        values[key] = parse_number(key, text)
    if "rate" not in values:
        raise LinkError("link %r needs rate=MB/s" % spec)
    try:
        shape = Shape(**values)
    except LinkError as exc:
        raise LinkError("link %r: %s" % (spec, exc)) from None
    src, dst = check_name(src.strip()), check_name(dst.strip())  # src == dst: between its distinct containers
    links = [Link(src, dst, shape)]
    return links + [Link(dst, src, shape)] if both and src != dst else links


def parse_links(specs: Iterable[str]) -> List[Link]:
    """Parse many specs (';' also separates specs); a later spec for the same src>dst replaces an earlier one."""
    by_pair: Dict[tuple, Link] = {}
    for spec in specs:
        for part in filter(None, (p.strip() for p in spec.split(";"))):
            for link in parse_link(part):
                by_pair[(link.src, link.dst)] = link
    return list(by_pair.values())


def find_link(links: Iterable[Link], src: str, dst: str) -> Optional[Link]:
    return next((link for link in links if link.src == src and link.dst == dst), None)
