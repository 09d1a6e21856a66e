"""Worker links: the master's channels and stubs to every worker and the trainer, setup calls that wait out a
restarting peer, the long-lived result/stage streams, and resync (fresh channels, restart detection)."""
from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Optional, Sequence, Tuple

import grpc

from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
from cnnvideo.rpc import convert, net

log = logging.getLogger(__name__)

class MasterError(RuntimeError):
    """The run cannot go on (a worker is down, a server refused, a frame was lost)."""


def own_id(setup: pb.RunSetup, w: int) -> pb.RunSetup:
    """`setup` naming worker `w` as the one it is for (one that joined learns its id from it; a listed one is told
    its own) unless it names one already."""
    if setup.worker_id >= 0 or not setup.workers:
        return setup
    msg = pb.RunSetup()
    msg.CopyFrom(setup)
    msg.worker_id = w
    return msg


class WorkerLinks:
    """Channels to the chain's workers and the trainer, and the streams of the current generation."""

    def __init__(self, addresses: List[str], trainer: str, max_bytes: int, timeout: float, camera: str = "") -> None:
        self.addresses = list(addresses)
        self.trainer_address = trainer
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.camera = camera  # the camera whose runs these links start (Prepare names it: its int8 calibration)
        self.channels: List[grpc.Channel] = [net.channel(a, max_bytes) for a in self.addresses]
        self.stubs = [pb_grpc.WorkerStub(c) for c in self.channels]
        self.trainer_channel = net.channel(trainer, max_bytes)
        self.trainer = pb_grpc.TrainerStub(self.trainer_channel)
        self.infos: List[pb.WorkerInfo] = []
        self.calls: List[grpc.Future] = []
        self.threads: List[threading.Thread] = []

    @property
    def n(self) -> int:
        return len(self.addresses)

    def add(self, address: str, info: pb.WorkerInfo) -> int:
        """A worker joined at `address` (its Info already fetched): its id, the next one."""
        self.addresses.append(address)
        self.channels.append(net.channel(address, self.max_bytes))
        self.stubs.append(pb_grpc.WorkerStub(self.channels[-1]))
        self.infos.append(info)
        return len(self.addresses) - 1

    def name(self, w: int) -> str:
        return "worker w%d at %s" % (w, self.addresses[w])

    # ------------------------------------------------------------------ calls
    def call(self, w: int, method: str, request, timeout: Optional[float] = None):
        """One call to worker w; MasterError naming the worker and the status if it fails."""
        try:
            return getattr(self.stubs[w], method)(request, timeout=timeout or self.timeout)
        except grpc.RpcError as exc:
            raise MasterError("%s: %s failed: %s" % (self.name(w), method, net.code_name(exc))) from None

    def call_waiting(self, w: int, method: str, request, timeout: float, wait_s: float):
        """call(), but while the worker is down or restarting (UNAVAILABLE, or no health answer) wait for it with
        backoff, up to wait_s, on a fresh channel (a dead peer leaves the old one in reconnect backoff)."""
        backoff = net.Backoff(wait_s)
        while True:
            try:
                return getattr(self.stubs[w], method)(request, timeout=timeout)
            except grpc.RpcError as exc:
                retry = exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
                if not retry or not backoff.wait():
                    raise MasterError("%s: %s failed: %s" % (self.name(w), method, net.code_name(exc))) from None
                log.warning("%s: %s failed (%s); waiting for it", self.name(w), method, net.code_name(exc))
                self.refresh(w)

    def refresh(self, w: int) -> None:
        """A fresh channel to worker w (no reconnect backoff left over from a dead instance)."""
        self.channels[w].close()
        self.channels[w] = net.channel(self.addresses[w], self.max_bytes)
        self.stubs[w] = pb_grpc.WorkerStub(self.channels[w])

    def wait_serving(self, timeout: float) -> None:
        """Wait until every worker and the trainer answer their health check; MasterError naming the first that
        did not within `timeout`."""
        for name, addr in [("w%d" % i, a) for i, a in enumerate(self.addresses)] + [("trainer",
                                                                                      self.trainer_address)]:
            if not net.wait_healthy(addr, timeout):
                raise MasterError("%s at %s is not serving (no healthy answer in %.0f s)" % (name, addr, timeout))

    def _which(self, only: Optional[Sequence[int]]) -> List[int]:
        return list(range(self.n)) if only is None else [w for w in only if 0 <= w < self.n]

    def down(self, timeout: float = 1.0, only: Optional[Sequence[int]] = None) -> List[int]:
        """Workers (of `only`, default all) that do not answer their health check now."""
        return [w for w in self._which(only) if not net.check_health(self.addresses[w], timeout=timeout)]

    def fetch_infos(self, wait_s: float = 0.0, only: Optional[Sequence[int]] = None) -> List[int]:
        """Info from every worker of `only` (default all; waiting up to wait_s for each); the workers whose instance
        changed since the previous fetch (they restarted). Workers not asked keep their last Info."""
        which = self._which(only)
        got = {w: self.call_waiting(w, "Info", pb.Empty(), self.timeout, wait_s) if wait_s > 0
               else self.call(w, "Info", pb.Empty()) for w in which}
        restarted = [w for w, info in got.items() if self.infos and info.instance != self.infos[w].instance]
        for w in restarted:
            log.warning("%s restarted (instance %s -> %s)", self.name(w), self.infos[w].instance, got[w].instance)
        if len(self.infos) == self.n:
            for w, info in got.items():
                self.infos[w] = info
        else:
            self.infos = [got[w] for w in range(self.n)] if len(got) == self.n else self.infos
        return restarted

    # ------------------------------------------------------------------ runs and streams
    def start_run(self, setup: pb.RunSetup, timeout: Optional[float] = None, only: Optional[Sequence[int]] = None,
                  answered: Optional[Callable[[int], None]] = None) -> None:
        """StartRun on every worker of `only` (default all) at once (with a warm plan each builds its stage
        meanwhile); `answered(w)` as each worker answers."""
        def start(w: int) -> None:
            self.call(w, "StartRun", own_id(setup, w), timeout)
            if answered is not None:
                answered(w)

        with ThreadPoolExecutor(max_workers=max(self.n, 1)) as pool:
            for f in [pool.submit(start, w) for w in self._which(only)]:
                f.result()

    def open_streams(self, run_id: str, gen: int, read_results: Callable, read_stages: Callable,
                     only: Optional[Sequence[int]] = None) -> None:
        """Results and Stages streams of generation `gen` on every worker of `only` (default all), each read by its
        own thread as reader(w, call, gen)."""
        req = pb.StreamRequest(run_id=run_id, generation=gen)
        self.threads = [t for t in self.threads if t.is_alive()]
        for w in self._which(only):
            for reader, method in ((read_results, "Results"), (read_stages, "Stages")):
                call = getattr(self.stubs[w], method)(req)
                self.calls.append(call)
                t = threading.Thread(target=reader, args=(w, call, gen), name="%s-w%d-g%d" % (method, w, gen),
                                     daemon=True)
                t.start()
                self.threads.append(t)

    def cancel_streams(self) -> None:
        old, self.calls = self.calls, []
        for call in old:
            call.cancel()

    def reconnect(self, setup: pb.RunSetup, read_results: Callable, read_stages: Callable) -> List[int]:
        """Resync: fresh channels, Info (restart detection), StartRun at setup.generation everywhere, new
        streams. Returns the workers that restarted; MasterError / RpcError if one is not back."""
        for w in range(self.n):
            self.refresh(w)
        restarted = self.fetch_infos()
        self.start_run(setup)
        self.open_streams(setup.run_id, setup.generation, read_results, read_stages)
        return restarted

    def prepare(self, plan, only: Optional[Sequence[int]] = None, calibration=None) -> List[Tuple[bool, str]]:
        """(ready, error) of every worker's (of `only`, default all) stage of `plan` (a Plan), asked of all at
        once; each worker starts building its stage in the background if it has not; `calibration`: on that int8
        calibration (a camera's new one) instead of the run's. RpcError when one cannot be asked."""
        req = pb.PrepareRequest(plan=convert.stage_plan_to_pb(plan.cuts, plan.stage_of(self.n)), camera=self.camera,
                                calibration=None if calibration is None else convert.calibration_to_pb(calibration))
        calls = [self.stubs[w].Prepare.future(req, timeout=self.timeout) for w in self._which(only)]
        return [(bool(r.ready), str(r.error)) for r in (c.result() for c in calls)]

    def tell_peers(self, run_id: str, gen: int, replicas: Sequence[int], out: bool, only: Sequence[int],
                   joined: bool = False) -> None:
        """Tell every worker of `only` that the pool replicas `replicas` are left out (`out`) or back (or, `joined`,
        new: with their addresses), so that their links with them start over (the Peer call); MasterError naming
        the first worker that could not be told."""
        for w in self._which(only):
            for r in replicas:
                self.call(w, "Peer", pb.PeerRequest(run_id=run_id, generation=gen, worker=r, out=out,
                                                    address=self.addresses[r] if joined else ""))

    def end_run(self, run_id: str) -> None:
        """Tell every worker the run is over (best effort: a dead worker has nothing to end)."""
        for w in range(self.n):
            try:
                self.stubs[w].EndRun(pb.StreamRequest(run_id=run_id), timeout=2.0)
            except grpc.RpcError:
                pass
        self.cancel_streams()
        for t in self.threads:
            t.join(2.0)

    def close(self) -> None:
        self.cancel_streams()
        for chan in self.channels + [self.trainer_channel]:
            chan.close()
