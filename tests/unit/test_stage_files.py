"""Stage files the master pushes (issue 46 item 2): chunks round trip; a bad digest, an oversized or truncated file,
a stream without a header and a file of another key are refused with one line; the master's int8 file is the one
a worker would have built (same code, same inputs), and a worker given it loads it instead of quantizing."""
import functools
import hashlib
import logging
import os
from types import SimpleNamespace

import numpy as np
import pytest

from cnnvideo.model.engines import stage_files as sf


def _msgs(f, chunk=4, **change):
    out = [SimpleNamespace(**dict(dict(start=0, end=0, precision="", key="", sha256="", size=0), **c))
           for c in sf.chunks(f, chunk)]
    for k, v in change.items():
        setattr(out[0], k, v)
    return out


FILE = sf.StageFile(2, 5, "int8", "model m | cuts 2..5 | int8", b"0123456789abcdef-xyz")


def test_chunks_round_trip():
    msgs = _msgs(FILE)
    assert len(msgs) == 5 and all(len(m.data) <= 4 for m in msgs)
    assert msgs[0].sha256 == hashlib.sha256(FILE.data).hexdigest() and msgs[0].size == len(FILE.data)
    assert not any(m.key for m in msgs[1:])  # the header rides on the first chunk only
    assert sf.assemble(msgs) == FILE


def test_an_empty_file_is_one_chunk():
    f = sf.StageFile(0, 1, "int8", "k", b"")
    assert sf.assemble(_msgs(f)) == f


@pytest.mark.parametrize("change, why", [
    (dict(sha256="0" * 64), "sha256 is .*, the sender said 0000"),
    (dict(size=10), "longer than the 10 bytes announced"),
    (dict(size=30), "ended at 20 of the 30 bytes announced"),
    (dict(key=""), "without a header"),
    (dict(end=1), "without a header"),
    (dict(precision="../../x"), "precision '../../x' refused: one of"),  # it names the file in the cache
])
def test_a_bad_file_is_refused_with_one_line(change, why):
    with pytest.raises(sf.StageFileError, match=why) as exc:
        sf.assemble(_msgs(FILE, **change))
    assert "\n" not in str(exc.value)


def test_an_oversized_file_is_refused_before_its_data_is_held():
    def stream():
        yield _msgs(FILE)[0]
        raise AssertionError("read past the header of an oversized file")

    with pytest.raises(sf.StageFileError, match="20 bytes refused: the limit is 16"):
        sf.assemble(stream(), max_bytes=16)
    with pytest.raises(sf.StageFileError, match="empty stage file stream"):
        sf.assemble([])


def test_the_inbox_gives_a_file_only_to_the_build_of_its_key():
    box = sf.StageInbox()
    box.put(FILE)
    data, why = box.take(2, 5, "int8", "another key")
    assert data is None and "has key %s" % sf.key_tag(FILE.key) in why and "\n" not in why
    assert box.take(2, 6, "int8", FILE.key) == (None, "no file of stage 2..6 from the master")
    assert box.take(2, 5, "int8", FILE.key) == (FILE.data, "")
    assert len(box) == 0  # taken once: the build caches it


def test_the_inbox_drops_the_oldest_past_its_bound():
    box = sf.StageInbox(max_bytes=45)
    for k in range(3):
        box.put(sf.StageFile(0, 1 + k, "int8", "k%d" % k, bytes(20)))
    assert len(box) == 2 and box.take(0, 1, "int8", "k0")[0] is None


# ---------------------------------------------------------------- the int8 stage itself (tiny mobilenet_v2)

FRAME = (64, 96)


@functools.lru_cache(maxsize=1)
def _graph():
    from cnnvideo.model.graph import LayerGraph
    from cnnvideo.model.zoo import build_model

    return LayerGraph.from_model(build_model("mobilenet_v2", "random", seed=0), FRAME)


@functools.lru_cache(maxsize=1)
def _calibration():
    from cnnvideo.model.engines import camera_calibration as cc
    from cnnvideo.video.frames import synthetic_frames

    items = [(f, i / 25.0) for i, f in enumerate(synthetic_frames(12, FRAME, seed=1))]
    return cc.measure(_graph(), "mobilenet_v2 64x96 weights test", cc.sample_frames(items, 3, 3, "cam.avi"))


def _factory(cache):
    from cnnvideo.model.engines import EngineSpec, StageFactory

    f = StageFactory(_graph(), EngineSpec("onnxruntime", "int8", threads=1), str(cache), _calibration().model_key)
    return f.with_calibration(_calibration())


def test_a_worker_loads_the_masters_int8_stage_instead_of_quantizing(tmp_path, caplog):
    pytest.importorskip("onnxruntime")
    from cnnvideo.model.engines import ort_engine

    start, end = 2, 5
    master = _factory(tmp_path / "master")
    key, data = ort_engine.stage_file(master, start, end)
    own = _factory(tmp_path / "own").stage(start, end)  # what a worker builds itself: the same bytes
    with open(own.path, "rb") as fh:
        assert fh.read() == data
    worker = _factory(tmp_path / "worker")
    worker.inbox = sf.StageInbox()
    worker.inbox.put(sf.assemble(_msgs(sf.StageFile(start, end, "int8", key, data), chunk=1 << 16)))
    with caplog.at_level(logging.INFO, logger=ort_engine.__name__):
        st = worker.stage(start, end)
    lines = [r.getMessage() for r in caplog.records]
    assert any("fetched from the master" in line for line in lines), lines
    assert not any("built into" in line for line in lines)
    assert not os.path.exists(tmp_path / "worker" / "tmp")  # no quantizer scratch folder: nothing quantized here
    x = _calibration().to_calibration(_graph()).inputs(start)[0]
    x = master.qparams(start).quantize(x) if master.qparams(start) is not None else x
    np.testing.assert_array_equal(st.run(x), own.run(x))


def test_a_file_of_another_key_is_refused_and_the_worker_quantizes(tmp_path, caplog):
    pytest.importorskip("onnxruntime")
    from cnnvideo.model.engines import ort_engine

    worker = _factory(tmp_path / "worker")
    worker.inbox = sf.StageInbox()
    worker.inbox.put(sf.StageFile(0, 2, "int8", "a stage of another model", b"not onnx"))
    with caplog.at_level(logging.INFO, logger=ort_engine.__name__):
        st = worker.stage(0, 2)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "quantizing int8 here: the master's file of stage 0..2 has key" in warned[0]
    assert st.engine == "onnxruntime" and st.precision == "int8"
