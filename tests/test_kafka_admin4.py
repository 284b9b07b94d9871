"""Kafka ACLs, dynamic broker configs, GROUP configs and SCRAM credentials (issue 27, librdkafka 0081)
through confluent-kafka's AdminClient and kafka-python's KafkaAdminClient against one real `rmq up`
with kafkaAclEnable: the ACL APIs, the authorizer enforcing what they store (a DENY wins, PREFIXED
patterns, super users), AlterConfigs / IncrementalAlterConfigs on BROKER and GROUP resources with
Kafka's sources and errors, AlterUserScramCredentials' credentials logging in over SASL/SCRAM, and
all of it still there after a restart (config/kafkaAdmin.json)."""
from __future__ import annotations

import json
import os

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from kafka_bridge import protocol as kp

from .kafka_fixtures import RawClient, start_broker, unique

pytestmark = pytest.mark.timeout(240)

USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def _conf(bs: str, user: str, pw: str | None = None, mech: str = "PLAIN", **kw) -> dict:
    return {"bootstrap.servers": bs, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mech,
            "sasl.username": user, "sasl.password": pw if pw is not None else USERS[user], **kw}


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    """kafkaAclEnable with SASL accounts; User:admin is a super user; no allow-if-no-ACL."""
    wd = str(tmp_path_factory.mktemp("kadmin4"))
    extra = {"kafkaSaslEnable": True, "kafkaSaslUsers": ",".join(f"{u}:{p}" for u, p in USERS.items()),
             "kafkaAclEnable": True, "kafkaSuperUsers": "User:admin"}
    state = {"broker": start_broker(wd, extra), "workdir": wd, "extra": extra}
    yield state
    b = state["broker"]
    alive = b.alive()
    text = b.log_text()
    assert b.stop() == 0 and alive, text[-3000:]
    assert "Traceback" not in text, text[-5000:]


def _admin(b, user="admin", **kw) -> AdminClient:
    return AdminClient(_conf(b["broker"].bootstrap, user, **kw))


def _produce(bs: str, user: str, topic: str, pw: str | None = None, mech: str = "PLAIN", timeout_ms: int = 8000) -> list:
    errors = []
    p = Producer(_conf(bs, user, pw, mech, **{"message.timeout.ms": timeout_ms, "retries": 0}))
    p.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    p.flush(20)
    return errors


def _topic(b) -> str:
    name = unique("acl")
    admin = _admin(b)  # held until the future is done (a collected client cancels its requests)
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


def _binding(rtype, name, pattern, principal, op, perm, host="*"):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def _create(admin, *bindings):
    for f in admin.create_acls(list(bindings)).values():
        f.result(30)


def _describe(admin, flt) -> set:
    return {(a.restype, a.name, a.resource_pattern_type, a.principal, a.host, a.operation, a.permission_type)
            for a in admin.describe_acls(flt).result(30)}


def _key(a: AclBinding):
    return (a.restype, a.name, a.resource_pattern_type, a.principal, a.host, a.operation, a.permission_type)


def test_acls_create_describe_filters_and_delete(acl_broker):
    a = _admin(acl_broker)
    base = unique("aclf")
    lit = _binding(ResourceType.TOPIC, base + "-x", ResourcePatternType.LITERAL, "User:alice", AclOperation.READ, ALLOW)
    pre = _binding(ResourceType.TOPIC, base, ResourcePatternType.PREFIXED, "User:bob", AclOperation.WRITE, ALLOW)
    grp = _binding(ResourceType.GROUP, base + "-g", ResourcePatternType.LITERAL, "User:alice", AclOperation.READ, DENY)
    _create(a, lit, pre, grp)
    _create(a, lit)  # creating an existing binding again succeeds and adds nothing
    any_of_mine = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                   AclPermissionType.ANY)
    mine = {k for k in _describe(a, any_of_mine) if k[1].startswith(base)}
    assert mine == {_key(lit), _key(pre), _key(grp)}
    # MATCH: every pattern that applies to the topic base-x (its literal ACL and the prefix one)
    match = AclBindingFilter(ResourceType.TOPIC, base + "-x", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert _describe(a, match) == {_key(lit), _key(pre)}
    # ANY pattern type with a name: that exact name only
    exact = AclBindingFilter(ResourceType.TOPIC, base, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)
    assert _describe(a, exact) == {_key(pre)}
    by_principal = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None,
                                    AclOperation.ANY, AclPermissionType.DENY)
    assert {k for k in _describe(a, by_principal) if k[1].startswith(base)} == {_key(grp)}
    # kafka-python reads the same bindings
    from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, KafkaAdminClient,
                             ResourcePatternFilter)
    from kafka.admin import ResourceType as KRT
    kp = KafkaAdminClient(bootstrap_servers=acl_broker["broker"].bootstrap, security_protocol="SASL_PLAINTEXT",
                          sasl_mechanism="PLAIN", sasl_plain_username="admin", sasl_plain_password=USERS["admin"])
    try:
        acls, err = kp.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                               ResourcePatternFilter(KRT.TOPIC, base, ACLResourcePatternType.PREFIXED)))
        assert [(x.principal, x.operation, x.permission_type) for x in acls] == \
            [("User:bob", ACLOperation.WRITE, ACLPermissionType.ALLOW)]
    finally:
        kp.close()
    # DeleteAcls returns what it removed; a second delete finds nothing
    flt = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, "User:bob", None, AclOperation.WRITE,
                           AclPermissionType.ANY)
    gone = {_key(x) for x in a.delete_acls([flt])[flt].result(30) if x.name.startswith(base)}
    assert gone == {_key(pre)}
    assert [x for x in a.delete_acls([flt])[flt].result(30) if x.name.startswith(base)] == []
    assert {k for k in _describe(a, any_of_mine) if k[1].startswith(base)} == {_key(lit), _key(grp)}


def test_bad_acl_bindings_get_invalid_request(acl_broker):
    """Kafka's CreateAcls checks: a principal without a type, an empty resource name, a CLUSTER
    resource not named kafka-cluster."""
    a = _admin(acl_broker)
    bad = [_binding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "alice", AclOperation.READ, ALLOW),
           _binding(ResourceType.BROKER, "other-cluster", ResourcePatternType.LITERAL, "User:alice",
                    AclOperation.ALTER, ALLOW)]
    for b, f in a.create_acls(bad).items():
        with pytest.raises(KafkaException) as info:
            f.result(30)
        assert info.value.args[0].code() == KafkaError.INVALID_REQUEST, b


def test_authorizer_enforces_the_acls(acl_broker):
    """Without an ACL alice may not write (nor see) the topic; ALLOW WRITE on a prefix lets her; a
    DENY for her host wins over the ALLOW; the super user needs no ACL."""
    b = acl_broker
    a = _admin(b)
    bs = b["broker"].bootstrap
    topic = _topic(b)
    assert [e.code() for e in _produce(bs, "alice", topic)] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert _produce(bs, "admin", topic) == [None]
    _create(a, _binding(ResourceType.TOPIC, topic[:8], ResourcePatternType.PREFIXED, "User:alice",
                        AclOperation.WRITE, ALLOW))
    assert _produce(bs, "alice", topic) == [None]
    assert [e.code() for e in _produce(bs, "bob", topic)] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    _create(a, _binding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", AclOperation.ALL,
                        DENY, host="127.0.0.1"))
    assert [e.code() for e in _produce(bs, "alice", topic)] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # the ACL and SCRAM admin APIs need ALTER / DESCRIBE on the cluster
    with pytest.raises(KafkaException) as info:
        _create(_admin(b, "alice"), _binding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice",
                                             AclOperation.ALL, ALLOW))
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # (librdkafka drops DescribeAcls' top-level error code; kafka-python raises it)
    from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, KafkaAdminClient
    from kafka.admin import ResourcePatternFilter
    from kafka.admin import ResourceType as KRT
    from kafka.errors import ClusterAuthorizationFailedError
    kp = KafkaAdminClient(bootstrap_servers=bs, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                          sasl_plain_username="alice", sasl_plain_password=USERS["alice"])
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            kp.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                       ResourcePatternFilter(KRT.ANY, None, ACLResourcePatternType.ANY)))
    finally:
        kp.close()


def _raw_admin(b) -> RawClient:
    """A raw connection logged in as the super user (SASL/PLAIN)."""
    raw = RawClient(b["broker"].bootstrap)
    assert raw.request(kp.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
    auth = raw.request(kp.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0admin\0" + USERS["admin"].encode()})
    assert auth["error_code"] == 0, auth
    return raw


def test_a_consumer_group_needs_read_on_the_group(acl_broker):
    """READ on the topic is not enough for a group member: FindCoordinator answers
    GROUP_AUTHORIZATION_FAILED until an ACL gives READ on the group (a PREFIXED one here)."""
    import time
    from confluent_kafka import Consumer
    b = acl_broker
    a = _admin(b)
    bs = b["broker"].bootstrap
    topic = _topic(b)
    assert _produce(bs, "admin", topic) == [None]
    group = unique("grp")
    _create(a, _binding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", AclOperation.READ, ALLOW))

    def consume() -> tuple[list, list]:
        c = Consumer(_conf(bs, "bob", **{"group.id": group, "auto.offset.reset": "earliest"}))
        got, errors = [], []
        try:
            c.subscribe([topic])
            deadline = time.monotonic() + 20
            while not got and not errors and time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is not None:
                    (errors if m.error() else got).append(m.error() or m.value())
        finally:
            c.close()
        return got, errors
    got, errors = consume()
    assert got == [] and [e.code() for e in errors] == [KafkaError.GROUP_AUTHORIZATION_FAILED]
    _create(a, _binding(ResourceType.GROUP, group[:4], ResourcePatternType.PREFIXED, "User:bob", AclOperation.READ,
                        ALLOW))
    assert consume() == ([b"v"], [])


def _node(admin) -> str:
    return str(next(iter(admin.list_topics(timeout=30).brokers)))


def _alter(admin, res):
    return admin.incremental_alter_configs([res])[res].result(30)


def _configs(admin, res) -> dict:
    return admin.describe_configs([res])[res].result(30)


def test_dynamic_broker_configs(acl_broker):
    a = _admin(acl_broker)
    node = _node(a)
    res = ConfigResource(ResourceType.BROKER, node, incremental_configs=[
        ConfigEntry("background.threads", "9", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("log.cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    _alter(a, res)
    got = _configs(a, ConfigResource(ResourceType.BROKER, node))
    assert got["background.threads"].value == "9"
    assert got["background.threads"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert got["log.cleanup.policy"].value == "delete,compact" and not got["log.cleanup.policy"].is_read_only
    assert got["broker.id"].is_read_only and got["broker.id"].value == node
    # the cluster-wide default (resource name "", which neither stock Python client sends: raw requests)
    # is the default of every topic without its own value
    with _raw_admin(acl_broker) as raw:
        r = raw.request(kp.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
            {"resource_type": 4, "resource_name": "", "configs": [
                {"name": "log.cleaner.delete.retention.ms", "config_operation": 0, "value": "1234"}]}]})
        assert [x["error_code"] for x in r["responses"]] == [0]
        d = raw.request(kp.DESCRIBE_CONFIGS, 4, {"resources": [{"resource_type": 4, "resource_name": "",
                                                                "configuration_keys": None}],
                                                 "include_synonyms": False, "include_documentation": False})
        assert [(c["name"], c["value"], c["config_source"]) for c in d["results"][0]["configs"]] == [
            ("log.cleaner.delete.retention.ms", "1234", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)]
    topic = _topic(acl_broker)
    t = _configs(a, ConfigResource(ResourceType.TOPIC, topic))
    assert (t["delete.retention.ms"].value, t["delete.retention.ms"].source) == \
        ("1234", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    # SUBTRACT and DELETE go back
    _alter(a, ConfigResource(ResourceType.BROKER, node, incremental_configs=[
        ConfigEntry("background.threads", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("log.cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SUBTRACT)]))
    got = _configs(a, ConfigResource(ResourceType.BROKER, node))
    assert (got["background.threads"].value, got["background.threads"].source) == \
        ("10", ConfigSource.DEFAULT_CONFIG.value)
    assert got["log.cleanup.policy"].value == "delete"


@pytest.mark.parametrize("name, value, code, words", [
    ("broker.id", "7", KafkaError.INVALID_REQUEST, "Cannot update these configs dynamically"),
    ("no.such.broker.config", "1", KafkaError.INVALID_CONFIG, "Unknown broker config name"),
    ("background.threads", "0", KafkaError.INVALID_CONFIG, "Value must be at least 1"),
    ("log.cleanup.policy", "shred", KafkaError.INVALID_CONFIG, "Invalid value"),
])
def test_bad_broker_configs_get_kafkas_errors(acl_broker, name, value, code, words):
    a = _admin(acl_broker)
    res = ConfigResource(ResourceType.BROKER, _node(a), incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        _alter(a, res)
    assert info.value.args[0].code() == code and words in info.value.args[0].str()


def test_group_configs(acl_broker):
    a = _admin(acl_broker)
    group = unique("gcfg")
    got = _configs(a, ConfigResource(ResourceType.GROUP, group))  # a group that does not exist: the defaults
    assert (got["consumer.session.timeout.ms"].value, got["consumer.session.timeout.ms"].source) == \
        ("45000", ConfigSource.DEFAULT_CONFIG.value)
    _alter(a, ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET)]))
    got = _configs(a, ConfigResource(ResourceType.GROUP, group))
    assert (got["consumer.session.timeout.ms"].value, got["consumer.session.timeout.ms"].source) == \
        ("50000", ConfigSource.GROUP_CONFIG.value)
    with pytest.raises(KafkaException) as info:
        _alter(a, ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("consumer.session.timeout.ms", "1000", incremental_operation=AlterConfigOpType.SET)]))
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "group.consumer.min.session.timeout.ms" in info.value.args[0].str()
    _alter(a, ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", None, incremental_operation=AlterConfigOpType.DELETE)]))
    assert _configs(a, ConfigResource(ResourceType.GROUP, group))["consumer.session.timeout.ms"].value == "45000"


def _scram_describe(admin, user):
    return admin.describe_user_scram_credentials([user])[user].result(30)


def test_scram_credentials_describe_alter_and_log_in(acl_broker):
    """AlterUserScramCredentials stores a credential (the client salts the password); the user then
    logs in with SCRAM-SHA-256 and is held to the ACLs like any other; Kafka's errors for the rest."""
    b = acl_broker
    a = _admin(b)
    bs = b["broker"].bootstrap
    user = unique("carol")
    with pytest.raises(KafkaException) as info:
        _scram_describe(a, user)
    assert info.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    up = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"carol-pw",
                                      b"salt-of-carol")
    a.alter_user_scram_credentials([up])[user].result(30)
    d = _scram_describe(a, user)
    assert [(c.mechanism, c.iterations) for c in d.scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_256, 8192)]
    topic = _topic(b)
    # logged in as carol (SCRAM-SHA-256, the stored credential), but no ACL yet
    assert [e.code() for e in _produce(bs, user, topic, "carol-pw", "SCRAM-SHA-256")] == \
        [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    _create(a, _binding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{user}", AclOperation.WRITE,
                        ALLOW))
    assert _produce(bs, user, topic, "carol-pw", "SCRAM-SHA-256") == [None]
    wrong = _produce(bs, user, topic, "not-her-pw", "SCRAM-SHA-256", timeout_ms=2000)  # never logs in
    assert len(wrong) == 1 and wrong[0] is not None
    # Kafka's validation: iterations 4096..16384, one alteration per user and request, deleting what exists
    few = UserScramCredentialUpsertion(unique("dave"), ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 1000),
                                       b"pw", b"salt")
    with pytest.raises(KafkaException) as info:
        a.alter_user_scram_credentials([few])[few.user].result(30)
    assert info.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL and "Too few iterations" in \
        info.value.args[0].str()
    gone = UserScramCredentialDeletion(unique("nobody"), ScramMechanism.SCRAM_SHA_256)
    with pytest.raises(KafkaException) as info:
        a.alter_user_scram_credentials([gone])[gone.user].result(30)
    assert info.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    twice = [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256),
             UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"x", b"y")]
    with pytest.raises(KafkaException) as info:
        a.alter_user_scram_credentials(twice)[user].result(30)
    assert info.value.args[0].code() == KafkaError.DUPLICATE_RESOURCE
    assert [c.iterations for c in _scram_describe(a, user).scram_credential_infos] == [8192]  # unchanged
    b["scram_user"], b["scram_topic"] = user, topic


def test_everything_survives_a_restart(acl_broker):
    """ACLs, dynamic broker and group configs and SCRAM credentials are read back from
    config/kafkaAdmin.json by the restarted broker."""
    b = acl_broker
    a = _admin(b)
    node = _node(a)
    group = unique("gkeep")
    _alter(a, ConfigResource(ResourceType.BROKER, node, incremental_configs=[
        ConfigEntry("num.io.threads", "5", incremental_operation=AlterConfigOpType.SET)]))
    _alter(a, ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.heartbeat.interval.ms", "6000", incremental_operation=AlterConfigOpType.SET)]))
    keep = _binding(ResourceType.TOPIC, unique("keep"), ResourcePatternType.LITERAL, "User:bob", AclOperation.READ,
                    ALLOW)
    _create(a, keep)
    path = os.path.join(b["broker"].data_dir, "config", "kafkaAdmin.json")
    with open(path, encoding="utf-8") as fh:
        saved = json.load(fh)
    assert any(x["resourceName"] == keep.name for x in saved["acls"])
    assert "carol-pw" not in json.dumps(saved)  # StoredKey / ServerKey, never the password
    old = b["broker"]
    assert old.stop() == 0
    b["broker"] = start_broker(b["workdir"], b["extra"])
    a = _admin(b)
    flt = AclBindingFilter(ResourceType.TOPIC, keep.name, ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)
    assert _describe(a, flt) == {_key(keep)}
    assert _configs(a, ConfigResource(ResourceType.BROKER, node))["num.io.threads"].value == "5"
    assert _configs(a, ConfigResource(ResourceType.GROUP, group))["consumer.heartbeat.interval.ms"].value == "6000"
    if "scram_user" in b:  # the SCRAM test ran first: its user still logs in
        assert _produce(b["broker"].bootstrap, b["scram_user"], b["scram_topic"], "carol-pw", "SCRAM-SHA-256") == [None]


# ------------------------------------------------------------------ the model alone (no broker)
def test_decide_as_kafkas_standard_authorizer():
    from kafka_bridge import kafka_acls as ka
    B = ka.AclBinding
    acls = [B(ka.RT_TOPIC, "orders-", ka.PT_PREFIXED, "User:alice", "*", ka.OP_READ, ka.PERM_ALLOW),
            B(ka.RT_TOPIC, "*", ka.PT_LITERAL, "User:*", "*", ka.OP_ALTER_CONFIGS, ka.PERM_ALLOW),
            B(ka.RT_TOPIC, "orders-secret", ka.PT_LITERAL, "User:alice", "10.0.0.9", ka.OP_ALL, ka.PERM_DENY)]

    def ok(principal, host, op, name, allow_if_none=False):
        return ka.decide(acls, principal, host, op, ka.RT_TOPIC, name, allow_if_none)
    assert ok("User:alice", "1.2.3.4", ka.OP_READ, "orders-eu")
    assert ok("User:alice", "1.2.3.4", ka.OP_DESCRIBE, "orders-eu")            # READ implies DESCRIBE
    assert not ok("User:alice", "1.2.3.4", ka.OP_WRITE, "orders-eu")
    assert ok("User:bob", "1.2.3.4", ka.OP_DESCRIBE_CONFIGS, "anything")     # wildcard name and principal
    assert ok("User:alice", "1.2.3.4", ka.OP_READ, "orders-secret")
    assert not ok("User:alice", "10.0.0.9", ka.OP_READ, "orders-secret")     # DENY from that host wins
    assert not ok("User:bob", "1.2.3.4", ka.OP_READ, "payments")
    # allow.everyone.if.no.acl.found: only for a resource no ACL names at all
    only_orders = acls[:1]
    assert ka.decide(only_orders, "User:bob", "h", ka.OP_READ, ka.RT_TOPIC, "payments", True)
    assert not ka.decide(only_orders, "User:bob", "h", ka.OP_READ, ka.RT_TOPIC, "orders-eu", True)


def test_admin_state_round_trip_and_a_damaged_file(tmp_path):
    from kafka_bridge import kafka_acls as ka
    from kafka_bridge.admin_state import KafkaAdminState
    st = KafkaAdminState(str(tmp_path))
    st.acls.append(ka.AclBinding(ka.RT_GROUP, "g", ka.PT_LITERAL, "User:a", "*", ka.OP_READ, ka.PERM_ALLOW))
    st.broker_configs["0"] = {"background.threads": "4"}
    st.scram["u"] = {"SCRAM-SHA-512": {"salt": b"s", "iterations": 4096, "storedKey": b"k1", "serverKey": b"k2"}}
    st.changed()
    st.changed()  # a second write leaves the first as the .bak copy
    copy = KafkaAdminState(str(tmp_path / "slave"))
    copy.replace_from(st.dump())  # what a slave does with its master's table
    assert (copy.acls, copy.broker_configs, copy.scram) == (st.acls, st.broker_configs, st.scram)
    (tmp_path / "kafkaAdmin.json").write_text('{"acls": [{"resourceType": "TOPIC"}]}')
    again = KafkaAdminState(str(tmp_path))
    again.load()  # the damaged file is refused (logged) and the backup read
    assert again.acls == st.acls and again.scram == st.scram


def test_docs_list_the_broker_and_group_configs_kept_here():
    from kafka_bridge import dynamic_configs, topic_configs
    table = dynamic_configs.docs_tables()
    for path in topic_configs.docs_pages():
        with open(path, encoding="utf-8") as fh:
            assert table in fh.read(), f"{path}: run `python -m kafka_bridge.dynamic_configs --write-docs`"


def test_a_slave_copies_the_kafka_admin_state(tmp_path):
    """SlaveSynchronize copies kafkaAdmin.json (the broker config table "kafkaAdmin") from the master:
    an ACL, a dynamic broker config and a SCRAM credential created over Kafka on the master are
    served by the slave's Kafka listener."""
    from kafka_bridge.peers import stop_process
    from tests.kafka_fixtures import wait_until
    from tests.test_cluster_processes import spawn, wait_file
    from tests.test_ha import start_broker as start_ha_broker
    from tests.test_ha import wait_log
    started: list = []
    try:
        nsr = tmp_path / "ns.json"
        p = spawn(started, ["namesrv", "--port", "0", "--ready-file", str(nsr)], tmp_path / "ns.log")
        ns = wait_file(nsr, p)["namesrv"]
        kafka = {"kafkaEnable": True, "kafkaPort": 0}
        pm, rm = start_ha_broker(started, tmp_path, "m", "broker-a", "SYNC_MASTER", ns=ns, **kafka)
        ps, rs = start_ha_broker(started, tmp_path, "s", "broker-a", "SLAVE", ns=ns, broker_id=1, **kafka)
        m, s = wait_file(rm, pm), wait_file(rs, ps)
        wait_log(tmp_path / "m.log", "HA: slave 127.0.0.1:", 15)
        a = AdminClient({"bootstrap.servers": m["kafka"]})
        keep = _binding(ResourceType.GROUP, unique("ha-g"), ResourcePatternType.PREFIXED, "User:bob",
                        AclOperation.READ, ALLOW)
        _create(a, keep)
        node = _node(a)
        _alter(a, ConfigResource(ResourceType.BROKER, node, incremental_configs=[
            ConfigEntry("log.cleaner.threads", "3", incremental_operation=AlterConfigOpType.SET)]))
        user = unique("ha-user")
        up = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"pw",
                                          b"salt")
        a.alter_user_scram_credentials([up])[user].result(30)
        # the slave's copy of the table, as `rmq admin` reads it (GET_CONFIG_TABLE_EXT)
        from rmq.remoting import RequestCode, ResponseCode
        from tests.remoting_harness import SyncClient

        def slave_table() -> dict:
            c = SyncClient(s["brokerAddr"])
            try:
                r = c.request(RequestCode.GET_CONFIG_TABLE_EXT, {"name": "kafkaAdmin"})
                assert r.code == ResponseCode.SUCCESS, r.remark
                return json.loads(r.body)
            finally:
                c.close()
        wait_until(lambda: user in slave_table()["scramCredentials"], 30, 0.2, what="the table on the slave")
        table = slave_table()
        assert table["brokerConfigs"] == {node: {"log.cleaner.threads": "3"}}
        assert [x["resourceName"] for x in table["acls"]] == [keep.name]
        # and the slave's own Kafka listener answers from it (a raw request: a client could go to the master)
        with RawClient(s["kafka"]) as raw:
            d = raw.request(kp.DESCRIBE_ACLS, 3, {"resource_type_filter": 3, "resource_name_filter": keep.name,
                                                  "pattern_type_filter": 1, "principal_filter": None,
                                                  "host_filter": None, "operation": 1, "permission_type": 1})
            assert [(r["resource_name"], [x["principal"] for x in r["acls"]]) for r in d["resources"]] == \
                [(keep.name, ["User:bob"])]
            u = raw.request(kp.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": [{"name": user}]})
            assert [(x["user"], x["error_code"], x["credential_infos"]) for x in u["results"]] == \
                [(user, 0, [{"mechanism": 2, "iterations": 4096}])]
        assert ps.poll() is None and pm.poll() is None
        assert "Traceback" not in (tmp_path / "s.log").read_text(errors="replace")
    finally:
        for p in reversed(started):
            stop_process(p, 10)
