"""An ORT engine profile taken under a real CFS cap of 0.1 CPU (a cgroup, as `cnnvideo local` and compose make for a
Pi stand-in) splits the model over its segments as the same profile taken uncapped does, and near how the stages
timed on their own do. Under the cap every run of a 30 ms stage is throttled for up to 90 ms inside some node, and
before the fix those stalls went to whichever segment was running: the planners then cut trained MobileNetV2 where
nothing balances (docs/results/scaling-*)."""
import json
import subprocess
import sys

import numpy as np
import pytest

from cnnvideo.config import ConfigError
from cnnvideo.model import engines
from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import build_model
from cnnvideo.plan.profiling import _engine_time, profile_compute
from cnnvideo.tools import linkemu

from .helpers import env

FRAME = (480, 720)
CUTS = (9, 18)  # features.1.conv.2 (the stem) and features.3.add
PROFILES = 3  # capped profiles taken; each cut's share is their median, so one disturbed by the host does not decide
CHILD = r"""
import json, sys
PROFILES = %d
import numpy as np
from cnnvideo.model import engines
from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import build_model
from cnnvideo.plan.profiling import profile_compute
g = LayerGraph.from_model(build_model("mobilenet_v2", seed=0), (480, 720))
stages = engines.StageFactory(g, engines.EngineSpec("onnxruntime", "fp32", threads=1), sys.argv[1], "test", None)
x = profile_compute(g, 1)[2][0]
with open("/proc/self/cgroup") as fh:
    cgroup = fh.read()
whole = stages.stage(0, g.num_segments)
print(json.dumps({"seconds": [whole.segment_seconds(x, 5).tolist() for _ in range(PROFILES)], "cgroup": cgroup}))
""" % PROFILES

# timed under a CFS cap: runs alone (serial)
pytestmark = [pytest.mark.slow, pytest.mark.serial,
              pytest.mark.skipif(not engines.ort_available()[0], reason="onnxruntime is not installed")]


def test_profile_under_a_cap_splits_like_the_stages_alone(tmp_path):
    g = LayerGraph.from_model(build_model("mobilenet_v2", seed=0), FRAME)
    k = g.num_segments
    stages = engines.StageFactory(g, engines.EngineSpec("onnxruntime", "fp32", threads=1), str(tmp_path), "test",
                                  None)
    x = profile_compute(g, 1)[2]
    alone = {}
    for c in CUTS:  # uncapped, in this process: each stage's best of three timings
        a, b = stages.stage(0, c), stages.stage(c, k)
        ta = min(_engine_time(a.run, x[0], 3, 0.3) for _ in range(3))
        tb = min(_engine_time(b.run, x[c], 3, 0.3) for _ in range(3))
        alone[c] = ta / (ta + tb)
    # the same profile uncapped, in this process (the child loads this stage from the cache)
    free = np.cumsum(stages.stage(0, k).segment_seconds(x[0], 5))
    free /= free[-1]

    try:
        caps = linkemu.CpuCaps({"profile": 0.1})
    except ConfigError as exc:  # no writable cgroup (not root, or no cpu controller)
        pytest.skip("no CPU cap possible here: %s" % exc)
    try:
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env())
        caps.add("profile", child.pid)
        out, err = child.communicate(timeout=600)
    finally:
        caps.remove()
    assert child.returncode == 0, err[-2000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert "cnnvideo-" in got["cgroup"], got["cgroup"]  # the child ran in the capped cgroup
    profiles = np.array(got["seconds"])  # PROFILES x segments
    share = np.median(np.cumsum(profiles, axis=1) / profiles.sum(axis=1, keepdims=True), axis=0)
    seconds = np.median(profiles, axis=0)
    for c in CUTS:
        # the cap's stalls land in no segment: the capped profile splits as the uncapped one does
        # (the early cuts' small shares are the noisiest: a CI rehearsal read 0.066 against 0.138 at cut 9, and
        # one, from a single profile, 0.023 against 0.193 on a host that was reclaiming memory: hence the median)
        assert share[c - 1] == pytest.approx(free[c - 1], abs=0.08), (c, share[c - 1], free[c - 1], seconds.sum())
        # and as the stages timed on their own, less closely: a stage run alone also feeds its input and pays a
        # session's overhead, which kernel times leave out (at cut 18 kernels read 0.46, stages 0.41 on an idle
        # host; 0.495 against 0.39 once under CI load; 0.554 against 0.402 in another CI rehearsal, with the capped
        # and uncapped profiles agreeing). The old attribution read 0.03 against 0.39.
        assert share[c - 1] == pytest.approx(alone[c], abs=0.2), (c, share[c - 1], alone[c], seconds.sum())
