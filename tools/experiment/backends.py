"""Where the runs of an experiment run: `cnnvideo local` per run, or a compose project with long-lived trainer,
workers and tc helper and a fresh master container per run (as many workers as the spec says: the compose file
is scripts/compose_workers.py's, hop rates and CPU caps set through its environment variables)."""
from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import yaml

from cnnvideo import config
from cnnvideo.results import progress
from cnnvideo.wire import settings

from .spec import ExperimentError, _merge, bandwidth_list, n_workers, run_cpus, run_workers

log = logging.getLogger(__name__)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
COMPOSE_FILE = "docker-compose.exp.yml"  # written into the exported tree by ComposeBackend
POLL_S = 0.1  # how often a watched run's progress.json is read


def role_addresses(n: int) -> Dict[str, Any]:
    """What a run config gets in the compose project: service names as addresses, the image's video and cache."""
    return {"cluster": {"trainer": "trainer:50051", "workers": ["worker%d:50060" % i for i in range(n)]},
            "video": "/usr/share/cnnvideo/vtest.avi", "cache_dir": "/var/cache/cnnvideo"}


def compose_workers(src: str):
    """scripts/compose_workers.py of the tree at `src` (the one owner of N-worker compose files), as a module."""
    spec = importlib.util.spec_from_file_location("compose_workers", os.path.join(src, "scripts", "compose_workers.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def hop_links(n: int, rates: Sequence[float]) -> Dict[str, float]:
    """{link name: MB/s} of the n+1 hops of an n-worker chain: hop i into worker i at rates[i], the return hop
    (last worker -> master) at rates[-1]."""
    if len(rates) != n:
        raise ExperimentError("%d workers need %d bandwidths (one per hop into a worker), got %r"
                              % (n, n, list(rates)))
    chain = ["master"] + ["worker%d" % i for i in range(n)] + ["master"]
    return {"%s<>%s" % (a, b): float(rates[min(i, n - 1)]) for i, (a, b) in enumerate(zip(chain[:-1], chain[1:]))}


class LocalBackend:
    """`cnnvideo local` per run, with the link and CPU emulation `cnnvideo local` applies (local.links: tc in a
    network namespace where it can, else paced sends; local.cpus: a cgroup per capped role): each report's
    `link_emulation` and `cpu_caps` say which."""

    name = "local"

    def __init__(self, spec: Dict[str, Any], work: str) -> None:
        self.spec = spec
        self.work = work

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def facts(self) -> Dict[str, Any]:
        return {"shaping": "as `cnnvideo local` emulates links (local.links; see each report's link_emulation)",
                "cpu_caps": "as `cnnvideo local` applies them (local.cpus; see each report's cpu_caps)"}

    def run(self, r: Dict[str, Any], cfg: Dict[str, Any], run_dir: str) -> Tuple[int, str]:
        cfg = dict(cfg)
        cfg["out"] = run_dir
        path = os.path.join(run_dir, "config.yml")
        with open(path, "w") as fh:
            yaml.safe_dump(cfg, fh, sort_keys=False)
        if r.get("change"):
            log.warning("run %s: mid-run rate changes need the compose backend; running without it", r["id"])
        cmd = [sys.executable, "-m", "cnnvideo", "local", "-c", path, "--out", run_dir]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              timeout=float(self.spec.get("timeout_s", 900)), cwd=REPO)
        return proc.returncode, proc.stdout


class ComposeBackend:
    """Long-lived trainer, workers and tc helper of a dedicated compose project; a fresh master per run."""

    name = "compose"

    def __init__(self, spec: Dict[str, Any], work: str, project: str = "cnnvideo-exp") -> None:
        self.spec = spec
        self.work = os.path.abspath(work)
        self.project = project
        self._set_n(n_workers(spec))
        self.cpus = run_cpus(spec, {})  # CPU caps the workers run with (a run's `caps` changes them)
        self.cw = None  # scripts/compose_workers.py of the exported tree (set by _write_gen)
        self.gen = os.path.join(self.work, "gen")
        self.running_key = ""  # settings digest the trainer and workers run with
        self.rates: Optional[List[float]] = None
        self.dirty = False  # tc rules changed behind the helper's back

    def _set_n(self, n: int) -> None:
        self.n = n
        self.workers = ["worker%d" % i for i in range(n)]
        self.addresses = role_addresses(n)

    def resize(self, n: int) -> None:
        """A run with another number of workers: take the project down, write its compose file for n workers;
        the run's configure_roles and set_rates bring trainer, workers and tc helper up again."""
        self.compose("down", "--remove-orphans", "--timeout", "5", check=False, timeout=600)
        self._set_n(n)
        self.rates = [3.0] * n
        self.write_project(os.path.join(self.gen, "src"))
        self.running_key = ""
        self.dirty = True

    # ---------------------------------------------------------------- compose plumbing
    def _env(self, rates: Sequence[float]) -> Dict[str, str]:
        """The compose file's variables: CPU caps the spec sets (else .env's or the file's defaults), hop rates."""
        cw = self.cw or compose_workers(REPO)
        cpus = dict(self.cpus)
        for i, w in enumerate(self.workers):  # a `workers` cap stands for every worker without its own
            if w not in cpus and "w%d" % i not in cpus and "workers" in cpus:
                cpus[w] = cpus["workers"]
        env = dict(os.environ, COMPOSE_PROJECT_NAME=self.project, OUT_DIR=self.work, CONFIG="../gen/cluster.yml",
                   FRAMES=str(self.spec.get("frames", 8)))
        roles = list(zip(self.workers, cw.cpu_vars(self.n))) + [("master", "MASTER_CPUS"), ("trainer", "TRAINER_CPUS")]
        for role, var in roles:
            share = cpus.get(role, cpus.get("w" + role[len("worker"):]) if role.startswith("worker") else None)
            if share is not None:
                env[var] = "%g" % float(share)
        for var, rate in zip(cw.hop_rate_vars(self.n), hop_links(self.n, rates).values()):
            env[var] = "%g" % rate
        return env

    def compose(self, *args: str, rates: Optional[Sequence[float]] = None, timeout: float = 1800,
                check: bool = True) -> str:
        cmd = self._compose_cmd() + list(args)
        proc = subprocess.run(cmd, cwd=REPO, env=self._env(rates or self.rates or [3.0] * self.n),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise ExperimentError("%s failed (%d): %s%s" % (" ".join(cmd[3:]), proc.returncode, proc.stdout[-3000:],
                                                            self._failed_up_logs(args)))
        return proc.stdout

    def _failed_up_logs(self, args: Sequence[str]) -> str:
        """After a failed `up`: the roles' last log lines (a role that exited or went unhealthy says why there),
        also kept in gen/up-failure.log; '' for other commands."""
        if not args or args[0] != "up":
            return ""
        proc = subprocess.run(self._compose_cmd() + ["logs", "--no-color", "--tail", "40"], cwd=REPO,
                              env=self._env(self.rates or [3.0] * self.n), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True, timeout=120)
        path = os.path.join(self.gen, "up-failure.log")
        with open(path, "w") as f:
            f.write(proc.stdout)
        return "\nthe roles' logs (all in %s):\n%s" % (path, proc.stdout[-4000:])

    def _compose_cmd(self) -> List[str]:
        src = os.path.join(self.gen, "src")
        return ["docker", "compose", "-p", self.project, "--project-directory", src, "-f",
                os.path.join(src, COMPOSE_FILE), "-f", os.path.join(self.gen, "override.yml")]

    def _write_gen(self) -> None:
        """Export the committed tree (git HEAD) as the build context and compose project: a run never picks up
        uncommitted edits of the working tree; images are tagged cnnvideo-exp/* so other users are unaffected."""
        src = os.path.join(self.gen, "src")
        if os.path.exists(src):
            shutil.rmtree(src)
        os.makedirs(src)
        archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=REPO, stdout=subprocess.PIPE,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
        self.commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, stdout=subprocess.PIPE,
                                     universal_newlines=True, check=True).stdout.strip()
        for sub in ("wheels", "weights"):  # not in git: filled by scripts/docker_setup.sh
            shutil.copytree(os.path.join(REPO, "build", sub), os.path.join(src, "build", sub))
        models = os.path.join(REPO, "build", "models")  # the person detector, when setup could fetch it
        if os.path.isdir(models):
            shutil.copytree(models, os.path.join(src, "build", "models"))
        else:
            os.makedirs(os.path.join(src, "build", "models"))  # the Dockerfile copies the folder, empty or not
        self.write_project(src)
        base = os.environ.get("CNNVIDEO_BASE_IMAGE", "cnnvideo/debian:bookworm")
        for target, tag in (("runtime", "cnnvideo-exp/node"), ("netem", "cnnvideo-exp/netem")):
            proc = subprocess.run(["docker", "build", "-q", "--build-arg", "BASE_IMAGE=" + base, "--target", target,
                                   "-t", tag, src], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  universal_newlines=True, timeout=3600)
            if proc.returncode != 0:
                raise ExperimentError("docker build %s failed: %s" % (target, proc.stdout[-3000:]))

    def write_project(self, src: str) -> None:
        """The compose project in the exported tree `src`: its compose file for this spec's N workers (from
        src's scripts/compose_workers.py; rates and caps are variables _env sets), gen/override.yml (the
        experiment's images, gen/ mounted) and gen/cluster.yml."""
        os.makedirs(self.gen, exist_ok=True)
        self.cw = compose_workers(src)
        with open(os.path.join(src, COMPOSE_FILE), "w") as fh:
            fh.write("# generated by the experiment runner with scripts/compose_workers.py (%d workers)\n" % self.n)
            self.cw.dump_compose(self.cw.env_templated(self.n), fh)
        self._write_cluster(self.spec.get("base") or {})
        node = {"image": "cnnvideo-exp/node", "volumes": ["%s:/app/gen:ro" % self.gen]}
        override = {"services": dict({role: dict(node) for role in ["trainer"] + self.workers + ["master"]},
                                     netem={"image": "cnnvideo-exp/netem"})}
        with open(os.path.join(self.gen, "override.yml"), "w") as fh:
            yaml.safe_dump(override, fh, sort_keys=False)

    def roles_config(self, cfg: Dict[str, Any]) -> Dict[str, Any]:
        """`cfg` as the long-lived trainer and workers run it: at the compose addresses, with one bandwidth per
        worker when it sets none (the default lists two)."""
        cluster = _merge(cfg, dict(self.addresses, out="/app/out"))
        cluster.setdefault("bandwidth", [3.0] * self.n)
        return cluster

    def roles_key(self, cfg: Dict[str, Any]) -> str:
        """Digest of the settings of `cfg` the trainer and workers depend on (cnnvideo.wire.settings.TRAINER_KEYS)."""
        digest = settings.of(config.from_dict(self.roles_config(cfg), check_files=False), settings.TRAINER_KEYS).digest
        return "%s|w%d|%s" % (digest, self.n, sorted((cfg.get("cpus") or {}).items()))  # caps: workers re-created

    def _write_cluster(self, cfg: Dict[str, Any]) -> None:
        """gen/cluster.yml, the config of the long-lived trainer and workers."""
        cluster = self.roles_config(cfg)
        for k in ("tls", "scheduler_options"):
            cluster.pop(k, None)
        with open(os.path.join(self.gen, "cluster.yml"), "w") as fh:
            yaml.safe_dump(cluster, fh, sort_keys=False)

    def configure_roles(self, cfg: Dict[str, Any]) -> bool:
        """Make the trainer and workers run with the result-changing settings of run config `cfg`: when they
        differ from the running ones (a variant with another threshold), re-create them on that config (they
        would refuse the master's requests otherwise). True if they were re-created."""
        key = self.roles_key(cfg)
        if key == self.running_key:
            return False
        self._write_cluster(cfg)
        self.compose("up", "-d", "--wait", "--force-recreate", "--no-deps", "trainer", *self.workers, timeout=3600)
        self.running_key = key
        self.dirty = True  # new containers: the tc helper re-creates its rules
        return True

    def lock(self) -> None:
        """Hold the host-wide lock of this compose project: two experiments on one project would recreate each
        other's containers and tc rules mid-run. ExperimentError naming the holder if it is taken."""
        import fcntl
        import tempfile

        path = os.path.join(tempfile.gettempdir(), "cnnvideo-%s.lock" % self.project)
        fh = open(path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown process"
            fh.close()
            raise ExperimentError("compose project %s is in use by another experiment (%s, lock %s): wait for it "
                                  "to finish or stop it" % (self.project, holder, path)) from None
        fh.seek(0)
        fh.truncate()
        fh.write("pid %d" % os.getpid())
        fh.flush()
        self._lock_fh = fh

    def unlock(self) -> None:
        fh = getattr(self, "_lock_fh", None)
        if fh is not None:
            fh.close()  # closing releases the flock
            self._lock_fh = None

    def start(self) -> None:
        """Lock the project, build, bring up trainer, workers and tc helper; a start that fails takes down what
        it brought up (the runner calls stop() only after a successful start)."""
        self.lock()
        try:
            os.makedirs(os.path.join(self.work, "runs"), exist_ok=True)
            os.chmod(self.work, 0o777)
            os.chmod(os.path.join(self.work, "runs"), 0o777)
            self._write_gen()
            self.rates = [3.0] * self.n
            self.compose("down", "--remove-orphans", "--timeout", "5", check=False, timeout=600)
            # the netem helper turns GSO off on every shaped container's eth0 (one MSS per packet) so htb paces
            # small messages too; sockets cache that when they connect, hence the master's 3 s start delay below
            self.compose("up", "-d", "--wait", "trainer", *self.workers, "netem", timeout=3600)
            self.running_key = self.roles_key(dict(self.spec.get("base") or {}, cpus=self.cpus))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Take the project down (containers of another worker count too: --remove-orphans) and unlock it."""
        try:
            self.compose("down", "--remove-orphans", "--timeout", "5", check=False, timeout=600)
        finally:
            self.unlock()

    def set_rates(self, rates: List[float]) -> None:
        """Re-create the tc helper with new per-hop rates (it removes its rules on exit, applies the new ones)."""
        if rates == self.rates and not self.dirty:
            return
        self.rates = list(rates)
        self.compose("up", "-d", "--wait", "--force-recreate", "--no-deps", "netem", timeout=600)
        self.dirty = False

    def change_link(self, link: str, rate: float) -> str:
        """Change one link's rate in place (every link re-applied by a one-shot helper in the netem container)."""
        links = hop_links(self.n, list(self.rates or [3.0] * self.n))
        if link not in links:
            raise ExperimentError("change.link must be one of %s, got %r" % (", ".join(links), link))
        links[link] = float(rate)
        args = ["exec", "-T", "netem", "python3", "-m", "netem", "--once", "--project", self.project]
        for name, r in links.items():
            args += ["--link", "%s,rate=%g" % (name, r)]
        self.dirty = True
        return self.compose(*args, timeout=120, check=False)

    def facts(self) -> Dict[str, Any]:
        return {"shaping": "tc htb per destination by the netem helper (compose project %s); every shaped "
                "container's eth0 with gso_max_size 1500 / gso_max_segs 1 (set by the helper) so htb paces each "
                "message" % self.project,
                "cpu_caps": "%s (a run's caps replace the workers')" % (self.spec.get("cpus") or {}),
                "code": "git HEAD %s (images cnnvideo-exp/*)" % getattr(self, "commit", "?")}

    def run(self, r: Dict[str, Any], cfg: Dict[str, Any], run_dir: str) -> Tuple[int, str]:
        if run_workers(self.spec, r) != self.n:
            self.resize(run_workers(self.spec, r))
        self.cpus = run_cpus(self.spec, r)
        cfg = _merge(cfg, self.addresses)
        cfg.pop("tls", None)
        lines: List[str] = []
        if self.configure_roles(cfg):
            lines.append("[experiment] %.3f trainer and workers re-created with this run's settings\n" % time.time())
        self.set_rates(bandwidth_list(r["bandwidth"], self.n))
        cfg_dir = os.path.join(self.gen, "runs")
        os.makedirs(cfg_dir, exist_ok=True)
        with open(os.path.join(cfg_dir, r["id"] + ".yml"), "w") as fh:
            yaml.safe_dump(cfg, fh, sort_keys=False)
        rel = os.path.relpath(run_dir, self.work)
        os.chmod(run_dir, 0o777)
        master = "exec cnnvideo-entrypoint master -c /app/gen/runs/%s.yml --out /app/out/%s --frames %d" % (
            r["id"], rel, int(r["frames"]))
        cmd = self._compose_cmd() + ["run", "--rm", "--no-deps", "-T", "--entrypoint", "sh", "master", "-c",
                                     "sleep 3; " + master]
        proc = subprocess.Popen(cmd, cwd=REPO, env=self._env(self.rates), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, universal_newlines=True)
        deadline = time.time() + float(self.spec.get("timeout_s", 900))
        timer = threading.Timer(max(deadline - time.time(), 1.0), proc.kill)
        timer.start()
        watcher = None
        if r.get("change"):  # the master's progress.json says when the frame after which the link changes was sent
            watcher = threading.Thread(target=self._change_when_sent, args=(r["change"], run_dir, proc, lines),
                                       daemon=True)
            watcher.start()
        try:
            for line in proc.stdout:
                lines.append(line)
            rc = proc.wait()
        finally:
            timer.cancel()
        if watcher is not None:
            watcher.join(5)
        return rc, "".join(lines)

    def _change_when_sent(self, change: Dict[str, Any], run_dir: str, proc, lines: List[str]) -> None:
        """Re-shape change['link'] to change['rate'] once frame change['after_frame'] has been sent."""
        at = int(change.get("after_frame", 0))
        while proc.poll() is None:
            p = progress.read(run_dir)
            if p is not None and p.sent - 1 >= at:
                t = time.time()
                out = self.change_link(str(change["link"]), float(change["rate"]))
                lines.append("[experiment] %.3f link %s -> %g MB/s after frame %d was sent (%.2f s): %s\n"
                             % (t, change["link"], float(change["rate"]), p.sent - 1, time.time() - t,
                                out.strip()[-300:]))
                return
            time.sleep(POLL_S)
