"""A pool made only of workers that join (`cluster.join` with no `cluster.workers`): before its run the master serves
Join and waits until `cluster.min_workers` workers have joined, saying so while it waits; they become the pool's
first workers, in the order they joined, and setup dials them as it dials listed ones. Workers that join later join
the running pool (pool.joins). A joiner is admitted (token, rate), dialled (Info) and checked (model, frame size,
cuts, engine) before it is counted; settings and profiles are setup's to check, as for listed workers."""
from __future__ import annotations

import logging
import threading
import time
from typing import List, Optional

from cnnvideo.config import Config
from cnnvideo.config_rules import join_token
from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
from cnnvideo.rpc import net

from .join_server import MasterServicer
from .pool.admission import Admission, JoinRefused
from .pool.joins import ask_info
from .worker_answers import joiner_problem

log = logging.getLogger(__name__)

SAY_EVERY_S = 15.0  # how often the master says it is still waiting for workers


class Gathering:
    """The pool's first workers, as they join (`join`, from the gRPC threads); `wait` returns their addresses."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.need = cfg.cluster.min_workers
        self.admission = Admission(join_token(cfg))
        self.addresses: List[str] = []
        self.infos: List = []
        self.cond = threading.Condition()
        self.stopped = False

    def join(self, address: str, token: str, peer: str = "") -> int:
        """Count the worker at `address` in: its id. JoinRefused (one line, logged here too) when it may not."""
        try:
            return self._join(address, token)
        except JoinRefused as exc:
            self.admission.say(log, exc, address, peer)
            raise

    def _join(self, address: str, token: str) -> int:
        self.admission.admit_from(address, token)
        with self.cond:
            if address in self.addresses:  # it restarted while the pool gathers: the same place
                return self.addresses.index(address)
            if len(self.addresses) >= self.need:
                raise JoinRefused("UNAVAILABLE", "the master is setting up its run: try again")
        info = self._info(address)
        with self.cond:
            if address in self.addresses:
                return self.addresses.index(address)
            if self.stopped or len(self.addresses) >= self.need:
                raise JoinRefused("UNAVAILABLE", "the master is setting up its run: try again")
            problem = self._problem(info)
            if problem:
                raise JoinRefused("FAILED_PRECONDITION", problem)
            self.addresses.append(address)
            self.infos.append(info)
            w = len(self.addresses) - 1
            log.info("w%d joined at %s (%s, %s): %d of %d workers", w, address, info.device or info.host,
                     info.engine, len(self.addresses), self.need)
            self.cond.notify_all()
            return w

    def _info(self, address: str):
        chan = net.channel(address, self.cfg.max_message_bytes)
        try:
            return ask_info(pb_grpc.WorkerStub(chan), address, self.cfg.limits.rpc_timeout_s)
        finally:
            chan.close()

    def _problem(self, info) -> str:
        """Why this worker cannot serve with those already counted (the first is checked against the config only),
        or ""."""
        return joiner_problem(info, self.infos[0] if self.infos else info, self.cfg.model, self.cfg.frame_size)

    def wait(self, stop: threading.Event) -> List[str]:
        """Block until `need` workers have joined (their addresses) or `stop` is set (MasterError-free: [])."""
        said = 0.0
        with self.cond:
            while len(self.addresses) < self.need and not stop.is_set():
                if time.time() - said >= SAY_EVERY_S:
                    log.info("waiting for workers to join on %s: %d of %d joined", self.cfg.cluster.join,
                             len(self.addresses), self.need)
                    said = time.time()
                self.cond.wait(0.5)
            self.stopped = True
            return list(self.addresses) if len(self.addresses) >= self.need else []


def gather(cfg: Config, run_id: str, stop: threading.Event) -> List[str]:
    """Serve Join on `cluster.join` until `cluster.min_workers` workers have joined: their addresses ([] if `stop`
    was set first). The port is free again on return (the role's JoinServer takes it after setup)."""
    gathering = Gathering(cfg)
    server = net.Server(cfg.cluster.join, cfg.max_message_bytes, threads=4, service_name="cnnvideo.Master")
    pb_grpc.add_MasterServicer_to_server(MasterServicer(gathering, run_id, cfg.events.camera), server.grpc)
    server.start()
    log.info("the pool is the workers that join: waiting for %d on %s%s", gathering.need, cfg.cluster.join,
             " (with the join token)" if gathering.admission.token else "")
    try:
        return gathering.wait(stop)
    finally:
        server.stop(grace=1.0)


def first_workers(cfg: Config, run_id: str, stop: Optional[threading.Event] = None) -> bool:
    """For a config with no listed workers: wait for the joins and list them as `cluster.workers`. False if stopped
    before enough joined."""
    if cfg.cluster.workers:
        return True
    workers = gather(cfg, run_id, stop or threading.Event())
    cfg.cluster.workers = workers
    return bool(workers)
