"""An idle scene costs (almost) nothing (delta.skip_unchanged): the empty delta on the wire, the receiver that tells
it from the headers, the run loop that skips a stage whose input is unchanged (in-process, two chained run loops
as in test_worker_runloop), and what the report, the results log and the cost model make of it."""
from __future__ import annotations

import json

import numpy as np
import pytest

from cnnvideo.master.results_log import ResultsLog
from cnnvideo.master.telemetry import Telemetry
from cnnvideo.plan import adapt, predict
from cnnvideo.plan.costmodel import CostInputs, compute_costs, expected_compute, stage_costs
from cnnvideo.plan.plan import Plan
from cnnvideo.plan.schedulers import InputDelta, create
from cnnvideo.results import report as rpt
from cnnvideo.wire import codec
from cnnvideo.wire.hop import HopError, HopReceiver, HopSender, is_unchanged
from cnnvideo.wire.protocol import HopPlanner, HopSettings, OutputHop, reporter
from cnnvideo.worker.runloop import Payload, Result, Run, RunSettings, StageReport, Task

SHAPES = [(1, 4, 4, 3), (1, 3, 4, 4), (1, 3, 4, 4), (1, 8)]  # cut 0 is the uint8 frame


def _segment(k, x):
    if k == 0:
        return (x.transpose(0, 3, 1, 2).astype(np.float32) - 100.0) / 7.0
    if k == 1:
        return np.maximum(x, 0.0) * 1.5  # pixels below 100 all give 0: a change among them leaves cut 2 unchanged
    return (x.reshape(1, -1)[:, :8] - 0.25).astype(np.float32)


def reference(start, end, x):
    for k in range(start, end):
        x = _segment(k, x)
    return x


# ------------------------------------------------------------------------------------------ the wire


@pytest.mark.parametrize("shape, dtype", [((1, 4, 4, 3), np.uint8), ((1, 3, 5, 7), np.float32),
                                          ((1, 1000), np.float32), ((2, 3), np.float16), ((1, 96, 128, 3), np.uint8)])
def test_empty_delta_is_a_bare_header_made_without_the_tensor(shape, dtype):
    """codec.encode_empty gives byte for byte what encode() gives for an all-zero tensor or an all-False mask (every
    compression), a header with no body (52-68 bytes whatever the size), and is_empty reads it from the header."""
    for compress in ("auto", "none", "zstd", "lz4"):
        dense = codec.encode(np.zeros(shape, dtype), compress=compress)
        masked = codec.encode(np.zeros(0, dtype), mask=np.zeros(shape, bool), compress=compress)
        assert dense == codec.encode_empty(shape, dtype)
        assert masked == codec.encode_empty(shape, dtype, mask=True)
        if dtype == np.float32:
            fp16 = codec.encode(np.zeros(0, dtype), mask=np.zeros(shape, bool), fp16=True, compress=compress)
            assert fp16 == codec.encode_empty(shape, dtype, mask=True, fp16=True)
    assert len(dense) <= 68 and codec.is_empty(dense) and codec.is_empty(masked)
    assert not codec.is_empty(codec.encode(np.ones(shape, dtype)))


@pytest.mark.parametrize("dtype, threshold, fp16", [(np.uint8, 0, False), (np.uint8, 3, False),
                                                    (np.float32, 0.0, False), (np.float32, 0.1, False),
                                                    (np.float32, 0.0, True), (np.float32, 0.05, True)])
def test_sender_unchanged_is_what_encode_gives_and_the_receiver_keeps_its_tensor(dtype, threshold, fp16):
    """After any payload, encode_unchanged() equals encode() of the same tensor (closed loop: nothing is past the
    threshold) without comparing; the receiver applies it from the headers (last_unchanged, no dense decode), keeps
    exactly what it held, and the sequence goes on (the next real update applies)."""
    rng = np.random.default_rng(1)
    shape = (1, 6, 5, 3) if dtype == np.uint8 else (1, 3, 6, 5)

    def tensor():
        return (rng.integers(0, 256, shape).astype(np.uint8) if dtype == np.uint8
                else rng.normal(size=shape).astype(np.float32))

    a, b = HopSender(threshold, fp16), HopSender(threshold, fp16)
    rx = HopReceiver(1 << 20)
    x0, x1 = tensor(), tensor()
    x1.reshape(-1)[::3] = x0.reshape(-1)[::3]
    rx.decode(a.encode(x0))
    b.encode(x0)
    rx.decode(a.encode(x1))
    b.encode(x1)
    empty = a.encode_unchanged()
    assert empty == b.encode(x1) and b.last_nnz == 0 and is_unchanged(empty)  # byte for byte what encode gives
    held = np.array(rx.decode(empty))
    assert rx.last_unchanged and rx.last_kind == ("add256" if dtype == np.uint8 else "update")
    np.testing.assert_array_equal(held, a.held)
    x2 = tensor()
    got = rx.decode(a.encode(x2))
    assert not rx.last_unchanged
    np.testing.assert_array_equal(got, a.held)
    assert not is_unchanged(a.encode(x2, keyframe=True))  # a keyframe is never "unchanged", even if equal


def test_receiver_checks_an_empty_update_like_any_update():
    """An empty update still needs the state right before it and the held shape/dtype: a gap or a foreign shape
    raises HopError instead of being taken as 'nothing changed'."""
    s = HopSender()
    rx = HopReceiver(1 << 20)
    with pytest.raises(HopError):
        HopSender().encode_unchanged()  # nothing sent yet: the first payload is a keyframe
    rx.decode(s.encode(np.zeros((1, 4), np.float32)))
    s.encode_unchanged()  # lost on the way
    with pytest.raises(HopError, match="does not follow"):
        rx.decode(s.encode_unchanged())
    other = HopSender()
    other.encode(np.zeros((1, 5), np.float32))
    rx2 = HopReceiver(1 << 20)
    rx2.decode(HopSender().encode(np.zeros((1, 4), np.float32)))
    with pytest.raises(HopError, match="does not match held"):
        rx2.decode(other.encode_unchanged())


def test_output_hop_never_sends_a_keyframe_as_unchanged():
    """OutputHop.encode_unchanged declines (None) on the first message, a planned keyframe, full mode and a new cut;
    otherwise it sends the empty update."""
    hop = OutputHop(HopSettings())
    assert hop.encode_unchanged(1) is None
    hop.encode(1, np.ones((1, 4), np.float32))
    assert hop.encode_unchanged(1, planned=True) is None and hop.encode_unchanged(2) is None
    data, key = hop.encode_unchanged(1)
    assert not key and is_unchanged(data)
    full = OutputHop(HopSettings(mode="full"))
    full.encode(1, np.ones((1, 4), np.float32))
    assert full.encode_unchanged(1) is None


# ------------------------------------------------------------------------------------------ the run loop


class Chain:
    """Two run loops (w0 emits into w1) counting their stage computes, fed like a master (protocol.HopPlanner)."""

    def __init__(self, skip=True, input_threshold=0, keyframe_every=0, generation=0):
        hops = HopSettings(input_threshold=input_threshold)
        self.settings = RunSettings("r1", 2, hops, generation=generation, skip_unchanged=skip)
        self.computed = {0: 0, 1: 0}

        def counting(w):
            def forward(start, end, x):
                self.computed[w] += 1
                return reference(start, end, x)
            return forward

        self.w1 = Run(self.settings, 1, SHAPES, counting(1), None, 1 << 20)
        self.w0 = Run(self.settings, 0, SHAPES, counting(0), self.w1.accept, 1 << 20)
        self.plan = HopPlanner(2, "delta", keyframe_every)
        self.sender = hops.sender(0)
        self.receivers = [HopReceiver(1 << 20), HopReceiver(1 << 20)]
        self.seq = 0

    def run(self, f, x, cuts):
        """Send frame f; (output as the master holds it, reused?, w0's report, w1's report or None)."""
        keyframe, epochs = self.plan.plan(f, cuts)
        data = self.sender.encode(x, keyframe=keyframe[0])
        self.w0.accept(Task("r1", f, list(cuts), Payload(0, data, keyframe[0]), hop=0, seq=self.seq,
                            keyframe=keyframe, epoch=epochs, generation=self.settings.generation, route=[0, 1]))
        self.seq += 1
        w = reporter(cuts)
        res = [self.w0, self.w1][w].results.get(timeout=10)
        assert isinstance(res, Result) and res.frame_id == f
        y = np.array(self.receivers[w].decode(res.output.data))
        reports = [self.w0.stages.get(timeout=10)]
        if w == 1:
            reports.append(self.w1.stages.get(timeout=10))
        assert all(isinstance(r, StageReport) and not r.error for r in reports)
        return y, self.receivers[w].last_unchanged, reports[0], reports[1] if w == 1 else None

    def close(self):
        self.w0.close()
        self.w1.close()


def _idle_clip(n_still=4, n_move=3, seed=0):
    """Still frames, a moving bright patch, still again (exactly repeated pixels)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, SHAPES[0], dtype=np.uint8)
    clip = [base.copy() for _ in range(n_still)]
    for i in range(n_move):
        f = base.copy()
        f[0, i % 4, :2] = 255
        clip.append(f)
    clip += [base.copy() for _ in range(n_still)]
    return clip


def test_still_frames_skip_every_stage_and_results_match_computing_them():
    """Still / motion / still through w0 -> w1 with skipping on and off: outputs are bitwise the same (and equal the
    unsplit reference); with skipping on, every still frame after the first after motion is skipped by both
    workers (stage report `skipped`, no forward call), its w0->w1 payload and its result are empty updates and the
    master side sees the result as unchanged (reused); motion frames compute."""
    clip = _idle_clip()
    cuts = [0, 1, 3]
    on, off = Chain(skip=True), Chain(skip=False)
    try:
        skipped = []
        for f, x in enumerate(clip):
            y_on, reused, r0, r1 = on.run(f, x, cuts)
            y_off, _, o0, o1 = off.run(f, x, cuts)
            np.testing.assert_array_equal(y_on, y_off)
            np.testing.assert_array_equal(y_on, reference(0, 3, x))
            assert r0.skipped == r1.skipped  # composes: w0's empty output lets w1 skip
            assert reused or not r1.skipped  # (a computed output equal to the last one is reused too)
            assert not (o0.skipped or o1.skipped)
            if r0.skipped:
                assert r0.bytes_out <= 80 and not r0.keyframe_out
            skipped.append(r0.skipped)
        still_after_first = [1, 2, 3, 8, 9, 10]  # frame 0 is the keyframe; 4-6 move; 7 is the first still frame after
        assert [f for f, s in enumerate(skipped) if s] == still_after_first
        assert on.computed == {0: len(clip) - len(still_after_first), 1: len(clip) - len(still_after_first)}
        assert off.computed == {0: len(clip), 1: len(clip)}
    finally:
        on.close()
        off.close()


def test_an_unchanged_output_lets_the_next_worker_skip():
    """Exact composition: w0's input changes (a dark pixel gets darker) but its output at cut 2 does not (the
    ReLU zeroes both), so w0 computes and sends an empty delta and w1 skips; the result stays exact."""
    base = np.full(SHAPES[0], 200, np.uint8)
    base[0, 0, 0] = 10
    darker = base.copy()
    darker[0, 0, 0] = 20
    chain = Chain()
    try:
        for f, x in enumerate([base, base, darker]):
            y, reused, r0, r1 = chain.run(f, x, [0, 2, 3])
            np.testing.assert_array_equal(y, reference(0, 3, x))
        assert not r0.skipped and r0.bytes_out <= 80 and r1.skipped and reused
    finally:
        chain.close()


def test_keyframes_and_plan_changes_are_never_skipped():
    """A periodic keyframe (delta.keyframe_every), a new plan (new cuts: new epoch, keyframe) and a stage whose end
    cut moved are computed although the frame did not change; skipping resumes after them, results stay exact."""
    x = _idle_clip(n_still=1, n_move=0)[0]
    chain = Chain(keyframe_every=4)
    plans = [[0, 1, 3]] * 6 + [[0, 2, 3]] * 3 + [[0, 1, 3]] * 2
    try:
        seen = []
        for f, cuts in enumerate(plans):
            y, _, r0, r1 = chain.run(f, x, cuts)
            np.testing.assert_array_equal(y, reference(0, 3, x))
            seen.append((r0.skipped, r1.skipped))
        # frames 0, 4 and 8 keyframe every hop; 6 and 9 change the plan (w0's end cut, w1's start cut)
        assert [f for f, s in enumerate(seen) if not s[0]] == [0, 4, 6, 8, 9]
        assert [f for f, s in enumerate(seen) if not s[1]] == [0, 4, 6, 8, 9]
    finally:
        chain.close()


def test_a_resync_starts_over_with_computed_keyframes():
    """After a resync (a new generation: fresh run loops on the workers, the master's senders reset) the first
    still frame is a keyframe and computed on both workers even though nothing changed; skipping resumes after."""
    x = _idle_clip(n_still=1, n_move=0)[0]
    old = Chain()
    try:
        assert [old.run(f, x, [0, 1, 3])[2].skipped for f in range(3)] == [False, True, True]
    finally:
        old.close()
    chain = Chain(generation=1)
    try:
        seen = [chain.run(f, x, [0, 1, 3]) for f in range(3, 6)]
        assert [(r0.skipped, r1.skipped) for _, _, r0, r1 in seen] == [(False, False), (True, True), (True, True)]
        assert seen[0][2].keyframe_out and not seen[0][1]
        for y, _, _, _ in seen:
            np.testing.assert_array_equal(y, reference(0, 3, x))
    finally:
        chain.close()


def test_input_threshold_noise_counts_as_unchanged():
    """Noise up to delta.input_threshold is not sent on the input hop, so noisy still frames skip every stage; the
    output equals computing the frame the workers hold (the keyframe), i.e. the skip-off run at the same threshold."""
    rng = np.random.default_rng(4)
    base = rng.integers(10, 240, SHAPES[0], dtype=np.uint8)
    noisy = [np.clip(base.astype(np.int16) + rng.integers(-2, 3, base.shape), 0, 255).astype(np.uint8)
             for _ in range(5)]
    on, off = Chain(input_threshold=4), Chain(skip=False, input_threshold=4)
    try:
        for f, x in enumerate(noisy):
            y, reused, r0, r1 = on.run(f, x, [0, 1, 3])
            np.testing.assert_array_equal(y, off.run(f, x, [0, 1, 3])[0])
            np.testing.assert_array_equal(y, reference(0, 3, noisy[0]))
            assert r0.skipped == r1.skipped == reused == (f > 0)
    finally:
        on.close()
        off.close()


# ------------------------------------------------------------------------------------------ report and results


def test_report_counts_skips_and_reads_reports_from_before():
    """Telemetry's skip summary: per worker stages computed / skipped, the mean compute of a computed frame per
    stage and the time saved = skipped x that mean; RunReport carries it (and reused_frames) and reads a
    report.json written before those fields with their defaults."""
    tel = Telemetry()
    for s in (0.1, 0.3):
        tel.compute(0, 0, 2, s, False)
    tel.compute(0, 0, 2, 0.001, True)
    tel.compute(0, 0, 2, 0.001, True)
    tel.compute(0, 2, 3, 1.0, False)
    tel.compute(1, 3, 3, 0.0, True)  # an empty stage neither computes nor skips
    out = tel.skips_report(2)
    assert out["w0"]["computed"] == 3 and out["w0"]["skipped"] == 2
    assert out["w0"]["saved_s"] == pytest.approx(0.4) and out["w0"]["skipped_s"] == pytest.approx(0.002)
    assert out["w1"] == {"computed": 0, "skipped": 0, "compute_mean_s": None, "skipped_s": 0.0, "saved_s": 0.0}
    recs = [rpt.FrameRecord(f, [0, 2, 3], sent_at=f, done_at=f + 0.5, status="completed", reused=f > 1)
            for f in range(4)]
    built = rpt.build(frames_total=4, records=recs, hops=[], spans=[], model="m", mode="delta", scheduler="lbs",
                      workers=["a:1"], plan_layers=[], wall_s=1.0, stages_skipped=out)
    data = built.to_dict()
    assert data["reused_frames"] == 2 and data["stages_skipped"]["w0"]["skipped"] == 2
    for key in ("reused_frames", "stages_skipped"):
        del data[key]
    old = rpt.RunReport.from_dict(data)
    assert old.reused_frames == 0 and old.stages_skipped == {}


def test_results_log_marks_reused_frames(tmp_path):
    """results.jsonl says per frame whether its result was reused (unchanged)."""
    log = ResultsLog(str(tmp_path / "results.jsonl"))
    for f in range(2):
        log.sent(f, [0, 1], f, 100)
        log.result(f, f + 1.0, [[1, "x", 0.5]], "w0->m", 76, reused=bool(f))
    log.close()
    lines = [json.loads(line) for line in open(str(tmp_path / "results.jsonl"))]
    assert [ln["reused"] for ln in lines] == [False, True]


# ------------------------------------------------------------------------------------------ cost model


def _inputs(p=0.0):
    return CostInputs(bytes_full=[100.0, 50.0, 10.0], bytes_delta=[10.0, 5.0, 1.0], seg_time=[[0.2, 0.4], [0.1, 0.3]],
                      bandwidth=[1e6, 1e6], p_unchanged=p)


def test_cost_model_charges_compute_only_on_changed_frames():
    """A stage's expected compute per frame is (1 - p_unchanged) x its compute (transfers unchanged); p outside
    [0, 1] is refused."""
    plan = Plan((0, 1, 2))
    result = _inputs().result_time()  # the result's transfer, charged to the last worker, is not compute
    base, idle = compute_costs(plan, _inputs()), compute_costs(plan, _inputs(0.75))
    base[-1] -= result
    idle[-1] -= result
    np.testing.assert_allclose(idle, 0.25 * base)
    np.testing.assert_allclose(stage_costs(plan, _inputs(0.75))[0::2], stage_costs(plan, _inputs())[0::2])
    assert expected_compute(2.0, 0.5) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="p_unchanged"):
        _inputs(1.5)


def test_trainer_measures_the_unchanged_share_and_predictors_carry_it():
    """Recorder counts delta frames whose input delta is empty; the fitted Predictors carry that share through
    to_arrays/from_arrays (predictors saved before it existed read as 0); split keeps the whole video's share."""
    rec = predict.Recorder()
    for flag in (True, False, True, True):
        rec.add_unchanged(flag)
    assert rec.p_unchanged() == pytest.approx(0.75)
    assert predict.Recorder.from_arrays(rec.to_arrays()).p_unchanged() == pytest.approx(0.75)
    p = predict.Predictors(numel=np.array([48.0, 8.0]), itemsize=np.array([1.0, 4.0]), raw_nz=np.ones(2),
                           coefs=[np.zeros((3, 3)), np.zeros((3, 8))], p_unchanged=0.75)
    arrays = p.to_arrays()
    assert predict.Predictors.from_arrays(arrays).p_unchanged == pytest.approx(0.75)
    del arrays["p_unchanged"]
    assert predict.Predictors.from_arrays(arrays).p_unchanged == 0.0


def test_record_video_counts_empty_input_deltas():
    """record_video (what the trainer plays) marks a frame unchanged when its input delta is empty at the input
    threshold: repeated frames and noise within the threshold count, a moved patch does not."""
    torch = pytest.importorskip("torch")
    from cnnvideo.model.graph import LayerGraph

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 2, 3)
            self.pool = torch.nn.AdaptiveAvgPool2d(1)

        def forward(self, x):
            return self.pool(torch.relu(self.conv(x))).flatten(1)

    graph = LayerGraph.from_model(Tiny().eval(), (8, 8))
    rng = np.random.default_rng(0)
    still = rng.integers(20, 230, (8, 8, 3), dtype=np.uint8)
    moved = still.copy()
    moved[:3, :3] = 255
    noisy = np.clip(still.astype(np.int16) + 2, 0, 255).astype(np.uint8)
    rec = predict.record_video(graph, [still, still, noisy, moved, moved], input_threshold=2, measure_bytes=False)
    assert rec._unchanged == [True, True, False, True]


def test_adaptive_tracks_the_unchanged_share_live():
    """Estimates keep the running mean of InputDelta samples (used once min_samples came in); adapted_inputs and
    the adaptive scheduler's re-plan use it in place of the trainer's share."""
    est = adapt.Estimates(2, min_samples=3)
    est.add_input(True)
    est.add_input(True)
    assert est.p_unchanged() is None
    est.add_input(False)
    est.add_input(True)
    assert est.p_unchanged() == pytest.approx(0.75) and est.snapshot()["p_unchanged"] == 0.75
    assert adapt.running_mean(None, 0, 1.0) == 1.0 and adapt.running_mean(0.5, 1, 0.0) == 0.25
    inputs = _inputs(0.1)
    assert adapt.adapted_inputs(inputs, [None, None], [None, None]).p_unchanged == pytest.approx(0.1)
    assert adapt.adapted_inputs(inputs, [None, None], [None, None], 0.6).p_unchanged == pytest.approx(0.6)
    sched = create("adaptive", inputs, 1, True, {"min_samples": 2}, group_size=2)
    for flag in (True, True, False, True):
        sched.observe(InputDelta(flag))
    sched.plan_for(2)
    assert sched.measured_inputs.p_unchanged == pytest.approx(0.75)


def test_cost_inputs_take_the_share_from_the_predictors_in_delta_mode():
    """costinputs.build: the predictors' p_unchanged in delta mode (full mode keyframes every frame: 0), unless the
    caller says (the master passes 0 with skip_unchanged off)."""
    from cnnvideo.plan.costinputs import build

    p = predict.Predictors(numel=np.array([48.0, 8.0, 8.0]), itemsize=np.array([1.0, 4.0, 4.0]), raw_nz=np.ones(3),
                           coefs=[np.zeros((3, 3)), np.zeros((3, 8)), np.zeros((3, 8))], p_unchanged=0.4)
    args = (np.full((2, 2), 0.1), [1e6, 1e6], np.array([48.0, 32.0, 32.0]), p)
    assert build(*args).p_unchanged == pytest.approx(0.4)
    assert build(*args, delta_mode=False).p_unchanged == 0.0
    assert build(*args, p_unchanged=0.0).p_unchanged == 0.0
