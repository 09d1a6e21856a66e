"""cnnvideo.plan.overhead: the per-frame overhead measured from stage reports, stored per device, applied to a plan."""
import json

import numpy as np
import pytest

from cnnvideo.plan import overhead
from cnnvideo.plan.costinputs import cpu_model, share_cpu


def _meter():
    seg = np.array([[0.01, 0.02, 0.03]]) * 10.0  # a worker at cap 0.1: 10 wall seconds a CPU second
    return overhead.OverheadMeter(overhead.profiled_cpu(seg, [10.0]))


def test_meter_differences_process_cpu_and_compares_compute_with_the_profile():
    """CPU a frame is the process CPU between consecutive reports; the compute ratio is the compute threads' CPU over
    the profile's CPU of the same segments; the CPU beyond the compute and the per-byte charge (with no codec
    profile the model charges no codec) is split over 3 messages."""
    m = _meter()
    cpu = 5.0
    for _ in range(11):  # the first report only sets the baseline
        cpu += 0.080
        m.add(0, cpu, stage_cpu=0.068, compute_cpu=0.066, start=0, end=3, computed=True, nbytes=40000)
    o = m.measured()[0]
    assert o.frames == 10
    assert o.cpu_s == pytest.approx(0.080)
    assert o.compute_ratio() == pytest.approx(0.066 / 0.060)
    # other = 80 - 66 = 14 ms; per byte 25 ns x 40 kB = 1 ms; 13 ms over 3 messages
    assert o.message_us(25.0) == pytest.approx(13000 / 3)


def test_message_cpu_is_what_the_model_does_not_charge_so_the_same_plan_costs_the_measured_cpu():
    """With a codec profile the model charges its decode at the stage's first cut and encode at its last; the rest of
    the measured CPU goes to the messages, so compute x ratio + codec + bytes + messages is the CPU measured a frame
    (half the frames skipped: the model charges their compute at the skipped share too)."""
    seg = np.array([[0.01, 0.02, 0.03]]) * 10.0
    enc = np.array([[0.001, 0.002, 0.003, 0.004]]) * 10.0
    dec = np.array([[0.0005, 0.001, 0.0015, 0.002]]) * 10.0
    m = overhead.OverheadMeter(overhead.profiled_cpu(seg, [10.0]), overhead.profiled_codec_cpu(enc, dec, [10.0]))
    cpu = 5.0
    for f in range(21):
        cpu += 0.080 if f % 2 else 0.020
        m.add(0, cpu, stage_cpu=0.07, compute_cpu=0.066, start=0, end=3, computed=bool(f % 2), nbytes=40000)
    o = m.measured()[0]
    assert o.computed_share == pytest.approx(0.5) and o.codec_cpu_s == pytest.approx(0.0045)
    charged = o.computed_share * o.compute_cpu_s + o.codec_cpu_s + 40000 * 25e-9 + 3 * o.message_us(25.0) * 1e-6
    assert charged == pytest.approx(o.cpu_s) and o.cpu_s == pytest.approx(0.050)
    assert overhead.profiled_codec_cpu(None, dec, [10.0]) is None


def test_store_key_is_the_device_and_its_cap():
    assert overhead.store_key("pi", 0.01, 0.1) == "pi/cap 0.1"
    assert overhead.store_key("pi") == "pi/uncapped"
    assert overhead.store_key("", 0.01, 0.1) == ""


def test_meter_starts_again_after_a_restart_and_ignores_unmeasured_reports():
    """A lower process CPU (the worker restarted) sets a new baseline instead of a negative frame; 0 is not measured;
    a skipped stage counts its CPU but not against the profile."""
    m = _meter()
    m.add(0, 10.0, 0.01, 0.0, 0, 3, True, 0)
    m.add(0, 10.1, 0.01, 0.05, 0, 3, True, 0)
    m.add(0, 0.5, 0.01, 0.05, 0, 3, True, 0)  # restarted
    m.add(0, 0.0, 0.01, 0.05, 0, 3, True, 0)  # not measured
    m.add(0, 0.6, 0.01, 0.001, 0, 3, False, 0)  # skipped
    o = m.measured()[0]
    assert o.frames == 2
    assert o.cpu_s == pytest.approx(0.1)
    assert o.compute_cpu_s == pytest.approx(0.05) and o.profiled_cpu_s == pytest.approx(0.06)
    assert m.measured(min_frames=3) == {}


def test_ratio_and_message_cpu_are_bounded():
    """A measuring fault cannot scale a profile by more than RATIO_BOUNDS or charge a negative message."""
    o = overhead.WorkerOverhead(frames=10, cpu_s=0.01, stage_cpu_s=0.02, compute_cpu_s=1.0, profiled_cpu_s=0.01,
                                bytes=0.0)
    assert o.compute_ratio() == overhead.RATIO_BOUNDS[1]
    assert o.message_us(25.0) == 0.0


def test_grouped_takes_medians_per_device_and_leaves_unknown_devices_out():
    mk = overhead.WorkerOverhead
    measured = {0: mk(60, 0.015, 0.012, 0.011, 0.010, 0), 1: mk(60, 0.015, 0.012, 0.012, 0.010, 0),
                2: mk(60, 0.015, 0.012, 0.013, 0.010, 0), 3: mk(60, 0.015, 0.012, 0.020, 0.010, 0)}
    got = overhead.grouped(measured, ["pi", "pi", "pi", ""], 0.0, "run1")
    assert list(got) == ["pi"]
    assert got["pi"].compute_ratio == pytest.approx(1.2)
    assert got["pi"].message_us == pytest.approx(1000.0)
    assert got["pi"].frames == 180 and got["pi"].workers == 3


def test_store_round_trip_and_bad_files(tmp_path):
    """What save writes load reads back; a damaged file, another format or a value out of bounds reads as None."""
    path = str(tmp_path / "o" / "x.json")
    assert overhead.load(path) is None
    overhead.save(path, overhead.Stored(1.1, 300.0, 100, 2, "r"))
    assert overhead.load(path) == overhead.Stored(1.1, 300.0, 100, 2, "r")
    for bad in ("{", json.dumps({"compute_ratio": 9.0, "message_us": 1, "frames": 1, "workers": 1}),
                json.dumps({"compute_ratio": 1.0, "message_us": 1, "frames": 1, "workers": 1, "format": 99}),
                json.dumps({"nope": 1})):
        (tmp_path / "o" / "x.json").write_text(bad)
        assert overhead.load(path) is None


def test_apply_scales_only_the_workers_with_figures_and_cpu_model_charges_them():
    """Worker 0 has stored figures: its segments x1.2 and 500 us a message; worker 1 keeps its profile and 200 us;
    cpu_model turns the per-worker figures into fluid seconds at each worker's wall/CPU ratio."""
    seg = np.ones((2, 3))
    got, per_message = overhead.apply(seg, 200.0, [overhead.Stored(1.2, 500.0, 60, 1), None])
    np.testing.assert_allclose(got, [[1.2] * 3, [1.0] * 3])
    np.testing.assert_allclose(per_message, [500.0, 200.0])
    model = cpu_model([share_cpu(0.1), share_cpu(0.5)], 6, 25.0, per_message)
    np.testing.assert_allclose(model["net_s_per_message"], [500e-6 * 10, 200e-6 * 2])
    np.testing.assert_allclose(seg, 1.0)  # the caller's profile is not changed


def test_a_frame_far_over_the_median_is_left_out():
    """A stage built for a re-plan (seconds of CPU between two reports) does not count as overhead."""
    m = _meter()
    cpu = 1.0
    for i in range(20):
        cpu += 5.0 if i == 10 else 0.08
        m.add(0, cpu, 0.068, 0.066, 0, 3, True, 0)
    o = m.measured()[0]
    assert o.frames == 18 and o.cpu_s == pytest.approx(0.08)


def test_store_refuses_far_off_the_history_and_keeps_it_apart(tmp_path):
    """store accepts runs within RATIO_TOLERANCE of the history's median compute ratio (normal runs 1.14-1.20) and
    refuses one at 1.7x it, keeping it in `rejected` with why and leaving the figures planned with unchanged."""
    path = str(tmp_path / "x.json")
    for i, r in enumerate((1.14, 1.20, 1.17)):
        assert overhead.store(path, overhead.Stored(r, 300.0, 100, 2, "ok%d" % i)) is None
    why = overhead.store(path, overhead.Stored(1.99, 300.0, 100, 2, "sick"))
    assert why is not None and "compute x1.990" in why and "3 stored runs" in why
    h = overhead.read(path)
    assert h.current.run_id == "ok2" and [s.run_id for s in h.accepted] == ["ok0", "ok1", "ok2"]
    assert [(r["run_id"], r["reason"]) for r in h.rejected] == [("sick", "off_history")]


def test_message_cpu_is_refused_only_far_off_in_ratio_and_in_us(tmp_path):
    """The message CPU may double with a change of plan and is accepted; 3x and 500 us or more off is refused; 3x
    but a few us (figures near the clip at 0) is accepted; at MESSAGE_US_MAX it is a clamp."""
    path = str(tmp_path / "x.json")
    overhead.save(path, overhead.Stored(1.2, 400.0, 100, 2, "a"))
    assert overhead.store(path, overhead.Stored(1.2, 800.0, 100, 2, "b")) is None
    assert "us a message" in overhead.store(path, overhead.Stored(1.2, 2000.0, 100, 2, "c"))
    assert "clamp" in overhead.store(path, overhead.Stored(1.2, overhead.MESSAGE_US_MAX, 100, 2, "d"))
    small = str(tmp_path / "y.json")
    overhead.save(small, overhead.Stored(1.2, 20.0, 100, 2, "a"))
    assert overhead.store(small, overhead.Stored(1.2, 90.0, 100, 2, "b")) is None


def test_consecutive_agreeing_runs_off_the_history_become_it(tmp_path):
    """A history that no longer fits the device does not refuse every later run: RECOVER runs in a row off it that
    agree among themselves replace it; runs that disagree among themselves, or with an accepted run between them,
    do not."""
    def runs(path, *figures):
        return [overhead.store(path, overhead.Stored(r, 300.0, 100, 2, name)) is None for name, r in figures]

    moved = str(tmp_path / "moved.json")
    overhead.save(moved, overhead.Stored(1.0, 300.0, 100, 2, "old"))
    assert runs(moved, ("n1", 1.6), ("n2", 1.62), ("n3", 1.61)) == [False, False, True]
    h = overhead.read(moved)
    assert h.current.run_id == "n3" and [s.run_id for s in h.accepted] == ["n1", "n2", "n3"]
    apart = str(tmp_path / "apart.json")
    overhead.save(apart, overhead.Stored(1.0, 300.0, 100, 2, "old"))
    assert runs(apart, ("n1", 1.6), ("ok", 1.1), ("n2", 1.6), ("n3", 1.6)) == [False, True, False, False]
    mixed = str(tmp_path / "mixed.json")
    overhead.save(mixed, overhead.Stored(1.0, 300.0, 100, 2, "old"))
    assert runs(mixed, ("a", 1.4), ("b", 1.95), ("c", 1.4)) == [False, False, False]
    assert overhead.load(mixed).run_id == "old"
