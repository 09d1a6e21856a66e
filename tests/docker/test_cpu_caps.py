"""CPU caps are real: the worker image profiles AlexNet under `--cpus 1.0` and `--cpus 0.5` and the
test prints the ratio of the totals (expected ~2). A report, not a timed assertion: it only checks
that both runs produced a profile."""
import json

import pytest
from dockerutil import build_image, docker

pytestmark = pytest.mark.docker

PROFILE = (
    "import json, torch; torch.set_num_threads(1);"
    "from cnnvideo.model.zoo import build_model; from cnnvideo.model.graph import LayerGraph;"
    "from cnnvideo.model.executor import profile_segments;"
    "g = LayerGraph.from_model(build_model('alexnet', 'random', 0), (240, 320));"
    "print(json.dumps(float(profile_segments(g, iters=5).sum())))"
)


def profile_total(image: str, cpus: str) -> float:
    """Seconds per frame of AlexNet (240x320) profiled in a container capped at `cpus`."""
    out = docker("run", "--rm", "--cpus", cpus, "--entrypoint", "python3", image, "-c", PROFILE, timeout=600)
    return json.loads(out.strip().splitlines()[-1])


def test_half_a_cpu_profiles_about_twice_as_slow(engine):
    image = build_image("worker")
    full, half = profile_total(image, "1.0"), profile_total(image, "0.5")
    print("\ncpu caps: alexnet 240x320 per frame %.4f s at cpus 1.0, %.4f s at cpus 0.5: ratio %.2f"
          % (full, half, half / full))
    assert full > 0 and half > 0
