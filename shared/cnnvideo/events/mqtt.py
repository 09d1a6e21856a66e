"""Publish events and live counts to an MQTT broker (paho-mqtt 2.x) without ever holding up the caller.

Topics, under a validated `topic_prefix`:
  <prefix>/<camera>/events          one JSON `Event` per message (QoS 1, not retained)
  <prefix>/<camera>/<label>/count   live tracks of that label (retained: a late subscriber gets the value)
  <prefix>/available                `online` / `offline` (retained; `offline` is also the last will);
  <prefix>/<camera>/available       instead, with `availability: camera` (several cameras: a master each)
  homeassistant/sensor/<id>/config  Home Assistant discovery for each count sensor (retained, optional)

Why a queue of our own: the master calls `publish_event()` from its result path, which must not wait for
a broker. Events go into a bounded deque (the oldest is dropped and counted when it is full); a sender
thread hands them to paho only while connected, keeping at most `max_inflight` unacknowledged, and paho
resends those after a reconnect. paho's own thread (`loop_start`, `connect_async`) connects and reconnects
with backoff (`reconnect_delay_set`), so a broker that is down, goes away, does not resolve or refuses
the credentials costs one log line and some dropped events, never the run.

Where the broker is dialled from: paho's thread (it makes every connect, reconnect and name lookup) keeps the
network namespace of the thread that starts it, so `start(run_in=...)` can start it from another namespace (the
master under `cnnvideo local` with tc links passes cnnvideo.hostnet's `in_netns`: the host's network).
"""
from __future__ import annotations

import collections
import dataclasses
import json
import logging
import re
import socket
import threading
import time
import uuid
from typing import Any, Callable, Deque, Dict, Mapping, Optional, Tuple

from .types import Event, EventsConfigError

LOG = logging.getLogger("cnnvideo.events.mqtt")
LEVEL_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


def validate_topic_prefix(prefix: str, key: str = "events.mqtt.topic_prefix") -> str:
    """`prefix` if it is a usable topic prefix: no wildcards (`+`, `#`), no empty level, no leading or
    trailing `/`, no `$` start (broker-internal topics); EventsConfigError naming `key` otherwise."""
    if not isinstance(prefix, str) or not prefix:
        raise EventsConfigError("%s: must be a non-empty string" % key)
    if "+" in prefix or "#" in prefix:
        raise EventsConfigError("%s: must not contain the wildcards '+' or '#': %r" % (key, prefix))
    if prefix.startswith("/") or prefix.endswith("/"):
        raise EventsConfigError("%s: must not start or end with '/': %r" % (key, prefix))
    if "//" in prefix:
        raise EventsConfigError("%s: has an empty level ('//'): %r" % (key, prefix))
    if prefix.startswith("$"):
        raise EventsConfigError("%s: must not start with '$' (broker-internal topics): %r" % (key, prefix))
    if "\0" in prefix or len(prefix.encode("utf-8")) > 1024:
        raise EventsConfigError("%s: must be at most 1024 bytes with no NUL: %r" % (key, prefix[:40]))
    return prefix


def topic_level(name: str) -> str:
    """`name` made safe as one topic level (and a discovery id): anything but [A-Za-z0-9_.-] becomes `_`."""
    return LEVEL_CHARS.sub("_", name) or "_"


@dataclasses.dataclass(frozen=True)
class MqttSettings:
    """Where and how to publish. `queue_max` bounds events waiting for the broker; reconnects back off from
    `reconnect_min_s` to `reconnect_max_s`; TLS is on when `tls_ca` is set (`tls_cert`/`tls_key` for a
    client certificate)."""

    host: str = "127.0.0.1"
    port: int = 1883
    topic_prefix: str = "cnnvideo"
    client_id: str = ""  # empty: cnnvideo-<random>
    username: Optional[str] = None
    password: Optional[str] = None
    tls_ca: Optional[str] = None
    tls_cert: Optional[str] = None
    tls_key: Optional[str] = None
    ha_discovery: bool = False
    discovery_prefix: str = "homeassistant"
    queue_max: int = 1000
    max_inflight: int = 100
    keepalive: int = 30
    reconnect_min_s: int = 1
    reconnect_max_s: int = 30
    availability: str = "shared"  # shared: <prefix>/available; camera: <prefix>/<camera>/available

    def __post_init__(self):
        self.validate()

    def validate(self, key: str = "events.mqtt") -> None:
        """Raise EventsConfigError naming the first bad field."""
        if not isinstance(self.host, str) or not self.host:
            raise EventsConfigError("%s.host: must be a non-empty host name or address" % key)
        try:  # what the resolver will do with it: an empty or over-long label raises UnicodeError, not OSError,
            self.host.encode("idna")  # which would end paho's network thread instead of being retried
        except UnicodeError:
            raise EventsConfigError("%s.host: not a valid host name: %r" % (key, self.host)) from None
        if not isinstance(self.port, int) or not 0 < self.port < 65536:
            raise EventsConfigError("%s.port: must be 1-65535, got %r" % (key, self.port))
        validate_topic_prefix(self.topic_prefix, key + ".topic_prefix")
        validate_topic_prefix(self.discovery_prefix, key + ".discovery_prefix")
        for name in ("queue_max", "max_inflight", "keepalive", "reconnect_min_s", "reconnect_max_s"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise EventsConfigError("%s.%s: must be an integer >= 1, got %r" % (key, name, v))
        if self.availability not in ("shared", "camera"):
            raise EventsConfigError("%s.availability: must be shared or camera, got %r" % (key, self.availability))
        if self.reconnect_max_s < self.reconnect_min_s:
            raise EventsConfigError("%s.reconnect_max_s: must be >= reconnect_min_s" % key)
        if (self.tls_cert is None) != (self.tls_key is None):
            raise EventsConfigError("%s.tls_cert: tls_cert and tls_key go together" % key)
        if self.tls_cert is not None and self.tls_ca is None:
            raise EventsConfigError("%s.tls_ca: a client certificate needs tls_ca too" % key)
        if self.password is not None and self.username is None:
            raise EventsConfigError("%s.password: set without a username" % key)


@dataclasses.dataclass(frozen=True)
class PublisherStats:
    """published: events the broker acknowledged; queued: events waiting or unacknowledged; dropped: events
    pushed out of the full queue; connected: the session is up now."""

    published: int
    queued: int
    dropped: int
    connected: bool


class MqttPublisher:
    """Non-blocking event/count publisher for one camera; `start()`, then `publish_event()`/`publish_counts()`
    from any thread, `stats()` for the report and metrics, `close()` at the end."""

    def __init__(self, settings: MqttSettings, camera: str = "cam", logger: Optional[logging.Logger] = None):
        import paho.mqtt.client as mqtt

        self.settings = settings
        self.camera = topic_level(camera)
        self.log = logger or LOG
        prefix = settings.topic_prefix
        self.events_topic = "%s/%s/events" % (prefix, self.camera)
        self.available_topic = ("%s/%s/available" % (prefix, self.camera) if settings.availability == "camera"
                                else "%s/available" % prefix)
        self._queue: Deque[Tuple[str, bytes, bool]] = collections.deque()
        self._counts: Dict[str, int] = {}
        self._counts_dirty: Dict[str, int] = {}
        self._announce = False
        self._inflight: Dict[int, bool] = {}  # mid handed to paho, not yet acknowledged -> is an event
        self._inflight_events = 0
        self._early_acks: set = set()
        self._discovered: set = set()
        self._acks: Deque[int] = collections.deque()  # filled by paho's thread: append is atomic
        self._published = 0
        self._dropped = 0
        self._connected = False
        self._closing = False
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._failed_once: Optional[str] = None
        self._sender: Optional[threading.Thread] = None

        client_id = settings.client_id or "cnnvideo-%s" % uuid.uuid4().hex[:12]
        self.client = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                                  protocol=mqtt.MQTTv311, clean_session=True)
        if settings.username is not None:
            self.client.username_pw_set(settings.username, settings.password)
        if settings.tls_ca is not None:
            try:
                self.client.tls_set(ca_certs=settings.tls_ca, certfile=settings.tls_cert, keyfile=settings.tls_key)
            except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
                raise EventsConfigError("events.mqtt.tls_ca: cannot load the TLS files: %s" % e) from None
        self.client.will_set(self.available_topic, "offline", qos=1, retain=True)
        self.client.reconnect_delay_set(settings.reconnect_min_s, settings.reconnect_max_s)
        self.client.max_inflight_messages_set(min(settings.max_inflight, 20))
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_publish = self._on_publish
        self.client.on_connect_fail = self._on_connect_fail

    # --- paho's thread: only flags and atomic appends here (paho holds its own locks while calling us)

    def _on_connect(self, client, userdata, flags, reason_code, properties):
        if reason_code.is_failure:
            what = "connack:%s" % reason_code  # marked so the disconnect that follows is not logged again
            if self._failed_once != what:
                self._failed_once = what
                self.log.warning("events.mqtt: broker %s:%d refused the connection: %s; events are queued "
                                 "(bound %d) and the connection retried", self.settings.host, self.settings.port,
                                 reason_code, self.settings.queue_max)
            return
        self._failed_once = None
        self._connected = True
        self._announce = True
        self.log.info("events.mqtt: connected to %s:%d", self.settings.host, self.settings.port)
        self._wake.set()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties):
        was = self._connected
        self._connected = False
        if self._closing:
            return
        if was:
            self.log.warning("events.mqtt: lost the broker %s:%d (%s); reconnecting with backoff up to %d s",
                             self.settings.host, self.settings.port, reason_code, self.settings.reconnect_max_s)
            return
        # closed before a CONNACK: with TLS 1.3 a refused client certificate ends up here, not in on_connect_fail
        what = "the connection to %s:%d closed before the broker accepted it (%s%s)" % (
            self.settings.host, self.settings.port, reason_code,
            "; a TLS handshake failed or the client certificate was refused?" if self.settings.tls_ca else "")
        if self._failed_once != what and not (self._failed_once or "").startswith("connack:"):
            self._failed_once = what
            self.log.warning("events.mqtt: %s; events are queued (bound %d) and the connection retried every "
                             "%d-%d s", what, self.settings.queue_max, self.settings.reconnect_min_s,
                             self.settings.reconnect_max_s)

    def _on_publish(self, client, userdata, mid, reason_code, properties):
        self._acks.append(mid)
        self._wake.set()

    def _on_connect_fail(self, client, userdata):
        host, port = self.settings.host, self.settings.port
        try:
            socket.getaddrinfo(host, port)
            what = "cannot connect to %s:%d (broker down or unreachable%s)" % (
                host, port, ", or the TLS handshake failed" if self.settings.tls_ca else "")
        except OSError as e:
            what = "broker host %r does not resolve (%s)" % (host, e)
        if self._failed_once != what:
            self._failed_once = what
            self.log.warning("events.mqtt: %s; events are queued (bound %d) and the connection retried every "
                             "%d-%d s", what, self.settings.queue_max, self.settings.reconnect_min_s,
                             self.settings.reconnect_max_s)

    # --- the caller's side

    def start(self, run_in: Optional[Callable[[Callable[[], None]], Any]] = None) -> None:
        """Begin connecting in the background (returns at once; a second call does nothing). `run_in(fn)`, when
        given, runs fn (which starts paho's thread) where the broker is to be dialled from, e.g. another network
        namespace; an OSError from it is logged like any failure to start."""
        if self._sender is not None:
            return
        self._sender = threading.Thread(target=self._send_loop, name="mqtt-sender", daemon=True)
        self._sender.start()

        def begin() -> None:
            self.client.connect_async(self.settings.host, self.settings.port, keepalive=self.settings.keepalive)
            self.client.loop_start()  # makes a loopback socket pair first: fails where 127.0.0.1 is down

        try:
            if run_in is None:
                begin()
            else:
                run_in(begin)
        except (OSError, ValueError) as e:
            self.log.error("events.mqtt: cannot start the MQTT client (%s); events are queued (bound %d) and "
                           "dropped beyond that, the run goes on", e, self.settings.queue_max)

    def publish_event(self, event: Event) -> None:
        """Queue one event (never blocks, never raises; when the queue is full the oldest event is dropped and
        counted)."""
        try:
            payload = event.to_json().encode("utf-8")
        except (TypeError, ValueError) as e:
            self.log.warning("events.mqtt: event not sent, it is not JSON: %s", e)
            with self._lock:
                self._dropped += 1
            return
        with self._lock:
            if len(self._queue) >= self.settings.queue_max:
                self._queue.popleft()
                self._dropped += 1
            self._queue.append((self.events_topic, payload, False))
        self._wake.set()

    def publish_counts(self, counts: Mapping[str, int]) -> None:
        """Set the live count per label (labels missing from `counts` but seen before go to 0); only changes
        are sent, retained, and all are re-sent after every (re)connect."""
        with self._lock:
            new = dict.fromkeys(self._counts, 0)
            new.update({k: int(v) for k, v in counts.items()})
            for label, n in new.items():
                if self._counts.get(label) != n:
                    self._counts_dirty[label] = n
                self._counts[label] = n
        self._wake.set()

    def count_topic(self, label: str) -> str:
        return "%s/%s/%s/count" % (self.settings.topic_prefix, self.camera, topic_level(label))

    def stats(self) -> PublisherStats:
        """Counters for the report and metrics (consistent snapshot)."""
        with self._lock:
            self._settle_acks()
            return PublisherStats(published=self._published, queued=len(self._queue) + self._inflight_events,
                                  dropped=self._dropped, connected=self._connected)

    def close(self, timeout: float = 3.0) -> PublisherStats:
        """Send what is queued (up to `timeout` while connected), publish `offline`, disconnect, stop threads."""
        deadline = time.monotonic() + timeout
        while self._connected and time.monotonic() < deadline:
            s = self.stats()
            if s.queued == 0 and not self._counts_dirty:
                break
            self._wake.set()
            time.sleep(0.02)
        self._closing = True
        self._wake.set()
        if self._sender is not None:
            self._sender.join(timeout=max(0.1, deadline - time.monotonic()))
        if self._connected:
            info = self._hand(self.available_topic, b"offline", True, False)
            while not info.is_published() and self._connected and time.monotonic() < deadline:
                time.sleep(0.02)
        self.client.disconnect()
        # loop_stop joins paho's thread, which may sit in a connect attempt (up to its connect timeout):
        # join it from a helper thread so close() keeps to its timeout
        stopper = threading.Thread(target=self.client.loop_stop, name="mqtt-stop", daemon=True)
        stopper.start()
        stopper.join(timeout=max(0.5, deadline - time.monotonic()))
        self._connected = False
        return self.stats()

    # --- the sender thread

    def _settle_acks(self) -> None:
        """Move paho's acknowledgements into the counters (call with the lock held)."""
        while self._acks:
            mid = self._acks.popleft()
            if mid in self._inflight:
                self._acked(self._inflight.pop(mid))
            else:
                self._early_acks.add(mid)

    def _acked(self, is_event: bool) -> None:
        if is_event:
            self._published += 1
            self._inflight_events -= 1

    def _hand(self, topic: str, payload: bytes, retain: bool, is_event: bool):
        """Give one message to paho (QoS 1) and remember its mid until the broker acknowledges it."""
        with self._lock:
            info = self.client.publish(topic, payload, qos=1, retain=retain)
            if is_event:
                self._inflight_events += 1
            if info.mid in self._early_acks:  # acknowledged before we recorded it
                self._early_acks.discard(info.mid)
                self._acked(is_event)
            else:
                self._inflight[info.mid] = is_event
            return info

    def _discovery_messages(self, labels):
        s = self.settings
        node = topic_level("cnnvideo_%s" % s.topic_prefix.replace("/", "_"))
        for label in labels:
            uid = "%s_%s_%s_count" % (node, self.camera, topic_level(label))
            config = {
                "name": "%s %s count" % (self.camera, label),
                "unique_id": uid,
                "object_id": uid,
                "state_topic": self.count_topic(label),
                "availability_topic": self.available_topic,
                "payload_available": "online",
                "payload_not_available": "offline",
                "state_class": "measurement",
                "icon": "mdi:counter",
                "device": {"identifiers": [node], "name": "cnnvideo %s" % s.topic_prefix, "manufacturer": "cnnvideo"},
            }
            yield "%s/sensor/%s/config" % (s.discovery_prefix, uid), json.dumps(config, sort_keys=True).encode()

    def _send_loop(self) -> None:
        while not self._closing:
            self._wake.wait(0.5)
            self._wake.clear()
            if self._closing:
                break
            try:
                self._send_some()
            except Exception:  # a bug here must not kill the sender silently
                self.log.exception("events.mqtt: sender error")
                time.sleep(0.5)

    def _send_some(self) -> None:
        if not self._connected:
            return
        s = self.settings
        if self._announce:  # after every (re)connect: availability, discovery and every count again
            self._announce = False
            self._hand(self.available_topic, b"online", True, False)
            with self._lock:
                self._counts_dirty.update(self._counts)
                self._discovered = set()
        with self._lock:
            dirty, self._counts_dirty = self._counts_dirty, {}
        if s.ha_discovery:
            fresh = sorted(label for label in dirty if label not in self._discovered)
            for topic, payload in self._discovery_messages(fresh):
                self._hand(topic, payload, True, False)
            self._discovered.update(fresh)
        for label, n in sorted(dirty.items()):
            self._hand(self.count_topic(label), str(n).encode(), True, False)
        while self._connected:
            with self._lock:
                self._settle_acks()
                if not self._queue or self._inflight_events >= s.max_inflight:
                    return
                topic, payload, retain = self._queue.popleft()
            self._hand(topic, payload, retain, True)
