"""Frame tracking without any network: every frame ends exactly once, stale and duplicate results are ignored,
a resync re-sends the frames in flight and drops those out of retries, with the reason."""
from cnnvideo.master.tracking import FrameTracker


def _send_all_ready(tr, at=0.0):
    sent = []
    while tr.ready() and tr.pending_fault is None and not tr.done():
        f, resend = tr.next_frame()
        tr.sent(f, [0, 1, 2], at, resend, [0, 1], [[0], [1]])
        sent.append((f, resend))
    return sent


def test_cap_limits_frames_in_flight_and_results_free_slots():
    tr = FrameTracker(5, retries=2, cap=2)
    assert _send_all_ready(tr) == [(0, False), (1, False)]
    assert tr.complete(0, 0, 1, 1.0)
    assert _send_all_ready(tr) == [(2, False)]
    assert tr.in_flight() == 2 and tr.completed == 1


def test_duplicate_stale_and_unknown_results_are_ignored():
    tr = FrameTracker(3, retries=1, cap=0)
    _send_all_ready(tr)
    assert tr.complete(1, 0, 1, 1.0)
    assert not tr.complete(1, 0, 1, 1.1)  # duplicate
    assert not tr.complete(2, 5, 1, 1.2)  # another generation
    assert not tr.complete(9, 0, 1, 1.3)  # never sent
    assert tr.ignored == 3 and tr.completed == 1


def test_resync_resends_in_flight_frames_first_then_drops_them_after_retries():
    """Retries 1: a frame may be sent twice. After two faults it is dropped with the last fault as its reason;
    every frame still ends exactly once and re-sends keep their first plan."""
    tr = FrameTracker(4, retries=1, cap=2)
    _send_all_ready(tr)  # frames 0, 1
    assert tr.fault("w1 died")
    assert not tr.fault("w1 stream lost")  # one resync per generation
    gen, again, dropped = tr.resync("w1 died")
    assert (gen, again, dropped) == (1, [0, 1], [])
    assert not tr.fault("late fault", generation=0)  # stale
    assert _send_all_ready(tr) == [(0, True), (1, True)]
    assert tr.retried == 2 and tr.cuts_of(0) == [0, 1, 2]
    assert tr.complete(0, 1, 1, 2.0)
    gen, again, dropped = tr.resync("w0 died")
    assert (gen, again, dropped) == (2, [], [1])
    assert tr.records[1].status == "dropped" and "w0 died" in tr.records[1].reason
    assert _send_all_ready(tr) == [(2, False), (3, False)]
    assert tr.complete(2, 2, 1, 3.0) and tr.complete(3, 2, 1, 3.1)
    assert tr.done() and tr.ended == 4
    assert sorted(r.status for r in tr.ordered()) == ["completed", "completed", "completed", "dropped"]


def test_state_and_main_plan():
    tr = FrameTracker(3, retries=0, cap=0)
    tr.t0 = 10.0
    tr.sent(0, [0, 2, 3], 10.5, False, [0, 1], [[0], [1]])
    tr.sent(1, [0, 1, 3], 10.6, False, [0, 1], [[0], [1]])
    tr.sent(2, [0, 1, 3], 10.7, False, [0, 1], [[0], [1]])
    tr.complete(0, 0, 1, 11.0)
    flying, done = tr.state()
    assert [round(t, 3) for t, _ in flying] == [0.6, 0.7] and done == [1.0]
    assert tr.main_plan(2) == [0, 1, 3]


def test_a_replica_left_out_re_sends_only_the_frames_on_its_route():
    """A replica leaves a one-stage pool alone: only the frames routed through it are queued again (or dropped
    out of retries), in the same generation; the other replicas' frames stay in flight and may still complete."""
    tr = FrameTracker(6, retries=1, cap=0)
    for f, w in enumerate([0, 1, 2, 1, 0]):
        tr.next_frame()
        tr.sent(f, [0, 9], 0.0, False, route=[w], groups=[[0, 1, 2]])
    tr.records[3].attempts = 2  # frame 3 was sent twice already: out of retries
    assert tr.fault("w1 is down")
    again, dropped = tr.release_workers([1], "w1 is down")
    assert (again, dropped) == ([1], [3]) and tr.generation == 0 and tr.pending_fault is None
    assert sorted(tr.flying) == [0, 2, 4] and list(tr.retry_q) == [1] and tr.replica_resyncs == 1
    assert tr.records[3].status == "dropped" and "w1 is down" in tr.records[3].reason
    assert tr.complete(2, 0, 2, 1.0)  # the generation is unchanged: other replicas' results still count
    assert tr.next_frame() == (1, True) and tr.oldest_pending() == 0


def test_a_hybrid_replica_left_out_re_sends_the_frames_through_it_at_any_stage():
    """Two stages (stage 0 on w0/w1, stage 1 on w2/w3): leaving out a replica of either stage queues again exactly
    the frames whose route runs a stage on it, in the same generation; a chain frame (no route) counts as running
    stage s on worker s."""
    tr = FrameTracker(6, retries=3, cap=0)
    routes = [[0, 2], [1, 3], [0, 3], [1, 2], [0, 2]]
    for f, route in enumerate(routes):
        tr.next_frame()
        tr.sent(f, [0, 4, 9], 0.0, False, route=route, groups=[[0, 1], [2, 3]])
    tr.next_frame()
    tr.sent(5, [0, 4, 9], 0.0, False, [0, 1], [[0], [1]])  # a chain's frame: w0 then w1
    assert tr.route_of(5) == [0, 1] and tr.route_of(2) == [0, 3]
    assert tr.flying_through([3]) == [1, 2] and tr.flying_through([1]) == [1, 3, 5]
    again, dropped = tr.release_workers([3], "w3 is down")
    assert (again, dropped) == ([1, 2], []) and tr.generation == 0
    assert sorted(tr.flying) == [0, 3, 4, 5] and list(tr.retry_q) == [1, 2]
