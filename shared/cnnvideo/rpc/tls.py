"""Mutual TLS identities for the roles: which CA/cert/key files a role uses, loaded once, as gRPC credentials.

A role (trainer, worker<i>, master) reads `tls` from its config: with `dir` the files are
`dir/ca.crt`, `dir/<role>.crt`, `dir/<role>.key` (scripts/make_certs.sh makes them); explicit
`ca`/`cert`/`key` paths win over `dir`. Servers require a client certificate signed by the CA; clients
verify the server's certificate (and its name/IP) against the same CA. Plaintext only with `enabled: false`.
"""
from __future__ import annotations

import os
from typing import Optional

from cnnvideo.config_types import Tls
from cnnvideo.errors import ConfigError
from cnnvideo.rpc import net


class Identity:
    """PEM bytes of one role's CA bundle, certificate chain and private key; makes gRPC credentials."""

    def __init__(self, role: str, ca: bytes, cert: bytes, key: bytes, paths=("", "", "")) -> None:
        self.role = role
        self.ca = ca
        self.cert = cert
        self.key = key
        self.paths = tuple(paths)

    def server_credentials(self):
        import grpc

        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca,
                                           require_client_auth=True)

    def channel_credentials(self):
        import grpc

        return grpc.ssl_channel_credentials(root_certificates=self.ca, private_key=self.key,
                                            certificate_chain=self.cert)

    def __repr__(self) -> str:
        return "Identity(role=%r, ca=%r, cert=%r)" % (self.role, self.paths[0], self.paths[1])


def paths(tls: Tls, role: str):
    """(ca, cert, key) file paths of `role` under this config, with the config key each came from."""
    base = os.path.expanduser(tls.dir) if tls.dir else ""
    ca = (tls.ca, "tls.ca") if tls.ca else (os.path.join(base, "ca.crt"), "tls.dir")
    cert = (tls.cert, "tls.cert") if tls.cert else (os.path.join(base, role + ".crt"), "tls.dir")
    key = (tls.key, "tls.key") if tls.key else (os.path.join(base, role + ".key"), "tls.dir")
    return ca, cert, key


def _read(path: str, key: str, what: str) -> bytes:
    try:
        with open(os.path.expanduser(path), "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ConfigError("config key '%s': cannot read the %s %s: %s" % (key, what, path, exc.strerror)) from None
    if b"-----BEGIN" not in data:
        raise ConfigError("config key '%s': %s %s is not PEM" % (key, what, path))
    return data


def load(tls: Tls, role: str) -> Optional[Identity]:
    """The role's identity, or None when TLS is disabled; ConfigError naming the key if a file is missing."""
    if not tls.enabled:
        return None
    if not tls.dir and not (tls.ca and tls.cert and tls.key):
        raise ConfigError("config key 'tls' is enabled but names neither 'tls.dir' nor all of 'tls.ca', "
                          "'tls.cert', 'tls.key'")
    (ca, ca_key), (cert, cert_key), (key, key_key) = paths(tls, role)
    return Identity(role, _read(ca, ca_key, "CA certificate"), _read(cert, cert_key, "certificate of " + role),
                    _read(key, key_key, "private key of " + role), (ca, cert, key))


def setup(cfg, role: str) -> Optional[Identity]:
    """Load the role's identity from `cfg.tls` and make every channel/server of this process use it."""
    ident = load(cfg.tls, role)
    net.use_tls(ident)
    return ident


def check_config(tls: Tls) -> None:
    """The `tls` section of a typed config: enabled names a folder or all three files. ConfigError naming the key."""
    if tls.enabled and not tls.dir and not (tls.ca and tls.cert and tls.key):
        raise ConfigError("config key 'tls' is enabled but names neither 'tls.dir' nor all of 'tls.ca', "
                          "'tls.cert', 'tls.key'")
