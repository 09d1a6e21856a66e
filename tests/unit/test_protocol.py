"""The hop protocol shared by master and workers: reporter, sender per cut, keyframes and epochs."""
import numpy as np
import pytest

from cnnvideo.wire.hop import HopError, HopReceiver, peek_header
from cnnvideo.wire.protocol import HopPlanner, HopSettings, InputHop, OutputHop, check_stage_of, reporter


def test_reporter_is_the_last_worker_with_work():
    assert reporter([0, 3, 5]) == 1
    assert reporter([0, 5, 5]) == 0
    assert reporter([0, 0, 5]) == 1
    assert reporter([0, 0, 0]) == 0
    assert reporter([0, 2, 2, 2]) == 0


def test_check_stage_of_names_the_problem():
    """A plan that does not fit the cluster is refused with a message naming what is wrong."""
    assert check_stage_of([0, 2, 4], [0, 1], 2, 4) == [0, 1]
    assert check_stage_of([0, 4], [0, 0, -1], 3, 4) == [0, 0, -1]
    for cuts, stage_of, msg in (([0, 2, 4], [0], "expected 2..2"),
                                ([1, 2, 4], [0, 1], "start at cut 0"),
                                ([0, 3, 2, 4], [0, 1, 2], "non-decreasing"),
                                ([0, 2, 4], [0, 0], "stage 1 has no worker"),
                                ([0, 2, 4], [0, 2], "outside 0..1")):
        with pytest.raises(ValueError, match=msg):
            check_stage_of(cuts, stage_of, len(stage_of), 4)


def test_a_plan_may_name_workers_the_run_has_not_heard_of_yet():
    """A worker asked to build its stage of a plan that names a worker which joined since (its run knows 3, the plan
    4) or names fewer (the rest unused) gets its own stage; a stage_of past MAX_STAGE_OF entries is refused."""
    assert check_stage_of([0, 4], [0, 0, 0, 0], 3, 4) == [0, 0, 0]
    assert check_stage_of([0, 2, 4], [0, 1], 3, 4) == [0, 1, -1]
    assert check_stage_of([0, 2, 4], [0, -1, -1, 1], 3, 4) == [0, -1, -1]  # stage 1 on the one it will hear of
    with pytest.raises(ValueError, match="entries \\(at most 4096\\)"):
        check_stage_of([0, 4], [0] * 5000, 3, 4)


def test_cut0_gets_the_pixel_threshold_and_later_cuts_the_float_settings():
    s = HopSettings(input_threshold=2, threshold=0.5, fp16=True)
    s0, s1 = s.sender(0), s.sender(3)
    assert (s0.threshold, s0.fp16) == (2.0, False)
    assert (s1.threshold, s1.fp16) == (0.5, True)


def test_hop_planner_keyframes_new_cuts_periodically_and_after_resync():
    hp = HopPlanner(2, "delta", keyframe_every=4)
    assert hp.plan(0, [0, 2, 4]) == ([True, True], [0, 0])
    assert hp.plan(1, [0, 2, 4]) == ([False, False], [0, 0])
    assert hp.plan(2, [0, 3, 4]) == ([False, True], [0, 1])
    assert hp.plan(3, [0, 4, 4]) == ([False, False], [0, 1])  # w0 reports: hop 1 unused
    assert hp.plan(4, [0, 3, 4]) == ([True, True], [0, 1])  # periodic
    hp.resync()
    assert hp.plan(5, [0, 3, 4]) == ([True, True], [1, 2])
    assert HopPlanner(2, "full").plan(1, [0, 1, 2])[0] == [True, True]


def test_input_hop_refuses_a_delta_on_a_base_of_another_cut():
    """A link whose cut moved must start again with a keyframe: a delta at the new cut is refused."""
    ih = InputHop(1)
    ih.admit(True, 3)
    ih.admit(False, 3)
    ih.admit(True, 5)
    with pytest.raises(HopError, match="link into hop 1 moved from cut 5 to 4 without a keyframe"):
        ih.admit(False, 4)


def test_output_hop_keyframes_first_message_and_cut_changes_and_round_trips():
    oh = OutputHop(HopSettings())
    rx = HopReceiver(1 << 20)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
    kinds = []
    for cut, planned in ((2, False), (2, False), (2, True), (3, False), (3, False)):
        x = x.copy()
        x[0, 0, 0, 0] += 1.0
        data, key = oh.encode(cut, x, planned)
        kinds.append((key, peek_header(data).name))
        np.testing.assert_array_equal(rx.decode(data), x)
    assert [k for k, _ in kinds] == [True, False, True, True, False]
    assert kinds[1][1] == "update"


def test_peek_header_rejects_what_is_not_a_hop_payload():
    with pytest.raises(HopError, match="too short"):
        peek_header(b"HP")
    with pytest.raises(HopError, match="bad hop header"):
        peek_header(b"XX\x01\x00\x00\x00\x00\x00")
