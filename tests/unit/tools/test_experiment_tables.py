"""Experiment summary columns and tables for the detect and scaling experiments (issues 22 and 24): F1 beside
top-1 agreement, latency percentiles, medians over repeats, chain vs edge, and scaling efficiency, on rows built
the way summarise() builds them from synthetic report.json mappings (pure functions: no network, no runs)."""
import pytest

from cnnvideo.tools.experiment.summary import (
    edge_table,
    latency_percentiles,
    medians,
    percentiles,
    ratios_vs,
    scaling,
    start_table,
    summarise,
)


def _run(sched, variant="int8", m=6, workers=None, caps=0.1, repeat=None):
    r = {"id": "%s_%s_m%d_bw3_w%s_c%s_r%s" % (sched, variant, m, workers, caps, repeat), "scheduler": sched,
         "variant": variant, "in_flight": m, "bandwidth": 3, "frames": 4, "caps": caps, "repeat": repeat}
    if workers is not None:
        r["workers"] = workers
    return r


def _report(fps, n=2, f1=None, top1=None, p50=0.2, p95=0.4, cap50=None, cap95=None, per_frame=None):
    """A report.json of an n-worker run (4 frames completed, 40 kB per frame into w0, 10 kB between workers)."""
    hops = [{"name": "m->w0", "bytes_sent": 160000}] + \
        [{"name": "w%d->w%d" % (w, w + 1), "bytes_sent": 40000} for w in range(n - 1)] + \
        [{"name": "w%d->m" % (n - 1), "bytes_sent": 800}]
    rep = {"completed": 4, "throughput_fps": fps, "workers": ["w%d" % w for w in range(n)], "hops": hops,
           "latency_s": {"mean": p50, "p50": p50, "p95": p95, "max": p95}, "top1_agreement": top1}
    if f1 is not None:
        rep["detection_agreement"] = {"precision": 1.0, "recall": f1 / (2 - f1), "f1": f1, "iou_threshold": 0.5}
    if cap50 is not None:
        rep["capture_latency_s"] = {"mean": cap50, "p50": cap50, "p95": cap95, "max": cap95}
    if per_frame is not None:
        rep["latency_s"] = {"mean": None}
        rep["per_frame"] = per_frame
    return rep


def test_rows_carry_f1_for_a_detector_and_top1_for_a_classifier():
    """A detector run's row has detection_agreement.f1 as `f1` and as `agreement`; a classifier run's `agreement`
    is its top-1 agreement and its f1 is empty; kB per frame per hop in chain order."""
    det = summarise(_run("das"), _report(2.0, f1=0.96), 0, 1.0)
    cls = summarise(_run("das", variant="mnv2"), _report(2.0, top1=0.875), 0, 1.0)
    assert det["f1"] == 0.96 and det["agreement"] == 0.96 and det["top1_agreement"] is None
    assert cls["f1"] is None and cls["agreement"] == 0.875
    assert det["hop_kB"] == "m->w0 40, w0->w1 10, w1->m 0.2" and det["kB_w0_w1"] == 10.0
    assert det["workers"] == 2 and det["caps"] == 0.1
    edge = _report(2.0)  # worker 0 ran every layer: results came back on w0->m, w1->m carried nothing
    edge["hops"] = [edge["hops"][0], {"name": "w0->w1", "bytes_sent": 0}, {"name": "w1->m", "bytes_sent": 0},
                    {"name": "w0->m", "bytes_sent": 800}]
    assert summarise(_run("edge"), edge, 0, 1.0)["hop_kB"] == "m->w0 40, w0->w1 0, w0->m 0.2"


def test_latency_percentiles_come_from_the_report_or_its_per_frame_latencies():
    """p50/p95 are report.json's latency_s (send to result) and capture_latency_s (capture to result); a report
    without them gets them from per_frame's latency_s (linear interpolation: 1..10 s gives 5.5 and 9.55), dropped
    frames left out; no capture latency gives None, not 0."""
    row = summarise(_run("lbs"), _report(1.0, p50=0.3, p95=0.9, cap50=1.2, cap95=2.5), 0, 1.0)
    assert (row["latency_p50_s"], row["latency_p95_s"]) == (0.3, 0.9)
    assert (row["capture_p50_s"], row["capture_p95_s"]) == (1.2, 2.5)
    frames = [{"frame": i, "status": "completed", "latency_s": float(i + 1)} for i in range(10)]
    frames.append({"frame": 10, "status": "dropped", "reason": "timeout"})
    rep = _report(1.0, per_frame=frames)
    assert latency_percentiles(rep) == (5.5, 9.55)
    assert latency_percentiles(rep, "capture_latency_s") == (None, None)
    assert percentiles([]) == (None, None)


def test_medians_over_repeats_per_scheduler_and_caps():
    """Three repeats of das (fps 1, 2, 10; p95 0.3, 0.5, 2.0; F1 1, 0.9, 0.95) give medians 2, 0.5, 0.95: one
    outlier run moves nothing. Caps 0.1 and 0.4 stay apart, and ratios_vs keeps them apart too."""
    rows = [summarise(_run("das", repeat=i), _report(f, f1=a, p95=p), 0, 1.0)
            for i, (f, p, a) in enumerate([(1.0, 0.3, 1.0), (2.0, 0.5, 0.9), (10.0, 2.0, 0.95)])]
    rows.append(summarise(_run("das", caps=0.4), _report(7.0, f1=1.0), 0, 1.0))
    got = {e["caps"]: e for e in medians(rows)}
    assert set(got) == {"0.1", "0.4"}
    assert got["0.1"]["runs"] == 3 and got["0.1"]["fps"] == 2.0 and got["0.1"]["latency_p95_s"] == 0.5
    assert got["0.1"]["f1"] == 0.95 and got["0.4"]["fps"] == 7.0
    assert sorted(e["fps_das"] for e in ratios_vs(rows)) == [2.0, 7.0]


def test_chain_vs_edge_is_the_best_scheduler_over_edge_per_group():
    """Per (engine, caps, in flight): the best non-edge scheduler's median fps over edge's median (edge 0.9, 1.0,
    1.1 -> 1.0; das 1.8, 1.9 -> 1.85 beats lbs 1.5: 1.85x); another caps is its own group; with no edge run at
    that N a 1-worker run stands in for one device, and the table says so."""
    rows = [summarise(_run("edge", repeat=i), _report(f), 0, 1.0) for i, f in enumerate((0.9, 1.0, 1.1))]
    rows += [summarise(_run("das", repeat=i), _report(f), 0, 1.0) for i, f in enumerate((1.8, 1.9))]
    rows += [summarise(_run("lbs"), _report(1.5), 0, 1.0)]
    rows += [summarise(_run("edge", caps=0.4), _report(4.0), 0, 1.0),
             summarise(_run("optimal", caps=0.4), _report(5.0), 0, 1.0)]
    rows += [summarise(_run("lbs", variant="fp32", workers=1), _report(1.0, n=1), 0, 1.0),
             summarise(_run("optimal", variant="fp32", workers=2), _report(1.6), 0, 1.0)]
    got = {(e["variant"], e["caps"]): e for e in edge_table(rows)}
    low = got[("int8", "0.1")]
    assert low["best"] == "das" and low["best_fps"] == 1.85 and low["edge_fps"] == 1.0 and low["edge_runs"] == 3
    assert low["best_vs_edge"] == 1.85 and low["best_runs"] == 2
    assert got[("int8", "0.4")]["best_vs_edge"] == 1.25
    fp32 = got[("fp32", "0.1")]
    assert fp32["best_vs_edge"] == 1.6 and fp32["edge_from"].startswith("one device") and fp32["workers"] == 2


def test_scaling_efficiency_is_fps_n_over_n_times_one_device():
    """fps_1 from the 1-worker runs (median 1.0); N = 2 best 1.8 -> 0.9, N = 4 best 3.0 (median of 2.8, 3.0,
    3.2) -> 0.75; edge counts among the best (at N = 3 edge 1.1 beats lbs 0.9: 1.1 / 3.3). Without 1-worker
    runs, edge's median over every N is fps_1 (base `edge`)."""
    rows = [summarise(_run("lbs", workers=1, repeat=i), _report(f, n=1), 0, 1.0)
            for i, f in enumerate((0.9, 1.0, 1.4))]
    rows += [summarise(_run("das", workers=2), _report(1.8), 0, 1.0),
             summarise(_run("edge", workers=2), _report(1.0), 0, 1.0)]
    rows += [summarise(_run("lbs", workers=3), _report(0.9, n=3), 0, 1.0),
             summarise(_run("edge", workers=3), _report(1.1, n=3), 0, 1.0)]
    rows += [summarise(_run("optimal", workers=4, repeat=i), _report(f, n=4, cap50=1.0, cap95=1.5), 0, 1.0)
             for i, f in enumerate((2.8, 3.0, 3.2))]
    got = {e["workers"]: e for e in scaling(rows)}
    assert got[1]["efficiency"] == 1.0 and got[1]["base"] == "1 worker" and got[1]["fps_1"] == 1.0
    assert got[2]["best"] == "das" and got[2]["efficiency"] == 0.9 and got[2]["edge_fps"] == 1.0
    assert got[3]["best"] == "edge" and got[3]["efficiency"] == pytest.approx(0.367, abs=1e-3)
    assert got[4]["fps"] == 3.0 and got[4]["efficiency"] == 0.75 and got[4]["runs"] == 3
    assert got[4]["capture_p95_s"] == 1.5 and got[4]["hop_kB"].startswith("m->w0 40, w0->w1 10")
    no_one = [r for r in rows if r["workers"] != 1]
    base = {e["workers"]: e for e in scaling(no_one)}
    assert base[2]["base"] == "edge" and base[2]["fps_1"] == 1.05
    assert base[2]["efficiency"] == pytest.approx(0.857, abs=1e-3)


def _started(fps, n, first, first_80, after_80, after_60, master_ms=10.0):
    rep = _report(fps, n=n)
    rep["start"] = {"first_result_s": first, "fps_first_80": first_80, "fps_after_80": after_80,
                    "fps_after_60": after_60}
    rep["master"] = {"cpu_per_frame_ms": master_ms}
    return rep


def test_start_table_gives_the_first_result_and_the_steady_rate_against_one_device():
    """Per N the best scheduler's medians (first result, first 80 over the rest, steady fps from the 60th result,
    master CPU a frame) and their ratios to edge's medians: edge first results 1.0 / 1.2 / 0.8 s (median 1.0),
    steady 3.0 / 3.6 / 3.4 (median 3.4); N = 4 optimal steady 12.0 / 12.6 / 13.0 -> 12.6 / 3.4 = 3.706, first
    result 0.8 -> 0.8; lbs at N = 4 is slower and not the one shown. A run without `start` leaves it out."""
    rows = [summarise(_run("edge", workers=1, repeat=i), _started(s, 1, f, s, s, s, 20.0), 0, 1.0)
            for i, (f, s) in enumerate(((1.0, 3.0), (1.2, 3.6), (0.8, 3.4)))]
    rows += [summarise(_run("optimal", workers=4, repeat=i), _started(s - 0.5, 4, 0.8, 0.9 * s, s, s), 0, 1.0)
             for i, s in enumerate((12.0, 12.6, 13.0))]
    rows += [summarise(_run("lbs", workers=4), _started(5.0, 4, 0.5, 5.0, 5.0, 5.0), 0, 1.0)]
    assert rows[0]["first_result_s"] == 1.0 and rows[0]["master_cpu_ms"] == 20.0
    got = {e["workers"]: e for e in start_table(rows)}
    assert got[1]["best"] == "edge" and got[1]["steady_vs_one"] == 1.0 and got[1]["first_vs_one"] == 1.0
    assert got[4]["best"] == "optimal" and got[4]["runs"] == 3
    assert got[4]["fps_after_60"] == 12.6 and got[4]["steady_vs_one"] == pytest.approx(3.706, abs=1e-3)
    assert got[4]["first_result_s"] == 0.8 and got[4]["first_vs_one"] == 0.8
    assert got[4]["first_80_over_rest"] == 0.9 and got[4]["master_cpu_ms"] == 10.0
    bare = summarise(_run("das", workers=2), _report(6.0), 0, 1.0)
    assert bare["first_result_s"] is None
    assert start_table([bare])[0]["first_result_s"] is None
