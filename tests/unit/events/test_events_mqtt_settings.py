"""cnnvideo.events.mqtt without a broker: topic prefix and settings validation (one-line errors naming the key)
and topic-level sanitising, so a label or camera name can never inject a wildcard or an extra level."""
import pytest

from cnnvideo.events.mqtt import MqttSettings, topic_level, validate_topic_prefix
from cnnvideo.events.types import EventsConfigError


@pytest.mark.parametrize("prefix", ["cnnvideo", "site/cam-net", "a/b/c", "home_1.x"])
def test_good_prefixes(prefix):
    """Plain multi-level prefixes are accepted unchanged."""
    assert validate_topic_prefix(prefix) == prefix


@pytest.mark.parametrize("prefix, why", [
    ("site/+/x", "wildcards"), ("site/#", "wildcards"), ("/site", "start or end"), ("site/", "start or end"),
    ("a//b", "empty level"), ("", "non-empty"), ("$SYS/x", "broker-internal"),
])
def test_bad_prefixes(prefix, why):
    """Wildcards, empty levels, leading/trailing `/`, an empty prefix and `$` topics are refused by key."""
    with pytest.raises(EventsConfigError, match=r"^events\.mqtt\.topic_prefix: .*" + why):
        MqttSettings(topic_prefix=prefix)


def test_settings_errors_name_the_key():
    """Other bad settings name their own field."""
    cases = [(dict(port=0), "events.mqtt.port"), (dict(queue_max=0), "events.mqtt.queue_max"),
             (dict(tls_cert="c.pem"), "events.mqtt.tls_cert"), (dict(password="x"), "events.mqtt.password"),
             (dict(reconnect_min_s=5, reconnect_max_s=2), "events.mqtt.reconnect_max_s"),
             (dict(host=""), "events.mqtt.host"), (dict(host="broker..lan"), "events.mqtt.host"),
             (dict(host="x" * 64 + ".lan"), "events.mqtt.host"),
             (dict(availability="each"), "events.mqtt.availability")]
    for kw, key in cases:
        with pytest.raises(EventsConfigError) as info:
            MqttSettings(**kw)
        assert str(info.value).startswith(key + ":") and "\n" not in str(info.value), (kw, info.value)


def test_topic_level_sanitises():
    """`+`, `#`, `/`, spaces and non-ASCII become `_`: one safe level, also usable as a discovery id."""
    assert topic_level("person") == "person"
    assert topic_level("traffic light") == "traffic_light"
    assert topic_level("a/+/#") == "a____"
    assert topic_level("") == "_"


def test_unreadable_tls_files_are_a_config_error(tmp_path):
    """A CA file that does not exist is reported as events.mqtt.tls_ca when the publisher is made (not later)."""
    pytest.importorskip("paho.mqtt.client")
    from cnnvideo.events.mqtt import MqttPublisher

    with pytest.raises(EventsConfigError, match=r"^events\.mqtt\.tls_ca: cannot load"):
        MqttPublisher(MqttSettings(tls_ca=str(tmp_path / "missing-ca.pem")))
