"""The input hop's transfer times with calls in flight at once: a message is charged the wire time from when the
link was free, not from when it was sent, so overlapping calls do not make the link look slower to the scheduler."""
from cnnvideo.master.pool.inputs import InputLinks, LinkClock


def test_a_lone_call_counts_from_its_send():
    clock = LinkClock()
    assert clock.busy_start(1.0, 1.02) == 1.0
    assert clock.busy_start(1.5, 1.52) == 1.5  # the link was free since 1.02


def test_an_overlapping_call_counts_from_when_the_link_was_free():
    """Two 20 ms messages sent 1 ms apart on a serial link: the second finishes at 1.041 and carried its bytes from
    1.02, when the first was done, so its transfer is 21 ms, not 40."""
    clock = LinkClock()
    assert clock.busy_start(1.000, 1.020) == 1.000
    assert clock.busy_start(1.001, 1.041) == 1.020


def test_calls_answered_out_of_order_never_start_after_they_end():
    """The second call's answer comes first (the receiver orders them itself): each start stays within its call."""
    clock = LinkClock()
    late_first = clock.busy_start(1.001, 1.030)
    early = clock.busy_start(1.000, 1.045)
    assert 1.001 <= late_first <= 1.030 and 1.000 <= early <= 1.045
    assert early == 1.030


def test_input_links_keep_each_links_sender_and_sequence_and_start_one_over_alone():
    """Each receiving worker's link has its own delta sender and sequence; a link that starts over alone gets a
    fresh sender (its next frame is whole) and sequence and a new epoch, and the other links keep theirs; a resync
    starts every link over; a keyframe due after an outage is taken once per link."""
    import numpy as np

    from cnnvideo.config import Config

    links = InputLinks(Config(), 3)
    x = np.zeros((1, 4, 4, 3), np.uint8)
    assert [links.get(0).next_seq(), links.get(0).next_seq(), links.get(2).next_seq()] == [0, 1, 0]
    first = links.get(0).sender
    assert first.encode(0, x)[1] and not first.encode(0, x)[1]  # a link's first message is whole, then deltas
    links.restart(0)
    assert [links.epoch(w) for w in range(3)] == [1, 0, 0] and links.get(0).next_seq() == 0
    assert links.get(2).next_seq() == 1
    assert links.get(0).sender is not first and links.get(0).sender.encode(0, x)[1]
    links.all_key_due()
    assert links.get(1).key_first() and not links.get(1).key_first() and links.get(2).key_first()
    links.reset()
    assert links.get(2).next_seq() == 0 and [links.epoch(w) for w in range(3)] == [1, 0, 0]
