"""`cnnvideo local-worker OUT`: one more worker for the running `cnnvideo local` cluster whose output folder is OUT.

It reads the config the launcher wrote (OUT/config.yml: the cluster's settings and its join address, `cluster.join`),
starts `cnnvideo worker --join` on a free loopback port with the launcher's environment and the CPU cap of a worker
(`cpus: workers`, as the launcher caps its own), and waits. Its input link is paced like the others under
`local.links: paced`, and under `local.links: tc` (the cluster runs in a network namespace of its own, named in
OUT/netns) it re-runs itself inside that namespace and shapes the hop into its port at a worker's rate, as the
launcher shapes its own; the rule goes when it leaves. Ctrl-C or SIGTERM removes it: the worker drains its frames and
leaves, and the master plans without it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from cnnvideo import config, hostnet
from cnnvideo.errors import ConfigError
from cnnvideo.rpc.net import free_port

from . import linkemu
from .launcher import Child, child_env, close_prefork, stop_all


def run(args) -> int:
    path = os.path.join(args.out, "config.yml")
    if not os.path.isfile(path):
        raise ConfigError("%s is not the output folder of a running `cnnvideo local` (no config.yml in it)" % args.out)
    cfg = config.load(path, check_files=False)
    if not cfg.cluster.join:
        raise ConfigError("config key 'cluster.join' is empty in %s: its master takes no joining workers (set it, "
                          "e.g. 127.0.0.1:50070, and start the cluster again)" % path)
    if cfg.local.links == "tc" and not os.environ.get(linkemu.NETNS_ENV):
        return _in_namespace(args.out)
    listen = "127.0.0.1:%d" % free_port()
    shaped = None
    if cfg.local.links == "tc":  # inside the cluster's namespace: the hop into it, as the launcher's hop_rules
        shaped = linkemu.shape_port(int(listen.rsplit(":", 1)[1]), cfg.bandwidth_bytes(cfg.n_workers + 1)[-1])
    name = "w+%s" % listen.rsplit(":", 1)[1]
    share = cfg.cpu_share("w%d" % cfg.n_workers)  # a worker without its own key: `workers`
    caps = linkemu.CpuCaps({name: share} if share is not None else {}, cfg.local.cpus)
    argv = [sys.executable, "-m", "cnnvideo", "worker", "-c", path, "--join", cfg.cluster.join, "--listen", listen]
    # as the launcher starts its workers: forked from a preloaded server, capped from the start, its log behind a
    # prefix here and in OUT/<name>.log
    child = Child(name, argv, child_env(), os.path.join(args.out, name + ".log"), on_spawn=caps.add)
    print("[local-worker] started %s pid %d on %s: it joins the pool of the master at %s%s%s" % (
        name, child.pid, listen, cfg.cluster.join, ", capped at %g CPU" % share if caps.dirs else "",
        ", its hop shaped by tc at %.3g MB/s" % (cfg.bandwidth_bytes(cfg.n_workers + 1)[-1] / 1e6)
        if shaped is not None else ""), file=sys.stderr, flush=True)

    def leave(signum, _frame):  # the worker drains, then exits: a second signal stops it at once
        child.proc.send_signal(signum)

    signal.signal(signal.SIGTERM, leave)
    signal.signal(signal.SIGINT, leave)
    try:
        return child.proc.wait()
    finally:
        stop_all([child])
        close_prefork()
        caps.remove()
        if shaped is not None:
            linkemu.unshape_port(shaped)


def _in_namespace(out: str) -> int:
    """The same command again inside the namespace of the tc run writing to `out` (nsenter, as the launcher enters
    it); signals are passed on. ConfigError when that run is not going."""
    name = linkemu.recorded_namespace(out)
    if name is None:
        raise ConfigError("the `cnnvideo local` run writing to %s is not running (no network namespace named in %s)"
                          % (out, os.path.join(out, linkemu.NETNS_FILE)))
    env = dict(os.environ, **{linkemu.NETNS_ENV: name, hostnet.HOST_NETNS_ENV: "/proc/%d/ns/net" % os.getpid()})
    proc = subprocess.Popen(linkemu.Namespace(name).prefix() + [sys.executable, "-m", "cnnvideo", "local-worker",
                                                                out], env=env)

    def forward(signum, _frame):
        if proc.poll() is None:
            proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    return proc.wait()
