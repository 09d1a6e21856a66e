"""cnnvideo.events.mqtt over TLS with a REAL mosquitto (127.0.0.1, certificates made here with openssl): with
the CA and a client certificate the events arrive; without a client certificate the broker refuses the
handshake, which is logged once while publishing goes on without blocking."""
from __future__ import annotations

import json
import logging
import os
import shutil
import ssl
import subprocess
import time

import pytest

mqtt = pytest.importorskip("paho.mqtt.client")

from cnnvideo.events.mqtt import MqttPublisher, MqttSettings  # noqa: E402
from cnnvideo.events.types import Event  # noqa: E402

from .test_events_mqtt import MOSQUITTO, Broker, wait_for  # noqa: E402

pytestmark = pytest.mark.skipif(not (os.path.exists(MOSQUITTO) and shutil.which("openssl")),
                                reason="needs mosquitto and openssl")


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A throwaway CA, a server certificate for IP 127.0.0.1 and a client certificate (EC P-256: fast)."""
    d = str(tmp_path_factory.mktemp("mqtt-certs"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=events-test-ca",
            cwd=d)
    with open(os.path.join(d, "server.ext"), "w") as fh:
        fh.write("subjectAltName=IP:127.0.0.1\n")
    for name in ("server", "client"):
        openssl("req", *ec, "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + name, cwd=d)
        extra = ["-extfile", "server.ext"] if name == "server" else []
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", name + ".crt", "-days", "2", *extra, cwd=d)
    return {k: os.path.join(d, k) for k in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")}


@pytest.fixture
def tls_broker(tmp_path, certs):
    b = Broker(tmp_path, extra="cafile %s\ncertfile %s\nkeyfile %s\nrequire_certificate true\n"
               % (certs["ca.crt"], certs["server.crt"], certs["server.key"])).start()
    yield b
    b.stop()


def event(frame):
    return Event(type="new", track_id=1, label="person", score=0.9, box=(0, 0, 10, 10), capture_time=1.0, frame=frame)


def test_events_over_tls_with_a_client_certificate(tls_broker, certs):
    """tls_ca + tls_cert + tls_key: the publisher connects over TLS and a TLS subscriber receives the event."""
    got = []
    sub = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2, client_id="tls-sub")
    sub.tls_set(ca_certs=certs["ca.crt"], certfile=certs["client.crt"], keyfile=certs["client.key"],
                cert_reqs=ssl.CERT_REQUIRED)
    sub.on_message = lambda c, u, m: got.append(json.loads(m.payload))
    sub.connect("127.0.0.1", tls_broker.port)
    sub.subscribe("tls/cam1/events", qos=1)
    sub.loop_start()
    pub = MqttPublisher(MqttSettings(port=tls_broker.port, topic_prefix="tls", tls_ca=certs["ca.crt"],
                                     tls_cert=certs["client.crt"], tls_key=certs["client.key"]), camera="cam1")
    try:
        pub.start()
        wait_for(lambda: pub.stats().connected, 10, "the TLS connection")
        time.sleep(0.2)  # the subscriber's SUBSCRIBE went out with its CONNECT; give the broker a moment
        pub.publish_event(event(3))
        wait_for(lambda: got, 10, "the event over TLS")
        assert got[0]["frame"] == 3
    finally:
        pub.close()
        sub.disconnect()
        sub.loop_stop()


def test_tls_without_client_certificate_is_refused_and_logged(tls_broker, certs, caplog):
    """The broker requires a client certificate: a publisher with only the CA fails the handshake; one warning
    says it cannot connect and mentions TLS, publish_event stays non-blocking and close() returns."""
    caplog.set_level(logging.WARNING, logger="cnnvideo.events.mqtt")
    pub = MqttPublisher(MqttSettings(port=tls_broker.port, topic_prefix="tls", tls_ca=certs["ca.crt"],
                                     queue_max=2, reconnect_min_s=1, reconnect_max_s=1))
    pub.start()
    wait_for(lambda: any("TLS" in r.getMessage() for r in caplog.records), 10, "the log line")
    t = time.perf_counter()
    for f in range(5):
        pub.publish_event(event(f))
    assert time.perf_counter() - t < 0.2
    s = pub.stats()
    assert (s.connected, s.queued, s.dropped) == (False, 2, 3)
    pub.close(timeout=1)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "127.0.0.1:%d" % tls_broker.port in lines[0], lines
