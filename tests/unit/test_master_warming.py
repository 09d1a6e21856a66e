"""The master's stage warmer without any network: a re-plan takes effect only once every worker has built its
stage, frames keep the plan they use meanwhile, workers are asked at most every poll_s, and a worker that cannot
build (or cannot be asked) neither stalls nor crashes the run."""
import pytest

from cnnvideo.master.warming import StageWarmer

OLD, NEW = [0, 10, 20], [0, 15, 20]


class Workers:
    """Scripted Prepare answers, one list of (ready, error) per call, and a clock the test moves."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []
        self.now = 0.0

    def prepare(self, plan):
        self.calls.append(list(plan.cuts))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def _warmer(workers, poll_s=0.25):
    w = StageWarmer(workers.prepare, poll_s=poll_s, clock=lambda: workers.now)
    w.mark_ready(OLD)
    return w


def test_switch_waits_until_every_worker_has_built_the_new_plan():
    """Frames stay on the old plan while one worker still builds; the frame after both answer ready takes the
    new plan, and the report says when it was asked, when it was taken, and after how long."""
    workers = Workers([(True, ""), (False, "")], [(True, ""), (False, "")], [(True, ""), (True, "")])
    w = _warmer(workers)
    assert w.choose(5, NEW, OLD) == OLD
    workers.now = 0.3
    assert w.choose(6, NEW, OLD) == OLD
    workers.now = 0.6
    assert w.choose(7, NEW, OLD) == NEW
    assert w.choose(8, NEW, NEW) == NEW and len(workers.calls) == 3  # built: never asked again
    assert w.report() == [{"cuts": NEW, "asked_frame": 5, "switched_frame": 7, "wait_s": 0.6, "polls": 3,
                           "refused": None, "groups": [[0], [1]]}]


def test_workers_are_asked_at_most_every_poll_interval():
    """Frames sent faster than poll_s do not each cost a round of Prepare calls."""
    workers = Workers([(False, ""), (False, "")])
    w = _warmer(workers, poll_s=1.0)
    for f in range(10):
        workers.now = 0.1 * f
        assert w.choose(f, NEW, OLD) == OLD
    assert len(workers.calls) == 1
    workers.now = 1.0
    w.choose(10, NEW, OLD)
    assert len(workers.calls) == 2


def test_the_first_plan_and_the_plan_in_use_are_never_asked_for():
    """No Prepare for the plan StartRun built, for the plan frames use, or before any frame was sent."""
    workers = Workers([(False, ""), (False, "")])
    w = _warmer(workers)
    assert w.choose(0, NEW, None) == NEW  # nothing sent yet: StartRun's warm_cuts is the first plan
    assert w.choose(1, OLD, NEW) == OLD  # marked ready
    assert w.choose(2, NEW, NEW) == NEW
    assert workers.calls == [] and w.report() == []


def test_a_stage_that_cannot_be_built_keeps_frames_on_the_current_plan():
    """A worker that cannot build its stage (on_error: stop) answers why: the plan is not taken, not asked for
    again, and the report names the reason."""
    workers = Workers([(True, ""), (False, "stage 15..20: export failed at features.3")])
    w = _warmer(workers)
    for f in range(3):
        workers.now = float(f)
        assert w.choose(f, NEW, OLD) == OLD
    assert len(workers.calls) == 1
    assert w.report()[0]["refused"] == "stage 15..20: export failed at features.3"
    assert w.report()[0]["switched_frame"] is None


def test_a_worker_that_cannot_be_asked_means_switching_at_once():
    """If Prepare fails (a worker down, or one without the call), the frame takes the new plan as it did before
    warming existed: the frame path builds the stage, and the fault path handles a dead worker."""
    workers = Workers(RuntimeError("worker w1 is down"))
    w = _warmer(workers)
    assert w.choose(3, NEW, OLD) == NEW
    assert w.report()[0]["switched_frame"] == 3


def test_forget_after_a_restart_asks_again():
    """A restarted worker lost the stages it had built: plans known ready are asked for again."""
    workers = Workers([(True, ""), (True, "")], [(False, ""), (True, "")])
    w = _warmer(workers)
    assert w.choose(1, NEW, OLD) == NEW
    w.forget()
    workers.now = 5.0
    assert w.choose(2, OLD, NEW) == NEW  # OLD is no longer known built
    assert workers.calls[-1] == OLD


@pytest.mark.parametrize("wanted", [[0, 12, 20], [0, 20, 20]])
def test_a_newer_wish_is_asked_for_on_its_own(wanted):
    """A scheduler that changes its mind while a plan builds: the newer plan is asked for (and reported) too."""
    workers = Workers([(False, ""), (False, "")])
    w = _warmer(workers)
    w.choose(1, NEW, OLD)
    w.choose(2, wanted, OLD)
    assert [s["cuts"] for s in w.report()] == [NEW, wanted] and workers.calls == [NEW, wanted]
