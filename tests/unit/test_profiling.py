"""Worker profile: CPU-clock segment times scaled to wall, codec times per cut, and the cache array format."""
import time

import numpy as np
import pytest
import torch

from cnnvideo.model import engines
from cnnvideo.model.graph import LayerGraph
from cnnvideo.plan.profiling import WorkerProfile, device_tag, profile_worker
from cnnvideo.wire.hop import HopSender


def _graph():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3),
                                torch.nn.ReLU(), torch.nn.Flatten()).eval()
    return LayerGraph.from_model(model, (32, 48))


def test_profile_worker_shapes_and_values():
    """K segment times and K+1 encode/decode times, all finite and >= 0, the sums positive; wall/CPU > 0."""
    g = _graph()
    k = len(g.cuts) - 1
    prof = profile_worker(g, iters=2)
    assert prof.seconds.shape == (k,) and prof.encode.shape == (k + 1,) and prof.decode.shape == (k + 1,)
    for arr in (prof.seconds, prof.encode, prof.decode):
        assert np.all(np.isfinite(arr)) and np.all(arr >= 0) and arr.sum() > 0
    assert prof.wall_per_cpu > 0


def test_codec_profile_uses_the_given_senders():
    """The codec profile builds its senders with sender_for(cut) for every cut (the worker passes its hop
    options through it)."""
    g = _graph()
    seen = []

    def sender_for(k):
        seen.append(k)
        return HopSender()

    profile_worker(g, iters=1, sender_for=sender_for)
    assert sorted(set(seen)) == list(range(len(g.cuts)))


def test_profile_arrays_round_trip_and_rejects_bad_shapes():
    """to_arrays/from_arrays round trip; wrong shapes, missing keys or NaN are ValueErrors."""
    prof = WorkerProfile(np.ones(3), np.ones(4), np.ones(4), 5.0)
    back = WorkerProfile.from_arrays(prof.to_arrays(), 3)
    np.testing.assert_array_equal(back.encode, prof.encode)
    assert back.wall_per_cpu == 5.0
    with pytest.raises(ValueError):
        WorkerProfile.from_arrays(prof.to_arrays(), 4)
    bad = prof.to_arrays()
    del bad["decode"]
    with pytest.raises(ValueError):
        WorkerProfile.from_arrays(bad, 3)
    bad = prof.to_arrays()
    bad["seconds"] = np.array([1.0, np.nan, 1.0])
    with pytest.raises(ValueError):
        WorkerProfile.from_arrays(bad, 3)


@pytest.mark.serial  # compares timings taken apart: runs alone
def test_rescale_scales_every_part_by_one_factor():
    """rescale times whole passes now and scales compute, codec and wall/CPU by now / profiled: a profile
    inflated 20x comes back scaled down (factor < 1) and every array keeps its shape and proportions."""
    from cnnvideo.plan.profiling import rescale

    g = _graph()
    prof = profile_worker(g, iters=2)
    inflated = WorkerProfile(prof.seconds * 20, prof.encode * 20, prof.decode * 20, prof.wall_per_cpu)
    out, factor = rescale(inflated, g, passes=3)
    assert 0 < factor < 1
    np.testing.assert_allclose(out.seconds, inflated.seconds * factor)
    np.testing.assert_allclose(out.encode, inflated.encode * factor)
    assert out.wall_per_cpu == inflated.wall_per_cpu * factor


def test_cfs_quota_reads_cgroup_v2_and_v1(tmp_path):
    """cpu.max (v2) or cpu/cpu.cfs_quota_us + cfs_period_us (v1) give (quota, period) seconds; 'max', -1 or
    nothing readable mean uncapped (0, 0)."""
    from cnnvideo.cpucap import cfs_quota

    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("40000 100000\n")
    assert cfs_quota(str(v2)) == (0.04, 0.1)
    (v2 / "cpu.max").write_text("max 100000\n")
    assert cfs_quota(str(v2)) == (0.0, 0.0)
    v1 = tmp_path / "v1" / "cpu"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("20000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert cfs_quota(str(tmp_path / "v1")) == (0.02, 0.1)
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert cfs_quota(str(tmp_path / "v1")) == (0.0, 0.0)
    assert cfs_quota(str(tmp_path / "nothing")) == (0.0, 0.0)


@pytest.mark.serial  # compares timings taken apart: runs alone
def test_rescale_compares_torch_passes_with_the_torch_reference_not_engine_seconds():
    """A profile on another engine keeps the torch pass it was scaled from (`reference`): rescale compares its
    torch passes now with that, so a profile whose seconds are 1000x smaller than torch's (a fast engine) but
    whose reference is torch's is scaled by about the same factor as the torch profile, not ~1000x up; an old
    profile without a reference falls back to the sum of its seconds."""
    from cnnvideo.plan.profiling import rescale, rescale_reference

    g = _graph()
    prof = profile_worker(g, iters=2)
    assert prof.reference > 0 and abs(prof.reference - prof.seconds.sum()) < 1e-12  # torch fp32: the same
    fast = WorkerProfile(prof.seconds / 1000, prof.encode, prof.decode, prof.wall_per_cpu,
                         reference=prof.reference * 20)
    out, factor = rescale(fast, g, passes=3)
    assert 0 < factor < 1  # against the 20x inflated torch reference, not against seconds / 1000
    np.testing.assert_allclose(out.seconds, fast.seconds * factor)
    old = WorkerProfile(prof.seconds, prof.encode, prof.decode, prof.wall_per_cpu)
    assert rescale_reference(old) == float(prof.seconds.sum())
    bad = prof.to_arrays()
    del bad["reference"]
    with pytest.raises(ValueError):  # a cache from before `reference`: the worker profiles again
        WorkerProfile.from_arrays(bad, len(g.cuts) - 1)


@pytest.mark.serial  # compares timings taken apart: runs alone
def test_engine_time_runs_long_enough_to_see_the_cap():
    """A short engine stage is timed back to back for at least min_wall seconds (so a CFS cap's throttling is
    averaged over several periods), at least `iters` times, at most max_runs; the result is a positive time."""
    from cnnvideo.plan.profiling import _engine_time

    calls = []

    def stage(x):
        calls.append(x)
        t = time.perf_counter()
        while time.perf_counter() - t < 0.005:  # ~5 ms of CPU
            pass

    got = _engine_time(stage, 1, iters=3, min_wall=0.1)
    assert len(calls) - 1 >= 8 and got > 0.004  # warm-up + runs filling 0.1 s (~5 ms each), not just 3
    calls.clear()
    _engine_time(stage, 1, iters=3, min_wall=10.0, max_runs=7)
    assert len(calls) == 1 + 7
    calls.clear()
    _engine_time(stage, 1, iters=5, min_wall=0.0)
    assert len(calls) == 1 + 5


@pytest.mark.skipif(not engines.ort_available()[0], reason="onnxruntime is not installed")
def test_engine_profile_is_rescaled_by_its_own_stages_not_torch_passes(tmp_path, monkeypatch):
    """An ONNX Runtime profile keeps the bounds of the engine stages it was timed on and their summed time as its
    reference; rescale times those stages again, chained on the random frame, with no torch pass at all (a
    torch pass raises here): a profile inflated 20x comes back scaled down. The bounds survive the cache arrays,
    and bounds that do not cover the segments in order are refused."""
    from cnnvideo.plan import profiling

    g = _graph()
    k = len(g.cuts) - 1
    spec = engines.EngineSpec("onnxruntime", "fp32", threads=1)
    stages = engines.StageFactory(g, spec, str(tmp_path / "onnx"), "test")
    prof = profile_worker(g, iters=2, stages=stages)
    bounds = prof.reference_bounds
    assert bounds[0] == 0 and bounds[-1] == k and list(bounds) == sorted(set(bounds)) and prof.reference > 0
    back = WorkerProfile.from_arrays(prof.to_arrays(), k)
    assert back.reference_bounds == bounds and back.reference == prof.reference

    def no_torch_pass(*args):
        raise AssertionError("an engine profile must not be rescaled by torch passes")

    monkeypatch.setattr(profiling, "_pass", no_torch_pass)
    inflated = prof.scaled(20.0, prof.reference * 20)
    out, factor = profiling.rescale(inflated, g, passes=2, stages=stages)
    assert 0 < factor < 0.5
    np.testing.assert_allclose(out.seconds, inflated.seconds * factor)
    assert out.reference_bounds == bounds
    for bad in ((0, k + 1), (1, k), (0, 0, k)):
        arrays = dict(prof.to_arrays(), reference_bounds=np.array(bad))
        with pytest.raises(ValueError):
            WorkerProfile.from_arrays(arrays, k)


def test_device_tag_reads_the_cpu_model_a_pi_board_and_nothing(tmp_path):
    """device_tag names the x86 model or a Pi's board and core part, with the architecture and cores; a cpuinfo
    without a model, or none at all, gives '' (alike to no other worker)."""
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nmodel\t: 1\nmodel name\t: AMD EPYC 7B13\nflags\t: sse\n"
                   "processor\t: 1\nmodel name\t: AMD EPYC 7B13\n")
    pi = tmp_path / "pi"
    pi.write_text("processor\t: 0\nCPU part\t: 0xd08\n\nHardware\t: BCM2835\nModel\t: Raspberry Pi 4 Model B Rev 1.4\n")
    bare = tmp_path / "bare"
    bare.write_text("processor\t: 0\n")
    assert device_tag(str(x86)).startswith("AMD EPYC 7B13/")
    assert device_tag(str(pi)).startswith("Raspberry Pi 4 Model B Rev 1.4 part 0xd08/")
    assert device_tag(str(x86)).endswith(" cores")
    assert device_tag(str(bare)) == "" and device_tag(str(tmp_path / "missing")) == ""
