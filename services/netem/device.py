"""`python -m netem.device`: shape this device's own egress per destination, for one role per device
(Raspberry Pis, Docker Swarm nodes on host networking). Which roles live here is found by matching the
device's IPv4 addresses against the cluster addresses file that every device shares; rules are
re-checked every few seconds (addresses may come late) and removed on exit."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import time
from typing import Dict, List, Optional

from . import tc
from .cluster import NetemError, Runner, netem_supported, subprocess_runner
from .links import Link, LinkError, check_name, parse_links

log = logging.getLogger("netem.device")


def role_addresses(cluster: dict, extra: Dict[str, str]) -> Dict[str, str]:
    """Role -> host from a cnnvideo config's `cluster` section (trainer, workers[i] -> worker<i>), then `extra`."""
    if not isinstance(cluster, dict):
        raise LinkError("the config has no 'cluster' section with the role addresses")
    hosts = {}
    if cluster.get("trainer"):
        hosts["trainer"] = str(cluster["trainer"]).rsplit(":", 1)[0]
    for i, addr in enumerate(cluster.get("workers") or []):
        hosts["worker%d" % i] = str(addr).rsplit(":", 1)[0]
    hosts.update(extra)
    return hosts


def parse_address(spec: str) -> tuple:
    """ROLE=HOST -> (role, host), else LinkError."""
    role, sep, host = spec.partition("=")
    if not sep or not host:
        raise LinkError("--address must be ROLE=HOST (e.g. master=192.168.1.20), got %r" % spec)
    return check_name(role), host.strip()


def resolve(hosts: Dict[str, str]) -> Dict[str, str]:
    """Role -> IPv4 (names resolved; an unresolvable one is left out with a warning)."""
    ips = {}
    for role, host in hosts.items():
        try:
            ips[role] = socket.gethostbyname(host)
        except OSError as exc:
            log.warning("%s: cannot resolve %s (%s); its links are not shaped", role, host, exc)
    return ips


def local_addresses(ip_output: str) -> Dict[str, str]:
    """IPv4 -> interface from `ip -o -4 addr show` output."""
    found = {}
    for line in ip_output.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "inet":
            found[fields[3].split("/")[0]] = fields[1].split("@")[0]
    return found


def desired(links: List[Link], roles: Dict[str, str], local: Dict[str, str]) -> Dict[str, tc.Peers]:
    """Interface -> peers ({link index: (peer IP, shape)}) for the links whose source role lives here."""
    want: Dict[str, tc.Peers] = {}
    for index, link in enumerate(links):
        src_ip, dst_ip = roles.get(link.src), roles.get(link.dst)
        if src_ip not in local or dst_ip is None or dst_ip in local:
            continue  # not ours, unknown peer, or a peer on this same device (no link to shape)
        peers = want.setdefault(local[src_ip], {})
        if all(ip != dst_ip for ip, _ in peers.values()):  # one class per destination
            peers[index] = (dst_ip, link.shape)
    return want


class DeviceShaper:
    """Keeps this device's tc rules equal to `desired`; remembers what it applied so changes are in place."""

    def __init__(self, links: List[Link], roles: Dict[str, str], run: Runner = subprocess_runner,
                 netem: bool = True) -> None:
        self.links, self.roles, self.run, self.netem = links, roles, run, netem
        self.applied: Dict[str, tc.Peers] = {}

    def sync(self) -> Dict[str, tc.Peers]:
        local = local_addresses(self.run(tc.list_addresses(), False))
        want = desired(self.links, self.roles, local)
        for dev in sorted(set(self.applied) - set(want)):
            self.run(tc.delete_root(dev), True)
            del self.applied[dev]
        for dev, peers in sorted(want.items()):
            old = self.applied.get(dev)
            if old is None:
                self.run(tc.one_segment_per_packet(dev), True)
            for i, argv in enumerate(tc.plan(dev, old, peers, self.netem)):
                self.run(argv, old is None and i == 0)
            if old != peers:
                names = ", ".join("%s %s %g MB/s" % (self.links[k].dst, ip, shape.rate)
                                  for k, (ip, shape) in sorted(peers.items()))
                log.info("%s: %s", dev, names or "no peers")
            self.applied[dev] = peers
        return want

    def clear(self) -> None:
        for dev in sorted(self.applied):
            self.run(tc.delete_root(dev), True)
            log.info("%s: rules removed", dev)
        self.applied.clear()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m netem.device",
        description="Shape this device's egress per destination from the shared cluster addresses file.",
        epilog="LINK as for python -m netem: SRC>DST,rate=MBps[,delay=ms][,jitter=ms][,loss=%%]; SRC<>DST both ways.")
    parser.add_argument("--config", required=True, help="cnnvideo config whose `cluster` section has the addresses")
    parser.add_argument("--address", action="append", default=[], metavar="ROLE=HOST",
                        help="an address the config lacks (the master only dials out, so it has none there)")
    parser.add_argument("--link", action="append", default=[], metavar="LINK", help="a link to shape (repeatable)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between re-checks")
    parser.add_argument("--once", action="store_true", help="apply once and exit, leaving the rules in place")
    parser.add_argument("--ready-file", default="/tmp/netem.ready", help="touched after the first apply")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


def load_roles(path: str, addresses: List[str]) -> Dict[str, str]:
    import yaml  # only the helper's image needs it

    try:
        with open(path) as fh:
            data = yaml.safe_load(fh) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise LinkError("config %s: %s" % (path, exc)) from exc
    extra = dict(parse_address(spec) for spec in addresses)
    return resolve(role_addresses(data.get("cluster") if isinstance(data, dict) else None, extra))


def _terminate(signum, frame):
    raise SystemExit(0)


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s netem.device %(levelname)s: %(message)s", stream=sys.stderr)
    try:
        links = parse_links(args.link)
        if not links:
            raise LinkError("no --link given")
        roles = load_roles(args.config, args.address)
    except LinkError as exc:
        print("netem.device: error: %s" % exc, file=sys.stderr)
        return 2
    shaper = DeviceShaper(links, roles, netem=netem_supported())
    log.info("roles %s; netem %s", " ".join("%s=%s" % kv for kv in sorted(roles.items())),
             "available" if shaper.netem else "MISSING (rates only)")
    signal.signal(signal.SIGTERM, _terminate)
    try:
        want = shaper.sync()
        if not want:
            log.info("no role's address is on this device: nothing to shape here")
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
