"""results.jsonl: a line per frame once its result and every hop of its plan are known, in any arrival order;
close() writes what is left; report.html's strip shows a thumbnail per labelled frame."""
import json

import numpy as np

from cnnvideo.master.results_log import ResultsLog, plan_hops
from cnnvideo.results import report as rpt

TOP5 = [[249, "malamute", 0.7], [248, "Eskimo dog", 0.1], [250, "Siberian husky", 0.05], [1, "goldfish", 0.01],
        [2, "great white shark", 0.01]]


def test_plan_hops_stop_at_the_last_worker_with_work():
    """Workers after the last one with layers are skipped: its result goes straight to the master."""
    assert plan_hops([0, 3, 7, 9]) == ["m->w0", "w0->w1", "w1->w2", "w2->m"]
    assert plan_hops([0, 3, 9, 9]) == ["m->w0", "w0->w1", "w1->m"]
    assert plan_hops([0, 9]) == ["m->w0", "w0->m"]


def test_lines_wait_for_every_hop_then_close_flushes(tmp_path):
    """Frame 0's worker report comes after its result: its line is written only then; frame 1 misses a report
    and is written by close()."""
    path = str(tmp_path / "results.jsonl")
    log = ResultsLog(path)
    log.sent(0, [0, 3, 9], 100.0, 5000)
    log.sent(1, [0, 3, 9], 100.5, 600)
    log.result(0, 100.9, TOP5, "w1->m", 4000)
    assert open(path).read() == ""
    log.hop(0, "w0->w1", 2000)
    log.result(1, 101.2, TOP5, "w1->m", 3900)
    lines = [json.loads(x) for x in open(path)]
    assert lines == [{"frame": 0, "capture_time": 100.0, "result_time": 100.9, "top5": TOP5, "cuts": [0, 3, 9],
                      "bytes": {"m->w0": 5000, "w1->m": 4000, "w0->w1": 2000}, "reused": False}]
    log.close()
    lines = [json.loads(x) for x in open(path)]
    assert [x["frame"] for x in lines] == [0, 1] and "w0->w1" not in lines[1]["bytes"]


def test_report_html_thumbnail_strip(tmp_path):
    """Each thumbnail is an inline JPEG with its frame's top-1 label under it."""
    frame = np.zeros((48, 64, 3), dtype=np.uint8)
    uri = rpt.thumbnail_uri(frame, 32)
    assert uri.startswith("data:image/jpeg;base64,")
    html = rpt.thumbs_html([(0, uri, "malamute", 0.7), (5, uri, "Eskimo dog", 0.2)])
    assert html.count('class="thumb"') == 2 and "#5 Eskimo dog" in html
