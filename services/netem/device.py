"""`python -m netem.device`: shape this device's own egress by role, for one role per device (Raspberry Pis, Docker
Swarm nodes on host networking). Workers join the pool, so their addresses are in no file: the device is a master's
when one of its IPv4 addresses is a master's (--address master=IP; master-<camera>=IP each with several cameras),
the trainer's when it holds the config's cluster.trainer, else a worker's. On the interface that reaches the
master(s), htb shapes:
- on a master's device: to the trainer nothing, to any other destination `master>worker` (the default class);
- on a worker's device: to every master `worker>master`, to the trainer nothing, to any other destination
  `worker>worker` (the default class);
- on the trainer's device: nothing.
Rules are re-checked every few seconds (addresses and routes may come late) and removed on exit."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from . import tc
from .cluster import NetemError, Runner, netem_supported, subprocess_runner
from .links import Link, LinkError, check_name, parse_links

log = logging.getLogger("netem.device")

ROLE_LINKS = (("master", "worker"), ("worker", "worker"), ("worker", "master"))
Shapes = Dict[Tuple[str, str], tc.Shape]  # (sender kind, receiver kind) -> shape


@dataclass(frozen=True)
class Roles:
    """The addresses the device tells roles apart by: every master's (name -> IPv4) and the trainer's."""

    masters: Dict[str, str]
    trainer: Optional[str] = None


@dataclass(frozen=True)
class DeviceRules:
    """One interface's rules: the default class's shape (None: none) and the peers named by a filter."""

    default: Optional[tc.Shape]
    peers: tc.Peers = field(default_factory=dict)


def role_shapes(links: List[Link]) -> Shapes:
    """The links as {(src, dst): shape}; LinkError for any but master>worker, worker>worker, worker>master."""
    shapes = {}
    for link in links:
        if (link.src, link.dst) not in ROLE_LINKS:
            raise LinkError("link %s>%s: the device helper shapes by role (workers join: they have no names), so a "
                            "link is master>worker, worker>worker or worker>master" % (link.src, link.dst))
        shapes[(link.src, link.dst)] = link.shape
    return shapes


def is_master(role: str) -> bool:
    return role == "master" or role.startswith("master-")


def role_addresses(cluster: dict, extra: Dict[str, str]) -> Dict[str, str]:
    """Role -> host: the trainer from a cnnvideo config's `cluster` section (port dropped), then `extra`."""
    if not isinstance(cluster, dict):
        raise LinkError("the config has no 'cluster' section with the trainer's address")
    hosts = {}
    if cluster.get("trainer"):
        hosts["trainer"] = str(cluster["trainer"]).rsplit(":", 1)[0]
    hosts.update(extra)
    return hosts


def parse_address(spec: str) -> tuple:
    """ROLE=HOST (ROLE: master, master-<camera> or trainer) -> (role, host), else LinkError."""
    role, sep, host = spec.partition("=")
    if not sep or not host:
        raise LinkError("--address must be ROLE=HOST (e.g. master=192.168.1.20), got %r" % spec)
    role = check_name(role.strip())
    if not (is_master(role) or role == "trainer"):
        raise LinkError("--address %s: ROLE is master, master-<camera> or trainer (workers need no address)" % spec)
    return role, host.strip()


def resolve(hosts: Dict[str, str]) -> Roles:
    """The roles' IPv4 addresses (names resolved; an unresolvable one is left out with a warning)."""
    ips = {}
    for role, host in hosts.items():
        try:
            ips[role] = socket.gethostbyname(host)
        except OSError as exc:
            log.warning("%s: cannot resolve %s (%s); it is not told apart", role, host, exc)
    return Roles({r: ip for r, ip in ips.items() if is_master(r)}, ips.get("trainer"))


def local_addresses(ip_output: str) -> Dict[str, str]:
    """IPv4 -> interface from `ip -o -4 addr show` output."""
    found = {}
    for line in ip_output.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "inet":
            found[fields[3].split("/")[0]] = fields[1].split("@")[0]
    return found


def device_kind(roles: Roles, local: Dict[str, str]) -> str:
    """master, trainer or worker: which role this device (its addresses `local`) runs."""
    if any(ip in local for ip in roles.masters.values()):
        return "master"
    return "trainer" if roles.trainer in local else "worker"


def desired(shapes: Shapes, roles: Roles, local: Dict[str, str], route: Optional[str]) -> Dict[str, DeviceRules]:
    """Interface -> rules for this device: the master's interface (a master's device) or `route`, the one that
    reaches the master (a worker's). Peer 0 is the trainer (unshaped), then the masters by name, one per address."""
    kind = device_kind(roles, local)
    if kind == "trainer":
        return {}
    if kind == "master":
        dev = next(local[ip] for _, ip in sorted(roles.masters.items()) if ip in local)
        default, to_master = shapes.get(("master", "worker")), None
    else:
        dev, default, to_master = route, shapes.get(("worker", "worker")), shapes.get(("worker", "master"))
    peers: tc.Peers = {}
    if roles.trainer and default is not None:  # without a default class the trainer's traffic is unshaped anyway
        peers[0] = (roles.trainer, None)
    for index, (_, ip) in enumerate(sorted(roles.masters.items()), 1):
        if to_master is not None and all(ip != known for known, _ in peers.values()):
            peers[index] = (ip, to_master)
    peers = {i: peer for i, peer in peers.items() if peer[0] not in local}  # on this device: no link to shape
    if dev is None or (default is None and not peers):
        return {}
    return {dev: DeviceRules(default, peers)}


class DeviceShaper:
    """Keeps this device's tc rules equal to `desired`; remembers what it applied so changes are in place."""

    def __init__(self, shapes: Shapes, roles: Roles, run: Runner = subprocess_runner, netem: bool = True) -> None:
        self.shapes, self.roles, self.run, self.netem = shapes, roles, run, netem
        self.applied: Dict[str, DeviceRules] = {}

    def route(self, local: Dict[str, str]) -> Optional[str]:
        """The interface this device reaches the first master on (None: no route yet, or no master known)."""
        if not self.roles.masters:
            return None
        ip = sorted(self.roles.masters.items())[0][1]
        return tc.route_dev(self.run(tc.route_to(ip), True)) if ip not in local else local[ip]

    def sync(self) -> Dict[str, DeviceRules]:
        local = local_addresses(self.run(tc.list_addresses(), False))
        want = desired(self.shapes, self.roles, local, self.route(local))
        for dev in sorted(set(self.applied) - set(want)):
            self.run(tc.delete_root(dev), True)
            del self.applied[dev]
        for dev, rules in sorted(want.items()):
            old = self.applied.get(dev)
            fresh = old is None or (old.default is None) != (rules.default is None)  # the root qdisc changes
            if fresh:
                self.run(tc.one_segment_per_packet(dev), True)
                commands = tc.plan(dev, None, rules.peers, self.netem, default=rules.default)
            else:
                commands = tc.plan(dev, old.peers, rules.peers, self.netem)
                if rules.default != old.default:
                    commands += tc.default_commands(dev, rules.default, self.netem)
            for i, argv in enumerate(commands):
                self.run(argv, fresh and i == 0)  # a fresh start's first command deletes a root that may not exist
            if old != rules:
                log.info("%s: %s", dev, describe(rules))
            self.applied[dev] = rules
        return want

    def clear(self) -> None:
        for dev in sorted(self.applied):
            self.run(tc.delete_root(dev), True)
            log.info("%s: rules removed", dev)
        self.applied.clear()


def describe(rules: DeviceRules) -> str:
    """One line: each peer's address and rate (or unshaped), then every other destination's."""
    parts = ["%s %s" % (ip, "unshaped" if shape is None else "%g MB/s" % shape.rate)
             for _, (ip, shape) in sorted(rules.peers.items())]
    other = "unshaped" if rules.default is None else "%g MB/s" % rules.default.rate
    return ", ".join(parts + ["any other %s" % other])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m netem.device",
        description="Shape this device's egress by role: the master's, the trainer's, or else a worker's.",
        epilog="LINK: master>worker, worker>worker or worker>master, then ,rate=MBps[,delay=ms][,jitter=ms]"
               "[,loss=%%]; master<>worker both ways.")
    parser.add_argument("--config", required=True, help="cnnvideo config whose `cluster.trainer` is the trainer's")
    parser.add_argument("--address", action="append", default=[], metavar="ROLE=HOST",
                        help="a master's address (master, or master-<camera> each), or the trainer's if the config's "
                             "is not reachable as written")
    parser.add_argument("--link", action="append", default=[], metavar="LINK", help="a link to shape (repeatable)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between re-checks")
    parser.add_argument("--once", action="store_true", help="apply once and exit, leaving the rules in place")
    parser.add_argument("--ready-file", default="/tmp/netem.ready", help="touched after the first apply")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


def load_roles(path: str, addresses: List[str]) -> Roles:
    import yaml  # only the helper's image needs it

    try:
        with open(path) as fh:
            data = yaml.safe_load(fh) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise LinkError("config %s: %s" % (path, exc)) from exc
    extra = dict(parse_address(spec) for spec in addresses)
    if not any(is_master(role) for role in extra):
        raise LinkError("no master's address: --address master=HOST (the master has no server, so the config lacks it)")
    return resolve(role_addresses(data.get("cluster") if isinstance(data, dict) else None, extra))


def _terminate(signum, frame):
    raise SystemExit(0)


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s netem.device %(levelname)s: %(message)s", stream=sys.stderr)
    try:
        shapes = role_shapes(parse_links(args.link))
        if not shapes:
            raise LinkError("no --link given")
        roles = load_roles(args.config, args.address)
    except LinkError as exc:
        print("netem.device: error: %s" % exc, file=sys.stderr)
        return 2
    shaper = DeviceShaper(shapes, roles, netem=netem_supported())
    log.info("masters %s, trainer %s; netem %s", " ".join("%s=%s" % kv for kv in sorted(roles.masters.items())),
             roles.trainer or "unknown", "available" if shaper.netem else "MISSING (rates only)")
    signal.signal(signal.SIGTERM, _terminate)
    try:
        want = shaper.sync()
        if not want:
            log.info("nothing to shape on this device (the trainer's, or no route to the master yet)")
        if args.once:
            return 0
        with open(args.ready_file, "w") as fh:
            fh.write("ok\n")
        while True:
            time.sleep(args.interval)
            try:
                shaper.sync()
            except NetemError as exc:
                log.error("sync failed: %s", exc)
    except NetemError as exc:
        print("netem.device: error: %s" % exc, file=sys.stderr)
        return 1
    finally:
        if not args.once:
            shaper.clear()
            if os.path.exists(args.ready_file):
                os.remove(args.ready_file)


if __name__ == "__main__":
    sys.exit(main())
