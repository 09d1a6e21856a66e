"""cnnvideo.plan.pool (stages x replicas cost model and search), the pool schedulers, and the master's pure parts
of a pool: routes (pool.Dispatcher), results in frame order (pool.ReorderBuffer), membership, results.jsonl hops."""
from __future__ import annotations

import numpy as np
import pytest

from cnnvideo.master.pool import Dispatcher, Membership, NoReplica, ReorderBuffer
from cnnvideo.master.results_log import plan_hops
from cnnvideo.plan import pool
from cnnvideo.plan.costmodel import CostInputs, random_inputs
from cnnvideo.plan.plan import Plan
from cnnvideo.plan.schedulers import objective, optimal, schedule


def even_inputs(n_workers=4, seg=0.04, k=4, nbytes=3e4, bw=3e6):
    """n equal workers, k equal segments of `seg` s, every cut `nbytes` (delta = full), `bw` B/s per link."""
    full = np.full(k + 1, nbytes)
    return CostInputs(full, full, np.full((n_workers, k), seg), np.full(n_workers, bw))


def test_full_replication_of_equal_workers_is_near_n_times_one_worker():
    """Four equal compute-bound workers: the whole model on each gives 4x one worker's fps, and `optimal` with the
    pool picks it over every chain (the chain pays a transfer per stage and its stages cannot all be equal)."""
    inp = even_inputs()
    one = pool.pool_costs(Plan((0, 4), ((0,),)), inp)
    rep = pool.pool_costs(pool.full_replication(inp), inp)
    assert rep.fps == pytest.approx(4 * one.fps)
    assert optimal(inp, pool=True) == pool.full_replication(inp)
    assert objective(optimal(inp, pool=True), inp) < objective(optimal(inp, pool=False), inp)
    assert optimal(inp, pool=False).shape() == "chain"  # with pool: false optimal stays a chain


def test_a_chain_plan_costs_the_same_in_the_pool_model_and_the_chain_model():
    """A chain (one worker per stage, no empty stage) is a pool plan of singletons: both models agree."""
    inp = random_inputs(3, 10, seed=4, codec=True)
    chain = Plan((0, 3, 6, 9))
    as_pool = Plan((0, 3, 6, 9), ((0,), (1,), (2,)))
    assert pool.pool_period(as_pool, inp, 4) == pytest.approx(objective(chain, inp, 4))


def test_replicas_pay_larger_deltas_and_the_master_and_in_flight_bound_the_period():
    """A replica that sees every Rth frame sends stride ** (1/3) times the bytes; the master's time per frame and
    latency / in-flight are lower bounds of the period."""
    inp = even_inputs(nbytes=1e4)
    inp.bytes_full = np.full(5, 1e9)
    inp.result_bytes = 1e3
    assert pool.stride_bytes(inp, 8)[0] == pytest.approx(2e4)
    rep = pool.full_replication(inp)
    assert pool.pool_costs(rep, inp).link_bytes == [pytest.approx(1e4 * 4 ** (1 / 3))]
    inp.master_time = 0.5
    assert pool.pool_period(rep, inp) == pytest.approx(0.5)
    inp.master_time = 0.0
    costs = pool.pool_costs(rep, inp, in_flight=1)
    assert costs.period == pytest.approx(costs.latency)


def test_a_thresholded_input_hop_grows_as_the_square_root_of_the_stride():
    """With an input threshold the input hop's bytes grow as stride ** 0.5 (measured 1, 1.39, 1.68, 1.98x at strides
    1-4), the other cuts still as stride ** (1/3); a lossless config keeps 1/3 on the input hop too."""
    from cnnvideo import config
    from cnnvideo.plan.costinputs import input_stride_exponent

    inp = even_inputs(nbytes=1e4)
    inp.bytes_full = np.full(5, 1e9)
    inp.input_stride_exponent = input_stride_exponent(config.from_dict({"delta": {"input_threshold": 4}},
                                                                       check_files=False))
    grown = pool.stride_bytes(inp, 4)
    assert grown[0] == pytest.approx(2e4) and grown[1:] == pytest.approx(np.full(4, 1e4 * 4 ** (1 / 3)))
    assert input_stride_exponent(config.from_dict({"delta": {"input_threshold": 0}}, check_files=False)) == 1 / 3


def test_best_by_shape_lists_each_shape_and_the_search_matches_brute_force():
    """For 3 uneven workers the best plan of each shape is found, and for every grouping the DP's cuts are the
    best of all cut choices (brute force over the cuts)."""
    import itertools

    inp = random_inputs(3, 8, seed=2, codec=True)
    best = pool.best_by_shape(inp, 3)
    assert set(best) == {"edge", "chain", "replicas", "hybrid"}
    for groups in list(pool.candidate_groups(3))[:12]:
        cuts, _ = pool.best_cuts(groups, inp)
        period = pool.pool_costs(Plan(cuts, groups), inp).stage_period
        brute = min(max(pool.pool_costs(Plan((0,) + c + (7,), groups), inp).stage_period)
                    for c in itertools.combinations(range(1, 7), len(groups) - 1))
        assert max(period) == pytest.approx(brute)


def test_uneven_workers_share_by_speed():
    """Caps (0.05, 0.1, 0.1, 0.2): full replication's rate is the sum of each worker's own rate."""
    speed = np.array([0.05, 0.1, 0.1, 0.2])
    full = np.full(5, 1e3)
    inp = CostInputs(full, full, np.full((4, 4), 0.01) / speed[:, None], np.full(4, 1e9))
    own = sum(pool.pool_costs(Plan((0, 4), ((w,),)), inp).fps for w in range(4))
    assert pool.pool_costs(pool.full_replication(inp), inp).fps == pytest.approx(own)


def test_fixed_names_a_pool_plan_and_bad_groups_get_one_line_naming_the_key():
    inp = even_inputs()
    plan = schedule("fixed", inp, cuts=[0, 2, 4], groups=[[0, 1], [2, 3]])
    assert plan.groups == ((0, 1), (2, 3)) and plan.shape() == "hybrid"
    with pytest.raises(ValueError, match="names worker 1 twice"):
        schedule("fixed", inp, cuts=[0, 2, 4], groups=[[0, 1], [1]])
    with pytest.raises(ValueError, match="stage 1 has no worker"):
        schedule("fixed", inp, cuts=[0, 2, 4], groups=[[0, 1], []])
    with pytest.raises(ValueError, match="worker 7 is not one"):
        schedule("fixed", inp, cuts=[0, 4], groups=[[7]])
    assert schedule("replicas", inp) == Plan((0, 4), ((0, 1, 2, 3),))


def test_dispatcher_sends_to_the_replica_with_the_fewest_outstanding_and_skips_the_left_out():
    """Least outstanding, ties to the longest idle: a replica whose frames do not come back gets no more; a worker
    left out gets none; a stage with no worker left raises."""
    plan = Plan((0, 2, 4), ((0, 1), (2,)))
    d = Dispatcher(3)
    routes = [d.route(plan) for _ in range(1)]
    d.take(routes[0])
    r2 = d.route(plan)
    assert routes[0] == [0, 2] and r2 == [1, 2]
    d.take(r2)
    d.release([1, 2])  # w1's frame came back, w0's did not
    assert d.route(plan) == [1, 2]
    d.membership.out = {1}
    assert d.route(plan) == [0, 2]
    d.membership.out = {2}
    with pytest.raises(NoReplica, match="stage 1"):
        d.route(plan)
    assert not d.usable(plan)


def test_reorder_buffer_hands_frames_on_in_order_and_never_waits_forever():
    """A later frame waits for an earlier one in flight; a dropped one (no longer pending) holds nothing; the wait
    is bounded by time and by count."""
    now = [0.0]
    buf = ReorderBuffer(max_held=3, max_wait_s=5.0, clock=lambda: now[0])
    buf.add(2, "c")
    buf.add(1, "b")
    assert buf.pop_ready(oldest_pending=0) == []
    assert buf.pop_ready(oldest_pending=None) == [(1, "b"), (2, "c")]
    buf.add(5, "f")
    now[0] = 6.0
    assert buf.pop_ready(oldest_pending=4) == [(5, "f")] and buf.forced == 1
    for f in range(10, 15):
        buf.add(f, f)
    assert [f for f, _ in buf.pop_ready(oldest_pending=9)] == [10, 11]


def test_results_hops_follow_the_route():
    assert plan_hops([0, 2, 4], [3, 1]) == ["m->w3", "w3->w1", "w1->m"]
    assert plan_hops([0, 4], [2]) == ["m->w2", "w2->m"]
    assert plan_hops([0, 2, 4]) == ["m->w0", "w0->w1", "w1->m"]


def test_a_pool_plan_refuses_a_worker_twice_or_an_empty_stage():
    with pytest.raises(ValueError, match="twice"):
        Plan((0, 2, 4), ((0,), (0, 1)))
    with pytest.raises(ValueError, match="stage 1 has no worker"):
        Plan((0, 2, 4), ((0,), ()))


def test_fewer_stages_win_when_predicted_within_five_percent():
    """best_pool takes full replication over a hybrid predicted less than SIMPLER_WITHIN faster (each stage adds a
    hop the model under-prices), and the faster plan when it is clearly faster."""
    inp = random_inputs(3, 8, seed=2, codec=True)
    cands = pool.best_by_shape(inp, 3)
    pick = pool.best_pool(inp, 3)
    fastest = min(c.period for c in cands.values())
    assert pick.period <= fastest * (1 + pool.SIMPLER_WITHIN)
    assert all(len(c.plan.cuts) >= len(pick.plan.cuts) for c in cands.values()
               if c.period <= fastest * (1 + pool.SIMPLER_WITHIN))


def test_a_replica_left_out_gets_no_frame_and_its_outstanding_frames_do_not_weigh_on_its_return():
    """A replica the membership leaves out by itself gets no frame, the dispatcher forgets its outstanding frames,
    and taken back it gets the next frame; the membership records both, and live() follows."""
    members = Membership(3)
    d = Dispatcher(3, members)
    plan = Plan((0, 9), ((0, 1, 2),))
    for _ in range(3):
        d.take(d.route(plan))
    members.leave_out([1], gen=0, at_s=1.0)
    d.forget([1])
    assert d.outstanding[1] == 0 and members.live() == [0, 2]
    assert all(d.route(plan) != [1] for _ in range(4))
    members.take_back(1, gen=0, at_s=2.0)
    assert d.route(plan) == [1]  # back with nothing outstanding: the next frame goes to it
    assert [(e["left_out"], e["back"]) for e in members.events] == [([1], []), ([], [1])]
    assert members.resync([2], gen=1, at_s=3.0) == [] and members.live() == [0, 1]
    assert members.resync([], gen=2, at_s=4.0) == [2] and members.events[-1]["back"] == [2]


@pytest.mark.parametrize("seed", range(12))
def test_one_cost_model_prices_a_chain_as_its_pipelined_recurrence(seed):
    """pool_costs is the cost model of every plan: for a chain (one worker per stage) its period and stage costs
    equal the steady period and stage costs of the chain's pipelined recurrence (costmodel), with the master's
    time as a floor, for any cuts, in-flight cap and mode, codec times included."""
    from cnnvideo.plan.costmodel import stage_costs, steady_period
    from cnnvideo.plan.schedulers.groups import all_plans

    rng = np.random.RandomState(seed)
    inp = random_inputs(int(rng.randint(1, 4)), int(rng.randint(2, 6)), seed, codec=bool(seed % 2))
    inp.master_time = float(rng.choice([0.0, 0.05]))
    inp.turnaround = float(rng.uniform(0, 0.02))
    for cuts in all_plans(inp.n_workers, inp.n_segments):
        plan = Plan(tuple(cuts))
        for in_flight in (0, 1, 3):
            for delta in (True, False):
                recurrence = stage_costs(plan, inp, delta)
                pc = pool.pool_costs(plan, inp, in_flight, delta)
                expected = max(float(steady_period(recurrence, in_flight, inp.turnaround)), inp.master_time)
                assert pc.period == pytest.approx(expected, rel=1e-12, abs=1e-15)
                np.testing.assert_allclose(pc.stage_costs(), recurrence, rtol=1e-12, atol=1e-15)
