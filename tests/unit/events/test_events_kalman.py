"""cnnvideo.events.kalman: the Kalman tracker holds ids through misses and crossings, with frames skipped; it
keeps the IouTracker's contract (min_frames, expiry by capture time, ids in announcement order); the filter
follows constant velocity in capture time; `kind` picks the tracker and bad settings name their key."""
import numpy as np
import pytest

from cnnvideo.events import pipeline_from_config
from cnnvideo.events.kalman import KalmanTracker, kf_init, kf_predict, kf_update, xyxy_to_z, z_to_xyxy
from cnnvideo.events.tracker import IouTracker, TrackerSettings
from cnnvideo.events.trackers import make_tracker
from cnnvideo.events.types import Detection, EventsConfigError

FPS = 10.0
T0 = 1700000000.0


def box_at(x, y, w=40, h=100):
    return (x, y, x + w, y + h)


def crossing(kind, step):
    """Two people walk past each other (B 10 px lower); A is hidden behind B for frames 19-21; every `step`-th
    frame is processed. Returns {track id: x of its matched boxes} (coasted boxes, score 0, left out)."""
    tr = make_tracker(TrackerSettings(kind=kind, min_frames=2))
    xs = {}
    for f in range(0, 40, step):
        dets = [Detection("person", 0.8, box_at(340 - 8 * f, 110))]
        if f not in (19, 20, 21):
            dets.insert(0, Detection("person", 0.8, box_at(20 + 8 * f, 100)))
        for e in tr.update(f, T0 + f / FPS, dets):
            if e.type in ("new", "update") and e.score > 0:
                xs.setdefault(e.track_id, []).append(e.box[0])
    return xs


@pytest.mark.parametrize("step", [1, 2])
def test_one_id_each_through_a_miss_and_a_crossing(step):
    """With A missed while it overlaps B, the Kalman tracker keeps ids 1 (A, moving right) and 2 (B, left) from
    start to end, with every frame and with every other frame skipped; the IoU tracker swaps or splits there."""
    xs = crossing("kalman", step)
    assert sorted(xs) == [1, 2]
    assert np.all(np.diff(xs[1]) > 0) and np.all(np.diff(xs[2]) < 0)
    assert len(xs[1]) == len(range(0, 40, step)) - len({19, 20, 21} & set(range(0, 40, step))) - 1  # all but 1st
    old = crossing("iou", step)
    assert len(old) > 2 or any(len(set(np.sign(np.diff(v)))) > 1 for v in old.values())


def test_a_missed_frame_coasts_on_the_prediction():
    """A confirmed track the detector misses for one frame sends an `update` with score 0 and the box where the
    filter expects it (moving on at 10 px a frame); after coast_s it goes quiet, after max_unseen_s it ends."""
    tr = KalmanTracker(TrackerSettings(min_frames=2, coast_s=0.15, max_unseen_s=0.5))
    for f in range(12):
        tr.update(f, T0 + f / FPS, [Detection("person", 0.9, box_at(10 * f, 50))])
    ev = tr.update(12, T0 + 1.2, [])
    assert [(e.type, e.track_id, e.score) for e in ev] == [("update", 1, 0.0)]
    assert ev[0].box == pytest.approx(box_at(120, 50), abs=2.0)
    assert tr.update(13, T0 + 1.3, []) == []  # 0.2 s unseen > coast_s
    assert [e.type for e in tr.update(17, T0 + 1.7, [])] == ["end"]  # 0.6 s > max_unseen_s


def test_contract_of_the_light_tracker():
    """min_frames before `new`, flicker never announced, ids 1, 2 in announcement order, expiry by capture time
    (frame numbers jump, time decides), and `finish` ends what is live."""
    tr = KalmanTracker(TrackerSettings(min_frames=3, max_unseen_s=1.0))
    rng = np.random.default_rng(0)
    events = []
    for f in range(10):
        x, y = rng.uniform(300, 600, 2)
        dets = [Detection("person", 0.9, box_at(5 * f, 0)), Detection("person", 0.4, box_at(x, y, 10, 10))]
        if f >= 4:
            dets.append(Detection("person", 0.9, box_at(200, 200)))
        events += tr.update(f, T0 + f / FPS, dets)
    assert [(e.type, e.track_id, e.frame) for e in events if e.type == "new"] == [("new", 1, 2), ("new", 2, 6)]
    ev = tr.update(500, T0 + 1.8, [Detection("person", 0.9, box_at(200, 200))])  # a frame jump, but 0.9 s
    assert [(e.type, e.track_id) for e in ev] == [("update", 2)]
    ev = tr.update(501, T0 + 2.0, [Detection("person", 0.9, box_at(200, 200))])  # 1 unseen for 1.1 s
    assert [(e.type, e.track_id) for e in ev] == [("update", 2), ("end", 1)]
    assert [(e.type, e.track_id) for e in tr.finish(T0 + 2.1)] == [("end", 2)]
    assert tr.announced == 2


def test_filter_follows_constant_velocity_in_capture_time():
    """Fed a box moving 50 px/s right and 20 px/s down at uneven capture-time steps, the filter predicts its box
    0.5 s ahead within 2 px; predicting by 0 s changes nothing."""
    x, p = kf_init(np.array([box_at(0, 0)]))
    t = 0.0
    for dt in (0.1, 0.2, 0.1, 0.3, 0.1, 0.1, 0.2, 0.1):
        x, p = kf_predict(x, p, dt)
        t += dt
        x, p = kf_update(x, p, xyxy_to_z(np.array([box_at(50 * t, 20 * t)])))
    same, _ = kf_predict(x, p, 0.0)
    assert np.array_equal(same, x)
    ahead, _ = kf_predict(x, p, 0.5)
    assert z_to_xyxy(ahead)[0] == pytest.approx(box_at(50 * (t + 0.5), 20 * (t + 0.5)), abs=2.0)


def test_kind_picks_the_tracker():
    """The pipeline's default tracker is the Kalman one; `kind: iou` gives the light IouTracker."""
    assert isinstance(pipeline_from_config({}, (640, 480)).tracker, KalmanTracker)
    assert type(pipeline_from_config({"tracker": {"kind": "iou"}}, (640, 480)).tracker) is IouTracker
    assert type(make_tracker(TrackerSettings(kind="iou"))) is IouTracker


@pytest.mark.parametrize("tracker,message", [
    ({"kind": "sort"}, "events.tracker.kind: must be one of kalman|iou, got 'sort'"),
    ({"coast_s": -0.1}, "events.tracker.coast_s: must be >= 0 and below max_unseen_s (2.0), or null, got -0.1"),
    ({"coast_s": 2.0, "max_unseen_s": 1.5},
     "events.tracker.coast_s: must be >= 0 and below max_unseen_s (1.5), or null, got 2.0"),
    ({"matcher": "best"}, "events.tracker.matcher: must be one of auto|greedy|hungarian, got 'best'"),
    ({"iou_threshold": 0}, "events.tracker.iou_threshold: must be in (0, 1], got 0"),
])
def test_settings_out_of_range_name_the_key(tracker, message):
    """Each bad tracker setting is refused with one line that names its key and says what it must be."""
    with pytest.raises(EventsConfigError) as info:
        pipeline_from_config({"tracker": tracker}, (640, 480))
    assert str(info.value) == message
    assert "\n" not in str(info.value)


def test_constants_reach_the_filter():
    """KalmanConstants() are the module's constants, and a tracker built with other constants uses them: with a
    gate of 0 no detection continues a track, so a person walking 2 px a frame is never announced (min_frames 2)."""
    from cnnvideo.events import kalman

    assert kalman.KalmanConstants() == kalman.KalmanConstants(kalman.MEAS_POS, kalman.MEAS_SIZE, kalman.PROC_POS,
                                                              kalman.PROC_VEL, kalman.INIT_VEL, kalman.GATE)
    events = {}
    for gate in (kalman.GATE, 0.0):
        tr = KalmanTracker(TrackerSettings(min_frames=2), kalman.KalmanConstants(gate=gate))
        events[gate] = [e.type for f in range(5) for e in tr.update(f, T0 + f / FPS,
                                                                    [Detection("person", 0.9, box_at(10 + 2 * f, 10))])]
    assert events[kalman.GATE].count("new") == 1 and "new" not in events[0.0]
