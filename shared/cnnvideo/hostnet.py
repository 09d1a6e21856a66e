"""The host's network for what a role dials outside the run, when `cnnvideo local` runs the roles in a network
namespace of their own (tc links): the one rule, and its one owner.

With tc links the launcher re-runs itself in a fresh network namespace whose loopback is shaped per hop, and names
its own (the host's) namespace in HOST_NETNS_ENV. The roles talk to each other inside; what they dial outside the
run (a camera, an MQTT broker) must reach the host's network: the namespace's 127.0.0.1 is not the host's, and it
has no route anywhere else. `in_netns(fn)` runs `fn` in a short-lived thread that entered that namespace
(setns acts per thread, so the rest of the process stays inside) and returns what it returns. What `fn` makes
there keeps the host's network for good: a socket keeps the namespace it was made in, whichever thread uses it
later, and a thread keeps the namespace of the thread that started it. Without HOST_NETNS_ENV (links paced or
none, `cnnvideo master` in compose or on the Pis: a normal network) `fn` just runs in the caller's thread.
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import Any, Callable, Dict, Optional, TypeVar

HOST_NETNS_ENV = "CNNVIDEO_HOST_NETNS"  # a network namespace (/proc/PID/ns/net): the host's, for a role in another
CLONE_NEWNET = 0x40000000
T = TypeVar("T")


class NetnsError(OSError):
    """The thread could not enter the host's network namespace."""


def host_netns() -> Optional[str]:
    """The host's network namespace when this process runs in another one (HOST_NETNS_ENV), else None."""
    return os.environ.get(HOST_NETNS_ENV) or None


def enter_netns(path: str) -> None:
    """Move the calling thread (only it: setns acts per thread) into the network namespace at `path`; NetnsError
    if it cannot (os.setns needs Python 3.12; libc's setns does the same)."""
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise NetnsError(exc.errno, "setns(%s): %s" % (path, exc.strerror)) from None
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise NetnsError(err, "setns(%s): %s" % (path, os.strerror(err)))
    finally:
        os.close(fd)


def in_netns(fn: Callable[[], T], netns: Optional[str] = None, name: str = "host-netns") -> T:
    """fn() from a thread in network namespace `netns` (default: host_netns(); "" or None there: in the
    caller's thread, unchanged). Its result is returned and its exception raised in the caller's thread;
    NetnsError if the namespace cannot be entered."""
    if netns is None:
        netns = host_netns()
    if not netns:
        return fn()
    out: Dict[str, Any] = {}

    def run() -> None:
        try:
            enter_netns(netns)
            out["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            out["error"] = exc

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["result"]
