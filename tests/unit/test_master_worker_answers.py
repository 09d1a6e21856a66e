"""The master's checks of the workers' setup answers: a worker at the wrong place in the chain or running another
model, frame size or cut list is refused naming it; codec times are taken only when every worker sent usable
ones."""
import numpy as np
import pytest

from cnnvideo.master.links import MasterError
from cnnvideo.master.worker_answers import check_infos, codec_times
from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import convert

ADDR = ["h0:1", "h1:2"]


def _info(w, model="alexnet", size=(64, 96), shapes=((1, 3, 64, 96), (1, 64, 7, 11))):
    return pb.WorkerInfo(worker_id=w, model=model, frame_size=list(size),
                         cuts=[pb.CutInfo(index=i, shape=list(s)) for i, s in enumerate(shapes)])


def test_matching_workers_pass_and_each_mismatch_is_named():
    check_infos([_info(0), _info(1)], "alexnet", [64, 96], ADDR)
    with pytest.raises(MasterError, match="worker at h1:2 says it is w0, the config puts it at w1"):
        check_infos([_info(0), _info(0)], "alexnet", [64, 96], ADDR)
    for bad in (_info(1, model="vgg16"), _info(1, size=(96, 128)), _info(1, shapes=((1, 3, 64, 96),))):
        with pytest.raises(MasterError, match="worker w1 at h1:2 runs .* the master expects alexnet at \\[64, 96\\]"):
            check_infos([_info(0), bad], "alexnet", [64, 96], ADDR)


def _costs(w, enc, dec):
    return pb.SegmentCosts(worker_id=w, encode=convert.to_array(np.asarray(enc, dtype=np.float64)),
                           decode=convert.to_array(np.asarray(dec, dtype=np.float64)))


def test_codec_times_stacked_or_none_when_any_worker_lacks_them(caplog):
    enc, dec = codec_times([_costs(0, [1, 2, 3], [4, 5, 6]), _costs(1, [7, 8, 9], [1, 1, 1])], 3)
    assert enc.shape == (2, 3) and dec[1].tolist() == [1, 1, 1]
    assert codec_times([_costs(0, [1, 2, 3], [4, 5, 6]), _costs(1, [1, 2], [4, 5])], 3) == (None, None)
    assert codec_times([_costs(0, [1, np.nan, 3], [4, 5, 6])], 3) == (None, None)
    assert codec_times([pb.SegmentCosts(worker_id=0)], 3) == (None, None)
    assert "worker 0 sent no usable codec profile" in caplog.text
