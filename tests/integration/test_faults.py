"""Fault injection: SIGKILL a random role (a worker, the trainer or the master) at a random moment of a
`cnnvideo local` run (during the master's setup, mid-run, during a resync, or while the run is closing),
again and again. Every run must end with a complete report: every frame completed exactly once (a dropped
frame would need a reason, and none is expected with these retries), results exact (max_abs_err 0, lossless).

Trials share runs to keep process start-up off the bill: one run takes kills one after another (one or two
at a time, of different roles, each after its own random delay), each batch after the previous victims were
restarted by the supervisor; a run that ends passes its remaining trials on to the next one. Every run, and
every master restarted after a kill, first takes a kill during the master's setup. Seeded: the seed is
printed (and in the failure message); CNNVIDEO_FAULT_SEED=N replays the same choices (roles, phases, delays;
the system's own timing still varies); CNNVIDEO_FAULT_TRIALS=N sets the trials per role kind (default 12, 4 a
shard: CI's 1,800 s budget; each CI run draws a new seed).
The trials are dealt to SHARDS independent tests (shard i seeded with seed + i), which `make test` runs on
different processes at once."""
from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter

import pytest

from .helpers import LocalRun, base_config, write_config

pytestmark = pytest.mark.slow

ROLES = ("worker", "trainer", "master")
FRAMES = 401  # the master logs every 10th frame sent: frame 401 of 401 marks "all sent" (closing)
RUN_TIMEOUT_S = 400.0
SHARDS = 3  # TestShard0..2 below
SETUP_GUESS_S = 2.0  # a master's setup before one was seen (a warm cache on an idle host: about 1 s)


def _seed() -> int:
    env = os.environ.get("CNNVIDEO_FAULT_SEED")
    return int(env) if env else random.SystemRandom().randrange(1 << 30)


class Faults:
    """Kills roles of one LocalRun at chosen moments; phases are found from the log lines it follows."""

    def __init__(self, run: LocalRun, rng: random.Random, log) -> None:
        self.run = run
        self.rng = rng
        self.log = log
        self.mark = 0  # log line index after which the next trial's phase marker must appear
        self.setup_s = SETUP_GUESS_S  # how long a master's setup lasts (the shortest seen so far)

    def _find(self, text: str, start: int, role: str = "master") -> int:
        """Index of the first line at or after `start` of `role` holding `text`, else -1."""
        tag = "[%s]" % role if role != "local" else "[local]"
        for i in range(start, len(self.run.lines)):
            ln = self.run.lines[i]
            if ln.startswith(tag) and text in ln:
                return i
        return -1

    def _wait(self, text: str, start: int, role: str = "master", timeout: float = 120.0) -> int:
        """Wait for such a line; -1 if the run ended (or timed out) first."""
        deadline = time.time() + timeout
        with self.run.cond:
            while True:
                i = self._find(text, start, role)
                if i >= 0 or self.run.proc.poll() is not None or time.time() > deadline:
                    return i
                self.run.cond.wait(0.2)

    def learn_setup(self) -> None:
        """Shorten the setup window to the shortest setup this run's masters took (start line to "setup done"):
        a setup kill must land inside the setup however fast the host is (a fixed 5 s window missed it nearly
        always once roles started from the fork server on an idle host)."""
        with self.run.cond:
            lines, times = list(self.run.lines), list(self.run.times)
        start = None
        for ln, t in zip(lines, times):
            if ln.startswith("[local] started master pid"):
                start = t
            elif start is not None and ln.startswith("[master]") and "setup done" in ln:
                self.setup_s = min(self.setup_s, max(t - start, 0.05))
                start = None

    def master_start(self) -> int:
        """Index of the line that started the current master (-1 before it started)."""
        idx = -1
        for i, ln in enumerate(self.run.lines):
            if ln.startswith("[local] started master pid"):
                idx = i
        return idx

    def event(self, kinds, phase: str):
        """Kill one role of each kind in `kinds` (distinct roles, each after its own random delay in `phase`);
        [(victim, kind, phase actually hit, delay)] of the kills made (none if the run ended first)."""
        rng = self.rng
        self.learn_setup()
        if phase == "setup":
            at, window = self._wait("started master pid", self.mark, role="local"), self.setup_s * 0.8
        elif phase == "resync":
            at, window = self._wait("resync ", self.mark, timeout=60.0), 1.5
        elif phase == "closing":
            at, window = self._wait("sent frame %d/%d" % (FRAMES, FRAMES), self.mark, timeout=RUN_TIMEOUT_S), 1.0
        else:  # mid-run: after the current master's setup, once frames flow
            ms = max(self.master_start(), 0)
            done = self._wait("setup done", ms)
            at = self._wait("sent frame", max(done, self.mark)) if done >= 0 else -1
            window = 1.5
        if at < 0:
            return []
        victims = []
        for kind in kinds:
            pool = {"worker": ["w0", "w1"], "trainer": ["trainer"], "master": ["master"]}[kind]
            pool = [v for v in pool if v not in [x for x, _ in victims]]
            victims.append((rng.choice(pool), kind))
        plan = sorted((rng.uniform(0.0, window), v, k) for v, k in victims)
        t0 = time.time()
        kills = []
        for delay, victim, kind in plan:
            time.sleep(max(0.0, t0 + delay - time.time()))
            with self.run.cond:
                if self.run.proc.poll() is not None:
                    break
                hit = phase
                if phase == "setup" and self._find("setup done", max(at, self.master_start())) >= 0:
                    hit = "run"  # the delay outlasted the master's setup
                starts = self.run.count("[local] started %s pid" % victim)
                pid = self.run.pids[victim]
                self.mark = len(self.run.lines)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:  # already gone (exited, being restarted): nothing was killed
                continue
            self.log("  kill %-7s (%s) in %-7s after %.2f s" % (victim, kind, hit, delay))
            kills.append((victim, kind, hit, delay, starts))
        # the supervisor restarts each (unless the run ends first, e.g. a worker killed while closing)
        with self.run.cond:
            self.run.cond.wait_for(lambda: all(self.run.count("[local] started %s pid" % v) > n
                                               for v, _, _, _, n in kills) or self.run.proc.poll() is not None,
                                   120)
        return [(v, k, h, d) for v, k, h, d, _ in kills]


def _check_report(code, report, text, context):
    assert code == 0, "%s\n%s" % (context, text[-5000:])
    assert report is not None, context
    assert report["frames"] == FRAMES and report["completed"] == FRAMES and report["lost"] == 0, context
    frames = sorted(p["frame"] for p in report["per_frame"])
    assert frames == list(range(FRAMES)), context  # each frame exactly once
    for p in report["per_frame"]:
        assert p["status"] == "completed" or (p["status"] == "dropped" and p.get("reason")), (context, p)
    assert report["max_abs_err"] == 0.0, context


class _Shard:
    """One shard of the trials; a class of its own, so that `make test` (pytest-xdist --dist loadscope) runs the
    shards on different processes at once."""

    shard = 0

    def test_random_sigkills_at_any_moment(self, tmp_path, synthetic_video):
        _random_sigkills(tmp_path, synthetic_video, self.shard)


class TestShard0(_Shard):
    shard = 0


class TestShard1(_Shard):
    shard = 1


class TestShard2(_Shard):
    shard = 2


def _random_sigkills(tmp_path, synthetic_video, shard: int) -> None:
    seed = _seed() + shard
    per_role = -(-int(os.environ.get("CNNVIDEO_FAULT_TRIALS", "12")) // SHARDS)  # this shard's share, rounded up
    rng = random.Random(seed)
    print("\nfault injection, shard %d: seed %d (CNNVIDEO_FAULT_SEED=%d reproduces it), %d trials per role kind"
          % (shard, seed, seed - shard, per_role))
    todo = [k for k in ROLES for _ in range(per_role)]
    rng.shuffle(todo)
    cache_dir = str(tmp_path / "cache")
    data = base_config(synthetic_video, cache_dir, frame_size=[64, 96], frames=FRAMES, in_flight=2,
                       scheduler="optimal", trainer={"frames": 8}, limits={"worker_down_s": 5},
                       reliability={"restart": True, "max_restarts": 1000, "retries": 20, "peer_wait_s": 90.0})
    cfg_path = write_config(str(tmp_path / "f.yml"), data)
    done = []
    setup_s = SETUP_GUESS_S
    t_start = time.time()
    n_run = 0
    while todo:
        n_run += 1
        out = str(tmp_path / ("run%d" % n_run))
        run = LocalRun(cfg_path, out)
        faults = Faults(run, rng, print)
        faults.setup_s = setup_s
        print(" run %d (%d trials left)" % (n_run, len(todo)))
        phase = "setup"  # every run, and every new master, starts with a kill during its setup
        per_run = rng.randint(6, 12)
        while todo and per_run > 0 and run.proc.poll() is None:
            size = 1 if rng.random() < 0.5 else 2  # two kills of different roles may overlap
            kinds = [todo[0]] + [k for k in todo[1:] if k != todo[0] or k == "worker"][:size - 1]
            kills = faults.event(kinds, phase)
            if not kills:
                break  # the run ended first: these trials go to the next run
            for _victim, kind, hit, _ in kills:
                todo.remove(kind)
                done.append((kind, hit))
                per_run -= 1
            victims = [v for v, _, _, _ in kills]
            hits = [h for _, _, h, _ in kills]
            if "master" in victims:
                phase = "setup"
            elif any(v.startswith("w") for v in victims) and "run" in hits and rng.random() < 0.5:
                phase = "resync"  # the master resyncs after a worker died mid-run: kill during that
            elif per_run <= 2 and rng.random() < 0.5:
                phase = "closing"
            else:
                phase = "run"
        setup_s = faults.setup_s
        code, report, text = run.finish(RUN_TIMEOUT_S)
        context = "seed %d, run %d, trials so far %s" % (seed, n_run, done[-8:])
        _check_report(code, report, text, context)
        print("  run %d complete: %d/%d frames, max_abs_err %s, supervisor restarts %s, master resyncs %s"
              % (n_run, report["completed"], report["frames"], report["max_abs_err"],
                 report.get("supervisor_restarts"), report["reliability"]["resyncs"]))
    counts = Counter(done)
    kinds = Counter(k for k, _ in done)
    print("fault injection: %d trials in %d runs, %.0f s; by role %s; by (role, phase) %s"
          % (len(done), n_run, time.time() - t_start, dict(kinds), dict(sorted(counts.items()))))
    assert all(kinds[k] >= per_role for k in ROLES)
    assert sum(n for (k, ph), n in counts.items() if ph == "setup") >= 3  # kills while the master set up
