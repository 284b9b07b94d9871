"""rmq/store: byte layouts, rollover, consumequeue, index, recovery, cleanup (issue 2)."""
from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq import native
from rmq.common.jhash import java_string_hash
from rmq.common.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    create_message_id,
    decode_message,
    decode_message_id,
)
from rmq.store import GetMessageStatus, Message, PutMessageStatus
from rmq.store.commitlog import CommitLog
from rmq.store.consume_queue import CQ_UNIT
from rmq.store.index import IndexFile, index_key_hash
from rmq.store.mapped_file import StoreError
from rmq.store.unit import PreparedMessage

from .conftest import PY, ROOT

BORN_TS = 1_700_000_000_000
STORE_TS = 1_700_000_000_500


def fixed_clock(ts=STORE_TS):
    return lambda: ts


# ------------------------------------------------------------------------------------ vectors
def test_commitlog_consumequeue_and_index_bytes_match_hand_computed_vectors(store_factory):
    s = store_factory(clock=fixed_clock())
    msg = Message("TopicTest", b"Hello RocketMQ", queue_id=1, born_timestamp=BORN_TS,
                  born_host=("192.168.0.10", 54321), properties={"TAGS": "TagA", "KEYS": "OrderID188"})
    r = s.put_message(msg)
    assert r.ok
    expected_unit = b"".join([
        bytes.fromhex("0000008c"),          # TOTALSIZE 140
        bytes.fromhex("daa320a7"),          # MAGICCODE -626843481
        bytes.fromhex("69c865ed"),          # BODYCRC: java.util.zip.CRC32("Hello RocketMQ") & 0x7FFFFFFF = 1774740973
        bytes.fromhex("00000001"),          # QUEUEID 1
        bytes.fromhex("00000000"),          # FLAG 0
        bytes.fromhex("0000000000000000"),  # QUEUEOFFSET 0
        bytes.fromhex("0000000000000000"),  # PHYSICALOFFSET 0
        bytes.fromhex("00000000"),          # SYSFLAG 0 (IPv4 hosts)
        bytes.fromhex("0000018bcfe56800"),  # BORNTIMESTAMP 1700000000000
        bytes.fromhex("c0a8000a0000d431"),  # BORNHOST 192.168.0.10:54321
        bytes.fromhex("0000018bcfe569f4"),  # STORETIMESTAMP 1700000000500
        bytes.fromhex("7f00000100002a9f"),  # STOREHOST 127.0.0.1:10911
        bytes.fromhex("00000000"),          # RECONSUMETIMES 0
        bytes.fromhex("0000000000000000"),  # PREPARED TRANSACTION OFFSET 0
        bytes.fromhex("0000000e"), b"Hello RocketMQ",  # BODY
        bytes.fromhex("09"), b"TopicTest",             # TOPIC
        bytes.fromhex("001a"), b"TAGS\x01TagA\x02KEYS\x01OrderID188\x02",  # PROPERTIES
    ])
    assert len(expected_unit) == 140
    with open(os.path.join(s.root, "commitlog", "0" * 20), "rb") as fh:
        assert fh.read(140) == expected_unit
    assert r.result.wrote_offset == 0 and r.result.wrote_bytes == 140
    assert s.msg_id(r.result) == "7F00000100002A9F0000000000000000"

    s.flush_logics()
    cq_path = os.path.join(s.root, "consumequeue", "TopicTest", "1", "0" * 20)
    assert os.path.getsize(cq_path) == 2000
    with open(cq_path, "rb") as fh:
        # commitlog offset 0, size 140, tag hashcode "TagA".hashCode() = 2598919 (Java)
        assert fh.read(40) == bytes.fromhex("0000000000000000" "0000008c" "000000000027a807") + bytes(20)

    idx_dir = os.path.join(s.root, "index")
    (name,) = os.listdir(idx_dir)
    assert len(name) == 17 and name.isdigit()
    with open(os.path.join(idx_dir, name), "rb") as fh:
        data = fh.read()
    assert len(data) == 40 + 100 * 4 + 400 * 20
    # header: begin/end timestamp, begin/end phy offset, hashSlotCount 1, indexCount 2
    assert data[:40] == struct.pack(">qqqqii", STORE_TS, STORE_TS, 0, 0, 1, 2)
    # "TopicTest#OrderID188".hashCode() = -1231271670 (Java); abs = 1231271670; slot 70 of 100
    assert java_string_hash("TopicTest#OrderID188") == -1231271670
    assert data[40 + 70 * 4:40 + 71 * 4] == bytes.fromhex("00000001")
    entry = data[40 + 400 + 20:40 + 400 + 40]
    assert entry == bytes.fromhex("4963b6f6" "0000000000000000" "00000000" "00000000")


def test_message_id_round_trip_ipv4_and_ipv6():
    mid = create_message_id(("10.1.2.3", 10911), 123456789)
    assert len(mid) == 32
    assert decode_message_id(mid) == (("10.1.2.3", 10911), 123456789)
    mid6 = create_message_id(("::1", 10911), 42)
    assert len(mid6) == 56 and decode_message_id(mid6) == (("::1", 10911), 42)
    with pytest.raises(ValueError):
        decode_message_id("XYZ")


# ------------------------------------------------------------------------------------ round trip
_prop_text = st.text(alphabet=st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
                     min_size=1, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=600), queue_id=st.integers(0, 7), flag=st.integers(-2**31, 2**31 - 1),
       props=st.dictionaries(_prop_text, _prop_text, max_size=4), reconsume=st.integers(0, 16),
       born_ts=st.integers(0, 2**62), v6=st.booleans(), port=st.integers(0, 65535),
       topic=st.from_regex(r"[A-Za-z0-9_%|-]{1,40}", fullmatch=True))
def test_every_field_round_trips(tmp_path_factory, body, queue_id, flag, props, reconsume, born_ts, v6, port, topic):
    cl = CommitLog(str(tmp_path_factory.mktemp("cl")), 64 * 1024, ("127.0.0.1", 10911), clock=lambda: 123456)
    host = ("fe80::1", port) if v6 else ("10.0.0.7", port)
    msg = Message(topic, body, queue_id=queue_id, flag=flag, properties=dict(props), born_timestamp=born_ts,
                  born_host=host, reconsume_times=reconsume, prepared_transaction_offset=77)
    (res,) = cl.append([PreparedMessage(msg, False)])
    got = cl.read_message(res.wrote_offset, check_crc=True)
    assert got is not None
    assert (got.topic, got.body, got.queue_id, got.flag, got.properties) == (topic, body, queue_id, flag, props)
    assert (got.born_timestamp, got.born_host, got.reconsume_times) == (born_ts, host, reconsume)
    assert got.prepared_transaction_offset == 77 and got.store_timestamp == 123456
    assert got.store_host == ("127.0.0.1", 10911) and got.commit_log_offset == res.wrote_offset
    assert got.store_size == res.wrote_bytes and bool(got.sys_flag & 0x10) == v6
    cl.close()


def test_ipv6_store_host_sets_sysflag(tmp_path):
    cl = CommitLog(str(tmp_path), 64 * 1024, ("::1", 10911))
    (res,) = cl.append([PreparedMessage(Message("T", b"x"), True)])
    m = cl.read_message(res.wrote_offset, check_crc=True)
    assert m.store_host == ("::1", 10911) and m.sys_flag & 0x20
    assert res.wrote_bytes == 88 + 12 + 1 + (1 + 1) + 2  # the IPv6 store host takes 12 more bytes
    cl.close()


# ------------------------------------------------------------------------------------ rollover
def test_rollover_writes_blank_unit_and_continues_in_next_file(store_factory):
    s = store_factory()
    body = b"b" * 1000
    offsets = []
    for i in range(140):  # ~150 KB over 64 KiB files
        r = s.put_message(Message("RollTopic", body, queue_id=0))
        assert r.ok
        offsets.append(r.result.wrote_offset)
    files = sorted(os.listdir(os.path.join(s.root, "commitlog")))
    assert files[:3] == ["00000000000000000000", "00000000000000065536", "00000000000000131072"]
    first_in_second = min(o for o in offsets if o >= 65536)
    assert first_in_second == 65536  # the unit that did not fit starts the next file
    last_in_first = max(o for o in offsets if o < 65536)
    unit = 88 + 1000 + 1 + 9 + 2
    blank_at = last_in_first + unit
    with open(os.path.join(s.root, "commitlog", files[0]), "rb") as fh:
        fh.seek(blank_at)
        total, magic = struct.unpack(">ii", fh.read(8))
    assert magic == BLANK_MAGIC_CODE and total == 65536 - blank_at
    seen, offset = [], 0
    for _ in range(10):  # a pull stops at a consumequeue file's end, as RocketMQ's does
        got = s.get_message("g", "RollTopic", 0, offset, 200, max_bytes=1 << 30)
        if not got.messages:
            break
        seen += [m.queue_offset for m in got.decoded()]
        offset = got.next_begin_offset
    assert seen == list(range(140))


def test_batch_put_is_contiguous_and_dispatched(store_factory):
    s = store_factory()
    r = s.put_messages([Message("BatchT", b"m%d" % i, queue_id=2, properties={"KEYS": f"k{i}"}) for i in range(10)])
    assert r.ok and [x.queue_offset for x in r.results] == list(range(10))
    assert all(b.wrote_offset == a.wrote_offset + a.wrote_bytes for a, b in zip(r.results, r.results[1:]))
    assert s.get_max_offset_in_queue("BatchT", 2) == 10
    assert [m.body for m in s.query_message("BatchT", "k7")] == [b"m7"]


# ------------------------------------------------------------------------------------ consumequeue
def test_get_message_statuses_and_tag_prefilter(store_factory):
    s = store_factory()
    assert s.get_message("g", "Nope", 0, 0, 1).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    for i in range(10):
        s.put_message(Message("T", b"%d" % i, properties={"TAGS": "TagA" if i % 2 else "TagB"}))

    class OnlyTagA:
        code = java_string_hash("TagA")

        def is_matched_by_consume_queue(self, c):
            return c == self.code

        def is_matched_by_commit_log(self, raw):
            return True

    res = s.get_message("g", "T", 0, 0, 32, OnlyTagA())
    assert res.status is GetMessageStatus.FOUND
    assert [m.body for m in res.decoded()] == [b"1", b"3", b"5", b"7", b"9"]
    assert res.next_begin_offset == 10
    assert s.get_message("g", "T", 0, 10, 1).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert s.get_message("g", "T", 0, 11, 1).status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
    r = s.get_message("g", "T", 0, 3, 2)
    assert [m.queue_offset for m in r.decoded()] == [3, 4] and r.next_begin_offset == 5


def test_consumequeue_spans_files_and_lookup_by_time(store_factory):
    now = [1_000_000]
    s = store_factory(clock=lambda: now[0])
    for i in range(250):  # 100 units per consumequeue file in tests -> 3 files
        now[0] += 10
        s.put_message(Message("TimeT", b"x", queue_id=0))
    cq_dir = os.path.join(s.root, "consumequeue", "TimeT", "0")
    assert sorted(os.listdir(cq_dir)) == ["00000000000000000000", "00000000000000002000", "00000000000000004000"]
    assert s.get_min_offset_in_queue("TimeT", 0) == 0 and s.get_max_offset_in_queue("TimeT", 0) == 250
    # message i was stored at 1_000_000 + 10 * (i + 1)
    assert s.get_offset_in_queue_by_time("TimeT", 0, 1_000_000 + 10 * 151) == 150
    assert s.get_offset_in_queue_by_time("TimeT", 0, 1_000_000 + 10 * 151 - 3) == 150
    assert s.get_offset_in_queue_by_time("TimeT", 0, 0) == 0
    assert s.get_offset_in_queue_by_time("TimeT", 0, 10**13) == 250
    assert s.get_offset_in_queue_by_time("TimeT", 0, 1_000_000 + 10 * 151 - 3, nearest=True) == 150
    assert s.get_offset_in_queue_by_time("TimeT", 0, 1_000_000 + 10 * 151 - 7, nearest=True) == 149


# ------------------------------------------------------------------------------------ index
def test_index_collisions_chain_and_filter_by_real_key(store_factory):
    s = store_factory()
    # "TopicTest#Aa" and "TopicTest#BB" have the same Java hashCode (2744770), so the same slot
    assert java_string_hash("TopicTest#Aa") == java_string_hash("TopicTest#BB") == 2744770
    s.put_message(Message("TopicTest", b"aa", properties={"KEYS": "Aa"}))
    s.put_message(Message("TopicTest", b"bb", properties={"KEYS": "BB"}))
    s.put_message(Message("TopicTest", b"o", properties={"KEYS": "OrderID188"}))  # slot 70 as well
    assert [m.body for m in s.query_message("TopicTest", "Aa")] == [b"aa"]
    assert [m.body for m in s.query_message("TopicTest", "BB")] == [b"bb"]
    f = s.index_service.files[-1]
    slot = index_key_hash("TopicTest#Aa") % 100
    assert slot == index_key_hash("TopicTest#OrderID188") % 100 == 70
    head = f.slot_value(slot)
    chain = []
    while head > 0:
        chain.append(head)
        head = f.entry(head)[3]
    assert chain == [3, 2, 1]  # newest first, linked through prevIndexNo


def test_index_multi_file_query_newest_first_with_max_and_time_range(store_factory):
    now = [2_000_000_000_000]

    def clock():
        now[0] += 1000
        return now[0]

    s = store_factory(clock=clock, maxIndexNum=50)
    for i in range(130):  # 49 entries per file -> 3 files
        s.put_message(Message("IdxT", b"%d" % i, properties={"KEYS": "dup"}))
    assert len(s.index_service.files) == 3
    got = s.query_message("IdxT", "dup", max_num=64)
    assert [int(m.body) for m in got] == list(range(129, 65, -1))  # newest first, capped at maxMsgsNumBatch 64
    assert [int(m.body) for m in s.query_message("IdxT", "dup", max_num=5)] == [129, 128, 127, 126, 125]
    t10 = got[-1].store_timestamp - (got[0].store_timestamp - got[-1].store_timestamp)  # an earlier window
    window = s.query_message("IdxT", "dup", 64, begin=0, end=t10)
    assert window and all(m.store_timestamp <= t10 for m in window)
    assert s.query_message("IdxT", "missing") == []


def test_look_message_by_id_and_offset(store_factory):
    s = store_factory()
    r = s.put_message(Message("ById", b"payload"))
    m = s.look_message_by_id(s.msg_id(r.result))
    assert m.body == b"payload" and s.look_message_by_offset(r.result.wrote_offset).topic == "ById"


# ------------------------------------------------------------------------------------ dispatch
def test_reput_thread_mode_dispatch_offset_is_observable(store_factory):
    s = store_factory(reputMode="thread")
    for i in range(50):
        s.put_message(Message("ReputT", b"%d" % i, properties={"KEYS": f"k{i}"}))
    assert s.wait_dispatched(5.0)
    assert s.reput.reput_from_offset == s.commitlog.max_offset
    assert s.get_max_offset_in_queue("ReputT", 0) == 50
    assert [m.body for m in s.query_message("ReputT", "k42")] == [b"42"]


def test_transaction_prepared_and_rollback_units_not_dispatched(store_factory):
    s = store_factory()
    s.put_message(Message("TxT", b"prepared", sys_flag=0x4, properties={"KEYS": "p"}))
    s.put_message(Message("TxT", b"rollback", sys_flag=0xC, properties={"KEYS": "r"}))
    s.put_message(Message("TxT", b"commit", sys_flag=0x8))
    assert s.get_max_offset_in_queue("TxT", 0) == 1
    assert [m.body for m in s.query_message("TxT", "p")] == [b"prepared"]  # prepared is indexed
    assert s.query_message("TxT", "r") == []  # rollback is not


def test_schedule_topic_tag_field_holds_delivery_time(store_factory):
    s = store_factory(clock=fixed_clock(10_000), messageDelayLevel="1s 5s 10s")
    s.put_message(Message("SCHEDULE_TOPIC_XXXX", b"d", queue_id=1, properties={"DELAY": "2"}))
    assert s.get_consume_queue("SCHEDULE_TOPIC_XXXX", 1).get_unit(0)[2] == 10_000 + 5_000


# ------------------------------------------------------------------------------------ bad input
def test_bad_messages_are_refused_with_clear_status(store_factory):
    s = store_factory()
    r = s.put_message(Message("x" * 250, b"a"))       # Kafka's limit, 249, is the store's (message_store.py)
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "249" in r.remark
    r = s.put_message(Message("bad topic!", b"a"))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "characters" in r.remark
    r = s.put_message(Message("T", b"a" * (16 * 1024 + 1)))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "maxMessageSize" in r.remark
    r = s.put_message(Message("T", b"a", queue_id=-1))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
    r = s.put_message(Message("T", b"a", properties={"k": "v" * 40000}))
    assert r.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    assert s.commitlog.max_offset == 0


def test_wrong_file_size_and_foreign_files_are_clear_errors(tmp_path, store_factory):
    s = store_factory()
    s.put_message(Message("T", b"a"))
    s.shutdown()
    path = os.path.join(s.root, "commitlog", "0" * 20)
    with open(path, "r+b") as fh:
        fh.truncate(1000)
    with pytest.raises(StoreError, match="size 1000 bytes, expected 65536"):
        store_factory(root=s.root)
    os.unlink(path)
    with open(os.path.join(s.root, "commitlog", "notes.txt"), "w") as fh:
        fh.write("x")
    with pytest.raises(StoreError, match="20-digit"):
        store_factory(root=s.root)
    f = tmp_path / "plainfile"
    f.write_text("x")
    with pytest.raises(StoreError, match="not a directory"):
        store_factory(root=str(f))


def test_config_validation_names_key():
    from rmq.store import MessageStoreConfig
    with pytest.raises(ValueError, match="flushDiskType"):
        MessageStoreConfig(flushDiskType="SOMETIMES").validate()
    with pytest.raises(ValueError, match="messageDelayLevel item 2"):
        MessageStoreConfig(messageDelayLevel="1s 5x").validate()
    with pytest.raises(ValueError, match="mappedFileSizeConsumeQueue"):
        MessageStoreConfig(mappedFileSizeConsumeQueue=1001).validate()


# ------------------------------------------------------------------------------------ recovery
def _unit_offsets(store):
    return [off for off, _size, _m in store.commitlog.iter_units(0, check_crc=False)]


def test_torn_tail_is_truncated_and_logics_rebuilt(store_factory, caplog):
    s = store_factory()
    for i in range(20):
        s.put_message(Message("TornT", b"body-%02d" % i, properties={"KEYS": f"k{i}"}))
    offs = _unit_offsets(s)
    last = offs[-1]
    root = s.root
    s.shutdown()
    # Tear the last unit: keep its header, wreck its body (CRC mismatch), as a crash mid-write would.
    with open(os.path.join(root, "commitlog", "0" * 20), "r+b") as fh:
        fh.seek(last + 88 + 2)
        fh.write(b"\xff\xff\xff")
    open(os.path.join(root, "abort"), "w").close()
    with caplog.at_level("INFO", logger="rmq.store"):
        s2 = store_factory(root=root)
    assert s2.recovered_abnormally
    assert s2.commitlog.max_offset == last
    said = [r for r in caplog.records if r.name == "rmq.store" and "recovery" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING", [r.getMessage() for r in said]
    msg = said[0].getMessage()
    assert "abort file found" in msg and f"valid log ends at {last}," in msg
    assert "1 commitlog file(s)" in msg and "took " in msg and " ms" in msg
    assert s2.get_max_offset_in_queue("TornT", 0) == 19
    assert s2.query_message("TornT", "k19") == []
    assert [m.body for m in s2.query_message("TornT", "k18")] == [b"body-18"]
    # the torn bytes are gone: the next put lands where the torn unit was, queue offset 19
    r = s2.put_message(Message("TornT", b"after"))
    assert r.result.wrote_offset == last and r.result.queue_offset == 19
    got = s2.get_message("g", "TornT", 0, 0, 100).decoded()
    assert [m.body for m in got][-2:] == [b"body-18", b"after"]


def test_abnormal_recovery_rebuilds_deleted_consumequeue_and_index(store_factory):
    import shutil
    s = store_factory()
    for i in range(30):
        s.put_message(Message("RebuildT", b"%d" % i, queue_id=i % 3, properties={"KEYS": f"key{i}"}))
    root = s.root
    s.shutdown()
    shutil.rmtree(os.path.join(root, "consumequeue"))
    shutil.rmtree(os.path.join(root, "index"))
    os.unlink(os.path.join(root, "checkpoint"))
    open(os.path.join(root, "abort"), "w").close()
    s2 = store_factory(root=root)
    assert [s2.get_max_offset_in_queue("RebuildT", q) for q in range(3)] == [10, 10, 10]
    assert [m.body for m in s2.query_message("RebuildT", "key17")] == [b"17"]
    r = s2.put_message(Message("RebuildT", b"next", queue_id=1))
    assert r.result.queue_offset == 10


def test_normal_restart_uses_checkpoint_end_offset(store_factory, caplog):
    s = store_factory()
    for i in range(10):
        s.put_message(Message("NormT", b"%d" % i))
    end = s.commitlog.max_offset
    root = s.root
    s.shutdown()
    assert not os.path.exists(os.path.join(root, "abort"))
    with caplog.at_level("INFO", logger="rmq.store"):
        s2 = store_factory(root=root)
    assert not s2.recovered_abnormally
    said = [r.getMessage() for r in caplog.records if r.name == "rmq.store"]
    assert any("clean shutdown, normal recovery" in m and f"log [0, {end})" in m for m in said), said
    assert s2.commitlog.max_offset == end and s2.get_max_offset_in_queue("NormT", 0) == 10
    assert s2.put_message(Message("NormT", b"x")).result.queue_offset == 10


_WRITER = r"""
import sys
from rmq.store import DefaultMessageStore, MessageStoreConfig, Message
cfg = MessageStoreConfig(storePathRootDir=sys.argv[1], flushDiskType="SYNC_FLUSH",
                         mappedFileSizeCommitLog=256 * 1024, mappedFileSizeConsumeQueue=20 * 1000,
                         maxMessageSize=64 * 1024, maxHashSlotNum=1000, maxIndexNum=4000)
s = DefaultMessageStore(cfg).load().start()
i = 0
while True:
    r = s.put_message(Message("KillT", b"acked-%d" % i, queue_id=i % 2, properties={"KEYS": "k%d" % i}))
    if r.ok:
        print(i, r.result.queue_offset, flush=True)  # printed only after the put returned (acknowledged)
    i += 1
"""


def test_kill_minus_9_under_sync_flush_keeps_every_acknowledged_message(tmp_path, store_factory):
    root = str(tmp_path / "killstore")
    proc = subprocess.Popen([PY, "-c", _WRITER, root], stdout=subprocess.PIPE, cwd=ROOT, text=True)
    acked = []
    deadline = time.monotonic() + 60
    try:
        while len(acked) < 1500 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            i, qoff = map(int, line.split())
            acked.append((i, qoff))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(acked) >= 1500, "writer did not acknowledge enough messages"
    assert os.path.exists(os.path.join(root, "abort"))
    s = store_factory(root=root, mappedFileSizeCommitLog=256 * 1024, mappedFileSizeConsumeQueue=20 * 1000,
                      maxMessageSize=64 * 1024, maxHashSlotNum=1000, maxIndexNum=4000)
    assert s.recovered_abnormally
    found = {}
    for q in (0, 1):
        offset = 0
        for _ in range(1000):
            res = s.get_message("g", "KillT", q, offset, 100_000, max_bytes=1 << 30)
            if not res.messages:
                break
            for m in res.decoded():
                found[m.body] = m.queue_offset
            offset = res.next_begin_offset
    for i, qoff in acked:
        assert found.get(b"acked-%d" % i) == qoff, f"acknowledged message {i} lost"
    assert [m.body for m in s.query_message("KillT", f"k{acked[-1][0]}")] == [b"acked-%d" % acked[-1][0]]


# ------------------------------------------------------------------------------------ cleanup
HOUR = 3_600_000


def _fill_files(s, n_files):
    body = b"c" * 2000
    while len(s.commitlog.queue.files) < n_files:
        assert s.put_message(Message("CleanT", body, properties={"KEYS": "ck"})).ok


def _local_ms(hour):
    t = time.localtime()
    return int(time.mktime((t.tm_year, t.tm_mon, t.tm_mday, hour, 30, 0, 0, 0, -1)) * 1000)


def test_cleanup_expired_files_only_at_delete_when_hour(store_factory):
    now = [_local_ms(10)]
    s = store_factory(clock=lambda: now[0], disk_ratio=lambda p: 0.10, file_age_ms=lambda mf: now[0] - 73 * HOUR)
    _fill_files(s, 4)
    rep = s.cleanup.run_once()
    assert not rep.ran and rep.commitlog_files_deleted == 0  # expired, but not 04 o'clock and disk is fine
    now[0] = _local_ms(4)
    rep = s.cleanup.run_once()
    assert rep.ran and rep.commitlog_files_deleted == 3  # all but the file being written
    assert s.commitlog.min_offset == 3 * 65536
    assert s.get_min_offset_in_queue("CleanT", 0) > 0
    assert len(s.index_service.files) >= 1


def test_cleanup_past_75_percent_deletes_expired_at_any_hour_but_not_fresh(store_factory):
    now = [_local_ms(10)]
    ages = {}
    s = store_factory(clock=lambda: now[0], disk_ratio=lambda p: 0.80,
                      file_age_ms=lambda mf: ages.get(mf.file_from_offset, now[0]))
    _fill_files(s, 4)
    ages[0] = now[0] - 80 * HOUR  # only the first file is past fileReservedTime (72 h)
    rep = s.cleanup.run_once()
    assert rep.ran and rep.commitlog_files_deleted == 1 and not rep.clean_immediately
    assert s.commitlog.min_offset == 65536


def test_cleanup_past_85_percent_deletes_even_unexpired_files(store_factory):
    now = [_local_ms(10)]
    s = store_factory(clock=lambda: now[0], disk_ratio=lambda p: 0.87, file_age_ms=lambda mf: now[0])
    _fill_files(s, 4)
    rep = s.cleanup.run_once()
    assert rep.clean_immediately and rep.commitlog_files_deleted == 3
    cq = s.get_consume_queue("CleanT", 0)
    res = s.get_message("g", "CleanT", 0, 0, 1)
    assert res.status is GetMessageStatus.OFFSET_TOO_SMALL and res.next_begin_offset == cq.min_offset
    assert s.get_message("g", "CleanT", 0, cq.min_offset, 1).status is GetMessageStatus.FOUND


def test_past_90_percent_writes_are_refused_until_usage_falls(store_factory):
    ratio = [0.91]
    s = store_factory(disk_ratio=lambda p: ratio[0], file_age_ms=lambda mf: 0)
    rep = s.cleanup.run_once()
    assert rep.disk_full
    r = s.put_message(Message("FullT", b"x"))
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "disk full" in r.remark
    ratio[0] = 0.5
    s.cleanup.run_once()
    assert s.put_message(Message("FullT", b"x")).ok


def test_consumequeue_and_index_files_below_commitlog_min_are_removed(store_factory):
    now = [_local_ms(4)]
    s = store_factory(clock=lambda: now[0], disk_ratio=lambda p: 0.1, file_age_ms=lambda mf: 0,
                      maxIndexNum=40)
    body = b"q" * 300
    while len(s.commitlog.queue.files) < 5:
        s.put_message(Message("CqClean", body, properties={"KEYS": "x"}))
    cq_dir = os.path.join(s.root, "consumequeue", "CqClean", "0")
    before_cq, before_idx = len(os.listdir(cq_dir)), len(os.listdir(os.path.join(s.root, "index")))
    rep = s.cleanup.run_once()
    assert rep.commitlog_files_deleted == 4
    assert rep.consumequeue_files_deleted >= 1 and len(os.listdir(cq_dir)) < before_cq
    assert rep.index_files_deleted >= 1 and len(os.listdir(os.path.join(s.root, "index"))) < before_idx
    # every remaining index entry points at stored data
    for f in s.index_service.files[:-1]:
        assert f.end_phy_offset >= s.commitlog.min_offset


def test_index_file_header_reload(tmp_path):
    p = str(tmp_path / "20240101000000000")
    f = IndexFile(p, 10, 40)
    assert f.put_key("T#a", 5, 1000)
    f.flush()
    f.close()
    g = IndexFile(p, 10, 40, create=False)
    assert (g.index_count, g.hash_slot_count, g.begin_timestamp) == (2, 1, 1000)
    out = []
    g.select_phy_offsets(out, "T#a", 10, 0, 10**13)
    assert out == [5]
    g.close()
    with pytest.raises(StoreError, match="expected"):
        IndexFile(p, 20, 40, create=False)


def test_decode_rejects_garbage():
    from rmq.common.message import CorruptMessage
    with pytest.raises(CorruptMessage):
        decode_message(b"\x00" * 10)
    with pytest.raises(CorruptMessage, match="magic"):
        decode_message(struct.pack(">ii", 100, 1234) + bytes(92))
    good = PreparedMessage(Message("T", b"abc"), False).encode(0, 0, 0, b"\x7f\0\0\1", 1)
    assert decode_message(good).body == b"abc"
    assert struct.unpack(">i", good[4:8])[0] == MESSAGE_MAGIC_CODE
    with pytest.raises(CorruptMessage, match="CRC"):
        decode_message(good[:88] + b"abd" + good[91:], check_crc=True)
    with pytest.raises(CorruptMessage):
        decode_message(good[:-1])


# ------------------------------------------------------------------------------------ many queues
def test_consumequeue_flush_in_proportion_to_dirty_pages(store_factory):
    """flushConsumeQueueLeastPages: a round flushes only queues with that many dirty pages; the
    thorough round (least_pages 0) flushes every queue and then moves the checkpoint."""
    from rmq.store.mapped_file import IO_COUNTERS
    s = store_factory(start=False, mappedFileSizeConsumeQueue=20 * 3000)   # no flush threads: only ours
    for q in range(4):
        s.put_message(Message("FewUnits", b"x", queue_id=q))
    for _ in range(1000):                                   # 20,000 bytes of units: 4+ pages
        s.put_message(Message("ManyUnits", b"y"))
    few = [s.get_consume_queue("FewUnits", q).mfq.files[0] for q in range(4)]
    many = s.get_consume_queue("ManyUnits", 0).mfq.files[0]
    before = IO_COUNTERS["fdatasync_calls"]
    s.flush_logics(2)
    assert [f.flushed_position for f in few] == [0, 0, 0, 0]
    assert many.flushed_position == many.wrote_position == 20_000
    assert IO_COUNTERS["fdatasync_calls"] - before == 1
    s.flush_logics(0)
    assert [f.flushed_position for f in few] == [20, 20, 20, 20]


def test_async_flush_service_is_woken_only_once_least_pages_are_dirty(store_factory):
    """ASYNC_FLUSH: a put wakes FlushRealTimeService only when it writes flushCommitLogLeastPages
    pages past the last flush (a round would flush nothing below that); the interval does the rest."""
    from rmq.store.flush import FlushRealTimeService
    from rmq.store.mapped_file import PAGE_SIZE
    s = store_factory(flushCommitLogLeastPages=4, flushIntervalCommitLog=60_000)
    svc = s._flush_service
    assert isinstance(svc, FlushRealTimeService) and svc.least_pages == 4
    deadline = time.monotonic() + 10
    while svc.rounds == 0 and time.monotonic() < deadline:  # the first put wakes it (nothing flushed yet)
        s.put_message(Message("T", b"x" * 100))
        time.sleep(0.01)
    assert svc.rounds >= 1
    deadline = time.monotonic() + 10
    while svc._wake.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)
    flushed = s.commitlog.flush(0)
    svc.wake_at = flushed - flushed % PAGE_SIZE + 4 * PAGE_SIZE
    rounds = svc.rounds
    while s.commitlog.max_offset + 200 < svc.wake_at:     # below 4 dirty pages: no wake-up
        s.put_message(Message("T", b"y" * 100))
    assert not svc._wake.is_set() and svc.rounds == rounds
    while s.commitlog.max_offset < svc.wake_at:           # this put reaches 4 pages past the flush
        s.put_message(Message("T", b"z" * 100))
    deadline = time.monotonic() + 10
    while svc.rounds == rounds and time.monotonic() < deadline:
        time.sleep(0.01)
    assert svc.rounds > rounds


def test_a_created_topic_gets_its_queue_files_before_its_first_message(tmp_path):
    """The allocator thread makes a new topic's consumequeue files; the first puts only write."""
    import time as _time

    from rmq.broker.controller import BrokerController
    from rmq.broker.topic_config import TopicConfig
    from rmq.config import load_config
    cfg = load_config(None, {"storePathRootDir": str(tmp_path / "store"), "mappedFileSizeConsumeQueue": 2000,
                             "mappedFileSizeCommitLog": 1 << 20, "maxMessageSize": 65536})
    ctl = BrokerController(cfg)
    ctl.start()
    try:
        ctl.topic_config_manager.update(TopicConfig("Prepared", 8, 8))
        files = [tmp_path / "store" / "consumequeue" / "Prepared" / str(q) / ("0" * 20) for q in range(8)]
        deadline = _time.monotonic() + 10
        while not all(f.exists() for f in files) and _time.monotonic() < deadline:
            _time.sleep(0.02)
        assert all(f.exists() and f.stat().st_size == 2000 for f in files)
        assert ctl.store._allocator.prepared == 8
        for q in range(8):
            r = ctl.store.put_message(Message("Prepared", b"m%d" % q, queue_id=q))
            assert r.result.queue_offset == 0
        got = [ctl.store.get_message("g", "Prepared", q, 0, 10).decoded() for q in range(8)]
        assert [[m.body for m in g] for g in got] == [[b"m%d" % q] for q in range(8)]
        # a queue already written is never re-prepared
        assert ctl.store.prepare_consume_queue("Prepared", 3) is False
    finally:
        ctl.shutdown()


@pytest.mark.skipif(native.ext is None, reason="needs the C extension rmq._native")
def test_native_pwrite_all_writes_everything_or_raises(tmp_path):
    """MappedFile.write_through's C pwrite (keeps the GIL for small writes): all bytes at the offset,
    OSError with the errno as os.pwrite raises it, ValueError for a negative offset."""
    import errno as _errno
    path = tmp_path / "f"
    path.write_bytes(b"\0" * 16)
    fd = os.open(path, os.O_RDWR)
    try:
        native.ext.pwrite_all(fd, b"abc", 5)
        native.ext.pwrite_all(fd, memoryview(b"x" * (300 * 1024)), 16)  # the GIL-releasing size
        with pytest.raises(ValueError):
            native.ext.pwrite_all(fd, b"z", -1)
    finally:
        os.close(fd)
    data = path.read_bytes()
    assert data[:8] == b"\0" * 5 + b"abc" and data[16:] == b"x" * (300 * 1024)
    with pytest.raises(OSError) as exc:
        native.ext.pwrite_all(fd, b"late", 0)  # closed
    assert exc.value.errno == _errno.EBADF
