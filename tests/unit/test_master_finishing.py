"""The master's exit policy (finishing.exit_problem): the one line a failed run ends with, in order of cause."""
from types import SimpleNamespace

from cnnvideo.master.finishing import exit_problem


def test_a_complete_run_has_no_problem():
    """Every frame asked for completed, nothing dropped or lost: exit 0."""
    assert exit_problem(None, None, None, 10, 10, 10, [], 0) is None


def test_failure_comes_first_and_counts_frames():
    """A failure names itself and how many frames completed, even when frames were also dropped."""
    dropped = [SimpleNamespace(frame=3, reason="out of retries")]
    assert exit_problem("w1 is down", "src", None, 10, 10, 7, dropped, 1) == "w1 is down; 7/10 frames completed"


def test_source_error_then_interruption_then_drops_then_losses():
    """Each cause is reported only when the ones before it are absent."""
    dropped = [SimpleNamespace(frame=3, reason="out of retries"), SimpleNamespace(frame=5, reason="x")]
    assert exit_problem(None, "cannot open stream", 2, 10, 4, 4, [], 0) == "cannot open stream; 4/4 frames completed"
    interrupted = "interrupted by signal 15 after 4 of 10 frames (3 completed)"
    assert exit_problem(None, None, 15, 10, 4, 3, [], 0) == interrupted
    assert exit_problem(None, None, 15, 0, 4, 4, [], 0) is None  # an endless run ended by a signal is a success
    assert exit_problem(None, None, None, 10, 10, 8, dropped, 0) == "2 frames dropped (frame 3: out of retries)"
    assert exit_problem(None, None, None, 10, 10, 9, [], 1) == "1 frames lost"


def test_master_cpu_counts_the_run_from_the_results_log():
    """report.json's `master`: the process CPU from the run's start (when results.jsonl opened) to the end of the
    check, per completed frame; its setup's CPU before; whether the online check ran in the master."""
    from cnnvideo.master.finishing import Finisher

    role = SimpleNamespace(results=SimpleNamespace(opened_cpu_s=2.5), tracker=SimpleNamespace(completed=150),
                           checker=None)
    assert Finisher(role).master_cpu(4.0) == {"cpu_s": 1.5, "cpu_per_frame_ms": 10.0, "frames": 150,
                                              "check_on_master": False, "setup_cpu_s": 2.5}
    role.checker, role.tracker.completed = object(), 0
    got = Finisher(role).master_cpu(4.0)
    assert got["check_on_master"] is True and got["cpu_per_frame_ms"] is None and got["frames"] == 0
    role.results = None  # no run started
    assert Finisher(role).master_cpu(4.0)["cpu_s"] is None


def test_results_log_notes_the_process_cpu_when_the_run_starts(tmp_path):
    """The results log, opened as the run starts, keeps the process's CPU seconds at that moment."""
    import time

    from cnnvideo.master.results_log import ResultsLog

    before = time.process_time()
    log = ResultsLog(str(tmp_path / "results.jsonl"))
    assert before <= log.opened_cpu_s <= time.process_time()
    log.close()
