"""cnnvideo.rpc.link: the one link class of the master and the workers, and send_with_retry against a real gRPC
server (a Worker service on a local port whose Process fails a set number of times before it answers)."""
from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
from cnnvideo.rpc import net
from cnnvideo.rpc.link import LinkError, LinksOut, send_with_retry
from cnnvideo.wire.protocol import HopSettings


class Flaky(pb_grpc.WorkerServicer):
    """Process answers UNAVAILABLE `fails` times (or INVALID_ARGUMENT when `code` says so), then ok."""

    def __init__(self, fails: int, code=grpc.StatusCode.UNAVAILABLE) -> None:
        self.fails, self.code, self.calls = fails, code, 0

    def Process(self, request, context):
        self.calls += 1
        if self.calls <= self.fails:
            context.abort(self.code, "not yet")
        return pb.Ack(ok=True)


@pytest.fixture
def server():
    made = []

    def start(servicer):
        srv = grpc.server(futures.ThreadPoolExecutor(2))
        pb_grpc.add_WorkerServicer_to_server(servicer, srv)
        port = srv.add_insecure_port("127.0.0.1:0")
        srv.start()
        made.append(srv)
        chan = grpc.insecure_channel("127.0.0.1:%d" % port)
        return pb_grpc.WorkerStub(chan)

    yield start
    for srv in made:
        srv.stop(0)


def test_links_out_keep_a_sender_sequence_and_epoch_per_receiver():
    """Each receiver's link has its own sender and sequence; restarting one gives it a fresh sender and sequence in
    a new epoch and leaves the others; a reset starts every link over but keeps the epochs."""
    links = LinksOut(HopSettings())
    a, b = links.get(1), links.get(2)
    assert [a.next_seq(), a.next_seq(), b.next_seq()] == [0, 1, 0]
    links.restart(1)
    assert links.get(1) is not a and links.get(1).seq == 0 and links.epoch(1) == 1 and links.get(2) is b
    links.key_due([2])
    assert links.get(2).key_first() and not links.get(2).key_first()
    links.reset()
    assert links.get(2) is not b and links.epoch(1) == 1 and links.get(1).epoch == 1


def test_send_with_retry_tries_again_while_unreachable_and_current(server):
    """UNAVAILABLE twice, then ok: the message gets through, on a renewed channel each time."""
    servicer = Flaky(2)
    stub = server(servicer)
    renewed = []
    ack = send_with_retry(lambda: stub, pb.FrameTask(), 5.0, net.Backoff(10.0, first=0.01), lambda: True,
                          renewed.append, lambda problem: "to w1: %s" % problem)
    assert ack.ok and servicer.calls == 3 and len(renewed) == 2


def test_send_with_retry_gives_up_when_the_message_is_stale_or_the_error_is_not_a_link_error(server):
    """A message no longer current is not tried again, nor is one the receiver refuses; the error names the link."""
    stub = server(Flaky(5))
    with pytest.raises(LinkError, match="to w1: UNAVAILABLE: not yet"):
        send_with_retry(lambda: stub, pb.FrameTask(), 5.0, net.Backoff(10.0, first=0.01), lambda: False,
                        lambda s: None, lambda problem: "to w1: %s" % problem)
    refusing = Flaky(1, grpc.StatusCode.INVALID_ARGUMENT)
    stub = server(refusing)
    with pytest.raises(LinkError, match="INVALID_ARGUMENT"):
        send_with_retry(lambda: stub, pb.FrameTask(), 5.0, net.Backoff(10.0, first=0.01), lambda: True,
                        lambda s: None, lambda problem: problem)
    assert refusing.calls == 1
