"""Mutual TLS: certificates from scripts/make_certs.sh, refused clients, and a whole `cnnvideo local` run over mTLS."""
from __future__ import annotations

import os
import subprocess

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from .helpers import REPO, base_config, run_local


def _make_certs(d, *names):
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "make_certs.sh"), str(d)] + list(names),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return str(d)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """(our CA dir with trainer/master/worker0/worker1, another CA's dir with a 'master' cert)."""
    ours = _make_certs(tmp_path_factory.mktemp("pki"), "trainer", "master", "worker0", "worker1")
    other = _make_certs(tmp_path_factory.mktemp("pki-other"), "master")
    return ours, other


@pytest.fixture
def tls_server(certs):
    """An in-process net.Server (health service only) that requires mutual TLS with our CA."""
    from cnnvideo import config
    from cnnvideo.rpc import net, tls

    cfg = config.from_dict({"tls": {"enabled": True, "dir": certs[0]}}, check_files=False)
    addr = "127.0.0.1:%d" % net.free_port()
    tls.setup(cfg, "worker0")
    try:
        server = net.Server(addr, 4 << 20)
    finally:
        net.use_tls(None)  # other tests in this process stay plaintext
    server.start()
    yield addr
    server.stop(0)


def _read(path):
    with open(path, "rb") as fh:
        return fh.read()


def _check(addr, creds):
    """Health check over `creds` (None = plaintext): 'SERVING' or the gRPC status code name."""
    chan = grpc.secure_channel(addr, creds) if creds is not None else grpc.insecure_channel(addr)
    try:
        resp = health_pb2_grpc.HealthStub(chan).Check(health_pb2.HealthCheckRequest(), timeout=5)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
    except grpc.RpcError as exc:
        return exc.code().name
    finally:
        chan.close()


def test_make_certs_san_and_chain(certs):
    ours, _ = certs
    for name in ("trainer", "master", "worker0", "worker1"):
        crt = os.path.join(ours, name + ".crt")
        assert subprocess.run(["openssl", "verify", "-CAfile", os.path.join(ours, "ca.crt"), crt],
                              capture_output=True).returncode == 0
        text = subprocess.run(["openssl", "x509", "-in", crt, "-noout", "-ext", "subjectAltName"],
                              capture_output=True, text=True).stdout
        for san in ("IP Address:127.0.0.1", "DNS:localhost", "DNS:trainer", "DNS:master", "DNS:worker0",
                    "DNS:worker3"):
            assert san in text, (name, text)
    assert oct(os.stat(os.path.join(ours, "master.key")).st_mode & 0o777) == "0o600"


def test_client_with_our_cert_is_served(certs, tls_server):
    ours, _ = certs
    creds = grpc.ssl_channel_credentials(_read(os.path.join(ours, "ca.crt")), _read(os.path.join(ours, "master.key")),
                                         _read(os.path.join(ours, "master.crt")))
    assert _check(tls_server, creds) == "SERVING"


def test_net_helpers_use_the_configured_identity(certs, tls_server):
    from cnnvideo import config
    from cnnvideo.rpc import net, tls

    assert not net.check_health(tls_server, timeout=3)  # plaintext helper: refused
    tls.setup(config.from_dict({"tls": {"enabled": True, "dir": certs[0]}}, check_files=False), "master")
    try:
        assert net.check_health(tls_server, timeout=5)
    finally:
        net.use_tls(None)


@pytest.mark.parametrize("client", ["plaintext", "no-cert", "other-ca-cert", "trusts-other-ca"])
def test_bad_clients_are_refused(certs, tls_server, client):
    ours, other = certs
    ca, other_ca = _read(os.path.join(ours, "ca.crt")), _read(os.path.join(other, "ca.crt"))
    if client == "plaintext":
        creds = None
    elif client == "no-cert":  # verifies the server fine, but presents no certificate
        creds = grpc.ssl_channel_credentials(ca)
    elif client == "other-ca-cert":  # a certificate signed by a CA the server does not trust
        creds = grpc.ssl_channel_credentials(ca, _read(os.path.join(other, "master.key")),
                                             _read(os.path.join(other, "master.crt")))
    else:  # a client of another PKI: cannot verify our server
        creds = grpc.ssl_channel_credentials(other_ca, _read(os.path.join(other, "master.key")),
                                             _read(os.path.join(other, "master.crt")))
    assert _check(tls_server, creds) == "UNAVAILABLE"


def test_tls_config_errors_name_the_key(tmp_path, certs):
    from cnnvideo import config
    from cnnvideo.rpc import tls

    with pytest.raises(config.ConfigError, match="'tls'"):
        config.from_dict({"tls": {"enabled": True}}, check_files=False)
    cfg = config.from_dict({"tls": {"enabled": True, "dir": str(tmp_path)}}, check_files=False)
    with pytest.raises(config.ConfigError, match="'tls.dir'.*ca.crt"):
        tls.load(cfg.tls, "worker0")
    cfg = config.from_dict({"tls": {"enabled": True, "dir": certs[0], "key": str(tmp_path / "nope.key")}},
                           check_files=False)
    with pytest.raises(config.ConfigError, match="'tls.key'"):
        tls.load(cfg.tls, "worker0")
    assert tls.load(config.from_dict({}, check_files=False).tls, "worker0") is None  # default: plaintext


@pytest.mark.slow
def test_local_run_over_mutual_tls(tmp_path, synthetic_video, certs):
    data = base_config(synthetic_video, str(tmp_path / "cache"), frames=6, trainer={"frames": 8},
                       tls={"enabled": True, "dir": certs[0]})
    proc, report, out = run_local(tmp_path, data, name="tls")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["completed"] == report["frames"] == 6 and not report["lost"]
    for log in ("trainer.log", "w0.log", "w1.log", "master.log"):
        with open(os.path.join(out, log)) as fh:
            assert "mutual TLS on" in fh.read(), log
