"""kafka_bridge.kafka_log, the Kafka-design peer storage: Kafka's file layout and formats (segments
named by base offset, sparse offset and time indexes, offset checkpoint files), rolling, retention,
time lookup, and recovery after a crash (torn tail truncated, indexes rebuilt)."""
from __future__ import annotations

import os
import struct

import pytest

from kafka_bridge.kafka_log import AppendError, KafkaLogManager, LogConfig
from kafka_bridge.kafka_log.manager import CLEAN_SHUTDOWN, read_checkpoint
from kafka_bridge.records import RecordBatch, iter_batches
from kafka_bridge.records.batch import encode_batch

T0 = 1_700_000_000_000


def batch(n: int, first: int = 0, size: int = 100, ts: int = T0) -> bytes:
    return encode_batch([(b"k%d" % (first + i), b"v" * size, None, ts + first + i) for i in range(n)])


def offsets_in(data: bytes) -> list[int]:
    return [b.base_offset + r.offset_delta for b in iter_batches(data, allow_partial=True) for r in b.records()]


def test_layout_offsets_and_sparse_indexes(tmp_path):
    m = KafkaLogManager(str(tmp_path), LogConfig(index_interval_bytes=4096))
    plog = m.get_or_create("orders.v1", 3)
    bases = [plog.append(batch(10, first=10 * i))[0] for i in range(20)]     # 20 batches of ~1.2 KB
    assert bases == [10 * i for i in range(20)]
    d = tmp_path / "orders.v1-3"
    assert sorted(os.listdir(d)) == ["00000000000000000000.index", "00000000000000000000.log",
                                     "00000000000000000000.timeindex"]
    log_bytes = (d / "00000000000000000000.log").read_bytes()
    stored = list(iter_batches(log_bytes))
    assert [b.base_offset for b in stored] == bases               # stored as received, base offsets set
    idx = (d / "00000000000000000000.index").read_bytes()
    entries = [struct.unpack_from(">ii", idx, i) for i in range(0, len(idx), 8)]
    assert len(entries) >= 4 and all(b - a > 4096 for (_, a), (_, b) in zip(entries, entries[1:]))
    for rel, pos in entries:                                      # each entry points at its batch
        b = RecordBatch(log_bytes, pos)
        assert b.base_offset + b.last_offset_delta == rel
    tidx = (d / "00000000000000000000.timeindex").read_bytes()
    assert len(tidx) % 12 == 0 and len(tidx) // 12 >= 1
    assert offsets_in(plog.read(137, 1 << 20))[:1] == [130]       # whole batches, from the one holding 137
    assert 137 in offsets_in(plog.read(137, 1))                   # at least one batch whatever max_bytes says
    m.close()


def test_roll_read_across_segments_and_retention_by_bytes(tmp_path):
    m = KafkaLogManager(str(tmp_path), LogConfig(segment_bytes=3000, retention_bytes=4000, retention_ms=-1))
    plog = m.get_or_create("t", 0)
    for i in range(10):
        plog.append(batch(2, first=2 * i, size=500))               # ~1.1 KB each: 2 per segment
    logs = sorted(f for f in os.listdir(tmp_path / "t-0") if f.endswith(".log"))
    assert len(logs) == 5 and logs[1] == "00000000000000000004.log"
    assert offsets_in(plog.read(4, 1 << 20))[:2] == [4, 5]
    assert plog.delete_old_segments() == 3                          # only 4000 bytes may stay, active kept
    assert plog.log_start_offset == 12
    assert sorted(f for f in os.listdir(tmp_path / "t-0") if f.endswith(".log"))[0] == "00000000000000000012.log"
    m.close()


def test_offset_for_time_and_log_append_time(tmp_path):
    m = KafkaLogManager(str(tmp_path), LogConfig(index_interval_bytes=100))
    plog = m.get_or_create("t", 0)
    for i in range(10):
        plog.append(batch(5, first=5 * i))
    assert plog.offset_for_time(T0 + 23) == (23, T0 + 23)
    assert plog.offset_for_time(T0 + 999) == (-1, -1)
    la = m.get_or_create("la", 0)
    la.config = LogConfig(message_timestamp_type="LogAppendTime")
    _, _, when = la.append(batch(3), now_ms=T0 + 5_000)
    b = next(iter_batches(la.read(0, 1 << 20)))                     # CRC checked on parse
    assert when == T0 + 5_000 and b.max_timestamp == T0 + 5_000 and b.timestamp_type == 1
    m.close()


def test_bad_batches_are_refused_with_kafka_codes(tmp_path):
    m = KafkaLogManager(str(tmp_path))
    plog = m.get_or_create("t", 0)
    good = bytearray(batch(2))
    good[-1] ^= 0xFF
    with pytest.raises(AppendError) as e:
        plog.append(bytes(good))
    assert e.value.code == 2 and "CRC" in str(e.value).upper()       # CORRUPT_MESSAGE
    assert plog.end_offset == 0
    m.close()


def test_clean_shutdown_writes_checkpoints_and_reopens_without_recovery(tmp_path):
    m = KafkaLogManager(str(tmp_path))
    m.get_or_create("a", 0).append(batch(7))
    m.get_or_create("a", 1).append(batch(2))
    m.close()
    assert (tmp_path / CLEAN_SHUTDOWN).exists()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n2\na 0 7\na 1 2\n"
    assert read_checkpoint(str(tmp_path / "log-start-offset-checkpoint")) == {("a", 0): 0, ("a", 1): 0}
    m2 = KafkaLogManager(str(tmp_path))
    assert not (tmp_path / CLEAN_SHUTDOWN).exists()                 # the marker is consumed at start
    assert m2.offsets("a", 0) == (0, 7) and m2.stats.get("segments_recovered", 0) == 0
    m2.close()


def test_crash_recovery_truncates_a_torn_tail_and_rebuilds_indexes(tmp_path):
    m = KafkaLogManager(str(tmp_path), LogConfig(index_interval_bytes=200))
    plog = m.get_or_create("t", 0)
    for i in range(6):
        plog.append(batch(3, first=3 * i))
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    whole = seg.stat().st_size
    with open(seg, "ab") as fh:                                     # a crash mid-write: half a batch
        fh.write(batch(3, first=18)[:40])
    (tmp_path / "t-0" / "00000000000000000000.index").write_bytes(b"\x00" * 5)   # and a torn index
    # no close(): no clean-shutdown marker, no checkpoint -> everything past recovery point 0 is checked
    m._dir_lock.release()                                           # as the kernel does for a dead process
    m2 = KafkaLogManager(str(tmp_path), LogConfig(index_interval_bytes=200))
    p2 = m2.get("t", 0)
    assert m2.stats["segments_recovered"] == 1
    assert seg.stat().st_size == whole and p2.end_offset == 18
    idx = (tmp_path / "t-0" / "00000000000000000000.index").read_bytes()
    assert len(idx) % 8 == 0 and len(idx) > 0
    assert p2.append(batch(1))[0] == 18                             # appends go on from the last whole batch
    assert offsets_in(p2.read(0, 1 << 20)) == list(range(19))
    m2.close()


def test_retention_by_time_uses_the_records_timestamps(tmp_path):
    m = KafkaLogManager(str(tmp_path), LogConfig(segment_bytes=3000, retention_ms=60_000))
    plog = m.get_or_create("t", 0)
    for i in range(4):
        plog.append(batch(2, first=2 * i, size=500, ts=T0))          # records stamped long ago
    assert len(plog.segments) == 2
    assert plog.delete_old_segments(now_ms=T0 + 30_000) == 0          # within retention.ms
    assert plog.delete_old_segments(now_ms=T0 + 120_000) == 1         # past it: all but the active segment
    assert plog.log_start_offset == 4
    m.close()


def test_dump_shows_files_as_dump_log_segments_does(tmp_path):
    from click.testing import CliRunner

    from kafka_bridge.kafka_log.dump import kafka_log
    m = KafkaLogManager(str(tmp_path), LogConfig(index_interval_bytes=100))
    plog = m.get_or_create("t", 0)
    for i in range(3):
        plog.append(batch(2, first=2 * i))
    m.close()
    res = CliRunner().invoke(kafka_log, ["dump", str(tmp_path / "t-0"), "--print-data-log"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert "offset: 3 position: " in res.output                      # index: last offset of batch 2
    batches = [ln for ln in lines if ln.startswith("baseOffset: ")]
    assert [ln.split()[1] for ln in batches] == ["0", "2", "4"] and all("isvalid: true" in ln for ln in batches)
    assert sum(ln.startswith("| offset: ") for ln in lines) == 6
    with open(tmp_path / "t-0" / "00000000000000000000.log", "ab") as fh:
        fh.write(b"\x00" * 70)
    bad = CliRunner().invoke(kafka_log, ["dump", str(tmp_path / "t-0" / "00000000000000000000.log")])
    assert bad.exit_code == 1 and "invalid bytes at position" in bad.output


def test_flush_messages_1_fsyncs_once_per_appended_batch_and_counts_it(tmp_path):
    """flush.messages=1 (kafkaLogFlushIntervalMessages 1) flushes after every append, a batch of 10
    records being one append: 3 fsync calls (the log and its two indexes), counted where the store
    counts its fdatasyncs, which GET_BROKER_RUNTIME_INFO reports as fsyncCalls."""
    from rmq.store.mapped_file import IO_COUNTERS
    m = KafkaLogManager(str(tmp_path), LogConfig(flush_messages=1))
    plog = m.get_or_create("pay", 0)
    before = IO_COUNTERS["fsync_calls"]
    for i in range(4):
        plog.append(batch(10, first=10 * i))
    assert IO_COUNTERS["fsync_calls"] - before == 4 * 3
    assert plog.stats["fsyncs"] == 4 * 3
