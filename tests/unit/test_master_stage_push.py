"""The master's stage push without a model or a network: each stage of a plan is built once and sent once to each
worker process that runs it, an older worker (no PutStage) costs one line and no failure, a restarted worker is
sent the file again, and a re-plan's warming answers 'not ready' until its files are pushed."""
import logging
import threading
import time
from types import SimpleNamespace

import grpc

from cnnvideo.master import stage_push as sp
from cnnvideo.master.setup_progress import SetupProgress
from cnnvideo.plan.plan import Plan


class Unimplemented(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.UNIMPLEMENTED


class Stub:
    def __init__(self, w, calls, old=False):
        self.w, self.calls, self.old = w, calls, old

    def PutStage(self, chunks, timeout=None):
        if self.old:
            raise Unimplemented()
        msgs = list(chunks)
        self.calls.append((self.w, msgs[0].start, msgs[0].end, sum(len(m.data) for m in msgs)))


def _push(monkeypatch, n=3, old=()):
    calls = []
    links = SimpleNamespace(addresses=["127.0.0.1:%d" % (50060 + w) for w in range(n)], n=n, timeout=5.0,
                            infos=[SimpleNamespace(instance="i%d" % w) for w in range(n)],
                            stubs=[Stub(w, calls, w in old) for w in range(n)], name=lambda w: "w%d" % w,
                            prepare=lambda plan, live: [(True, "")] * len(live))
    m = SimpleNamespace(live_workers=lambda: list(range(n)))
    push = sp.StagePush(m, SetupProgress(), lambda: links)
    built = []
    factory = SimpleNamespace(graph=SimpleNamespace(), precision="int8")
    push.factory, push.tag = factory, "camera"

    def stage_file(f, start, end):
        built.append((start, end))
        return "key %d..%d" % (start, end), bytes(range(end - start))

    monkeypatch.setattr(sp, "stage_file", stage_file)
    return push, links, calls, built


def test_plan_stages_lists_each_stage_and_its_workers():
    plan = Plan((0, 9, 23), ((0, 1), (2,)))
    assert sp.plan_stages(plan, 3) == {(0, 9): [0, 1], (9, 23): [2]}
    assert sp.plan_stages(plan, 3, only=[1]) == {(0, 9): [1]}
    assert sp.plan_stages([0, 0, 23], 2) == {(0, 23): [1]}  # a chain's cuts; an empty stage runs nothing


def test_each_stage_is_built_once_and_sent_once_to_each_worker(monkeypatch):
    push, links, calls, built = _push(monkeypatch)
    plan = Plan((0, 9, 23), ((0, 1), (2,)))
    push.push(plan)
    push.push(plan)
    assert sorted(built) == [(0, 9), (9, 23)]
    assert sorted(calls) == [(0, 0, 9, 9), (1, 0, 9, 9), (2, 9, 23, 14)]
    links.infos[1] = SimpleNamespace(instance="restarted")  # its memory is gone: sent again, not built again
    push.push(plan, only=[1])
    assert sorted(built) == [(0, 9), (9, 23)] and calls[-1] == (1, 0, 9, 9)


def test_an_older_worker_costs_one_line_and_quantizes_itself(monkeypatch, caplog):
    push, links, calls, built = _push(monkeypatch, n=2, old=(1,))
    with caplog.at_level(logging.WARNING, logger=sp.__name__):
        push.push(Plan((0, 23), ((0, 1),)))
    assert calls == [(0, 0, 23, 23)]
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 1 and "w1 takes no stage files (an older worker)" in lines[0]


def test_a_warmed_plan_is_not_ready_until_its_files_are_pushed(monkeypatch):
    gate = threading.Event()
    push, links, calls, built = _push(monkeypatch, n=2)

    def slow(f, start, end):
        gate.wait(5)
        return "key", b"x"

    monkeypatch.setattr(sp, "stage_file", slow)
    plan = Plan((0, 5, 23))
    assert push.prepare(plan) == [(False, ""), (False, "")]  # quantizing in the background
    gate.set()
    deadline = time.time() + 5
    while push.prepare(plan) != [(True, ""), (True, "")] and time.time() < deadline:
        time.sleep(0.01)
    assert push.prepare(plan) == [(True, ""), (True, "")] and len(calls) == 2


def test_nothing_is_built_without_a_factory():
    push = sp.StagePush(SimpleNamespace(), SetupProgress(), lambda: None)
    push.push(Plan((0, 23)))
    assert push.ready(Plan((0, 23)), [0]) and push.files == {}


def test_a_recalibrations_stages_are_pushed_apart_from_the_runs(monkeypatch):
    """push_calibration builds and sends a plan's stages on a new calibration under a tag of its own and leaves the
    run's factory as it is (a worker joining before the switch gets the stages its StartRun names); configure at the
    switch makes it the run's, and its files are not built again."""
    push, links, calls, built = _push(monkeypatch, n=2)
    run_factory = push.factory
    monkeypatch.setattr(push, "_wanted", lambda: True)
    made = SimpleNamespace(graph=SimpleNamespace(), precision="int8")
    monkeypatch.setattr(push, "_factory", lambda graph: SimpleNamespace(with_calibration=lambda cal: made))
    plan = Plan((0, 23), ((0, 1),))
    push.push_calibration(SimpleNamespace(), SimpleNamespace(digest="abc"), plan, [0, 1])
    assert built == [(0, 23)] and sorted(c[0] for c in calls) == [0, 1]
    assert ("camera abc", 0, 23) in push.files and push.factory is run_factory and push.tag == "camera"
    push.configure(SimpleNamespace(), SimpleNamespace(digest="abc"))
    assert push.factory is made and push.tag == "camera abc"
    push.push(plan)
    assert built == [(0, 23)] and len(calls) == 2  # built and sent once
