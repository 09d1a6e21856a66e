"""Online estimators (cnnvideo.plan.adapt): EWMA, bandwidth from timings, measured CostInputs, re-plan decision."""
import numpy as np
import pytest

from cnnvideo.plan import adapt
from cnnvideo.plan.costmodel import CostInputs
from cnnvideo.plan.schedulers import objective


def test_ewma_starts_at_first_value_and_moves_by_alpha():
    assert adapt.ewma(None, 5.0, 0.3) == 5.0
    assert adapt.ewma(10.0, 0.0, 0.25) == pytest.approx(7.5)
    with pytest.raises(ValueError):
        adapt.ewma(1.0, 2.0, 0.0)


def test_bandwidth_from_ratio_and_degenerate_cases():
    assert adapt.bandwidth_from(3e6, 1.0) == pytest.approx(3e6)
    assert adapt.bandwidth_from(None, 1.0) is None
    assert adapt.bandwidth_from(1e6, 0.0) is None


def test_estimates_follow_a_rate_change_within_a_few_messages():
    est = adapt.Estimates(2, alpha=0.5, min_samples=2)
    assert est.bandwidth() == [None, None]
    for _ in range(5):
        est.add_transfer(1, 300000, 0.1)  # 3 MB/s
    assert est.bandwidth()[1] == pytest.approx(3e6)
    for _ in range(6):
        est.add_transfer(1, 300000, 0.3)  # 1 MB/s
    assert est.bandwidth()[1] == pytest.approx(1e6, rel=0.1)
    est.add_transfer(0, 10, 0.1)  # tiny messages are ignored
    assert est.bandwidth()[0] is None


def test_compute_scale_skips_warm_up_and_needs_samples():
    est = adapt.Estimates(2, alpha=1.0, min_samples=2)
    est.add_compute(0, 10.0, 1.0)  # warm-up: ignored
    est.add_compute(0, 2.0, 1.0)
    assert est.compute_scale()[0] is None
    est.add_compute(0, 2.0, 1.0)
    assert est.compute_scale() == [pytest.approx(2.0), None]
    snap = est.snapshot()
    assert snap["compute_scale"][0] == 2.0 and snap["bandwidth_MBps"] == [None, None]


def small_inputs():
    # 3 segments; the tensor at cut 1 is big, at cut 2 small
    return CostInputs(bytes_full=np.array([3e5, 2e6, 2e4, 4e3]), bytes_delta=np.array([3e4, 6e5, 1e4, 4e3]),
                      seg_time=np.array([[0.1, 0.1, 0.1], [0.1, 0.1, 0.1]]), bandwidth=np.array([3e6, 3e6]))


def test_adapted_inputs_replaces_measured_values_only():
    inp = small_inputs()
    out = adapt.adapted_inputs(inp, [None, 1e6], [2.0, None])
    assert list(out.bandwidth) == [3e6, 1e6]
    assert np.allclose(out.seg_time[0], 0.2) and np.allclose(out.seg_time[1], 0.1)
    assert list(inp.bandwidth) == [3e6, 3e6]  # input untouched
    assert adapt.relative_drift([3e6, 3e6], [None, 1e6]) == pytest.approx(2.0 / 3.0)


def test_replan_moves_the_cut_when_the_hop_slows_down():
    inp = small_inputs()
    start = (0, 1, 3)  # the big tensor crosses hop 1
    est = adapt.Estimates(2, alpha=1.0, min_samples=1)
    est.add_transfer(1, 100000, 1.0)  # hop 1 is now 0.1 MB/s
    new, cur, best, measured = adapt.replan(inp, est, start, 0, True, gain=0.05, pool=False)
    assert new is not None and new.cuts[1] != 1
    assert best < cur
    assert objective(new, measured, 0) == pytest.approx(best)
    # with the configured rate measured back, nothing changes
    est2 = adapt.Estimates(2, alpha=1.0, min_samples=1)
    est2.add_transfer(1, 300000, 0.1)
    assert adapt.replan(inp, est2, start, 0, True, pool=False)[0] is None


def test_should_switch_hysteresis():
    assert adapt.should_switch(1.0, 0.8, 0.1)
    assert not adapt.should_switch(1.0, 0.95, 0.1)
    assert not adapt.should_switch(1.0, float("inf"), 0.1)
