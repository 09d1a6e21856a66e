"""Where the runs of an experiment run: `cnnvideo local` per run, or a compose project with long-lived trainer,
workers and tc helper and a fresh master container per run."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import yaml

from cnnvideo import progress

from .spec import ExperimentError, _merge, bandwidth_list, n_workers

log = logging.getLogger(__name__)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ROLE_ADDRESSES = {"cluster": {"trainer": "trainer:50051", "workers": ["worker0:50060", "worker1:50060"]},
                  "video": "/usr/share/cnnvideo/vtest.avi", "cache_dir": "/var/cache/cnnvideo"}
POLL_S = 0.1  # how often a watched run's progress.json is read


class LocalBackend:
    """`cnnvideo local` per run (no tc shaping: bandwidth only feeds the cost model)."""

    name = "local"

    def __init__(self, spec: Dict[str, Any], work: str) -> None:
        self.spec = spec
        self.work = work

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def facts(self) -> Dict[str, Any]:
        return {"shaping": "none (backend local: bandwidth is a cost-model input only)",
                "cpu_caps": "none (local processes)"}

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
        self.gen = os.path.join(self.work, "gen")
        self.roles_key = ""  # settings digest the trainer and workers run with
        self.rates: Optional[List[float]] = None
        self.dirty = False  # tc rules changed behind the helper's back

    # ---------------------------------------------------------------- compose plumbing
    def _env(self, rates: Sequence[float]) -> Dict[str, str]:
        cpus = self.spec.get("cpus") or {}
        env = dict(os.environ, COMPOSE_PROJECT_NAME=self.project, OUT_DIR=self.work, CONFIG="../gen/cluster.yml",
                   FRAMES=str(self.spec.get("frames", 8)))
        for role, var in (("worker0", "WORKER0_CPUS"), ("worker1", "WORKER1_CPUS"), ("master", "MASTER_CPUS"),
                          ("trainer", "TRAINER_CPUS")):
            if role in cpus:
                env[var] = "%g" % float(cpus[role])
        env["HOP0_RATE"], env["HOP1_RATE"] = "%g" % rates[0], "%g" % rates[1]
        env["RET_RATE"] = "%g" % rates[-1]
        return env

    def compose(self, *args: str, rates: Optional[Sequence[float]] = None, timeout: float = 1800,
                check: bool = True) -> str:
        cmd = self._compose_cmd() + list(args)
        proc = subprocess.run(cmd, cwd=REPO, env=self._env(rates or self.rates or [3.0, 3.0]),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise ExperimentError("%s failed (%d): %s" % (" ".join(cmd[3:]), proc.returncode, proc.stdout[-3000:]))
        return proc.stdout

    def _compose_cmd(self) -> List[str]:
        src = os.path.join(self.gen, "src")
        return ["docker", "compose", "-p", self.project, "--project-directory", src, "-f",
                os.path.join(src, "docker-compose.yml"), "-f", os.path.join(self.gen, "override.yml")]

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
        self._write_cluster(self.spec.get("base") or {})
        gen_mount = "%s:/app/gen:ro" % self.gen
        node = {"image": "cnnvideo-exp/node", "volumes": [gen_mount]}
        override = {"services": {
            "trainer": dict(node), "worker0": dict(node), "worker1": dict(node), "master": dict(node),
            "netem": {"image": "cnnvideo-exp/netem"},
        }}
        with open(os.path.join(self.gen, "override.yml"), "w") as fh:
            yaml.safe_dump(override, fh, sort_keys=False)
        base = os.environ.get("CNNVIDEO_BASE_IMAGE", "cnnvideo/debian:bookworm")
        for target, tag in (("runtime", "cnnvideo-exp/node"), ("netem", "cnnvideo-exp/netem")):
            proc = subprocess.run(["docker", "build", "-q", "--build-arg", "BASE_IMAGE=" + base, "--target", target,
                                   "-t", tag, src], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  universal_newlines=True, timeout=3600)
            if proc.returncode != 0:
                raise ExperimentError("docker build %s failed: %s" % (target, proc.stdout[-3000:]))

    def _write_cluster(self, cfg: Dict[str, Any]) -> None:
        """gen/cluster.yml, the config of the long-lived trainer and workers: `cfg` at the compose addresses."""
        cluster = _merge(cfg, dict(ROLE_ADDRESSES, out="/app/out"))
        for k in ("tls", "scheduler_options"):
            cluster.pop(k, None)
        with open(os.path.join(self.gen, "cluster.yml"), "w") as fh:
            yaml.safe_dump(cluster, fh, sort_keys=False)

    def configure_roles(self, cfg: Dict[str, Any]) -> bool:
        """Make the trainer and workers run with the result-changing settings of run config `cfg`: when they
        differ from the running ones (a variant with another threshold), re-create them on that config (they
        would refuse the master's requests otherwise). True if they were re-created."""
        from cnnvideo import config, settings

        key = settings.of(config.from_dict(_merge(cfg, ROLE_ADDRESSES), check_files=False),
                          settings.TRAINER_KEYS).digest
        if key == self.roles_key:
            return False
        self._write_cluster(cfg)
        self.compose("up", "-d", "--wait", "--force-recreate", "--no-deps", "trainer", "worker0", "worker1",
                     timeout=3600)
        self.roles_key = key
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
        if n_workers(self.spec) != 2:
            raise ExperimentError("the compose backend runs the 2 workers of docker-compose.yml, the spec asks for "
                                  "%d: use backend local, or scripts/compose_workers.py for a compose file of N"
                                  % n_workers(self.spec))
        self.lock()
        os.makedirs(os.path.join(self.work, "runs"), exist_ok=True)
        os.chmod(self.work, 0o777)
        os.chmod(os.path.join(self.work, "runs"), 0o777)
        self._write_gen()
        self.rates = [3.0, 3.0]
        self.compose("down", "--timeout", "5", check=False, timeout=600)
        # the netem helper turns GSO off on every shaped container's eth0 (one MSS per packet) so htb paces small
        # messages too; sockets cache that when they connect, hence the master's 3 s start delay below
        self.compose("up", "-d", "--wait", "trainer", "worker0", "worker1", "netem", timeout=3600)
        from cnnvideo import config, settings

        self.roles_key = settings.of(config.from_dict(_merge(self.spec.get("base") or {}, ROLE_ADDRESSES),
                                                      check_files=False), settings.TRAINER_KEYS).digest

    def stop(self) -> None:
        try:
            self.compose("down", "--timeout", "5", check=False, timeout=600)
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
        """Change one link's rate in place (all three links re-applied by a one-shot helper in the netem container)."""
        rates = list(self.rates or [3.0, 3.0])
        links = {"master<>worker0": rates[0], "worker0<>worker1": rates[1], "worker1<>master": rates[-1]}
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
                "cpu_caps": self.spec.get("cpus") or {}, "code": "git HEAD %s (images cnnvideo-exp/*)"
                % getattr(self, "commit", "?")}

    def run(self, r: Dict[str, Any], cfg: Dict[str, Any], run_dir: str) -> Tuple[int, str]:
        cfg = _merge(cfg, ROLE_ADDRESSES)
        cfg.pop("tls", None)
        lines: List[str] = []
        if self.configure_roles(cfg):
            lines.append("[experiment] %.3f trainer and workers re-created with this run's settings\n" % time.time())
        self.set_rates(bandwidth_list(r["bandwidth"]))
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
