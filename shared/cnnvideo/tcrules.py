"""tc rules as argument lists (pure functions, stdlib only): htb root, a class + netem per peer, a u32 filter on
the peer's IP (containers, the netem helper) or on its TCP port (one namespace, `cnnvideo local`); optionally a
default class that shapes every destination no filter names, and peers left unshaped (a filter to htb's direct
queue), for a device shaped by role (netem.device).

The one rule builder of the project: services/netem (a copy sits in its image) and the local launcher use it.
"""
from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

LIMITS = {"rate": (0.001, 10000.0), "delay": (0.0, 60000.0), "jitter": (0.0, 60000.0), "loss": (0.0, 100.0)}
UNITS = {"rate": "MB/s", "delay": "ms", "jitter": "ms", "loss": "%"}


class LinkError(ValueError):
    """A link spec or value is malformed or out of range; the message names it."""


@dataclass(frozen=True)
class Shape:
    """One direction of a link: rate in MB/s (10^6 bytes/s), delay and jitter in ms, loss in percent."""

    rate: float
    delay: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0

    def __post_init__(self) -> None:
        for key, (low, high) in LIMITS.items():
            check_value(key, getattr(self, key), low, high)

    @property
    def rate_bits(self) -> int:
        return int(round(self.rate * 8e6))

    @property
    def rate_bytes(self) -> int:
        return int(round(self.rate * 1e6))


def check_value(key: str, value: object, low: float, high: float) -> float:
    """Return value as float if it is a finite number in [low, high], else raise LinkError naming key."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LinkError("%s must be a number, got %r" % (key, value))
    if not low <= value <= high:
        raise LinkError("%s must be in [%g, %g] %s, got %r" % (key, low, high, UNITS[key], value))
    return float(value)


Argv = List[str]
Peers = Dict[int, Tuple[str, Optional[Shape]]]  # peer index -> (peer IP, shape; None: unshaped, htb's direct queue)
ROOT = "1:"
DIRECT = "1:0"  # a filter's flowid naming the htb qdisc itself: the packet leaves by the direct queue, unshaped
DEFAULT_MINOR = 0xF  # the default class (every destination no filter names), when there is one
FIRST_MINOR = 0x10  # class 1:10 is the first peer; 1:1..1:e are left free
MAX_PEERS = 0xFFF - FIRST_MINOR  # u32 node ids in table 800: go up to 0xfff
NETEM_LIMIT = 10000  # packets netem may hold (the default 1000 drops at high rate x delay)
DEV_RE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


def check_dev(dev: str) -> str:
    """A network interface name (at most 15 of letters, digits, _ . -), else LinkError."""
    if not DEV_RE.match(dev or ""):
        raise LinkError("bad interface name %r" % dev)
    return dev


def check_ipv4(ip: str) -> str:
    """A dotted IPv4 address, else LinkError."""
    try:
        return str(ipaddress.IPv4Address(ip))
    except (ipaddress.AddressValueError, ValueError):
        raise LinkError("bad IPv4 address %r" % ip) from None


def minor(index: int) -> int:
    """Class minor / netem major / u32 node id of the peer at `index`."""
    if not 0 <= index < MAX_PEERS:
        raise LinkError("peer index %d out of range (at most %d peers)" % (index, MAX_PEERS))
    return FIRST_MINOR + index


def burst_bytes(shape: Shape) -> int:
    """htb burst: 1 ms at the rate, at least two full-size frames (a small burst keeps short messages honest)."""
    return max(3028, shape.rate_bytes // 1000)


def quantum_bytes(shape: Shape) -> int:
    """htb quantum set explicitly (rate/10 clamped), so tc never warns that r2q gives a bad one."""
    return min(max(shape.rate_bytes // 10, 1600), 60000)


def root_qdisc(dev: str, default: bool = False) -> Argv:
    """htb at the root; unclassified traffic (no filter match) leaves unshaped via htb's direct queue, or with
    `default` by the default class (1:f, default_commands)."""
    argv = ["tc", "qdisc", "add", "dev", check_dev(dev), "root", "handle", ROOT, "htb"]
    return argv + ["default", "%x" % DEFAULT_MINOR] if default else argv


def htb_class(dev: str, m: int, shape: Shape) -> Argv:
    """The htb class 1:<m> that caps its traffic at the link rate (replace changes it in place)."""
    rate = "%dbit" % shape.rate_bits
    burst = "%db" % burst_bytes(shape)
    return ["tc", "class", "replace", "dev", check_dev(dev), "parent", ROOT, "classid", "1:%x" % m,
            "htb", "rate", rate, "ceil", rate, "burst", burst, "cburst", burst, "quantum", str(quantum_bytes(shape))]


def netem_leaf(dev: str, m: int, shape: Shape) -> Argv:
    """The netem qdisc under class 1:<m>: delay (+ jitter) and loss; every value given so replace resets it."""
    argv = ["tc", "qdisc", "replace", "dev", check_dev(dev), "parent", "1:%x" % m, "handle", "%x:" % m,
            "netem", "limit", str(NETEM_LIMIT), "delay", "%gms" % shape.delay]
    if shape.jitter > 0:
        argv.append("%gms" % shape.jitter)
    return argv + ["loss", "%g%%" % shape.loss]


def peer_class(dev: str, index: int, shape: Shape) -> Argv:
    """The htb class that caps traffic to one peer at the link rate (replace changes it in place)."""
    return htb_class(dev, minor(index), shape)


def peer_netem(dev: str, index: int, shape: Shape) -> Argv:
    """The netem qdisc under a peer's class."""
    return netem_leaf(dev, minor(index), shape)


def default_commands(dev: str, shape: Shape, netem: bool) -> List[Argv]:
    """The default class (root_qdisc with `default`) at `shape` (+ its netem leaf when the kernel has netem)."""
    return [htb_class(dev, DEFAULT_MINOR, shape)] + ([netem_leaf(dev, DEFAULT_MINOR, shape)] if netem else [])


def peer_filter(dev: str, index: int, ip: str, direct: bool = False) -> Argv:
    """u32 filter sending packets for the peer's IP to its class, under a fixed handle (800::minor); with `direct`
    to htb's direct queue instead (unshaped, even when the qdisc has a default class)."""
    m = minor(index)
    return ["tc", "filter", "add", "dev", check_dev(dev), "parent", ROOT, "protocol", "ip", "prio", "1",
            "handle", "800::%x" % m, "u32", "match", "ip", "dst", check_ipv4(ip) + "/32",
            "flowid", DIRECT if direct else "1:%x" % m]


def port_filter(dev: str, index: int, port: int) -> Argv:
    """u32 filter sending TCP packets to destination `port` to the peer's class (all roles in one namespace)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise LinkError("bad TCP port %r" % (port,))
    m = minor(index)
    return ["tc", "filter", "add", "dev", check_dev(dev), "parent", ROOT, "protocol", "ip", "prio", "1",
            "handle", "800::%x" % m, "u32", "match", "ip", "protocol", "6", "0xff", "match", "ip", "dport",
            str(port), "0xffff", "flowid", "1:%x" % m]


def delete_filter(dev: str, index: int) -> Argv:
    """Remove a peer's u32 filter (the kernel keeps a u32 selector on replace, so a new IP needs del + add)."""
    return ["tc", "filter", "del", "dev", check_dev(dev), "parent", ROOT, "protocol", "ip", "prio", "1",
            "handle", "800::%x" % minor(index), "u32"]


def delete_class(dev: str, index: int) -> Argv:
    """Remove a peer's class (its netem qdisc goes with it)."""
    return ["tc", "class", "del", "dev", check_dev(dev), "classid", "1:%x" % minor(index)]


def delete_root(dev: str) -> Argv:
    """Remove every rule on the interface (back to the kernel default qdisc)."""
    return ["tc", "qdisc", "del", "dev", check_dev(dev), "root"]


def impaired(shape: Shape) -> bool:
    """True if the shape needs netem (any delay, jitter or loss)."""
    return shape.delay > 0 or shape.jitter > 0 or shape.loss > 0


def peer_commands(dev: str, index: int, shape: Shape, netem: bool) -> List[Argv]:
    """Class (+ netem leaf when the kernel has netem) for one peer."""
    return [peer_class(dev, index, shape)] + ([peer_netem(dev, index, shape)] if netem else [])


def plan(dev: str, old: Optional[Peers], new: Peers, netem: bool = True, default: Optional[Shape] = None) -> List[Argv]:
    """Commands taking `dev` from rules `old` (None = unknown, start afresh) to `new` ({index: (ip, shape)}; a
    shape None leaves that peer unshaped). `default`, on a fresh start only: the default class's shape (every
    destination no filter names); change it in place with default_commands.

    A fresh start deletes the root first: the caller ignores that one command's failure (nothing to delete).
    """
    if old is None:
        commands = [delete_root(dev), root_qdisc(dev, default is not None)]
        commands += default_commands(dev, default, netem) if default is not None else []
        for index, (ip, shape) in sorted(new.items()):
            commands += peer_commands(dev, index, shape, netem) if shape is not None else []
            commands.append(peer_filter(dev, index, ip, direct=shape is None))
        return commands
    commands = []
    for index in sorted(set(old) - set(new)):
        commands += [delete_filter(dev, index)] + ([delete_class(dev, index)] if old[index][1] is not None else [])
    for index, (ip, shape) in sorted(new.items()):
        before = old.get(index)
        if shape is not None and (before is None or before[1] != shape):
            commands += peer_commands(dev, index, shape, netem)
        if before is None or before[0] != ip or (before[1] is None) != (shape is None):
            commands += ([delete_filter(dev, index)] if before else []) + [peer_filter(dev, index, ip, shape is None)]
        if before is not None and before[1] is not None and shape is None:
            commands.append(delete_class(dev, index))  # its filter goes to the direct queue now
    return commands


def one_segment_per_packet(dev: str) -> Argv:
    """Stop TCP handing `dev` 64 KB GSO super-packets: htb lets a whole one through while its bucket is
    positive, so small messages would cross a slow link almost instantly; one MSS per packet paces them."""
    return ["ip", "link", "set", "dev", check_dev(dev), "gso_max_size", "1500", "gso_max_segs", "1"]


def in_netns(pid: int, argv: Argv) -> Argv:
    """Run argv in the network namespace of process `pid` (a container's init)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise LinkError("bad process id %r" % (pid,))
    return ["nsenter", "-t", str(pid), "-n", "--"] + list(argv)


def list_addresses() -> Argv:
    """`ip` command whose output iface_for_ip parses."""
    return ["ip", "-o", "-4", "addr", "show"]


def route_to(ip: str) -> Argv:
    """`ip` command whose output route_dev parses: the route this host takes to `ip`."""
    return ["ip", "-o", "-4", "route", "get", check_ipv4(ip)]


def route_dev(route_output: str) -> Optional[str]:
    """The interface of `ip -o -4 route get IP` output (`10.0.9.5 via 10.0.9.1 dev eth0 src ...` -> eth0), or None."""
    fields = route_output.split()
    return fields[fields.index("dev") + 1] if "dev" in fields[:-1] else None


def iface_for_ip(ip_output: str, ip: str) -> Optional[str]:
    """The interface holding `ip` in `ip -o -4 addr show` output (eth0@if12 -> eth0), or None."""
    for line in ip_output.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "inet" and fields[3].split("/")[0] == ip:
            return fields[1].split("@")[0]
    return None


def netem_probe() -> Argv:
    """A command that succeeds only if the kernel has sch_netem (run in a throwaway network namespace)."""
    return ["unshare", "--net", "--", "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]
