"""After a fault: a new generation, wait until every worker serves again, reset every hop on both sides (all
hops keyframe) and re-send the frames that were in flight; and the watch that turns silence into a fault.

A worker that is down need not stop the run: when every stage of the plan keeps a replica, the pool leaves it out
by itself (pool.replicas) and the frames it had go to the others. Only a fault that leaves a stage without a live
replica (or one with no worker down, e.g. a broken delta) resyncs every link in a new generation here, waiting for
the worker or leaving it out of that generation."""
from __future__ import annotations

import logging
import threading
import time
from typing import Sequence

import grpc

from cnnvideo.rpc import net

from .links import MasterError
from .pool.replicas import Replicas

log = logging.getLogger(__name__)


class Recovery:
    """Resync of the role `m` (its links, tracker, input hop) after a fault."""

    def __init__(self, m) -> None:
        self.m = m
        self.lock = threading.Lock()  # one resync, or one replica taken back, at a time
        self.replicas = Replicas(m, self.lock)

    def recover(self, fault: str) -> None:
        """Leave out the replicas that are down, if the plan lets them go alone (replica_out); else start a new
        generation, wait (with backoff, up to reliability.peer_wait_s) until every worker serves, detect
        restarted ones, reset every hop and queue the frames in flight for re-sending (or drop those out of
        retries)."""
        with self.lock:
            if not self.replicas.replica_out(fault):
                self._recover(fault)

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
            if not down or self.replicas.can_leave_out(down):
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
            m.run.progressed()

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
            back = m.pool.membership.resync(leave_out, gen, time.time() - m.t_run)
        m.sending.reset()
        if leave_out:
            log.warning("resynchronised at generation %d without %s: their frames go to the other replicas", gen,
                        ", ".join(m.links.name(w) for w in leave_out))
            threading.Thread(target=self.replicas.watch_return, args=(gen, list(leave_out)),
                             name="return-watch-g%d" % gen, daemon=True).start()
        else:
            log.info("resynchronised at generation %d: every hop starts with a keyframe%s", gen,
                     " (%s back)" % ", ".join("w%d" % w for w in back) if back else "")

    def name_dead_worker(self) -> None:
        """Make the failure line name the worker that is down, if one is."""
        m = self.m
        down = m.links.down(only=m.live_workers())
        if down:
            m.run.name_failure("%s is down" % m.links.name(down[0]))


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
