"""A replica leaving the pool and coming back, by itself: no new generation, only the frames in flight on a route
through it are sent again (from the input, on routes without it), and the other links keep their references.

Its own links start over on both sides: the master's input link to it, and, through a Peer call to every other
worker of the run, the links of the replicas of the stage before it (their sender state to it: frames encoded for
it are not sent, and a forward to it that fails is no fault) and of the stage after it (their receive state from
it, with its tasks still waiting there). Taken back, it gets a fresh run and the others are told again, so every
link into and out of it starts with a keyframe. The watch probes the workers left out; one that serves again is
taken back (by itself, or by the resync of a fault when a whole generation left it out). A stage that would keep
no live replica (a chain's always would not) is the recovery's: a resync of every link in a new generation."""
from __future__ import annotations

import logging
import threading
import time
from typing import List

import grpc

from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import net

from ..links import MasterError
from ..setup import SETUP_TIMEOUT_S

log = logging.getLogger(__name__)

RETURN_PROBE_S = 1.0  # how often the workers left out are probed for their return
LEAVE_WAIT_S = 60.0  # a leaving worker's frames get this long to finish (its own drain waits as long)


class Replicas:
    """Leaving out and taking back replicas of the role `m`'s pool (`lock`: the recovery's, one change at a time)."""

    def __init__(self, m, lock: threading.Lock) -> None:
        self.m = m
        self.lock = lock

    def replan(self) -> None:
        """Plan the pool again for the workers left out now (holding the lock): those that left are priced out of
        it (Setup.scheduler_for's `gone`), and frames take the new plan once the others have built its stages."""
        m = self.m
        gone = sorted(m.pool.membership.out)
        try:
            scheduler = m.setup.scheduler_for(m.setup.products.costs, gone=gone)
        except Exception as exc:  # noqa: BLE001 - frames go on with the plan they have, routed round the gone
            log.warning("could not re-plan the pool without %s (%s): frames keep the plan they use",
                        ", ".join("w%d" % w for w in gone) or "anyone", exc)
            return
        with m.cond:
            plan = scheduler.take_over(m.scheduler, m.tracker.next_new)
            m.replan(scheduler)
            m.cond.notify_all()
        m.pool.membership.planned(gone)
        log.info("re-planned for the %d workers in the pool%s: %s", m.W - len(gone),
                 " (without %s)" % ", ".join("w%d" % w for w in gone) if gone else "", plan)

    def replica_out(self, fault: str) -> bool:
        """Leave the workers that are down out by themselves: their frames in flight are queued again, their links
        start over (here, and on the other workers through a Peer call), everything else goes on untouched. False
        when this does not apply (nobody down, or a stage would keep no replica: a chain's always would not).
        A worker that cannot be told becomes a fault of its own (the next recovery handles it)."""
        m = self.m
        if m.sending.sent_plan is None:
            return False
        down = m.links.down(only=m.live_workers())
        if not down or not self.can_leave_out(sorted(set(down) | m.pool.membership.out)):
            return False  # (a stage whose last live replica is down: every link resyncs, waiting or re-planning)
        with m.cond:
            again, dropped = m.tracker.release_workers(down, fault)
            for f in again + dropped:
                m.pool.dispatcher.release(m.tracker.records[f].route)
            for f in dropped:
                log.error("frame %d dropped: %s", f, m.tracker.records[f].reason)
                m.feed.release(f)
            m.pool.dispatcher.forget(down)
            m.pool.membership.leave_out(down, m.tracker.generation, time.time() - m.t_run)
            m.run.progressed()
            gen = m.tracker.generation
        for w in down:
            m.sending.reset_link(w)
        try:
            m.links.tell_peers(m.run_id, gen, down, True, m.live_workers())
        except MasterError as exc:
            m.fault("%s (telling it that %s is left out)" % (exc, ", ".join("w%d" % w for w in down)), gen)
        log.warning("resync of %s alone (%s): left out, its %d frames go to the other replicas; no other link "
                    "resyncs", ", ".join(m.links.name(w) for w in down), fault, len(again))
        threading.Thread(target=self.watch_return, args=(gen, list(down), True),
                         name="return-watch-%s" % "-".join("w%d" % w for w in down), daemon=True).start()
        return True

    def take_back(self, w: int, gen: int) -> None:
        """Worker w serves again after replica_out: a fresh run on it alone (it builds the plan's stage first),
        its streams, a fresh input sender (its first frame is a keyframe), and the other workers told that it is
        back (their links with it start over: keyframes both ways); then the dispatcher gives it frames. A failure
        here leaves it out (the watch tries again)."""
        m = self.m
        with self.lock:
            if m.tracker.generation != gen or w not in m.pool.membership.out or m.failure is not None:
                return
            m.links.refresh(w)
            m.count_restarts(m.links.fetch_infos(only=[w]))
            m.setup.check_infos()
            m.setup.push.push(m.sending.sent_plan, only=[w])  # int8: its stage's file, if it lost it
            m.links.start_run(m.setup_msg(gen, m.sending.sent_plan, worker=w), timeout=SETUP_TIMEOUT_S, only=[w])
            m.sending.reset_link(w)
            m.links.tell_peers(m.run_id, gen, [w], False, [x for x in m.live_workers() if x != w])
            m.open_streams(gen, only=[w])
            with m.cond:
                m.pool.membership.take_back(w, gen, time.time() - m.t_run)
                m.cond.notify_all()
            if w in m.pool.membership.planned_without:  # it had left, and the plan was made without it
                self.replan()
        log.warning("resync of %s alone: it serves again and is taken back (its link starts with a keyframe)",
                    m.links.name(w))

    def leave(self, w: int, gen: int) -> None:
        """Worker w asked to leave (SIGTERM: a stage report with `leaving`). It is routed no new frame; once the
        frames routed through it have ended (none is sent again), it is left out like a replica that failed (its
        links start over here and on the other workers), its run is ended (so it exits), and the watch takes it
        back if it serves again. When it is the last replica of a stage, its run is ended at once, and the fault
        that follows resyncs without it."""
        m = self.m
        name = m.links.name(w)
        with self.lock:
            if m.tracker.generation != gen or w in m.pool.membership.unroutable() or m.failure is not None:
                return
            if not self.can_leave_out(sorted({w} | m.pool.membership.out)):
                if not m.cfg.cluster.join:
                    log.warning("%s is leaving, and it is the last replica of a stage: the run resyncs without it",
                                name)
                    self._end_run(w)
                    return
                log.warning("%s is leaving, and it is the last replica of a stage: new frames wait for a worker to "
                            "join on %s", name, m.cfg.cluster.join)
            with m.cond:
                m.pool.membership.draining.add(w)
        log.info("%s is leaving: no new frames go to it; waiting for its %d frames", name,
                 m.pool.dispatcher.outstanding[w])
        t0 = time.time()
        with m.cond:
            while (m.pool.dispatcher.outstanding[w] > 0 and m.failure is None and not m.closing
                   and m.tracker.generation == gen and time.time() - t0 < LEAVE_WAIT_S):
                m.cond.wait(0.2)
        with self.lock:
            with m.cond:
                m.pool.membership.draining.discard(w)
                if m.tracker.generation != gen or m.failure is not None or m.closing:
                    return  # a resync came first (it handles the worker), or the run is over
                unfinished = m.pool.dispatcher.outstanding[w]
                again, dropped = m.tracker.resend_through([w], "%s left" % name) if unfinished else ([], [])
                for f in again + dropped:
                    m.pool.dispatcher.release(m.tracker.records[f].route)
                for f in dropped:
                    m.feed.release(f)
                m.pool.dispatcher.forget([w])
                m.pool.membership.leave_out([w], gen, time.time() - m.t_run, scope="left")
                m.run.progressed()
                m.cond.notify_all()
            m.sending.reset_link(w)
            try:
                m.links.tell_peers(m.run_id, gen, [w], True, m.live_workers())
            except MasterError as exc:
                m.fault("%s (telling it that w%d left)" % (exc, w), gen)
            self._end_run(w)
            self.replan()
        log.info("%s left the pool after %.1f s: %s", name, time.time() - t0,
                 "its frames finished, none is sent again" if not again else
                 "%d of its frames did not finish in %.0f s and go to the other replicas" % (len(again), LEAVE_WAIT_S))
        threading.Thread(target=self.watch_return, args=(gen, [w], True), name="return-watch-w%d" % w,
                         daemon=True).start()

    def _end_run(self, w: int) -> None:
        """EndRun on worker w (best effort: a leaving worker exits after it, or after its own wait)."""
        try:
            self.m.links.stubs[w].EndRun(pb.StreamRequest(run_id=self.m.run_id), timeout=2.0)
        except grpc.RpcError:
            pass

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

    def watch_return(self, gen: int, out: List[int], alone: bool = False) -> None:
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
                if w not in m.pool.membership.out:
                    out.remove(w)
