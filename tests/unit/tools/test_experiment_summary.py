"""Experiment summary: issue 12's criteria (predicted fps within 10% of measured, optimal within 5% of the best
scheduler) and the engines-against-torch table, on rows built the way summarise() builds them."""
from cnnvideo.tools.experiment.summary import criteria, engine_table, pred_err


def _row(variant, m, sched, fps, pred, **kw):
    row = {"id": "%s_%s_m%d_bw3" % (sched, variant, m), "variant": variant, "bandwidth": 3, "in_flight": m,
           "scheduler": sched, "fps": fps, "pred_fps": pred, "frames": 10, "completed": 10}
    row.update(kw)
    return row


def test_criteria_count_runs_within_10_percent_and_optimal_within_5_percent_of_the_best():
    """A group where every prediction is within 10% and optimal is 4% below das passes both; a group with one
    prediction 20% off and optimal 10% below the best fails both, and the counts and ratio say by how much."""
    rows = [_row("torch", 1, "lbs", 1.0, 1.05), _row("torch", 1, "optimal", 1.92, 2.0),
            _row("torch", 1, "das", 2.0, 1.9),
            _row("ort", 6, "lbs", 3.0, 3.6), _row("ort", 6, "optimal", 2.7, 2.8), _row("ort", 6, "das", 3.0, 3.1)]
    got = {(c["variant"], c["in_flight"]): c for c in criteria(rows)}
    ok, bad = got[("torch", 1)], got[("ort", 6)]
    assert ok["within"] == 3 and ok["model_ok"] and ok["optimal_ok"] and ok["best"] == "das"
    assert abs(ok["optimal_vs_best"] - 0.96) < 1e-9
    assert bad["within"] == 2 and not bad["model_ok"] and not bad["optimal_ok"]
    assert abs(bad["worst_err"] - 0.2) < 1e-9 and abs(bad["optimal_vs_best"] - 0.9) < 1e-9
    assert abs(pred_err(rows[3]) - 0.2) < 1e-9


def test_engine_table_compares_each_engines_best_run_with_torchs():
    """Each variant's best run against torch's best in the same in-flight group: ratio, bytes per frame per hop
    of that run, the largest max_abs_err and the mean top-1 agreement over the variant's runs."""
    rows = [_row("torch", 6, "lbs", 1.0, 1.0, bytes_m_w0=1e6, bytes_w0_w1=5e6, max_abs_err=0.0, top1_agreement=1.0),
            _row("torch", 6, "das", 1.2, 1.2, bytes_m_w0=1e6, bytes_w0_w1=4e6, max_abs_err=0.0, top1_agreement=1.0),
            _row("int8", 6, "lbs", 3.6, 3.0, bytes_m_w0=1e6, bytes_w0_w1=1e6, max_abs_err=0.9, top1_agreement=0.7),
            _row("int8", 6, "das", 3.0, 3.0, bytes_m_w0=1e6, bytes_w0_w1=2e6, max_abs_err=1.1, top1_agreement=0.8)]
    got = {e["variant"]: e for e in engine_table(rows)}
    assert got["torch"]["vs_torch"] == 1.0 and got["torch"]["best"] == "das"
    assert got["int8"]["vs_torch"] == 3.0 and got["int8"]["best"] == "lbs"
    assert got["int8"]["kB_w0_w1"] == 100.0 and got["torch"]["kB_w0_w1"] == 400.0
    assert got["int8"]["max_abs_err"] == 1.1 and abs(got["int8"]["top1_agreement"] - 0.75) < 1e-9
