"""Short clips of scenes int8 calibration never saw, rendered from still photos (media/photos, Debian's darknet
photos): a fixed camera with slight jitter, sensor noise and something moving across, so consecutive frames differ
as a real camera's do. Deterministic (seeded); frames are (H, W, 3) uint8 RGB.

  beach    kite.jpg, its lower left (people on the sand and in the water, 25-150 px tall at 480x720: small people),
           a red kite crossing the sky part, +-3 px jitter
  walkers  horses.jpg as the background, three people cut from person.jpg scaled to 70-140 px walking across it
  person   person.jpg (one person, a dog and a horse), a slow pan and a bar crossing it
"""
from __future__ import annotations

import os
from typing import Callable, Dict, List, Tuple

import numpy as np

PHOTOS = os.path.join("media", "photos")
SCENES = ("beach", "walkers", "person")


def _photo(name: str, photos: str) -> np.ndarray:
    import cv2

    path = os.path.join(photos, name)
    bgr = cv2.imread(path)
    if bgr is None:
        raise FileNotFoundError("photo not found or unreadable: %s (scripts/fetch_photos.sh puts darknet's "
                                "photos in media/photos)" % path)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def _fit(img: np.ndarray, width: int, height: int) -> np.ndarray:
    import cv2

    return cv2.resize(img, (width, height), interpolation=cv2.INTER_AREA)


def _noise(frame: np.ndarray, rng: np.random.RandomState, sigma: float = 2.0) -> np.ndarray:
    noisy = frame.astype(np.int16) + np.rint(rng.normal(0.0, sigma, frame.shape)).astype(np.int16)
    return np.clip(noisy, 0, 255).astype(np.uint8)


def _jittered(big: np.ndarray, i: int, rng: np.random.RandomState, h: int, w: int, margin: int) -> np.ndarray:
    dx = margin + int(round(3 * np.sin(i / 5.0)))
    dy = margin + int(rng.randint(-2, 3))
    return big[dy:dy + h, dx:dx + w].copy()


def beach(n: int, frame_size: Tuple[int, int], photos: str = PHOTOS, seed: int = 1) -> List[np.ndarray]:
    import cv2

    h, w = frame_size
    img = _photo("kite.jpg", photos)
    crop = img[380:380 + 520, 0:780]  # the sand and the surf: people from 25 to 150 px tall at 480x720
    m = 8
    big = _fit(crop, w + 2 * m, h + 2 * m)
    rng = np.random.RandomState(seed)
    out = []
    for i in range(n):
        f = _jittered(big, i, rng, h, w, m)
        x = int(i * (w + 60) / max(n, 1)) - 60
        y = 20 + int(10 * np.sin(i / 3.0))
        pts = np.array([[x, y + 20], [x + 30, y], [x + 60, y + 20], [x + 30, y + 30]], dtype=np.int32)
        cv2.fillPoly(f, [pts], (220, 30, 30))
        out.append(_noise(f, rng))
    return out


def _person_sprite(photos: str) -> np.ndarray:
    img = _photo("person.jpg", photos)
    return img[90:390, 180:290]  # the standing person (fp32 finds them at 0.99), with a little background


def walkers(n: int, frame_size: Tuple[int, int], photos: str = PHOTOS, seed: int = 2) -> List[np.ndarray]:
    h, w = frame_size
    m = 8
    big = _fit(_photo("horses.jpg", photos), w + 2 * m, h + 2 * m)
    sprite = _person_sprite(photos)
    rng = np.random.RandomState(seed)
    people = [(70, 330, 1.0), (100, 250, -1.0), (140, 300, 0.6)]  # height px, foot row, speed (frame widths / clip)
    out = []
    for i in range(n):
        f = _jittered(big, i, rng, h, w, m)
        for k, (ph, foot, speed) in enumerate(people):
            pw = max(1, int(round(sprite.shape[1] * ph / sprite.shape[0])))
            s = _fit(sprite, pw, ph)
            t = (i / max(n, 1)) * speed + k * 0.3
            x = int((t % 1.0) * (w - pw))
            y = min(max(foot - ph, 0), h - ph)
            f[y:y + ph, x:x + pw] = s
        out.append(_noise(f, rng))
    return out


def person(n: int, frame_size: Tuple[int, int], photos: str = PHOTOS, seed: int = 3) -> List[np.ndarray]:
    import cv2

    h, w = frame_size
    m = 24
    big = _fit(_photo("person.jpg", photos), w + 2 * m, h + 2 * m)
    rng = np.random.RandomState(seed)
    out = []
    for i in range(n):
        dx = int(round(2 * m * i / max(n - 1, 1)))  # a slow pan across the margin
        dy = m + int(rng.randint(-2, 3))
        f = big[dy:dy + h, dx:dx + w].copy()
        x = int(i * (w + 40) / max(n, 1)) - 40
        cv2.rectangle(f, (x, h - 70), (x + 40, h - 20), (40, 40, 200), -1)
        out.append(_noise(f, rng))
    return out


RENDER: Dict[str, Callable[..., List[np.ndarray]]] = {"beach": beach, "walkers": walkers, "person": person}


def render(name: str, n: int, frame_size: Tuple[int, int], photos: str = PHOTOS) -> List[np.ndarray]:
    """n frames of scene `name`; ValueError naming the known scenes."""
    if name not in RENDER:
        raise ValueError("unknown scene %r (known: %s)" % (name, ", ".join(SCENES)))
    return RENDER[name](n, tuple(frame_size), photos)


def write_clip(frames: List[np.ndarray], path: str, fps: float = 25.0) -> str:
    """The frames as an MJPG .avi (what a run's `video:` reads back); the path."""
    import cv2

    h, w = frames[0].shape[:2]
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    out = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), fps, (w, h))
    try:
        for f in frames:
            out.write(cv2.cvtColor(f, cv2.COLOR_RGB2BGR))
    finally:
        out.release()
    return path
