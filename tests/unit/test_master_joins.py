"""The pure parts of a worker joining the pool: admission (token, rate), the pool's state growing by one worker
(membership, dispatch, input links, hop plan), the scheduler taking over with the record of plans, the config's
join rules, the joiner's checks, and a worker's run learning a joined peer."""
from __future__ import annotations

import types

import pytest

from cnnvideo import config
from cnnvideo.errors import ConfigError
from cnnvideo.master.pool import Pool
from cnnvideo.master.pool.admission import Admission, JoinRefused
from cnnvideo.master.worker_answers import joiner_problem
from cnnvideo.plan.costmodel import random_inputs
from cnnvideo.plan.plan import Plan
from cnnvideo.plan.schedulers import create
from cnnvideo.wire.protocol import HopPlanner, HopSettings
from cnnvideo.worker.runloop import Run, RunSettings


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_admission_refuses_a_wrong_token_and_too_many_attempts_then_refills():
    """The token is checked on every attempt; attempts beyond the burst are refused until the bucket refills at the
    configured rate, wrong tokens included (guessing is slowed down too)."""
    clock = Clock()
    adm = Admission("s3cret-token-0123456789", per_minute=6, burst=2, clock=clock)
    adm.admit("s3cret-token-0123456789")
    with pytest.raises(JoinRefused) as exc:
        adm.admit("wrong")
    assert exc.value.code == "PERMISSION_DENIED" and str(exc.value) == "wrong join token"
    with pytest.raises(JoinRefused) as exc:
        adm.admit("s3cret-token-0123456789")
    assert exc.value.code == "RESOURCE_EXHAUSTED"
    clock.t += 10.0  # 6 a minute: one attempt back
    adm.admit("s3cret-token-0123456789")
    assert list(adm.refused) == ["wrong join token", "joins are rate-limited (6 a minute): try again later"]
    open_door = Admission("", clock=clock)  # no token asked (loopback or TLS): any token passes
    open_door.admit("anything")


def test_an_intruder_trying_again_and_again_is_logged_once_in_a_while_and_kept_bounded():
    """Refusals of one kind are logged at most once every 10 s, the next line saying how many were not; the record
    of refusals stays bounded however many attempts come."""
    import logging

    clock = Clock()
    adm = Admission("s3cret-token-0123456789", per_minute=1e9, burst=1e9, clock=clock)
    lines = []

    class Catch(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    log = logging.getLogger("test-admission")
    log.addHandler(Catch())
    for _ in range(500):
        clock.t += 0.01
        try:
            adm.admit("wrong")
        except JoinRefused as exc:
            adm.say(log, exc, "10.0.0.9:50060", "ipv4:10.0.0.9:4242")
    assert len(lines) == 1 and lines[0].endswith("wrong join token") and adm.counts == {"PERMISSION_DENIED": 500}
    clock.t += 10.0
    try:
        adm.admit("wrong")
    except JoinRefused as exc:
        adm.say(log, exc, "10.0.0.9:50060", "")
    assert len(lines) == 2 and "(and 499 more like it in the last 10 s)" in lines[1]
    assert len(adm.refused) == 100


def test_the_pool_grows_by_one_worker_that_gets_no_frame_until_a_plan_names_it():
    """add_worker gives the next id, a dispatcher slot with nothing outstanding, an input link with a pacer slot, and
    records the join; routes of the old plan never name it, routes of a plan with it do."""
    cfg = config.Config()
    cfg.local.links = "paced"
    pool = Pool(cfg, 2)
    w = pool.add_worker(cfg, 0, 12.5, "10.0.0.9:50060")
    assert w == 2 and pool.membership.n == 3 and pool.membership.stream_epochs == [0, 0, 0]
    assert pool.dispatcher.outstanding == [0, 0, 0] and pool.inputs.n == 3 and len(pool.inputs.pacers) == 3
    assert pool.inputs.pacers[2] is not None  # a joined worker's link is paced like the last configured one
    assert pool.membership.events[-1] == {"generation": 0, "left_out": [], "back": [], "joined": [2],
                                          "address": "10.0.0.9:50060", "scope": "joined", "at_s": 12.5}
    old, new = Plan((0, 5), ((0, 1),)), Plan((0, 5), ((0, 1, 2),))
    for _ in range(6):
        r = pool.dispatcher.route(old)
        assert r[0] in (0, 1)
        pool.dispatcher.take(r)
    assert pool.dispatcher.route(new) == [2]  # the idle newcomer has the fewest outstanding
    assert not pool.membership.stale(2) and pool.membership.stale(2, epoch=5)


def test_the_hop_plan_grows_for_longer_plans():
    """A pool of 3 that grows to 4 plans a 4-stage chain: its new hop keyframes first."""
    hp = HopPlanner(3)
    hp.plan(0, [0, 1, 2, 3])
    hp.grow(4)
    key, epochs = hp.plan(1, [0, 1, 2, 3, 4])
    assert key == [False, False, False, True] and len(epochs) == 4


def test_bandwidth_of_a_worker_past_the_list_is_the_last_links():
    cfg = config.Config()
    cfg.bandwidth = [3.0, 5.0]
    assert cfg.bandwidth_bytes() == [3e6, 5e6]
    assert cfg.bandwidth_bytes(4) == [3e6, 5e6, 5e6, 5e6]


def test_a_scheduler_for_the_grown_pool_takes_over_with_the_record_of_plans():
    """take_over returns the new pool's first plan and keeps the old scheduler's decisions before it, so the report
    lists every plan the run used and from which frame."""
    old = create("replicas", random_inputs(2, 5, seed=1), 2, True, {}, 5)
    first = old.initial_plan()
    new = create("replicas", random_inputs(3, 5, seed=1), 2, True, {}, 5)
    plan = new.take_over(old, 40)
    assert plan.groups == ((0, 1, 2),) and first.groups == ((0, 1),)
    assert [f for f, _ in new.decisions] == [0, 40] and [p for _, p in new.plans] == [first, plan]


@pytest.mark.parametrize("cluster, problem", [
    ({"join": "nohost"}, "config key 'cluster.join' must be host:port"),
    ({"join": "10.1.2.3:50070"}, "config key 'cluster.join_token' (or environment variable CNNVIDEO_JOIN_TOKEN) is "
                                 "required when cluster.join is '10.1.2.3:50070'"),
    ({"join": "10.1.2.3:50070", "join_token": "short"}, "config key 'cluster.join_token' must be at least 16"),
    ({"workers": "[]"}, "config key 'cluster.workers' must list at least one worker address (or set cluster.join"),
    ({"join": "127.0.0.1:50070", "workers": "[]", "min_workers": 0}, "config key 'cluster.min_workers' must be >= 1"),
])
def test_join_config_errors_name_the_key(tmp_path, cluster, problem, monkeypatch):
    """Joins off loopback need a token (or TLS); a bad address or a short token is one line naming the key."""
    monkeypatch.delenv("CNNVIDEO_JOIN_TOKEN", raising=False)
    path = tmp_path / "c.yml"
    path.write_text("cluster:\n" + "".join("  %s: %s\n" % kv for kv in cluster.items()))
    with pytest.raises(ConfigError) as exc:
        config.load(str(path), check_files=False)
    assert problem in str(exc.value)
    path.write_text("cluster:\n  join: 127.0.0.1:50070\n")  # loopback: no token needed
    assert config.load(str(path), check_files=False).cluster.join == "127.0.0.1:50070"


def test_a_pool_of_joining_workers_only_is_a_valid_config(tmp_path):
    """`cluster.workers: []` with `cluster.join`: the pool is the workers that join; any bandwidth list is taken
    (its last entry serves the workers past it)."""
    path = tmp_path / "c.yml"
    path.write_text("cluster:\n  join: 127.0.0.1:50070\n  workers: []\n  min_workers: 3\nbandwidth: [3, 2]\n")
    cfg = config.load(str(path), check_files=False)
    assert cfg.cluster.workers == [] and cfg.cluster.min_workers == 3 and cfg.bandwidth_bytes(3)[2] == 2e6


def test_startrun_names_each_worker_unless_it_names_one():
    """The master stamps each worker's id on a StartRun for all (a worker that joined learns its id from it); one
    naming a worker (a joiner's own) is sent as it is, and a message without the roster is left alone."""
    from cnnvideo.master.links import own_id
    from cnnvideo.rpc import cnnvideo_pb2 as pb

    msg = pb.RunSetup(n_workers=3, workers=["a:1", "b:1", "c:1"], worker_id=-1)
    assert [own_id(msg, w).worker_id for w in range(3)] == [0, 1, 2] and msg.worker_id == -1
    joined = pb.RunSetup(n_workers=3, workers=["a:1", "b:1", "c:1"], worker_id=2)
    assert own_id(joined, 0) is joined
    assert own_id(pb.RunSetup(n_workers=2, worker_id=-1), 1).worker_id == -1


def _info(model="m", size=(96, 128), shapes=((1, 3), (1, 8)), engine="onnxruntime-int8"):
    cuts = [types.SimpleNamespace(shape=s) for s in shapes]
    return types.SimpleNamespace(model=model, frame_size=list(size), cuts=cuts, engine=engine)


def test_a_joiner_that_runs_another_model_size_or_engine_is_named():
    first = _info()
    assert joiner_problem(_info(), first, "m", (96, 128)) == ""
    assert "the pool runs m at 96x128" in joiner_problem(_info(size=(480, 720)), first, "m", (96, 128))
    assert joiner_problem(_info(engine="torch-fp32"), first, "m", (96, 128)) == \
        "it runs engine torch-fp32; the pool runs onnxruntime-int8"


def test_a_workers_run_learns_a_joined_peer_only_as_the_next_id():
    """Peer with an address adds the worker at the run's next id (routes may then name it); another id, or a peer
    the run does not have, is refused."""
    settings = RunSettings("r1", 2, HopSettings(), 0, workers=("a:1", "b:2"), worker_id=1)
    run = Run(settings, -1, [(1, 4, 4, 3), (1, 8)], lambda s, e, x: x, None, 1 << 20)
    try:
        assert run.worker_id == 1 and run.n_workers == 2
        with pytest.raises(ValueError, match="the run's next id is 2"):
            run.peer(3, False, "d:4")
        run.peer(2, False, "c:3")
        assert run.n_workers == 3 and run.address_of(2, []) == "c:3" and run.address_of(0, []) == "a:1"
        run.peer(2, False, "c:3")  # told twice (a retried Peer call): the same
        assert run.n_workers == 3
        with pytest.raises(ValueError, match="no worker 5"):
            run.peer(5, True)
    finally:
        run.close()
