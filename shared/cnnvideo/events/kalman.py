"""A tracker that predicts: a constant-velocity Kalman filter per track, on the box centre and size, in capture time.

SORT / ByteTrack's idea with numpy only (every track's filter is one row of a batched array): each frame the
filters are moved on by the capture time since the last processed frame (so frames the drop policy skipped
only widen the prediction), detections are matched by IoU with the predicted boxes (announced tracks first,
then the candidates, so a false box cannot steal a person from a known track), and the matched boxes
correct the filters. A track the detector misses for a frame or two coasts on its prediction (`coast_s`); one
it lost for longer is relinked by Mahalanobis distance, whose gate widens with the time it has been unseen
(up to `max_unseen_s`, 2 s by default), so a person the detector drops for a second keeps their id.

State per track: [cx, cy, w, h, vcx, vcy, vw, vh], pixels and pixels per second. Noise scales with the box
size (a near person moves more pixels than a far one), as in ByteTrack; the constants are per second, not
per frame, so they hold at any frame rate.
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Tuple

import numpy as np

from .tracker import MAX_UNSEEN_S, BoxTracker, TrackerSettings
from .types import Detection

MEAS_POS = 0.05  # measurement noise std of the centre, fraction of the box size
MEAS_SIZE = 0.10  # of width and height (a jittered box's size varies about twice as much as its centre)
PROC_POS = 0.25  # process noise of the centre and size, fraction of the size per sqrt(second)
PROC_VEL = 0.5  # of their velocities, fraction of the size per second per sqrt(second): walkers turn slowly
INIT_VEL = 1.0  # initial velocity std, fraction of the size per second (a walker moves ~1 height a second)
GATE = 18.47  # chi-square, 4 degrees of freedom, 99.9%: a detection this unlikely never continues a track
MIN_SIZE = 1.0  # pixels: a predicted box never shrinks below this


@dataclasses.dataclass(frozen=True)
class KalmanConstants:
    """The filter's noise model and gate (the module constants above are the defaults); `cnnvideo bench track`
    searches them, so a tracker can be built with other values without touching the module."""

    meas_pos: float = MEAS_POS
    meas_size: float = MEAS_SIZE
    proc_pos: float = PROC_POS
    proc_vel: float = PROC_VEL
    init_vel: float = INIT_VEL
    gate: float = GATE


DEFAULT_CONSTANTS = KalmanConstants()


def xyxy_to_z(boxes: np.ndarray) -> np.ndarray:
    """(N, 4) boxes x1,y1,x2,y2 -> (N, 4) measurements cx,cy,w,h."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    return np.stack([(b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2, b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], 1)


def z_to_xyxy(z: np.ndarray) -> np.ndarray:
    """(N, >=4) states or measurements -> (N, 4) boxes x1,y1,x2,y2 (sizes at least MIN_SIZE)."""
    w = np.maximum(z[:, 2], MIN_SIZE)
    h = np.maximum(z[:, 3], MIN_SIZE)
    return np.stack([z[:, 0] - w / 2, z[:, 1] - h / 2, z[:, 0] + w / 2, z[:, 1] + h / 2], 1)


def _scale(x: np.ndarray) -> np.ndarray:
    """(N, 4) size per measured dimension: width for cx and w, height for cy and h."""
    w = np.maximum(x[:, 2], MIN_SIZE)
    h = np.maximum(x[:, 3], MIN_SIZE)
    return np.stack([w, h, w, h], 1)


def _meas_var(sc: np.ndarray, k: KalmanConstants) -> np.ndarray:
    """(N, 4) measurement noise variances for boxes of sizes `sc` (see `_scale`)."""
    return np.concatenate([(k.meas_pos * sc[:, :2]) ** 2, (k.meas_size * sc[:, 2:]) ** 2], 1)


def kf_init(boxes: np.ndarray, k: KalmanConstants = DEFAULT_CONSTANTS) -> Tuple[np.ndarray, np.ndarray]:
    """States (N, 8) at rest on `boxes` and their covariances (N, 8, 8)."""
    z = xyxy_to_z(boxes)
    x = np.concatenate([z, np.zeros_like(z)], 1)
    sc = _scale(z)
    std = np.concatenate([2 * k.meas_pos * sc[:, :2], 2 * k.meas_size * sc[:, 2:], k.init_vel * sc], 1)
    p = np.zeros((len(z), 8, 8))
    idx = np.arange(8)
    p[:, idx, idx] = std ** 2
    return x, p


def kf_predict(x: np.ndarray, p: np.ndarray, dt: float,
               k: KalmanConstants = DEFAULT_CONSTANTS) -> Tuple[np.ndarray, np.ndarray]:
    """Every state moved on by `dt` seconds (constant velocity), covariances widened by the process noise."""
    if len(x) == 0 or dt <= 0:
        return x, p
    f = np.eye(8)
    f[np.arange(4), np.arange(4) + 4] = dt
    x = x @ f.T
    sc = _scale(x)
    q = np.concatenate([(k.proc_pos * sc) ** 2 * dt, (k.proc_vel * sc) ** 2 * dt], 1)
    p = f @ p @ f.T
    idx = np.arange(8)
    p[:, idx, idx] += q
    return x, p


def kf_distance(x: np.ndarray, p: np.ndarray, z: np.ndarray, k: KalmanConstants = DEFAULT_CONSTANTS) -> np.ndarray:
    """Squared Mahalanobis distance of every measurement z (M, 4) from every state's prediction, (N, M)."""
    r = _meas_var(_scale(x), k)
    s = p[:, :4, :4].copy()
    idx = np.arange(4)
    s[:, idx, idx] += r
    y = z[None, :, :] - x[:, None, :4]  # (N, M, 4)
    return np.einsum("nmi,nij,nmj->nm", y, np.linalg.inv(s), y)


def kf_update(x: np.ndarray, p: np.ndarray, z: np.ndarray,
              k: KalmanConstants = DEFAULT_CONSTANTS) -> Tuple[np.ndarray, np.ndarray]:
    """States (M, 8) corrected by measurements z (M, 4) cx,cy,w,h."""
    if len(x) == 0:
        return x, p
    r = _meas_var(_scale(z), k)
    s = p[:, :4, :4].copy()
    idx = np.arange(4)
    s[:, idx, idx] += r
    gain = np.linalg.solve(s, p[:, :4, :]).transpose(0, 2, 1)  # K = P H^T S^-1, S symmetric: (M, 8, 4)
    x = x + np.einsum("mij,mj->mi", gain, z - x[:, :4])
    p = p - gain @ p[:, :4, :]
    return x, p


class KalmanTracker(BoxTracker):
    """Matches detections to each track's Kalman-predicted box: announced tracks first, then candidates."""

    DEFAULT_MAX_UNSEEN_S = MAX_UNSEEN_S["kalman"]
    # A missed frame or two at 25 fps (one at 12.5; at 10 fps only when the gap is at most 0.1 s). Chosen by
    # `cnnvideo bench track` on its tuning side only: of its grid, the constants whose worse tuning-side IDF1
    # (tuned on TUD-Campus, tuned on TUD-Stadtmitte) is highest; coast 0.1 s gave 0.919 / 0.964 against 0.904 /
    # 0.962 for the 0.2 s used before. The filter's constants (iou_threshold 0.3, PROC_VEL 0.5) were already
    # that choice. Held-out figures: docs/results/track/results.md.
    DEFAULT_COAST_S = 0.1

    def __init__(self, settings: Optional[TrackerSettings] = None, constants: Optional[KalmanConstants] = None):
        super().__init__(settings)
        self.constants = constants or DEFAULT_CONSTANTS
        self._x = np.zeros((0, 8))
        self._p = np.zeros((0, 8, 8))

    def _expected(self) -> np.ndarray:
        return z_to_xyxy(self._x)

    def _advance(self, dt: float) -> None:
        self._x, self._p = kf_predict(self._x, self._p, dt, self.constants)

    def _corrected(self, rows: List[int], boxes: np.ndarray) -> None:
        idx = np.asarray(rows, dtype=np.int64)
        self._x[idx], self._p[idx] = kf_update(self._x[idx], self._p[idx], xyxy_to_z(boxes), self.constants)

    def _added(self, boxes: np.ndarray) -> None:
        x, p = kf_init(boxes, self.constants)
        self._x = np.concatenate([self._x, x])
        self._p = np.concatenate([self._p, p])

    def _retain(self, keep: np.ndarray) -> None:
        super()._retain(keep)
        self._x, self._p = self._x[keep], self._p[keep]

    def _gate(self, rows: List[int], boxes: np.ndarray) -> np.ndarray:
        idx = np.asarray(rows, dtype=np.int64)
        return kf_distance(self._x[idx], self._p[idx], xyxy_to_z(boxes), self.constants) <= self.constants.gate

    def _match(self, dets: List[Detection], expected: np.ndarray) -> List[Tuple[int, int]]:
        confirmed = [i for i, t in enumerate(self._tracks) if t.confirmed]
        candidates = [i for i, t in enumerate(self._tracks) if not t.confirmed]
        pairs = self._match_rows(confirmed, dets, list(range(len(dets))), expected)
        pairs += self._relink([r for r in confirmed if r not in {a for a, _ in pairs}], dets,
                              [c for c in range(len(dets)) if c not in {b for _, b in pairs}])
        used = {c for _, c in pairs}
        return pairs + self._match_rows(candidates, dets, [c for c in range(len(dets)) if c not in used], expected)

    def _relink(self, rows: List[int], dets: List[Detection], cols: List[int]) -> List[Tuple[int, int]]:
        """Announced tracks no box overlapped, paired with the boxes left by Mahalanobis distance within GATE:
        the longer a track is unseen, the wider its gate, so a person the detector lost for a second or two
        is picked up where the filter expects them."""
        if not rows or not cols:
            return []
        idx = np.asarray(rows, dtype=np.int64)
        db = np.array([dets[c].box for c in cols], dtype=np.float64)
        d = kf_distance(self._x[idx], self._p[idx], xyxy_to_z(db), self.constants)
        valid = d <= self.constants.gate
        if self.settings.class_aware:
            tl = np.array([self._tracks[r].label for r in rows], dtype=object)
            dl = np.array([dets[c].label for c in cols], dtype=object)
            valid &= tl[:, None] == dl[None, :]
        return [(rows[r], cols[c]) for r, c in self._assign(-d, valid)]
