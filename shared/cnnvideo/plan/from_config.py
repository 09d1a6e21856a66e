"""The plan part's keys of the typed config: `scheduler`, `scheduler_options` (scheduler fixed's pool plan:
`cuts` and `groups`) and `cost_model` (check_config; config_validation runs it with the other parts' checks)."""
from __future__ import annotations

import dataclasses

from cnnvideo.config_types import Config, CostModel
from cnnvideo.errors import ConfigError
from cnnvideo.plan.schedulers import registry


def _is_index(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_fixed_groups(cfg: Config) -> None:
    """ConfigError naming the key when scheduler fixed's pool plan (`cuts` and `groups`) does not fit the cluster:
    a worker named twice or not in it, a stage with no worker, cuts that are not one per stage boundary."""
    groups, cuts = cfg.scheduler_options.get("groups"), cfg.scheduler_options.get("cuts")
    if (not isinstance(groups, (list, tuple)) or not groups
            or not all(isinstance(g, (list, tuple)) for g in groups)
            or not all(_is_index(w) for g in groups for w in g)):
        raise ConfigError("config key 'scheduler_options.groups' must list the workers of each stage, e.g. "
                          "[[0, 1], [2]], got %r" % (groups,))
    named = [w for g in groups for w in g]
    for s, g in enumerate(groups):
        if not g:
            raise ConfigError("config key 'scheduler_options.groups' leaves stage %d with no worker" % s)
    bad = [w for w in named if not 0 <= w < cfg.n_workers]
    if bad:
        raise ConfigError("config key 'scheduler_options.groups' names worker %d, not one of the %d workers"
                          % (bad[0], cfg.n_workers))
    twice = [w for w in named if named.count(w) > 1]
    if twice:
        raise ConfigError("config key 'scheduler_options.groups' names worker %d twice" % twice[0])
    if cuts is None and len(groups) == 1:
        return
    if (not isinstance(cuts, (list, tuple)) or len(cuts) != len(groups) + 1
            or not all(_is_index(c) and c >= 0 for c in cuts) or cuts[0] != 0
            or any(b <= a for a, b in zip(cuts, cuts[1:]))):
        raise ConfigError("config key 'scheduler_options.cuts' must list %d increasing cut indices from 0 to the "
                          "model's last cut (one more than the stages in groups), got %r" % (len(groups) + 1, cuts))


def check_config(cfg: Config) -> None:
    """The scheduler, its options (each one it takes), fixed's cuts (and groups), the cost model's constants."""
    if cfg.scheduler not in registry.SCHEDULERS:
        raise ConfigError("config key 'scheduler' must be one of %s, got %r"
                          % ("|".join(registry.SCHEDULERS), cfg.scheduler))
    for key in cfg.scheduler_options:
        try:
            registry.check_options(cfg.scheduler, {key: None})
        except ValueError:
            raise ConfigError("config key 'scheduler_options.%s' is not an option of scheduler %s (options: %s)"
                              % (key, cfg.scheduler, ", ".join(registry.OPTIONS[cfg.scheduler]) or "none")) from None
    if cfg.scheduler == "fixed" and "groups" in cfg.scheduler_options:
        check_fixed_groups(cfg)
    elif cfg.scheduler == "fixed":
        cuts = cfg.scheduler_options.get("cuts")
        if (not isinstance(cuts, (list, tuple)) or len(cuts) != cfg.n_workers + 1
                or not all(_is_index(c) and c >= 0 for c in cuts) or cuts[0] != 0
                or any(b < a for a, b in zip(cuts, cuts[1:]))):
            raise ConfigError("config key 'scheduler_options.cuts' must list %d non-decreasing cut indices from 0 to "
                              "the model's last cut for scheduler fixed (one more than the workers), got %r"
                              % (cfg.n_workers + 1, cuts))
    for f in dataclasses.fields(CostModel):
        value = getattr(cfg.cost_model, f.name)
        if not value >= 0:
            raise ConfigError("config key 'cost_model.%s' must be >= 0, got %r" % (f.name, value))
