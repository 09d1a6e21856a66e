"""After a fault: a new generation, wait until every worker serves again, reset every hop on both sides (all
hops keyframe) and re-send the frames that were in flight; and the watch that turns silence into a fault."""
from __future__ import annotations

import logging
import time

import grpc

from cnnvideo.master.links import MasterError
from cnnvideo.rpc import net

log = logging.getLogger(__name__)


class Recovery:
    """Resync of the role `m` (its links, tracker, input hop) after a fault."""

    def __init__(self, m) -> None:
        self.m = m

    def recover(self, fault: str) -> None:
        """Start a new generation, wait (with backoff, up to reliability.peer_wait_s) until every worker serves,
        detect restarted ones, reset every hop and queue the frames in flight for re-sending (or drop those out
        of retries)."""
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
            if not down:
                try:
                    self.resync(gen)
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

    def resync(self, gen: int) -> None:
        """Fresh channels (no reconnect backoff), restart detection, StartRun(gen) everywhere, new streams; then
        every hop starts with a keyframe (fresh runs on the workers, a reset input sender here)."""
        m = self.m
        for w in range(m.W):
            m.links.refresh(w)
        m.count_restarts(m.links.fetch_infos())
        m.setup.check_infos()
        m.links.start_run(m.setup_msg(gen))
        m.links.open_streams(m.run_id, gen, m.reader.results, m.reader.stages)
        m.sending.reset()
        log.info("resynchronised at generation %d: every hop starts with a keyframe", gen)

    def name_dead_worker(self) -> None:
        """Make the failure line name the worker that is down, if one is."""
        m = self.m
        down = m.links.down()
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
                dead = m.links.down(timeout=2.0)
                if dead:
                    m.fault("%s does not answer (no progress for %.0f s)" % (m.links.name(dead[0]),
                                                                             now - m.last_event), gen)
                elif now - m.last_event > max(m.timeout, 6 * stall_s):
                    m.fault("no progress for %.0f s with %d frames in flight" % (now - m.last_event,
                                                                                 m.tracker.in_flight()), gen)
            finally:
                m.cond.acquire()
