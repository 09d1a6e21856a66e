"""Which tracker a config asks for: `events.tracker.kind` names the class (its own module, so that the trackers
import their shared base without a cycle)."""
from __future__ import annotations

from typing import Optional, Tuple

from .kalman import KalmanTracker
from .tracker import BoxTracker, IouTracker, TrackerSettings


def make_tracker(settings: Optional[TrackerSettings] = None,
                 frame_size: Optional[Tuple[int, int]] = None) -> BoxTracker:
    """The tracker `settings.kind` names: `kalman` (the default) or `iou` (the light one); `frame_size` (height,
    width), when known, lets the Kalman tracker stop coasting a person who walks out of the frame."""
    settings = settings or TrackerSettings()
    if settings.kind == "iou":
        return IouTracker(settings)
    return KalmanTracker(settings, frame_size=frame_size)
