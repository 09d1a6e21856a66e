"""The one builder of the cost model's inputs, used by the master (from its workers' Costs answers) and by
`cnnvideo plan` (from a local profile scaled by each worker's CPU share)."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from cnnvideo.config_types import CostModel
from cnnvideo.cpucap import CFS_PERIOD_S
from cnnvideo.plan.costmodel import STRIDE_EXPONENT, CostInputs, cfs_capped, with_network_cpu

log = logging.getLogger(__name__)

# Payload bytes per byte a shaped link carries: a rate limit (tc htb, a Wi-Fi link) counts whole frames, and at a
# 1500-byte MTU a TCP segment carries 1448 payload bytes (20 IP + 20 TCP + 12 timestamp option) in a 1514-byte
# Ethernet frame (htb counts the 14-byte header too; the netem helper turns GSO off so every frame is one MSS).
# Measured: 1-in-flight transfers of 1 MB at 3 MB/s took 0.356-0.362 s against 0.338 s of payload / rate.
TCP_PAYLOAD_SHARE = 1448.0 / 1514.0


@dataclass
class WorkerCpu:
    """How a worker's CPU is capped: what a Costs answer says (SegmentCosts has the same fields)."""

    wall_per_cpu: float = 1.0  # wall/CPU ratio its CPU-clock timings were scaled by (~1/cap)
    cfs_quota_s: float = 0.0  # CFS quota per period (0 = uncapped)
    cfs_period_s: float = CFS_PERIOD_S


def share_cpu(share: float, wall_per_cpu: float = 1.0) -> WorkerCpu:
    """A worker given `share` of one core (`cpus:` in the config), profiled locally at `wall_per_cpu`."""
    share = min(float(share), 1.0)
    return WorkerCpu(wall_per_cpu / share, share * CFS_PERIOD_S if share < 1 else 0.0, CFS_PERIOD_S)


def payload_share(links: str) -> float:
    """Share of a link's configured rate that carries payload: 1 when senders pace their own payload bytes
    (`local.links: paced`), else TCP_PAYLOAD_SHARE (tc or a real link shapes frames on the wire)."""
    return 1.0 if links == "paced" else TCP_PAYLOAD_SHARE


def cpu_model(cpus: Sequence[Any], in_flight: int, net_ns_per_byte: float,
              net_us_per_message: Any = None) -> Dict[str, Any]:
    """How the workers' CPU caps shape their stages (WorkerCpu-like objects, one per worker): with one frame in
    flight a worker starts every stage idle, so a capped one runs it as a CFS burst (`burst`) and its per-byte
    network CPU is spent while it waits for the transfer (no charge); with more, its network CPU competes with its
    compute (`net_s_per_byte` = ns/byte x its wall/CPU ratio) and it rarely idles (the fluid time).
    Either way each message it handles costs `net_s_per_message` fluid seconds (net_us_per_message: a number or
    one per worker (cnnvideo.plan.overhead measures them), None = the config default, as CPU / share): with one in
    flight inside the burst, whose CPU it adds to (x period/quota: the Process call in comes just before the
    compute, the call out and the stage report just after), with more x the wall/CPU ratio, like the per-byte
    charge."""
    if net_us_per_message is None:
        net_us_per_message = CostModel.net_cpu_us_per_message
    net_us_per_message = np.asarray(net_us_per_message, dtype=np.float64)
    ratio = np.array([c.wall_per_cpu if c.wall_per_cpu > 0 else 1.0 for c in cpus], dtype=np.float64)
    if in_flight == 1:
        burst = np.array([[c.cfs_quota_s, c.cfs_period_s] for c in cpus], dtype=np.float64).reshape(-1, 2)
        return {"burst": burst, "net_s_per_message": fluid_per_cpu(burst, ratio) * net_us_per_message * 1e-6}
    return {"net_s_per_byte": ratio * net_ns_per_byte * 1e-9, "net_s_per_message": ratio * net_us_per_message * 1e-6}


def fluid_per_cpu(burst: np.ndarray, ratio: np.ndarray) -> np.ndarray:
    """[W] fluid seconds per CPU second inside a CFS burst: period/quota for a capped worker (burst_wall turns
    fluid back into CPU with quota/period, so this adds exactly the CPU), its wall/CPU ratio otherwise."""
    quota, period = burst[:, 0], burst[:, 1]
    capped = cfs_capped(quota, period)
    return np.where(capped, period / np.where(capped, quota, 1.0), ratio)


# The input hop's delta bytes against the stride a replica sees (docs/results/pool, vtest at 480x720, input threshold
# 4): 60.6, 84, 102 and 120 kB a frame at strides 1-4, i.e. 1, 1.39, 1.68 and 1.98x: stride ** 0.5 (1, 1.41, 1.73,
# 2.0); lossless it grows as stride ** (1/3) (cnnvideo.plan.costmodel.STRIDE_EXPONENT). Below the threshold a pixel's
# change is not sent, and over a longer stride more of them pass it.
THRESHOLD_STRIDE_EXPONENT = 0.5


def alike_key(device: str, quota_s: float, period_s: float) -> Optional[tuple]:
    """What makes two workers alike for the cost model: the same device tag (profiling.device_tag) and CPU cap;
    None (alike to no other) when the device is unknown."""
    return (device, round(float(quota_s), 6), round(float(period_s), 6)) if device else None


def pool_alike(seg_time: np.ndarray, keys: Sequence[Optional[tuple]]) -> Tuple[np.ndarray, List[List[int]]]:
    """([W, K] segment times where every group of alike workers (equal key, not None) has each segment's median over
    the group, the groups of two or more pooled). Alike workers compute alike; what differs in their profiles is
    when each was measured (at once, beside each other, on a shared host), so one profile for all of them keeps the
    planner from a plan built on that noise; unlike workers keep their own."""
    seg_time = np.asarray(seg_time, dtype=np.float64)
    out = seg_time.copy()
    groups: Dict[tuple, List[int]] = {}
    for w, key in enumerate(keys):
        if key is not None:
            groups.setdefault(key, []).append(w)
    pooled = [ws for ws in groups.values() if len(ws) > 1]
    for ws in pooled:
        out[ws] = np.median(seg_time[ws], axis=0)
    return out, pooled


GONE_S = 1000.0  # a segment on a worker that left the pool, for the planner (with GONE_BPS)
GONE_BPS = 1.0  # bytes a second into a worker that left the pool, for the planner


def without_workers(seg_time: np.ndarray, bandwidth: Sequence[float],
                    gone: Sequence[int]) -> Tuple[np.ndarray, List[float]]:
    """(segment times, bandwidths) with the workers `gone` (they left the pool) priced out: GONE_S a segment and
    GONE_BPS into them, so no pool plan leans on one (a stage it still sits in keeps other replicas, and a worker
    alone in a stage costs more than any plan without it). The ids stay: plans keep naming workers by id."""
    seg_time = np.array(seg_time, dtype=np.float64)
    bandwidth = [float(b) for b in bandwidth]
    for w in gone:
        seg_time[w] = GONE_S
        bandwidth[w] = GONE_BPS
    return seg_time, bandwidth


def input_stride_exponent(cfg) -> float:
    """CostInputs.input_stride_exponent of a config: faster growth with an input threshold than lossless."""
    return THRESHOLD_STRIDE_EXPONENT if cfg.delta.input_threshold > 0 else STRIDE_EXPONENT


def master_time(cfg) -> float:
    """The master's seconds a frame for the cost model: cost_model.master_ns_per_pixel x the frame's pixels."""
    h, w = cfg.frame_size
    return float(cfg.cost_model.master_ns_per_pixel) * 1e-9 * float(h) * float(w)


def build(seg_time: np.ndarray, bandwidth: Sequence[float], dense: np.ndarray, predictors=None,
          input_nz: Optional[np.ndarray] = None, encode_time: Optional[np.ndarray] = None,
          decode_time: Optional[np.ndarray] = None, net_s_per_byte: Optional[Sequence[float]] = None,
          delta_mode: bool = True, burst: Optional[np.ndarray] = None, share: float = 1.0,
          turnaround: float = 0.0, net_s_per_message: Optional[Sequence[float]] = None,
          p_unchanged: Optional[float] = None, master_time: float = 0.0,
          input_stride_exponent: float = STRIDE_EXPONENT) -> CostInputs:
    """CostInputs from [W, K] segment times, bytes/s per hop, dense bytes per cut, (optional) predictors and the
    input change rates to predict with, (optional) [W, K+1] codec seconds per cut and (optional) [W] seconds of
    worker time per byte it receives or sends, charged to its work stage with the hop's predicted bytes (the CPU
    the network path takes from it), or [W, 2] CFS bursts, and (optional) [W] fluid seconds per message it handles
    (see cpu_model); `share` of each hop's rate carries payload (payload_share); `turnaround` is the master's
    seconds from a result to the next send; `p_unchanged` is the share of frames whose input is unchanged (their
    stages skip the compute; None: in delta mode the predictors' measure on the trainer's video, else 0);
    `master_time` is the master's own seconds a frame (a stage no plan runs faster than); `input_stride_exponent`
    how the input hop's bytes grow with a replica's stride (input_stride_exponent(cfg))."""
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
                        bandwidth=np.asarray(bandwidth, dtype=np.float64) * float(share), result_bytes=float(dense[-1]),
                        encode_time=encode_time, decode_time=decode_time, burst=burst, turnaround=float(turnaround),
                        message_time=net_s_per_message, master_time=float(master_time),
                        input_stride_exponent=float(input_stride_exponent),
                        p_unchanged=float(p_unchanged if p_unchanged is not None else
                                          getattr(predictors, "p_unchanged", 0.0) if delta_mode else 0.0))
    if net_s_per_byte is not None:
        inputs = with_network_cpu(inputs, net_s_per_byte, delta_mode)
    return inputs
