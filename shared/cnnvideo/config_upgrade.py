"""Old config key names and their upgrade to the current ones.

RENAMED (old dotted key -> new dotted key) is applied by `upgrade` to the raw mapping before it is built, so a file
with an old key loads as if it named the new one; CPUS_OLD and `cpus_role_name` give the canonical spelling of a
`cpus` role name, which config_validation applies once it knows the number of workers. Each rename logs a warning
naming the new key. Renaming is this module's one job: refusing bad values is config_validation'; the one error here
is an old and its new key set at once, which only the renaming sees. It imports only cnnvideo.errors, so config
and config_validation both import it without a cycle.
"""
from __future__ import annotations

import copy
import logging
import re
from typing import Any, Dict

from cnnvideo.errors import ConfigError

# the logger config's warnings always used (log lines read `cnnvideo.config: ...`): the module split changed no output
log = logging.getLogger("cnnvideo.config")

# Renamed keys: old dotted key -> new dotted key. A file with the old key loads as if it named the new one, and a
# warning names the new key; both at once is an error. (Units: MB = 10^6 bytes, MiB = 2^20 bytes.)
RENAMED = {
    "limits.max_message_mb": "limits.max_message_mib",  # it always was MiB
    "source.reconnect_s": "source.reopen_s",  # how long a dropped stream is reopened
    "reliability.reconnect_s": "reliability.peer_wait_s",  # how long a role waits for a restarting peer
    "net_cpu_ns_per_byte": "cost_model.net_cpu_ns_per_byte",
    "net_cpu_us_per_message": "cost_model.net_cpu_us_per_message",
    "master_turnaround_s": "cost_model.master_turnaround_s",
}
# Old spellings of `cpus` role names (config_types.CPUS_ROLES): old -> canonical.
CPUS_OLD = {"worker": "workers"}  # plus w<i> -> worker<i>


def cpus_role_name(key: str) -> str:
    """The canonical spelling of a `cpus` key: w<i> -> worker<i>, CPUS_OLD renamed, any other key as it is (whether
    it names a role is config_validation' question)."""
    m = re.match(r"^w(\d+)$", key)
    return "worker%d" % int(m.group(1)) if m else CPUS_OLD.get(key, key)


def upgrade(data: Dict[str, Any]) -> Dict[str, Any]:
    """A copy of a config mapping with renamed keys (RENAMED) under their new names, a warning naming the new key
    for each old one found; an old and a new key set at once is an error."""
    data = copy.deepcopy(data)
    for old, new in RENAMED.items():
        *old_parents, old_leaf = old.split(".")
        parent = data
        for part in old_parents:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if not isinstance(parent, dict) or old_leaf not in parent:
            continue
        *new_parents, new_leaf = new.split(".")
        target = data
        for part in new_parents:
            if not isinstance(target.get(part, {}), dict):
                break  # a section that is not a mapping: config._build names it
            target = target.setdefault(part, {})
        else:
            if new_leaf in target:
                raise ConfigError("config keys '%s' and '%s' are both set: '%s' is the old name of '%s', keep only "
                                  "'%s'" % (old, new, old, new, new))
            target[new_leaf] = parent.pop(old_leaf)
            log.warning("config key '%s' is renamed: use '%s' (same value and unit)", old, new)
    return data
