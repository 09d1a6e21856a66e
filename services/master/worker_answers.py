"""What the master checks and takes from the workers' setup answers: that every worker runs the configured model
at its place in the chain, and the codec times of their profiles."""
from __future__ import annotations

import logging
from typing import List, Optional, Sequence, Tuple

import numpy as np

from cnnvideo.rpc import convert

from .links import MasterError

log = logging.getLogger(__name__)


def check_infos(infos: Sequence, model: str, frame_size: Sequence[int], addresses: List[str]) -> None:
    """MasterError naming the worker whose Info says another place in the chain, model, frame size or cuts."""
    first = infos[0]
    for w, info in enumerate(infos):
        if info.worker_id not in (w, -1):  # -1: one that joined, told its id by StartRun
            raise MasterError("worker at %s says it is w%d, the config puts it at w%d" % (addresses[w],
                                                                                         info.worker_id, w))
        if not fits(info, first, model, frame_size):
            raise MasterError("worker w%d at %s runs %s at %s with %d cuts; the master expects %s at %s"
                              % (w, addresses[w], info.model, list(info.frame_size), len(info.cuts), model,
                                 list(frame_size)))


def fits(info, first, model: str, frame_size: Sequence[int]) -> bool:
    """Whether a worker's Info says the model, frame size and cuts of the pool (`first`: its first worker's)."""
    return (info.model == model and list(info.frame_size) == list(frame_size)
            and [tuple(c.shape) for c in info.cuts] == [tuple(c.shape) for c in first.cuts])


def joiner_problem(info, first, model: str, frame_size: Sequence[int]) -> str:
    """Why a worker that asks to join cannot serve the pool (its model, frame size, cuts or engine), or ""."""
    if not fits(info, first, model, frame_size):
        return ("it runs %s at %s with %d cuts; the pool runs %s at %s with %d"
                % (info.model, "x".join(map(str, info.frame_size)), len(info.cuts), model,
                   "x".join(map(str, frame_size)), len(first.cuts)))
    if info.engine != first.engine:
        return "it runs engine %s; the pool runs %s" % (info.engine, first.engine)
    return ""


def codec_times(costs: Sequence, n_cuts: int) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """([W, K+1] encode, [W, K+1] decode) seconds from the workers' profiles; (None, None) if any worker did not
    send them (the cost model then charges compute only)."""
    enc, dec = [], []
    for c in costs:
        try:
            e, d = convert.from_array(c.encode), convert.from_array(c.decode)
        except ValueError:
            e = d = np.zeros(0)
        if e.shape != (n_cuts,) or d.shape != (n_cuts,) or not (np.all(np.isfinite(e)) and np.all(np.isfinite(d))):
            log.warning("worker %d sent no usable codec profile: the cost model charges compute only", c.worker_id)
            return None, None
        enc.append(e)
        dec.append(d)
    return np.stack(enc), np.stack(dec)
