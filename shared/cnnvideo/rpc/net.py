"""gRPC plumbing: channels and servers with message size limits, health service, readiness, signals, ports."""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from concurrent import futures
from typing import Callable, List, Optional, Tuple

import grpc
import grpc.experimental
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

log = logging.getLogger(__name__)

# Mutual TLS for every channel and server this process makes (cnnvideo.rpc.tls.setup sets it from the config);
# None = plaintext, which only happens when the config says `tls.enabled: false`.
_TLS = None


def use_tls(identity) -> None:
    """Make later channels/servers of this process use `identity` (a rpc.tls.Identity), or plaintext if None."""
    global _TLS
    _TLS = identity
    if identity is not None:
        log.info("mutual TLS on (%r)", identity)


def options(max_bytes: int) -> List[Tuple[str, int]]:
    """Channel/server options: message size limits both ways, keepalive so a dead peer is noticed."""
    return [
        ("grpc.max_send_message_length", int(max_bytes)),
        ("grpc.max_receive_message_length", int(max_bytes)),
        ("grpc.keepalive_time_ms", 5000),
        ("grpc.keepalive_timeout_ms", 5000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]


def server_options(max_bytes: int) -> List[Tuple[str, int]]:
    return options(max_bytes) + [
        ("grpc.http2.min_ping_interval_without_data_ms", 1000),
        ("grpc.so_reuseport", 0),
    ]


def channel_options(max_bytes: int) -> List[Tuple[str, int]]:
    """A channel's options: `options`, and its server-streaming calls (Results, Stages) read on the thread that
    iterates them, with no channel spin thread handing each message over (gRPC's SingleThreadedUnaryStream)."""
    return options(max_bytes) + [(grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1)]


def channel(address: str, max_bytes: int) -> grpc.Channel:
    """A channel to host:port with the configured message size limits: mutual TLS if configured, else plaintext."""
    if _TLS is not None:
        return grpc.secure_channel(address, _TLS.channel_credentials(), options=channel_options(max_bytes))
    return grpc.insecure_channel(address, options=channel_options(max_bytes))


def wait_ready(chan: grpc.Channel, timeout: float) -> None:
    """Block until the channel is connected; grpc.FutureTimeoutError after `timeout` seconds."""
    grpc.channel_ready_future(chan).result(timeout=timeout)


HEARTBEAT_ENV = "CNNVIDEO_HEARTBEAT"  # file a serving process touches (containers probe it: docker/healthcheck.sh)
HEARTBEAT_S = 2.0


class Heartbeat:
    """Touches `path` every `interval` seconds while the server at `target` answers its own health check with
    SERVING over a real channel (so the probe tests the transport, not just a flag); removes it on stop.
    A container probe then only stats a file instead of starting a Python gRPC client each time."""

    def __init__(self, path: str, target: str, interval: float = HEARTBEAT_S) -> None:
        self.path = path
        self.target = target
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.interval + 3.0)
        try:
            os.remove(self.path)
        except OSError:
            pass

    def _loop(self) -> None:
        chan = channel(self.target, 4 * 1024 * 1024)
        stub = health_pb2_grpc.HealthStub(chan)
        try:
            while not self._stop.is_set():
                try:
                    resp = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=self.interval)
                    if resp.status == health_pb2.HealthCheckResponse.SERVING:
                        with open(self.path, "a"):
                            os.utime(self.path, None)
                except (grpc.RpcError, OSError) as exc:
                    log.debug("heartbeat check of %s failed: %s", self.target, exc)
                self._stop.wait(self.interval)
        finally:
            chan.close()


class Server:
    """A gRPC server bound to one address, with the standard health service; stop() is graceful."""

    def __init__(self, address: str, max_bytes: int, threads: int = 8, service_name: str = "") -> None:
        self.address = address
        self.service_name = service_name
        self.grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=threads), options=server_options(max_bytes))
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
        bind = address
        host, _, port = address.rpartition(":")
        if host not in ("127.0.0.1", "localhost", "::1", "[::1]"):
            bind = "[::]:" + port  # listen on every interface for remote peers
        self.tls = _TLS
        if self.tls is not None:  # clients must present a certificate signed by our CA
            self.port = self.grpc.add_secure_port(bind, self.tls.server_credentials())
        else:
            self.port = self.grpc.add_insecure_port(bind)
        if self.port == 0:
            raise OSError("cannot listen on %s (port in use?)" % address)
        self._stopped = threading.Event()
        self.heartbeat: Optional[Heartbeat] = None

    def start(self) -> None:
        self.grpc.start()
        self.set_serving(True)
        log.info("listening on %s", self.address)
        path = os.environ.get(HEARTBEAT_ENV, "")
        if path:  # plaintext: the loopback port; TLS: the configured address (the certificate names that host)
            target = self.address if self.tls is not None else "127.0.0.1:%d" % self.port
            self.heartbeat = Heartbeat(path, target)
            self.heartbeat.start()

    def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        self.health.set("", status)
        if self.service_name:
            self.health.set(self.service_name, status)

    def stop(self, grace: float = 2.0) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self.heartbeat is not None:
            self.heartbeat.stop()
        try:
            self.health.enter_graceful_shutdown()
        except Exception:  # older grpcio-health-checking
            self.set_serving(False)
        self.grpc.stop(grace).wait(grace + 1.0)


def check_health(address: str, timeout: float = 2.0, max_bytes: int = 4 * 1024 * 1024) -> bool:
    """True if the server at `address` answers the health check with SERVING."""
    chan = channel(address, max_bytes)
    try:
        stub = health_pb2_grpc.HealthStub(chan)
        resp = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        return resp.status == health_pb2.HealthCheckResponse.SERVING
    except grpc.RpcError:
        return False
    finally:
        chan.close()


def wait_healthy(address: str, timeout: float, alive: Optional[Callable[[], bool]] = None) -> bool:
    """Poll the health service until SERVING, `timeout` passes, or `alive()` says the process died."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check_health(address, timeout=1.0):
            return True
        if alive is not None and not alive():
            return False
        time.sleep(0.2)
    return False


def on_signals(callback: Callable[[int], None]) -> None:
    """Call `callback(signum)` on SIGTERM/SIGINT (main thread only; no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum, _frame):
        callback(signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
PORTS_BELOW_EPHEMERAL = 8000  # free_port draws from this many ports just below the kernel's ephemeral range


def _ephemeral_low(path: str = EPHEMERAL_RANGE_FILE) -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        with open(path) as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1", tries: int = 50) -> int:
    """A TCP port that was free a moment ago on `host`, drawn at random from below the kernel's ephemeral range.
    Outgoing connections and `bind(0)` take their ports from that range, so a server restarted on its port (a
    worker after a crash, a broker brought back) does not find it taken by one of them in between. If no port
    there is free (or the range starts too low), the kernel picks one."""
    import random

    low = _ephemeral_low()
    start = max(1024, low - PORTS_BELOW_EPHEMERAL)
    for _ in range(tries if low - start >= 100 else 0):
        port = random.randrange(start, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def code_name(exc: grpc.RpcError) -> str:
    """'UNAVAILABLE: details' for an RpcError."""
    try:
        return "%s: %s" % (exc.code().name, exc.details())
    except Exception:
        return str(exc)


class Backoff:
    """Waits 0.2 s doubling to 2 s between tries of a peer that is down, until `seconds` have passed."""

    def __init__(self, seconds: float, first: float = 0.2, longest: float = 2.0) -> None:
        self.deadline = time.time() + seconds
        self.delay = first
        self.longest = longest

    def wait(self) -> bool:
        """Sleep before the next try; False (without sleeping) if that would pass the deadline."""
        if time.time() + self.delay > self.deadline:
            return False
        time.sleep(self.delay)
        self.delay = min(self.delay * 2, self.longest)
        return True
