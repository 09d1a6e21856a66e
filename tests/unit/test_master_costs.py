"""The master asks its workers for their costs under the concurrency the run will have (a rescale times whole
passes on each worker: alone when frames take turns, all at once when several are in flight)."""
import threading
import time
from types import SimpleNamespace

from cnnvideo.master.setup import Setup
from cnnvideo.master.setup_progress import SetupProgress


def _overlap(in_flight: int, workers: int = 2) -> int:
    """Most Costs calls running at the same moment, with a fake setup call that takes 50 ms."""
    lock = threading.Lock()
    state = {"now": 0, "most": 0}

    def call(w, method, request, timeout):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        time.sleep(0.05)
        with lock:
            state["now"] -= 1
        return "costs of w%d" % w

    progress = SetupProgress()
    fake = SimpleNamespace(m=SimpleNamespace(W=workers, cfg=SimpleNamespace(in_flight=in_flight)), setup_call=call,
                           progress=progress, answered=set())
    with progress.step("costs", waiting=range(workers)):
        assert Setup.all_costs(fake, "request") == ["costs of w%d" % w for w in range(workers)]
        assert progress.line() == "costs for 0 s"  # every worker answered
    assert fake.answered == set(range(workers))  # (a step begun after some answered waits only for the others)
    return state["most"]


def test_costs_are_asked_in_turn_with_one_frame_in_flight_and_at_once_with_more():
    """In flight 1: one worker at a time (as they compute in the run); 6: all at once, answers in worker order."""
    assert _overlap(1) == 1
    assert _overlap(6) == 2
    assert _overlap(6, workers=3) == 3


def test_the_costs_asked_in_the_background_give_their_answer_or_their_refusal():
    """Setup asks the Costs on a thread while it prepares what needs no costs: result() waits and gives the answer;
    a refusal is raised by raise_if_failed between the local steps (not held until the end) and again by result()."""
    from cnnvideo.master.links import MasterError
    from cnnvideo.master.setup import Background

    ok = Background(lambda: time.sleep(0.05) or ["costs"], "costs")
    ok.raise_if_failed()  # still running: nothing to raise
    assert ok.result() == ["costs"]

    def refuse():
        raise MasterError("w1 refused Costs: delta.input_threshold: master 2, worker 0")

    bad = Background(refuse, "costs")
    bad._thread.join()
    for call in (bad.raise_if_failed, bad.result):
        try:
            call()
        except MasterError as exc:
            assert "w1 refused Costs" in str(exc)
        else:
            raise AssertionError("the refusal was not raised")
