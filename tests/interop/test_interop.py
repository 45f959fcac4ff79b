"""kubecast's events as the official CloudEvents SDK for Python reads them.

tests/interop.rs runs kubecast, drives pods, and then runs this module with:
  KUBECAST_INTEROP_EXPECTED   JSON lines of kubecast's file sink: what it meant to send
  KUBECAST_INTEROP_KAFKA      Kafka bootstrap address
  KUBECAST_INTEROP_BINARY     topic written in binary mode
  KUBECAST_INTEROP_STRUCTURED topic written in structured mode
  KUBECAST_INTEROP_MQTT       host:port of the MQTT broker
  KUBECAST_INTEROP_SESSION    client id of the persistent session mqtt_session.py opened
  KUBECAST_INTEROP_PREFIX     MQTT topic prefix: PREFIX/v5/... (MQTT 5 binary), PREFIX/v311/...
                              (MQTT 3.1.1 structured)
  KUBECAST_INTEROP_HTTP       JSON lines of http_receiver.py: the requests of the HTTP sinks
                              (paths /binary, /structured, /batch)
Records are read with confluent-kafka and messages with paho-mqtt; every decoded event must
equal the expected one, attribute by attribute and in its data.
"""

import base64
import json
import os
import threading
import time

import paho.mqtt.client as mqtt
import pytest
from cloudevents.core.bindings import http, kafka
from confluent_kafka import Consumer, TopicPartition
from dateutil.parser import isoparse
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

TIMEOUT = 60
CORE = ["id", "source", "type", "subject", "specversion", "datacontenttype", "dataschema"]


def env(name):
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run this suite through tests/interop.rs (cargo test --test interop)")
    return value


@pytest.fixture(scope="module")
def expected():
    with open(env("KUBECAST_INTEROP_EXPECTED"), encoding="utf-8") as f:
        events = [json.loads(line) for line in f if line.strip()]
    assert events, "kubecast's file sink wrote no events"
    return {e["id"]: e for e in events}


def flag(value):
    """Booleans are JSON booleans in structured mode and "true"/"false" in binary mode."""
    return str(value).lower() if isinstance(value, bool) else value


def check(event, expected, where):
    want = expected.get(event.get_id())
    assert want is not None, f"{where}: unexpected event id {event.get_id()}"
    got = {
        "id": event.get_id(),
        "source": event.get_source(),
        "type": event.get_type(),
        "subject": event.get_subject(),
        "specversion": event.get_specversion(),
        "datacontenttype": event.get_datacontenttype(),
        "dataschema": event.get_dataschema(),
    }
    assert got == {k: want[k] for k in CORE}, where
    assert event.get_time() == isoparse(want["time"]), where
    for name, value in want.items():
        if name in CORE or name in ("time", "data"):
            continue
        assert flag(event.get_extension(name)) == flag(value), f"{where}: extension {name}"
    assert event.get_data() == want["data"], f"{where}: data"


def read_topic(topic, count):
    consumer = Consumer(
        {
            "bootstrap.servers": env("KUBECAST_INTEROP_KAFKA"),
            "group.id": f"interop-{topic}",
            "enable.auto.commit": False,
        }
    )
    meta = consumer.list_topics(topic, timeout=10)
    partitions = meta.topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    records, deadline = [], time.time() + TIMEOUT
    while len(records) < count and time.time() < deadline:
        m = consumer.poll(1.0)
        if m is not None and m.error() is None:
            records.append(m)
    consumer.close()
    assert len(records) == count, f"{topic}: {len(records)} of {count} records within {TIMEOUT}s"
    return records


def kafka_message(record):
    return kafka.KafkaMessage(headers=dict(record.headers() or []), key=record.key(), value=record.value())


def test_kafka_binary_mode_records_decode_to_the_events_kubecast_meant(expected):
    for r in read_topic(env("KUBECAST_INTEROP_BINARY"), len(expected)):
        event = kafka.from_binary_event(kafka_message(r))
        check(event, expected, f"binary record at {r.partition()}/{r.offset()}")
        assert r.key().decode() == event.get_extension("partitionkey")


def test_kafka_structured_mode_records_decode_to_the_events_kubecast_meant(expected):
    for r in read_topic(env("KUBECAST_INTEROP_STRUCTURED"), len(expected)):
        assert dict(r.headers())["content-type"] == b"application/cloudevents+json"
        check(kafka.from_structured_event(kafka_message(r)), expected, f"structured record at {r.partition()}/{r.offset()}")


@pytest.fixture(scope="module")
def mqtt_messages(expected):
    """Every message the persistent session collected: one per event and protocol."""
    host, port = env("KUBECAST_INTEROP_MQTT").rsplit(":", 1)
    messages, done = [], threading.Event()

    def on_message(_client, _userdata, msg):
        messages.append(msg)
        if len(messages) >= 2 * len(expected):
            done.set()

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=env("KUBECAST_INTEROP_SESSION"), protocol=mqtt.MQTTv5)
    client.on_message = on_message
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 0
    client.connect(host, int(port), clean_start=False, properties=props)
    client.loop_start()
    done.wait(TIMEOUT)
    client.disconnect()
    client.loop_stop()
    assert len(messages) == 2 * len(expected), f"{len(messages)} MQTT messages, expected {2 * len(expected)}"
    return messages


def test_mqtt5_binary_mode_messages_decode_to_the_events_kubecast_meant(expected, mqtt_messages):
    # The SDK has no MQTT binding; MQTT 5 binary mode carries the attributes as user
    # properties and datacontenttype as Content Type, which is HTTP binary mode's shape.
    v5 = [m for m in mqtt_messages if "/v5/" in m.topic]
    assert len(v5) == len(expected)
    for m in v5:
        headers = {f"ce-{k}": v for k, v in m.properties.UserProperty}
        headers["content-type"] = m.properties.ContentType
        check(http.from_binary_event(http.HTTPMessage(headers=headers, body=m.payload)), expected, f"MQTT 5 {m.topic}")
        assert m.qos == 1


def test_mqtt311_structured_messages_decode_to_the_events_kubecast_meant(expected, mqtt_messages):
    v311 = [m for m in mqtt_messages if "/v311/" in m.topic]
    assert len(v311) == len(expected)
    for m in v311:
        message = http.HTTPMessage(headers={"content-type": "application/cloudevents+json"}, body=m.payload)
        check(http.from_structured_event(message), expected, f"MQTT 3.1.1 {m.topic}")


def http_requests():
    path = env("KUBECAST_INTEROP_HTTP")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_http_requests_decode_to_the_events_kubecast_meant(expected):
    """Binary, structured and batch requests of kubecast's HTTP sinks, as recorded by
    http_receiver.py: each decodes with the SDK's HTTP binding (a batch element as a
    structured request of its own) to an event kubecast meant, and each mode has them all."""
    seen = {"/binary": set(), "/structured": set(), "/batch": set()}
    for r in http_requests():
        headers, body = r["headers"], base64.b64decode(r["body"])
        mode = r["path"]
        if mode == "/batch":
            assert headers["content-type"].startswith("application/cloudevents-batch+json")
            parts = [json.dumps(e).encode() for e in json.loads(body)]
            messages = [http.HTTPMessage(headers={"content-type": "application/cloudevents+json"}, body=p) for p in parts]
        else:
            messages = [http.HTTPMessage(headers=headers, body=body)]
        for m in messages:
            event = http.from_http_event(m)
            check(event, expected, f"HTTP {mode} request")
            seen[mode].add(event.get_id())
    for mode, ids in seen.items():
        assert ids == set(expected), f"HTTP {mode}: {len(ids)} of {len(expected)} events"
