"""Schedulers over a run (schedulers.create): one interface for all, the same decisions as the plain functions,
das re-deciding per group from the pipeline's state, adaptive switching plans on measured transfers."""
import numpy as np
import pytest

from cnnvideo.plan.costmodel import CostInputs, random_inputs
from cnnvideo.plan.schedulers import (
    SCHEDULERS,
    AdaptiveScheduler,
    Compute,
    GroupScheduler,
    PipelineState,
    Scheduler,
    Transfer,
    create,
    das_decide,
    schedule,
)


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_every_scheduler_has_an_object_whose_first_plan_is_the_function_s(name):
    """For every configured name, create(name).initial_plan() equals what schedule(name) decides (das: one group
    with no state), and the first decision is logged at frame 0."""
    inputs = random_inputs(3, 7, seed=4)
    options = {"cuts": [0, 2, 5, 6]} if name == "fixed" else {}
    sched = create(name, inputs, in_flight=2, delta=True, options=options, group_size=5)
    assert isinstance(sched, Scheduler)
    want = (das_decide(inputs, 2, True, group_size=5)[0] if name == "das"
            else schedule(name, inputs, 2, True, **options))
    assert sched.initial_plan().cuts == want.cuts
    assert sched.decisions == [(0, list(want.cuts))]
    assert name in SCHEDULERS


def test_static_scheduler_keeps_its_plan_and_ignores_measurements():
    inputs = random_inputs(2, 6, seed=1)
    sched = create("optimal", inputs, 3)
    first = sched.initial_plan()
    for f in range(12):
        sched.observe(Transfer(0, 10 ** 6, 100.0))
        assert not sched.needs_state(f)
        assert sched.plan_for(f) is first
    assert len(sched.decisions) == 1


def test_group_scheduler_decides_at_group_starts_from_the_state():
    """das asks for the pipeline state only at group boundaries, and its decision there is das_decide's with
    the state simulated from the frames in flight."""
    inputs = random_inputs(2, 6, seed=2)
    sched = create("das", inputs, 2, True, group_size=4)
    assert isinstance(sched, GroupScheduler)
    first = sched.plan_for(0, PipelineState())
    assert [sched.needs_state(f) for f in range(1, 9)] == [False, False, False, True, False, False, False, True]
    state = PipelineState(in_flight=[(0.0, first.cuts), (0.1, first.cuts)], finished=[], now=0.2)
    ready, fin = sched.estimate_state(state)
    want, _ = das_decide(inputs, 2, True, prev=first, ready=ready, finished=fin, now=0.2, group_size=4)
    assert sched.plan_for(4, state).cuts == want.cuts


def test_adaptive_switches_when_a_hop_measures_slower():
    """Two equal workers split the model (cut 1 crosses hop 1); once hop 1 measures 1000x slower than
    configured, the group check at frame 5 moves everything onto worker 0, and the report logs the check."""
    seg = np.array([[0.1, 0.1], [0.1, 0.1]])
    nbytes = np.array([1e4, 1e4, 1e2])
    inputs = CostInputs(nbytes, nbytes, seg, np.array([1e7, 1e7]))
    sched = create("adaptive", inputs, 0, True, group_size=5, options={"pool": False})  # chains only
    assert isinstance(sched, AdaptiveScheduler)
    assert sched.initial_plan().cuts == (0, 1, 2)
    for _ in range(4):
        sched.observe(Transfer(1, 10 ** 4, 1.0))  # 0.01 MB/s instead of 10
        sched.observe(Compute(0, 0, 1, 0.1))
    assert sched.plan_for(3).cuts == (0, 1, 2)  # not a group start
    assert sched.plan_for(5).cuts == (0, 2, 2)
    rep = sched.report(10, (0, 2, 2))
    assert rep["adaptation"]["checks"][0]["switched_to"] == [0, 2, 2]
    assert sched.decisions == [(0, [0, 1, 2]), (5, [0, 2, 2])]


def test_unknown_options_are_refused_by_create():
    with pytest.raises(ValueError, match="bogus"):
        create("lbs", random_inputs(2, 4), options={"bogus": 1})


def test_group_scheduler_takes_given_frame_bytes_as_das_does():
    """`cnnvideo plan` hands das the predicted bytes of a group as an option: the object decides as
    schedule('das', frame_bytes=...) does."""
    inputs = random_inputs(3, 6, seed=7)
    fb = np.random.default_rng(1).uniform(0.1, 1.0, (4, inputs.bytes_full.size)) * inputs.bytes_full[None, :]
    want = schedule("das", inputs, 2, True, group_size=4, frame_bytes=fb)
    assert create("das", inputs, 2, True, {"frame_bytes": fb}, group_size=4).initial_plan().cuts == want.cuts
