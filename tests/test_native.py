"""rmq._native (rmq/_native.c) against the Python reference: the C produce path must store the
bytes record_to_message + put_messages store, the C fetch path must return the RecordBatch
get_message + unit_to_record + encode_batch return, and everything the C code does not map
identically must go to the Python code. Also: RMQ_NO_NATIVE=1 switches the extension off."""
from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import subprocess
import tempfile
import zlib

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kafka_bridge.mapping import (
    SYSTEM_PROPERTIES,
    MappingError,
    batch_to_units,
    entry_mapper,
    record_to_message,
    unit_to_record,
    units_to_batch,
)
from kafka_bridge.records import (
    Compression,
    InvalidRecordError,
    LegacyBatch,
    RecordBatch,
    RecordsError,
    TimestampType,
    check_produce_batch,
    encode_batch,
    encode_legacy,
)
from rmq import native
from rmq.common.jhash import java_string_hash
from rmq.common.message import COMPRESSED_FLAG, decode_batch_body, properties_to_bytes
from rmq.store import DefaultMessageStore, Message

from .conftest import PY, ROOT, small_config

ext = native.ext
pytestmark = pytest.mark.skipif(ext is None, reason="rmq._native is not built (or RMQ_NO_NATIVE=1)")

TS = 1_700_000_000_000
STORE_TS = 1_700_000_000_500
BORN = ("10.1.2.3", 5555)


@pytest.fixture
def scratch(tmp_path):
    """mkdir() -> a fresh directory, on tmpfs when there is one: hypothesis makes hundreds of small
    stores, and deleting files on a disk mounted with `discard` costs milliseconds each."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else str(tmp_path)
    made = []

    def mkdir():
        made.append(tempfile.mkdtemp(prefix="rmq-native-test-", dir=base))
        return pathlib.Path(made[-1])
    yield mkdir
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


def _store(path, **kw) -> DefaultMessageStore:
    clock = kw.pop("clock", lambda: STORE_TS)
    return DefaultMessageStore(small_config(str(path), **kw), clock=clock).load().start()


def _files(store, sub) -> dict[str, bytes]:
    out = {}
    base = os.path.join(store.root, sub)
    for dirpath, _dirs, names in os.walk(base):
        for n in names:
            with open(os.path.join(dirpath, n), "rb") as fh:
                out[os.path.relpath(os.path.join(dirpath, n), base)] = fh.read()
    return out


def _same_store(a: DefaultMessageStore, b: DefaultMessageStore) -> None:
    for s in (a, b):
        s.commitlog.flush(0)
        s.flush_logics()
    for sub in ("commitlog", "consumequeue", "index"):
        assert _files(a, sub) == _files(b, sub), sub
    assert a.commitlog.topic_queue_table == b.commitlog.topic_queue_table
    assert a.reput.reput_from_offset == b.reput.reput_from_offset
    assert a.commitlog.max_offset == b.commitlog.max_offset


def _put_python(store, batch, topic, qid, born=BORN) -> int:
    """The reference: decode_produce_records' checks + record_to_message + put_messages."""
    check_produce_batch(batch)
    msgs = [record_to_message(topic, qid, r.key, r.value, r.headers, r.timestamp, born, 18)
            for r in batch.records()]
    res = store.put_messages(msgs)
    assert res.ok, res.remark
    return res.results[0].queue_offset


def _put_native(store, batch, topic, qid, born=BORN):
    enc = batch_to_units(batch, topic, qid, born, store.commitlog.store_v6, store.config.maxMessageSize)
    if enc is None:
        return None
    res = store.put_encoded(enc)
    assert res.ok, res.remark
    return res.queue_offset


def _batch(records, **kw) -> RecordBatch:
    return RecordBatch.from_buffer(encode_batch(records, **kw))


# ------------------------------------------------------------------------------------ CRCs, hash
@given(st.binary(max_size=300), st.integers(0, 2**32 - 1))
def test_crc32_and_crc32c_match_zlib_and_crc32c(data, seed):
    assert ext.crc32(data) == zlib.crc32(data)
    assert ext.crc32(data, seed) == zlib.crc32(data, seed)
    assert ext.crc32c(data) == crc32c(data)
    assert ext.crc32c(data, seed) == crc32c(data, seed)
    assert ext.crc32c_sliced(data, seed) == crc32c(data, seed)


def test_crc_large_buffers_and_known_vectors():
    big = os.urandom(1 << 20)
    assert ext.crc32(big) == zlib.crc32(big)
    assert ext.crc32c(big) == crc32c(big) == ext.crc32c_sliced(big)
    assert ext.crc32(b"123456789") == 0xCBF43926
    assert ext.crc32c(b"123456789") == 0xE3069283


def test_crc32_every_length_and_alignment_across_the_fold_paths():
    """Lengths 0..1100 at eight alignments cover the table code (< 64 bytes), the 128-bit PCLMUL
    fold (64..255) and the 512-bit VPCLMULQDQ fold (>= 256, when the CPU has it), with tails."""
    data = os.urandom(1200)
    mv = memoryview(data)
    for off in range(8):
        for n in range(0, 1101):
            chunk = mv[off:off + n]
            assert ext.crc32(chunk) == zlib.crc32(chunk), (off, n)
    assert ext.crc32(mv[3:3 + 777], 0x12345678) == zlib.crc32(mv[3:3 + 777], 0x12345678)


def test_crc32_without_vpclmul_gives_the_same_values():
    code = ("import os, zlib; from rmq import native; d = os.urandom(70000); "
            "assert all(native.ext.crc32(d[:n]) == zlib.crc32(d[:n]) for n in range(0, 70000, 997)); print('ok')")
    out = subprocess.run([PY, "-c", code], env={**os.environ, "RMQ_NO_VPCLMUL": "1"}, cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


_unit_text = st.text(alphabet=st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
                     max_size=12)


@given(body=st.binary(max_size=700), queue_id=st.integers(0, 2**31 - 1), flag=st.integers(-2**31, 2**31 - 1),
       props=st.dictionaries(_unit_text.filter(bool), _unit_text, max_size=4), sys_flag=st.sampled_from([0, 1, 4, 8, 12]),
       born_v6=st.booleans(), store_v6=st.booleans(), qoff=st.integers(0, 2**62), phy=st.integers(0, 2**62),
       ts=st.integers(0, 2**62), reconsume=st.integers(0, 2**31 - 1), prepared=st.integers(0, 2**62))
def test_write_unit_writes_what_prepared_message_encodes(body, queue_id, flag, props, sys_flag, born_v6, store_v6,
                                                           qoff, phy, ts, reconsume, prepared):
    from rmq.store.unit import PreparedMessage
    born = ("fe80::1", 4242) if born_v6 else ("10.1.2.3", 4242)
    store_addr = bytes(range(1, 17)) if store_v6 else b"\x7f\x00\x00\x01"
    m = Message("Topic_w", body, queue_id=queue_id, flag=flag, properties=props, sys_flag=sys_flag,
                born_timestamp=ts, born_host=born, reconsume_times=reconsume, prepared_transaction_offset=prepared)
    pm = PreparedMessage(m, store_v6)
    want = pm.encode(qoff, phy, ts, store_addr, 10911)
    assert len(want) == pm.size
    buf = bytearray(pm.size + 16)
    ext.write_unit(buf, 8, pm.size, m.body, pm.topic_bytes, pm.props_bytes, pm.born_addr, store_addr, m.queue_id,
                   m.flag, qoff, phy, m.sys_flag, m.born_timestamp, pm.born_port, ts, 10911, m.reconsume_times,
                   m.prepared_transaction_offset)
    assert bytes(buf[8:8 + pm.size]) == want
    assert buf[:8] == bytes(8) and buf[8 + pm.size:] == bytes(8)


def test_write_unit_refuses_inconsistent_arguments():
    from rmq.store.unit import PreparedMessage
    m = Message("T", b"abc")
    pm = PreparedMessage(m, False)
    args = [m.body, pm.topic_bytes, pm.props_bytes, pm.born_addr, b"\x7f\0\0\1", 0, 0, 0, 0, m.sys_flag, 0,
            pm.born_port, 0, 1, 0, 0]
    buf = bytearray(200)
    with pytest.raises(ValueError, match="size"):
        ext.write_unit(buf, 0, pm.size + 1, *args)
    with pytest.raises(ValueError, match="does not fit"):
        ext.write_unit(buf, 150, pm.size, *args)
    bad_host = list(args)
    bad_host[4] = bytes(16)
    with pytest.raises(ValueError, match="sysFlag"):
        ext.write_unit(buf, 0, pm.size, *bad_host)
    with pytest.raises(TypeError):
        ext.write_unit(buf, 0, pm.size, *args[:-1])
    with pytest.raises(BufferError):
        ext.write_unit(bytes(200), 0, pm.size, *args)
    assert buf == bytearray(200)


@given(st.text(max_size=20))
def test_java_string_hash_matches_python(s):
    from rmq.common import jhash
    saved, native.ext = native.ext, None  # jhash's Python code, the reference (it calls the C one otherwise)
    try:
        reference = jhash._compute(s)
    finally:
        native.ext = saved
    assert ext.java_string_hash(s.encode("utf-8")) == reference == java_string_hash(s)


# ------------------------------------------------------------------------------------ produce
def _clean(b) -> bool:
    try:
        s = bytes(b).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return "\x01" not in s and "\x02" not in s


def _plain(records) -> bool:
    """What the C produce path must take (everything else goes to the Python mapping)."""
    for key, value, headers, _ts in records:
        if value is None:
            return False
        if key is not None and (not _clean(key) or b" " in key):
            return False
        names, tags = set(), 0
        for name, hv in headers:
            if hv is None or not _clean(hv):
                return False
            if name == "rocketmq.tags":
                tags += 1
                continue
            if name in ("rocketmq.keys", "rocketmq.delay") or not name or name in SYSTEM_PROPERTIES \
                    or name in names or not _clean(name.encode()):
                return False
            names.add(name)
        if tags > 1:
            return False
    return True


text_bytes = st.text(max_size=6).map(lambda s: s.encode("utf-8"))
keys = st.one_of(st.none(), text_bytes, st.binary(max_size=6),
                 st.sampled_from([b"", b"a b", b"k\x01", b"\xff", b"order-1", "kéy😀".encode()]))
values = st.one_of(st.binary(max_size=40), st.just(None))
header_names = st.one_of(st.text(max_size=5), st.sampled_from(
    ["rocketmq.tags", "rocketmq.tags", "rocketmq.keys", "rocketmq.delay", "KEYS", "TAGS", "UNIQ_KEY", "h", "h",
     "a\x01", ""]))
header_values = st.one_of(st.none(), text_bytes, st.binary(max_size=6),
                          st.sampled_from([b"TagA", b"x\x02", "ü".encode(), b"3"]))
timestamps = st.integers(TS - 10**6, TS + 10**6)
mixed_records = st.lists(st.tuples(keys, values, st.lists(st.tuples(header_names, header_values), max_size=4),
                                   timestamps), min_size=1, max_size=12)
plain_text = st.text(st.characters(blacklist_characters="\x01\x02 ", blacklist_categories=("Cs",)), max_size=8)
plain_names = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1,
                      max_size=8).filter(lambda n: n not in SYSTEM_PROPERTIES and n not in ("rocketmq.keys", "rocketmq.delay"))
plain_headers = st.lists(st.tuples(st.one_of(plain_names, st.just("rocketmq.tags")),
                                   plain_text.map(lambda s: s.encode("utf-8"))),
                         max_size=4, unique_by=lambda h: h[0])
plain_records = st.lists(st.tuples(st.one_of(st.none(), plain_text.map(lambda s: s.encode("utf-8"))),
                                   st.binary(max_size=40), plain_headers, timestamps), min_size=1, max_size=12)
records_st = st.one_of(plain_records, mixed_records)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(records_st, min_size=1, max_size=3), v6=st.booleans())
def test_produce_c_units_equal_python_units(scratch, batches, v6):
    root = scratch()
    born = ("fe80::1:2", 4242) if v6 else BORN
    py, c = _store(root / "py"), _store(root / "c")
    try:
        for records in batches:
            batch = _batch(records)
            enc = batch_to_units(batch, "T", 1, born, False, c.config.maxMessageSize)
            assert (enc is not None) == _plain(records), records
            event("C mapped the batch" if enc is not None else "Python mapped the batch")
            try:
                base = _put_python(py, _batch(records), "T", 1, born)
            except MappingError:
                assert enc is None
                continue
            if enc is not None:
                res = c.put_encoded(enc)
                assert res.ok and res.queue_offset == base and res.count == len(records)
            else:
                _put_python(c, batch, "T", 1, born)
        _same_store(py, c)
    finally:
        py.shutdown()
        c.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def test_produce_rollover_keys_tags_headers_and_thread_reput(scratch):
    """Batches straddling 64 KiB commitlog files (blank units), 100-unit consumequeue files,
    keyed records (index), tags (tag codes) and headers; inline and thread dispatch."""
    def batches():
        for b in range(16):
            recs = []
            for i in range(40):
                n = b * 40 + i
                hdrs = [("trace", f"t{n}".encode()), ("rocketmq.tags", b"TagA" if n % 3 else "Tä😀".encode())]
                key = f"key-{n}".encode() if n % 4 else (None if n % 8 else "ключ-😀".encode())
                recs.append((key, bytes([n % 251]) * (50 + n % 300), hdrs, TS + n))
            yield recs

    for mode in ("inline", "thread"):
        root = scratch()
        py, c = _store(root / "py", reputMode=mode), _store(root / "c", reputMode=mode)
        try:
            for i, recs in enumerate(batches()):
                _put_python(py, _batch(recs), "Roll", i % 2)
                assert _put_native(c, _batch(recs), "Roll", i % 2) is not None
            for s in (py, c):
                assert s.wait_dispatched()
            assert len(c.commitlog.queue.files) >= 3
            _same_store(py, c)
            got = [m.body for m in c.query_message("Roll", "key-101")]
            assert got == [bytes([101]) * 151]
            assert len(c.index_service.files) >= 2  # 400 entries per index file here
        finally:
            py.shutdown()
            c.shutdown()


def test_put_encoded_many_writes_what_put_encoded_writes_one_by_one(scratch):
    """A Produce request of many partitions: put_encoded_many (one put lock, one commitlog write
    while the batches fit in the file, else one at a time across the rollover) gives the bytes,
    offsets and results of put_encoded called per batch, a refused batch included."""
    def requests():
        n = 0
        for r in range(12):
            req = []
            for e in range(30):
                n += 1
                key = f"key-{n}".encode() if n % 3 else None
                hdrs = [("rocketmq.tags", b"TagA")] if n % 5 == 0 else []
                recs = [(key, bytes([n % 251]) * (20 + (n * 37) % 900), hdrs, TS + n) for _ in range(1 + n % 2)]
                req.append((f"T{e % 4}", e % 3, recs))
            yield req

    for mode in ("inline", "thread"):
        root = scratch()
        one, many = _store(root / "one", reputMode=mode), _store(root / "many", reputMode=mode)
        many.commitlog.staging = bytearray(4096)  # a request's units then go to the file in several writes
        try:
            for req in requests():
                encs = [batch_to_units(_batch(recs), t, q, BORN, False, one.config.maxMessageSize) for t, q, recs in req]
                assert all(e is not None for e in encs)
                encs[7].max_size = one.config.maxMessageSize + 1  # refused, the others still go in
                expect = [one.put_encoded(e) for e in encs]
                got = many.put_encoded_many(encs)
                assert [(r.status, r.queue_offset, r.count, r.wrote_offset, r.end_offset, r.cq_units, r.remark)
                        for r in got] == [(r.status, r.queue_offset, r.count, r.wrote_offset, r.end_offset,
                                           r.cq_units, r.remark) for r in expect]
                assert not got[7].ok and got[0].ok
            for s in (one, many):
                assert s.wait_dispatched()
            assert len(many.commitlog.queue.files) >= 3
            _same_store(one, many)
            assert [m.body[:1] for m in many.query_message("T1", "key-2")] == [bytes([2])]
        finally:
            one.shutdown()
            many.shutdown()


def test_produce_ipv6_store_host_compressed_and_log_append_time(scratch):
    recs = [(b"k%d" % i, b"v" * i, [("h", b"x")], TS + i) for i in range(30)]
    variants = [dict(compression=Compression.GZIP), dict(compression=Compression.ZSTD),
                dict(timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=TS + 999)]
    root = scratch()
    py = _store(root / "py", brokerIP1="::1")
    c = _store(root / "c", brokerIP1="::1")
    try:
        assert c.commitlog.store_v6
        for kw in variants:
            _put_python(py, _batch(recs, **kw), "V6", 0)
            enc = batch_to_units(_batch(recs, **kw), "V6", 0, BORN, True, c.config.maxMessageSize)
            assert enc is not None
            assert c.put_encoded(enc).ok
        _same_store(py, c)
    finally:
        py.shutdown()
        c.shutdown()


@pytest.mark.parametrize("records,kw", [
    ([(None, None, [], TS)], {}),                                  # null value: KAFKA_NULL_VALUE
    ([(b"\xff", b"v", [], TS)], {}),                               # key not UTF-8: KAFKA_KEY_B64
    ([(b"a b", b"v", [], TS)], {}),                                # key with a space
    ([(None, b"v", [("h", None)], TS)], {}),                       # null header value
    ([(None, b"v", [("h", b"\xfe")], TS)], {}),                    # header value not UTF-8
    ([(None, b"v", [("h", b"1"), ("h", b"2")], TS)], {}),          # repeated header name
    ([(None, b"v", [("UNIQ_KEY", b"1")], TS)], {}),                # a system property name
    ([(None, b"v", [("rocketmq.keys", b"a b")], TS)], {}),         # more index keys
    ([(None, b"v", [("rocketmq.delay", b"3")], TS)], {}),          # delay level
    ([(None, b"v", [("rocketmq.tags", b"a"), ("rocketmq.tags", b"b")], TS)], {}),
    ([(None, b"v", [], TS)], {"is_transactional": True, "producer_id": 7, "producer_epoch": 0}),
    ([(None, b"x" * 20000, [], TS)], {}),                          # over maxMessageSize (16 KiB here)
])
def test_produce_fallback_cases(scratch, records, kw):
    s = _store(scratch())
    try:
        assert batch_to_units(_batch(records, **kw), "T", 0, BORN, False, s.config.maxMessageSize) is None
    finally:
        s.shutdown()


def test_produce_invalid_batches_fall_back_so_python_reports_them():
    good = encode_batch([(None, b"v", [], TS), (None, b"w", [], TS)])
    bad_deltas = encode_batch([(None, b"v", [], TS), (None, b"w", [], TS)], offset_deltas=[0, 5])
    legacy = encode_legacy([(None, b"v", None, TS)], magic=1)
    assert batch_to_units(RecordBatch.from_buffer(good), "T", 0, BORN, False, 1 << 20) is not None
    b = RecordBatch.from_buffer(bad_deltas)
    assert batch_to_units(b, "T", 0, BORN, False, 1 << 20) is None
    with pytest.raises(InvalidRecordError):
        check_produce_batch(b)
    # a record whose declared length disagrees with its fields: C declines, Python raises
    raw = bytearray(good)
    raw[61] += 2  # first record's length varint
    from kafka_bridge.records.batch import CRC_START
    raw[17:21] = crc32c(bytes(raw[CRC_START:])).to_bytes(4, "big")
    b = RecordBatch.from_buffer(bytes(raw))
    assert batch_to_units(b, "T", 0, BORN, False, 1 << 20) is None
    with pytest.raises(RecordsError):
        check_produce_batch(b)
    assert batch_to_units(LegacyBatch(legacy, 0), "T", 0, BORN, False, 1 << 20) is None


@settings(max_examples=150, deadline=None)
@given(records=records_st, v6=st.booleans(), kw=st.sampled_from([
    {}, {"producer_id": 42, "producer_epoch": 3, "base_sequence": 1000},
    {"timestamp_type": TimestampType.LOG_APPEND_TIME, "max_timestamp": TS + 999}]))
def test_entry_mapper_gives_what_iter_batches_and_batch_to_units_give(records, v6, kw):
    """The one-call path of a Produce request's entries (kafka_batch_to_units): the same units,
    tag codes, index entries and producer fields as RecordBatch + batch_to_units, and None exactly
    where batch_to_units declines."""
    born = ("fe80::1:2", 4242) if v6 else BORN
    raw = encode_batch(records, **kw)
    mapper = entry_mapper(born, v6, 1 << 20, 2 << 20)
    got = mapper(raw, "T", b"T", 3)
    batch = RecordBatch.from_buffer(raw)
    want = batch_to_units(batch, "T", 3, born, v6, 1 << 20)
    if want is None:
        assert got is None
        return
    assert got is not None
    pid, epoch, seq, enc = got
    assert (pid, epoch, seq) == (batch.producer_id, batch.producer_epoch, batch.base_sequence)
    assert enc == want


def test_entry_mapper_leaves_everything_but_one_plain_batch_to_python():
    recs = [(b"k", b"v", [("h", b"x")], TS), (None, b"w", [], TS + 1)]
    plain = encode_batch(recs)
    mapper = entry_mapper(BORN, False, 1 << 20, 2 << 20)
    assert mapper(plain, "T", b"T", 0) is not None
    bad_crc = bytearray(plain)
    bad_crc[-1] ^= 1
    declined = {
        "two batches": plain + plain,
        "a trailing byte": plain + b"\0",
        "truncated": plain[:-1],
        "header only": plain[:61],
        "bad crc": bytes(bad_crc),
        "gzip": encode_batch(recs, compression=Compression.GZIP),
        "transactional": encode_batch(recs, is_transactional=True, producer_id=7, producer_epoch=0),
        "legacy magic 1": encode_legacy([(None, b"v", None, TS)], magic=1),
        "offset deltas with a gap": encode_batch(recs, offset_deltas=[0, 5]),
    }
    for what, raw in declined.items():
        assert mapper(raw, "T", b"T", 0) is None, what
    assert mapper(plain, "SCHEDULE_TOPIC_XXXX", b"SCHEDULE_TOPIC_XXXX", 0) is None
    assert entry_mapper(BORN, False, 1 << 20, len(plain) - 1)(plain, "T", b"T", 0) is None  # over max batch size


@settings(max_examples=200, deadline=None)
@given(records=plain_records, flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1,
                                             max_size=4))
def test_produce_corrupted_records_never_accepted_when_python_rejects(records, flips):
    """Random byte changes in the records section (CRC fixed up): whatever C accepts, Python accepts
    and maps to the same units; C never crashes on it."""
    from kafka_bridge.records.batch import CRC_START, HEADER_SIZE
    raw = bytearray(encode_batch(records))
    for pos, val in flips:
        if len(raw) > HEADER_SIZE:
            raw[HEADER_SIZE + pos % (len(raw) - HEADER_SIZE)] = val
    raw[17:21] = crc32c(bytes(raw[CRC_START:])).to_bytes(4, "big")
    batch = RecordBatch.from_buffer(bytes(raw))
    enc = batch_to_units(batch, "T", 0, BORN, False, 1 << 20)
    try:
        check_produce_batch(batch)
        msgs = [record_to_message("T", 0, r.key, r.value, r.headers, r.timestamp, BORN, 18) for r in batch.records()]
    except (RecordsError, MappingError):
        assert enc is None
        event("both rejected")
        return
    event("C mapped the corrupted batch" if enc is not None else "C left it to Python, which took it")
    if enc is None:
        return
    from rmq.store.unit import PreparedMessage
    want = b"".join(PreparedMessage(m, False).encode(0, 0, 0, bytes(4), 0) for m in msgs)
    assert enc.units == want


# ------------------------------------------------------------------------------------ fetch
def _python_fetch(store, topic, qid, offset, count, max_bytes):
    """read_partition's Python path."""
    res = store.get_message(None, topic, qid, offset, count, max_bytes=max(max_bytes, 1))
    if not res.messages:
        return None
    offs = res.queue_offsets
    base = offs[0]
    recs = [unit_to_record(raw)[:4] for raw in res.messages]
    return encode_batch(recs, base_offset=base, offset_deltas=[o - base for o in offs], partition_leader_epoch=0)


def _native_fetch(store, topic, qid, offset, count, max_bytes):
    view = store.units_view(topic, qid, offset, count)
    got = units_to_batch(view, max(max_bytes, 1), count) if view is not None else None
    if got is None:
        return None
    batch, n = got
    assert RecordBatch.from_buffer(batch).records_count == n
    return batch


def _fill_mixed(store, topic="F", qid=0):
    """Kafka records of every kind (through the Python mapping, KAFKA_* properties included) and
    RocketMQ messages (TAGS, KEYS with spaces, UNIQ_KEY, user properties, a compressed body)."""
    recs = [(b"k1", b"plain", [("h", b"v"), ("rocketmq.tags", b"TagA")], TS),
            (None, None, [], TS - 5),
            (b"\xff\x00", b"binkey", [("dup", b"1"), ("dup", b"2"), ("n", None)], TS + 7),
            (b"a b", "é".encode(), [("rocketmq.keys", b"x y")], TS + 1),
            (b"", b"", [("e", b"")], TS)]
    _put_python(store, _batch(recs), topic, qid)
    for i in range(50):
        props = {"TAGS": f"T{i % 3}", "KEYS": f"o{i} p{i}", "UNIQ_KEY": f"U{i}", "color": "réd", "WAIT": "true"}
        if i % 7 == 0:
            props = {}
        m = Message(topic, b"rmq-%d" % i * (i % 5 + 1), queue_id=qid, properties=props, born_timestamp=TS + 100 - i)
        if i % 11 == 3:
            m.body, m.sys_flag = zlib.compress(m.body), COMPRESSED_FLAG
        assert store.put_message(m).ok
    recs = [(b"key-%d" % i, b"x" * (i % 200), [("t", b"%d" % i)], TS + i) for i in range(300)]
    for j in range(0, 300, 60):
        _put_python(store, _batch(recs[j:j + 60]), topic, qid)


def _break_utf8_property(store, topic, qid, offset):
    """Make one stored property value invalid UTF-8 (é -> 0xC3 0x28): unit_to_record replaces it."""
    phy, size, _ = store.get_consume_queue(topic, qid).get_unit(offset)
    mf = store.commitlog.queue.find_by_offset(phy)
    pos = phy - mf.file_from_offset
    unit = mf.mm[pos:pos + size]
    i = unit.rindex("é".encode())
    mf.mm[pos + i + 1] = 0x28


def test_fetch_c_batch_equals_python_batch(scratch):
    s = _store(scratch())
    try:
        _fill_mixed(s)
        _break_utf8_property(s, "F", 0, 6)
        hw = s.get_max_offset_in_queue("F", 0)
        assert hw == 355 and len(s.commitlog.queue.files) > 1
        checked = 0
        for offset in list(range(0, 60)) + list(range(95, 110)) + [199, 200, 350, 354]:
            for count in (1, 3, 10_000):
                for max_bytes in (0, 1, 150, 4000, 1 << 20):
                    want = _python_fetch(s, "F", 0, offset, count, max_bytes)
                    got = _native_fetch(s, "F", 0, offset, count, max_bytes)
                    assert got == want, (offset, count, max_bytes)
                    checked += want is not None
        assert checked > 1000
        # a fetch stops at a consumequeue file's end (100 units per file here), as get_message does
        assert RecordBatch.from_buffer(_native_fetch(s, "F", 0, 95, 10_000, 1 << 30)).records_count == 5
        assert _native_fetch(s, "F", 0, hw, 10, 1 << 20) is None
    finally:
        s.shutdown()


def test_fetch_skips_units_below_commitlog_min_like_python(scratch):
    s = _store(scratch())
    try:
        recs = [(b"k%d" % i, b"z" * 900, [], TS + i) for i in range(150)]
        for j in range(0, 150, 30):
            _put_python(s, _batch(recs[j:j + 30]), "G", 0)
        assert len(s.commitlog.queue.files) >= 3
        s.commitlog.queue.delete_first(1)  # cleanup removed the first file; consumequeue not corrected yet
        for offset in (0, 10, 70, 71, 100):
            for max_bytes in (1, 5000, 1 << 20):
                assert _native_fetch(s, "G", 0, offset, 500, max_bytes) == _python_fetch(s, "G", 0, offset, 500, max_bytes)
    finally:
        s.shutdown()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(records_st, min_size=1, max_size=4), max_bytes=st.integers(0, 3000),
       count=st.integers(1, 30))
def test_fetch_roundtrip_property(scratch, batches, max_bytes, count):
    root = scratch()
    s = _store(root)
    try:
        for records in batches:
            try:
                _put_python(s, _batch(records), "H", 0)
            except MappingError:
                pass
        hw = s.get_max_offset_in_queue("H", 0)
        for offset in range(hw):
            assert _native_fetch(s, "H", 0, offset, count, max_bytes) == _python_fetch(s, "H", 0, offset, count, max_bytes)
    finally:
        s.shutdown()
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=6))
def test_fetch_corrupted_units_give_what_python_gives(scratch, flips):
    """Random byte changes in stored units: C returns the Python batch, or both raise."""
    root = scratch()
    s = _store(root)
    try:
        recs = [(b"k%d" % i, b"v" * i, [("h", b"x"), ("rocketmq.tags", b"T")], TS + i) for i in range(20)]
        _put_python(s, _batch(recs), "C", 0)
        mm = s.commitlog.queue.files[0].mm
        end = s.commitlog.max_offset
        for pos, val in flips:
            mm[pos % end] = val
        for offset in (0, 7):
            try:
                want = _python_fetch(s, "C", 0, offset, 100, 1 << 20)
            except Exception as exc:  # noqa: BLE001 - whatever unit_to_record raises on garbage
                with pytest.raises(type(exc)):
                    _native_fetch(s, "C", 0, offset, 100, 1 << 20)
                continue
            assert _native_fetch(s, "C", 0, offset, 100, 1 << 20) == want
    finally:
        s.shutdown()
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------------------------ handlers
def _bridge(root, clock):
    from kafka_bridge.bridge import KafkaBridge
    from rmq.broker.controller import BrokerController
    from rmq.config import load_config
    cfg = load_config(None, {"storePathRootDir": str(root), "mappedFileSizeCommitLog": 256 * 1024,
                             "maxMessageSize": 64 * 1024})
    c = BrokerController(cfg, store=DefaultMessageStore(cfg.store, clock=clock))
    c.start()
    c.create_topic("K", 2)
    return c, KafkaBridge(c, "127.0.0.1", 0)


def test_handlers_give_the_same_store_and_fetch_responses_with_and_without_native(scratch, monkeypatch):
    from kafka_bridge.handlers.fetch import read_partition
    from kafka_bridge.handlers.produce import produce_partition

    class Conn:
        peer = ("127.0.0.1", 40000)

    payloads = []
    for b in range(8):
        recs = [(b"k%d" % i if i % 2 else None, os.urandom(100), [("h", b"%d" % i)] if i % 3 else [], TS + i)
                for i in range(200)]
        if b == 3:
            recs[5] = (None, None, [], TS)  # this batch takes the Python mapping
        payloads.append(encode_batch(recs, compression=Compression.LZ4 if b == 5 else Compression.NONE))
    results = {}
    for mode in ("native", "python"):
        if mode == "python":
            monkeypatch.setattr(native, "ext", None)
        c, bridge = _bridge(scratch(), lambda: STORE_TS)
        try:
            async def run():
                outs = [await produce_partition(bridge, Conn, "K", b % 2, p, -1, None) for b, p in enumerate(payloads)]
                fetched = []
                for part in (0, 1):
                    off = 0
                    while True:
                        entry, n = read_partition(bridge, "K", part, off, 50_000, 0)
                        if not n:
                            break
                        fetched.append(entry["records"])
                        off += RecordBatch.from_buffer(entry["records"]).records_count
                return outs, fetched
            outs, fetched = asyncio.run(run())
            assert all(o["error_code"] == 0 for o in outs)
            c.store.commitlog.flush(0)
            results[mode] = (outs, fetched, _files(c.store, "commitlog"), _files(c.store, "consumequeue"),
                             c.store.stats["put_messages"], c.store.stats["get_messages"])
        finally:
            c.shutdown()
    assert results["native"] == results["python"]


def test_rmq_no_native_env_switches_the_extension_off():
    code = ("from rmq import native; import kafka_bridge.handlers.fetch, kafka_bridge.handlers.produce; "
            "print(native.ext is None)")
    env = dict(os.environ, RMQ_NO_NATIVE="1")
    out = subprocess.run([PY, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "True", out.stderr
    env["RMQ_NO_NATIVE"] = "0"
    out = subprocess.run([PY, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_bench_commands_print_both_paths():
    import json

    from click.testing import CliRunner

    from rmq.cli import main
    r = CliRunner().invoke(main, ["bench", "store", "--count", "3000", "--batch", "100", "--kafka-batches", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [x["path"] for x in rows] == ["put_batch", "kafka-batches"] and all(x["count"] == 3000 for x in rows)
    for args, path in ((["--batch", "1"], "put_message"), (["--batch", "50", "--message-lists"], "put_messages"),
                       (["--batch", "50", "--keys"], "put_batch")):
        r = CliRunner().invoke(main, ["bench", "store", "--count", "1000", *args, "--json"])
        assert r.exit_code == 0, r.output
        row = json.loads(r.output)
        assert (row["path"], row["count"], row["errors"]) == (path, 1000, [])
        assert row["commitlog_bytes"] >= 1000 * (100 + 91)
    r = CliRunner().invoke(main, ["bench", "kafka-handlers", "--count", "4000", "--batch", "500", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [x["native"] for x in rows] == [True, False] and all(x["records"] == 4000 for x in rows)


# ------------------------------------------------------------------------------------ SEND_BATCH_MESSAGE bodies
def _batch_body(elements) -> bytes:
    """encodeMessages as the client writes it: (flag, body, properties) per element."""
    from rmq.client.message import Message as ClientMessage
    from rmq.client.message import encode_messages
    return encode_messages([ClientMessage("T", body, flag=flag, properties=props, wait_store_msg_ok=False)
                            for flag, body, props in elements])


def _put_batch_both(scratch, monkeypatch, batches, **cfg):
    """Put the same MessageBatches through put_batch with the C encoder and without it; the stores
    must hold the same bytes. Returns (results with C, results without, C path taken per batch)."""
    from rmq.store import MessageBatch
    a, b = _store(scratch(), **cfg), _store(scratch(), **cfg)
    taken, res_a, res_b = [], [], []
    try:
        for topic, qid, body, props in batches:
            mb = MessageBatch(topic, qid, body, dict(props), born_timestamp=TS, born_host=BORN, reconsume_times=0)
            taken.append(ext.batch_body_to_units(body, topic.encode(), qid, 0, TS, bytes([10, 1, 2, 3]), 5555, False, 0,
                                                 properties_to_bytes(props), a.config.maxMessageSize) is not None)
            res_a.append(a.put_batch(mb))
            if res_a[-1].ok:  # written with pwrite, read back through the mapping and the consumequeue
                bodies = [b for _, b, _ in decode_batch_body(body)]
                assert [a.look_message_by_offset(o).body for o in res_a[-1].commit_log_offsets()] == bodies
                got = a.get_message("G", topic, qid, res_a[-1].queue_offset, len(bodies))
                assert [m.body for m in got.decoded()] == bodies
            with monkeypatch.context() as m:
                m.setattr(native, "ext", None)
                res_b.append(b.put_batch(MessageBatch(topic, qid, body, dict(props), born_timestamp=TS, born_host=BORN)))
        _same_store(a, b)
    finally:
        a.shutdown()
        b.shutdown()
    return res_a, res_b, taken


def test_put_batch_writes_the_same_bytes_with_and_without_c(scratch, monkeypatch):
    elements = [
        (0, b"plain", {}),
        (7, os.urandom(3000), {"TAGS": "TagA", "KEYS": "k1 k2  k3", "UNIQ_KEY": "AC1100000001"}),
        (0, "zoé ✓".encode(), {"TAGS": "标签", "user": "välue \x01 with sep", "WAIT": "false"}),
        (-1, b"", {"KEYS": " lead trail ", "a": ""}),
    ]
    body = _batch_body(elements)
    batches = [("TopicB", 1, body, {"WAIT": "true", "TAGS": "ignored-when-own"}),
               ("TopicB", 1, body, {}),
               ("TopicC", 0, _batch_body([(0, os.urandom(900), {"UNIQ_KEY": f"U{i}"}) for i in range(40)]), {"x": "y"})]
    # 64 KiB commitlog files: these roll the log over twice (a batch that does not fit where the
    # log ends is encoded apart and put after the blank unit; the others are encoded in place)
    batches += [("TopicD", i % 2, _batch_body([(0, os.urandom(2000), {"KEYS": f"d{i}"})] * 10), {}) for i in range(6)]
    res_a, res_b, taken = _put_batch_both(scratch, monkeypatch, batches)
    assert taken == [False, True, True] + [True] * 6  # batch-level TAGS is left to Python
    assert len({r.wrote_offset // (64 * 1024) for r in res_a}) >= 3
    for ra, rb in zip(res_a, res_b):
        assert ra.ok and rb.ok, (ra.remark, rb.remark)
        assert (ra.queue_offset, ra.count, ra.wrote_offset, ra.end_offset, ra.cq_units) == \
               (rb.queue_offset, rb.count, rb.wrote_offset, rb.end_offset, rb.cq_units)
    assert res_a[2].count == 40 and len(res_a[2].commit_log_offsets()) == 40


def test_put_batch_refuses_what_rocketmq_refuses_in_a_batch(scratch, monkeypatch):
    from rmq.store import MessageBatch
    s = _store(scratch())
    try:
        delayed = _batch_body([(0, b"a", {}), (0, b"b", {"DELAY": "3"})])
        half = _batch_body([(0, b"a", {"TRAN_MSG": "true"})])
        for body, props, sys_flag, why in [
                (delayed, {}, 0, "TimeDelayLevel"), (half, {}, 0, "transaction"),
                (_batch_body([(0, b"a", {})]), {}, 4, "transaction"),
                (b"\x00\x00\x00\x30" + bytes(30), {}, 0, "TOTALSIZE"), (_batch_body([(0, b"a", {})])[:-1], {}, 0, "bytes left"),
                (b"", {}, 0, "no message")]:
            r = s.put_batch(MessageBatch("T", 0, body, props, sys_flag=sys_flag))
            assert r.status.value == "MESSAGE_ILLEGAL" and why in r.remark, (why, r.remark)
        r = s.put_batch(MessageBatch("bad topic", 0, _batch_body([(0, b"a", {})])))
        assert r.status.value == "MESSAGE_ILLEGAL" and "characters" in r.remark
        big = s.put_batch(MessageBatch("T", 0, _batch_body([(0, bytes(s.config.maxMessageSize), {})])))
        assert big.status.value == "MESSAGE_ILLEGAL" and "maxMessageSize" in big.remark
        assert s.commitlog.max_offset == 0
        ok = s.put_batch(MessageBatch("T", 0, _batch_body([(0, b"a", {"DELAY": "0"})])))  # level 0: no delay
        assert ok.ok and s.look_message_by_offset(ok.wrote_offset).properties["DELAY"] == "0"
    finally:
        s.shutdown()


_batch_text = st.text(alphabet=st.characters(blacklist_characters="\x00\x02", blacklist_categories=("Cs",)), max_size=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), st.binary(max_size=400),
                          st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "u1", "ü", "a\x01b"]),
                                          _batch_text, max_size=4)), min_size=1, max_size=12),
       st.dictionaries(st.sampled_from(["WAIT", "u1", "CLUSTER"]), _batch_text, max_size=2))
def test_put_batch_c_and_python_agree_on_random_batches(scratch, monkeypatch, elements, batch_props):
    res_a, res_b, taken = _put_batch_both(scratch, monkeypatch, [("TopicR", 2, _batch_body(elements), batch_props)] * 2)
    event(f"C path: {taken[0]}")
    for ra, rb in zip(res_a, res_b):
        assert (ra.status, ra.queue_offset, ra.cq_units) == (rb.status, rb.queue_offset, rb.cq_units)


def test_topic_by_id_follows_the_topic_table(scratch):
    """Fetch v13+ and Metadata name topics by id: the bridge's id map answers from the live topic
    table (new topics found, deleted ones forgotten, unknown ids None)."""
    import uuid
    c, bridge = _bridge(scratch(), None)
    try:
        names = [f"T{i}" for i in range(50)]
        for n in names:
            c.create_topic(n, 1)
        assert all(bridge.topic_by_id(bridge.topic_id(n)) == n for n in names + ["K"])
        assert bridge.topic_by_id(uuid.uuid4()) is None
        c.delete_topic("T7")
        assert bridge.topic_by_id(bridge.topic_id("T7")) is None
        c.create_topic("Late", 1)
        assert bridge.topic_by_id(bridge.topic_id("Late")) == "Late"
        c.create_topic("T7", 1)
        assert bridge.topic_by_id(bridge.topic_id("T7")) == "T7"
    finally:
        bridge.close()
        c.shutdown()
