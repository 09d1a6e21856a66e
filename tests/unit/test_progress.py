"""cnnvideo.results.progress: the master's progress.json, rewritten atomically, read back by tools."""
import json
import os
import threading
import time

from cnnvideo.results import progress


def test_update_rewrites_the_file_and_read_gets_it_back(tmp_path):
    """Every update() leaves a complete JSON file (no tmp left over); read() returns the same counters."""
    folder = str(tmp_path / "out")
    pf = progress.ProgressFile(folder, 40, "run1")
    assert progress.read(folder) is None
    pf.update(state="running", sent=11, completed=7)
    p = progress.read(folder)
    assert (p.frames, p.run_id, p.state, p.sent, p.completed, p.dropped) == (40, "run1", "running", 11, 7, 0)
    assert p.version == progress.VERSION and p.updated_at > 0
    assert os.listdir(folder) == [progress.FILENAME]


def test_concurrent_updates_never_leave_a_partial_file(tmp_path):
    """Result and send threads update at once: a reader always sees valid JSON with a count one of them wrote."""
    folder = str(tmp_path)
    pf = progress.ProgressFile(folder, 1000)
    pf.update()
    seen, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            with open(os.path.join(folder, progress.FILENAME)) as fh:
                seen.append(json.load(fh)["sent"])  # raises on a torn write

    t = threading.Thread(target=reader)
    t.start()
    writers = [threading.Thread(target=lambda k=k: [pf.update(sent=i) for i in range(k, 300, 3)]) for k in range(3)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    t.join()
    assert seen and all(0 <= s < 300 for s in seen)


def test_read_ignores_what_is_not_a_progress_file(tmp_path):
    """Garbage or a foreign JSON shape reads as no progress, never an exception."""
    (tmp_path / progress.FILENAME).write_text("{not json")
    assert progress.read(str(tmp_path)) is None
    (tmp_path / progress.FILENAME).write_text('{"unrelated": 1}')
    assert progress.read(str(tmp_path)) is None


def test_updates_in_a_burst_are_written_once_the_interval_ends(tmp_path):
    """60 updates a second do not mean 60 writes: within the interval the file keeps the last write, and the latest
    counters reach it when the interval ends, with no further update to carry them."""
    folder = str(tmp_path)
    pf = progress.ProgressFile(folder, 100, min_interval_s=0.3)
    pf.update(state="running", sent=1)
    for i in range(2, 30):
        pf.update(sent=i)
    assert progress.read(folder).sent == 1  # inside the interval: not rewritten
    deadline = time.time() + 5
    while progress.read(folder).sent != 29 and time.time() < deadline:
        time.sleep(0.02)
    assert progress.read(folder).sent == 29


def test_a_new_state_is_written_at_once(tmp_path):
    """The end of a run (done, failed) is never held back by the interval."""
    folder = str(tmp_path)
    pf = progress.ProgressFile(folder, 100, min_interval_s=60)
    pf.update(state="running", sent=5)
    pf.update(sent=7, completed=7)
    pf.update(state="done", completed=9)
    p = progress.read(folder)
    assert (p.state, p.sent, p.completed) == ("done", 7, 9)


def test_bursts_share_one_flusher_thread(tmp_path):
    """Held-back updates are written by one flusher thread, not a new thread per interval: burst after burst, each
    burst's last counters reach the file when its interval ends."""
    folder = str(tmp_path)
    pf = progress.ProgressFile(folder, 100, min_interval_s=0.05)
    before = {t.ident for t in threading.enumerate()}
    for burst in range(3):
        for i in range(20):
            pf.update(state="running", sent=100 * burst + i)
        deadline = time.time() + 5
        while progress.read(folder).sent != 100 * burst + 19 and time.time() < deadline:
            time.sleep(0.01)
        assert progress.read(folder).sent == 100 * burst + 19
    started = [t for t in threading.enumerate() if t.ident not in before]
    assert [t.name for t in started] == ["progress"] and started[0].daemon


def test_an_idle_flusher_ends_and_a_new_one_writes_the_next_burst(tmp_path, monkeypatch):
    """The flusher thread ends once nothing is held back for FLUSHER_IDLE_S; a later held-back update starts another
    one and still reaches the file."""
    monkeypatch.setattr(progress, "FLUSHER_IDLE_S", 0.05)
    folder = str(tmp_path)
    pf = progress.ProgressFile(folder, 100, min_interval_s=0.05)
    for burst in range(2):
        pf.update(state="running", sent=10 * burst)
        pf.update(sent=10 * burst + 5)
        deadline = time.time() + 5
        while (progress.read(folder).sent != 10 * burst + 5 or pf._flusher is not None) and time.time() < deadline:
            time.sleep(0.01)
        assert progress.read(folder).sent == 10 * burst + 5 and pf._flusher is None
