"""Tests of the sans-IO Kafka codec kafka_bridge.protocol (SPEC §11).

Round trips for every supported API and version, hand-checked byte vectors, bad input, and
interop with kafka-python: its JSON-driven classes, its older hand-written classes and its
sans-IO client protocol (KafkaProtocol) talking to this codec with real frames.
"""

from __future__ import annotations

import importlib
import pkgutil
import random
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_bridge import protocol as kp
from kafka_bridge.protocol import error_codes
from kafka_bridge.protocol.schema import Field

# ---------------------------------------------------------------------------------------------
# Schema-driven value generators.

INT_RANGES = {
    "int8": (-2**7, 2**7 - 1), "int16": (-2**15, 2**15 - 1), "uint16": (0, 2**16 - 1),
    "int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1),
}
TEXT = "abcxyz-._é€😀"


def random_value(t: str, rnd: random.Random):
    if t in INT_RANGES:
        return rnd.randint(*INT_RANGES[t])
    if t == "bool":
        return rnd.random() < 0.5
    if t == "float64":
        return rnd.random()
    if t == "string":
        return "".join(rnd.choice(TEXT) for _ in range(rnd.randint(0, 6)))
    if t in ("bytes", "records"):
        return rnd.randbytes(rnd.randint(0, 12))
    if t == "uuid":
        return uuid.UUID(int=rnd.getrandbits(128))
    raise AssertionError(t)


def random_struct(fields: list[Field], v: int, rnd: random.Random) -> dict:
    return {f.name: random_field(f, v, rnd) for f in fields if f.present(v)}


def random_field(f: Field, v: int, rnd: random.Random):
    if f.nullable_in(v) and rnd.random() < 0.25:
        return None
    if f.is_array:
        n = rnd.randint(0, 3)
        if f.is_struct:
            return [random_struct(f.fields, v, rnd) for _ in range(n)]
        return [random_value(f.elem, rnd) for _ in range(n)]
    if f.is_struct:
        return random_struct(f.fields, v, rnd)
    return random_value(f.type, rnd)


def expected(fields: list[Field], v: int, body: dict) -> dict:
    """What decoding the encoding of `body` must give: every field, defaults where absent."""
    out = {}
    for f in fields:
        if f.present(v) and f.name in body:
            val = body[f.name]
            if val is not None and f.is_struct:
                val = ([expected(f.fields, v, e) for e in val] if f.is_array
                       else expected(f.fields, v, val))
            out[f.name] = val
        else:
            out[f.name] = f.default()
    return out


def plain(x):
    """Compare-friendly copy: memoryviews to bytes, mappings to dicts."""
    if isinstance(x, (memoryview, bytearray)):
        return bytes(x)
    if hasattr(x, "items"):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(e) for e in x]
    return x


def fields_of(api, request: bool):
    return api.request if request else api.response


def versions_to_check(api):
    """min, max, and the first flexible version when there is one."""
    vs = {api.min_version, api.max_version}
    flexible = [v for v in range(api.min_version, api.max_version + 1) if api.is_flexible(v)]
    if flexible:
        vs.add(flexible[0])
    return sorted(vs)


def all_versions():
    return [(api, v) for api in kp.APIS for v in range(api.min_version, api.max_version + 1)]


# ---------------------------------------------------------------------------------------------
# Tables.

def test_supported_table_matches_the_brief():
    assert kp.SUPPORTED == {
        0: (3, 11), 1: (4, 16), 2: (1, 8), 3: (1, 12), 8: (2, 9), 9: (1, 9), 10: (0, 5),
        11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 5), 16: (0, 5), 17: (0, 1),
        18: (0, 4), 19: (2, 7), 20: (1, 6), 22: (0, 5), 24: (0, 3), 25: (0, 3), 26: (0, 3),
        28: (0, 3), 32: (1, 4), 33: (0, 2), 36: (0, 2), 37: (0, 3), 44: (0, 1), 60: (0, 1),
        # issue 11's admin APIs
        21: (0, 2), 29: (0, 3), 30: (0, 3), 31: (0, 3), 35: (0, 4), 42: (0, 2), 43: (0, 2), 46: (0, 0),
        47: (0, 0), 61: (0, 0), 65: (0, 0), 66: (0, 1),
        # issue 28: Kafka 4's group protocols (KIP-848, KIP-932), the versions librdkafka 2.16 speaks
        68: (1, 1), 69: (0, 0), 76: (1, 1), 77: (1, 1), 78: (1, 1), 79: (1, 1), 90: (0, 0), 91: (0, 0), 92: (0, 0),
        # issue 27: SCRAM credentials (KIP-554)
        50: (0, 0), 51: (0, 0),
    }
    assert kp.API_NAMES[kp.PRODUCE] == "Produce"
    assert kp.API_NAMES[kp.DESCRIBE_CLUSTER] == "DescribeCluster"
    assert set(kp.API_NAMES) == set(kp.SUPPORTED)


def test_error_codes():
    assert error_codes.NONE == 0
    assert error_codes.UNSUPPORTED_VERSION == 35
    assert error_codes.NOT_LEADER_OR_FOLLOWER == 6
    assert error_codes.FETCH_SESSION_ID_NOT_FOUND == 70
    assert error_codes.MEMBER_ID_REQUIRED == 79
    assert error_codes.FENCED_INSTANCE_ID == 82
    assert error_codes.UNKNOWN_TOPIC_ID == 100
    assert error_codes.TRANSACTION_ABORTABLE == 120
    assert error_codes.error_name(27) == "REBALANCE_IN_PROGRESS"
    assert error_codes.error_name(-1) == "UNKNOWN_SERVER_ERROR"
    assert error_codes.error_name(9999) == "UNKNOWN(9999)"


def test_error_codes_agree_with_kafka_python():
    errors = pytest.importorskip("kafka.errors")
    theirs = {cls.errno: cls for cls in errors.kafka_errors.values()}
    checked = 0
    for code, name in error_codes.ERROR_NAMES.items():
        if code in theirs and code > 0:
            checked += 1
            assert theirs[code].errno == code
    assert checked > 80


def test_header_version_rules():
    assert kp.request_header_version(kp.API_VERSIONS, 3) == 2
    assert kp.response_header_version(kp.API_VERSIONS, 3) == 0   # always v0
    assert kp.request_header_version(kp.API_VERSIONS, 2) == 1
    assert kp.request_header_version(kp.PRODUCE, 8) == 1
    assert kp.response_header_version(kp.PRODUCE, 8) == 0
    assert kp.request_header_version(kp.PRODUCE, 9) == 2
    assert kp.response_header_version(kp.PRODUCE, 9) == 1
    assert kp.request_header_version(kp.FETCH, 12) == 2
    assert kp.response_header_version(kp.DESCRIBE_CLUSTER, 0) == 1
    assert kp.request_header_version(kp.SASL_HANDSHAKE, 1) == 1
    assert kp.request_header_version(999, 0) == 1


# ---------------------------------------------------------------------------------------------
# Round trips.

@pytest.mark.parametrize("api", kp.APIS, ids=lambda a: a.name)
def test_roundtrip_every_version(api):
    rnd = random.Random(api.key)
    for v in range(api.min_version, api.max_version + 1):
        for request in (True, False):
            fields = fields_of(api, request)
            for _ in range(6):
                body = random_struct(fields, v, rnd)
                data = kp.encode_body(api.key, v, body, request=request)
                decoded = kp.decode_body(api.key, v, data, request=request, strict=True)
                assert plain(decoded) == plain(expected(fields, v, body)), (api.name, v, request)
                # what was decoded encodes to the very same bytes
                assert kp.encode_body(api.key, v, decoded, request=request) == data


@pytest.mark.parametrize("api", kp.APIS, ids=lambda a: a.name)
def test_empty_bodies_use_defaults(api):
    for v in versions_to_check(api):
        for request in (True, False):
            fields = fields_of(api, request)
            data = kp.encode_body(api.key, v, {}, request=request)
            decoded = kp.decode_body(api.key, v, data, request=request, strict=True)
            assert plain(decoded) == plain(expected(fields, v, {}))


@pytest.mark.parametrize("api,v", [(a, v) for a in kp.APIS for v in versions_to_check(a)],
                         ids=lambda x: getattr(x, "name", str(x)))
def test_whole_request_and_response(api, v):
    rnd = random.Random(v)
    req_body = random_struct(api.request, v, rnd)
    frame = kp.encode_request(api.key, v, 77, req_body, client_id="tester")
    dec = kp.FrameDecoder()
    dec.feed(frame)
    req = kp.decode_request(dec.next_frame(), strict=True)
    h = req.header
    assert (h.api_key, h.api_version, h.correlation_id) == (api.key, v, 77)
    assert req.header.client_id == "tester"
    assert req.header.header_version == kp.request_header_version(api.key, v)
    assert plain(req.body) == plain(expected(api.request, v, req_body))

    resp_body = random_struct(api.response, v, rnd)
    if api.key == kp.API_VERSIONS:
        resp_body["error_code"] = 0
    out = kp.encode_response(req.header, resp_body)
    assert struct.unpack(">i", out[:4])[0] == len(out) - 4
    corr, body = kp.decode_response(api.key, v, out[4:], strict=True)
    assert corr == 77
    assert plain(body) == plain(expected(api.response, v, resp_body))
    assert b"".join(kp.encode_response_parts(req.header, resp_body)) == out


# Hypothesis, for the hot-path APIs.

def strat_value(t: str):
    if t in INT_RANGES:
        return st.integers(*INT_RANGES[t])
    if t == "bool":
        return st.booleans()
    if t == "string":
        return st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
    if t in ("bytes", "records"):
        return st.binary(max_size=24)
    if t == "uuid":
        return st.uuids()
    if t == "float64":
        return st.floats(allow_nan=False)
    raise AssertionError(t)


def strat_struct(fields: list[Field], v: int):
    return st.fixed_dictionaries({f.name: strat_field(f, v) for f in fields if f.present(v)})


def strat_field(f: Field, v: int):
    if f.is_array:
        s = st.lists(strat_struct(f.fields, v) if f.is_struct else strat_value(f.elem),
                     max_size=3)
    elif f.is_struct:
        s = strat_struct(f.fields, v)
    else:
        s = strat_value(f.type)
    return st.none() | s if f.nullable_in(v) else s


@pytest.mark.parametrize("api_key", [kp.PRODUCE, kp.FETCH, kp.METADATA])
@pytest.mark.parametrize("request_side", [True, False], ids=["request", "response"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hypothesis_roundtrip(api_key, request_side, data):
    api = kp.BY_KEY[api_key]
    v = data.draw(st.integers(api.min_version, api.max_version), label="version")
    fields = fields_of(api, request_side)
    body = data.draw(strat_struct(fields, v), label="body")
    raw = kp.encode_body(api_key, v, body, request=request_side)
    decoded = kp.decode_body(api_key, v, raw, request=request_side, strict=True)
    assert plain(decoded) == plain(expected(fields, v, body))
    assert kp.encode_body(api_key, v, decoded, request=request_side) == raw


@settings(max_examples=300, deadline=None)
@given(api_version=st.sampled_from(all_versions()), request_side=st.booleans(),
       junk=st.binary(max_size=64))
def test_garbage_only_raises_protocol_errors(api_version, request_side, junk):
    api, v = api_version
    try:
        kp.decode_body(api.key, v, junk, request=request_side)
    except kp.ProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(frame=st.binary(max_size=80))
def test_garbage_frames_only_raise_protocol_errors(frame):
    try:
        kp.decode_request(frame)
    except kp.ProtocolError:
        pass


# ---------------------------------------------------------------------------------------------
# Hand-checked byte vectors.

def test_api_versions_v0_request_bytes():
    frame = kp.encode_request(18, 0, 1, {}, client_id="x")
    assert frame == bytes.fromhex("0000000b" "0012" "0000" "00000001" "0001" "78")
    req = kp.decode_request(frame[4:])
    assert req.header == kp.RequestHeader(18, 0, 1, "x", 1)
    assert req.body == {"client_software_name": "", "client_software_version": ""}


def test_api_versions_v3_request_bytes():
    body = {"client_software_name": "py", "client_software_version": "1.0"}
    frame = kp.encode_request(18, 3, 2, body, client_id="x")
    expect = bytes.fromhex(
        "0012" "0003" "00000002" "0001" "78" "00"    # header v2: client_id int16-sized, no tags
        "03" "7079" "04" "312e30" "00")              # compact strings, empty tagged fields
    assert frame == struct.pack(">i", len(expect)) + expect
    req = kp.decode_request(frame[4:])
    assert req.header.header_version == 2
    assert req.body == body


def test_api_versions_v0_response_bytes():
    header = kp.RequestHeader(18, 0, 5)
    body = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}]}
    out = kp.encode_response(header, body, framed=False)
    assert out == bytes.fromhex("00000005" "0000" "00000001" "0012" "0000" "0003")
    assert kp.decode_response(18, 0, out) == (5, {**body, "throttle_time_ms": 0,
                                                  "supported_features": [],
                                                  "finalized_features_epoch": -1,
                                                  "finalized_features": [],
                                                  "zk_migration_ready": False})


def test_api_versions_v3_response_bytes():
    header = kp.RequestHeader(18, 3, 6)
    body = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}],
            "throttle_time_ms": 0, "finalized_features_epoch": 5}
    out = kp.encode_response(header, body, framed=False)
    assert out == bytes.fromhex(
        "00000006"                                   # response header v0 even though flexible
        "0000" "02" "0012" "0000" "0003" "00"        # compact array of one entry + its tags
        "00000000"                                   # throttle_time_ms
        "01" "01" "08" "0000000000000005")           # one tagged field: tag 1, 8 bytes
    corr, dec = kp.decode_response(18, 3, out)
    assert corr == 6 and dec["finalized_features_epoch"] == 5
    assert dec["api_keys"] == body["api_keys"]


def test_metadata_v1_request_bytes():
    frame = kp.encode_request(3, 1, 9, {"topics": [{"name": "foo"}]}, client_id="c")
    assert frame[4:] == bytes.fromhex("0003" "0001" "00000009" "0001" "63"
                                      "00000001" "0003" "666f6f")
    req = kp.decode_request(frame[4:])
    assert req.body["topics"] == [{"topic_id": uuid.UUID(int=0), "name": "foo"}]
    # null topics (all topics) is -1
    assert kp.encode_request_body(3, 1, {"topics": None}) == bytes.fromhex("ffffffff")
    assert kp.decode_request_body(3, 1, bytes.fromhex("ffffffff"))["topics"] is None


def test_request_header_v2_with_tagged_fields():
    data = bytes.fromhex(
        "0003" "000c" "00000007" "0002" "6b70"   # Metadata v12, corr 7, client "kp"
        "02" "00" "01" "ff" "05" "02" "aabb"     # two unknown tagged fields, skipped
        "01" "00" "01" "00")                     # body: no topics, False, True, no tags
    header, pos = kp.parse_request_header(data)
    assert header == kp.RequestHeader(3, 12, 7, "kp", 2)
    assert data[pos:] == bytes.fromhex("01000100")
    req = kp.decode_request(data, strict=True)
    assert req.body["topics"] == []
    assert req.body["allow_auto_topic_creation"] is False
    assert req.body["include_topic_authorized_operations"] is True
    assert req.body["include_cluster_authorized_operations"] is False   # absent from v12
    # the encoder writes a header v2 without tagged fields
    assert kp.encode_request_header(3, 12, 7, "kp") == bytes.fromhex("0003000c00000007"
                                                                     "0002" "6b70" "00")


def test_null_client_id_and_header_v0():
    data = kp.encode_request_header(3, 1, 1, None)
    assert data == bytes.fromhex("00030001" "00000001" "ffff")
    assert kp.parse_request_header(data)[0].client_id is None
    v0 = kp.encode_request_header(7, 0, 4, header_version=0)
    assert kp.decode_request_header(v0, 0) == (kp.RequestHeader(7, 0, 4, None, 0), 8)
    assert kp.encode_response_header(4, 1) == bytes.fromhex("0000000400")
    assert kp.decode_response_header(bytes.fromhex("0000000400"), 1) == (4, 5)


def test_tagged_fields_are_written_only_when_not_default():
    base = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": []}
    plain_bytes = kp.encode_response_body(1, 12, base)
    assert plain_bytes == bytes.fromhex("00000000" "0000" "00000000" "01" "00")
    part = {"partition_index": 0, "records": b""}
    with_leader = dict(base, responses=[{"topic": "t", "partitions": [
        dict(part, current_leader={"leader_id": 3, "leader_epoch": 4})]}])
    raw = kp.encode_response_body(1, 12, with_leader)
    dec = kp.decode_response_body(1, 12, raw, strict=True)
    p = dec["responses"][0]["partitions"][0]
    assert p["current_leader"] == {"leader_id": 3, "leader_epoch": 4}
    assert p["diverging_epoch"] == {"epoch": -1, "end_offset": -1}   # default
    # the partition's tag section holds one field: tag 1, 9 bytes (the struct ends with its
    # own empty tag section); then the topic's and the response's empty tag sections
    assert raw.endswith(bytes.fromhex("01" "01" "09" "00000003" "00000004" "00" "00" "00"))


def test_records_are_not_copied():
    records = bytes(range(200)) * 10
    body = {"acks": 1, "timeout_ms": 100,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}]}
    frame = kp.encode_request(0, 9, 1, body)[4:]
    req = kp.decode_request(frame)
    rec = req.body["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(rec, memoryview) and rec.obj is frame and rec == records
    parts = kp.encode_response_parts(
        kp.RequestHeader(1, 12, 3),
        {"responses": [{"topic": "t", "partitions": [{"records": records}]}]})
    assert any(p is records for p in parts)


# ---------------------------------------------------------------------------------------------
# Frames.

def test_frame_decoder_incremental():
    frames = [b"", b"a", b"bc" * 1000]
    stream = b"".join(kp.encode_frame(f) for f in frames)
    dec = kp.FrameDecoder()
    got = []
    for i in range(len(stream)):            # one byte at a time
        dec.feed(stream[i:i + 1])
        got.extend(dec.frames())
    assert got == frames
    assert dec.buffered == 0
    dec.feed(stream)                        # all at once
    assert list(dec.frames()) == frames


def test_frame_too_large_is_refused_before_buffering():
    dec = kp.FrameDecoder(max_frame_size=1024)
    with pytest.raises(kp.FrameTooLarge) as e:
        dec.feed(struct.pack(">i", 1025))   # only the prefix has arrived
    assert e.value.size == 1025 and e.value.limit == 1024
    assert kp.DEFAULT_MAX_FRAME_SIZE == 100 * 1024 * 1024
    with pytest.raises(kp.FrameTooLarge):
        kp.FrameDecoder().feed(struct.pack(">i", 2**31 - 1))
    ok = kp.FrameDecoder(max_frame_size=1024)
    ok.feed(struct.pack(">i", 1024))
    assert ok.next_frame() is None


def test_negative_frame_size():
    dec = kp.FrameDecoder()
    with pytest.raises(kp.CorruptFrame):
        dec.feed(b"\xff\xff\xff\xfe")
    assert issubclass(kp.CorruptFrame, kp.ProtocolError)


def test_second_frame_size_checked_when_reached():
    dec = kp.FrameDecoder(max_frame_size=10)
    dec.feed(kp.encode_frame(b"ok") + struct.pack(">i", 11))
    assert dec.next_frame() == b"ok"
    with pytest.raises(kp.FrameTooLarge):
        dec.next_frame()


# ---------------------------------------------------------------------------------------------
# Bad input.

def produce_v9_request_frame() -> bytes:
    body = {"transactional_id": "tx", "acks": -1, "timeout_ms": 5,
            "topic_data": [{"name": "t", "partition_data": [
                {"index": 1, "records": b"r" * 300}, {"index": 2, "records": None}]}]}
    return kp.encode_request(0, 9, 3, body)[4:]


@pytest.mark.parametrize("api_key,v", [(0, 3), (0, 9), (1, 4), (1, 12), (1, 16), (3, 1), (3, 12),
                                       (11, 0), (11, 9), (19, 7)])
def test_truncated_bodies_are_corrupt(api_key, v):
    api = kp.BY_KEY[api_key]
    rnd = random.Random(0)
    for request in (True, False):
        fields = fields_of(api, request)
        body = random_struct(fields, v, rnd)
        for f in fields:          # make sure the arrays are not empty
            if f.is_array and f.is_struct and f.present(v) and not body.get(f.name):
                body[f.name] = [random_struct(f.fields, v, rnd)]
        data = kp.encode_body(api_key, v, body, request=request)
        exc = kp.CorruptRequest if request else kp.CorruptResponse
        for cut in range(len(data)):
            with pytest.raises(exc):
                kp.decode_body(api_key, v, data[:cut], request=request)


def test_truncated_request_frames():
    frame = produce_v9_request_frame()
    for cut in range(len(frame)):
        with pytest.raises(kp.CorruptRequest):
            kp.decode_request(frame[:cut])


def test_huge_counts_and_lengths_are_refused_without_allocating():
    # Metadata v1: topics count 2**31-1 with nothing behind it
    with pytest.raises(kp.CorruptRequest, match="count"):
        kp.decode_request_body(3, 1, bytes.fromhex("7fffffff"))
    # Produce v9: compact array count near 2**32
    with pytest.raises(kp.CorruptRequest):
        kp.decode_request_body(0, 9, bytes.fromhex("00" "ffff" "00000005" "ffffffff0f"))
    # string length beyond the buffer
    with pytest.raises(kp.CorruptRequest, match="overruns"):
        kp.decode_request_body(3, 1, bytes.fromhex("00000001" "7fff" "61"))
    # records length beyond the buffer
    with pytest.raises(kp.CorruptRequest):
        kp.decode_request_body(0, 3, bytes.fromhex("ffff" "0001" "00000005" "00000001" "0001" "74"
                                                   "00000001" "00000000" "7ffffff0" "00"))
    # a varint longer than 5 bytes
    with pytest.raises(kp.CorruptRequest, match="varint"):
        kp.decode_request_body(0, 9, bytes.fromhex("ffffffffffff01"))
    # a tagged field whose size overruns the buffer
    with pytest.raises(kp.CorruptRequest, match="tagged"):
        kp.decode_request_body(18, 3, bytes.fromhex("01" "01" "01" "00" "7f" "00"))


def test_negative_lengths_and_nulls():
    # -2 is never valid, -1 only where nullable
    with pytest.raises(kp.CorruptRequest, match="negative"):
        kp.decode_request_body(3, 1, bytes.fromhex("fffffffe"))
    with pytest.raises(kp.CorruptRequest, match="non-nullable"):
        kp.decode_request_body(3, 1, bytes.fromhex("00000001" "ffff"))        # null topic name
    with pytest.raises(kp.CorruptRequest, match="non-nullable"):
        kp.decode_request_body(12, 0, bytes.fromhex("ffff" "00000001" "0001" "6d"))  # null group
    with pytest.raises(kp.CorruptRequest, match="negative"):
        kp.decode_request_body(12, 0, bytes.fromhex("fffb" "00000001" "0001" "6d"))


def test_invalid_utf8():
    with pytest.raises(kp.CorruptRequest, match="utf-8"):
        kp.decode_request_body(3, 1, bytes.fromhex("00000001" "0002" "c328"))
    bad_client = bytes.fromhex("0003" "0001" "00000001" "0001" "ff" "ffffffff")
    with pytest.raises(kp.CorruptRequest):
        kp.decode_request(bad_client)


def test_unknown_api_key_and_unsupported_versions():
    with pytest.raises(kp.UnknownApiKey) as e:
        kp.decode_request(kp.encode_request_header(999, 0, 11, "c"))
    assert e.value.header.correlation_id == 11
    assert isinstance(e.value, kp.UnsupportedVersion)
    for api_key, v in [(0, 2), (0, 12), (1, 3), (18, 5), (18, 99), (3, 13)]:
        frame = kp.encode_request_header(api_key, v, 12, "c") + b"\x00" * 8
        with pytest.raises(kp.UnsupportedVersion) as e:
            kp.decode_request(frame)
        assert (e.value.api_key, e.value.api_version) == (api_key, v)
        assert e.value.header.correlation_id == 12
    with pytest.raises(kp.UnsupportedVersion):
        kp.encode_body(0, 12, {}, request=True)
    with pytest.raises(kp.UnknownApiKey):
        kp.encode_body(5, 0, {}, request=True)


def test_unsupported_api_versions_answer():
    out = kp.encode_unsupported_api_versions(21)
    # header v0, then a v0 body: error 35 and the supported list
    assert out[4:8] == struct.pack(">i", 21)
    assert out[8:10] == struct.pack(">h", 35)
    corr, body = kp.decode_response(18, 0, out[4:], strict=True)
    assert corr == 21 and body["error_code"] == 35
    listed = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert listed == kp.SUPPORTED
    # a client that asked for v3 reads the v0 body (KIP-511)
    corr, body3 = kp.decode_response(18, 3, out[4:])
    assert body3["error_code"] == 35 and len(body3["api_keys"]) == len(kp.SUPPORTED)


def test_api_versions_body_from_supported_table():
    body = kp.api_versions_response_body()
    assert [k["api_key"] for k in body["api_keys"]] == sorted(kp.SUPPORTED)
    raw = kp.encode_response_body(18, 3, body)
    assert kp.decode_response_body(18, 3, raw, strict=True)["api_keys"] == body["api_keys"]


def test_strict_decoding_refuses_trailing_bytes():
    raw = kp.encode_request_body(12, 0, {"group_id": "g", "generation_id": 1, "member_id": "m"})
    assert kp.decode_request_body(12, 0, raw + b"xx")["group_id"] == "g"
    with pytest.raises(kp.CorruptRequest, match="left"):
        kp.decode_request_body(12, 0, raw + b"xx", strict=True)


def test_encode_errors():
    with pytest.raises(kp.EncodeError):
        kp.encode_request_body(12, 0, {"group_id": None})               # not nullable
    with pytest.raises(kp.EncodeError):
        kp.encode_request_body(12, 0, {"generation_id": 2**31})         # out of int32 range
    with pytest.raises(kp.EncodeError):
        kp.encode_request_body(12, 0, {"group_id": "x" * 40000})        # int16 string length
    with pytest.raises(kp.EncodeError):
        kp.encode_response_body(0, 9, {"responses": [{"name": 5}]})     # not a str
    with pytest.raises(kp.EncodeError):                                  # records must be bytes
        kp.encode_request_body(0, 9, {"topic_data": [{"name": "t", "partition_data": [
            {"index": 0, "records": "not bytes"}]}]})
    # any buffer is measured in bytes, whatever its item size
    ints = memoryview(b"abcdefgh").cast("I")
    raw = kp.encode_request_body(0, 3, {"topic_data": [{"name": "t", "partition_data": [
        {"index": 0, "records": ints}]}]})
    assert kp.decode_request_body(0, 3, raw)["topic_data"][0]["partition_data"][0]["records"] \
        == b"abcdefgh"


def test_encode_ignores_fields_outside_the_version():
    # rack_id exists from Fetch v11; v4 must not write it
    a = kp.encode_request_body(1, 4, {"max_wait_ms": 1, "rack_id": "r1"})
    b = kp.encode_request_body(1, 4, {"max_wait_ms": 1})
    assert a == b


def test_precompile_and_generated_source():
    # an encoder and a decoder for each direction of each supported version
    assert kp.precompile() == 4 * sum(hi - lo + 1 for lo, hi in kp.SUPPORTED.values())
    src = kp.generated_source(0, 9, True)
    assert "def decode(buf, mv, pos)" in src and "mv[pos:" in src


# ---------------------------------------------------------------------------------------------
# Interop with kafka-python (3.x).

def kafka_python_json_classes():
    pytest.importorskip("kafka")
    for mod in ("kafka.protocol.metadata", "kafka.protocol.consumer", "kafka.protocol.producer",
                "kafka.protocol.admin", "kafka.protocol.sasl"):
        importlib.import_module(mod)
    from kafka.protocol.api_message import ApiMessage

    def walk(c):
        for s in c.__subclasses__():
            yield s
            yield from walk(s)
    return {(c.API_KEY, c.type == "request"): c for c in walk(ApiMessage)
            if getattr(c, "_class_version", 1) is None and getattr(c, "_json", None)}


def kafka_python_dict(obj):
    """to_dict of a kafka-python message, with uuids and buffers made comparable."""
    def conv(x):
        if isinstance(x, (bytearray, memoryview)):
            return bytes(x)
        if isinstance(x, dict):
            # kafka-python turns *authorized_operations ints into sets; compare the rest
            return {k: conv(v) for k, v in x.items() if k != "authorized_operations"}
        if isinstance(x, list):
            return [conv(e) for e in x]
        if x is not None and type(x).__name__ == "Uuid":
            return uuid.UUID(bytes=bytes(x.bytes))
        return x
    return conv(obj.to_dict(json=False))


def present_only(fields: list[Field], v: int, d: dict) -> dict:
    out = {}
    for f in fields:
        if f.present(v) and not (f.name.endswith("authorized_operations") and f.type == "int32"):
            val = d[f.name]
            if val is not None and f.is_struct:
                val = ([present_only(f.fields, v, e) for e in val] if f.is_array
                       else present_only(f.fields, v, val))
            out[f.name] = val
    return out


@pytest.mark.parametrize("api", kp.APIS, ids=lambda a: a.name)
def test_kafka_python_json_classes_agree(api):
    """Our bytes decode with kafka-python's codec to the same values and re-encode byte for
    byte, for every version, requests and responses."""
    classes = kafka_python_json_classes()
    if (api.key, True) not in classes:  # kafka-python 3.0 has no KIP-848/KIP-932 classes
        pytest.skip(f"kafka-python has no {api.name} schema (librdkafka speaks it in the group tests)")
    rnd = random.Random(100 + api.key)
    for v in range(api.min_version, api.max_version + 1):
        for request in (True, False):
            cls = classes[(api.key, request)]
            fields = fields_of(api, request)
            for _ in range(4):
                body = random_struct(fields, v, rnd)
                if api.key == kp.API_VERSIONS and not request:
                    body["error_code"] = 0       # kafka-python reads an error reply as v0
                ours = kp.encode_body(api.key, v, body, request=request)
                theirs = cls.decode(ours, version=v)
                want = plain(present_only(fields, v, expected(fields, v, body)))
                assert kafka_python_dict(theirs) == want
                theirs._header = None
                again = bytes(theirs.encode(version=v))
                assert again == ours, (api.name, v, request)
                assert plain(kp.decode_body(api.key, v, again, request=request, strict=True)) == \
                    plain(expected(fields, v, body))


def kafka_python_old_classes():
    pytest.importorskip("kafka")
    import kafka.protocol.old as old
    out = {}
    for m in pkgutil.iter_modules(old.__path__):
        mod = importlib.import_module("kafka.protocol.old." + m.name)
        for name in dir(mod):
            obj = getattr(mod, name)
            if isinstance(obj, list) and obj and hasattr(obj[0], "API_KEY"):
                for c in obj:
                    # kafka-python's lists have slips (AlterConfigsResponse holds AlterConfigsRequest_v1):
                    # keep a class only where its own name says the same direction as its list
                    same_side = ("Request_v" in c.__name__) == name.endswith("Request")
                    if c.API_VERSION == obj.index(c) and same_side:
                        out[(c.API_KEY, c.API_VERSION, name.endswith("Request"))] = c
    return out


# Where kafka-python's old hand-written classes themselves depart from Kafka's message JSON files
# (checked against kafka/protocol/old/admin.py): the cross-check skips exactly these.
KAFKA_PYTHON_SLIPS = {
    (29, 2): "DescribeAcls v2 is flexible in Kafka; kafka-python's v2 classes reuse v1's schema",
    (35, 0): "DescribeLogDirs v0 request: kafka-python has `partitions` as one int32 and the topic list "
             "not nullable; Kafka has []int32 and null = every topic",
}


def test_kafka_python_hand_written_classes_agree():
    """kafka-python's older hand-written structs (an independent transcription) read our
    bytes and write back the same bytes, for every version both sides have."""
    classes = {k: c for k, c in kafka_python_old_classes().items() if k[:2] not in KAFKA_PYTHON_SLIPS}
    rnd = random.Random(7)
    checked = 0
    for api in kp.APIS:
        for v in range(api.min_version, api.max_version + 1):
            for request in (True, False):
                cls = classes.get((api.key, v, request))
                if cls is None:
                    continue
                fields = fields_of(api, request)
                for _ in range(4):
                    body = random_struct(fields, v, rnd)
                    if api.key == kp.API_VERSIONS and not request:
                        body["error_code"] = 0
                    ours = kp.encode_body(api.key, v, body, request=request)
                    obj = cls.decode(ours)
                    again = bytes(cls(*[getattr(obj, n) for n in obj.SCHEMA.names]).encode())
                    assert again == ours, (api.name, v, request)
                checked += 1
    assert checked > 150


def test_real_kafka_python_requests():
    """Requests as kafka-python builds them (header and frame included) decode as expected."""
    pytest.importorskip("kafka")
    from kafka.protocol.consumer import FetchRequest, JoinGroupRequest, OffsetCommitRequest
    from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
    from kafka.protocol.old.fetch import FetchRequest as OldFetchRequest
    from kafka.protocol.old.metadata import MetadataRequest as OldMetadataRequest
    from kafka.protocol.old.produce import ProduceRequest as OldProduceRequest
    from kafka.protocol.producer import ProduceRequest

    def roundtrip(req, corr):
        req.with_header(correlation_id=corr, client_id="kafka-python-test")
        frames = kp.FrameDecoder()
        frames.feed(bytes(req.encode(header=True, framed=True)))
        out = kp.decode_request(frames.next_frame(), strict=True)
        assert out.header.correlation_id == corr
        assert out.header.client_id == "kafka-python-test"
        return out

    r = roundtrip(MetadataRequest[1](topics=[MetadataRequest.MetadataRequestTopic(name="foo")]), 1)
    assert r.header.api_key == 3 and r.body["topics"][0]["name"] == "foo"
    r = roundtrip(MetadataRequest[12](topics=None, allow_auto_topic_creation=False,
                                      include_topic_authorized_operations=True), 2)
    assert r.header.header_version == 2
    assert r.body["topics"] is None and r.body["allow_auto_topic_creation"] is False
    assert r.body["include_topic_authorized_operations"] is True

    r = roundtrip(ApiVersionsRequest[3](client_software_name="kafka-python",
                                        client_software_version="3.0"), 3)
    assert r.body == {"client_software_name": "kafka-python", "client_software_version": "3.0"}

    batch = b"\x00" * 61 + b"records!"
    for v in (3, 7, 9, 11):
        TP = ProduceRequest.TopicProduceData
        req = ProduceRequest[v](transactional_id=None if v < 9 else "tx", acks=-1,
                                timeout_ms=1500, topic_data=[TP(name="orders", partition_data=[
                                    TP.PartitionProduceData(index=4, records=batch)])])
        r = roundtrip(req, 10 + v)
        part = r.body["topic_data"][0]["partition_data"][0]
        assert (r.body["acks"], r.body["timeout_ms"]) == (-1, 1500)
        assert part["index"] == 4 and part["records"] == batch

    for v in (4, 11, 12, 15, 16):
        FT = FetchRequest.FetchTopic
        topic = FT(topic="orders", topic_id=uuid.UUID(int=5), partitions=[
            FT.FetchPartition(partition=2, fetch_offset=99, partition_max_bytes=1 << 20,
                              current_leader_epoch=7, log_start_offset=-1)])
        req = FetchRequest[v](replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=52428800,
                              isolation_level=1, session_id=0, session_epoch=-1,
                              topics=[topic], forgotten_topics_data=[], rack_id="rack-a")
        r = roundtrip(req, 20 + v)
        p = r.body["topics"][0]["partitions"][0]
        assert (p["partition"], p["fetch_offset"], p["partition_max_bytes"]) == (2, 99, 1 << 20)
        assert r.body["max_wait_ms"] == 500 and r.body["isolation_level"] == 1
        if v >= 13:
            assert r.body["topics"][0]["topic_id"] == uuid.UUID(int=5)
        else:
            assert r.body["topics"][0]["topic"] == "orders"
        if v >= 9:
            assert p["current_leader_epoch"] == 7
        if v >= 11:
            assert r.body["rack_id"] == "rack-a"

    JP = JoinGroupRequest.JoinGroupRequestProtocol
    for v in (0, 5, 9):
        req = JoinGroupRequest[v](group_id="g", session_timeout_ms=10000,
                                  rebalance_timeout_ms=30000, member_id="", group_instance_id=None,
                                  protocol_type="consumer",
                                  protocols=[JP(name="range", metadata=b"\x00\x01meta")],
                                  reason="joining")
        r = roundtrip(req, 30 + v)
        assert r.body["protocols"] == [{"name": "range", "metadata": b"\x00\x01meta"}]
        assert r.body["group_id"] == "g" and r.body["session_timeout_ms"] == 10000

    OT = OffsetCommitRequest.OffsetCommitRequestTopic
    for v in (2, 8, 9):
        req = OffsetCommitRequest[v](group_id="g", generation_id_or_member_epoch=3, member_id="m",
                                     retention_time_ms=-1, topics=[OT(name="orders", partitions=[
                                         OT.OffsetCommitRequestPartition(
                                             partition_index=1, committed_offset=42,
                                             committed_metadata=None)])])
        r = roundtrip(req, 40 + v)
        p = r.body["topics"][0]["partitions"][0]
        assert (p["partition_index"], p["committed_offset"]) == (1, 42)
        assert p["committed_metadata"] is None

    # the older hand-written classes build the same requests
    r = roundtrip(OldMetadataRequest[1](topics=["a", "b"]), 50)
    assert [t["name"] for t in r.body["topics"]] == ["a", "b"]
    r = roundtrip(OldProduceRequest[7](transactional_id=None, acks=1, timeout_ms=30000,
                                       topic_data=[("t", [(0, batch)])]), 51)
    assert r.body["topic_data"][0]["partition_data"][0]["records"] == batch
    r = roundtrip(OldFetchRequest[4](-1, 100, 1, 1000, 0, [("t", [(0, 5, 1000)])]), 52)
    assert r.body["topics"][0]["partitions"][0]["fetch_offset"] == 5


def test_kafka_python_client_protocol_conversation():
    """kafka-python's sans-IO client protocol sends real frames to this codec and reads our
    responses back, with the right header versions, for every API and version we support."""
    pytest.importorskip("kafka")
    from kafka.protocol.parser import KafkaProtocol
    classes = kafka_python_json_classes()
    client = KafkaProtocol(client_id="kp-conv")
    frames = kp.FrameDecoder()
    rnd = random.Random(11)
    for api in kp.APIS:
        if (api.key, True) not in classes:  # KIP-848/KIP-932 APIs: not in kafka-python 3.0
            continue
        for v in versions_to_check(api):
            req_body = random_struct(api.request, v, rnd)
            if api.key == kp.PRODUCE:
                req_body["acks"] = -1     # kafka-python expects no answer for acks=0
            req_cls = classes[(api.key, True)]
            req_obj = req_cls.decode(kp.encode_request_body(api.key, v, req_body), version=v)
            req_obj._header = None
            req_obj.API_VERSION = v
            corr = client.send_request(req_obj)
            frames.feed(client.send_bytes())
            req = kp.decode_request(frames.next_frame(), strict=True)
            assert req.header.correlation_id == corr and req.header.client_id == "kp-conv"
            assert plain(req.body) == plain(expected(api.request, v, req_body))

            resp_body = random_struct(api.response, v, rnd)
            if api.key == kp.API_VERSIONS:
                resp_body["error_code"] = 0
            wire = kp.encode_response(req.header, resp_body)
            (got_corr, resp), = client.receive_bytes(wire[:5]) + client.receive_bytes(wire[5:])
            assert got_corr == corr
            assert kafka_python_dict(resp) == plain(present_only(
                api.response, v, expected(api.response, v, resp_body))), (api.name, v)


def test_kafka_python_reads_unsupported_api_versions_answer():
    pytest.importorskip("kafka")
    from kafka.protocol.metadata import ApiVersionsRequest
    from kafka.protocol.parser import KafkaProtocol
    client = KafkaProtocol(client_id="kp")
    corr = client.send_request(ApiVersionsRequest[4]())
    frames = kp.FrameDecoder()
    frames.feed(client.send_bytes())
    # kafka-python has no ApiVersions v5: answer its v4 request as a broker that only knew v0-v3
    # would, and check the client reads that answer (header v0, v0 body, error 35, the list).
    header, _ = kp.parse_request_header(frames.next_frame())
    assert header.api_key == 18 and header.header_version == 2
    (got, resp), = client.receive_bytes(kp.encode_unsupported_api_versions(header.correlation_id))
    assert got == corr and resp.error_code == 35
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == kp.SUPPORTED


def test_scram_credential_apis_round_trip():
    """DescribeUserScramCredentials / AlterUserScramCredentials v0 (flexible): what a client sends
    decodes to the fields, and what the broker answers encodes and decodes back unchanged."""
    from kafka_bridge.protocol import codec
    alter = {"deletions": [{"name": "bob", "mechanism": 2}],
             "upsertions": [{"name": "alice", "mechanism": 1, "iterations": 8192, "salt": b"s\x00lt",
                             "salted_password": b"\x01" * 32}]}
    raw = codec.encode_request_body(kp.ALTER_USER_SCRAM_CREDENTIALS, 0, alter)
    assert codec.decode_request_body(kp.ALTER_USER_SCRAM_CREDENTIALS, 0, raw) == alter
    resp = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "results": [{"user": "alice", "error_code": 0, "error_message": None,
                         "credential_infos": [{"mechanism": 1, "iterations": 8192}]}]}
    raw = codec.encode_response_body(kp.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, resp)
    assert codec.decode_response_body(kp.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, raw) == resp
