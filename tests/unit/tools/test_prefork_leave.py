"""prefork.leave: a forked role ends as the interpreter's exit would, but for its finalization: non-daemon threads
are joined first, atexit handlers then run, buffered output is flushed, and the exit code is the one given."""
import os
import sys

from cnnvideo.tools import prefork


def test_leave_joins_threads_runs_atexit_and_flushes(tmp_path):
    out = tmp_path / "stdout.txt"
    done, hooked = tmp_path / "thread.txt", tmp_path / "atexit.txt"
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery may run here, whatever happens
        try:
            import atexit
            import threading
            import time

            fd = os.open(str(out), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            sys.stdout = os.fdopen(1, "w", buffering=1 << 16)  # block-buffered: only a flush writes it

            def late():
                time.sleep(0.5)
                done.write_text("joined")

            threading.Thread(target=late).start()  # non-daemon: the exit must wait for it
            atexit.register(lambda: hooked.write_text("ran after the thread: %s" % done.exists()))
            print("buffered line")
            prefork.leave(3)
        finally:
            os._exit(99)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3
    assert done.read_text() == "joined"
    assert hooked.read_text() == "ran after the thread: True"
    assert out.read_text() == "buffered line\n"
