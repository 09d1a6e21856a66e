"""Turn worker costs, predictors and bandwidths into CostInputs (the per-frame plans: cnnvideo.schedulers.create)."""
from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Sequence

import numpy as np

from cnnvideo import costmodel, schedulers
from cnnvideo.costmodel import CostInputs

log = logging.getLogger(__name__)


def cpu_model(costs: Sequence[Any], in_flight: int, net_ns_per_byte: float) -> Dict[str, Any]:
    """How the workers' CPU caps shape their stages, from their Costs answers: with one frame in flight a
    worker starts every stage idle, so a capped one runs it as a CFS burst (`burst`) and its network CPU is
    spent while it waits for the transfer (no charge); with more, its network CPU competes with its compute
    (`net_s_per_byte` = ns/byte x its wall/CPU ratio) and it rarely idles (the fluid time)."""
    if in_flight == 1:
        return {"burst": np.array([[c.cfs_quota_s, c.cfs_period_s] for c in costs], dtype=np.float64)}
    ratio = np.array([c.wall_per_cpu if c.wall_per_cpu > 0 else 1.0 for c in costs], dtype=np.float64)
    return {"net_s_per_byte": ratio * net_ns_per_byte * 1e-9}


def cost_inputs(seg_time: np.ndarray, bandwidth: Sequence[float], dense: np.ndarray, predictors=None,
                input_nz: Optional[np.ndarray] = None, encode_time: Optional[np.ndarray] = None,
                decode_time: Optional[np.ndarray] = None, net_s_per_byte: Optional[Sequence[float]] = None,
                delta_mode: bool = True, burst: Optional[np.ndarray] = None) -> CostInputs:
    """CostInputs from [W, K] segment times, bytes/s per hop, dense bytes per cut, (optional) predictors,
    (optional) [W, K+1] codec seconds per cut and (optional) [W] seconds of worker time per byte it receives or
    sends, charged to its work stage with the hop's predicted bytes (the CPU the network path takes from it)."""
    dense = np.asarray(dense, dtype=np.float64)
    if predictors is not None and predictors.n_cuts == dense.size:
        full = np.asarray(predictors.full_bytes(), dtype=np.float64)
        if input_nz is not None:
            delta = np.asarray(predictors.predict_bytes(np.asarray(input_nz, dtype=np.float64)), dtype=np.float64)
        else:
            delta = full
    else:
        if predictors is not None:
            log.warning("predictors cover %d cuts, the model has %d: using dense sizes", predictors.n_cuts, dense.size)
        full = delta = dense
    inputs = CostInputs(bytes_full=full, bytes_delta=delta, seg_time=np.asarray(seg_time, dtype=np.float64),
                        bandwidth=np.asarray(bandwidth, dtype=np.float64), result_bytes=float(dense[-1]),
                        encode_time=encode_time, decode_time=decode_time, burst=burst)
    if net_s_per_byte is not None:
        inputs = costmodel.with_network_cpu(inputs, net_s_per_byte, delta_mode)
    return inputs


def check_options(name: str, options: Dict[str, Any]) -> None:
    """ConfigError naming 'scheduler_options.X' if the scheduler does not take option X."""
    import inspect

    from cnnvideo.config import ConfigError

    fn = schedulers.das_decide if name == "das" else schedulers.SCHEDULERS.get(name)
    if fn is None:
        return
    params = inspect.signature(fn).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()) and name != "das":
        known = [k for k, p in params.items() if p.kind == p.KEYWORD_ONLY or p.default is not p.empty]
    else:
        known = [k for k, p in params.items() if p.default is not p.empty]
    fixed = ("in_flight", "delta", "frame_bytes", "prev", "ready", "finished", "now")
    for key in options:
        if key not in known or key in fixed:
            allowed = ", ".join(k for k in known if k not in fixed) or "none"
            raise ConfigError("config key 'scheduler_options.%s' is not an option of scheduler %s (options: %s)"
                              % (key, name, allowed))
