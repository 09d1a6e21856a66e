"""Docker-level fixtures: skip (with the reason) when no engine answers; images built once per session."""
import pytest
from dockerutil import build_image, engine_problem


@pytest.fixture(scope="session")
def engine():
    """Skip the test when no engine answers."""
    problem = engine_problem()
    if problem:
        pytest.skip(problem)


@pytest.fixture(scope="session")
def netem_image(engine):
    return build_image("netem")
