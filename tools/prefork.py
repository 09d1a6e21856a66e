"""Roles of `cnnvideo local` forked from one process that has imported torch and torchvision already.

Each role is its own OS process, as before, but starting one no longer pays the imports: torch and torchvision
take about 4 s of CPU a process here (torchvision 0.29's `ops` imports `torch._dynamo`, 2.5 s of it), which was
most of the CPU of a short local run (4 roles, 16.5 s of CPU for 16 small frames), and ten times that in wall time
for a role capped at 0.1 CPU, since a role joins its cgroup before it imports anything.

The server (`python -m cnnvideo.tools.prefork FD`) is the launcher's child. It imports the heavy modules, none of
which starts a thread or opens a socket (gRPC is not imported before a fork), then serves one Unix socket:
- the launcher sends a request, one JSON line {"argv": [...], "env": {...}, "cwd": ...}, with the role's stdout
  pipe as SCM_RIGHTS; the server forks, and the child starts a session of its own, takes the pipe as stdout and
  stderr and the request's environment and directory, and runs `cnnvideo.tools.cli.main` on the argv after
  `-m cnnvideo`;
- the server answers {"pid": N}, and {"exit": N, "code": C} when the role ends (C < 0: killed by signal -C).
When the launcher goes away the server sends SIGTERM to the roles still running, waits for them to end, then
exits. `CNNVIDEO_PREFORK=0` turns it off (each role is then started with `python -m cnnvideo` again), and a server
that fails makes the launcher do the same, with one line saying why.

A hub (`python -m cnnvideo.tools.prefork --hub PATH`) pays the imports once for many runs, e.g. a test session's:
it preloads, listens on the Unix socket PATH, and forks one run's server per connection, which then serves that
launcher exactly as above, from inside the launcher's network namespace (sent as an fd; `links: tc` runs the
launcher in a namespace of its own). A launcher whose environment names a hub (`CNNVIDEO_PREFORK_HUB=PATH`)
connects to it instead of starting a server, and starts its own when the hub does not answer, runs in another
mount, PID, UTS, IPC or user namespace, or cannot give its server the launcher's network namespace.
"""
from __future__ import annotations

import array
import atexit
import ctypes
import errno
import gc
import importlib
import json
import os
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from typing import Dict, List, Optional, Sequence

from cnnvideo.model.vision import load_torchvision
from cnnvideo.tools.cli import main

# imported before any fork when installed (torchvision without torch._dynamo: cnnvideo.model.vision); not
# onnxruntime, whose sessions' thread pools must be a role's own, nor cv2, which starts threads of its own unless
# OMP_NUM_THREADS=1
PRELOAD = ("numpy", "yaml", "torch", "torchvision", "cnnvideo.config", "cnnvideo.tools.cli",
           "cnnvideo.model.zoo", "cnnvideo.model.graph", "cnnvideo.model.engines", "cnnvideo.plan.profiling")
# and for a run whose roles use ONNX Runtime (onnx_wanted): its roles would each import onnx (0.8 s of CPU), which
# a run of torch roles never does
ONNX_PRELOAD = ("onnx",)
NOT_BEFORE_FORK = ("grpc",)  # threads and sockets that must not be shared across a fork
ENV = "CNNVIDEO_PREFORK"
HUB_ENV = "CNNVIDEO_PREFORK_HUB"  # the Unix socket of a hub the launcher asks for its run's server
MODEL_ARG = "model="  # an argument of the server naming a model to build before forking: model=["alexnet","random",0]
MAX_MESSAGE = 1 << 20


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


def _exit_code(status: int) -> int:
    """Popen's returncode from a wait status: the exit code, or -signal."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


# ---------------------------------------------------------------------------------------------------- the server
def _native_threads() -> int:
    """Threads of this process, native ones included (1 where /proc cannot tell)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _send(sock: socket.socket, msg: dict) -> None:
    sock.sendall((json.dumps(msg) + "\n").encode())


def leave(code: int) -> None:
    """End this process as the interpreter's exit would, but for its finalization: non-daemon threads are joined,
    atexit handlers run (logging flushed, weakref finalizers), the standard streams are flushed, and then os._exit.
    Finalization would clear every module and free the heap this process shares with the server it was forked from,
    writing to (so copying) every page of it, torch's included: 0.4-0.6 CPU-s a process, spent as it ends
    (results-data/ci/prefork-exit-ab.txt). multiprocessing's forked children end the same way."""
    try:
        threading._shutdown()  # what the interpreter's exit does first: wait for non-daemon threads
    except BaseException:  # (KeyboardInterrupt while waiting, as at a normal exit)
        pass
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


def _child(sock: socket.socket, fd: int, request: dict) -> None:
    """In the forked child: become the role, then leave as `python -m cnnvideo` would, without the interpreter's
    finalization (`leave`)."""
    code = 1
    try:
        sock.close()
        os.setsid()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        if fd > 2:
            os.close(fd)
        for s in (signal.SIGTERM, signal.SIGCHLD):
            signal.signal(s, signal.SIG_DFL)
        # as a new interpreter starts: a write to a pipe or socket whose reader went away raises BrokenPipeError
        # (SIG_DFL would kill the role silently, e.g. a master whose live page lost a browser connection mid-answer)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        argv = list(request["argv"])
        sys.argv = ["cnnvideo"] + argv

        code = int(main(argv) or 0)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # the role's own traceback, as `python -m cnnvideo` would print it
        import traceback

        traceback.print_exc()
        code = 1
    leave(code)


def _receive(sock: socket.socket, buf: bytearray):
    """(request, fd) when a whole request came, (None, None) when none yet, ("eof", None) when the peer left."""
    fds = array.array("i")
    data, anc, _flags, _addr = sock.recvmsg(65536, socket.CMSG_LEN(4 * fds.itemsize))
    if not data:
        return "eof", None
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    buf.extend(data)
    if len(buf) > MAX_MESSAGE:
        raise ValueError("a prefork request over %d bytes" % MAX_MESSAGE)
    if b"\n" not in buf:
        return None, (fds[0] if fds else None)
    line, _, rest = bytes(buf).partition(b"\n")
    del buf[:len(line) + 1]
    return json.loads(line.decode()), (fds[0] if fds else None)


def onnx_wanted(engines) -> bool:
    """Whether the roles of a run whose cameras resolved to these engines use ONNX Runtime (unresolved: maybe)."""
    return any(engine != "torch" for engine in engines)


def _stop_roles(children) -> None:
    """SIGTERM each role still running (its process group), as the launcher would: roles ignore SIGPIPE, so one
    whose launcher was killed would otherwise run on with nobody to stop it."""
    for pid in children:
        try:
            os.killpg(pid, signal.SIGTERM)
        except OSError:  # it has ended (not reaped yet) or left its group
            pass


def model_arg(name: str, weights: str, seed: int) -> str:
    """The server's argument asking it to build this model before it forks (zoo.prebuild)."""
    return "%s%s" % (MODEL_ARG, json.dumps([name, weights, int(seed)]))


def _prebuild(spec: str) -> None:
    """Build a model the roles will load (zoo.prebuild). Best effort: a model that fails here is built (and its error
    said) by the role itself. Torch's pool is one thread here (OMP_NUM_THREADS=1, as serve() checks), so building
    starts no thread."""
    from cnnvideo.model import zoo  # torch: not at the top, since the torch-free launcher imports this module

    try:
        name, weights, seed = json.loads(spec[len(MODEL_ARG):])
        zoo.prebuild(name, weights, seed)
    except Exception:  # noqa: BLE001 (the role says what is wrong when it builds the model itself)
        pass


def _preload(names: Sequence[str]) -> None:
    """Import these modules (torchvision without torch._dynamo: cnnvideo.model.vision)."""
    for name in names:
        try:
            load_torchvision() if name == "torchvision" else importlib.import_module(name)
        except ImportError:  # an optional part not installed: the role imports what it has, as before
            pass


def _reap_ended(children: set):
    """(pid, wait status) of each of `children` that has ended, without waiting; each leaves the set."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        yield pid, status


def serve(fd: int, extra: Sequence[str] = ()) -> int:
    """The server's loop on the inherited socket `fd` (see the module docstring), with `extra` preloaded too: module
    names, and models to build (model_arg)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the launcher, which stops the roles itself
    models = [e for e in extra if e.startswith(MODEL_ARG)]
    _preload(PRELOAD + tuple(e for e in extra if e not in models))
    for spec in models:
        _prebuild(spec)
    gc.collect()
    gc.freeze()  # the roles' collections then leave the preloaded objects alone (touching them copies their pages)
    loaded = [m for m in NOT_BEFORE_FORK if m in sys.modules]
    sock = socket.socket(fileno=fd)
    if loaded:
        _send(sock, {"error": "%s was imported before forking" % ", ".join(loaded)})
        return 1
    threads = _native_threads()
    if threads > 1:  # e.g. a BLAS pool (OMP_NUM_THREADS > 1): a forked child would hold its locks without its threads
        _send(sock, {"error": "the preloaded modules started threads of their own (%d in all)" % threads})
        return 1
    _send(sock, {"ready": os.getpid()})
    children = set()
    buf = bytearray()
    pending_fd: Optional[int] = None
    open_ = True
    while open_ or children:
        if open_:
            readable, _, _ = select.select([sock], [], [], 0.1)
            if readable:
                request, fd_in = _receive(sock, buf)
                if request == "eof":  # the launcher let us go (its roles already stopped) or was killed
                    open_ = False
                    _stop_roles(children)
                else:
                    pending_fd = fd_in if fd_in is not None else pending_fd
                    if request is not None:
                        if pending_fd is None:
                            _send(sock, {"error": "a request without its stdout pipe"})
                            continue
                        pid = os.fork()
                        if pid == 0:
                            _child(sock, pending_fd, request)
                        os.close(pending_fd)
                        pending_fd = None
                        children.add(pid)
                        _send(sock, {"pid": pid})
        else:  # the launcher let us go, or is gone: wait for the roles to end (and say so, if it still listens)
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            children.discard(pid)
            try:
                _send(sock, {"exit": pid, "code": _exit_code(status)})
            except OSError:
                pass
            continue
        for pid, status in _reap_ended(children):
            if open_:
                try:
                    _send(sock, {"exit": pid, "code": _exit_code(status)})
                except OSError:
                    open_ = False
    return 0


# ---------------------------------------------------------------------------------------------------- the hub
def _hello(sock: socket.socket, timeout: float = 30.0):
    """A connection's first line, {"extra": [...]}: what its run's server preloads beyond the hub's modules; and the
    launcher's network namespace, an fd sent with it (None if none came)."""
    sock.settimeout(timeout)
    data, fds = b"", array.array("i")
    while b"\n" not in data:
        chunk, anc, _flags, _addr = sock.recvmsg(65536, socket.CMSG_LEN(4 * fds.itemsize))
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
        if not chunk or len(data) > MAX_MESSAGE:
            raise ValueError("a prefork hub connection without its first line")
        data += chunk
    sock.settimeout(None)
    extra = [str(e) for e in json.loads(data.partition(b"\n")[0].decode()).get("extra", [])]
    return extra, (fds[0] if fds else None)


CLONE_NEWNET = 0x40000000


def _join_network(fd: int) -> None:
    """Enter the network namespace open as `fd` (setns), here, on this process's only thread, so that the roles
    forked from here are in it: a launcher of `links: tc` runs inside a namespace of its own (tools/linkemu.py)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "cannot enter the launcher's network namespace: %s" % os.strerror(err))


def _serve_connection(listener: socket.socket, conn: socket.socket) -> int:
    """In a child of the hub: become one run's server on `conn`, in the launcher's network namespace. Its roles,
    forked from here, end in `leave`, so they never come back up through these frames."""
    listener.close()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, signal.SIG_DFL)
    try:
        extra, netns = _hello(conn)
        if netns is not None:
            try:
                _join_network(netns)
            finally:
                os.close(netns)
    except (OSError, ValueError) as exc:
        try:
            _send(conn, {"error": "the prefork hub's server: %s" % exc})
        except OSError:
            pass
        return 1
    return serve(conn.detach(), extra)


def _note_children_cpu(path: str) -> None:
    """The CPU seconds of the runs' servers reaped so far (their roles included), in PATH.cpu: the test session
    counts them as its own (tests/conftest.py), as it counts a launcher's server that it reaps itself."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    tmp = path + ".cpu.tmp"
    with open(tmp, "w") as fh:
        fh.write("%.3f\n" % (usage.ru_utime + usage.ru_stime))
    os.replace(tmp, path + ".cpu")


def hub(path: str) -> int:
    """Preload once (PRELOAD and onnx), listen on the Unix socket `path`, say "ready" on stdout, and fork one run's
    server per connection. Ends on SIGTERM, or when its parent (the session that started it) is gone; the runs'
    servers it forked end with their launchers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    _preload(PRELOAD + ONNX_PRELOAD)
    gc.collect()
    gc.freeze()
    parent, me = os.getppid(), os.getpid()
    if os.path.exists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    _note_children_cpu(path)
    print("ready %d" % me, flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # nobody reads the pipe after that line: a run's server writing to it must not block
    os.close(devnull)
    servers = set()
    while not stop and os.getppid() == parent:
        try:
            readable, _, _ = select.select([listener], [], [], 0.2)
        except InterruptedError:
            readable = []
        if readable:
            conn, _addr = listener.accept()
            pid = os.fork()
            if pid == 0:
                leave(_serve_connection(listener, conn))
            conn.close()
            servers.add(pid)
        if list(_reap_ended(servers)):
            _note_children_cpu(path)
    if os.getpid() == me:
        listener.close()
        for name in (path, path + ".cpu"):
            try:
                os.unlink(name)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise
    return 0


# Linux namespaces a role inherits from its server, other than the network one (the hub's server enters the
# launcher's): a launcher in another of these needs a server there too, so it takes no hub's
NAMESPACES = ("mnt", "pid", "uts", "ipc", "user")


def _peer_pid(sock: socket.socket) -> int:
    """The pid at the other end of a connected Unix socket (SO_PEERCRED)."""
    pid, _uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid


def _same_namespaces(pid: int) -> bool:
    """Whether process `pid` is in this process's namespaces (NAMESPACES), so that what it forks runs as if
    forked here."""
    try:
        return all(os.readlink("/proc/%d/ns/%s" % (pid, ns)) == os.readlink("/proc/self/ns/%s" % ns)
                   for ns in NAMESPACES)
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------------- the client
class ForkedProc:
    """A role forked by the server, with the part of subprocess.Popen's interface the launcher uses."""

    def __init__(self, server: "Server", pid: int, stdout) -> None:
        self.server = server
        self.pid = pid
        self.stdout = stdout
        self.returncode: Optional[int] = None
        self.done = threading.Event()

    def poll(self) -> Optional[int]:
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        if not self.done.wait(timeout):
            raise subprocess.TimeoutExpired("cnnvideo role pid %d" % self.pid, timeout)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _ended(self, code: int) -> None:
        self.returncode = code
        self.done.set()


class Server:
    """The launcher's end: starts the server, forks roles through it, hands out ForkedProc objects."""

    def __init__(self, env: Dict[str, str], extra: Sequence[str] = ()) -> None:
        self.proc: Optional[subprocess.Popen] = None  # the server, when this launcher started it (not a hub's)
        sock = self._from_hub(env.get(HUB_ENV), extra)
        if sock is not None:
            try:
                self._attach(sock)
                return
            except OSError:  # the hub's server could not start (e.g. enter our network namespace): start our own
                self._detach()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.proc = subprocess.Popen([sys.executable, "-m", "cnnvideo.tools.prefork", str(theirs.fileno())]
                                     + list(extra), pass_fds=[theirs.fileno()], env=env)
        theirs.close()
        self._attach(ours)

    def _attach(self, sock: socket.socket) -> None:
        """Serve through `sock`: read its messages, and wait for the server's first, `ready` (OSError if not)."""
        self.sock = sock
        self.lock = threading.Lock()  # one request at a time: its answer is the next pid
        self.cond = threading.Condition()
        self.answers: List[dict] = []
        self.procs: Dict[int, ForkedProc] = {}
        self.exits: Dict[int, int] = {}  # exits seen before their ForkedProc was made
        self.closed: Optional[str] = None
        self.reader = threading.Thread(target=self._read, name="prefork", daemon=True)
        self.reader.start()
        first = self._answer(600.0)
        if "ready" not in first:
            raise OSError(first.get("error") or "the prefork server did not start")

    def _detach(self) -> None:
        """Let a server that failed to start go."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.reader.join(10)
        self.sock.close()

    @staticmethod
    def _from_hub(path: Optional[str], extra: Sequence[str]) -> Optional[socket.socket]:
        """A connection to the hub at `path` that has asked for a server preloading `extra`, in this process's
        network namespace; None without a hub, when it does not answer, or when it runs in other namespaces (the
        launcher then starts a server of its own)."""
        if not path:
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        netns = None
        try:
            sock.connect(path)
            if not _same_namespaces(_peer_pid(sock)):
                sock.close()
                return None
            netns = os.open("/proc/self/ns/net", os.O_RDONLY)
            data = (json.dumps({"extra": list(extra)}) + "\n").encode()
            sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [netns]))])
        except OSError:
            sock.close()
            return None
        finally:
            if netns is not None:
                os.close(netns)
        return sock

    def _read(self) -> None:
        f = self.sock.makefile("rb")
        try:
            for line in f:
                msg = json.loads(line.decode())
                with self.cond:
                    if "exit" in msg:
                        proc = self.procs.pop(msg["exit"], None)
                        if proc is None:
                            self.exits[msg["exit"]] = msg["code"]
                        else:
                            proc._ended(msg["code"])
                    else:
                        self.answers.append(msg)
                    self.cond.notify_all()
        except (OSError, ValueError) as exc:
            self.closed = str(exc)
        with self.cond:
            self.closed = self.closed or "the prefork server exited"
            self.cond.notify_all()
            for proc in self.procs.values():  # their parent is gone: the exit code is unknown
                proc._ended(-signal.SIGKILL)
            self.procs.clear()

    def _answer(self, timeout: float) -> dict:
        with self.cond:
            if not self.cond.wait_for(lambda: self.answers or self.closed, timeout):
                raise OSError("the prefork server did not answer within %.0f s" % timeout)
            if not self.answers:
                raise OSError(self.closed or "the prefork server exited")
            return self.answers.pop(0)

    def spawn(self, argv: List[str], env: Dict[str, str]) -> ForkedProc:
        """Fork `cnnvideo <argv>` with `env`; its stdout and stderr come out of the returned proc's stdout."""
        r, w = os.pipe()
        try:
            with self.lock:
                data = (json.dumps({"argv": list(argv), "env": dict(env), "cwd": os.getcwd()}) + "\n").encode()
                self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [w]))])
                answer = self._answer(60.0)
        except BaseException:
            os.close(r)
            raise
        finally:
            os.close(w)
        if "pid" not in answer:
            os.close(r)
            raise OSError(answer.get("error") or "the prefork server did not fork")
        proc = ForkedProc(self, int(answer["pid"]), os.fdopen(r, "rb"))
        with self.cond:
            if proc.pid in self.exits:
                proc._ended(self.exits.pop(proc.pid))
            else:
                self.procs[proc.pid] = proc
        return proc

    def close(self) -> None:
        """Let the server go (it waits for its roles to end, then exits)."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        if self.proc is None:  # a hub's server: it closes the connection when it ends
            self.reader.join(10)
        else:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.sock.close()


def role_argv(argv: List[str]) -> Optional[List[str]]:
    """The `cnnvideo` arguments of a `python -m cnnvideo ...` command line, None for any other command."""
    if len(argv) >= 3 and argv[0] == sys.executable and argv[1:3] == ["-m", "cnnvideo"]:
        return list(argv[3:])
    return None


if __name__ == "__main__":
    if sys.argv[1] == "--hub":
        sys.exit(hub(sys.argv[2]))
    leave(serve(int(sys.argv[1]), sys.argv[2:]))
