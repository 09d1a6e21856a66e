"""Setup's progress: the current step with the workers it waits for, logged when it runs long, and the steps done
(what the master's log and the live page show while a capped worker quantizes for minutes)."""
from cnnvideo.master.setup_progress import SetupProgress


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_a_step_names_the_workers_it_waits_for_until_they_answer():
    """While a step runs, its line says how long and which workers have not answered; answered ones drop out."""
    clock = Clock()
    p = SetupProgress(clock=clock)
    with p.step("profiling", waiting=[0, 1, 2]):
        clock.t += 12
        p.answered(1)
        assert p.line() == "profiling for 12 s, waiting for w0, w2"
        p.answered(0)
        p.answered(2)
        assert p.line() == "profiling for 12 s"
    assert p.line() is None
    assert p.snapshot() == {"current": None, "steps": [{"step": "profiling", "s": 12.0}], "done_s": None}


def test_a_long_step_is_logged_after_a_while_and_then_at_an_interval():
    """Nothing is logged for a short step; a step past log_after_s is logged once, then every log_every_s."""
    clock = Clock()
    p = SetupProgress(log_after_s=5, log_every_s=10, clock=clock)
    with p.step("quantizing", waiting=[3]):
        clock.t += 4
        assert p.tick() is None
        clock.t += 2
        assert p.tick() == "quantizing for 6 s, waiting for w3"
        clock.t += 5
        assert p.tick() is None  # logged 5 s ago
        clock.t += 5
        assert p.tick() == "quantizing for 16 s, waiting for w3"


def test_done_gives_the_seconds_setup_took():
    """After done(), the snapshot says how long setup took from the start, and no step is current."""
    clock = Clock()
    p = SetupProgress(clock=clock)
    with p.step("a"):
        clock.t += 1.5
    clock.t += 1
    p.done()
    snap = p.snapshot()
    assert snap["current"] is None and snap["done_s"] == 2.5 and [s["step"] for s in snap["steps"]] == ["a"]
