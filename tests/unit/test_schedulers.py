"""Schedulers: registry, simple plans, LBS proportionality, NSC, DAS reacting to bandwidth, and `optimal` exactness."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cnnvideo.plan.costmodel import CostInputs, random_inputs
from cnnvideo.plan.plan import Plan
from cnnvideo.plan.schedulers import (
    OPTIONS,
    SCHEDULERS,
    all_plans,
    das_decide,
    lbs,
    nsc,
    objective,
    optimal,
    optimal_result,
    schedule,
)


def test_registry_covers_config_names():
    """Every scheduler has its OPTIONS entry, and schedule() rejects unknown names/options."""
    assert set(OPTIONS) == set(SCHEDULERS)
    inputs = random_inputs(2, 5)
    with pytest.raises(ValueError):
        schedule("nope", inputs)
    with pytest.raises(ValueError, match="bogus"):
        schedule("lbs", inputs, bogus=1)


def test_edge_and_cloud_shapes():
    """edge puts every segment on worker 0, cloud on the last worker; plans have W+1 cuts from 0 to K."""
    inputs = random_inputs(4, 11)
    assert schedule("edge", inputs).cuts == (0, 10, 10, 10, 10)
    assert schedule("cloud", inputs).cuts == (0, 0, 0, 0, 10)


def test_fixed_runs_the_configured_cuts_and_names_a_bad_plan():
    """fixed returns exactly the cuts it is given; a plan of the wrong length, not from 0 to K, or decreasing is a
    ValueError naming scheduler_options.cuts (the master's one-line error)."""
    inputs = random_inputs(2, 11)
    assert schedule("fixed", inputs, cuts=[0, 4, 10]).cuts == (0, 4, 10)
    assert schedule("fixed", inputs, cuts=(0, 10, 10)).cuts == (0, 10, 10)
    for bad in (None, [0, 10], [0, 4, 9], [0, 7, 4], [1, 4, 10], ["a", 4, 10]):
        with pytest.raises(ValueError, match="scheduler_options.cuts"):
            schedule("fixed", inputs, cuts=bad)


def test_lbs_proportional_to_capacity():
    """A worker twice as fast gets about twice the baseline compute (100 equal segments, capacities 1:2:1)."""
    seg = np.ones((3, 100)) * np.array([[1.0], [0.5], [1.0]])
    inputs = CostInputs(np.ones(101), np.ones(101), seg, np.ones(3))
    plan = lbs(inputs)
    assert plan.cuts == (0, 25, 75, 100)


def test_lbs_breaks_near_ties_toward_the_smaller_tensor():
    """Cuts 2 and 3 sit either side of a ReLU-like 0.3% segment at the balance point: lbs takes whichever sends
    fewer bytes, not whichever profile noise put nearer; a real imbalance (cut 1) is never taken for bytes."""
    seg = np.array([[1.0, 0.495, 0.01, 1.495]])
    seg = np.repeat(seg, 2, axis=0)
    for big, small in ((2, 3), (3, 2)):
        nbytes = np.full(5, 1e3)
        nbytes[big] = 1e6
        nbytes[1] = 1.0  # tiny but far from the balance point
        plan = lbs(CostInputs(nbytes, nbytes, seg, np.array([1e6, 1e6])))
        assert plan.cuts == (0, small, 4)


def test_nsc_not_worse_than_lbs():
    """NSC starts at LBS and only accepts improving moves of the simulated time."""
    from cnnvideo.plan.costmodel import per_frame_time

    for seed in range(10):
        inputs = random_inputs(3, 20, seed)
        a = per_frame_time(lbs(inputs), inputs, 3, frames=20)
        b = per_frame_time(nsc(inputs, 3), inputs, 3, frames=20)
        assert b <= a + 1e-12


def test_das_moves_split_when_bandwidth_drops():
    """With a fast second hop DAS splits mid-way; when that hop slows to a trickle it keeps the work on w0."""
    k = 8
    bytes_delta = np.array([1e4] + [2e5] * (k - 1) + [1e3])
    seg = np.full((2, k), 0.1)

    def decide(bw1):
        inputs = CostInputs(bytes_delta * 4, bytes_delta, seg, np.array([1e7, bw1]))
        return das_decide(inputs, in_flight=3, prev=Plan((0, 4, k)), group_size=5)[0]

    fast, slow = decide(1e8), decide(2e5)
    assert fast != slow
    assert 0 < fast.cuts[1] < k and slow.cuts[1] == k


def test_das_dp_path_matches_exhaustive_on_small_cases():
    """The large-space DAS path (DP + coordinate descent) finds the exhaustive group finish time here."""
    for seed in range(15):
        rng = np.random.RandomState(seed)
        w, n = rng.randint(2, 4), rng.randint(3, 10)
        inputs = random_inputs(w, n, seed, codec=bool(seed % 2))  # odd seeds: codec times in the work stages
        frame_bytes = inputs.bytes_delta[None, :] * rng.uniform(0.5, 1.5, size=(5, n))
        kw = dict(frame_bytes=frame_bytes, prev=Plan(tuple(all_plans(w, n - 1)[0])), ready=np.zeros(2 * w))
        _, exact = das_decide(inputs, 2, **kw)
        _, approx = das_decide(inputs, 2, max_plans=0, **kw)
        assert approx == pytest.approx(exact, rel=1e-9)


def _check_optimal_dominates(inputs, in_flight, delta):
    """optimal's chain is no worse than any chain scheduler's plan; with `pool` it is no worse than any plan."""
    best = objective(optimal(inputs, in_flight, delta, pool=False), inputs, in_flight, delta)
    best_pool = objective(optimal(inputs, in_flight, delta), inputs, in_flight, delta)
    assert best_pool <= best * (1 + 1e-9)
    rng = np.random.RandomState(inputs.n_workers * 100 + inputs.n_segments)
    inner = sorted(rng.randint(0, inputs.n_segments + 1, size=inputs.n_workers - 1).tolist())
    options = {"fixed": {"cuts": [0] + inner + [inputs.n_segments]}}  # any plan: optimal is no worse
    for name in SCHEDULERS:
        plan = schedule(name, inputs, in_flight, delta, **options.get(name, {}))
        other = objective(plan, inputs, in_flight, delta)
        chain = plan == Plan(plan.cuts) and plan.n_stages == inputs.n_workers  # a chain over every worker in order
        ref = best if chain else min(best, best_pool)
        assert ref <= other * (1 + 1e-9), name


def test_optimal_never_worse_seeded():
    """On 100 seeded random inputs (up to 6 workers, 40 cuts) optimal's objective <= every scheduler's."""
    for seed in range(100):
        rng = np.random.RandomState(seed)
        inputs = random_inputs(rng.randint(1, 7), rng.randint(2, 41), seed)
        _check_optimal_dominates(inputs, int(rng.randint(0, 6)), bool(seed % 2))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(2, 9), st.integers(0, 5), st.booleans(), st.integers(0, 10 ** 6))
def test_optimal_equals_brute_force(workers, cuts, in_flight, delta, seed):
    """On small inputs optimal's objective equals the minimum over every plan (and it dominates the others)."""
    inputs = random_inputs(workers, cuts, seed)
    values = [objective(Plan(tuple(c)), inputs, in_flight, delta) for c in all_plans(workers, cuts - 1)]
    result = optimal_result(inputs, in_flight, delta)
    assert result.period == pytest.approx(min(values), rel=1e-12)
    assert objective(result.plan, inputs, in_flight, delta) == pytest.approx(result.period, rel=1e-12)
    _check_optimal_dominates(inputs, in_flight, delta)


def test_optimal_decides_8_workers_150_cuts():
    """optimal's chain search decides a large chain (8 workers x 150 cuts, in-flight 3): a valid plan no worse than
    an even split or one worker alone. How fast it decides is a benchmark figure, not a timed test (`cnnvideo bench
    plan`, budget 200 ms a decision): a timed assert failed at 244 ms inside the emulated Pi stand-in under CI load."""
    inputs = random_inputs(8, 150, 0)
    plan = optimal(inputs, 3, pool=False)
    cuts, k = list(plan.cuts), inputs.n_segments
    assert len(cuts) == 9 and cuts[0] == 0 and cuts[-1] == k and cuts == sorted(cuts)
    mine = objective(plan, inputs, 3, True)
    even = Plan(tuple(int(round(k * i / 8)) for i in range(9)))
    alone = Plan((0,) + (k,) * 8)
    assert mine <= objective(even, inputs, 3, True) * (1 + 1e-9)
    assert mine <= objective(alone, inputs, 3, True) * (1 + 1e-9)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(2, 9), st.integers(0, 5), st.booleans(), st.integers(0, 10 ** 6))
def test_optimal_exact_with_codec_times(workers, cuts, in_flight, delta, seed):
    """With per-cut encode/decode times (and, odd seeds, CFS bursts) in the work stages, and (every third seed) a
    master turnaround in the in-flight cycle, optimal still equals the brute-force minimum."""
    inputs = random_inputs(workers, cuts, seed, codec=True)
    if seed % 2:  # and capped workers that start every stage idle (CFS bursts)
        inputs.burst = np.tile([[0.004, 0.01]], (workers, 1))
    if seed % 3 == 0:  # and a master turnaround of the size of a stage
        inputs.turnaround = float(np.median(inputs.seg_time)) * 3
    values = [objective(Plan(tuple(c)), inputs, in_flight, delta) for c in all_plans(workers, cuts - 1)]
    assert optimal_result(inputs, in_flight, delta).period == pytest.approx(min(values), rel=1e-12)
    _check_optimal_dominates(inputs, in_flight, delta)
