"""Cost model: plan helpers, stage costs, the pipeline recurrence, the in-flight cap, the steady-state objective."""
import numpy as np
import pytest

from cnnvideo.plan.costmodel import (
    CostInputs,
    frame_stage_costs,
    per_frame_time,
    random_inputs,
    simulate,
    stage_costs,
    steady_period,
)
from cnnvideo.plan.plan import Plan


def _inputs():
    return CostInputs(
        bytes_full=np.array([100.0, 400.0, 200.0, 10.0]),
        bytes_delta=np.array([10.0, 40.0, 20.0, 10.0]),
        seg_time=np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]]),
        bandwidth=np.array([10.0, 5.0]),
        result_bandwidth=10.0,
    )


def test_recurrence_hand_computed():
    """done[f][s] = max(done[f-1][s], done[f][s-1]) + cost[f][s] on a 3x3 example worked out by hand."""
    costs = np.array([[1.0, 2.0, 1.0], [2.0, 1.0, 3.0], [1.0, 1.0, 1.0]])
    # frame 0: 1, 1+2=3, 3+1=4; frame 1: 1+2=3, max(3,3)+1=4, max(4,4)+3=7; frame 2: 3+1=4, max(4,4)+1=5, 7+1=8
    expected = np.array([[1.0, 3.0, 4.0], [3.0, 4.0, 7.0], [4.0, 5.0, 8.0]])
    np.testing.assert_array_equal(simulate(costs, 0), expected)


def test_in_flight_cap_delays_start():
    """With in_flight=1 a frame starts only when the previous one finished; =2 lets two overlap."""
    costs = np.ones((3, 2))
    np.testing.assert_array_equal(simulate(costs, 1), [[1, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(simulate(costs, 2), [[1, 2], [2, 3], [3, 4]])
    np.testing.assert_array_equal(simulate(costs, 0), [[1, 2], [2, 3], [3, 4]])
    slow_end = np.array([[1.0, 3.0]] * 3)  # the cap binds frame 2's start when the last stage is slow
    np.testing.assert_array_equal(simulate(slow_end, 2), [[1, 4], [2, 7], [5, 10]])
    np.testing.assert_array_equal(simulate(slow_end, 0), [[1, 4], [2, 7], [3, 10]])


def test_turnaround_delays_each_frame_that_waits_for_the_window():
    """The master's turnaround t: with in_flight=1 each frame starts t after the previous result (makespan
    F x sum + (F-1) x t); with in_flight=2 it only binds frames that wait for the window; uncapped it does
    nothing. The steady period max(max c, (sum c + t) / m) is still the simulated asymptote, and
    per_frame_time takes t from the inputs."""
    costs = np.ones((3, 2))
    np.testing.assert_allclose(simulate(costs, 1, turnaround=0.5), [[1, 2], [3.5, 4.5], [6, 7]])
    slow_end = np.array([[1.0, 3.0]] * 3)
    np.testing.assert_allclose(simulate(slow_end, 2, turnaround=0.5), [[1, 4], [2, 7], [5.5, 10]])
    np.testing.assert_allclose(simulate(costs, 0, turnaround=0.5), simulate(costs, 0))
    for m in (1, 2, 3):
        c = np.random.RandomState(m).rand(6)
        done = simulate(np.tile(c, (1000, 1)), m, turnaround=0.3)
        period = (done[-1, -1] - done[-421, -1]) / 420.0
        assert period == pytest.approx(float(steady_period(c, m, 0.3)), rel=1e-9)
    inputs, plan = _inputs(), Plan((0, 1, 3))
    base = per_frame_time(plan, inputs, 1)
    inputs.turnaround = 0.25
    assert per_frame_time(plan, inputs, 1) == pytest.approx(base + 0.25)
    assert per_frame_time(plan, inputs, 0) == pytest.approx(per_frame_time(plan, _inputs(), 0))


def test_ready_and_start_offsets():
    """ready (stage free times) and start (earliest frame start) shift the schedule as stated."""
    costs = np.ones((2, 2))
    done = simulate(costs, 0, ready=np.array([0.0, 5.0]), start=np.array([1.0, 0.0]))
    np.testing.assert_array_equal(done, [[2, 6], [3, 7]])


def test_batched_simulation_matches_single():
    """Leading batch axes simulate independent pipelines."""
    rng = np.random.RandomState(0)
    costs = rng.rand(4, 6, 5)
    batched = simulate(costs, 2)
    for b in range(4):
        np.testing.assert_allclose(batched[b], simulate(costs[b], 2))


@pytest.mark.parametrize("in_flight", [0, 1, 2, 3, 7])
def test_steady_period_is_the_asymptote(in_flight):
    """The objective max(max c, sum c / m) equals the long-run period of the simulated recurrence
    (measured over 420 frames, a multiple of every cyclicity m <= 7)."""
    for seed in range(5):
        costs = np.random.RandomState(seed).rand(6)
        done = simulate(np.tile(costs, (1000, 1)), in_flight)
        period = (done[-1, -1] - done[-421, -1]) / 420.0
        assert period == pytest.approx(float(steady_period(costs, in_flight)), rel=1e-9)


def test_stage_costs_alternate_and_empty_stage_still_transfers():
    """stage_costs = [hop0, comp0, hop1, comp1]; an empty worker computes 0 but its hop still carries the cut."""
    inputs = _inputs()
    costs = stage_costs(Plan((0, 3, 3)), inputs, delta=True)
    # hop 0: 10 B / 10 B/s; w0 runs all 3 segments; hop 1 carries cut 3 (10 B at 5 B/s); w1 empty + result 10/10
    np.testing.assert_allclose(costs, [1.0, 6.0, 2.0, 1.0])
    full = stage_costs(Plan((0, 1, 3)), inputs, delta=False)
    np.testing.assert_allclose(full, [10.0, 1.0, 80.0, 11.0])


def test_first_frame_full_at_new_cuts():
    """frame_stage_costs charges full bytes on the first frame only at hops whose cut changed."""
    inputs = _inputs()
    costs = frame_stage_costs(Plan((0, 1, 3)), inputs, np.tile(inputs.bytes_delta, (2, 1)), prev=Plan((0, 2, 3)))
    np.testing.assert_allclose(costs[0, [0, 2]], [1.0, 80.0])  # hop 0 unchanged (delta), hop 1 new (full)
    np.testing.assert_allclose(costs[1, [0, 2]], [1.0, 8.0])


def test_per_frame_time_modes():
    """frames=0 gives the steady-state objective; frames=F the simulated makespan / F (>= steady state)."""
    inputs = random_inputs(3, 10, seed=2)
    plan = Plan((0, 3, 6, 9))
    steady = per_frame_time(plan, inputs, 2)
    assert steady == pytest.approx(float(steady_period(stage_costs(plan, inputs), 2)))
    assert per_frame_time(plan, inputs, 2, frames=50) >= steady - 1e-12


def test_plan_helpers_and_validation():
    """A plan from a list of cuts is the chain (stage s on worker s), exposes each stage's segments and round-trips
    through a list and through its stage of each worker; bad cuts are rejected."""
    plan = Plan.from_list([0, 2, 2, 5], n_segments=5)
    assert plan.n_stages == 3 and plan.stage_bounds() == [(0, 2), (2, 2), (2, 5)]
    assert plan.groups == ((0,), (1,), (2,)) and plan.shape() == "chain" and plan.stage_of(4) == [0, 1, 2, -1]
    assert Plan.from_list(plan.to_list()) == plan
    pool = Plan((0, 2, 5), ((0, 2), (1,)))
    assert Plan.from_stage_of(pool.cuts, pool.stage_of(3)) == pool and pool.shape() == "hybrid"
    with pytest.raises(ValueError, match="stage 1 has no worker"):
        Plan.from_stage_of((0, 2, 5), [0, 0])
    with pytest.raises(ValueError):
        Plan((0, 3, 2))
    with pytest.raises(ValueError):
        Plan.from_list([0, 1, 4], n_segments=5)


def test_codec_times_are_charged_to_the_work_stage():
    """With encode/decode times, worker w's stage = decode at its input cut + compute + encode at its output
    cut; a worker with no layers still decodes and re-encodes what it forwards."""
    from cnnvideo.plan.costmodel import compute_costs

    inp = _inputs()
    enc = np.array([[0.1, 0.2, 0.3, 0.4], [1.0, 2.0, 3.0, 4.0]])
    dec = enc / 10.0
    coded = CostInputs(bytes_full=inp.bytes_full, bytes_delta=inp.bytes_delta, seg_time=inp.seg_time,
                       bandwidth=inp.bandwidth, result_bandwidth=10.0, encode_time=enc, decode_time=dec)
    plan = Plan((0, 1, 3))
    base = compute_costs(plan, inp)
    got = compute_costs(plan, coded)
    np.testing.assert_allclose(got - base, [dec[0, 0] + enc[0, 1], dec[1, 1] + enc[1, 3]])
    empty = Plan((0, 3, 3))
    np.testing.assert_allclose(compute_costs(empty, coded)[1] - compute_costs(empty, inp)[1], dec[1, 3] + enc[1, 3])
    # transfers are untouched
    np.testing.assert_allclose(stage_costs(plan, coded)[0::2], stage_costs(plan, inp)[0::2])


def test_codec_times_shape_checked():
    """Codec times broadcast from [K+1] to [W, K+1]; another shape is a ValueError."""
    inp = _inputs()
    ok = CostInputs(bytes_full=inp.bytes_full, bytes_delta=inp.bytes_delta, seg_time=inp.seg_time,
                    bandwidth=inp.bandwidth, encode_time=np.ones(4))
    assert ok.encode_time.shape == (2, 4)
    with pytest.raises(ValueError):
        CostInputs(bytes_full=inp.bytes_full, bytes_delta=inp.bytes_delta, seg_time=inp.seg_time,
                   bandwidth=inp.bandwidth, decode_time=np.ones(3))


def test_burst_wall_bounds_and_identity():
    """A capped worker starting idle runs its first slice unthrottled: a burst shorter than the quota takes its
    CPU time; a long one saves at most two throttle waits (the first slice and the last), never more than the
    fluid time; monotone; uncapped = fluid."""
    from cnnvideo.plan.costmodel import burst_wall

    q, p = 0.04, 0.1  # cpus 0.4
    fluid = np.linspace(0.0, 2.0, 201)
    wall = burst_wall(fluid, q, p)
    assert np.all(np.diff(wall) >= -1e-12)
    assert wall[1] == pytest.approx(fluid[1] * 0.4)  # 4 ms of CPU fits every phase's first slice
    long = fluid > 0.5
    assert np.all(wall[long] <= fluid[long] + 1e-12) and np.all(wall[long] >= fluid[long] - 2 * (p - q) - 1e-12)
    np.testing.assert_allclose(burst_wall(fluid, 0.0, p), fluid)
    np.testing.assert_allclose(burst_wall(fluid, 0.2, 0.1), fluid)  # 2 CPUs of quota: never throttled here
    assert np.isinf(burst_wall(np.array([np.inf]), q, p)[0])


def test_burst_wall_is_smooth_across_a_quota_multiple():
    """A point CPU time crossing a multiple of the quota makes the burst wait one more period (a step of about
    (period - quota) x the share of phases that reach it); averaged over the CPU time's frame-to-frame spread the
    expectation is continuous, so a 1% change of a profile no longer flips a prediction between two values. It is
    the mean of the point model over the spread's samples."""
    from cnnvideo.plan.costmodel import burst_wall

    q, p = 0.04, 0.1  # cpus 0.4: 80 ms of CPU (0.2 s fluid) is two quotas
    fluid = np.arange(0.15, 0.25, 0.001) + 3.7e-4  # off the exact edges, where rounding picks a side
    point = burst_wall(fluid, q, p, spread=0.0)
    smooth = burst_wall(fluid, q, p)
    assert np.diff(point).max() > 0.03
    assert np.diff(smooth).max() < np.diff(point).max() / 4 and np.all(np.diff(smooth) >= -1e-12)
    m = 1.0 + 0.1 * ((np.arange(8) + 0.5) / 8 * 2 - 1)
    want = np.mean([burst_wall(fluid * k, q, p, spread=0.0) for k in m], axis=0)
    np.testing.assert_allclose(burst_wall(fluid, q, p, spread=0.1, samples=8), want)


def test_burst_applies_to_work_stages_only():
    """With burst set, compute_costs are burst_wall of the fluid work (result transfer added after); transfers
    are unchanged."""
    from cnnvideo.plan.costmodel import burst_wall, compute_costs

    inp = _inputs()
    bursty = CostInputs(bytes_full=inp.bytes_full, bytes_delta=inp.bytes_delta, seg_time=inp.seg_time,
                        bandwidth=inp.bandwidth, result_bandwidth=10.0, burst=[[0.04, 0.1], [0.0, 0.0]])
    plan = Plan((0, 1, 3))
    fluid = compute_costs(plan, inp)
    got = compute_costs(plan, bursty)
    assert got[0] == pytest.approx(float(burst_wall(fluid[0], 0.04, 0.1))) and got[0] < fluid[0]
    assert got[1] == pytest.approx(fluid[1])  # uncapped worker
    np.testing.assert_allclose(stage_costs(plan, bursty)[0::2], stage_costs(plan, inp)[0::2])


def test_message_cpu_adds_messages_times_fluid_to_each_work_stage():
    """message_time[w] is charged MESSAGES_PER_FRAME times to every worker the frame reaches (a worker with
    segments, or an empty one that forwards to a later one), and not to a worker past the reporter (its range
    starts at the last cut: no message reaches it); transfers are unchanged."""
    import dataclasses

    from cnnvideo.plan.costmodel import MESSAGES_PER_FRAME, compute_costs

    inp = _inputs()
    charged = dataclasses.replace(inp, message_time=np.array([0.002, 0.005]))
    for cuts, want in (((0, 1, 3), [0.002, 0.005]), ((0, 0, 3), [0.002, 0.005]), ((0, 3, 3), [0.002, 0.0])):
        plan = Plan(cuts)
        extra = compute_costs(plan, charged) - compute_costs(plan, inp)
        np.testing.assert_allclose(extra, MESSAGES_PER_FRAME * np.array(want))
        np.testing.assert_allclose(stage_costs(plan, charged)[0::2], stage_costs(plan, inp)[0::2])


def _one_capped_worker(fluid: float, message_fluid: float) -> CostInputs:
    """One worker capped at 0.1 (10 ms quota per 100 ms period) running one segment of `fluid` seconds."""
    return CostInputs(bytes_full=np.array([10.0, 10.0]), bytes_delta=np.array([10.0, 10.0]),
                      seg_time=np.array([[fluid]]), bandwidth=np.array([1e6]), burst=[[0.01, 0.1]],
                      message_time=np.array([message_fluid]))


def test_message_cpu_sits_inside_the_cfs_burst(monkeypatch):
    """With a burst (1 in flight) the messages' fluid time joins the compute's before burst_wall, so their CPU can
    push the burst over a quota multiple: with one phase and no spread, 19.5 ms of compute CPU plus 3 x 0.3 ms of
    message CPU at cap 0.1 waits out one more period (the stage grows by period - quota + 0.9 ms), while 15 ms plus
    the same stays inside its quota slice (it grows by the 0.9 ms of CPU only, not by 9 ms of fluid time)."""
    import functools

    from cnnvideo.plan import costmodel

    monkeypatch.setattr(costmodel, "burst_wall", functools.partial(costmodel.burst_wall, phases=1, spread=0.0))
    plan = Plan((0, 1))
    per_msg = 0.0003 * 0.1 / 0.01  # 0.3 ms of CPU as fluid seconds at cap 0.1
    crossing = costmodel.compute_costs(plan, _one_capped_worker(0.195, per_msg)) \
        - costmodel.compute_costs(plan, _one_capped_worker(0.195, 0.0))
    assert crossing[0] == pytest.approx(0.1 - 0.01 + 0.0009)
    inside = costmodel.compute_costs(plan, _one_capped_worker(0.15, per_msg)) \
        - costmodel.compute_costs(plan, _one_capped_worker(0.15, 0.0))
    assert inside[0] == pytest.approx(0.0009)


def test_message_cpu_burst_is_burst_wall_of_the_sum():
    """Under the default burst (phase and CPU spread expectation) the stage is burst_wall(compute + messages)
    plus the result transfer, not burst_wall(compute) plus the messages after it."""
    from cnnvideo.plan.costmodel import MESSAGES_PER_FRAME, burst_wall, compute_costs

    inp = _one_capped_worker(0.097, 0.003)
    got = compute_costs(Plan((0, 1)), inp)[0] - inp.result_time()
    assert got == pytest.approx(float(burst_wall(0.097 + MESSAGES_PER_FRAME * 0.003, 0.01, 0.1)))
    assert abs(got - (float(burst_wall(0.097, 0.01, 0.1)) + MESSAGES_PER_FRAME * 0.003)) > 1e-3
