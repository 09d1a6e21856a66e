"""cnnvideo.wire.settings: the settings that change results, as fields plus a digest, and the one-line refusal."""
import json

from cnnvideo import config
from cnnvideo.rpc import convert
from cnnvideo.wire import settings


def _cfg(**data):
    return config.from_dict(data, check_files=False)


def test_equal_configs_agree_and_the_digest_follows_every_key():
    """Same settings -> same digest and no difference; each result-changing key changes the digest."""
    base = settings.of(_cfg(), settings.TRAINER_KEYS, "master")
    assert settings.difference(settings.of(_cfg(), settings.TRAINER_KEYS, "trainer"), base, base.digest) == ""
    changes = [{"delta": {"input_threshold": 2}}, {"delta": {"threshold": 0.02}}, {"delta": {"fp16": True}},
               {"trainer": {"frames": 10}}, {"trainer": {"fit_fraction": 1.0}}, {"frame_size": [240, 360]},
               {"model": "vgg16"}, {"seed": 1}, {"weights": "imagenet"}]
    digests = {settings.of(_cfg(**c), settings.TRAINER_KEYS).digest for c in changes}
    assert len(digests) == len(changes) and base.digest not in digests
    # what does not change results is left out (a worker's address, the scheduler, the frame count)
    other = _cfg(scheduler="lbs", frames=5, bandwidth=[1.0], cluster={"workers": ["a:1", "b:2", "c:3"]})
    assert settings.of(other, settings.TRAINER_KEYS).digest == base.digest


def test_a_threshold_mismatch_names_the_key_and_both_values():
    """The refusal is one line: 'delta.input_threshold: master 2, trainer 0'."""
    master = settings.of(_cfg(delta={"input_threshold": 2}), settings.TRAINER_KEYS, "master")
    trainer = settings.of(_cfg(), settings.TRAINER_KEYS, "trainer")
    assert settings.difference(trainer, master, master.digest) == "delta.input_threshold: master 2, trainer 0"


def test_missing_settings_a_stale_digest_and_an_unknown_key_are_refused():
    """No settings at all, a digest that does not match the fields, or a key only one side has: refused."""
    mine = settings.of(_cfg(), settings.WORKER_KEYS, "w0")
    assert "no settings" in settings.difference(mine, settings.Settings({}, "master"))
    forged = settings.Settings(dict(mine.fields, seed="7"), "master")
    assert "digest" in settings.difference(mine, forged, mine.digest)
    extra = settings.Settings(dict(mine.fields, later_key=json.dumps("x")), "master")
    assert settings.difference(mine, extra, extra.digest) == 'later_key: master "x", w0 (unset)'


def test_keys_the_config_lacks_are_left_out_and_engine_precision_count():
    """A key the config does not have is skipped; engine and precision are settings that change results."""
    cfg = _cfg()
    fields = settings.of(cfg, settings.WORKER_KEYS + ("no.such_key",)).fields
    assert "no.such_key" not in fields and json.loads(fields["engine"]) == "torch"
    int8 = settings.of(_cfg(precision="int8"), settings.WORKER_KEYS)
    assert int8.digest != settings.of(cfg, settings.WORKER_KEYS).digest
    assert json.loads(fields["frame_size"]) == [480, 720] and json.loads(fields["delta.fp16"]) is False


def test_proto_round_trip_and_refusal():
    """Settings travel as proto Settings; convert.refusal compares a request's with this role's config."""
    msg = convert.settings_to_pb(settings.of(_cfg(delta={"threshold": 0.5}), settings.WORKER_KEYS, "master"))
    back, digest = convert.settings_from_pb(msg)
    assert digest == back.digest and back.role == "master"
    assert convert.refusal(_cfg(), settings.WORKER_KEYS, "w1", msg) == "delta.threshold: master 0.5, w1 0.0"
    assert convert.refusal(_cfg(delta={"threshold": 0.5}), settings.WORKER_KEYS, "w1", msg) == ""
