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


def test_workers_come_from_the_spec(tmp_path):
    """n_workers: the spec's `workers`, else base.cluster.workers, else 2; bad values are refused; a run config
    gets one bandwidth per hop; the compose backend (docker-compose.yml's two workers) refuses another count
    before it touches docker."""
    from cnnvideo.tools.experiment import spec as spec_mod

    assert spec_mod.n_workers({}) == 2
    assert spec_mod.n_workers({"base": {"cluster": {"workers": ["a:1", "b:2", "c:3"]}}}) == 3
    assert spec_mod.n_workers({"workers": 4}) == 4
    for bad in ({"workers": 0}, {"workers": "3"}, {"workers": 2, "base": {"cluster": {"workers": ["a:1"]}}}):
        with pytest.raises(ExperimentError, match="workers"):
            spec_mod.n_workers(bad)
    spec = {"workers": 3, "frames": 4, "runs": [{"scheduler": "lbs", "bandwidth": 2}]}
    r = spec_mod.expand(spec)[-1]
    cfg = spec_mod.run_config(spec, r)
    assert cfg["bandwidth"] == [2.0, 2.0, 2.0] and len(cfg["cluster"]["workers"]) == 3
    with pytest.raises(ExperimentError, match="2 workers"):
        ComposeBackend(spec, str(tmp_path)).start()
