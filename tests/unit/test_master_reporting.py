"""The per-frame parts of report.json: a completed frame's record and a dropped one's reason, times and spans
relative to the run's start, the layers each worker runs under a plan, and top-1 label counts."""
from cnnvideo.master import reporting
from cnnvideo.results import report as rpt
from cnnvideo.results.report import FrameRecord
from cnnvideo.rpc import cnnvideo_pb2 as pb


def _records():
    done = FrameRecord(0, [0, 2, 3], sent_at=10.0, done_at=10.25, worker=1, error=0.0, status="completed",
                       attempts=1, top5=[[1, "goldfish", 0.9]])
    dropped = FrameRecord(1, [0, 2, 3], sent_at=10.5, status="dropped", attempts=3, reason="w1 is down")
    return [done, dropped]


def test_per_frame_times_and_spans():
    done, dropped = reporting.per_frame(_records())
    assert done == {"frame": 0, "status": "completed", "sends": 1, "latency_s": 0.25, "worker": 1, "cuts": [0, 2, 3],
                    "abs_err": 0.0, "top5": [[1, "goldfish", 0.9]], "reused": False}
    assert dropped == {"frame": 1, "status": "dropped", "sends": 3, "reason": "w1 is down", "cuts": [0, 2, 3]}
    assert reporting.per_frame([FrameRecord(2, [0, 3], status="completed")])[0]["abs_err"] is None  # NaN: not checked
    assert reporting.frame_times(_records(), 10.0) == [{"frame": 0, "sent_s": 0.0, "done_s": 0.25},
                                                       {"frame": 1, "sent_s": 0.5, "done_s": None}]
    assert reporting.span_rows([rpt.StageSpan(3, "w0", "compute", 11.0, 11.5, 7)], 10.0) == \
        [[3, "w0", "compute", 1.0, 1.5, 7]]


def test_plan_layers_and_label_counts():
    info = pb.WorkerInfo(segment_layers=[2, 1, 2], segment_layer_ids=[0, 1, 2, 3, 9],
                         layer_names=["conv1", "relu1", "pool1", "fc"])
    assert reporting.plan_layers(info, [0, 2, 3], 2) == [["conv1", "relu1", "pool1"], ["fc", "9"]]
    recs = _records() + [FrameRecord(5, [0], top5=[[2, "shark", 0.4]]), FrameRecord(6, [0], top5=[[1, "goldfish", 1]])]
    assert list(reporting.label_counts(recs).items()) == [("goldfish", 2), ("shark", 1)]
