"""`cnnvideo bench track`: the noise model is seeded, and on real MOT ground truth (motmetrics' TUD-Campus) the
Kalman tracker reaches the issue's targets where the IoU tracker does not, scored by motmetrics itself."""
import dataclasses

import numpy as np
import pytest

pytest.importorskip("motmetrics")

from cnnvideo.events.tracker import TrackerSettings  # noqa: E402
from cnnvideo.events.trackers import make_tracker  # noqa: E402
from cnnvideo.tools.bench import track  # noqa: E402


def test_noise_model_is_seeded_and_noisy():
    """One seed gives the same detections twice; about 15% of the true boxes are missed, and about 0.3 false
    boxes a frame are added."""
    gt = track.load_gt("TUD-Campus")
    a = track.noisy_detections(gt, 7, 0.15, 0.06, 0.3)
    b = track.noisy_detections(gt, 7, 0.15, 0.06, 0.3)
    assert sorted(a) == sorted(b) == list(range(1, 72)) and all(np.array_equal(a[f], b[f]) for f in a)
    n_true = sum(len(gt[f][0]) for f in gt)
    extra = sum(len(a[f]) for f in a) - 0.85 * n_true
    assert 0.1 * len(a) < extra < 0.6 * len(a)


@pytest.mark.parametrize("keep_every", [1, 2])
def test_kalman_meets_the_targets_on_one_sequence(keep_every):
    """On TUD-Campus, seed 0, 15% misses, 6% jitter, 0.3 false boxes a frame, with all frames and with every
    other frame dropped: the Kalman tracker's IDF1 >= 0.90 with at most 3 ID switches; the IoU tracker is scored
    on the same detections and stays below (it split people into more ids)."""
    gt = track.load_gt("TUD-Campus")
    dets = track.noisy_detections(gt, track.rng_seed("TUD-Campus", 0), 0.15, 0.06, 0.3)
    new = track.run_one(track.factory("kalman", keep_every), gt, dets, keep_every)
    old = track.run_one(track.factory("iou", keep_every), gt, dets, keep_every)
    assert new["idf1"] >= track.TARGET_IDF1 and new["switches"] <= track.TARGET_SWITCHES, new
    assert old["idf1"] < new["idf1"] and old["tracks"] > new["tracks"], (old, new)


SMALL_GRID = {"iou_threshold": (0.3,), "coast_s": (0.1, 0.4), "proc_vel": (0.5,)}


def test_fast_idf1_is_motmetrics_idf1():
    """The grid search's numpy IDF1 equals motmetrics' on the same output (held-out figures come from
    motmetrics, so a drift here would tune for another metric)."""
    gt = track.load_gt("TUD-Campus")
    for noise in track.default_noises():
        clip = track.make_clip("TUD-Campus", gt, noise, 0, 1)
        out = track.play(track.Constants().tracker(), clip)
        assert track.fast_idf1(gt, out) == pytest.approx(track.score(gt, out)["idf1"], abs=1e-9), noise.name


def test_bursty_noise_misses_in_runs():
    """The held-out bursty model is seeded, misses about 15% of the true boxes like the tuning model, but in runs
    (mean run > 2 frames, where independent draws give about 1.2)."""
    gt = track.load_gt("TUD-Stadtmitte")
    a = track.bursty_detections(gt, 3, 0.15, 0.06, 0.0, 5.0)
    assert all(np.array_equal(a[f], track.bursty_detections(gt, 3, 0.15, 0.06, 0.0, 5.0)[f]) for f in a)
    runs, share = [], []
    for pid in np.unique(np.concatenate([ids for ids, _ in gt.values()])).tolist():
        seen = []
        for f in sorted(gt):
            ids, boxes = gt[f]
            if pid in ids.tolist():
                b = boxes[ids.tolist().index(pid)]
                seen.append(bool(len(a[f])) and track.iou_matrix(b[None], a[f][:, :4]).max() >= 0.3)
        missed = ~np.array(seen)
        share.append(missed.mean())
        edges = np.diff(np.concatenate([[0], missed.astype(int), [0]]))
        runs += (np.nonzero(edges == -1)[0] - np.nonzero(edges == 1)[0]).tolist()
    assert 0.08 < np.mean(share) < 0.25 and np.mean(runs) > 2.0, (np.mean(share), np.mean(runs))


def test_each_fold_scores_on_the_sequence_it_did_not_tune_on():
    """The two folds tune on different sequences, and each scores (under every noise model) only on the other."""
    report = track.measure_split(seeds=(0,), keep_every=(1,), grid=SMALL_GRID)
    assert sorted(f.tune for f in report.folds) == sorted(track.SEQUENCES)
    for f in report.folds:
        assert f.tune != f.score and all(c.sequence == f.score for c in f.held_out)
        assert [c.noise for c in f.held_out] == ["base", "heavy", "bursty"]


def test_choice_ignores_corrupted_held_out_data(monkeypatch):
    """Corrupting TUD-Stadtmitte's ground truth (its ids shuffled in every frame; the boxes, so the detections,
    unchanged) leaves the constants chosen on TUD-Campus and their tuning IDF1 exactly as they were, while that
    fold's held-out IDF1 collapses: the held-out data is scored, never used in the choice."""
    clean = track.measure_split(seeds=(0,), keep_every=(1,), grid=SMALL_GRID)
    load = track.load_gt

    def corrupted(sequence):
        gt = load(sequence)
        if sequence == "TUD-Stadtmitte":
            rng = np.random.default_rng(0)
            gt = {f: (rng.permutation(ids) + 1000 * f, boxes) for f, (ids, boxes) in gt.items()}
        return gt

    monkeypatch.setattr(track, "load_gt", corrupted)
    bad = track.measure_split(seeds=(0,), keep_every=(1,), grid=SMALL_GRID)
    a, b = clean.folds[0], bad.folds[0]
    assert a.tune == b.tune == "TUD-Campus"
    assert a.chosen == b.chosen and a.tune_idf1 == b.tune_idf1
    assert b.held_out[0].idf1_mean < 0.5 * a.held_out[0].idf1_mean


def test_defaults_are_the_maximin_of_the_tuning_sides():
    """choose_defaults takes the point whose worse tuning-side score is highest, not the best mean, and says
    whether the library's defaults are that point."""
    points = [track.Constants(), track.Constants(coast_s=0.4)]
    keep = track.choose_defaults(points, {"A": np.array([0.90, 0.97]), "B": np.array([0.90, 0.88])})
    assert keep.maximin == keep.library and keep.library_is_maximin
    move = track.choose_defaults(points, {"A": np.array([0.80, 0.90]), "B": np.array([0.99, 0.89])})
    assert move.maximin["coast_s"] == 0.4 and not move.library_is_maximin


def test_grid_holds_the_library_defaults():
    """Every searched constant's library default is one of the grid's values, so the defaults are searched with
    the rest (and win ties: grid_points puts them first); Constants().tracker() is the library's default tracker."""
    default = track.Constants()
    assert set(track.GRID) == {f.name for f in dataclasses.fields(track.Constants)}
    assert all(getattr(default, name) in values for name, values in track.GRID.items())
    assert track.grid_points()[0] == default
    tr, lib = default.tracker(), make_tracker(TrackerSettings())
    assert (tr._min_frames, tr._iou_threshold, tr._coast, tr.constants) == (
        lib._min_frames, lib._iou_threshold, lib._coast, lib.constants)


def test_before_table_pairs_the_same_fold_and_noise():
    """--before: each held-out cell of this run is shown beside the earlier run's cell of the same tuning
    sequence and noise model, whatever order the folds were stored in."""
    def split(folds):
        return {"folds": [{"tune": t, "score": s, "held_out": [
            {"noise": n, "idf1_mean": v, "switches_max": 1, "tracks_mean": 9.0, "people_mean": 8.0}
            for n, v in cells]} for t, s, cells in folds]}
    new = split([("A", "B", [("base", 0.95), ("heavy", 0.88)]), ("B", "A", [("base", 0.92), ("heavy", 0.84)])])
    old = split([("B", "A", [("heavy", 0.69), ("base", 0.90)]), ("A", "B", [("heavy", 0.74), ("base", 0.96)])])
    rows = [r for r in track.before_lines(new, old, "before.json") if r.startswith("| A") or r.startswith("| B")]
    assert [r.split(" | ")[2:5] for r in rows] == [
        ["base", "0.960", "**0.950**"], ["heavy", "0.740", "**0.880**"],
        ["base", "0.900", "**0.920**"], ["heavy", "0.690", "**0.840**"]]
