"""Run `cnnvideo local` (real processes on free 127.0.0.1 ports) from tests and read what it wrote."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def env() -> Dict[str, str]:
    e = dict(os.environ)
    e["OMP_NUM_THREADS"] = "1"
    e["PYTHONUNBUFFERED"] = "1"
    return e


def write_config(path: str, data: Dict[str, Any]) -> str:
    with open(path, "w") as fh:
        yaml.safe_dump(data, fh)
    return path


def base_config(video: str, cache_dir: str, **over) -> Dict[str, Any]:
    cfg = {
        "model": "alexnet",
        "weights": "random",
        "video": video,
        "frame_size": [96, 128],
        "mode": "delta",
        "check": True,
        "frames": 16,
        "in_flight": 3,
        "scheduler": "das",
        "profile_iters": 1,
        "trainer": {"frames": 16},
        "cache_dir": cache_dir,
        # unshaped loopback, uncapped roles, as these tests were written for (test_link_emulation and test_live
        # ask for the emulation `cnnvideo local` does by default)
        "local": {"links": "none", "cpus": "none"},
    }
    cfg.update(over)
    return cfg


def master_settings(cfg, trainer: bool = False, **change):
    """The proto Settings a master with Config `cfg` sends (worker keys, or the trainer's), with `change`
    ({"delta.input_threshold": 2}) applied to the fields (the digest follows them)."""
    import json as _json

    from cnnvideo.rpc import convert
    from cnnvideo.wire import settings

    s = settings.of(cfg, settings.TRAINER_KEYS if trainer else settings.WORKER_KEYS, "master")
    fields = dict(s.fields, **{k: _json.dumps(v) for k, v in change.items()})
    return convert.settings_to_pb(settings.Settings(fields, "master"))


def stop_procs(procs: Iterable[subprocess.Popen], grace: float = 10) -> None:
    """Stop role processes a test started: SIGTERM to all at once, then wait for each, SIGKILL past `grace`."""
    procs = list(procs)
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()


def cnnvideo(args: List[str], timeout: float = 600, cwd: Optional[str] = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cnnvideo"] + args, capture_output=True, text=True, env=env(),
                          timeout=timeout, cwd=cwd or REPO)


def run_local(tmp_path, data: Dict[str, Any], name: str = "run", frames: Optional[int] = None,
              timeout: float = 600) -> Tuple[subprocess.CompletedProcess, Optional[Dict[str, Any]], str]:
    """Write the config, run `cnnvideo local`, return (process, report.json or None, out dir)."""
    cfg_path = write_config(str(tmp_path / ("%s.yml" % name)), data)
    out = str(tmp_path / name)
    args = ["local", "-c", cfg_path, "--out", out]
    if frames is not None:
        args += ["--frames", str(frames)]
    proc = cnnvideo(args, timeout=timeout)
    report_path = os.path.join(out, "report.json")
    report = None
    if os.path.isfile(report_path):
        with open(report_path) as fh:
            report = json.load(fh)
    return proc, report, out


def hop(report: Dict[str, Any], name: str) -> Dict[str, Any]:
    for h in report["hops"]:
        if h["name"] == name:
            return h
    raise AssertionError("no hop %r in %r" % (name, [h["name"] for h in report["hops"]]))


class LocalRun:
    """`cnnvideo local` in the background with its stderr followed: child pids, frames sent, resyncs."""

    def __init__(self, cfg_path: str, out: str) -> None:
        self.out = out
        self.proc = subprocess.Popen([sys.executable, "-m", "cnnvideo", "local", "-c", cfg_path, "--out", out],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd=REPO)
        self.lines = []  # type: List[str]
        self.times = []  # type: List[float]  # when each line arrived
        self.pids = {}  # type: Dict[str, int]
        self.sent = 0
        self.resyncs = 0
        self.stdout = ""
        self.cond = threading.Condition()
        self.threads = [threading.Thread(target=self._pump, daemon=True),
                        threading.Thread(target=lambda: setattr(self, "stdout", self.proc.stdout.read()), daemon=True)]
        for t in self.threads:
            t.start()

    def _pump(self) -> None:
        for line in self.proc.stderr:
            with self.cond:
                self.lines.append(line)
                self.times.append(time.time())
                if line.startswith("[local] started"):
                    parts = line.split()
                    self.pids[parts[2]] = int(parts[4])
                if "[master]" in line and "sent frame " in line:
                    self.sent = max(self.sent, int(line.split("sent frame ")[1].split("/")[0]))
                if "[master]" in line and "resynchronised at generation" in line:
                    self.resyncs += 1
                self.cond.notify_all()
        with self.cond:  # the run ended: a wait_for that waits for a line must wake to see it
            self.cond.notify_all()

    def count(self, text: str) -> int:
        """How many log lines so far contain `text`."""
        return sum(text in ln for ln in self.lines)

    def wait_for(self, predicate, timeout: float) -> None:
        """Block until predicate() holds; fail (with the last log lines) on timeout or if the run ended."""
        with self.cond:
            assert self.cond.wait_for(lambda: predicate() or self.proc.poll() is not None, timeout), \
                "".join(self.lines[-40:])
            assert self.proc.poll() is None, "".join(self.lines[-40:])

    def stop(self, timeout: float):
        """SIGTERM (the master takes no new frame, drains and reports), then finish()."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.finish(timeout)

    def close(self, procs: Iterable[Optional[subprocess.Popen]] = ()) -> None:
        """A test's cleanup: stop the processes it started beside the run (None: one not started yet), and kill the
        run if it still goes."""
        stop_procs([p for p in procs if p is not None])
        if self.proc.poll() is None:
            self.proc.kill()

    def finish(self, timeout: float):
        """Wait for the run; return (exit code, report.json or None, the whole log). A run that outlives `timeout`
        is killed and fails the test with the end of its log (what its roles did, and what the launcher restarted)."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with self.cond:
                tail = "".join(self.lines[-60:])
            self.proc.send_signal(signal.SIGTERM)  # a second signal: the launcher stops every role it started
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
            raise AssertionError("cnnvideo local did not exit within %.0f s; its log ends:\n%s" % (timeout, tail)) \
                from None
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        for t in self.threads:
            t.join(5)
        path = os.path.join(self.out, "report.json")
        report = None
        if os.path.isfile(path):
            with open(path) as fh:
                report = json.load(fh)
        return code, report, "".join(self.lines)
