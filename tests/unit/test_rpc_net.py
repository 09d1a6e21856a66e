"""cnnvideo.rpc.net.free_port: ports a server can come back on after a restart."""
import socket

from cnnvideo.rpc import net


def test_free_port_is_below_the_ephemeral_range_and_free(monkeypatch):
    """Ports come from the PORTS_BELOW_EPHEMERAL ports under the kernel's ephemeral range (where outgoing
    connections and bind(0) never take theirs), and each can be bound at once."""
    low = net._ephemeral_low()
    ports = {net.free_port() for _ in range(20)}
    assert all(max(1024, low - net.PORTS_BELOW_EPHEMERAL) <= p < low for p in ports), (low, ports)
    assert len(ports) > 1  # drawn at random, not one fixed port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports.pop()))


def test_a_taken_port_is_skipped_and_a_low_range_falls_back_to_the_kernel(monkeypatch, tmp_path):
    """A drawn port that is taken is drawn again; with an ephemeral range that starts too low to leave 100 ports
    under it, the kernel picks; an unreadable range file counts as Linux's default."""
    read_range = net._ephemeral_low
    with socket.socket() as held, socket.socket() as other:
        held.bind(("127.0.0.1", 0))
        other.bind(("127.0.0.1", 0))
        taken, free = held.getsockname()[1], other.getsockname()[1]
        other.close()
        order = iter([taken, taken, free])
        monkeypatch.setattr("random.randrange", lambda a, b: next(order))
        monkeypatch.setattr(net, "_ephemeral_low", lambda: 65535)
        monkeypatch.setattr(net, "PORTS_BELOW_EPHEMERAL", 65535 - 1024)
        assert net.free_port() == free
    monkeypatch.setattr("random.randrange", lambda a, b: 1 / 0)  # never drawn
    monkeypatch.setattr(net, "_ephemeral_low", lambda: 1100)
    assert net.free_port() > 0
    path = tmp_path / "range"
    path.write_text("40000\t60999\n")
    assert read_range(str(path)) == 40000
    assert read_range(str(tmp_path / "missing")) == 32768
