"""A worker that joins the running pool (`cnnvideo worker --join`): admitted (token, rate), dialled and checked
(model, frame size, engine, settings: its Costs answer), given the next id, started at the run's generation with
the pool's addresses and told to the other workers; then the planner plans the grown pool, and frames take the new
plan once every worker has built its stage of it (warming.StageWarmer), the joined one first (its StartRun builds
its stage of it). Its first input frame is a keyframe (a fresh link). A member's address that asks again is one that
restarted: the return watch (or the resync waiting for it) takes it back, under the id it had."""
from __future__ import annotations

import logging
import time
from typing import Optional

import grpc

from cnnvideo.config_rules import join_token
from cnnvideo.plan.costinputs import alike_key
from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
from cnnvideo.rpc import net
from cnnvideo.wire import settings

from ..links import MasterError
from ..setup import SETUP_TIMEOUT_S
from ..worker_answers import joiner_problem
from .admission import Admission, JoinRefused

log = logging.getLogger(__name__)


def ask_info(stub, address: str, timeout: float):
    """The Info of the worker asking to join (`stub`: dialled at the address it gave); JoinRefused if it does not
    answer there."""
    try:
        return stub.Info(pb.Empty(), timeout=timeout)
    except grpc.RpcError as exc:
        raise JoinRefused("FAILED_PRECONDITION", "the master cannot reach it at %s: %s"
                          % (address, net.code_name(exc))) from None


class Joins:
    """Takes workers into the pool of the role `m` (`lock`: the recovery's, one change of the pool at a time)."""

    def __init__(self, m, lock) -> None:
        self.m = m
        self.lock = lock
        self.admission = Admission(join_token(m.cfg))

    def join(self, address: str, token: str, peer: str = "") -> int:
        """Take the worker at `address` into the pool: its id. JoinRefused (a gRPC status name and one line, also
        logged here) when it may not or cannot join."""
        try:
            return self._join(address, token)
        except JoinRefused as exc:
            self.admission.say(log, exc, address, peer)
            raise
        except Exception as exc:  # noqa: BLE001 - a bug here must not take the run down: the worker hears why
            log.exception("join of the worker at %s failed", address)
            raise JoinRefused("INTERNAL", "the master failed to take it: %s" % exc) from None

    def _join(self, address: str, token: str) -> int:
        m = self.m
        self.admission.admit_from(address, token)
        if m.t_run is None or m.links is None:
            raise JoinRefused("UNAVAILABLE", "the master is still setting up its run: try again")
        if m.failure is not None or m.closing:
            raise JoinRefused("UNAVAILABLE", "the run is over")
        if address in m.addresses:  # only the worker serving there can ask from there: it restarted
            w = m.addresses.index(address)
            log.info("%s asks to join again (it restarted): it is taken back once it serves (%s)", m.links.name(w),
                     "the return watch" if w in m.pool.membership.out else "the resync waiting for it")
            return w
        info, costs = self._ask(address)
        twin = next((w for w, i in enumerate(m.infos) if info.instance and i.instance == info.instance), None)
        if twin is not None:  # the same process under another address (its host name, then its IP)
            raise JoinRefused("ALREADY_EXISTS", "this worker is already in the pool as w%d at %s"
                              % (twin, m.addresses[twin]))
        with self.lock:
            if m.failure is not None or m.closing:
                raise JoinRefused("UNAVAILABLE", "the run is over")
            return self._add(address, info, costs)

    def _ask(self, address: str):
        """(Info with the model checked, Costs) of the worker at `address`; JoinRefused if it cannot serve."""
        m = self.m
        chan = net.channel(address, m.max_bytes)
        try:
            stub = pb_grpc.WorkerStub(chan)
            info = ask_info(stub, address, m.timeout)
            problem = joiner_problem(info, m.infos[0], m.cfg.model, m.cfg.frame_size)
            if problem:
                raise JoinRefused("FAILED_PRECONDITION", problem)
            alike = self._alike(info)
            if alike is not None:  # its settings are checked by StartRun
                return info, alike
            cfg = m.cfg
            request = pb.CostRequest(iters=cfg.profile_iters, rescale=cfg.profile_rescale,
                                     settings=m.settings_pb(settings.WORKER_KEYS))
            m.setup.push.push_profile_to(stub, address)  # int8: the stage it profiles, quantized here
            try:
                costs = stub.Costs(request, timeout=SETUP_TIMEOUT_S)
            except grpc.RpcError as exc:
                why = exc.details() if exc.code() == grpc.StatusCode.FAILED_PRECONDITION else net.code_name(exc)
                raise JoinRefused("FAILED_PRECONDITION", "its profile (Costs): %s" % why) from None
            return info, costs
        finally:
            chan.close()

    def _alike(self, info) -> Optional[pb.SegmentCosts]:
        """The profile of a member alike to the joining worker (same device and CPU cap, cost_model.alike_profiles),
        as that worker's own: alike workers share one profile, and the joiner need not profile itself (minutes on a
        capped device). None: a new kind of device, which is profiled (its Costs)."""
        m = self.m
        key = alike_key(info.device, info.cfs_quota_s, info.cfs_period_s)
        if not m.cfg.cost_model.alike_profiles or key is None:
            return None
        for w, c in enumerate(m.setup.products.costs):
            if alike_key(c.device, c.cfs_quota_s, c.cfs_period_s) == key:
                log.info("the worker joining is alike to w%d (%s): it is planned with w%d's profile", w, info.device, w)
                return c
        return None

    def _add(self, address: str, info, costs) -> int:
        """Grow the pool by the worker at `address` (holding the lock): its id."""
        m = self.m
        t0 = time.time()
        gone = sorted(m.pool.membership.out)
        scheduler = m.setup.scheduler_for(m.setup.products.costs + [costs], gone=gone)  # (one worker more)
        with m.cond:
            gen = m.tracker.generation
            info.worker_id = m.W  # its id (its Info was read before it knew it)
            w = m.links.add(address, info)
            m.pool.add_worker(m.cfg, gen, t0 - m.t_run, address)
            m.pool.membership.out.add(w)  # no frame goes to it before it is started
            m.sending.hop_plan.grow(m.W)
            m.worker_restarts.append(0)
            plan = scheduler.take_over(m.scheduler, m.tracker.next_new)
        try:
            m.setup.push.push(plan, only=[w])  # int8: its stage's file, quantized here (once), before it builds
            m.links.start_run(m.setup_msg(gen, plan, worker=w), timeout=SETUP_TIMEOUT_S, only=[w])
            m.links.tell_peers(m.run_id, gen, [w], False, [x for x in m.live_workers() if x != w], joined=True)
            m.open_streams(gen, only=[w])
        except MasterError as exc:
            with m.cond:
                m.pool.membership.leave_out([w], gen, time.time() - m.t_run, scope="join failed")
            raise JoinRefused("FAILED_PRECONDITION", "it could not be started: %s" % exc) from None
        m.setup.products.costs.append(costs)
        with m.cond:
            m.pool.membership.out.discard(w)
            m.pool.membership.planned(gone)
            m.replan(scheduler)
            m.cond.notify_all()
        log.info("%s joined the pool (%s, %s): %d workers; planned %s, frames take it once every worker has "
                 "built its stage (%.1f s)", m.links.name(w), costs.device or info.host, info.engine, m.W, plan,
                 time.time() - t0)
        return w
