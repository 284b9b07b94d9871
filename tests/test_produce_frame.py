"""The Produce fast path (kafka_bridge/handlers/produce_frame.py, rmq/_native_produce.h) against
the reference handler: the same requests to two brokers with the same store clock, one through
handle_frame, one through decode_request + handle_produce, give byte-identical responses,
commitlog files, consumequeue files and index files, and the same producer state."""
from __future__ import annotations

import asyncio
import os
import struct

import pytest

from kafka_bridge import protocol as kp
from kafka_bridge.bridge import Connection, KafkaBridge
from kafka_bridge.handlers import produce, produce_frame
from kafka_bridge.records import encode_batch
from rmq import native
from rmq.broker.controller import BrokerController
from rmq.common.message import decode_message
from rmq.config import load_config

pytestmark = pytest.mark.skipif(native.ext is None, reason="needs the C extension rmq._native")

TS = 1_700_000_000_000
STORE_TS = 1_700_000_500_000


class Side:
    """One broker in-process and its Kafka bridge; `fast` picks the path its requests take."""

    def __init__(self, root: str, fast: bool, overrides: dict):
        self.fast = fast
        small_index = {"maxHashSlotNum": 4096, "maxIndexNum": 16384}  # whole index files compared below
        self.ctl = BrokerController(load_config(None, {"storePathRootDir": root, **small_index, **overrides}))
        self.ctl.start()
        self.ctl.store.commitlog.clock = lambda: STORE_TS
        self.bridge = KafkaBridge(self.ctl, "127.0.0.1", 9092)
        self.conn = Connection(peer=("127.0.0.1", 45678))
        self.root = root

    async def send(self, frame: bytes) -> bytes:
        hdr, at = kp.decode_request_header_checked(frame)
        if self.fast:
            parts = await produce_frame.handle_frame(self.bridge, self.conn, hdr, frame, at)
        else:
            req = kp.decode_request(frame)
            body = await produce.handle_produce(self.bridge, self.conn, hdr.api_version, req.body)
            parts = None if body is None else kp.encode_response_parts(hdr, body)
        return b"" if parts is None else b"".join(parts)

    def files(self) -> dict:
        """Every store file's bytes up to where it was written (commitlog, consumequeue, index)."""
        store = self.ctl.store
        out = {}
        for mf in store.commitlog.queue.files:
            out[os.path.relpath(mf.path, self.root)] = mf.mm[:mf.wrote_position]
        for topic, queues in store.consume_queue_table.items():
            for qid, cq in queues.items():
                for mf in cq.mfq.files:
                    out[os.path.relpath(mf.path, self.root)] = mf.mm[:mf.wrote_position]
        for i, f in enumerate(store.index_service.files):  # named by their creation time: by position here
            out[f"index/{i}"] = bytes(f.mm[:])
        return out

    def close(self):
        self.ctl.shutdown()


@pytest.fixture
def sides(tmp_path):
    made = []

    def make(**overrides):
        pair = [Side(str(tmp_path / f"{name}-{len(made)}"), fast, overrides) for name, fast in (("py", False), ("c", True))]
        made.extend(pair)
        return pair
    yield make
    for s in made:
        s.close()


def request(version: int, topic_data: list, *, acks: int = -1, txn: str | None = None, correlation: int = 7) -> bytes:
    body = {"transactional_id": txn, "acks": acks, "timeout_ms": 30000, "topic_data": topic_data}
    return kp.encode_request(kp.PRODUCE, version, correlation, body, client_id="t")[4:]


def entry(partition: int, records, **batch) -> dict:
    return {"index": partition, "records": records if records is None or isinstance(records, bytes)
            else encode_batch(records, **batch)}


def run(pair, frames):
    async def go():
        out = []
        for fr in frames:
            a = await pair[0].send(fr)
            b = await pair[1].send(fr)
            out.append((a, b))
        return out
    return asyncio.run(go())


def assert_same(pair, answers):
    for py_resp, c_resp in answers:
        assert c_resp == py_resp
    py_files, c_files = pair[0].files(), pair[1].files()
    assert sorted(c_files) == sorted(py_files)
    for name in py_files:
        assert c_files[name] == py_files[name], name


def create(pair, topics: dict):
    for side in pair:
        for name, queues in topics.items():
            side.ctl.create_topic(name, queues)
    settled(pair)


def settled(pair):
    """Wait until both sides' allocator threads have made the new topics' consumequeues (files()
    lists them: one side must not show a queue the other is still making)."""
    for side in pair:
        assert side.ctl.store.queues_prepared_event().wait(10)


@pytest.mark.parametrize("version", [3, 5, 7, 8, 9, 11])
def test_many_topics_keys_tags_and_errors_match_the_reference(sides, version):
    pair = sides()
    create(pair, {f"mt{i}": 5 if i == 1 else 4 for i in range(6)})
    frames = []
    for r in range(3):
        td = []
        for i in range(6):
            parts = [entry(p, [(None if (p + r) % 2 else f"k{p}-{r}".encode(), f"v{i}.{p}.{r}".encode() * (1 + p),
                                [("rocketmq.tags", b"TagA")] if p == 1 else [], TS + r)]) for p in range(4)]
            td.append({"name": f"mt{i}", "partition_data": parts})
        td.append({"name": "nosuch", "partition_data": [entry(0, [(None, b"x", [], TS)])]})
        td[0]["partition_data"].append(entry(9, [(None, b"out of range", [], TS)]))
        td[1]["partition_data"].append(entry(4, b"" if r % 2 else None))   # no records
        frames.append(request(version, td, correlation=r))
    answers = run(pair, frames)
    resp = kp.decode_response(kp.PRODUCE, version, answers[-1][1][4:])[1]
    errors = {pr["error_code"] for t in resp["responses"] for pr in t["partition_responses"]}
    assert errors == {0, kp.error_codes.UNKNOWN_TOPIC_OR_PARTITION, kp.error_codes.CORRUPT_MESSAGE}
    assert_same(pair, answers)
    assert pair[1].ctl.store.index_service.files[-1].index_count > 1  # the keys were indexed
    # a consumer's view: the same messages at the same offsets on both
    for side in pair:
        got = side.ctl.store.get_message("g", "mt3", 1, 0, 32)
        msgs = [decode_message(raw, 0) for raw in got.messages]
        assert [(m.queue_offset, m.body) for m in msgs] == [(r, f"v3.1.{r}".encode() * 2) for r in range(3)]
        assert [m.properties.get("TAGS") for m in msgs] == ["TagA"] * 3


def test_idempotent_producer_retries_and_sequence_errors_match(sides):
    pair = sides()
    create(pair, {"idem": 3})

    def frame(seq: int, partitions, correlation: int, epoch: int = 0):
        return request(9, [{"name": "idem", "partition_data": [
            entry(p, [(None, f"s{seq}p{p}".encode(), [], TS), (None, b"second", [], TS)], producer_id=4242,
                  producer_epoch=epoch, base_sequence=seq) for p in partitions]}], correlation=correlation)

    frames = [frame(0, [0, 1, 2], 1), frame(0, [0, 1, 2], 2),   # the retry is answered, not stored again
              frame(2, [0, 1], 3), frame(7, [2], 4),             # a gap: OUT_OF_ORDER_SEQUENCE_NUMBER
              frame(4, [0], 5)]
    answers = run(pair, frames)
    assert_same(pair, answers)
    second = kp.decode_response(kp.PRODUCE, 9, answers[1][1][4:])[1]
    assert [pr["base_offset"] for pr in second["responses"][0]["partition_responses"]] == [0, 0, 0]
    gap = kp.decode_response(kp.PRODUCE, 9, answers[3][1][4:])[1]
    assert gap["responses"][0]["partition_responses"][0]["error_code"] == kp.error_codes.OUT_OF_ORDER_SEQUENCE_NUMBER
    for side in pair:
        assert side.ctl.store.get_max_offset_in_queue("idem", 0) == 6


def test_commitlog_roll_over_mid_request_matches(sides):
    """A request that does not fit in the rest of the commitlog file goes entry by entry (the file
    rolls over with a blank unit, as put_encoded_many does); consumequeue files of 7 units roll
    over too (ConsumeQueue.put_units, where the in-place write does not apply)."""
    pair = sides(mappedFileSizeCommitLog=64 * 1024, maxMessageSize=32 * 1024, mappedFileSizeConsumeQueue=7 * 20)
    create(pair, {"roll": 8})
    frames = [request(7, [{"name": "roll", "partition_data": [
        entry(p, [(None, bytes([r]) * 3000, [], TS)]) for p in range(8)]}], correlation=r) for r in range(12)]
    answers = run(pair, frames)
    assert_same(pair, answers)
    assert len(pair[1].ctl.store.commitlog.queue.files) > 2
    assert len(pair[1].ctl.store.find_consume_queue("roll", 3).mfq.files) == 2   # 12 units, 7 per file


def test_acks_zero_and_declined_requests(sides):
    """acks=0 answers nothing (the records are stored); requests the fast path does not take
    (transactional, a topic with max.message.bytes, a record C leaves to Python, a duplicate
    partition) are declined for handle_produce."""
    pair = sides()
    create(pair, {"plain": 2})
    for side in pair:
        side.ctl.create_topic("limited", 1, attributes={"max.message.bytes": "100000"})
    settled(pair)
    answers = run(pair, [request(8, [{"name": "plain", "partition_data": [entry(0, [(None, b"quiet", [], TS)])]}],
                                 acks=0)])
    assert answers == [(b"", b"")]
    assert_same(pair, answers)
    fast = pair[1]
    declined = [
        request(8, [{"name": "plain", "partition_data": [entry(0, [(None, b"t", [], TS)])]}], txn="tx"),
        request(8, [{"name": "limited", "partition_data": [entry(0, [(b"k", b"v", [], TS)])]}]),
        request(8, [{"name": "plain", "partition_data": [entry(0, [(None, None, [], TS)])]}]),   # null value
        request(8, [{"name": "plain", "partition_data": [entry(1, [(None, b"a", [], TS)]),
                                                         entry(1, [(None, b"b", [], TS)])]}]),
    ]

    async def go():
        for fr in declined:
            hdr, at = kp.decode_request_header_checked(fr)
            with pytest.raises(produce_frame.Declined):
                await produce_frame.handle_frame(fast.bridge, fast.conn, hdr, fr, at)
    asyncio.run(go())


@pytest.mark.parametrize("version", [8, 11])
def test_compacted_topics_key_checks_match_the_reference(sides, version):
    """On a compacted topic the fast path refuses a batch with keyless records as handle_produce
    does (INVALID_RECORD, record_errors naming each keyless record by its index in the batch, the
    batch not stored) and stores keyed batches; an idempotent producer's refused batch leaves no
    producer state, so its retry with keys is taken."""
    pair = sides()
    for side in pair:
        side.ctl.create_topic("compacted", 2, attributes={"cleanup.policy": "compact"})
        side.ctl.create_topic("plain", 1)
    settled(pair)
    keyed = [(f"k{i}".encode(), f"v{i}".encode(), [], TS + i) for i in range(5)]
    some_keyless = [(None if i in (1, 3) else f"k{i}".encode(), b"v", [], TS) for i in range(6)]
    frames = [
        request(version, [{"name": "compacted", "partition_data": [entry(0, keyed), entry(1, some_keyless)]},
                          {"name": "plain", "partition_data": [entry(0, [(None, b"fine", [], TS)])]}]),
        request(version, [{"name": "compacted", "partition_data": [
            entry(0, some_keyless, producer_id=77, producer_epoch=0, base_sequence=0)]}]),
        request(version, [{"name": "compacted", "partition_data": [
            entry(0, keyed, producer_id=77, producer_epoch=0, base_sequence=0)]}]),
    ]
    answers = run(pair, frames)
    assert_same(pair, answers)
    _, body = kp.decode_response(kp.PRODUCE, version, answers[0][1][4:])   # the fast path's answer
    compacted = {p["index"]: p for p in body["responses"][0]["partition_responses"]}
    assert compacted[0]["error_code"] == 0 and compacted[1]["error_code"] == 87  # INVALID_RECORD
    assert [e["batch_index"] for e in compacted[1]["record_errors"]] == [1, 3]
    for side in pair:
        assert side.bridge.producers.check(77, 0, "compacted", 0, 5, 1)[0] == 0  # the keyed retry was recorded


def test_malformed_bodies_are_declined_not_crashed():
    """Truncated or corrupted request bodies: kafka_produce_map declines (None), the generic
    decoder then reports them; it never reads out of bounds or raises."""
    frame = request(9, [{"name": "t", "partition_data": [entry(0, [(b"k", b"v" * 50, [], TS)])]}])
    hdr, at = kp.decode_request_header_checked(frame)
    args = (b"\x7f\x00\x00\x01", 5, False, 4 << 20, 5 << 20, b"SCHEDULE_TOPIC_XXXX")
    assert native.ext.kafka_produce_map(frame, at, 9, *args) is not None
    for cut in range(at, len(frame)):
        out = native.ext.kafka_produce_map(frame[:cut], at, 9, *args)
        assert out is None or out[4] is not None
    flipped = bytearray(frame)
    for i in range(at, len(frame)):
        flipped[i] ^= 0xFF
        native.ext.kafka_produce_map(bytes(flipped), at, 9, *args)
        flipped[i] ^= 0xFF
    with pytest.raises(ValueError):
        native.ext.kafka_produce_map(frame, at, 2, *args)


def test_table_layout_matches_the_c_struct():
    frame = request(7, [{"name": "layout", "partition_data": [entry(5, [(b"key", b"value", [], TS)])]}])
    hdr, at = kp.decode_request_header_checked(frame)
    out = native.ext.kafka_produce_map(frame, at, 7, b"\x7f\x00\x00\x01", 5, False, 4 << 20, 5 << 20, b"SCHEDULE_TOPIC_XXXX")
    table = out[4]
    assert len(table) == produce_frame.PENTRY.size
    row = produce_frame.PENTRY.unpack_from(table, 0)
    assert row[produce_frame.F_PARTITION] == 5 and row[produce_frame.F_KIND] == produce_frame.KIND_MAPPED
    assert row[produce_frame.F_COUNT] == 1 and row[produce_frame.F_PID] == -1
    assert row[produce_frame.F_N_KEYS] == 1 and row[produce_frame.F_TAGS_OFF] == -1
    assert row[produce_frame.F_UNITS_LEN] == len(out[5]) == struct.unpack_from(">i", out[5], 0)[0]
