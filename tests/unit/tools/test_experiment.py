"""Experiment runner pieces that need no Docker: the compose project lock."""
import pytest

from cnnvideo.tools.experiment import ComposeBackend, ExperimentError


def test_second_experiment_on_one_compose_project_is_refused(tmp_path):
    """While one runner holds a compose project, another one's start is refused with the holder named (two
    runners on one project would recreate each other's containers mid-run); after unlock it is free again."""
    project = "cnnvideo-locktest-%d" % id(tmp_path)
    first = ComposeBackend({}, str(tmp_path / "a"), project=project)
    second = ComposeBackend({}, str(tmp_path / "b"), project=project)
    first.lock()
    try:
        with pytest.raises(ExperimentError, match="in use by another experiment.*pid"):
            second.lock()
    finally:
        first.unlock()
    second.lock()
    second.unlock()
