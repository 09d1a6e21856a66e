"""Traffic probe run inside test containers: TCP sink/source for throughput, UDP echo/ping for RTT.

Every loop is bounded in time; it talks only to the address it is given (a test container).
"""
import json
import socket
import sys
import time

CHUNK = 64 * 1024
WARMUP_S = 0.5  # ignore the first half second (TCP slow start, htb burst)


def sink(port: int, seconds: float) -> dict:
    """Accept one connection and count bytes; rate over [first byte + warm-up, last byte]."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(1)
    srv.settimeout(seconds + 10)
    conn, _ = srv.accept()
    conn.settimeout(2.0)
    total, start, t0, b0, t_last = 0, None, None, 0, None
    deadline = time.monotonic() + seconds + 10
    while time.monotonic() < deadline:
        try:
            data = conn.recv(CHUNK)
        except socket.timeout:
            break
        if not data:
            break
        now = time.monotonic()
        start = start or now
        total += len(data)
        if t0 is None and now - start >= WARMUP_S:
            t0, b0 = now, total
        t_last = now
    span = (t_last - t0) if t0 and t_last and t_last > t0 else 0.0
    return {"bytes": total, "seconds": span, "rate_Bps": (total - b0) / span if span else 0.0}


def source(host: str, port: int, seconds: float) -> dict:
    """Send as fast as the socket allows for `seconds`."""
    for _ in range(50):  # the sink may still be starting: retry for up to ~5 s
        try:
            sock = socket.create_connection((host, port), timeout=10)
            break
        except ConnectionRefusedError:
            time.sleep(0.1)
    else:
        raise SystemExit("source: %s:%d refused for 5 s" % (host, port))
    buf = b"\0" * CHUNK
    sent, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        sent += sock.send(buf)
    sock.close()
    return {"sent": sent}


def echo(port: int, seconds: float) -> dict:
    """Echo UDP datagrams back for `seconds`."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", port))
    sock.settimeout(0.5)
    count, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            data, addr = sock.recvfrom(2048)
        except socket.timeout:
            continue
        sock.sendto(data, addr)
        count += 1
    return {"echoed": count}


def ping(host: str, port: int, count: int) -> dict:
    """UDP round trips to an echo server: every RTT in ms (lost ones omitted)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(2.0)
    rtts = []
    for i in range(count):
        t = time.monotonic()
        sock.sendto(str(i).encode(), (host, port))
        try:
            sock.recvfrom(2048)
            rtts.append((time.monotonic() - t) * 1000.0)
        except socket.timeout:
            pass
        time.sleep(0.05)
    return {"rtt_ms": rtts}


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "sink":
        out = sink(int(args[0]), float(args[1]))
    elif cmd == "source":
        out = source(args[0], int(args[1]), float(args[2]))
    elif cmd == "echo":
        out = echo(int(args[0]), float(args[1]))
    elif cmd == "ping":
        out = ping(args[0], int(args[1]), int(args[2]))
    else:
        sys.exit("usage: probe.py sink|source|echo|ping ...")
    print(json.dumps(out), flush=True)
