"""Docker-level fixtures: skip (with the reason) when no engine answers; images built once per session.

When CI has set the engine up (CNNVIDEO_DOCKER_TESTS=1) a missing engine is a failure, not a skip.
"""
import os

import pytest
from dockerutil import build_image, engine_problem


@pytest.fixture(scope="session")
def engine():
    """Skip the test when no engine answers."""
    problem = engine_problem()
    if problem and os.environ.get("CNNVIDEO_DOCKER_TESTS") == "1":
        pytest.fail("CNNVIDEO_DOCKER_TESTS=1 but " + problem)
    if problem:
        pytest.skip(problem)


@pytest.fixture(scope="session")
def netem_image(engine):
    return build_image("netem")
