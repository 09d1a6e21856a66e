"""`cnnvideo local`: run trainer, workers and master as local OS processes on free 127.0.0.1 ports."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from cnnvideo import config, hostnet
from cnnvideo.artifacts import onnx_model_path
from cnnvideo.config import ConfigError
from cnnvideo.config_cameras import camera_configs
from cnnvideo.master.reporting import detector_lines
from cnnvideo.results import report as rpt

from . import linkemu, local_cameras, prefork

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 600.0  # model load + first profiling of big models on a busy machine


class Child:
    """One role process with its log streamed to our stderr behind a prefix."""

    def __init__(self, name: str, argv: List[str], env: Dict[str, str], log_path: str,
                 on_spawn=None) -> None:
        self.name = name
        self.on_spawn = on_spawn  # called with the new pid (CPU caps: join the role's cgroup)
        self.argv, self.env = argv, env
        self.restarts = 0
        self.quick_crashes = 0  # restarts in a row that ran less than RESET_AFTER_S (the back-off grows with them)
        self.log_file = open(log_path, "w")
        self.lines: List[str] = []
        self._spawn()

    def _spawn(self) -> None:
        self.started_at = time.time()
        self.proc = _forked(self.argv, self.env)
        if self.proc is None:
            self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self.env,
                                         start_new_session=True)
        if self.on_spawn is not None:
            try:
                self.on_spawn(self.name, self.proc.pid)
            except BaseException:  # e.g. it cannot be capped: it does not run on without its cap
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                self.log_file.close()
                raise
        self.thread = threading.Thread(target=self._pump, name="log-" + self.name, daemon=True)
        self.thread.start()

    def respawn(self) -> None:
        """Start the same command again (after it exited); its log continues in the same file."""
        self.thread.join(2)
        self.restarts += 1
        self._spawn()

    def _pump(self) -> None:
        prefix = "[%s] " % self.name
        buf = b""
        stdout = self.proc.stdout
        while True:
            chunk = stdout.read1(4096) if hasattr(stdout, "read1") else stdout.read(1)
            if not chunk:
                break
            buf += chunk.replace(b"\r", b"\n")  # progress bars redraw with \r: one line per redraw
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                if raw.strip():
                    self._emit(prefix, raw.decode("utf-8", "replace"))
        if buf.strip():
            self._emit(prefix, buf.decode("utf-8", "replace"))

    def _emit(self, prefix: str, line: str) -> None:
        if len(self.lines) < 1000:  # the first lines only (start-up problems): bounded memory on long runs
            self.lines.append(line)
        self.log_file.write(line + "\n")
        self.log_file.flush()
        sys.stderr.write(prefix + line + "\n")
        sys.stderr.flush()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self) -> None:
        """SIGTERM this child's own process group (it was started in a new session)."""
        if self.alive():
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`; only this child's own process group."""
        self.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(5)
        self.thread.join(2)
        self.log_file.close()


# "server": the fork server of this launcher, "off": why it is not used, "extra": what it preloads beyond PRELOAD
_PREFORK: Dict[str, Any] = {}


def _forked(argv: List[str], env: Dict[str, str]):
    """The role `argv` forked from the preloaded server (`prefork`), or None to start it as a new interpreter:
    another command, CNNVIDEO_PREFORK=0, or a server that failed (said once)."""
    args = prefork.role_argv(argv)
    if args is None or "off" in _PREFORK:
        return None
    if not prefork.enabled():
        _PREFORK["off"] = "%s=0" % prefork.ENV
        return None
    try:
        if "server" not in _PREFORK:
            _PREFORK["server"] = prefork.Server(env, _PREFORK.get("extra", prefork.ONNX_PRELOAD))
        return _PREFORK["server"].spawn(args, env)
    except OSError as exc:
        _PREFORK["off"] = str(exc)
        print("[local] roles start as new interpreters: the prefork server failed (%s)" % exc, file=sys.stderr,
              flush=True)
        return None


def close_prefork() -> None:
    """Let this launcher's fork server go (after its roles were stopped)."""
    server = _PREFORK.pop("server", None)
    if server is not None:
        server.close()


def stop_all(children: List[Child], timeout: float = 5.0) -> None:
    """Terminate every child at once, then wait for each (SIGKILL after `timeout`)."""
    for c in children:
        c.terminate()
    deadline = time.time() + timeout
    for c in children:
        c.stop(max(deadline - time.time(), 0.1))


def user_config(args) -> config.Config:
    """The config file of -c, or the demo (config.DEMO_PATH: the same file as configs/local.yml) without it, with
    --frames applied and validated (renamed keys and the model fallback resolved by config.load)."""
    overrides = {"frames": args.frames} if args.frames is not None else None
    try:
        return config.load(args.config or config.DEMO_PATH, overrides)  # several cameras: local_cameras
    except ConfigError as exc:
        if not args.config and "'video'" in str(exc):
            raise ConfigError("%s (run `make video` to fetch the sample video)" % exc) from None
        raise


def effective_config(args) -> Tuple[config.Config, str]:
    """Load the config (user_config), apply --out, and rewrite addresses to free ports."""
    from cnnvideo.rpc.net import free_port

    cfg = user_config(args)
    out = os.path.abspath(args.out or cfg.out)
    cfg.out = out
    if os.environ.get(linkemu.NETNS_ENV):  # the launcher inside the namespace: the outer one chose everything
        return cfg, args.config
    cfg.local.links, note = linkemu.resolve_links(cfg.local.links)
    if note:
        print("[local] links: %s" % note, file=sys.stderr, flush=True)
    from cnnvideo.video.sources import SourceError, kind_of, probe

    if local_cameras.several(cfg):  # each camera's source: one that cannot be opened is down, not fatal
        local_cameras.check_sources(cfg)
    else:
        try:
            probe(cfg.video)  # an unreachable URL or a missing device stops here, before any role starts
        except SourceError as exc:
            raise ConfigError("config key 'video': %s" % exc) from None
        if kind_of(cfg.video) == "file":  # a URL, device or pipeline is passed on as it is
            cfg.video = os.path.abspath(cfg.video)
    if cfg.trainer.video and kind_of(cfg.trainer.video) == "file":
        cfg.trainer.video = os.path.abspath(cfg.trainer.video)
    if cfg.weights not in ("imagenet", "random"):
        cfg.weights = os.path.abspath(cfg.weights)
    for attr in ("dir", "ca", "cert", "key"):  # children may resolve paths elsewhere
        if getattr(cfg.tls, attr):
            setattr(cfg.tls, attr, os.path.abspath(os.path.expanduser(getattr(cfg.tls, attr))))
    ports = set()
    while len(ports) < cfg.n_workers + 1:
        ports.add(free_port())
    ports_list = sorted(ports)
    cfg.cluster.trainer = "127.0.0.1:%d" % ports_list[0]
    cfg.cluster.workers = ["127.0.0.1:%d" % p for p in ports_list[1:]]
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "config.yml")
    config.dump(cfg, path)
    return cfg, path


def child_env() -> Dict[str, str]:
    """The environment of a role `cnnvideo local` starts (one thread for torch: the same results on every worker)."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _wait_servers(children: List[Child], addresses: List[str], timeout: float, rel=None) -> Optional[str]:
    """Wait until every server answers its health check, restarting one that dies meanwhile if `rel.restart`
    (up to rel.max_restarts); a message if one stayed dead or timed out."""
    from cnnvideo.rpc import net

    deadline = time.time() + timeout
    pending = list(zip(children, addresses))
    while pending:
        for child, addr in list(pending):
            if not child.alive() and rel is not None:
                _supervise([child], rel)
            if not child.alive():
                return "%s exited with code %s before it was ready" % (child.name, child.proc.returncode)
            if net.check_health(addr, timeout=1.0):
                pending.remove((child, addr))
        if not pending:
            return None
        if time.time() > deadline:
            return "timed out after %.0f s waiting for %s" % (timeout, ", ".join(c.name for c, _ in pending))
        time.sleep(0.3)
    return None


RESET_AFTER_S = 10.0  # a role that ran this long before it died restarts after the shortest back-off again


def _restart_delay(n: int) -> float:
    """Back-off before the n-th restart of a role (1, 2, ...): 0.5 s doubling up to 5 s."""
    return min(0.5 * 2 ** (n - 1), 5.0)


def _supervise(children: List[Child], rel) -> None:
    """Restart every role that died (like compose `restart: on-failure`) up to reliability.max_restarts each; one that
    exited with code 0 left on purpose (a worker sent SIGTERM drains and leaves the pool) and stays down."""
    for c in children:
        if c.alive() or not rel.restart or c.restarts >= rel.max_restarts or c.proc.returncode == 0:
            continue
        code = c.proc.returncode
        if time.time() - c.started_at >= RESET_AFTER_S:  # it ran a while: start the back-off over (as Docker does)
            c.quick_crashes = 0
        c.quick_crashes += 1
        delay = _restart_delay(c.quick_crashes)
        print("[local] %s exited (code %s); restarting it in %.1f s (%d/%d)" % (c.name, code, delay, c.restarts + 1,
                                                                              rel.max_restarts),
              file=sys.stderr, flush=True)
        time.sleep(delay)
        c.respawn()
        print("[local] started %s pid %d (restart %d)" % (c.name, c.pid, c.restarts), file=sys.stderr, flush=True)


def _wait_master(master: Child, others: List[Child], grace: float = 20.0, rel=None,
                 stopping: Callable[[], bool] = lambda: False) -> int:
    """Wait for the master, restarting crashed roles if `rel.restart`; if a role stays dead (no restarts, or
    out of restarts) and the master is still running `grace` s later, stop it. A master killed by a signal is
    restarted too, unless we were asked to stop (local_cameras.restarts_master)."""
    died_at = None
    while True:
        try:
            code = master.proc.wait(0.5)
        except subprocess.TimeoutExpired:
            code = None
        if code is not None:
            if not local_cameras.restarts_master(code, rel, master.restarts, stopping()):
                return code
            _supervise([master], rel)
            continue
        if rel is not None:
            _supervise(others, rel)
        dead = [c for c in others if not c.alive() and c.proc.returncode != 0]  # code 0: it left the pool
        if not dead:
            died_at = None
        if dead and died_at is None:
            died_at = time.time()
        if died_at is not None and time.time() - died_at > grace:
            print("cnnvideo local: error: %s exited (code %s) and the master did not stop; stopping it"
                  % (dead[0].name, dead[0].proc.returncode), file=sys.stderr, flush=True)
            master.stop()
            return 1


def _caps_line(caps: Dict[str, Any]) -> str:
    """The run summary's CPU caps: the method and each role's share, or why the roles ran uncapped."""
    shares = caps.get("shares") or {}
    if caps.get("method", "none") != "none" and shares:
        return "%s: %s" % (caps["method"], ", ".join("%s %g" % kv for kv in sorted(shares.items())))
    return "none (%s)" % (caps.get("note") or "no caps asked for")


def _plans_line(plans_used: List[Dict[str, Any]]) -> str:
    """Each plan the frames ran, in order, as its cut indices and frame count ('[0, 27, 40] 14 frames')."""
    return ", ".join("%s %d frames" % (p.get("cuts"), p.get("frames", 0)) for p in plans_used) or "-"


def _summary(report: Dict[str, Any]) -> str:
    lat = report.get("latency_s") or {}
    lines = [
        "",
        "%-22s %s" % ("model / mode", "%s / %s (%s)" % (report.get("model"), report.get("mode"),
                                                          report.get("scheduler"))),
        "%-22s %s / %s (lost %s)" % ("frames completed", report.get("completed"), report.get("frames"),
                                      report.get("lost")),
        "%-22s %s" % ("throughput (fps)", report.get("throughput_fps")),
        "%-22s mean %s  p50 %s  p95 %s  max %s" % ("latency (s)", lat.get("mean"), lat.get("p50"), lat.get("p95"),
                                                  lat.get("max")),
        "%-22s %s" % ("weights", report.get("weights_used") or report.get("weights")),
        "%-22s %s" % ("max abs error", report.get("max_abs_err")),
    ] + (detector_lines(report) if report.get("detector") else [
        "%-22s %s / %s" % ("top-1 agree / top-5", report.get("top1_agreement"), report.get("top5_overlap")),
        "%-22s %s" % ("top-1 labels (frames)", ", ".join("%s %d" % kv for kv in
                                                         list((report.get("top1_labels") or {}).items())[:5]) or "-"),
    ]) + [
        "%-22s retried %s  dropped %s  restarts %s" % ("reliability", report.get("retried"), report.get("dropped"),
                                                       report.get("restarts")),
        "%-22s %s" % ("plan (layers/worker)", " | ".join(str(len(p)) for p in report.get("plan") or [])),
        "%-22s %s" % ("plans used (cuts)", _plans_line(report.get("plans_used") or [])),
        "%-22s %s" % ("wall (s)", report.get("wall_s")),
        "%-22s %s" % ("links", report.get("link_emulation")),
        "%-22s %s" % ("cpu caps", _caps_line(report.get("cpu_caps") or {})),
        "%-10s %12s %14s %8s %10s" % ("hop", "bytes sent", "bytes dense", "ratio", "wire s"),
    ]
    for h in report.get("hops") or []:
        ratio = h.get("ratio")
        lines.append("%-10s %12d %14d %8s %10.3f" % (h["name"], h["bytes_sent"], h["bytes_dense"],
                                                   "-" if ratio is None else "%.3f" % ratio, h["transfer_s"]))
    return "\n".join(lines)


def _run_in_netns(cfg: config.Config, cfg_path: str, args) -> int:
    """links: tc. The same command again inside a fresh network namespace whose loopback is shaped per hop
    (entered with nsenter, so the inner launcher still sees the host's /sys/fs/cgroup for the CPU caps; live
    sources and the MQTT broker are reached from our namespace, see cnnvideo.hostnet); signals are passed on; the
    namespace goes when the run ends."""
    ns = linkemu.Namespace("cnnvideo-%d" % os.getpid())
    forward = None
    proc = None

    def on_signal(signum, _frame):
        if proc is not None and proc.poll() is None:
            proc.send_signal(signum)

    try:
        ns.create(cfg)
        ns.record(cfg.out)
        print("[local] links: tc in network namespace %s" % ns.name, file=sys.stderr, flush=True)
        forward = [linkemu.PortForward(ns, cfg.live_view.port + i, cfg.live_view.host)
                   for i in range(local_cameras.live_ports(cfg))] if cfg.live_view.port else []
        argv = ns.prefix() + [sys.executable, "-m", "cnnvideo"] + (["-v"] if getattr(args, "verbose", False) else [])
        # what the roles dial outside the run (a camera, the MQTT broker) goes through this (the host's) network
        env = dict(os.environ, **{linkemu.NETNS_ENV: ns.name, hostnet.HOST_NETNS_ENV: "/proc/%d/ns/net" % os.getpid()})
        proc = subprocess.Popen(argv + ["local", "-c", cfg_path, "--out", cfg.out], env=env)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        return proc.wait()
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(30)
        for f in forward or []:
            f.close()
        ns.delete()


def _run_cameras(cfg: config.Config, base: List[str], env: Dict[str, str], caps, children: List[Child],
                 signals: List[int]) -> int:
    """Several cameras: one master per camera on the running trainer and workers (local_cameras), then the
    combined report."""
    runs = []
    shared = list(children)
    names = local_cameras.masters(cfg)  # the cluster description's master per camera
    for name, path, one in local_cameras.write_configs(cfg):
        master = Child(names[name], base + ["master", "-c", path, "--out", one.out], env,
                       os.path.join(one.out, "master.log"), on_spawn=caps.add)
        children.append(master)
        runs.append((name, one, master))
        print("[local] started %s pid %d" % (names[name], master.pid), file=sys.stderr, flush=True)
    if signals:
        for _, _, master in runs:
            master.terminate()
    grid = local_cameras.start_grid(cfg, runs)
    try:
        codes = local_cameras.wait_masters([m for _, _, m in runs], shared, cfg.reliability, _supervise,
                                           stopping=lambda: bool(signals))
    finally:
        if grid is not None:
            grid.stop()
    extra = {"link_emulation": cfg.local.links, "cpu_caps": caps.summary()}
    restarts = {c.name: c.restarts for c in children if c.restarts}
    if restarts:
        extra["supervisor_restarts"] = restarts
    combined = local_cameras.combined_report(cfg, runs, codes, extra)
    for name, cam in combined["cameras"].items():
        if cam["status"] == "down":
            print("[local] camera %s is down: %s" % (name, cam["error"]), file=sys.stderr, flush=True)
    path = os.path.join(cfg.out, "report.json")
    rpt.write_json(combined, path)
    print(local_cameras.summary(combined))
    print("report: %s  per camera: %s" % (path, ", ".join(os.path.join(one.out, "report.json")
                                                          for _, one, _ in runs)))
    return local_cameras.exit_code(combined)


def run(args) -> int:
    from cnnvideo.model.loading import check_weights

    cfg, cfg_path = effective_config(args)  # ConfigError here: nothing has started yet
    if cfg.local.links == "tc" and not os.environ.get(linkemu.NETNS_ENV):
        check_weights(cfg)  # a bad model or weights file stops here, before the namespace is made
        return _run_in_netns(cfg, cfg_path, args)
    from cnnvideo.rpc import tls

    print("[local] %s, weights: %s" % (cfg.model, check_weights(cfg).describe()), file=sys.stderr, flush=True)

    tls.setup(cfg, "master")  # our health checks dial the roles like the master does (mTLS if configured)
    out = cfg.out
    env = child_env()
    cams = camera_configs(cfg)
    wanted = prefork.onnx_wanted(cam.engine for cam in cams)
    # the roles' torch model, built once in the server if its weights allow (zoo.prebuild); an ONNX file's is not
    models = sorted({prefork.model_arg(c.model, c.weights, c.seed) for c in cams if not onnx_model_path(c.model)})
    _PREFORK["extra"] = (prefork.ONNX_PRELOAD if wanted else ()) + tuple(models)
    base = [sys.executable, "-m", "cnnvideo"] + (["-v"] if getattr(args, "verbose", False) else [])
    children: List[Child] = []
    caps = linkemu.CpuCaps(local_cameras.master_shares(linkemu.role_shares(cfg), cfg), cfg.local.cpus)
    master: Optional[Child] = None
    signals = []

    def on_signal(signum, _frame):
        """First signal: the master drains its frames in flight and writes its report; a second one stops all."""
        signals.append(signum)
        masters = [c for c in children if c.name.startswith("master") and c.alive()]  # one per camera
        if masters and len(signals) == 1:
            print("[local] signal %d: the master drains and reports" % signum, file=sys.stderr, flush=True)
            for c in masters:
                c.terminate()
            return
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    try:
        children.append(Child("trainer", base + ["trainer", "-c", cfg_path], env, os.path.join(out, "trainer.log"),
                              on_spawn=caps.add))
        for i in range(cfg.n_workers):
            children.append(Child("w%d" % i, base + ["worker", "-c", cfg_path, "-i", str(i)], env,
                                  os.path.join(out, "w%d.log" % i), on_spawn=caps.add))
        for c in children:
            print("[local] started %s pid %d" % (c.name, c.pid), file=sys.stderr, flush=True)
        problem = _wait_servers(children, [cfg.cluster.trainer] + cfg.cluster.workers, STARTUP_TIMEOUT_S,
                                cfg.reliability)
        if problem:
            print("cnnvideo local: error: %s" % problem, file=sys.stderr)
            return 1
        report_path = os.path.join(out, "report.json")
        if os.path.exists(report_path):
            os.remove(report_path)
        if local_cameras.several(cfg):
            return _run_cameras(cfg, base, env, caps, children, signals)
        master = Child("master", base + ["master", "-c", cfg_path, "--out", out], env, os.path.join(out, "master.log"),
                       on_spawn=caps.add)
        children.append(master)
        print("[local] started master pid %d" % master.pid, file=sys.stderr, flush=True)
        if signals:  # a signal came while the roles were starting
            master.terminate()
        code = _wait_master(master, children[:-1], rel=cfg.reliability, stopping=lambda: bool(signals))
        restarts = {c.name: c.restarts for c in children if c.restarts}
        master.thread.join(5)
        report = None
        if os.path.isfile(report_path):
            report = rpt.read(report_path)
            report["link_emulation"] = cfg.local.links
            report["cpu_caps"] = caps.summary()
            if restarts:  # what the supervisor did, next to what the master saw
                report["supervisor_restarts"] = restarts
            rpt.write_json(report, report_path)
            print(_summary(report))
            print("report: %s  picture: %s  per frame: %s" % (report_path, os.path.join(out, "report.html"),
                                                              os.path.join(out, "results.jsonl")))
        if code != 0:
            print("cnnvideo local: master exited with code %d" % code, file=sys.stderr)
            return code if code > 0 else 1
        if report is None or report.get("completed") != report.get("frames") or report.get("lost"):
            print("cnnvideo local: not every frame completed", file=sys.stderr)
            return 1
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        stop_all(children)
        close_prefork()
        caps.remove()
