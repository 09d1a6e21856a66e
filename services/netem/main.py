"""Command line and event loop: apply the links, reapply when containers (re)start, remove on exit."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import time
from typing import List, Optional

from .cluster import PROJECT_LABEL, NetemError, Shaper, netem_supported, subprocess_runner, targets_from_attrs
from .links import LinkError, parse_links

log = logging.getLogger("netem")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m netem",
        description="Shape traffic between the containers of one compose project, per destination, with tc.",
        epilog="LINK: SRC>DST,rate=MBps[,delay=ms][,jitter=ms][,loss=%%] (SRC<>DST shapes both ways); "
        "';' separates links in one argument. SRC and DST name a compose service (every running replica: "
        "worker>worker shapes each worker's traffic to every other one) or one container as <service>-<number> "
        "(worker-2), which wins over a service link for its pairs. Example: 'master<>worker,rate=3,delay=20'",
    )
    parser.add_argument("--link", action="append", default=[], metavar="LINK", help="a link to shape (repeatable)")
    parser.add_argument("--project", default=None, help="compose project (default: this container's own project)")
    parser.add_argument("--once", action="store_true", help="apply once and exit, leaving the rules in place")
    parser.add_argument("--clear", action="store_true",
                        help="remove the rules from every running container a link's source names, and exit")
    parser.add_argument("--dry-run", action="store_true", help="print the commands instead of running them")
    parser.add_argument("--ready-file", default="/tmp/netem.ready", help="touched after the first full apply")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


def own_project(client) -> str:
    """The compose project of the container this runs in (its hostname is its container id)."""
    try:
        return client.containers.get(socket.gethostname()).labels[PROJECT_LABEL]
    except Exception as exc:  # docker.errors.NotFound, KeyError: not in a compose container
        raise NetemError("cannot tell the compose project (pass --project): %s" % exc) from exc


def list_targets(client, project: str):
    """Running containers labelled with the project, keyed by target name (<service>-<container number>)."""
    # ignore_removed: a container removed between the list and its inspection (a replica scaled down) is skipped;
    # without it the whole sync failed with a 404 and the rules toward it were never removed
    containers = client.containers.list(filters={"label": "%s=%s" % (PROJECT_LABEL, project)}, ignore_removed=True)
    return targets_from_attrs(c.attrs for c in containers)


def dry_runner(argv: List[str], may_fail: bool = False) -> str:
    """Print a command instead of running it; queries still run so devices can be found."""
    if argv[-len(["ip", "-o", "-4", "addr", "show"]):] == ["ip", "-o", "-4", "addr", "show"]:
        return subprocess_runner(argv, may_fail)
    print(" ".join(argv))
    return ""


def watch(client, project: str, shaper: Shaper) -> None:
    """Reapply whenever a project container starts or dies (a replica added or gone, new namespace, new IP)."""
    filters = {"type": "container", "label": "%s=%s" % (PROJECT_LABEL, project), "event": ["start", "die"]}
    for event in client.events(decode=True, filters=filters):
        log.debug("event %s %s", event.get("status"), (event.get("Actor") or {}).get("Attributes", {}).get("name"))
        if not sync_logged(client, project, shaper):
            time.sleep(1.0)  # a container went mid-way: the next sync sees the project as it settled
            sync_logged(client, project, shaper)


def sync_logged(client, project: str, shaper: Shaper) -> bool:
    """One sync; failures are logged (a container may stop mid-way) and reported as False."""
    try:
        shaper.sync(list_targets(client, project))
        return True
    except (NetemError, OSError) as exc:
        log.error("sync failed: %s", exc)
        return False


def _terminate(signum, frame):
    raise SystemExit(0)


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s netem %(levelname)s: %(message)s", stream=sys.stderr)
    try:
        links = parse_links(args.link)
    except LinkError as exc:
        print("netem: error: %s" % exc, file=sys.stderr)
        return 2
    if not links:
        print("netem: error: no --link given", file=sys.stderr)
        return 2
    import docker  # only the event loop needs the SDK

    client = docker.from_env()
    project = args.project or own_project(client)
    run = dry_runner if args.dry_run else subprocess_runner
    shaper = Shaper(links, run=run, netem=netem_supported())
    log.info("project %s, %d links, netem %s", project, len(links), "available" if shaper.netem else "MISSING")
    if args.clear:
        shaper.adopt(list_targets(client, project))
        shaper.clear()
        return 0
    signal.signal(signal.SIGTERM, _terminate)
    ok = sync_logged(client, project, shaper)
    if args.once or args.dry_run:
        return 0 if ok else 1
    try:
        with open(args.ready_file, "w") as fh:
            fh.write(project + "\n")
        watch(client, project, shaper)
    finally:
        shaper.clear()
        if os.path.exists(args.ready_file):
            os.remove(args.ready_file)
    return 0
