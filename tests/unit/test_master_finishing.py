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
