"""SASL/PLAIN on the Kafka listener (kafkaSaslEnable, kafkaSaslUsers): stock clients authenticate,
a wrong password is refused, and nothing but ApiVersions/SASL is served before authentication."""
from __future__ import annotations

import time
import uuid

import pytest

from kafka_bridge import protocol as kp

from .kafka_fixtures import RawClient, start_broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start_broker(str(tmp_path_factory.mktemp("sasl")), {"kafkaSaslEnable": True, "kafkaSaslUsers": "alice:secret,bob:pw2"})
    yield b
    alive = b.alive()
    assert b.stop() == 0 and alive, b.log_text()[-3000:]


def _conf(bs, user, pw):
    return {"bootstrap.servers": bs, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": pw}


def test_confluent_authenticates_and_round_trips(broker):
    from confluent_kafka import Consumer, Producer
    topic = f"sasl{uuid.uuid4().hex[:8]}"
    p = Producer(_conf(broker.bootstrap, "alice", "secret"))
    p.produce(topic, b"hello over SASL")
    assert p.flush(15) == 0
    c = Consumer({**_conf(broker.bootstrap, "bob", "pw2"), "group.id": "sg", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = None
    deadline = time.monotonic() + 15
    while got is None and time.monotonic() < deadline:
        m = c.poll(0.3)
        if m is not None and m.error() is None:
            got = m.value()
    c.close()
    assert got == b"hello over SASL"


def test_wrong_password_is_refused(broker):
    from confluent_kafka import Producer
    errors = []
    p = Producer({**_conf(broker.bootstrap, "alice", "wrong"), "error_cb": lambda e: errors.append(e),
                  "message.timeout.ms": 3000})
    p.produce("anything", b"x")
    p.flush(5)
    assert any("Authentication" in e.str() or e.name() == "_AUTHENTICATION" for e in errors), errors


def test_kafka_python_plain(broker):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                      sasl_plain_username="alice", sasl_plain_password="secret")
    p.send(f"sasl{uuid.uuid4().hex[:8]}", b"x").get(10)
    p.close()
    # kafka-python 3 waits bootstrap_timeout_ms (30 s) for a broker that refuses it: shorten that
    quick = {"bootstrap_timeout_ms": 3000} if "bootstrap_timeout_ms" in KafkaProducer.DEFAULT_CONFIG else {}
    with pytest.raises(KafkaError):
        bad = KafkaProducer(bootstrap_servers=broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="nope",
                            max_block_ms=3000, **quick)
        bad.send("t", b"x").get(5)


def test_requests_before_authentication_close_the_connection(broker):
    with RawClient(broker.bootstrap) as rc:
        r = rc.request(kp.API_VERSIONS, 0, {})
        assert r["error_code"] == 0  # allowed before SASL
        with pytest.raises((ConnectionError, OSError)):
            rc.request(kp.METADATA, 1, {"topics": None})
