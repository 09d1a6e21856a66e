"""cnnvideo.plan.costinputs: how worker profiles, codec times and the network CPU charge become CostInputs (one builder
for the master and `cnnvideo plan`)."""
import numpy as np

from cnnvideo.plan.costinputs import GONE_BPS, GONE_S, alike_key, cpu_model, pool_alike, share_cpu, without_workers
from cnnvideo.plan.costinputs import build as cost_inputs
from cnnvideo.plan.costmodel import CostInputs, compute_costs
from cnnvideo.plan.plan import Plan
from cnnvideo.plan.schedulers.registry import schedule


def test_net_cpu_charge_follows_the_hop_bytes():
    """Each worker's stage grows by its per-byte charge times the bytes it receives plus the bytes it sends
    (delta bytes in delta mode, dense sizes without predictors), on top of the codec times."""
    seg = np.full((2, 3), 0.1)
    dense = np.array([1000.0, 4000.0, 2000.0, 40.0])
    enc = np.full((2, 4), 0.01)
    plain = cost_inputs(seg, [1e6, 1e6], dense, encode_time=enc, decode_time=enc)
    charged = cost_inputs(seg, [1e6, 1e6], dense, encode_time=enc, decode_time=enc,
                          net_s_per_byte=[1e-6, 2e-6])
    plan = Plan((0, 1, 3))
    extra = compute_costs(plan, charged) - compute_costs(plan, plain)
    np.testing.assert_allclose(extra, [1e-6 * (1000 + 4000), 2e-6 * (4000 + 40)])
    # transfers stay bytes / bandwidth
    assert charged.bytes_delta[1] == 4000.0
    no_codec = cost_inputs(seg, [1e6, 1e6], dense, net_s_per_byte=[1e-6, 1e-6])
    np.testing.assert_allclose(no_codec.encode_time, no_codec.decode_time)


def test_cpu_model_bursts_with_one_frame_in_flight_and_charges_network_cpu_otherwise():
    """In-flight 1: each worker's CFS quota/period becomes `burst` (idle-start stages), no network charge;
    more in flight: ns/byte x the worker's wall/CPU ratio, no burst."""
    from types import SimpleNamespace

    costs = [SimpleNamespace(cfs_quota_s=0.04, cfs_period_s=0.1, wall_per_cpu=2.5),
             SimpleNamespace(cfs_quota_s=0.0, cfs_period_s=0.0, wall_per_cpu=0.0)]
    one = cpu_model(costs, 1, 25.0)
    np.testing.assert_allclose(one["burst"], [[0.04, 0.1], [0.0, 0.0]])
    assert "net_s_per_byte" not in one
    many = cpu_model(costs, 6, 25.0)
    np.testing.assert_allclose(many["net_s_per_byte"], [62.5e-9, 25e-9])
    assert "burst" not in many


def test_share_cpu_matches_what_a_capped_worker_reports():
    """`plan`'s workers (a CPU share) give cpu_model the figures a worker capped at that share reports: quota =
    share x the 100 ms period (0 when uncapped), wall/CPU divided by the share."""
    capped, free = share_cpu(0.4, 1.1), share_cpu(1.5, 1.1)
    assert abs(capped.cfs_quota_s - 0.04) < 1e-12 and capped.cfs_period_s == 0.1
    assert abs(capped.wall_per_cpu - 1.1 / 0.4) < 1e-12
    assert free.cfs_quota_s == 0.0 and abs(free.wall_per_cpu - 1.1) < 1e-12
    np.testing.assert_allclose(cpu_model([capped, free], 1, 25.0)["burst"], [[0.04, 0.1], [0.0, 0.1]])


def test_master_and_plan_use_the_same_builder():
    """The master plans with the core builder (no second copy), as `cnnvideo plan` does."""
    from cnnvideo.master import setup as role
    from cnnvideo.plan import costinputs
    from cnnvideo.tools import planner

    assert role.cost_inputs is costinputs.build and role.cpu_model is costinputs.cpu_model
    assert planner.costinputs is costinputs


def test_payload_share_scales_the_transfers_not_the_work():
    """A shaped link counts whole frames: with TCP_PAYLOAD_SHARE a transfer takes bytes / (rate x 1448/1514)
    (a 1 MB hop at 3 MB/s: 0.349 s, as measured, not 0.333 s); paced local links pace payload bytes (share 1)."""
    from cnnvideo.plan import costinputs

    seg = np.full((2, 3), 0.1)
    dense = np.array([1e6, 4e5, 2e5, 4e3])
    plain = cost_inputs(seg, [3e6, 3e6], dense)
    wire = cost_inputs(seg, [3e6, 3e6], dense, share=costinputs.payload_share("tc"))
    plan = Plan((0, 1, 3))
    from cnnvideo.plan.costmodel import stage_costs

    a, b = stage_costs(plan, plain), stage_costs(plan, wire)
    np.testing.assert_allclose(b[0::2], a[0::2] * 1514.0 / 1448.0)
    result = np.array([0.0, 1.0])  # only the last worker's stage carries the result transfer
    np.testing.assert_allclose(b[1::2] - result * wire.result_time(), a[1::2] - result * plain.result_time())
    assert abs(b[0] - 1e6 / 3e6 * 1514 / 1448) < 1e-12
    assert costinputs.payload_share("paced") == 1.0
    assert costinputs.payload_share("auto") == costinputs.payload_share("tc") == costinputs.TCP_PAYLOAD_SHARE


def test_message_charge_is_cpu_times_messages_times_wall_per_cpu_with_more_in_flight():
    """More than one frame in flight: cpu_model's per-message charge is us x the worker's wall/CPU ratio, and the
    built inputs add exactly us x MESSAGES_PER_FRAME x that ratio to each work stage (nothing to transfers);
    without an explicit figure cpu_model uses the config default."""
    from types import SimpleNamespace

    from cnnvideo.config import CostModel
    from cnnvideo.plan.costmodel import MESSAGES_PER_FRAME, stage_costs

    cpus = [SimpleNamespace(cfs_quota_s=0.04, cfs_period_s=0.1, wall_per_cpu=2.5),
            SimpleNamespace(cfs_quota_s=0.0, cfs_period_s=0.1, wall_per_cpu=0.0)]
    model = cpu_model(cpus, 6, 25.0, 300.0)
    np.testing.assert_allclose(model["net_s_per_message"], [300e-6 * 2.5, 300e-6 * 1.0])
    seg, dense = np.full((2, 3), 0.1), np.array([1000.0, 4000.0, 2000.0, 40.0])
    plan = Plan((0, 1, 3))
    plain = stage_costs(plan, cost_inputs(seg, [1e6, 1e6], dense, **cpu_model(cpus, 6, 25.0, 0.0)))
    charged = stage_costs(plan, cost_inputs(seg, [1e6, 1e6], dense, **model))
    np.testing.assert_allclose(charged[1::2] - plain[1::2], 300e-6 * MESSAGES_PER_FRAME * np.array([2.5, 1.0]))
    np.testing.assert_allclose(charged[0::2], plain[0::2])
    default = cpu_model(cpus, 6, 25.0)["net_s_per_message"]
    np.testing.assert_allclose(default, CostModel.net_cpu_us_per_message * 1e-6 * np.array([2.5, 1.0]))


def test_message_charge_with_one_in_flight_is_fluid_inside_the_burst():
    """One frame in flight: the per-message charge is us x period/quota for a capped worker (burst_wall turns it
    back into exactly that much CPU inside the burst) and us x wall/CPU for an uncapped one; no per-byte charge."""
    from types import SimpleNamespace

    cpus = [SimpleNamespace(cfs_quota_s=0.01, cfs_period_s=0.1, wall_per_cpu=12.0),
            SimpleNamespace(cfs_quota_s=0.0, cfs_period_s=0.1, wall_per_cpu=1.5)]
    one = cpu_model(cpus, 1, 25.0, 200.0)
    np.testing.assert_allclose(one["net_s_per_message"], [200e-6 * 10.0, 200e-6 * 1.5])
    assert "net_s_per_byte" not in one


def test_pool_alike_gives_alike_workers_their_median_and_leaves_others_alone():
    """Workers with the same device and cap get each segment's median over theirs (the planner sees one device, not
    the noise of when each profiled); a worker with another cap, or an unknown device, keeps its own profile."""
    seg = np.array([[0.09, 0.01], [0.12, 0.02], [0.18, 0.01], [0.05, 0.05], [0.30, 0.30], [0.40, 0.40]])
    keys = [alike_key("cpu/x86_64/2 cores", 0.01, 0.1)] * 3 + [alike_key("cpu/x86_64/2 cores", 0.02, 0.1),
                                                                 alike_key("", 0.01, 0.1), None]
    out, groups = pool_alike(seg, keys)
    assert groups == [[0, 1, 2]]
    assert np.allclose(out[:3], [[0.12, 0.01]] * 3)
    assert np.array_equal(out[3:], seg[3:])
    assert np.array_equal(seg[0], [0.09, 0.01])  # the input is not changed


def test_pool_alike_without_pairs_changes_nothing():
    """One worker per key: nothing is pooled and the times come back as they were."""
    seg = np.array([[0.1, 0.2], [0.3, 0.4]])
    out, groups = pool_alike(seg, [alike_key("a", 0.01, 0.1), alike_key("b", 0.01, 0.1)])
    assert groups == [] and np.array_equal(out, seg)


def test_a_plan_without_the_workers_that_left_leans_on_none_of_them():
    """Four alike workers; with some gone (priced out by without_workers), the pool planner (`optimal`) gives every
    stage a worker still in the pool, and with all but one gone, that one runs the whole model; the inputs of the
    others are untouched and the caller's arrays are not changed."""
    k = 10
    seg = np.full((4, k), 0.01)
    nbytes = np.full(k + 1, 1e4)
    for gone in ([3], [2, 3], [0, 1, 2], [1, 3]):
        s, bw = without_workers(seg, [3e6] * 4, gone)
        assert (seg == 0.01).all() and (s[gone] == GONE_S).all() and all(bw[w] == GONE_BPS for w in gone)
        assert all(bw[w] == 3e6 and (s[w] == 0.01).all() for w in range(4) if w not in gone)
        plan = schedule("optimal", CostInputs(nbytes * 4, nbytes, s, np.array(bw)), 6, True)
        assert all(set(g) - set(gone) for g in plan.groups), (gone, plan)
        if len(gone) == 3:
            assert plan.groups == ((({0, 1, 2, 3} - set(gone)).pop(),),) and plan.cuts == (0, k), plan
