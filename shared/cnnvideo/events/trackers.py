"""Which tracker a config asks for: `events.tracker.kind` names the class (its own module, so that the trackers
import their shared base without a cycle)."""
from __future__ import annotations

from typing import Optional

from .kalman import KalmanTracker
from .tracker import BoxTracker, IouTracker, TrackerSettings


def make_tracker(settings: Optional[TrackerSettings] = None) -> BoxTracker:
    """The tracker `settings.kind` names: `kalman` (the default) or `iou` (the light one)."""
    settings = settings or TrackerSettings()
    if settings.kind == "iou":
        return IouTracker(settings)
    return KalmanTracker(settings)
