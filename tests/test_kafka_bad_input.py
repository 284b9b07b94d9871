"""Bad input on the Kafka listener of `rmq up` (SPEC §11, DESIGN "Quality bar"): a malformed frame
gets the protocol's error code or a closed connection, and every other connection keeps working.

Raw sockets and kafka_bridge.protocol only (exact bytes); at the end a stock client (kafka-python)
still produces and consumes, and the broker's log holds no traceback (checked on teardown).
"""
from __future__ import annotations

import socket
import struct
import time

import pytest

from kafka_bridge import protocol as kp
from kafka_bridge.protocol import error_codes as ec
from kafka_bridge.records import encode_batch

from .kafka_fixtures import RawClient, api_versions_ok, create_topic_raw, kafka_broker, unique  # noqa: F401

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.fixture(scope="module")
def topic(kafka_broker):
    name = unique("bad-input")
    assert create_topic_raw(kafka_broker.bootstrap, name, 2) == 0
    return name


def _raw_header(api_key: int, version: int, corr: int, client_id: bytes = b"bad", flexible: bool = False) -> bytes:
    h = struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id
    return h + (b"\x00" if flexible else b"")


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _produce(c: RawClient, topic: str, partition: int, records, version: int = 8) -> dict:
    r = c.request(kp.PRODUCE, version, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    (t,) = r["responses"]
    assert t["name"] == topic
    (p,) = t["partition_responses"]
    return p


def _fetch(c: RawClient, topic: str, partition: int, offset: int) -> dict:
    r = c.request(kp.FETCH, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                 "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
        {"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                                         "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                                 "forgotten_topics_data": [], "rack_id": ""})
    return r["responses"][0]["partitions"][0]


def _list_offsets(c: RawClient, topic: str, partition: int, ts: int = -1) -> dict:
    r = c.request(kp.LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                        "timestamp": ts}]}]})
    return r["topics"][0]["partitions"][0]


def _batch(*values: bytes) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([(None, v, [], now) for v in values])


# ---------------------------------------------------------------------------------------------
# Frames

@pytest.mark.parametrize("prefix", [b"\x7f\xff\xff\xff", struct.pack(">i", 100 * 1024 * 1024 + 1),
                                    b"\xff\xff\xff\xfe"], ids=["2GiB", "over-100MiB", "negative"])
def test_bad_frame_size_closes_that_connection_only(kafka_broker, prefix):
    with RawClient(kafka_broker.bootstrap) as healthy:
        assert healthy.request(kp.API_VERSIONS, 0, {})["error_code"] == 0
        with RawClient(kafka_broker.bootstrap) as bad:
            bad.send_raw(prefix + b"\x00" * 64)
            assert bad.is_closed_by_peer(), "the broker kept a connection with a bad frame size open"
        # the connection opened before, and new ones, still work
        assert healthy.request(kp.API_VERSIONS, 3, {"client_software_name": "t",
                                                    "client_software_version": "1"})["error_code"] == 0
    assert api_versions_ok(kafka_broker.bootstrap)
    assert kafka_broker.alive()


@pytest.mark.parametrize("data", [b"\x00\x00", b"\x00\x00\x00\x64" + b"\x00\x12\x00\x03",
                                  _frame(_raw_header(kp.API_VERSIONS, 3, 1, flexible=True))[:-1]],
                         ids=["half-prefix", "short-body", "header-cut"])
def test_truncated_frame_then_close(kafka_broker, data):
    s = socket.create_connection((kafka_broker.host, kafka_broker.port), timeout=5)
    s.sendall(data)
    s.close()
    # and a reset in the middle of a frame
    s = socket.create_connection((kafka_broker.host, kafka_broker.port), timeout=5)
    s.sendall(data)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    assert api_versions_ok(kafka_broker.bootstrap)
    assert kafka_broker.alive()


def test_unknown_api_key_closes_the_connection(kafka_broker):
    with RawClient(kafka_broker.bootstrap) as c:
        c.send_raw(_frame(_raw_header(999, 0, 7) + b"\x00" * 8))
        assert c.is_closed_by_peer()
    # a known api at a version nobody supports (Produce v0 is below the supported range)
    with RawClient(kafka_broker.bootstrap) as c:
        c.send_raw(_frame(_raw_header(kp.PRODUCE, 0, 8) + b"\x00" * 16))
        assert c.is_closed_by_peer()
    assert api_versions_ok(kafka_broker.bootstrap)


def test_api_versions_with_unsupported_version_answers_the_supported_list(kafka_broker):
    with RawClient(kafka_broker.bootstrap) as c:
        # what a newer client sends first: ApiVersions v127 (flexible header and body)
        c.send_raw(_frame(_raw_header(kp.API_VERSIONS, 127, 42, flexible=True) + b"\x02t\x021\x00"))
        corr, body = kp.decode_response(kp.API_VERSIONS, 0, c.read_frame())
        assert corr == 42
        assert body["error_code"] == ec.UNSUPPORTED_VERSION
        advertised = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
        assert advertised[kp.API_VERSIONS] == (0, 4)
        assert advertised[kp.PRODUCE][0] <= 9 <= advertised[kp.PRODUCE][1]
        assert advertised[kp.FETCH][0] <= 11 <= advertised[kp.FETCH][1]
        # the client retries with a version from the list, on the same connection
        r = c.request(kp.API_VERSIONS, advertised[kp.API_VERSIONS][1],
                      {"client_software_name": "t", "client_software_version": "1"})
        assert r["error_code"] == 0
        assert {k["api_key"]: (k["min_version"], k["max_version"]) for k in r["api_keys"]} == advertised


# ---------------------------------------------------------------------------------------------
# Request bodies that decode but are wrong

def test_produce_with_a_bad_crc_is_corrupt_message(kafka_broker, topic):
    good = _batch(b"one", b"two")
    bad_body = bytearray(good)
    bad_body[-1] ^= 0xFF  # a byte of the last record: the CRC no longer matches
    bad_crc = bytearray(good)
    bad_crc[17] ^= 0x01   # the CRC field itself
    with RawClient(kafka_broker.bootstrap) as c:
        before = _list_offsets(c, topic, 0)["offset"]
        for bad in (bytes(bad_body), bytes(bad_crc)):
            r = _produce(c, topic, 0, bad)
            assert r["error_code"] == ec.CORRUPT_MESSAGE, r
        # a batch cut short, and bytes that are no batch at all
        assert _produce(c, topic, 0, good[:-3])["error_code"] == ec.CORRUPT_MESSAGE
        assert _produce(c, topic, 0, b"\x00" * 70)["error_code"] == ec.CORRUPT_MESSAGE
        # nothing was stored, and the same connection still produces
        assert _list_offsets(c, topic, 0)["offset"] == before
        r = _produce(c, topic, 0, good)
        assert r["error_code"] == 0 and r["base_offset"] == before


def test_produce_of_a_record_above_max_message_size(kafka_broker, topic):
    with RawClient(kafka_broker.bootstrap, timeout=30) as c:
        md = c.request(kp.DESCRIBE_CONFIGS, 1, {"resources": [{"resource_type": 2, "resource_name": topic,
                                                               "configuration_keys": ["max.message.bytes"]}],
                                                "include_synonyms": False})
        limit = int(md["results"][0]["configs"][0]["value"])
        before = _list_offsets(c, topic, 0)["offset"]
        r = _produce(c, topic, 0, _batch(b"x" * (limit + 1)))
        assert r["error_code"] == ec.MESSAGE_TOO_LARGE, r
        r = _produce(c, topic, 0, _batch(*[b"y" * (limit // 2)] * 4))  # a batch far above the limit
        assert r["error_code"] in (ec.MESSAGE_TOO_LARGE, ec.RECORD_LIST_TOO_LARGE), r
        assert _list_offsets(c, topic, 0)["offset"] == before
        assert _produce(c, topic, 0, _batch(b"fits"))["error_code"] == 0


def test_produce_of_batches_a_client_may_not_send(kafka_broker, topic):
    now = int(time.time() * 1000)
    control = encode_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", [], now)], is_control=True,
                           producer_id=1, producer_epoch=0)
    with RawClient(kafka_broker.bootstrap) as c:
        before = _list_offsets(c, topic, 0)["offset"]
        assert _produce(c, topic, 0, control)["error_code"] == ec.INVALID_RECORD
        r = c.request(kp.PRODUCE, 8, {"transactional_id": None, "acks": 2, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": _batch(b"x")}]}]})
        assert r["responses"][0]["partition_responses"][0]["error_code"] == ec.INVALID_REQUIRED_ACKS
        assert _list_offsets(c, topic, 0)["offset"] == before


def test_produce_to_unknown_topic_or_partition(kafka_broker, topic):
    with RawClient(kafka_broker.bootstrap) as c:
        assert _produce(c, unique("no-such-topic"), 0, _batch(b"x"))["error_code"] == ec.UNKNOWN_TOPIC_OR_PARTITION
        assert _produce(c, topic, 99, _batch(b"x"))["error_code"] == ec.UNKNOWN_TOPIC_OR_PARTITION
        assert _produce(c, topic, -1, _batch(b"x"))["error_code"] == ec.UNKNOWN_TOPIC_OR_PARTITION
        # Produce does not create topics (Metadata does, when allowed)
        md = c.request(kp.METADATA, 9, {"topics": [{"name": unique("still-none")}], "allow_auto_topic_creation": False,
                                        "include_cluster_authorized_operations": False,
                                        "include_topic_authorized_operations": False})
        assert md["topics"][0]["error_code"] == ec.UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_beyond_the_end_is_offset_out_of_range(kafka_broker, topic):
    with RawClient(kafka_broker.bootstrap) as c:
        assert _produce(c, topic, 1, _batch(b"a", b"b"))["error_code"] == 0
        end = _list_offsets(c, topic, 1)["offset"]
        assert end >= 2
        r = _fetch(c, topic, 1, end + 10)
        assert r["error_code"] == ec.OFFSET_OUT_OF_RANGE and r["high_watermark"] == end
        assert _fetch(c, topic, 1, -5)["error_code"] == ec.OFFSET_OUT_OF_RANGE
        at_end = _fetch(c, topic, 1, end)  # the end itself is valid: nothing yet
        assert at_end["error_code"] == 0 and not at_end["records"]
        assert _fetch(c, topic, 7, 0)["error_code"] == ec.UNKNOWN_TOPIC_OR_PARTITION
        assert _fetch(c, unique("nope"), 0, 0)["error_code"] == ec.UNKNOWN_TOPIC_OR_PARTITION


def test_list_offsets_for_unknown_partition(kafka_broker, topic):
    with RawClient(kafka_broker.bootstrap) as c:
        assert _list_offsets(c, topic, 5)["error_code"] == ec.UNKNOWN_TOPIC_OR_PARTITION
        assert _list_offsets(c, unique("nope"), 0, -2)["error_code"] == ec.UNKNOWN_TOPIC_OR_PARTITION
        assert _list_offsets(c, topic, 0, -2)["error_code"] == 0


def test_group_errors(kafka_broker, topic):
    group = unique("bad-group")

    def join(c, group_id, member_id=""):
        return c.request(kp.JOIN_GROUP, 5, {"group_id": group_id, "session_timeout_ms": 6000,
                                            "rebalance_timeout_ms": 6000, "member_id": member_id,
                                            "group_instance_id": None, "protocol_type": "consumer",
                                            "protocols": [{"name": "range", "metadata": b"\x00\x01"}]})

    def sync(c, gen, member, assignments=()):
        return c.request(kp.SYNC_GROUP, 3, {"group_id": group, "generation_id": gen, "member_id": member,
                                            "group_instance_id": None, "assignments": list(assignments)})

    def heartbeat(c, gen, member):
        return c.request(kp.HEARTBEAT, 3, {"group_id": group, "generation_id": gen, "member_id": member,
                                           "group_instance_id": None})["error_code"]

    def commit(c, gen, member):
        r = c.request(kp.OFFSET_COMMIT, 7, {"group_id": group, "generation_id_or_member_epoch": gen,
                                            "member_id": member, "group_instance_id": None, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                            "committed_leader_epoch": -1, "committed_metadata": None}]}]})
        return r["topics"][0]["partitions"][0]["error_code"]

    with RawClient(kafka_broker.bootstrap, timeout=15) as c:
        assert join(c, "")["error_code"] == ec.INVALID_GROUP_ID
        r = c.request(kp.JOIN_GROUP, 5, {"group_id": group, "session_timeout_ms": 10, "rebalance_timeout_ms": 6000,
                                         "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                                         "protocols": [{"name": "range", "metadata": b""}]})
        assert r["error_code"] == ec.INVALID_SESSION_TIMEOUT
        first = join(c, group)
        assert first["error_code"] == ec.MEMBER_ID_REQUIRED and first["member_id"]
        me = first["member_id"]
        j = join(c, group, me)
        assert j["error_code"] == 0 and j["leader"] == me
        gen = j["generation_id"]
        # another member asking for a protocol type or assignor the group does not use
        other = c.request(kp.JOIN_GROUP, 5, {"group_id": group, "session_timeout_ms": 6000,
                                             "rebalance_timeout_ms": 6000, "member_id": "", "group_instance_id": None,
                                             "protocol_type": "connect", "protocols": [{"name": "x", "metadata": b""}]})
        assert other["error_code"] == ec.INCONSISTENT_GROUP_PROTOCOL
        # wrong generation
        assert sync(c, gen + 1, me)["error_code"] == ec.ILLEGAL_GENERATION
        assert heartbeat(c, gen + 5, me) == ec.ILLEGAL_GENERATION
        # unknown member
        assert sync(c, gen, "nobody")["error_code"] == ec.UNKNOWN_MEMBER_ID
        assert heartbeat(c, gen, "nobody") == ec.UNKNOWN_MEMBER_ID
        assert commit(c, gen, "nobody") == ec.UNKNOWN_MEMBER_ID
        # the real member finishes the rebalance and can then heartbeat and commit
        s = sync(c, gen, me, [{"member_id": me, "assignment": b"\x00\x01"}])
        assert s["error_code"] == 0 and s["assignment"] == b"\x00\x01"
        assert heartbeat(c, gen, me) == 0
        assert commit(c, gen + 1, me) == ec.ILLEGAL_GENERATION
        assert commit(c, gen, me) == 0
        assert heartbeat(c, gen - 1, me) == ec.ILLEGAL_GENERATION
        # heartbeats for an unknown group
        r = c.request(kp.HEARTBEAT, 3, {"group_id": unique("no-group"), "generation_id": 1, "member_id": "x",
                                        "group_instance_id": None})
        assert r["error_code"] == ec.UNKNOWN_MEMBER_ID
        left = c.request(kp.LEAVE_GROUP, 4, {"group_id": group, "members": [
            {"member_id": "nobody", "group_instance_id": None}, {"member_id": me, "group_instance_id": None}]})
        assert [m["error_code"] for m in left["members"]] == [ec.UNKNOWN_MEMBER_ID, 0]
        assert heartbeat(c, gen, me) == ec.UNKNOWN_MEMBER_ID


# ---------------------------------------------------------------------------------------------
# Counts and lengths that would make a careless decoder allocate or loop

@pytest.mark.parametrize("body", [
    struct.pack(">i", 0x7FFFFFFF),                                  # Metadata v1: topics array of 2^31-1
    struct.pack(">ih", 3, 0x7FFF) + b"ab",                          # a topic name longer than the frame
], ids=["huge-array", "long-string"])
def test_lying_counts_in_a_request_close_the_connection(kafka_broker, body):
    with RawClient(kafka_broker.bootstrap) as c:
        c.send_raw(_frame(_raw_header(kp.METADATA, 1, 3) + body))
        assert c.is_closed_by_peer()
    # a negative length for an array that cannot be null (Produce topic_data)
    with RawClient(kafka_broker.bootstrap) as c:
        c.send_raw(_frame(_raw_header(kp.PRODUCE, 3, 4) + struct.pack(">hhii", -1, -1, 5000, -7)))
        assert c.is_closed_by_peer()
    assert api_versions_ok(kafka_broker.bootstrap)


def test_produce_with_a_lying_records_length_closes_the_connection(kafka_broker, topic):
    name = topic.encode()
    body = (struct.pack(">h", -1) + struct.pack(">hi", -1, 5000) + struct.pack(">i", 1)
            + struct.pack(">h", len(name)) + name + struct.pack(">i", 1) + struct.pack(">i", 0)
            + struct.pack(">i", 0x7FFFFFF0) + b"\x00" * 32)  # records: 2 GiB announced, 32 bytes sent
    with RawClient(kafka_broker.bootstrap) as c:
        c.send_raw(_frame(_raw_header(kp.PRODUCE, 3, 9) + body))
        assert c.is_closed_by_peer()
    assert api_versions_ok(kafka_broker.bootstrap)


# ---------------------------------------------------------------------------------------------

def test_a_stock_client_still_produces_and_consumes(kafka_broker):
    from kafka import KafkaConsumer, KafkaProducer
    topic = unique("after-bad-input")
    p = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all")
    try:
        mds = [p.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode()).get(20) for i in range(20)]
    finally:
        p.close(5)
    assert len({(m.partition, m.offset) for m in mds}) == 20
    c = KafkaConsumer(topic, bootstrap_servers=kafka_broker.bootstrap, group_id=unique("g-after"),
                      auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=500,
                      fetch_max_wait_ms=100)
    got = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < 20 and time.monotonic() < deadline:
            for ms in c.poll(timeout_ms=200).values():
                got.extend(m.value for m in ms)
        c.commit()
    finally:
        c.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))
    # the broker said why it closed the bad connections
    log = kafka_broker.log_text()
    assert "closing" in log and "exceeds the limit" in log


def test_pipelined_produce_and_other_requests_answer_in_order(kafka_broker):
    """Several requests in one write: fast-path Produce responses (written together after the
    read) and other requests' responses come back in request order, each with its correlation id;
    a Produce the fast path declines (a duplicate partition) is answered in its place too."""
    topic = unique("pipelined")
    assert create_topic_raw(kafka_broker.bootstrap, topic, 2) == 0
    def produce(corr: int, parts: list[int], value: bytes) -> bytes:
        body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": p, "records": encode_batch([(None, value, [], 1)])}
                                               for p in parts]}]}
        return kp.encode_request(kp.PRODUCE, 9, corr, body, client_id="pipe")

    meta = kp.encode_request(kp.METADATA, 9, 2, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                                 "include_topic_authorized_operations": False}, client_id="pipe")
    wire = produce(1, [0], b"a") + meta + produce(3, [0, 1], b"b") + produce(4, [1, 1], b"dup") + produce(5, [0], b"c")
    with RawClient(kafka_broker.bootstrap) as c:
        c.send_raw(wire)
        answers = []
        for api in (kp.PRODUCE, kp.METADATA, kp.PRODUCE, kp.PRODUCE, kp.PRODUCE):
            corr, resp = kp.decode_response(api, 9, c.read_frame())
            answers.append((corr, resp))
    assert [a[0] for a in answers] == [1, 2, 3, 4, 5]
    offsets = [[(p["index"], p["error_code"], p["base_offset"]) for p in a[1]["responses"][0]["partition_responses"]]
               for i, a in enumerate(answers) if i != 1]
    assert offsets[0] == [(0, 0, 0)]
    assert offsets[1] == [(0, 0, 1), (1, 0, 0)]
    assert offsets[2] == [(1, 0, 1), (1, 0, 2)]   # both entries of the same partition, in order
    assert offsets[3] == [(0, 0, 2)]
    assert answers[1][1]["topics"][0]["name"] == topic


def test_truncated_produce_body_closes_only_that_connection(kafka_broker, topic):
    """A Produce frame whose body is cut short: the fast path declines it, the decoder reports it,
    the connection is closed and the listener keeps serving."""
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": encode_batch([(None, b"x" * 64, [], 1)])}]}]}
    frame = kp.encode_request(kp.PRODUCE, 7, 1, body, client_id="cut")[4:]
    cut = frame[:len(frame) - 20]
    with RawClient(kafka_broker.bootstrap) as c:
        c.send_raw(struct.pack(">i", len(cut)) + cut)
        assert c.is_closed_by_peer()
    assert api_versions_ok(kafka_broker.bootstrap)
