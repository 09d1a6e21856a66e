"""The rules of the config keys that no part of the core owns: the cluster's addresses, the run's size (frames,
frame_size, in flight, group size), the links and CPU caps, the delta thresholds, limits, reliability, the trainer's
counts and what `cnnvideo local` emulates (check_config). Each camera's own values are config_cameras'; every other
key is checked by the part that reads it (model, plan, video, events, results, rpc: their `check_config`), and
config_validation runs them all. Imports only the dataclasses, the `cpus` spellings and errors: the bottom of the core.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import re
from typing import Dict, Tuple

from cnnvideo.config_types import CPUS_ROLES, MODES, Config
from cnnvideo.config_upgrade import cpus_role_name
from cnnvideo.errors import ConfigError

# the logger config's warnings always used (log lines read `cnnvideo.config: ...`)
log = logging.getLogger("cnnvideo.config")

JOIN_TOKEN_ENV = "CNNVIDEO_JOIN_TOKEN"


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_host_port(address: str) -> bool:
    """Whether `address` is host:port with a host and a TCP port (1-65535): the form of every address of the cluster."""
    host, _, port = address.rpartition(":")
    return bool(host) and "," not in host and port.isdigit() and 0 < int(port) < 65536


def join_token(cfg: Config) -> str:
    """The token a joining worker presents and the master checks: `cluster.join_token`, else $CNNVIDEO_JOIN_TOKEN."""
    return cfg.cluster.join_token or os.environ.get(JOIN_TOKEN_ENV, "")


def check_cluster(cfg: Config) -> None:
    if not cfg.cluster.workers and not cfg.cluster.join:
        raise ConfigError("config key 'cluster.workers' must list at least one worker address (or set cluster.join: "
                          "the pool is then the workers that join)")
    if cfg.cluster.min_workers < 1:
        raise ConfigError("config key 'cluster.min_workers' must be >= 1, got %r" % cfg.cluster.min_workers)
    for i, addr in enumerate(cfg.cluster.workers + [cfg.cluster.trainer]):
        if not is_host_port(addr):
            key = "cluster.trainer" if i == len(cfg.cluster.workers) else "cluster.workers[%d]" % i
            raise ConfigError("config key '%s' must be host:port, got %r" % (key, addr))
    if cfg.cluster.join:
        if not is_host_port(cfg.cluster.join):
            raise ConfigError("config key 'cluster.join' must be host:port (or empty: no joins), got %r"
                              % cfg.cluster.join)
        token = join_token(cfg)
        if token and len(token) < 16:
            raise ConfigError("config key 'cluster.join_token' must be at least 16 characters (e.g. `openssl rand "
                              "-hex 16`)")
        if not token and not cfg.tls.enabled and not is_loopback(cfg.cluster.join.rpartition(":")[0]):
            raise ConfigError("config key 'cluster.join_token' (or environment variable %s) is required when "
                              "cluster.join is %r (not loopback) and tls is off: anyone could join the pool"
                              % (JOIN_TOKEN_ENV, cfg.cluster.join))


def check_config(cfg: Config) -> None:
    """The keys no part owns (check_cluster is run first, on its own, by config_validation); `cpus` role names made
    canonical (old spellings renamed with a warning). ConfigError naming the key."""
    if any(v <= 0 for v in cfg.frame_size):
        raise ConfigError("config key 'frame_size' must be two positive integers, got %r" % (cfg.frame_size,))
    choice(cfg.mode, MODES, "mode")
    if cfg.frames < 0:
        raise ConfigError("config key 'frames' must be >= 0 (0 = until a signal), got %r" % cfg.frames)
    if not 0 < cfg.check_share <= 1:
        raise ConfigError("config key 'check_share' must be in (0, 1], got %r" % cfg.check_share)
    choice(cfg.local.links, ("auto", "tc", "paced", "none"), "local.links")
    choice(cfg.local.cpus, ("auto", "cgroup", "best-effort", "none"), "local.cpus")
    positive(cfg.group_size, "group_size")
    positive(cfg.trainer.frames, "trainer.frames")
    positive(cfg.profile_iters, "profile_iters")
    if cfg.in_flight < 0:
        raise ConfigError("config key 'in_flight' must be >= 0 (0 = unlimited), got %r" % cfg.in_flight)
    listed = (1, cfg.n_workers) if cfg.n_workers else range(1, len(cfg.bandwidth) + 1)  # joins: its last is extended
    if len(cfg.bandwidth) not in listed or any(b <= 0 for b in cfg.bandwidth):
        raise ConfigError("config key 'bandwidth' must list 1 or %d positive MB/s values (one per hop), got %r"
                          % (cfg.n_workers, cfg.bandwidth))
    if not 0 <= cfg.delta.input_threshold <= 255:
        raise ConfigError("config key 'delta.input_threshold' must be 0..255, got %r" % cfg.delta.input_threshold)
    if cfg.delta.threshold < 0:
        raise ConfigError("config key 'delta.threshold' must be >= 0, got %r" % cfg.delta.threshold)
    if not 0 < cfg.trainer.fit_fraction <= 1:
        raise ConfigError("config key 'trainer.fit_fraction' must be in (0, 1], got %r" % cfg.trainer.fit_fraction)
    if cfg.limits.max_message_mib <= 0:
        raise ConfigError("config key 'limits.max_message_mib' must be > 0, got %r" % cfg.limits.max_message_mib)
    if cfg.reliability.max_restarts < 0 or cfg.reliability.retries < 0:
        key = "max_restarts" if cfg.reliability.max_restarts < 0 else "retries"
        raise ConfigError("config key 'reliability.%s' must be >= 0" % key)
    if cfg.reliability.peer_wait_s <= 0:
        raise ConfigError("config key 'reliability.peer_wait_s' must be > 0, got %r" % cfg.reliability.peer_wait_s)
    cfg.cpus = canonical_cpus(cfg.cpus, cfg.n_workers)
    for role, share in cfg.cpus.items():
        if share <= 0:
            raise ConfigError("config key 'cpus.%s' must be > 0, got %r" % (role, share))


def canonical_cpus(cpus: Dict[str, float], n_workers: int) -> Dict[str, float]:
    """`cpus` with canonical role names (master, trainer, worker<i>, workers); old spellings (w<i>, worker:
    config_upgrade.cpus_role_name) are renamed with a warning; an unknown role, a worker index outside the pool
    or one role named twice is an error naming the key."""
    out: Dict[str, float] = {}
    for key, share in cpus.items():
        new = cpus_role_name(key)
        m = re.match(r"^worker(\d+)$", new)
        if m and int(m.group(1)) >= n_workers:
            raise ConfigError("config key 'cpus.%s': no such worker (the chain has %d: worker0..worker%d)"
                              % (key, n_workers, n_workers - 1))
        if not m and new not in CPUS_ROLES:
            raise ConfigError("config key 'cpus.%s' is not a role (known: master, trainer, worker0..worker%d, "
                              "workers = every worker without its own key)" % (key, n_workers - 1))
        if new in out:
            raise ConfigError("config key 'cpus.%s' names the same role as 'cpus.%s'" % (key, new))
        if new != key:
            log.warning("config key 'cpus.%s' is an old spelling: use 'cpus.%s'", key, new)
        out[new] = share
    return out


def choice(value: str, allowed: Tuple[str, ...], key: str) -> None:
    if value not in allowed:
        raise ConfigError("config key '%s' must be one of %s, got %r" % (key, "|".join(allowed), value))


def positive(value: int, key: str) -> None:
    if value <= 0:
        raise ConfigError("config key '%s' must be positive, got %r" % (key, value))
