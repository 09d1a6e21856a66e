"""A tracker that predicts: a constant-velocity Kalman filter per track, on the box centre and size, in capture time.

SORT / ByteTrack's idea with numpy only (every track's filter is one row of a batched array): each frame the
filters are moved on by the capture time since the last processed frame (so frames the drop policy skipped
only widen the prediction), detections are matched by IoU with the predicted boxes inside a Mahalanobis gate
(announced tracks first, then the candidates, so a false box cannot steal a person from a known track), and the
matched boxes correct the filters. A track the detector misses for a frame or two coasts on its prediction
(`coast_s`).

Against false boxes and jitter (issue 46): a candidate must match `min_frames` (2) consecutive processed frames,
it is dropped at its first miss (SORT's tentative tracks), so a one-off false box never starts a track; and the
measurement noise follows the detector: the mean normalised innovation of the announced tracks' matches should be
4 (4 measured values), and when it runs higher the noise grows (up to `r_max` times the constants), so a
jittery detector widens the gate instead of splitting its people into new tracks. A person lost for longer than a
prediction can follow (up to `max_unseen_s`, 2 s by default) keeps their id when they come back: the candidate
they start, once confirmed, takes the id of the lost track whose Mahalanobis gate (wider the longer it is unseen)
holds it. Unlike matching the lost track to any single box in its gate, this needs `min_frames` consistent boxes.
A missed track coasts (up to `coast_s`) only while its prediction is sure enough to land on the person (predicted
centre std at most `coast_sd`, 1/6, of the box size) and, when the frame size is known, not once its predicted box
crosses a frame edge moving out: a person the detector loses there has walked out (issue 46, third pass).

State per track: [cx, cy, w, h, vcx, vcy, vw, vh], pixels and pixels per second. Noise scales with the box
size (a near person moves more pixels than a far one), as in ByteTrack; the constants are per second, not
per frame, so they hold at any frame rate. The height has its own, far smaller, process noise and initial velocity
(`proc_height`, `init_height_vel`, 0.1 against the centre's 0.25 and 1.0; issue 46, fourth pass): a person's height
changes only as their distance from the camera does, so the filter averages it over many boxes and a neighbour of
another height no longer fits the gate, while the width, which swings with every stride, keeps the centre's.
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Set, Tuple

import numpy as np

from .tracker import IOU_THRESHOLD, MAX_UNSEEN_S, MIN_FRAMES, BoxTracker, TrackerSettings
from .types import Detection

MEAS_POS = 0.05  # measurement noise std of the centre, fraction of the box size
MEAS_SIZE = 0.10  # of width and height (a jittered box's size varies about twice as much as its centre)
PROC_POS = 0.25  # process noise of the centre and width, fraction of the size per sqrt(second)
PROC_VEL = 0.25  # of their velocities, fraction of the size per second per sqrt(second): walkers turn slowly
INIT_VEL = 1.0  # initial velocity std of the centre and width, fraction of the size per second (~1 height a second)
# a person's height changes only as their distance does: walking at 1.5 m/s straight at a camera 15 m away changes
# it by 10% a second. So the height's initial velocity std, and the process noise of the height and of its velocity,
# are 0.1 of the height (per second, per sqrt(second)), not the centre's 1.0 and 0.25: the filter then averages a
# person's height over many boxes, and a neighbour of another height (depth) no longer fits. The width keeps the
# centre's: it swings with the stride (TUD-Campus' annotated widths jump by up to 36% from one frame to the next,
# the heights by up to 12%). Derived from that, not searched.
PROC_HEIGHT = 0.1  # process noise of the height and of its velocity, fraction of the height per sqrt(second)
INIT_HEIGHT_VEL = 0.1  # initial std of the height's velocity, fraction of the height per second
GATE = 18.47  # chi-square, 4 degrees of freedom, 99.9%: a detection this unlikely never continues a track
MIN_SIZE = 1.0  # pixels: a predicted box never shrinks below this
TENTATIVE_MISSES = 1  # a candidate missed this many processed frames in a row is dropped
R_MAX = 3.0  # the measurement noise grows at most this much (std) when the detector is noisier than MEAS_*
NIS_DOF = 4.0  # expected squared Mahalanobis distance of a measurement that fits the noise model (cx, cy, w, h)
NIS_MIN = 20  # matches of announced tracks before the measurement noise adapts; then each frame, older ones halved
# a missed track coasts while its predicted centre's std is at most this fraction of the box's width (height): a box
# whose centre is off by a third of its width overlaps the true one at IoU 0.5 ((1 - 1/3) / (1 + 1/3)), so a
# prediction within 2 std of the person still lands on them. Derived from that, not searched.
COAST_SD = 1.0 / 6.0


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
    tentative_misses: int = TENTATIVE_MISSES
    r_max: float = R_MAX
    coast_sd: float = COAST_SD
    proc_height: float = PROC_HEIGHT
    init_height_vel: float = INIT_HEIGHT_VEL

    def scaled(self, r: float) -> "KalmanConstants":
        """These constants with the measurement noise std multiplied by `r`."""
        return dataclasses.replace(self, meas_pos=self.meas_pos * r, meas_size=self.meas_size * r)


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
    std = np.concatenate([2 * k.meas_pos * sc[:, :2], 2 * k.meas_size * sc[:, 2:], k.init_vel * sc[:, :3],
                          k.init_height_vel * sc[:, 3:]], 1)
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
    q = np.concatenate([(k.proc_pos * sc[:, :3]) ** 2, (k.proc_height * sc[:, 3:]) ** 2,
                        (k.proc_vel * sc[:, :3]) ** 2, (k.proc_height * sc[:, 3:]) ** 2], 1) * dt
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


def kf_nis(x: np.ndarray, p: np.ndarray, z: np.ndarray, k: KalmanConstants = DEFAULT_CONSTANTS) -> np.ndarray:
    """Squared Mahalanobis distance of measurement z[i] (M, 4) from state i's prediction, (M,): the normalised
    innovation of each matched pair, chi-square with 4 degrees of freedom when the noise model fits."""
    r = _meas_var(_scale(x), k)
    s = p[:, :4, :4].copy()
    idx = np.arange(4)
    s[:, idx, idx] += r
    y = z - x[:, :4]
    return np.einsum("mi,mi->m", y, np.linalg.solve(s, y[:, :, None])[:, :, 0])


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
    DEFAULT_MIN_FRAMES = MIN_FRAMES["kalman"]
    DEFAULT_IOU_THRESHOLD = IOU_THRESHOLD["kalman"]
    # coast_s: a missed frame or two at 25 fps (one at 12.5; at 10 fps only when the gap is at most 0.1 s). It,
    # min_frames, iou_threshold, PROC_VEL and TENTATIVE_MISSES were chosen by `cnnvideo bench track` on its tuning
    # side only: of its grid, the constants whose worse tuning-side IDF1 (tuned on TUD-Campus, tuned on
    # TUD-Stadtmitte) is highest. Held-out figures: docs/results/track/results.md.
    DEFAULT_COAST_S = 0.1

    def __init__(self, settings: Optional[TrackerSettings] = None, constants: Optional[KalmanConstants] = None,
                 frame_size: Optional[Tuple[int, int]] = None):
        super().__init__(settings)
        self.constants = constants or DEFAULT_CONSTANTS
        self.frame_size = frame_size  # (height, width) when known: a person walking out of it is not coasted
        self._tentative_misses = self.constants.tentative_misses
        self._x = np.zeros((0, 8))
        self._p = np.zeros((0, 8, 8))
        self._r = 1.0  # measurement noise std, times the constants' (see `_adapt`)
        self._nis_sum = 0.0
        self._nis_n = 0.0

    @property
    def noise_scale(self) -> float:
        """How much the measurement noise has grown to fit the detector (1: as the constants say)."""
        return self._r

    def _k(self) -> KalmanConstants:
        return self.constants.scaled(self._r) if self._r != 1.0 else self.constants

    def _expected(self) -> np.ndarray:
        return z_to_xyxy(self._x)

    def _advance(self, dt: float) -> None:
        self._x, self._p = kf_predict(self._x, self._p, dt, self.constants)

    def _corrected(self, rows: List[int], boxes: np.ndarray) -> None:
        idx = np.asarray(rows, dtype=np.int64)
        z = xyxy_to_z(boxes)
        k = self._k()
        confirmed = np.array([self._tracks[r].confirmed for r in rows], dtype=bool)
        nis = kf_nis(self._x[idx[confirmed]], self._p[idx[confirmed]], z[confirmed], k)
        self._x[idx], self._p[idx] = kf_update(self._x[idx], self._p[idx], z, k)
        self._adapt(nis)

    def _adapt(self, nis: np.ndarray) -> None:
        """Fit the measurement noise to the detector: scale its std by sqrt(mean NIS / 4) over the recent matches
        of announced tracks (older ones halved each frame), never below the constants nor above `r_max` times."""
        self._nis_sum += float(nis.sum())
        self._nis_n += len(nis)
        if self._nis_n >= NIS_MIN:
            ratio = np.sqrt(self._nis_sum / self._nis_n / NIS_DOF)
            self._r = float(np.clip(self._r * ratio, 1.0, self.constants.r_max))
            self._nis_sum /= 2.0
            self._nis_n /= 2.0

    def _added(self, boxes: np.ndarray) -> None:
        x, p = kf_init(boxes, self.constants)
        self._x = np.concatenate([self._x, x])
        self._p = np.concatenate([self._p, p])

    def _retain(self, keep: np.ndarray) -> None:
        super()._retain(keep)
        self._x, self._p = self._x[keep], self._p[keep]

    def _gate(self, rows: List[int], boxes: np.ndarray) -> np.ndarray:
        idx = np.asarray(rows, dtype=np.int64)
        k = self._k()
        return kf_distance(self._x[idx], self._p[idx], xyxy_to_z(boxes), k) <= k.gate

    def _match(self, dets: List[Detection], expected: np.ndarray) -> List[Tuple[int, int]]:
        confirmed = [i for i, t in enumerate(self._tracks) if t.confirmed]
        candidates = [i for i, t in enumerate(self._tracks) if not t.confirmed]
        pairs = self._match_rows(confirmed, dets, list(range(len(dets))), expected)
        used = {c for _, c in pairs}
        return pairs + self._match_rows(candidates, dets, [c for c in range(len(dets)) if c not in used], expected)

    def _may_coast(self, rows: List[int]) -> np.ndarray:
        """A missed track coasts while its prediction is sure enough to land on the person (centre std at most
        `coast_sd` of the box size) and, when the frame size is known, unless its predicted box crosses a frame
        edge while moving out of the frame: a person the detector loses there has most likely walked out."""
        idx = np.asarray(rows, dtype=np.int64)
        x, p = self._x[idx], self._p[idx]
        sd = np.sqrt(np.stack([p[:, 0, 0], p[:, 1, 1]], 1))
        sure = np.all(sd <= self.constants.coast_sd * np.maximum(x[:, 2:4], MIN_SIZE), axis=1)
        if self.frame_size is None:
            return sure
        h, w = self.frame_size
        b = z_to_xyxy(x)
        leaving = (((b[:, 0] < 0) & (x[:, 4] < 0)) | ((b[:, 2] > w) & (x[:, 4] > 0))
                   | ((b[:, 1] < 0) & (x[:, 5] < 0)) | ((b[:, 3] > h) & (x[:, 5] > 0)))
        return sure & ~leaving

    def _heir(self, row: int, matched: Set[int]) -> Optional[int]:
        """The lost announced track (unmatched this frame) of the candidate's label whose Mahalanobis gate holds
        the candidate's filtered box, the nearest when several do: a person the detector lost for longer than a
        prediction can follow keeps their id once `min_frames` boxes in a row show them again."""
        cand = self._tracks[row]
        rows = [i for i, t in enumerate(self._tracks) if t.confirmed and i not in matched
                and (not self.settings.class_aware or t.label == cand.label)]
        if not rows:
            return None
        idx = np.asarray(rows, dtype=np.int64)
        k = self._k()
        d = kf_distance(self._x[idx], self._p[idx], self._x[row:row + 1, :4], k)[:, 0]
        best = int(np.argmin(d))
        return rows[best] if d[best] <= k.gate else None
