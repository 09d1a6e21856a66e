"""What `cnnvideo local` emulates of a cluster: the configured per-hop rates and per-role CPU caps.

Links (`local.links`):
- `tc`: every role runs in one fresh network namespace; its loopback gets an htb class per hop at the hop's rate,
  matched on the TCP port of the worker the hop goes into (rules from cnnvideo.tcrules, the netem helper's
  builder), one segment per packet so small messages are paced too. The live view's port is forwarded from the
  host's 127.0.0.1. Needs root and `ip netns`. The roles enter it with `nsenter --net` (not `ip netns exec`,
  which remounts /sys and so hides /sys/fs/cgroup: the CPU caps need it). What a role dials outside the run (a
  live source, the MQTT broker) still reaches the host's network: hostnet.HOST_NETNS_ENV names the host's
  namespace, and cnnvideo.hostnet opens those connections there.
- `paced`: each sender waits bytes / rate before a send (cnnvideo.wire.pacing), in user space.
- `none`: unshaped loopback.
`auto` picks tc where it can, else paced.

CPU caps (`local.cpus`): a cgroup per capped role (v2 `cpu.max`, else v1 `cpu.cfs_quota_us`). Caps asked for
(`cpus:` shares) that cannot be applied stop the run with one line (ConfigError), in `auto` as in `cgroup`;
`best-effort` (the demo's) runs uncapped then, with one warning; `local.cpus: none` runs uncapped on purpose; the
report's `cpu_caps` says which.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import subprocess
import threading
from typing import Dict, List, Optional, Tuple

from cnnvideo import hostnet, tcrules
from cnnvideo.config import Config, ConfigError
from cnnvideo.cpucap import own_cgroup

log = logging.getLogger(__name__)

NETNS_ENV = "CNNVIDEO_LOCAL_NETNS"  # set for the launcher that runs inside the namespace
NETNS_FILE = "netns"  # in a tc run's output folder while it runs: its namespace's name (`cnnvideo local-worker`)
CFS_PERIOD_US = 100000


def _run(argv: List[str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(argv), (proc.stderr or proc.stdout).strip()))
    return proc


def netns_possible() -> Tuple[bool, str]:
    """(True, '') if this process can make a network namespace with htb on its loopback, else (False, why)."""
    if os.geteuid() != 0:
        return False, "not root"
    if not shutil.which("ip") or not shutil.which("tc"):
        return False, "ip/tc (iproute2) not installed"
    probe = "cnnvideo-probe-%d" % os.getpid()
    try:
        if _run(["ip", "netns", "add", probe], check=False).returncode != 0:
            return False, "ip netns add failed"
        ok = _run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb"],
                  check=False).returncode == 0
        return (True, "") if ok else (False, "no htb qdisc in a network namespace")
    finally:
        _run(["ip", "netns", "del", probe], check=False)


def resolve_links(mode: str) -> Tuple[str, str]:
    """(tc|paced|none, note) for `local.links`; ConfigError if tc is asked for and cannot be had."""
    if mode in ("paced", "none"):
        return mode, ""
    ok, why = netns_possible()
    if ok:
        return "tc", ""
    if mode == "tc":
        raise ConfigError("config key 'local.links' is tc, but tc in a network namespace is not possible here (%s);"
                          " use paced or none" % why)
    return "paced", "tc not possible (%s): sends paced in user space" % why


def hop_rules(cfg: Config, dev: str = "lo") -> List[List[str]]:
    """tc commands shaping hop i (traffic to worker i's port) at bandwidth[i] on `dev`; the return hop and the
    trainer are not shaped."""
    commands = [tcrules.root_qdisc(dev)]
    for i, (addr, rate) in enumerate(zip(cfg.cluster.workers, cfg.bandwidth_bytes())):
        shape = tcrules.Shape(rate=rate / 1e6)
        commands += tcrules.peer_commands(dev, i, shape, netem=False)
        commands.append(tcrules.port_filter(dev, i, int(addr.rpartition(":")[2])))
    return commands + [tcrules.one_segment_per_packet(dev)]


def shape_port(port: int, rate_bytes: float, dev: str = "lo") -> int:
    """Shape the traffic into TCP `port` at `rate_bytes` a second, as hop_rules shapes a worker's hop (run inside
    the cluster's namespace): a class of its own at the first free index (`tc class add` fails on one taken, so two
    workers added at once do not share one). The index, for unshape_port."""
    shape = tcrules.Shape(rate=rate_bytes / 1e6)
    listing = _run(["tc", "class", "show", "dev", dev]).stdout
    used = {int(m, 16) - tcrules.FIRST_MINOR for m in re.findall(r"class htb 1:([0-9a-f]+)", listing)}
    for index in range(tcrules.MAX_PEERS):
        if index in used:
            continue
        argv = tcrules.peer_class(dev, index, shape)
        argv[2] = "add"
        if _run(argv, check=False).returncode == 0:
            _run(tcrules.port_filter(dev, index, int(port)))
            return index
    raise RuntimeError("no free tc class on %s for the hop into port %d" % (dev, port))


def unshape_port(index: int, dev: str = "lo") -> None:
    """Remove what shape_port added (best effort: the namespace may be gone with the run)."""
    _run(tcrules.delete_filter(dev, index), check=False)
    _run(tcrules.delete_class(dev, index), check=False)


def recorded_namespace(out: str) -> Optional[str]:
    """The namespace of the tc run writing to `out`, from its NETNS_FILE; None when no such run is going."""
    try:
        with open(os.path.join(out, NETNS_FILE)) as f:
            name = f.read().strip()
    except OSError:
        return None
    return name if name and os.path.exists("/var/run/netns/%s" % name) else None


class Namespace:
    """A network namespace for one `cnnvideo local` run, its loopback shaped per hop."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.made = False
        self.recorded: Optional[str] = None  # the NETNS_FILE naming it, while the run lasts

    def record(self, out: str) -> None:
        """Name the namespace in `out`/NETNS_FILE, where `cnnvideo local-worker OUT` finds it."""
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, NETNS_FILE)
        with open(path, "w") as f:
            f.write(self.name + "\n")
        self.recorded = path

    def create(self, cfg: Config) -> None:
        _run(["ip", "netns", "add", self.name])
        self.made = True
        # a 1500-byte MTU like a real link: with loopback's 64 KB packets htb lets a whole small message through
        # while its bucket is positive, so a frame's delta would cross a "3 MB/s" hop almost instantly
        _run(["ip", "-n", self.name, "link", "set", "lo", "up", "mtu", "1500"])
        for argv in hop_rules(cfg):
            _run(["ip", "netns", "exec", self.name] + argv)
        log.info("links: namespace %s, %s", self.name, ", ".join("hop %d %.3g MB/s" % (i, b / 1e6)
                                                                for i, b in enumerate(cfg.bandwidth_bytes())))

    def path(self) -> str:
        return "/var/run/netns/%s" % self.name

    def prefix(self) -> List[str]:
        """Run a command in the namespace. nsenter, not `ip netns exec`: that one also remounts /sys for the
        namespace, and an empty /sys/fs/cgroup leaves no cgroup to cap the roles in."""
        return ["nsenter", "--net=%s" % self.path(), "--"]

    def socket(self) -> socket.socket:
        """A TCP socket inside the namespace (made by a thread that entered it: setns acts per thread)."""
        return hostnet.in_netns(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM), self.path(),
                                     name="netns-socket")

    def delete(self) -> None:
        if self.recorded:
            try:
                os.remove(self.recorded)
            except OSError:
                pass
            self.recorded = None
        if self.made:
            _run(["ip", "netns", "del", self.name], check=False)
            self.made = False


class PortForward:
    """Host 127.0.0.1:port -> the namespace's 127.0.0.1:port (the live view of a master inside it)."""

    def __init__(self, ns: Namespace, port: int, host: str = "127.0.0.1") -> None:
        self.ns, self.port = ns, port
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, port))
        self.listener.listen(16)
        self.closed = False
        self.thread = threading.Thread(target=self._accept, name="live-view-forward", daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                inner = self.ns.socket()
                inner.connect(("127.0.0.1", self.port))
            except OSError:
                client.close()
                continue
            for a, b in ((client, inner), (inner, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.closed = True
        self.listener.close()


# ---------------------------------------------------------------------- CPU caps
def role_shares(cfg: Config) -> Dict[str, float]:
    """CPU share per local role name (trainer, w0.., master) from `cpus` (Config.cpu_share: worker<i>, else
    workers)."""
    out: Dict[str, float] = {}
    for role in ["trainer", "master"] + ["w%d" % w for w in range(cfg.n_workers)]:
        share = cfg.cpu_share(role)
        if share is not None:
            out[role] = float(share)
    return out


class CpuCaps:
    """One cgroup per capped role under this process's cgroup; children join theirs as they start."""

    def __init__(self, shares: Dict[str, float], mode: str = "auto", root: str = "/sys/fs/cgroup") -> None:
        self.shares = dict(shares)
        self.mode = mode
        self.method = "none"
        self.note = ""
        self.dirs: Dict[str, str] = {}
        self.base: Optional[str] = None
        if mode == "none" or not self.shares:
            self.note = "no caps asked for" if not self.shares else "local.cpus: none: roles ran uncapped"
            return
        try:
            self._make(root)
        except OSError as exc:  # caps were asked for (`cpus:`): a run that ignored them would measure another setup
            self.remove()
            asked = ", ".join("%s %g" % kv for kv in sorted(self.shares.items()))
            if mode == "best-effort":  # the demo's choice: its caps only shape the split, so run on, and say so
                self.note = "local.cpus: best-effort: no cgroup writable here (%s), roles ran uncapped" % exc
                log.warning("CPU caps (%s) not applied: no cgroup writable here (%s); roles run uncapped, so the "
                            "plan may put every layer on one worker", asked, exc)
                return
            raise ConfigError("config key 'cpus' asks for CPU caps (%s) but no cgroup is writable here (%s); set "
                              "local.cpus: none to run uncapped" % (asked, exc)) from None

    def _make(self, root: str) -> None:
        name = "cnnvideo-%d" % os.getpid()
        v2 = os.path.isfile(os.path.join(root, "cgroup.controllers"))
        if v2:
            own = os.path.join(root, own_cgroup(2))
            with open(os.path.join(own, "cgroup.subtree_control"), "w") as fh:
                fh.write("+cpu")
            self.base = os.path.join(own, name)
            os.mkdir(self.base)
            with open(os.path.join(self.base, "cgroup.subtree_control"), "w") as fh:
                fh.write("+cpu")
        else:
            cpu = next((os.path.join(root, d) for d in ("cpu", "cpu,cpuacct") if os.path.isdir(os.path.join(root, d))),
                       None)
            if cpu is None:
                raise OSError("no cpu controller under %s" % root)
            self.base = os.path.join(cpu, own_cgroup(1), name)
            os.mkdir(self.base)
        for role, share in self.shares.items():
            path = os.path.join(self.base, role)
            os.mkdir(path)
            self.dirs[role] = path
            quota = max(int(share * CFS_PERIOD_US), 1000)
            if v2:
                with open(os.path.join(path, "cpu.max"), "w") as fh:
                    fh.write("%d %d" % (quota, CFS_PERIOD_US))
            else:
                with open(os.path.join(path, "cpu.cfs_period_us"), "w") as fh:
                    fh.write(str(CFS_PERIOD_US))
                with open(os.path.join(path, "cpu.cfs_quota_us"), "w") as fh:
                    fh.write(str(quota))
        self.method = "cgroup-v2" if v2 else "cgroup-v1"

    def add(self, role: str, pid: int) -> None:
        """Move process `pid` (all its threads) into the role's cgroup, if the role is capped; ConfigError (one
        line) if it cannot be moved."""
        path = self.dirs.get(role)
        if path is None:
            return
        try:
            with open(os.path.join(path, "cgroup.procs"), "w") as fh:
                fh.write(str(pid))
        except OSError as exc:
            raise ConfigError("config key 'cpus' caps %s at %g CPU, but its process %d cannot join cgroup %s (%s)"
                              % (role, self.shares[role], pid, path, exc.strerror or exc)) from None

    def summary(self) -> Dict[str, object]:
        return {"method": self.method, "shares": self.shares if self.method != "none" else {}, "note": self.note}

    def remove(self) -> None:
        """Remove the cgroups (after every child has exited)."""
        for path in list(self.dirs.values()) + ([self.base] if self.base else []):
            try:
                os.rmdir(path)
            except OSError:
                pass
        self.dirs = {}
        self.base = None
