"""The Fetch fast path (kafka_bridge/handlers/fetch_frame.py, rmq/_native_fetch.h) against the
reference: the same Fetch frames through handle_frame and through the codec + authorizer +
handle_fetch of one in-process broker give byte-identical responses, for every version the path
takes, topics by name and by id, unknown topics and partitions, offsets out of range, byte
budgets and both isolation levels; truncated and mutated frames are either declined (the codec
then has them) or read exactly as the codec reads them."""
from __future__ import annotations

import asyncio
import uuid

import pytest

from kafka_bridge import authorizer
from kafka_bridge import protocol as kp
from kafka_bridge.bridge import Connection, KafkaBridge
from kafka_bridge.handlers import fetch, fetch_frame, produce
from kafka_bridge.records import encode_batch
from rmq import native
from rmq.broker.controller import BrokerController
from rmq.config import load_config

pytestmark = pytest.mark.skipif(native.ext is None, reason="needs the C extension rmq._native")

TS = 1_700_000_000_000
TOPICS = {"ff0": 3, "ff1": 2}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A broker whose topics hold records: ff0 partitions 0..2 with 5, 1 and 0 records, ff1
    partition 0 with 3 (one batch of 2 with keys and headers, then 1), partition 1 empty."""
    ctl = BrokerController(load_config(None, {"storePathRootDir": str(tmp_path_factory.mktemp("fetch-frame"))}))
    ctl.start()
    bridge = KafkaBridge(ctl, "127.0.0.1", 9092)
    conn = Connection(peer=("127.0.0.1", 45678))
    for name, queues in TOPICS.items():
        ctl.create_topic(name, queues)
    assert ctl.store.queues_prepared_event().wait(10)

    def batch(n, base):
        return encode_batch([(f"k{base + i}".encode() if i % 2 else None, f"value-{base + i}".encode() * (1 + i),
                              [("h", b"v")] if i == 1 else [], TS + base + i) for i in range(n)])
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 30000, "topic_data": [
        {"name": "ff0", "partition_data": [{"index": 0, "records": batch(3, 0)}, {"index": 1, "records": batch(1, 10)}]},
        {"name": "ff1", "partition_data": [{"index": 0, "records": batch(2, 20)}]}]}
    more = {**body, "topic_data": [{"name": "ff0", "partition_data": [{"index": 0, "records": batch(2, 3)}]},
                                   {"name": "ff1", "partition_data": [{"index": 0, "records": batch(1, 22)}]}]}

    async def fill():
        for b in (body, more):
            res = await produce.handle_produce(bridge, conn, 9, b)
            assert all(p["error_code"] == 0 for t in res["responses"] for p in t["partition_responses"])
    asyncio.run(fill())
    yield bridge, conn
    ctl.shutdown()


def fetch_request(version: int, topics: list, *, max_wait: int = 0, min_bytes: int = 1, max_bytes: int = 1 << 20,
                  isolation: int = 0, correlation: int = 11) -> bytes:
    """A Fetch request frame (without its size); topics: [(name, [(partition, offset, max bytes)])]."""
    body = {"replica_id": -1, "max_wait_ms": max_wait, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "isolation_level": isolation, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
            "rack_id": "rack-a", "topics": [
                {"topic": name, "topic_id": KafkaBridge.topic_id(name) if name != "?" else uuid.UUID(int=7),
                 "partitions": [{"partition": p, "current_leader_epoch": -1, "fetch_offset": off, "last_fetched_epoch": -1,
                                 "log_start_offset": -1, "partition_max_bytes": pmax} for p, off, pmax in parts]}
                for name, parts in topics]}
    return kp.encode_request(kp.FETCH, version, correlation, body, client_id="t")[4:]


def both(bridge, conn, frame: bytes) -> tuple[bytes, bytes]:
    """(reference response, fast path response) to one frame."""
    hdr, at = kp.decode_request_header_checked(frame)

    async def go():
        req = kp.decode_request(frame)
        body = await authorizer.authorize(bridge, conn, kp.FETCH, hdr.api_version, req.body, fetch.handle_fetch)
        ref = b"".join(kp.encode_response_parts(hdr, body))
        return ref, await fetch_frame.handle_frame(bridge, conn, hdr, frame, at)
    return asyncio.run(go())


SHAPES = [
    [("ff0", [(0, 0, 1 << 20), (1, 0, 1 << 20), (2, 0, 1 << 20)]), ("ff1", [(0, 1, 1 << 20), (1, 0, 100)])],
    [("ff0", [(0, 2, 1 << 20)])],                                 # from the middle of a batch
    [("ff0", [(0, 5, 1 << 20), (1, 1, 1 << 20)])],                # at the high watermark: nothing
    [("ff0", [(0, 99, 1 << 20), (7, 0, 1 << 20)])],               # out of range; no such partition
    [("nosuch", [(0, 0, 1 << 20)]), ("ff1", [(0, 0, 10)])],        # unknown topic; a tiny budget
    [("?", [(0, 0, 1 << 20)]), ("ff0", [(0, 0, 1 << 20)])],        # an unknown topic id (v13+)
    [("ff0", [(0, 0, 1 << 20), (0, 3, 1 << 20)]), ("ff0", [(1, 0, 1 << 20)])],  # a partition and a topic twice
    [],
]


@pytest.mark.parametrize("version", range(fetch_frame.MIN_VERSION, fetch_frame.MAX_VERSION + 1))
def test_responses_match_the_reference(broker, version):
    bridge, conn = broker
    for i, shape in enumerate(SHAPES):
        if version < 13 and any(name == "?" for name, _ in shape):
            continue
        for kwargs in ({}, {"max_bytes": 60}, {"isolation": 1}, {"min_bytes": 1 << 20}):
            frame = fetch_request(version, shape, correlation=i, **kwargs)
            ref, fast = both(bridge, conn, frame)
            assert fast == ref, (version, shape, kwargs)
    # records did come back (not only empty answers)
    _, fast = both(bridge, conn, fetch_request(version, SHAPES[0]))
    res = kp.decode_response(kp.FETCH, version, fast[4:])[1]
    assert sum(len(p["records"] or b"") for t in res["responses"] for p in t["partitions"]) > 100


def _parsed_by_reference(frame: bytes, version: int, at: int):
    body = kp.decode_request_body(kp.FETCH, version, frame, at)
    return (body["max_wait_ms"], body["min_bytes"], body["max_bytes"], body["isolation_level"],
            [(t["topic_id"].bytes if version >= 13 else t["topic"],
              [(p["partition"], p["fetch_offset"], p["partition_max_bytes"]) for p in t["partitions"]])
             for t in body["topics"]])


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 16])
def test_truncated_and_mutated_frames_are_declined_or_read_as_the_codec_reads_them(broker, version):
    """Every truncation and single-byte change of a request body: where the C reader takes the
    frame, the codec decodes the same fields from it, and (when it would not long-poll) both paths
    answer it with the same bytes; where the codec refuses a frame, the C reader declines it."""
    bridge, conn = broker
    frame = fetch_request(version, SHAPES[0] if version < 13 else SHAPES[5] + SHAPES[0])
    hdr, at = kp.decode_request_header_checked(frame)
    assert native.ext.kafka_fetch_parse(frame, at, version) is not None
    variants = [frame[:n] for n in range(at, len(frame))]
    for pos in range(at, len(frame)):
        for value in (0x00, 0x01, 0x7F, 0x80, 0xFF, frame[pos] ^ 0x40):
            variants.append(frame[:pos] + bytes([value]) + frame[pos + 1:])
    variants.append(frame + b"\x00\x01")                       # trailing bytes: both read past them
    accepted = 0
    for v in variants:
        got = native.ext.kafka_fetch_parse(v, at, version)
        try:
            want = _parsed_by_reference(v, version, at)
        except Exception:  # the codec refuses it (the listener closes the connection): so must C
            assert got is None, v.hex()
            continue
        if got is None:
            continue  # declined: the codec has it
        accepted += 1
        assert got == want, v.hex()
        if got[0] <= 0 or got[1] <= 1:  # answers at once (no long poll): the whole responses compared
            ref, fast = both(bridge, conn, v)
            assert fast == ref, v.hex()
    assert accepted > len(variants) // 4


def test_tagged_fields_forgotten_topics_and_replica_fetches_are_declined(broker):
    bridge, conn = broker
    tagged = fetch_request(12, SHAPES[1])
    assert tagged[-1] == 0
    tagged = tagged[:-1] + b"\x01\x00\x02\x01\x00"             # top-level tag 0 (cluster_id = "")
    hdr, at = kp.decode_request_header_checked(tagged)
    assert kp.decode_request_body(kp.FETCH, 12, tagged, at)["cluster_id"] == ""
    assert native.ext.kafka_fetch_parse(tagged, at, 12) is None
    body = {"replica_id": 1, "max_wait_ms": 0, "min_bytes": 1, "topics": [],
            "forgotten_topics_data": [{"topic": "ff0", "partitions": [0]}]}
    for change in ({"replica_id": 1}, {"forgotten_topics_data": [{"topic": "ff0", "partitions": [0]}]}):
        frame = kp.encode_request(kp.FETCH, 11, 1, {**body, "replica_id": -1, "forgotten_topics_data": [], **change},
                                  client_id="t")[4:]
        hdr, at = kp.decode_request_header_checked(frame)
        assert native.ext.kafka_fetch_parse(frame, at, 11) is None
    with pytest.raises(fetch_frame.Declined):
        asyncio.run(fetch_frame.handle_frame(bridge, conn, hdr, frame, at))


def test_a_parked_fetch_is_answered_when_records_arrive(broker):
    """The long poll of the frame path: a fetch at the high watermark with min_bytes 1 waits, and
    is answered with the record produced meanwhile (not at max_wait_ms)."""
    bridge, conn = broker
    frame = fetch_request(16, [("ff1", [(1, 0, 1 << 20)])], max_wait=30_000)
    hdr, at = kp.decode_request_header_checked(frame)

    async def go():
        parked = asyncio.ensure_future(fetch_frame.handle_frame(bridge, conn, hdr, frame, at))
        await asyncio.sleep(0)
        assert not parked.done()
        res = await produce.handle_produce(bridge, conn, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 30000,
                                                             "topic_data": [{"name": "ff1", "partition_data": [
                                                                 {"index": 1, "records": encode_batch(
                                                                     [(None, b"late", [], TS)])}]}]})
        assert res["responses"][0]["partition_responses"][0]["error_code"] == 0
        return await asyncio.wait_for(parked, 20)
    reply = asyncio.run(go())
    body = kp.decode_response(kp.FETCH, 16, reply[4:])[1]
    (part,) = body["responses"][0]["partitions"]
    assert part["high_watermark"] == 1 and b"late" in bytes(part["records"])
