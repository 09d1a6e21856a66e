"""tc command lines for the netem helper: the project's one rule builder, cnnvideo.tcrules (the helper's image
holds a copy of it next to this module, as netem/tcrules.py)."""
from __future__ import annotations

try:
    from cnnvideo.tcrules import *  # noqa: F401,F403 (installed with the project: local runs, tests)
    from cnnvideo.tcrules import LinkError, Shape  # noqa: F401
except ImportError:  # the netem image: no cnnvideo package, the copy made by the Dockerfile
    from .tcrules import *  # type: ignore  # noqa: F401,F403
    from .tcrules import LinkError, Shape  # type: ignore  # noqa: F401
