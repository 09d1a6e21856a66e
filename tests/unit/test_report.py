"""cnnvideo.results.report.RunReport: the typed report.json every consumer writes and reads (schema version, contract
field names kept)."""
import json

import pytest

from cnnvideo.results import report as rpt

# docs/report-format.md "Contract fields": these names are contracts
CONTRACT = ("frames", "completed", "lost", "model", "mode", "scheduler", "workers", "throughput_fps", "latency_s",
            "hops", "plan", "max_abs_err", "wall_s", "stages")


def _built():
    recs = [rpt.FrameRecord(f, [0, 3, 5], sent_at=f * 0.1, done_at=f * 0.1 + 0.05, status="completed")
            for f in range(4)]
    hop = rpt.HopStats("m->w0")
    hop.add(100, 1000, 0.01, True)
    return rpt.build(frames_total=5, records=recs, hops=[hop], spans=[], model="alexnet", mode="delta",
                     scheduler="das", workers=["a:1", "b:2"], plan_layers=[["conv1"], ["fc"]], wall_s=1.0,
                     max_abs_err=0.0, extra={"retried": 0, "cut_names": ["input", "x", "out"], "outputs_frames": "all"})


def test_write_then_read_gives_the_same_report_with_every_contract_field(tmp_path):
    """build -> write_json -> read round-trips; the JSON keeps every contract field name, plus schema_version and
    the extra fields (outputs_frames among them)."""
    report = _built()
    path = str(tmp_path / "report.json")
    rpt.write_json(report, path)
    data = json.load(open(path))
    assert data["schema_version"] == rpt.SCHEMA_VERSION and list(data)[1:len(CONTRACT) + 1] == list(CONTRACT)
    assert data["outputs_frames"] == "all" and data["lost"] == 1 and data["hops"][0]["name"] == "m->w0"
    back = rpt.read(path)
    assert back == report and back.to_dict() == data
    assert back["completed"] == 4 and back.get("retried") == 0 and back.get("nope", 7) == 7 and "cut_names" in back


def test_a_report_from_before_the_schema_version_reads_as_version_1(tmp_path):
    """Reports written before RunReport existed (no schema_version, no plans_used) still read."""
    data = _built().to_dict()
    del data["schema_version"], data["plans_used"]
    back = rpt.RunReport.from_dict(data)
    assert back.schema_version == 1 and back.plans_used == [] and back.extra["cut_names"][0] == "input"


def test_newer_schema_missing_fields_and_garbage_are_refused(tmp_path):
    """A newer schema, a missing contract field or a non-report file: ReportError naming what is wrong."""
    data = _built().to_dict()
    with pytest.raises(rpt.ReportError, match="newer"):
        rpt.RunReport.from_dict(dict(data, schema_version=rpt.SCHEMA_VERSION + 1))
    del data["latency_s"]
    with pytest.raises(rpt.ReportError, match="latency_s"):
        rpt.RunReport.from_dict(data)
    bad = tmp_path / "report.json"
    bad.write_text("[1, 2")
    with pytest.raises(rpt.ReportError, match="report.json"):
        rpt.read(str(bad))


def test_master_cpu_field():
    """`master` (docs/report-format.md): cpu_s over the run, cpu_per_frame_ms = cpu_s / frames in ms (null without
    frames), frames, check_on_master, setup_cpu_s; it rides in the report's extra fields into report.json."""
    m = rpt.master_cpu(1.23456, 120, True, setup_cpu_s=3.14159)
    assert m == {"cpu_s": 1.235, "cpu_per_frame_ms": 10.288, "frames": 120, "check_on_master": True,
                 "setup_cpu_s": 3.142}
    assert rpt.master_cpu(0.5, 0, False)["cpu_per_frame_ms"] is None
    assert rpt.master_cpu(None, 10, False) == {"cpu_s": None, "cpu_per_frame_ms": None, "frames": 10,
                                               "check_on_master": False, "setup_cpu_s": None}
    rep = rpt.build(frames_total=1, records=[], hops=[], spans=[], model="m", mode="full", scheduler="edge",
                    workers=[], plan_layers=[], wall_s=1.0, extra={"master": m})
    assert json.loads(json.dumps(rep.to_dict()))["master"]["cpu_per_frame_ms"] == 10.288


def test_start_figures_time_the_first_result_and_each_half_of_the_results():
    """report.json `start`: seconds from the first frame read to the first result, and the fps over each half of
    the results in the order they came (a slow start shows as a first half slower than the second)."""
    from cnnvideo.results.report import FrameRecord, start_figures

    recs = [FrameRecord(f, [0, 1], sent_at=10.0 + 0.1 * f) for f in range(8)]
    for f, done in enumerate([12.0, 12.5, 13.0, 14.0, 14.25, 14.5, 14.75, 15.0]):
        recs[f].done_at = done
    recs.append(FrameRecord(8, [0, 1], sent_at=10.8))  # never completed: not counted
    out = start_figures(recs, first_read_at=9.5)
    assert out["first_result_s"] == 2.5
    assert out["fps_first_half"] == 1.0  # 4 results from the first send (10.0) to the 4th result (14.0)
    assert out["fps_second_half"] == 4.0  # 4 more in the next second
    assert out["second_over_first"] == 4.0
    assert out["fps_first_80"] is None and out["fps_after_60"] is None  # too few results for those
    assert set(start_figures(recs[8:], 9.5).values()) == {None}


def test_start_figures_give_the_first_80_against_the_rest_and_the_rate_after_60():
    """Issue 46's start figures: the rate over the first 80 results (from the first send) against the rate from the
    80th result to the last, and the steady rate from the 60th result on. A run whose first 80 frames come at 5
    fps and the next 120 at 10 fps shows 5, 10 and their ratio 2."""
    from cnnvideo.results.report import FrameRecord, start_figures

    times = [0.2 * (i + 1) for i in range(80)] + [16.0 + 0.1 * (i + 1) for i in range(120)]
    recs = [FrameRecord(f, [0, 1], sent_at=0.0) for f in range(200)]
    for rec, done in zip(recs, times):
        rec.done_at = done
    out = start_figures(recs, first_read_at=0.0)
    assert out["fps_first_80"] == 5.0 and out["fps_after_80"] == 10.0 and out["after_80_over_first"] == 2.0
    assert out["fps_after_60"] == 8.75  # the 60th result at 12 s, then 140 more up to 28 s
