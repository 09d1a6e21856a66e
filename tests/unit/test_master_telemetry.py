"""The master's telemetry: spans are all counted but kept only up to the limit, every span reaches the live view's
hook, hops are listed in chain order with the end hop always there, and the engines report says per worker what
was asked and what ran."""
from cnnvideo.master.telemetry import Telemetry, hop_order
from cnnvideo.results import report as rpt
from cnnvideo.rpc import cnnvideo_pb2 as pb


def test_spans_bounded_totals_complete_and_hook_sees_all():
    seen = []
    tel = Telemetry(limit=3)
    tel.span_listeners.append(seen.append)
    for f in range(5):
        tel.span(rpt.StageSpan(f, "w0", "compute", f, f + 0.5))
    assert [s.frame for s in tel.spans] == [0, 1, 2] and len(seen) == 5
    assert tel.stage_totals.summary()["w0"]["compute"]["count"] == 5


def test_hops_in_chain_order_with_the_end_hop():
    assert hop_order(3) == ["m->w0", "w0->w1", "w1->w2", "w0->m", "w1->m", "w2->m"]
    tel = Telemetry()
    tel.hop("w0->w1").add(10, 40, 0.1, True)
    tel.hop("m->w0").add(5, 20, 0.1, False)
    assert tel.hop("m->w0") is tel.hops["m->w0"]
    assert [h.name for h in tel.chain_hops(2)] == ["m->w0", "w0->w1", "w1->m"]
    assert tel.chain_hops(2)[-1].bytes_sent == 0


def test_engines_report_asked_available_ran_and_notes():
    tel = Telemetry()
    tel.engine(0, "onnxruntime-int8", "")
    tel.engine(1, "torch-fp32", "no onnxruntime here")
    tel.engine(1, "torch-fp32", "a later note is not kept")
    infos = [pb.WorkerInfo(worker_id=0, engine="onnxruntime-int8", engine_available=True),
             pb.WorkerInfo(worker_id=1, engine="onnxruntime-int8", engine_available=False)]
    rep = tel.engines_report(infos, 3)
    assert rep[0] == {"worker": "w0", "asked": "onnxruntime-int8", "available": True, "ran": ["onnxruntime-int8"],
                      "notes": []}
    assert rep[1]["available"] is False and rep[1]["notes"] == ["no onnxruntime here"]
    assert rep[2] == {"worker": "w2", "asked": "", "available": None, "ran": [], "notes": []}
