"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 on the Kafka listener (RFC 5802/7677) with confluent-kafka,
kafka-python and aiokafka, and the plain_acl.yml accounts and permissions under aclEnable:
TOPIC_AUTHORIZATION_FAILED (29), GROUP_AUTHORIZATION_FAILED (30), SASL_AUTHENTICATION_FAILED (58)."""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
import uuid

import pytest

from kafka_bridge import protocol as kp

from .kafka_fixtures import RawClient, start_broker

pytestmark = pytest.mark.timeout(180)

ACL_YML = """\
accounts:
  - accessKey: producer1
    secretKey: prod-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [kpub=PUB, shared=PUB|SUB]
  - accessKey: consumer1
    secretKey: cons-secret
    topicPerms: [kpub=SUB, shared=PUB|SUB]
    groupPerms: [goodgroup=SUB]
  - accessKey: admin01
    secretKey: admin-secret
    admin: true
"""
MECHS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    """kafkaSaslEnable with kafkaSaslUsers (no ACL): every mechanism, no permission checks."""
    b = start_broker(str(tmp_path_factory.mktemp("scram")), {"kafkaSaslEnable": True,
                                                              "kafkaSaslUsers": "alice:secret,bob:pw2"})
    yield b
    alive = b.alive()
    assert b.stop() == 0 and alive, b.log_text()[-3000:]


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    """aclEnable: the accounts of conf/plain_acl.yml (aclFile's default, relative to the working dir)."""
    wd = str(tmp_path_factory.mktemp("scramacl"))
    os.makedirs(os.path.join(wd, "conf"))
    with open(os.path.join(wd, "conf", "plain_acl.yml"), "w") as fh:
        fh.write(ACL_YML)
    b = start_broker(wd, {"aclEnable": True})
    yield b
    alive = b.alive()
    assert b.stop() == 0 and alive, b.log_text()[-3000:]


def _conf(bs, mech, user, pw, **kw):
    return {"bootstrap.servers": bs, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mech,
            "sasl.username": user, "sasl.password": pw, **kw}


def _produce(bs, mech, user, pw, topic, value=b"v"):
    from confluent_kafka import Producer
    results = []
    p = Producer(_conf(bs, mech, user, pw, **{"message.timeout.ms": 8000}))
    p.produce(topic, value, on_delivery=lambda err, msg: results.append(err))
    p.flush(15)
    return results


def _consume(bs, mech, user, pw, topic, group, want=1, timeout=15, until=None):
    from confluent_kafka import Consumer
    c = Consumer(_conf(bs, mech, user, pw, **{"group.id": group, "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    got, errors = [], []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(got) < want and not errors and not (until and until in got):
        m = c.poll(0.3)
        if m is None:
            continue
        if m.error() is not None:
            errors.append(m.error())
        else:
            got.append(m.value())
    c.close()
    return got, errors


# ------------------------------------------------------------------------------ SCRAM itself
@pytest.mark.parametrize("mech", MECHS)
def test_confluent_scram_round_trip(sasl_broker, mech):
    topic = f"scram{uuid.uuid4().hex[:8]}"
    assert _produce(sasl_broker.bootstrap, mech, "alice", "secret", topic, mech.encode()) == [None]
    got, errors = _consume(sasl_broker.bootstrap, mech, "bob", "pw2", topic, "sg")
    assert got == [mech.encode()] and not errors


@pytest.mark.parametrize("mech", MECHS)
def test_confluent_scram_wrong_password(sasl_broker, mech):
    from confluent_kafka import Producer
    errors = []
    p = Producer(_conf(sasl_broker.bootstrap, mech, "alice", "wrong", error_cb=errors.append,
                       **{"message.timeout.ms": 3000}))
    p.produce("anything", b"x")
    p.flush(5)
    assert any(e.name() == "_AUTHENTICATION" for e in errors), errors
    assert "SASL/%s authentication failed for user 'alice'" % mech in sasl_broker.log_text()


@pytest.mark.parametrize("mech", MECHS)
def test_kafka_python_scram(sasl_broker, mech):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError
    topic = f"kp{uuid.uuid4().hex[:8]}"
    p = KafkaProducer(bootstrap_servers=sasl_broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism=mech, sasl_plain_username="alice", sasl_plain_password="secret")
    p.send(topic, b"kafka-python " + mech.encode()).get(10)
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=sasl_broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism=mech, sasl_plain_username="bob", sasl_plain_password="pw2",
                      auto_offset_reset="earliest", group_id=None)
    got = []
    deadline = time.monotonic() + 15
    while not got and time.monotonic() < deadline:
        for recs in c.poll(300).values():
            got.extend(r.value for r in recs)
    c.close()
    assert got == [b"kafka-python " + mech.encode()]
    quick = {"bootstrap_timeout_ms": 3000} if "bootstrap_timeout_ms" in KafkaProducer.DEFAULT_CONFIG else {}
    with pytest.raises(KafkaError):
        bad = KafkaProducer(bootstrap_servers=sasl_broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism=mech, sasl_plain_username="alice", sasl_plain_password="nope",
                            max_block_ms=3000, **quick)
        bad.send(topic, b"x").get(5)


def test_aiokafka_scram(sasl_broker):
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=sasl_broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                             sasl_plain_password="secret")
        await p.start()
        try:
            md = await p.send_and_wait(f"aio{uuid.uuid4().hex[:8]}", b"aiokafka")
            return md.offset
        finally:
            await p.stop()
    assert asyncio.run(asyncio.wait_for(run(), 30)) == 0


def _scram_client(rc: RawClient, mech: str, user: str, pw: str):
    """The RFC 5802 exchange by hand over SaslHandshake v1 + SaslAuthenticate: the server's iteration
    count, nonce and final verifier are checked, as a strict client would."""
    alg = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mech]
    assert rc.request(kp.SASL_HANDSHAKE, 1, {"mechanism": mech})["error_code"] == 0
    cnonce = base64.b64encode(os.urandom(18)).decode()
    bare = f"n={user},r={cnonce}"
    r1 = rc.request(kp.SASL_AUTHENTICATE, 2, {"auth_bytes": f"n,,{bare}".encode()})
    if r1["error_code"] != 0:
        return r1, None
    server_first = r1["auth_bytes"].decode()
    attrs = dict(a.split("=", 1) for a in server_first.split(","))
    assert attrs["r"].startswith(cnonce) and len(attrs["r"]) > len(cnonce) and int(attrs["i"]) >= 4096
    salted = hashlib.pbkdf2_hmac(alg, pw.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", alg).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_msg = f"{bare},{server_first},{without_proof}".encode()
    sig = hmac.new(hashlib.new(alg, client_key).digest(), auth_msg, alg).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig))).decode()
    r2 = rc.request(kp.SASL_AUTHENTICATE, 2, {"auth_bytes": f"{without_proof},p={proof}".encode()})
    server_sig = hmac.new(hmac.new(salted, b"Server Key", alg).digest(), auth_msg, alg).digest()
    return r2, server_sig


@pytest.mark.parametrize("mech", MECHS)
def test_raw_scram_exchange_and_server_verifier(sasl_broker, mech):
    with RawClient(sasl_broker.bootstrap) as rc:
        r2, server_sig = _scram_client(rc, mech, "alice", "secret")
        assert r2["error_code"] == 0
        assert r2["auth_bytes"] == b"v=" + base64.b64encode(server_sig)
        assert rc.request(kp.METADATA, 1, {"topics": None})["brokers"]  # authenticated now
    with RawClient(sasl_broker.bootstrap) as rc:
        r2, _ = _scram_client(rc, mech, "alice", "not-secret")
        assert r2["error_code"] == 58 and "Authentication failed" in r2["error_message"]
        with pytest.raises((ConnectionError, OSError)):  # closed after the failure
            rc.request(kp.METADATA, 1, {"topics": None})
    with RawClient(sasl_broker.bootstrap) as rc:
        r1, _ = _scram_client(rc, mech, "mallory", "x")
        assert r1["error_code"] == 58


# ------------------------------------------------------------------------------ with aclEnable
def test_acl_no_request_before_authentication(acl_broker):
    with RawClient(acl_broker.bootstrap) as rc:
        assert rc.request(kp.API_VERSIONS, 0, {})["error_code"] == 0
        with pytest.raises((ConnectionError, OSError)):
            rc.request(kp.METADATA, 1, {"topics": None})
    with RawClient(acl_broker.bootstrap) as rc:
        r = rc.request(kp.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert r["error_code"] != 0 and "SCRAM-SHA-512" in r["mechanisms"]


@pytest.mark.parametrize("mech", MECHS + ["PLAIN"])
def test_acl_accounts_produce_and_consume(acl_broker, mech):
    assert _produce(acl_broker.bootstrap, mech, "producer1", "prod-secret", "kpub", b"acl " + mech.encode()) == [None]
    got, errors = _consume(acl_broker.bootstrap, mech, "consumer1", "cons-secret", "kpub", "goodgroup", want=100,
                           until=b"acl " + mech.encode())
    assert b"acl " + mech.encode() in got and not errors, (got, errors)


def test_acl_produce_without_pub_is_topic_authorization_failed(acl_broker):
    from confluent_kafka import KafkaError
    res = _produce(acl_broker.bootstrap, "SCRAM-SHA-256", "consumer1", "cons-secret", "kpub")
    assert len(res) == 1 and res[0] is not None and res[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, res
    assert "ACL refused Produce to kpub for consumer1" in acl_broker.log_text()


def test_acl_group_without_sub_is_group_authorization_failed(acl_broker):
    from confluent_kafka import KafkaError
    got, errors = _consume(acl_broker.bootstrap, "SCRAM-SHA-512", "consumer1", "cons-secret", "kpub", "othergroup")
    assert errors and errors[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED, errors
    # producer1 has no group permission at all
    got, errors = _consume(acl_broker.bootstrap, "SCRAM-SHA-256", "producer1", "prod-secret", "shared", "goodgroup")
    assert errors and errors[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED, errors


def test_acl_fetch_without_sub_is_topic_authorization_failed(acl_broker):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import TopicAuthorizationFailedError
    assert _produce(acl_broker.bootstrap, "SCRAM-SHA-256", "producer1", "prod-secret", "kpub") == [None]
    c = KafkaConsumer(bootstrap_servers=acl_broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="producer1",
                      sasl_plain_password="prod-secret", group_id=None, auto_offset_reset="earliest")
    try:
        c.assign([TopicPartition("kpub", 0)])
        c.seek(TopicPartition("kpub", 0), 0)
        with pytest.raises(TopicAuthorizationFailedError):
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                c.poll(500)
    finally:
        c.close()


def test_acl_topic_admin_needs_an_admin_account(acl_broker):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, NewTopic
    name = f"adm{uuid.uuid4().hex[:6]}"
    a = AdminClient(_conf(acl_broker.bootstrap, "SCRAM-SHA-256", "producer1", "prod-secret"))
    fut = a.create_topics([NewTopic(name, 1, 1)], operation_timeout=5)[name]
    with pytest.raises(Exception) as ei:
        fut.result(15)
    assert ei.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    a = AdminClient(_conf(acl_broker.bootstrap, "SCRAM-SHA-256", "admin01", "admin-secret"))
    assert a.create_topics([NewTopic(name, 1, 1)], operation_timeout=5)[name].result(15) is None


def test_acl_admin_only_and_filtered_kafka_apis(acl_broker):
    """DeleteRecords, IncrementalAlterConfigs, DeleteGroups and OffsetDelete need an admin account;
    DescribeConfigs of a topic needs PUB or SUB on it (of a broker, an admin account); ListGroups
    lists only the groups the account has SUB on."""
    bs = acl_broker.bootstrap
    assert _produce(bs, "SCRAM-SHA-256", "producer1", "prod-secret", "kpub") == [None]
    got, errors = _consume(bs, "SCRAM-SHA-256", "consumer1", "cons-secret", "kpub", "goodgroup", want=1)
    assert got and not errors, errors  # goodgroup exists now

    def session(user: str, pw: str) -> RawClient:
        rc = RawClient(bs)
        assert _scram_client(rc, "SCRAM-SHA-256", user, pw)[0]["error_code"] == 0
        return rc
    delete = {"topics": [{"name": "kpub", "partitions": [{"partition_index": 0, "offset": 0}]}], "timeout_ms": 5000}
    alter = {"resources": [{"resource_type": 2, "resource_name": "kpub", "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": "86400000"}]}], "validate_only": False}
    describe = {"resources": [{"resource_type": 2, "resource_name": "kpub", "configuration_keys": None},
                              {"resource_type": 4, "resource_name": "0", "configuration_keys": None}],
                "include_synonyms": False}
    with session("consumer1", "cons-secret") as rc:
        assert rc.request(kp.DELETE_RECORDS, 1, delete)["topics"][0]["partitions"][0]["error_code"] == 29
        assert rc.request(kp.INCREMENTAL_ALTER_CONFIGS, 0, alter)["responses"][0]["error_code"] == 29
        assert rc.request(kp.DELETE_GROUPS, 1, {"groups_names": ["goodgroup"]})["results"][0]["error_code"] == 30
        assert rc.request(kp.OFFSET_DELETE, 0, {"group_id": "goodgroup", "topics": [
            {"name": "kpub", "partitions": [{"partition_index": 0}]}]})["error_code"] == 30
        results = rc.request(kp.DESCRIBE_CONFIGS, 1, describe)["results"]
        assert [(r["resource_name"], r["error_code"]) for r in results] == [("kpub", 0), ("0", 31)]
        assert results[0]["configs"]
        assert [g["group_id"] for g in rc.request(kp.LIST_GROUPS, 1, {})["groups"]] == ["goodgroup"]
    with session("producer1", "prod-secret") as rc:
        assert rc.request(kp.LIST_GROUPS, 1, {})["groups"] == []  # no group permission at all
    with session("admin01", "admin-secret") as rc:
        assert rc.request(kp.DELETE_RECORDS, 1, delete)["topics"][0]["partitions"][0]["error_code"] == 0
        assert rc.request(kp.INCREMENTAL_ALTER_CONFIGS, 0, alter)["responses"][0]["error_code"] == 0
        assert "goodgroup" in [g["group_id"] for g in rc.request(kp.LIST_GROUPS, 1, {})["groups"]]
    assert "ACL refused DeleteRecords (needs an admin account) for consumer1" in acl_broker.log_text()


def test_acl_wrong_password_is_sasl_authentication_failed(acl_broker):
    with RawClient(acl_broker.bootstrap) as rc:
        r2, _ = _scram_client(rc, "SCRAM-SHA-256", "producer1", "wrong")
        assert r2["error_code"] == 58
    with RawClient(acl_broker.bootstrap) as rc:
        assert rc.request(kp.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        r = rc.request(kp.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x00producer1\x00wrong"})
        assert r["error_code"] == 58
    assert "authentication failed for user 'producer1'" in acl_broker.log_text()


def test_raw_scram_after_handshake_v0(sasl_broker):
    """SaslHandshake v0: the SCRAM messages travel as raw length-prefixed frames, not SaslAuthenticate."""
    def raw(rc, data: bytes) -> bytes:
        rc.send_raw(len(data).to_bytes(4, "big") + data)
        n = int.from_bytes(rc._recv_exact(4), "big")
        return rc._recv_exact(n)
    with RawClient(sasl_broker.bootstrap) as rc:
        assert rc.request(kp.SASL_HANDSHAKE, 0, {"mechanism": "SCRAM-SHA-512"})["error_code"] == 0
        cnonce = base64.b64encode(os.urandom(18)).decode()
        bare = f"n=bob,r={cnonce}"
        server_first = raw(rc, f"n,,{bare}".encode()).decode()
        attrs = dict(a.split("=", 1) for a in server_first.split(","))
        salted = hashlib.pbkdf2_hmac("sha512", b"pw2", base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = hmac.new(salted, b"Client Key", "sha512").digest()
        without_proof = f"c=biws,r={attrs['r']}"
        auth_msg = f"{bare},{server_first},{without_proof}".encode()
        sig = hmac.new(hashlib.sha512(client_key).digest(), auth_msg, "sha512").digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig))).decode()
        final = raw(rc, f"{without_proof},p={proof}".encode())
        server_sig = hmac.new(hmac.new(salted, b"Server Key", "sha512").digest(), auth_msg, "sha512").digest()
        assert final == b"v=" + base64.b64encode(server_sig)
        assert rc.request(kp.METADATA, 1, {"topics": None})["brokers"]


def test_acl_global_white_address_needs_no_sasl(tmp_path):
    """globalWhiteRemoteAddresses: a Kafka client from a listed address connects without SASL."""
    os.makedirs(tmp_path / "conf")
    (tmp_path / "conf" / "plain_acl.yml").write_text("globalWhiteRemoteAddresses: [127.0.0.1]\n" + ACL_YML)
    b = start_broker(str(tmp_path), {"aclEnable": True})
    try:
        from confluent_kafka import Producer
        results = []
        p = Producer({"bootstrap.servers": b.bootstrap, "message.timeout.ms": 8000})
        p.produce("anytopic", b"white", on_delivery=lambda err, msg: results.append(err))
        p.flush(15)
        assert results == [None]
    finally:
        assert b.stop() == 0


def test_acl_authorized_operations_follow_the_account(acl_broker):
    """include_authorized_operations with aclEnable: what the account may do (PUB -> WRITE, SUB ->
    READ, either -> DESCRIBE and DESCRIBE_CONFIGS; an admin account every supported operation)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient, NewTopic
    bs = acl_broker.bootstrap
    admin = AdminClient(_conf(bs, "SCRAM-SHA-256", "admin01", "admin-secret"))
    fut = admin.create_topics([NewTopic("kpub", 1, 1)], operation_timeout=5)["kpub"]
    try:
        fut.result(15)
    except Exception:  # noqa: BLE001 - another test of the module may have made it already
        pass

    def ops(user, pw):
        a = AdminClient(_conf(bs, "SCRAM-SHA-256", user, pw))
        d = a.describe_topics(TopicCollection(["kpub"]), include_authorized_operations=True)["kpub"].result(15)
        return sorted(op.name for op in d.authorized_operations)
    assert ops("producer1", "prod-secret") == ["DESCRIBE", "DESCRIBE_CONFIGS", "WRITE"]
    assert ops("consumer1", "cons-secret") == ["DESCRIBE", "DESCRIBE_CONFIGS", "READ"]
    assert len(ops("admin01", "admin-secret")) == 8
    cluster = admin.describe_cluster(include_authorized_operations=True).result(15)
    assert len(cluster.authorized_operations) == 7
