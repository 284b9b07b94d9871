"""Log compaction on both storage designs (issue 27, item 5), below the wire: the kafka-log peer's
log cleaner (kafka_bridge.kafka_log.cleaner, Kafka's LogCleaner) and the RocketMQ store's compacted
log (rmq.store.compaction, RocketMQ 5's CompactionStore). Each test writes real files in tmp_path and
reads back what a consumer from the beginning would see."""
from __future__ import annotations

import os
import time

import pytest

from kafka_bridge.kafka_log import KafkaLogManager, LogConfig
from kafka_bridge.kafka_log.dump import dump_log
from kafka_bridge.records import ControlType, RecordBatch, encode_batch, encode_control_batch
from rmq.common.message import Message
from rmq.store.compaction import CompactionPolicy

NOW = int(time.time() * 1000)


def klog(tmp_path, **cfg) -> KafkaLogManager:
    base = dict(cleanup_policy="compact", min_cleanable_dirty_ratio=0.01, segment_ms=1 << 50)
    base.update(cfg)
    return KafkaLogManager(str(tmp_path / "kl"), LogConfig(**base))


def read_all(plog, start: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a consumer fetching from `start` gets: (offset, key, value), skipping records before
    each fetch offset as clients do."""
    out, off = [], start
    for _ in range(10_000):
        if off >= plog.end_offset:
            break
        data = plog.read(off, 1 << 20)
        if not data:
            break
        pos = 0
        while pos < len(data):
            b = RecordBatch(data, pos)
            pos += b.batch_length + 12
            if not b.is_control:
                out.extend((b.base_offset + r.offset_delta, r.key, r.value) for r in b.records()
                           if b.base_offset + r.offset_delta >= off)
            off = b.base_offset + b.last_offset_delta + 1
    return out


def append(plog, key, value, ts=NOW, **kw):
    return plog.append(encode_batch([(key, value, [], ts)], **kw), now_ms=ts)


def test_issue_repro_16_records_6_keys_latest_value_each(tmp_path):
    m = klog(tmp_path)
    try:
        p = m.get_or_create("t", 0)
        for i in range(16):
            append(p, b"k%d" % (i % 6), b"v%d" % i)
            if i % 4 == 3:
                p.roll()
        st = m.cleaner.clean_once()
        assert st is not None and st.end_offset == 16 and st.superseded == 10
        got = read_all(p)
        assert got == [(10 + i, b"k%d" % ((10 + i) % 6), b"v%d" % (10 + i)) for i in range(6)]
        # a fetch inside the cleaned range returns the next surviving record; offsets kept
        assert read_all(p, 3)[0] == (10, b"k4", b"v10")
        assert m.stats["cleaner_records_removed"] == 10
    finally:
        m.close()


def test_active_segment_and_min_compaction_lag_are_never_cleaned(tmp_path):
    m = klog(tmp_path, min_compaction_lag_ms=60_000)
    try:
        p = m.get_or_create("t", 0)
        append(p, b"a", b"old", ts=NOW - 120_000)
        append(p, b"a", b"older-seg", ts=NOW - 120_000)
        p.roll()
        append(p, b"a", b"young", ts=NOW)          # younger than the lag: its segment waits
        p.roll()
        append(p, b"a", b"active", ts=NOW)         # the active segment
        st = m.cleaner.clean_once(NOW)
        assert st is not None and st.end_offset == 2
        assert [v for _, _, v in read_all(p)] == [b"older-seg", b"young", b"active"]
    finally:
        m.close()


def test_tombstones_stay_until_the_delete_horizon_then_go(tmp_path):
    m = klog(tmp_path, delete_retention_ms=1000)
    try:
        p = m.get_or_create("t", 0)
        for i in range(10):
            append(p, b"k%d" % (i % 3), b"v%d" % i)
        append(p, b"k0", None)                      # tombstone for k0
        p.roll()
        append(p, b"other", b"x")
        st = m.cleaner.clean_once(NOW)
        assert st.tombstones_removed == 0
        assert (10, b"k0", None) in read_all(p)      # kept, with a delete horizon of now + 1 s
        assert p.latest_delete_horizon == NOW + 1000
        assert m.cleaner.clean_once(NOW + 500) is None          # nothing dirty, horizon not yet passed
        st = m.cleaner.clean_once(NOW + 1001)
        assert st is not None and st.tombstones_removed == 1
        assert [(k, v) for _, k, v in read_all(p)] == [(b"k1", b"v7"), (b"k2", b"v8"), (b"other", b"x")]
        assert p.latest_delete_horizon == -1
    finally:
        m.close()


def test_tombstone_horizon_is_found_again_after_a_restart(tmp_path):
    m = klog(tmp_path, delete_retention_ms=1000)
    p = m.get_or_create("t", 0)
    append(p, b"k", b"v")
    append(p, b"k", None)
    p.roll()
    append(p, b"z", b"active")
    m.cleaner.clean_once(NOW)
    m.close()
    m = klog(tmp_path, delete_retention_ms=1000)
    try:
        p = m.get_or_create("t", 0)
        assert (1, b"k", None) in read_all(p)
        st = m.cleaner.clean_once(NOW + 2000)         # nothing dirty: the kept tombstone's time is up
        assert st is not None and st.tombstones_removed == 1
        assert read_all(p) == [(2, b"z", b"active")]
    finally:
        m.close()


@pytest.mark.parametrize("policy,dropped", [("compact", 0), ("compact,delete", 1), ("delete", 1)])
def test_retention_applies_only_with_the_delete_policy(tmp_path, policy, dropped):
    m = klog(tmp_path, cleanup_policy=policy, retention_ms=1000)
    try:
        p = m.get_or_create("t", 0)
        append(p, b"k", b"old", ts=NOW - 10_000)
        p.roll()
        append(p, b"k", b"new")
        assert p.delete_old_segments(NOW) == dropped
    finally:
        m.close()


def test_aborted_transactions_go_markers_follow_their_data(tmp_path):
    m = klog(tmp_path, delete_retention_ms=0)
    try:
        p = m.get_or_create("t", 0)
        txn = dict(producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
        append(p, b"k", b"committed", **txn)
        p.append(encode_control_batch(ControlType.COMMIT, producer_id=7, producer_epoch=0, timestamp=NOW),
                 coordinator=True)
        append(p, b"k", b"aborted", **dict(txn, base_sequence=1))
        p.append(encode_control_batch(ControlType.ABORT, producer_id=7, producer_epoch=0, timestamp=NOW),
                 coordinator=True)
        append(p, b"j", b"plain")
        p.roll()
        append(p, b"open", b"in flight", producer_id=8, producer_epoch=0, base_sequence=0, is_transactional=True)
        p.roll()
        append(p, b"z", b"active")
        st = m.cleaner.clean_once(NOW)
        assert st.aborted_removed == 1
        assert st.end_offset == 5          # stops at the segment of the open transaction
        assert [v for _, _, v in read_all(p)] == [b"committed", b"plain", b"in flight", b"active"]
        # the COMMIT marker still covers data; the ABORT marker's data is gone: it got a horizon
        # (delete.retention.ms=0), so the next pass drops it
        st = m.cleaner.clean(p, 5, 5, NOW + 1)
        assert st.markers_removed == 1
    finally:
        m.close()


def test_cleaned_log_survives_restart_and_dump_shows_it(tmp_path, capsys):
    m = klog(tmp_path)
    p = m.get_or_create("t", 0)
    for i in range(12):
        append(p, b"k%d" % (i % 2), b"v%d" % i)
        if i % 3 == 2:
            p.roll()
    m.cleaner.clean_once()
    before = read_all(p)
    m.close()
    # an interrupted swap left behind: finished at load
    m = klog(tmp_path)
    try:
        p = m.get_or_create("t", 0)
        assert read_all(p) == before == [(10, b"k0", b"v10"), (11, b"k1", b"v11")]
        assert m.cleaner.first_dirty[("t", 0)] == 12
        lines = []
        dump_log(p.segments[0].log_path, True, lines.append)
        text = "\n".join(lines)
        assert "offsets 0-9 removed by the log cleaner" in text
    finally:
        m.close()


def test_interrupted_swap_is_completed_at_load(tmp_path):
    m = klog(tmp_path)
    p = m.get_or_create("t", 0)
    for i in range(6):
        append(p, b"k", b"v%d" % i)
        p.roll()
    d = p.dir
    m.close()
    # a cleaning that stopped between its rename to .swap and the deletion of the old segments
    clean = encode_batch([(b"k", b"v4", [], NOW)], base_offset=4)
    with open(os.path.join(d, "00000000000000000000.log.swap.5"), "wb") as fh:
        fh.write(clean)
    with open(os.path.join(d, "00000000000000000000.log.cleaned"), "wb") as fh:
        fh.write(b"half")
    m = klog(tmp_path)
    try:
        p = m.get_or_create("t", 0)
        assert [v for _, _, v in read_all(p)] == [b"v4", b"v5"]
        assert not [f for f in os.listdir(d) if "swap" in f or "cleaned" in f]
    finally:
        m.close()


# ------------------------------------------------------------------ the RocketMQ store
def put(store, topic, key, body, qid=0):
    props = {"KEYS": key} if key is not None else {}
    r = store.put_message(Message(topic, body, queue_id=qid, properties=props))
    assert r.ok


def test_rocketmq_compacted_log_keeps_the_latest_of_each_key(store_factory):
    s = store_factory(compactionScheduleInternal=3_600_000)
    pol = CompactionPolicy(min_cleanable_dirty_ratio=0.01, delete_retention_ms=1000)
    s.compaction.policy_of = lambda t: pol if t == "ct" else None
    for i in range(16):
        put(s, "ct", "k%d" % (i % 6), b"v%d" % i)
    put(s, "ct", "k0", b"")                          # RocketMQ's tombstone: an empty body
    put(s, "ct", None, b"keyless")
    put(s, "plain", "k0", b"untouched")
    done = s.compaction.run_once(NOW)
    assert [(d.topic, d.cleaned_to, d.units_kept) for d in done] == [("ct", 18, 6)]
    res = s.get_message(None, "ct", 0, 0, 100)
    assert res.queue_offsets == [10, 11, 13, 14, 15, 16]
    assert [m.body for m in res.decoded()] == [b"v10", b"v11", b"v13", b"v14", b"v15", b""]
    # a read from inside the cleaned range gets the next survivor; past it, the consumequeue
    assert s.get_message(None, "ct", 0, 3, 1).queue_offsets == [10]
    put(s, "ct", "k9", b"new")
    assert s.get_message(None, "ct", 0, 17, 10).queue_offsets == [18]
    # the tombstone goes once its horizon has passed; superseded units of later puts too
    put(s, "ct", "k1", b"v-last")
    done = s.compaction.run_once(NOW + 1001)
    assert done[0].tombstones_removed == 1
    res = s.get_message(None, "ct", 0, 0, 100)
    assert [(o, m.body) for o, m in zip(res.queue_offsets, res.decoded())] == [
        (10, b"v10"), (11, b"v11"), (14, b"v14"), (15, b"v15"), (18, b"new"), (19, b"v-last")]
    info = s.compaction.describe()
    assert info[0]["cleanedTo"] == 20 and info[0]["units"] == 6
    # the log start moves (retention under compact,delete, DeleteRecords): nothing below it is served
    s.compaction.move_start("ct", 0, 14)
    assert s.get_message(None, "ct", 0, 0, 100).queue_offsets == [14, 15, 18, 19]
    put(s, "ct", "k5", b"after")                       # the next pass drops 10 and 11 for good
    assert [d.units_kept for d in s.compaction.run_once(NOW + 2000)] == [5]
    assert s.get_message(None, "ct", 0, 0, 100).queue_offsets == [14, 15, 18, 19, 20]


def test_rocketmq_compacted_log_survives_restart_and_bounds_work(store_factory, tmp_path):
    s = store_factory(compactionScheduleInternal=3_600_000, compactionMaxUnitsPerPass=10)
    pol = CompactionPolicy(min_cleanable_dirty_ratio=0.0)
    s.compaction.policy_of = lambda t: pol
    for i in range(25):
        put(s, "ct", "k%d" % (i % 4), b"v%d" % i)
    assert [d.cleaned_to for d in s.compaction.run_once(NOW)] == [10]
    assert [d.cleaned_to for d in s.compaction.run_once(NOW)] == [20]
    s.shutdown()
    again = store_factory(compactionScheduleInternal=3_600_000, compactionMaxUnitsPerPass=10)
    again.compaction.policy_of = lambda t: pol
    assert again.compaction.cleaned_to("ct", 0) == 20
    assert [d.cleaned_to for d in again.compaction.run_once(NOW)] == [25]
    res = again.get_message(None, "ct", 0, 0, 100)
    assert [m.body for m in res.decoded()] == [b"v21", b"v22", b"v23", b"v24"]
    again.delete_topic("ct")                          # its compacted log goes with it
    assert again.compaction.log_start("ct", 0) is None
    assert not os.path.exists(os.path.join(again.root, "compaction", "ct"))


@pytest.mark.parametrize("ratio,expect", [(0.9, False), (0.1, True)])
def test_rocketmq_dirty_ratio_decides(store_factory, ratio, expect):
    s = store_factory(compactionScheduleInternal=3_600_000)
    pol = CompactionPolicy(min_cleanable_dirty_ratio=0.0)
    s.compaction.policy_of = lambda t: pol
    for i in range(20):
        put(s, "ct", "k%d" % i, b"v")
    s.compaction.run_once(NOW)                      # 20 clean units
    for i in range(5):
        put(s, "ct", "k%d" % i, b"w")               # 5 dirty: ratio 0.2
    pol.min_cleanable_dirty_ratio = ratio
    assert bool(s.compaction.run_once(NOW)) is expect


def test_store_inspect_shows_what_compaction_kept(store_factory, tmp_path):
    from click.testing import CliRunner

    from rmq.cli import main
    s = store_factory(compactionScheduleInternal=3_600_000)
    pol = CompactionPolicy(min_cleanable_dirty_ratio=0.0, delete_retention_ms=60_000)
    s.compaction.policy_of = lambda t: pol
    for i in range(8):
        put(s, "ct", "k%d" % (i % 2), b"v%d" % i)
    put(s, "ct", "k0", b"")
    s.compaction.run_once(NOW)
    root = s.root
    s.shutdown()
    out = CliRunner().invoke(main, ["store", "inspect", root, "compaction"])
    assert out.exit_code == 0, out.output
    assert "ct/0: offsets [0, 9) cleaned, 2 unit(s) kept (1 tombstone(s))" in out.output
    assert "offsets 0-6 removed by compaction" in out.output
    assert "7 removed (7 superseded, 0 tombstones, 0 keyless)" in out.output


def test_a_cleaning_whose_segments_went_meanwhile_is_aborted(tmp_path, monkeypatch):
    import kafka_bridge.kafka_log.cleaner as cleaner
    m = klog(tmp_path)
    try:
        p = m.get_or_create("t", 0)
        for i in range(6):
            append(p, b"k", b"v%d" % i)
            if i % 2 == 1:
                p.roll()
        first = p.segments[0]
        real = cleaner._batches

        def racing(seg):                      # retention takes the first segment while it is read
            with p.lock:
                if p.segments and p.segments[0] is first:
                    p.segments.pop(0)
            yield from real(seg)
        monkeypatch.setattr(cleaner, "_batches", racing)
        st = m.cleaner.clean_once(NOW)
        assert st is not None and ("t", 0) not in m.cleaner.first_dirty      # not advanced
        assert not [f for f in os.listdir(p.dir) if "swap" in f or "cleaned" in f]
    finally:
        m.close()


def test_rocketmq_min_compaction_lag_keeps_young_units_dirty(store_factory):
    s = store_factory(compactionScheduleInternal=3_600_000)
    pol = CompactionPolicy(min_cleanable_dirty_ratio=0.0, min_compaction_lag_ms=60_000)
    s.compaction.policy_of = lambda t: pol
    for i in range(6):
        put(s, "ct", "k", b"v%d" % i)
    now = int(time.time() * 1000)
    assert s.compaction.run_once(now) == []                 # every unit is younger than the lag
    assert [d.cleaned_to for d in s.compaction.run_once(now + 120_000)] == [6]
    assert s.get_message(None, "ct", 0, 0, 10).queue_offsets == [5]


@pytest.mark.parametrize("age_ms,cleaned", [(10_000, True), (0, False)])
def test_max_compaction_lag_forces_a_cleaning_below_the_ratio(tmp_path, age_ms, cleaned):
    m = klog(tmp_path, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=5_000)
    try:
        p = m.get_or_create("t", 0)
        for i in range(20):
            append(p, b"k%d" % i, b"v", ts=NOW - age_ms)     # 20 keys: cleaning this leaves it clean
        p.roll()
        m.cleaner.clean_once(NOW - age_ms)                  # now it is all clean
        append(p, b"k0", b"w", ts=NOW - age_ms)             # a little dirt: ratio far below 0.99
        p.roll()
        append(p, b"z", b"active")
        st = m.cleaner.clean_once(NOW)
        assert (st is not None and st.reasons == ["max.compaction.lag.ms"]) is cleaned
    finally:
        m.close()
