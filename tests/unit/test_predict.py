"""Predictors: array round trip without pickle, fitting a known relation, recorder, size model."""
import io

import numpy as np
import pytest

from cnnvideo.plan.predict import (
    Predictors,
    Recorder,
    channel_rates,
    estimate_bytes,
    features,
    fit,
)


def _synthetic(n=60, seed=0, kind_channels=5):
    rng = np.random.RandomState(seed)
    x = rng.uniform(0.01, 0.6, size=(n, 3))
    m = x.mean(axis=1, keepdims=True)
    a = np.linspace(0.1, 0.5, kind_channels)[None, :]
    y1 = np.clip(0.05 + a * m + 0.3 * np.sqrt(m), 0, 1)  # exactly in the "sqrt" feature family
    return {0: x, 1: y1}


def _fitted(kind="sqrt"):
    rec = _synthetic()
    return fit(rec, numel=[300.0, 500.0], itemsize=[1.0, 4.0], raw_nz={0: 1.0, 1: 0.5}, kind=kind), rec


def test_fit_recovers_known_relation():
    """Rates generated as 0.05 + a*mean + 0.3*sqrt(mean) are predicted almost exactly on new inputs."""
    preds, _ = _fitted()
    test = _synthetic(n=20, seed=1)
    got = preds.predict_nz(test[0])
    np.testing.assert_allclose(got[0], test[0])  # cut 0 passes the input rates through
    np.testing.assert_allclose(got[1], test[1], atol=1e-3)


def test_predictions_clipped_to_unit_interval():
    """Extrapolated rates never leave [0, 1]."""
    preds, _ = _fitted()
    out = preds.predict_nz(np.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    assert all(((p >= 0) & (p <= 1)).all() for p in out)


@pytest.mark.parametrize("kind", ["sqrt", "channels"])
def test_round_trip_arrays_and_savez(kind):
    """to_arrays/from_arrays and np.savez/np.load(allow_pickle=False) give identical predictions."""
    preds, rec = _fitted(kind)
    arrays = preds.to_arrays()
    assert all(a.dtype == np.float64 for a in arrays.values())
    again = Predictors.from_arrays(arrays)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as data:
        loaded = Predictors.from_arrays({k: data[k] for k in data.files})
    for p in (again, loaded):
        np.testing.assert_array_equal(p.predict_bytes(rec[0]), preds.predict_bytes(rec[0]))
        np.testing.assert_array_equal(p.full_bytes(), preds.full_bytes())
        assert p.kind == kind


def test_from_arrays_rejects_malformed():
    """A missing key is a ValueError, not a KeyError deep inside."""
    arrays = _fitted()[0].to_arrays()
    del arrays["coef_1"]
    with pytest.raises(ValueError):
        Predictors.from_arrays(arrays)


def test_predict_bytes_uses_codec_size_model():
    """Predicted bytes = codec.estimate_bytes of (predicted rate x numel); shapes [K+1] and [N, K+1]."""
    preds, rec = _fitted()
    one = preds.predict_bytes(rec[0][0])
    many = preds.predict_bytes(rec[0][:4])
    assert one.shape == (2,) and many.shape == (4, 2)
    nz = preds.predict_nz(rec[0][:1])[1].mean()
    assert one[1] == estimate_bytes(np.round(nz * 500), 500, 4)
    # dense tensors cap at numel * itemsize + header; empty deltas are just a header
    assert estimate_bytes(1000, 1000, 4) <= 4000 + 100 and estimate_bytes(0, 1000, 4) < 100


def test_recorder_round_trip_and_channel_rates():
    """Recorder stacks per-frame rates and survives to_arrays/from_arrays; channel_rates uses NHWC for uint8."""
    rec = Recorder()
    mask = np.zeros((1, 4, 4, 3), dtype=bool)
    mask[..., 1] = True
    np.testing.assert_array_equal(channel_rates(mask, (1, 4, 4, 3), "uint8"), [0, 1, 0])
    fmask = np.zeros((1, 2, 2, 2), dtype=bool)
    fmask[:, 0, 0, 0] = True
    np.testing.assert_array_equal(channel_rates(fmask, (1, 2, 2, 2), "float32"), [0.25, 0])
    for i in range(3):
        rec.add({0: [0.1 * i, 0.2, 0.3], 1: [0.5, 0.5]}, raw_nz={0: 1.0, 1: 0.4}, sizes={1: 100.0 + i})
    back = Recorder.from_arrays(rec.to_arrays())
    assert back.frames == 3
    np.testing.assert_array_equal(back.arrays()[0], rec.arrays()[0])
    assert back.raw_means() == rec.raw_means()
    np.testing.assert_array_equal(back.sizes()[1], [100.0, 101.0, 102.0])


def test_features_shapes():
    """Feature forms have the documented widths; unknown forms are rejected."""
    assert features(np.zeros(3), "sqrt").shape == (1, 3)
    assert features(np.zeros((5, 3)), "channels").shape == (5, 5)
    with pytest.raises(ValueError):
        features(np.zeros(3), "mlp")


def test_compression_ratios_scale_predicted_bytes():
    """Per-cut ratios (actual / size-model bytes) multiply delta and keyframe predictions, survive the array
    round trip, and must be finite and positive; version-1 arrays (no ratios) are rejected."""
    preds, rec = _fitted()
    plain_delta, plain_full = preds.predict_bytes(rec[0][0]), preds.full_bytes()
    arrays = preds.to_arrays()
    arrays["ratio"] = np.array([0.5, 0.25])
    arrays["full_ratio"] = np.array([1.0, 0.5])
    scaled = Predictors.from_arrays(arrays)
    np.testing.assert_allclose(scaled.predict_bytes(rec[0][0]), plain_delta * [0.5, 0.25])
    np.testing.assert_allclose(scaled.full_bytes(), plain_full * [1.0, 0.5])
    np.testing.assert_array_equal(Predictors.from_arrays(scaled.to_arrays()).ratio, [0.5, 0.25])
    for key, value in (("ratio", np.array([0.5, 0.0])), ("full_ratio", np.array([np.nan, 1.0])),
                       ("version", np.array([1.0]))):
        bad = scaled.to_arrays()
        bad[key] = value
        with pytest.raises(ValueError):
            Predictors.from_arrays(bad)


def test_recorder_ratios():
    """Delta ratio = sum of actual bytes / sum of size-model bytes per cut; keyframe ratio from the keyframe;
    unrecorded cuts stay 1; the round trip keeps both."""
    rec = Recorder()
    rec.add_keyframe({0: 50.0, 1: 400.0}, {0: 100.0, 1: 400.0})
    for i in range(2):
        rec.add({0: [0.1, 0.1, 0.1]}, sizes={0: 10.0 + i}, model={0: 40.0})
    delta, key = rec.ratios(3)
    np.testing.assert_allclose(delta, [21.0 / 80.0, 1.0, 1.0])
    np.testing.assert_allclose(key, [0.5, 1.0, 1.0])
    back = Recorder.from_arrays(rec.to_arrays())
    np.testing.assert_allclose(back.ratios(3)[0], delta)
    np.testing.assert_allclose(back.ratios(3)[1], key)


def test_record_video_learns_compression_of_a_compressible_clip():
    """On a clip whose frames brighten one flat block step by step, zstd/lz4 shrink the input hop's updates
    (the same value at every changed pixel): the learned input-hop ratio is well below 1."""
    import torch

    from cnnvideo.model.graph import LayerGraph
    from cnnvideo.plan.predict import fit_recorder, record_video
    from cnnvideo.wire import codec

    if codec._auto_code(1) == codec.NONE:
        pytest.skip("no compressor installed")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten()).eval()
    g = LayerGraph.from_model(model, (64, 64))
    frames = []
    for i in range(6):
        f = np.full((64, 64, 3), 100, dtype=np.uint8)
        f[8:56, 8:56] = 100 + 10 * i  # a flat square brightening
        frames.append(f)
    preds = fit_recorder(record_video(g, frames), g)
    assert preds.ratio[0] < 0.9
    raw = record_video(g, frames, compress="none")
    assert np.all(np.abs(raw.ratios(len(g.cuts))[0][1:] - 1.0) < 0.2)  # the size model is near-exact uncompressed


def _recorded_clip(n=12):
    import torch

    from cnnvideo.model.graph import LayerGraph
    from cnnvideo.plan.predict import record_video
    from cnnvideo.video.frames import synthetic_frames

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten()).eval()
    g = LayerGraph.from_model(model, (32, 48))
    return g, record_video(g, list(synthetic_frames(n, (32, 48), seed=3)))


def test_split_keeps_the_keyframe_with_the_head_and_every_delta_frame_once():
    """Recorder.split(n): the head holds the keyframe's raw rate plus n delta frames, the tail the rest."""
    _, rec = _recorded_clip(12)
    head, tail = rec.split(8)
    assert (head.frames, tail.frames) == (8, 3)
    for k, v in rec.arrays().items():
        np.testing.assert_array_equal(np.concatenate([head.arrays()[k], tail.arrays()[k]]), v)
        assert len(head.sizes()[k]) == 8 and len(tail.sizes()[k]) == 3
    assert len(head._raw[0]) == 9 and head._key == rec._key


def test_trainer_fit_fraction_holds_frames_out_for_validation():
    """trainer.fit_fraction: the predictors are fitted on the first fraction of the frames only (identical to a fit
    of that part) and validated on the rest; at 1.0 nothing is held out."""
    from cnnvideo.plan.predict import fit_recorder, validate
    from cnnvideo.trainer.role import fit_holding_out

    g, rec = _recorded_clip(12)
    preds, check = fit_holding_out(rec, g, 0.75)
    head, held = rec.split(8)  # 12 frames x 0.75 = 9 frames fitted: the keyframe + 8 deltas
    np.testing.assert_array_equal(preds.predict_bytes(preds.input_nz), fit_recorder(head, g).predict_bytes(
        preds.input_nz))
    assert check == validate(preds, held) and check["frames"] == 3 and 0 <= check["mape"] < 10
    everything, none = fit_holding_out(rec, g, 1.0)
    assert none == {}
    np.testing.assert_array_equal(everything.input_nz, fit_recorder(rec, g).input_nz)
