"""Docker-level fixtures: skip (with the reason) when no engine answers; images built once per session.

When CI has set the engine up (CNNVIDEO_DOCKER_TESTS=1) a missing engine is a failure, not a skip.
"""
import os

import pytest
from dockerutil import REPO, build_image, docker, engine_problem, ensure_weights, prebuild


def pytest_sessionstart(session):
    """On the controller (not in each xdist worker), build the shared images once before the tests start."""
    if hasattr(session.config, "workerinput") or session.config.getoption("collectonly"):
        return
    try:
        prebuild()
    except (Exception, pytest.skip.Exception, pytest.fail.Exception) as e:  # the tests that need them say why
        print("docker tests: shared images not prebuilt: %s" % str(e).strip().splitlines()[-1:])


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


@pytest.fixture
def wheels_present(engine):
    """Skip the compose tests when docker_setup.sh has not made the wheel and base image they build from."""
    if not list((REPO / "build" / "wheels").glob("grpcio_health_checking-*.whl")):
        pytest.skip("build/wheels lacks grpcio-health-checking (run scripts/docker_setup.sh)")
    base = os.environ.get("CNNVIDEO_BASE_IMAGE", "cnnvideo/debian:bookworm")
    if not docker("image", "ls", "-q", base).strip():
        pytest.skip("base image %s missing (run scripts/docker_setup.sh)" % base)
    ensure_weights()

