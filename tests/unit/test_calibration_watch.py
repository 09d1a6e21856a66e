"""cnnvideo.results.calibration_watch: when the online check says a camera's int8 calibration is stale."""
from cnnvideo.results.calibration_watch import MIN_BOXES, CalibrationWatch


def test_a_full_window_under_the_floor_is_stale_and_its_f1_is_said():
    """Four boxes expected a frame, one matched and one found: F1 0.4 over a full window is under 0.8."""
    w = CalibrationWatch(floor=0.8, window=5)
    for _ in range(4):
        w.add(1, 1, 4)
    assert w.stale() is None  # the window is not full yet
    w.add(1, 1, 4)
    assert abs(w.stale() - 0.4) < 1e-9


def test_agreement_above_the_floor_or_too_few_boxes_is_not_stale():
    """A window that agrees is not stale; nor is one whose reference found fewer than MIN_BOXES boxes, however
    little it agrees; floor 0 never is."""
    w = CalibrationWatch(floor=0.8, window=4)
    for _ in range(4):
        w.add(4, 4, 4)
    assert w.stale() is None and w.f1() == 1.0
    few = CalibrationWatch(floor=0.8, window=4)
    for _ in range(4):
        few.add(0, 0, (MIN_BOXES - 1) // 4)
    assert few.stale() is None
    off = CalibrationWatch(floor=0.0, window=1)
    off.add(0, 5, 5)
    assert off.stale() is None


def test_the_window_keeps_only_the_last_frames():
    """Bad frames that left the window no longer count: stale while they are in it, not after good ones replace them."""
    w = CalibrationWatch(floor=0.8, window=3)
    for _ in range(3):
        w.add(0, 4, 4)
    assert w.stale() == 0.0
    for _ in range(3):
        w.add(4, 4, 4)
    assert w.stale() is None and len(w.rows) == 3


def test_restart_forgets_the_window_and_skips_the_older_checks():
    """After a new calibration: the window starts empty and the checks of frames computed before it are skipped."""
    w = CalibrationWatch(floor=0.8, window=2)
    w.add(0, 5, 5)
    w.add(0, 5, 5)
    assert w.stale() is not None
    w.restart(skip=2)
    w.add(0, 5, 5)
    w.add(0, 5, 5)
    assert not w.rows and w.f1() is None
    w.add(5, 5, 5)
    w.add(5, 5, 5)
    assert w.stale() is None and w.f1() == 1.0
