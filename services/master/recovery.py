"""After a fault: a new generation, wait until every worker serves again, reset every hop on both sides (all
hops keyframe) and re-send the frames that were in flight; and the watch that turns silence into a fault.

Under a pool plan a worker that is down need not stop the run: when every stage of the plan keeps a replica, the
resync leaves it out (the dispatcher routes no frame to it) and the frames it had go to the others. The watch
probes the workers left out, and one that serves again is taken back, after which its links start with keyframes.

Leaving a replica out and taking it back touch that replica alone (`replica_out`, `take_back`), whether the plan
has one stage (full replication) or several (a hybrid): no new generation, only the frames in flight on a route
through it are sent again (from the input, on routes without it), and the other links keep their references. Its
own links start over on both sides: the master's input hop to it here, and, through a Peer call to every other
worker of the run, the links of the replicas of the stage before it (their sender state to it: frames encoded for
it are not sent, and a forward to it that fails is no fault) and of the stage after it (their receive state from
it, with its tasks still waiting there). Taken back, it gets a fresh run and the others are told again, so every
link into and out of it starts with a keyframe. A fault that leaves a stage without a live replica (or one with no
worker down, e.g. a broken delta) resyncs every link in a new generation, waiting for the worker or re-planning."""
from __future__ import annotations

import logging
import threading
import time
from typing import List, Sequence

import grpc

from cnnvideo.master.links import MasterError
from cnnvideo.master.setup import SETUP_TIMEOUT_S
from cnnvideo.rpc import net

log = logging.getLogger(__name__)

RETURN_PROBE_S = 1.0  # how often the workers a pool runs without are probed for their return


class Recovery:
    """Resync of the role `m` (its links, tracker, input hop) after a fault."""

    def __init__(self, m) -> None:
        self.m = m
        self.lock = threading.Lock()  # one resync, or one replica taken back, at a time

    def recover(self, fault: str) -> None:
        """Leave out the replicas that are down, if the plan lets them go alone (replica_out); else start a new
        generation, wait (with backoff, up to reliability.peer_wait_s) until every worker serves, detect
        restarted ones, reset every hop and queue the frames in flight for re-sending (or drop those out of
        retries)."""
        with self.lock:
            if not self.replica_out(fault):
                self._recover(fault)

    def replica_out(self, fault: str) -> bool:
        """Leave the workers that are down out by themselves: their frames in flight are queued again, their links
        start over (here, and on the other workers through a Peer call), everything else goes on untouched. False
        when this does not apply (nobody down, or a stage would keep no replica: a chain's always would not).
        A worker that cannot be told becomes a fault of its own (the next recovery handles it)."""
        m = self.m
        if m.sending.sent_plan is None:
            return False
        down = m.links.down(only=m.live_workers())
        if not down or not self.can_leave_out(sorted(set(down) | m.dispatcher.excluded)):
            return False  # (a stage whose last live replica is down: every link resyncs, waiting or re-planning)
        with m.cond:
            again, dropped = m.tracker.release_workers(down, fault)
            for f in again + dropped:
                m.dispatcher.release(m.tracker.records[f].route)
            for f in dropped:
                log.error("frame %d dropped: %s", f, m.tracker.records[f].reason)
                m.feed.release(f)
            m.dispatcher.leave_out(down)
            m.left_out_events.append({"generation": m.tracker.generation, "left_out": list(down), "back": [],
                                      "scope": "replica", "at_s": round(time.time() - m.t_run, 3)})
            m.last_event = time.time()
            gen = m.tracker.generation
        for w in down:
            m.sending.reset_link(w)
        try:
            m.links.tell_peers(m.run_id, gen, down, True, m.live_workers())
        except MasterError as exc:
            m.fault("%s (telling it that %s is left out)" % (exc, ", ".join("w%d" % w for w in down)), gen)
        log.warning("resync of %s alone (%s): left out, its %d frames go to the other replicas; no other link "
                    "resyncs", ", ".join(m.links.name(w) for w in down), fault, len(again))
        threading.Thread(target=self._watch_return, args=(gen, list(down), True),
                         name="return-watch-%s" % "-".join("w%d" % w for w in down), daemon=True).start()
        return True

    def take_back(self, w: int, gen: int) -> None:
        """Worker w serves again after replica_out: a fresh run on it alone (it builds the plan's stage first),
        its streams, a fresh input sender (its first frame is a keyframe), and the other workers told that it is
        back (their links with it start over: keyframes both ways); then the dispatcher gives it frames. A failure
        here leaves it out (the watch tries again)."""
        m = self.m
        with self.lock:
            if m.tracker.generation != gen or w not in m.dispatcher.excluded or m.failure is not None:
                return
            m.links.refresh(w)
            m.count_restarts(m.links.fetch_infos(only=[w]))
            m.setup.check_infos()
            m.links.start_run(m.setup_msg(gen, m.sending.sent_plan), timeout=SETUP_TIMEOUT_S, only=[w])
            m.sending.reset_link(w)
            m.links.tell_peers(m.run_id, gen, [w], False, [x for x in m.live_workers() if x != w])
            m.open_streams(gen, only=[w])
            with m.cond:
                m.dispatcher.excluded.discard(w)
                m.left_out_events.append({"generation": gen, "left_out": [], "back": [w], "scope": "replica",
                                          "at_s": round(time.time() - m.t_run, 3)})
                m.cond.notify_all()
        log.warning("resync of %s alone: it serves again and is taken back (its link starts with a keyframe)",
                    m.links.name(w))

    def _recover(self, fault: str) -> None:
        m = self.m
        rel = m.cfg.reliability
        with m.cond:
            gen, again, dropped = m.tracker.resync(fault)
            for f in dropped:
                log.error("frame %d dropped: %s", f, m.tracker.records[f].reason)
                m.feed.release(f)
        log.warning("resync %d (generation %d): %s; %d frames to re-send", m.tracker.resyncs, gen, fault, len(again))
        m.links.cancel_streams()
        backoff = net.Backoff(rel.peer_wait_s)
        while m.failure is None:
            down = m.links.down()
            if not down or self.can_leave_out(down):
                try:
                    self.resync(gen, down)
                    break
                except (MasterError, grpc.RpcError) as exc:
                    problem = str(exc) if isinstance(exc, MasterError) else net.code_name(exc)
                    m.links.cancel_streams()
            else:
                problem = "%s is down" % m.links.name(down[0])
            if not backoff.wait():
                m.fail("%s and did not come back within %.0f s (fault: %s)" % (problem, rel.peer_wait_s, fault))
                return
        with m.cond:
            m.last_event = time.time()

    def can_leave_out(self, down: List[int]) -> bool:
        """Whether the run can go on without the workers `down`: every stage of the current plan keeps a replica,
        and so does every plan of the frames to re-send, or in flight through `down`."""
        m = self.m
        plan = m.sending.sent_plan
        if plan is None:
            return False
        tr = m.tracker
        with m.cond:
            frames = set(tr.retry_q) | set(tr.flying_through(down))
            plans = {tuple(tuple(g) for g in tr.records[f].groups) for f in frames}
        left = set(range(m.W)) - set(down)
        return all(left & set(g) for groups in plans | {plan.groups} for g in groups)

    def resync(self, gen: int, leave_out: Sequence[int] = ()) -> None:
        """Fresh channels (no reconnect backoff), restart detection, StartRun(gen) on every worker not left out,
        new streams; then every hop starts with a keyframe (fresh runs on the workers, reset input senders here)."""
        m = self.m
        live = [w for w in range(m.W) if w not in set(leave_out)]
        for w in live:
            m.links.refresh(w)
        m.count_restarts(m.links.fetch_infos(only=live))
        m.setup.check_infos()
        m.links.start_run(m.setup_msg(gen), only=live)
        m.open_streams(gen, only=live)
        with m.cond:
            back = sorted(m.dispatcher.excluded - set(leave_out))
            m.dispatcher.excluded = set(leave_out)
            if leave_out or back:
                m.left_out_events.append({"generation": gen, "left_out": list(leave_out), "back": back,
                                          "at_s": round(time.time() - m.t_run, 3)})
        m.sending.reset()
        if leave_out:
            log.warning("resynchronised at generation %d without %s: their frames go to the other replicas", gen,
                        ", ".join(m.links.name(w) for w in leave_out))
            threading.Thread(target=self._watch_return, args=(gen, list(leave_out)), name="return-watch-g%d" % gen,
                             daemon=True).start()
        else:
            log.info("resynchronised at generation %d: every hop starts with a keyframe%s", gen,
                     " (%s back)" % ", ".join("w%d" % w for w in back) if back else "")

    def _watch_return(self, gen: int, out: List[int], alone: bool = False) -> None:
        """Probe the workers generation `gen` left out every RETURN_PROBE_S. One that serves again is taken back:
        by itself (`alone`, after replica_out), else by the resync of a fault of that generation. A later resync
        ends this watch."""
        m = self.m
        out = list(out)
        while out and m.failure is None and not m.closing and m.tracker.generation == gen:
            time.sleep(RETURN_PROBE_S)
            back = [w for w in out if not m.links.down(timeout=0.5, only=[w])]
            if not back or m.tracker.generation != gen:
                continue
            if not alone:
                m.fault("%s serves again: taking it back" % m.links.name(back[0]), gen)
                return
            for w in back:
                try:
                    self.take_back(w, gen)
                except (MasterError, grpc.RpcError) as exc:
                    log.warning("%s answers but cannot be taken back yet: %s", m.links.name(w),
                                exc if isinstance(exc, MasterError) else net.code_name(exc))
                    continue
                if w not in m.dispatcher.excluded:
                    out.remove(w)

    def name_dead_worker(self) -> None:
        """Make the failure line name the worker that is down, if one is."""
        m = self.m
        down = m.links.down(only=m.live_workers())
        if down:
            tag = "%s is down" % m.links.name(down[0])
            if not m.failure.startswith(tag):
                m.failure = "%s: %s" % (tag, m.failure)


def wait_watching(m, predicate) -> None:
    """Wait (holding m.cond) until predicate() or a failure; a chain silent for limits.worker_down_s with frames
    in flight is probed, and a worker that does not answer (or no progress for long) becomes a fault."""
    stall_s = max(m.cfg.limits.worker_down_s, 1.0)
    next_probe = time.time() + stall_s
    while m.failure is None and not predicate():
        m.cond.wait(0.2)
        now = time.time()
        if m.tracker.in_flight() and now - m.last_event > stall_s and now >= next_probe:
            next_probe = now + stall_s
            gen = m.tracker.generation
            m.cond.release()
            try:
                dead = m.links.down(timeout=2.0, only=m.live_workers())
                if dead:
                    m.fault("%s does not answer (no progress for %.0f s)" % (m.links.name(dead[0]),
                                                                             now - m.last_event), gen)
                elif now - m.last_event > max(m.timeout, 6 * stall_s):
                    m.fault("no progress for %.0f s with %d frames in flight" % (now - m.last_event,
                                                                                 m.tracker.in_flight()), gen)
            finally:
                m.cond.acquire()
