"""Tests of kafka_bridge.records: RecordBatch v2 / legacy message sets, codecs, and
interop with kafka-python's and aiokafka's own record builders and readers."""

from __future__ import annotations

import struct
import types
import warnings
import zlib

import lz4.frame
import pytest
import zstandard
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_bridge.records import (
    Compression,
    ControlType,
    CorruptRecordError,
    InvalidRecordError,
    LegacyBatch,
    RecordBatch,
    RecordsError,
    RecordTooLargeError,
    TimestampType,
    UnsupportedCompressionError,
    decode_batches,
    decode_produce_records,
    encode_batch,
    encode_control_batch,
    encode_legacy,
    iter_batches,
    rebase_batch,
    records_size_valid,
)
from kafka_bridge.records import compression as comp
from kafka_bridge.records.varint import (
    VARINT_TABLE,
    decode_varint,
    decode_varlong,
    encode_varint,
    size_of_varint,
    varint,
)

with warnings.catch_warnings():  # kafka-python's schema loader uses deprecated importlib APIs
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.codec as kcodec
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

CODECS = list(Compression)
TS = 1_700_000_000_000


@pytest.fixture(scope="module", autouse=True)
def kafka_python_codecs():
    """kafka-python needs python-snappy and xxhash for snappy and magic-0 lz4; neither
    is a dependency, so plug minimal stand-ins in. kafka-python's own xerial framing
    and broken-LZ4-checksum logic still run; only the raw primitives are swapped."""
    import cramjam

    snappy = types.SimpleNamespace(
        compress=lambda b: bytes(cramjam.snappy.compress_raw(bytes(b))),
        decompress=lambda b: bytes(cramjam.snappy.decompress_raw(bytes(b))),
    )
    xxhash = types.SimpleNamespace(
        xxh32=lambda d: types.SimpleNamespace(digest=lambda: comp.xxh32(bytes(d)).to_bytes(4, "big"))
    )
    with pytest.MonkeyPatch.context() as mp:
        if not kcodec.has_snappy():
            mp.setattr(kcodec, "snappy", snappy)
        if kcodec.xxhash is None:
            mp.setattr(kcodec, "xxhash", xxhash)
        yield


def sample_records(n=20):
    out = []
    for i in range(n):
        key = None if i % 4 == 0 else (b"" if i % 4 == 1 else b"key-%d" % i)
        value = None if i % 5 == 0 else (b"" if i % 5 == 1 else b"value-%d-" % i + b"x" * (i * 13))
        headers = [] if i % 3 else [("trace", b"t%d" % i), ("empty", b""), ("null", None), ("ключ", b"\xff")]
        out.append((key, value, headers, TS + i * 7))
    return out


def as_tuples(batch):
    return [(r.key, r.value, list(r.headers), r.timestamp) for r in batch.records()]


def recrc(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return buf


def with_body(body: bytes, count: int, attrs: int = 0) -> bytes:
    """A v2 batch around a hand-made records section (valid CRC, lengths as given)."""
    tail = struct.pack(">hiqqqhii", attrs, max(count - 1, 0), TS, TS, -1, -1, -1, count)
    crc = crc32c(tail + body)
    return struct.pack(">qiibI", 0, 49 + len(body), -1, 2, crc) + tail + body


# ----------------------------------------------------------------------------- varint
@given(st.integers(-(1 << 63), (1 << 63) - 1))
def test_varlong_round_trip(v):
    enc = encode_varint(v)
    assert len(enc) == size_of_varint(v)
    assert decode_varlong(enc + b"junk", 0) == (v, len(enc))
    assert varint(v) == enc


def test_varint_table_and_bounds():
    for v in (0, 1, 63, 64, 8191, 8192, 16383):
        assert VARINT_TABLE[v] == encode_varint(v)
    assert encode_varint(-1) == b"\x01"
    assert decode_varint(encode_varint(-(1 << 31)), 0)[0] == -(1 << 31)
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        decode_varint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(CorruptRecordError, match="int32"):
        decode_varint(encode_varint(1 << 31), 0)
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode_varint(b"\x80\x80", 0)
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        decode_varlong(b"\x80" * 11, 0)


# ----------------------------------------------------------------------------- round trip
record_st = st.tuples(
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=300),
    st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3),
    st.integers(0, 1 << 42),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(record_st, min_size=1, max_size=25),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 1 << 50),
    producer=st.sampled_from([(-1, -1, -1, False), (7, 3, 0, False), (1 << 40, 32767, (1 << 31) - 5, True)]),
)
def test_round_trip_and_kafka_python_reads_it(records, codec, base_offset, producer):
    pid, epoch, seq, txn = producer
    data = encode_batch(
        records,
        base_offset=base_offset,
        compression=codec,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )
    batch = RecordBatch.from_buffer(data)
    assert (batch.base_offset, batch.compression, batch.records_count) == (base_offset, codec, len(records))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (pid, epoch, seq)
    assert batch.is_transactional is txn and not batch.is_control
    assert batch.last_offset == base_offset + len(records) - 1
    assert batch.max_timestamp == max(r[3] for r in records)
    assert as_tuples(batch) == [(k, v, h, t) for k, v, h, t in records]
    assert [r.offset_delta for r in batch.records()] == list(range(len(records)))

    kb = MemoryRecords(data).next_batch()
    assert kb.validate_crc()
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence, kb.is_transactional) == (pid, epoch, seq, txn)
    got = [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in kb]
    assert got == [(base_offset + i, k, v, h, t) for i, (k, v, h, t) in enumerate(records)]


@settings(max_examples=40, deadline=None)
@given(records=st.lists(record_st, min_size=1, max_size=10), codec=st.sampled_from([0, 1, 2, 3]), magic=st.sampled_from([0, 1]))
def test_legacy_round_trip(records, codec, magic):
    data = encode_legacy(records, magic=magic, base_offset=100, compression=codec)
    batches = decode_batches(data)
    recs = [(b.base_offset + r.offset_delta, r.key, r.value, r.timestamp) for b in batches for r in b.records()]
    assert recs == [(100 + i, k, v, t if magic else -1) for i, (k, v, _h, t) in enumerate(records)]
    kp = [(r.offset, r.key, r.value) for b in MemoryRecords(data) for r in b]
    assert kp == [(100 + i, k, v) for i, (k, v, _h, _t) in enumerate(records)]


def test_empty_values_keys_and_unicode_headers():
    recs = sample_records(40)
    for codec in CODECS:
        batch = RecordBatch.from_buffer(encode_batch(recs, compression=codec))
        assert as_tuples(batch) == [(k, v, h, t) for k, v, h, t in recs]


def test_bytes_header_keys_and_memoryview_values_are_accepted():
    value = memoryview(b"0123456789")[2:6]
    data = encode_batch([(bytearray(b"k"), value, [(b"raw", b"v"), (bytearray(b"ba"), memoryview(b"mv"))], TS)])
    (r,) = RecordBatch.from_buffer(data).records()
    assert (r.key, r.value, r.headers) == (b"k", b"2345", [("raw", b"v"), ("ba", b"mv")])


@pytest.mark.parametrize("level", [1, 2, 5, 9])
@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_compression_levels(codec, level):
    recs = sample_records(10)
    data = encode_batch(recs, compression=codec, compression_level=level)
    assert as_tuples(RecordBatch.from_buffer(data)) == [(k, v, h, t) for k, v, h, t in recs]
    assert MemoryRecords(data).next_batch().validate_crc()


def test_offset_deltas_timestamps_and_append_time():
    recs = [(b"a", b"1", None, TS + 50), (b"b", b"2", None, TS), (b"c", b"3", None, TS + 10)]
    data = encode_batch(recs, base_offset=10, offset_deltas=[0, 2, 5])
    b = RecordBatch.from_buffer(data)
    assert [r.offset_delta for r in b.records()] == [0, 2, 5]
    assert (b.last_offset_delta, b.base_timestamp, b.max_timestamp) == (5, TS + 50, TS + 50)
    assert [r.timestamp for r in b.records()] == [TS + 50, TS, TS + 10]  # negative deltas
    kp = [(r.offset, r.timestamp) for r in MemoryRecords(data).next_batch()]
    assert kp == [(10, TS + 50), (12, TS), (15, TS + 10)]

    data = encode_batch(recs, timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=TS + 999)
    b = RecordBatch.from_buffer(data)
    assert b.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert {r.timestamp for r in b.records()} == {TS + 999}
    kb = MemoryRecords(data).next_batch()
    assert {(r.timestamp, r.timestamp_type) for r in kb} == {(TS + 999, 1)}


def test_batch_flags_and_sequence_wrap():
    data = bytearray(encode_batch([(None, b"v", None, TS)] * 3, producer_id=5, producer_epoch=1, base_sequence=(1 << 31) - 2))
    b = RecordBatch.from_buffer(bytes(data))
    assert b.last_sequence == 0  # wraps past Integer.MAX_VALUE like Kafka
    data[22] |= 0x40  # hasDeleteHorizonMs
    b = RecordBatch.from_buffer(bytes(recrc(data)))
    assert b.has_delete_horizon and not b.is_control


def test_empty_batch():
    data = encode_batch([], base_offset=42, producer_id=9, producer_epoch=0, base_sequence=4)
    b = RecordBatch.from_buffer(data)
    assert (b.records_count, b.records(), b.base_timestamp, b.max_timestamp) == (0, [], -1, -1)
    assert list(MemoryRecords(data).next_batch()) == []


# ----------------------------------------------------------------------------- control batches
@pytest.mark.parametrize("ctype", list(ControlType))
def test_control_batch(ctype):
    data = encode_control_batch(ctype, producer_id=77, producer_epoch=4, base_offset=500, coordinator_epoch=9, timestamp=TS)
    b = RecordBatch.from_buffer(data)
    assert b.is_control and b.is_transactional and b.producer_id == 77 and b.producer_epoch == 4
    marker = b.control_marker()
    assert (marker.type, marker.version, marker.coordinator_epoch) == (ctype, 0, 9)
    kb = MemoryRecords(data).next_batch()
    assert kb.is_control_batch and kb.is_transactional
    (rec,) = list(kb)
    assert (rec.offset, rec.type, rec.commit, rec.abort) == (500, int(ctype), ctype == ControlType.COMMIT, ctype == ControlType.ABORT)


def test_control_marker_on_data_batch_raises():
    with pytest.raises(InvalidRecordError):
        RecordBatch.from_buffer(encode_batch([(None, b"v", None, TS)])).control_marker()


# ----------------------------------------------------------------------------- corruption
@pytest.mark.parametrize("codec", CODECS)
def test_crc_flip_detected(codec):
    data = encode_batch(sample_records(), compression=codec)
    for pos in (21, 22, 30, 60, 61, len(data) // 2, len(data) - 1):
        bad = bytearray(data)
        bad[pos] ^= 0x01
        with pytest.raises(CorruptRecordError, match="crc"):
            RecordBatch.from_buffer(bytes(bad))
        with pytest.raises(CorruptRecordError):
            decode_produce_records(bytes(bad))
    # base offset and leader epoch are outside the CRC (the broker rewrites them)
    ok = bytearray(data)
    ok[3] ^= 0xFF
    ok[14] ^= 0xFF
    RecordBatch.from_buffer(bytes(ok)).records()


def test_legacy_crc_flip_detected():
    data = bytearray(encode_legacy(sample_records(3), magic=1))
    data[30] ^= 0x20
    with pytest.raises(CorruptRecordError, match="crc"):
        decode_batches(bytes(data))


def test_truncated_input():
    blob = encode_batch(sample_records(), base_offset=0) + encode_batch(sample_records(), base_offset=20, compression=Compression.LZ4)
    first = RecordBatch(blob).size_in_bytes
    for cut in range(len(blob)):
        part = blob[:cut]
        complete = 0 if cut < first else 1
        got = decode_batches(part, allow_partial=True)
        assert len(got) == complete
        assert records_size_valid(part) == (first if complete else 0)
        if cut in (0, first):
            assert len(decode_produce_records(part)) == complete
        else:
            with pytest.raises(CorruptRecordError):
                decode_produce_records(part)
    assert [b.base_offset for b in decode_produce_records(blob)] == [0, 20]


def test_record_count_mismatch():
    data = bytearray(encode_batch(sample_records(5)))
    for count in (4, 6):
        bad = bytearray(data)
        struct.pack_into(">i", bad, 57, count)
        with pytest.raises(InvalidRecordError):
            RecordBatch.from_buffer(bytes(recrc(bad))).records()
    bad = bytearray(data)
    struct.pack_into(">i", bad, 57, 1 << 30)  # absurd count: refused before any parsing
    with pytest.raises(InvalidRecordError, match="declares"):
        RecordBatch.from_buffer(bytes(recrc(bad))).records()
    struct.pack_into(">i", bad, 57, -1)
    with pytest.raises(InvalidRecordError, match="count"):
        RecordBatch.from_buffer(bytes(recrc(bad)))


def test_malformed_records():
    good = b"\x00\x00\x00\x02" + b"\x02k" + b"\x02v" + b"\x00"  # attrs, ts, off, key, value, 0 headers
    rec = lambda body: bytes([len(body) * 2]) + body  # noqa: E731
    assert as_tuples(RecordBatch.from_buffer(with_body(rec(good[:3] + good[4:]), 1))) == [(b"k", b"v", [], TS)]
    cases = {
        "overlong varint": b"\x80\x80\x80\x80\x80\x01" + good,
        "negative header count": rec(b"\x00\x00\x00\x02k\x02v\x01"),
        "key length -2": rec(b"\x00\x00\x00\x03\x02v\x00"),
        "length past end": b"\x7e" + good,
        "record longer than fields": rec(b"\x00\x00\x00\x02k\x02v\x00\x00"),
        "header key length past record": rec(b"\x00\x00\x00\x02k\x02v\x02\x10a"),
        "header key not utf8": rec(b"\x00\x00\x00\x02k\x02v\x02\x02\xff\x00"),
    }
    for name, body in cases.items():
        with pytest.raises(RecordsError):
            RecordBatch.from_buffer(with_body(body, 1)).records()
            pytest.fail(name)


def test_bad_batch_headers():
    data = encode_batch(sample_records(2))
    with pytest.raises(CorruptRecordError, match="magic"):
        decode_batches(data[:16] + b"\x07" + data[17:])
    bad = bytearray(data)
    struct.pack_into(">i", bad, 8, 10)
    with pytest.raises(CorruptRecordError, match="minimum"):
        decode_batches(bytes(bad))
    with pytest.raises(RecordTooLargeError):
        decode_batches(data, max_batch_size=100)
    with pytest.raises(CorruptRecordError):
        RecordBatch.from_buffer(data + b"\x00")
    bad = bytearray(data)
    bad[22] = 0x05  # codec id 5
    with pytest.raises(UnsupportedCompressionError):
        RecordBatch.from_buffer(bytes(recrc(bad))).records()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    codec=st.sampled_from(CODECS + ["legacy0", "legacy1"]),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4),
)
def test_mutations_raise_only_records_errors(codec, flips):
    """Any byte damage (with the CRC fixed up so the parser sees it) either decodes or
    raises a RecordsError; nothing else escapes."""
    recs = sample_records(6)
    if isinstance(codec, str):
        data = bytearray(encode_legacy(recs, magic=int(codec[-1]), compression=Compression.GZIP))
    else:
        data = bytearray(encode_batch(recs, compression=codec))
    for pos, x in flips:
        data[pos % len(data)] ^= x
    if not isinstance(codec, str) and len(data) > 21:
        recrc(data)
    try:
        for b in iter_batches(bytes(data), verify_crc=False, max_decompressed_size=1 << 20):
            b.records()
    except RecordsError:
        pass


# ----------------------------------------------------------------------------- compression
@pytest.mark.parametrize("codec", [c for c in CODECS if c])
def test_decompression_is_bounded(codec):
    data = encode_batch([(None, b"\0" * (4 << 20), None, TS)], compression=codec)
    assert len(data) < 300_000
    with pytest.raises(RecordTooLargeError):
        RecordBatch.from_buffer(data, max_decompressed_size=1 << 20).records()
    assert RecordBatch.from_buffer(data).records()[0].value == b"\0" * (4 << 20)


def test_snappy_xerial_and_raw():
    payload = bytes(range(256)) * 1000
    framed = comp.snappy_compress(payload)
    assert framed[:16] == b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
    assert comp.snappy_decompress(framed) == payload
    assert comp.snappy_decompress(comp.snappy_compress(payload, xerial=False)) == payload
    assert comp.snappy_decompress(kcodec.snappy_encode(payload)) == payload  # kafka-python's framing
    assert kcodec.snappy_decode(framed) == payload
    # redpanda writes the version/compat ints little-endian: still xerial
    le = framed[:8] + struct.pack("<ii", 1, 1) + framed[16:]
    assert comp.snappy_decompress(le) == payload
    with pytest.raises(CorruptRecordError):
        comp.snappy_decompress(framed[:-3])


def test_lz4_variants():
    payload = b"lz4 frame " * 20000
    for kw in (
        {},
        {"store_size": True, "content_checksum": True},
        {"block_linked": True, "block_size": lz4.frame.BLOCKSIZE_MAX4MB},
    ):
        assert comp.lz4_decompress(lz4.frame.compress(payload, **kw)) == payload
    ours = comp.lz4_compress(payload)
    assert ours[4:6] == b"\x60\x40"  # FLG: v01, independent blocks, no size/checksums; BD: 64 KiB
    assert lz4.frame.decompress(ours) == payload
    # magic-0 quirk: the header checksum covered the magic number too
    broken = kcodec.lz4_encode_old_kafka(payload)
    assert comp.lz4_decompress(broken, legacy_header_checksum=True) == payload
    with pytest.raises(CorruptRecordError):
        comp.lz4_decompress(broken)
    ours_broken = comp.lz4_compress(payload, legacy_header_checksum=True)
    assert kcodec.lz4_decode_old_kafka(ours_broken) == payload


def test_xxh32_matches_lz4_content_checksum():
    for n in (0, 1, 3, 15, 16, 17, 100, 1000):
        data = bytes((i * 37) & 0xFF for i in range(n))
        frame = lz4.frame.compress(data, content_checksum=True)
        assert comp.xxh32(data) == struct.unpack("<I", frame[-4:])[0]


def test_zstd_without_content_size_and_multi_frame():
    payload = b"zstd " * 50000
    nosize = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(payload)
    assert zstandard.frame_content_size(nosize) == -1
    assert comp.zstd_decompress(nosize) == payload
    two = nosize + zstandard.ZstdCompressor(write_checksum=True).compress(payload)
    assert comp.zstd_decompress(two) == payload * 2
    streamed = b"".join(zstandard.ZstdCompressor().read_to_iter(payload, read_size=7000))
    assert comp.zstd_decompress(streamed) == payload
    with pytest.raises(RecordTooLargeError):
        comp.zstd_decompress(nosize, max_size=1000)
    for cut in (3, 10, len(nosize) - 1):
        with pytest.raises(CorruptRecordError):
            comp.zstd_decompress(nosize[:cut])


def test_gzip_members_and_garbage():
    payload = b"gzip" * 1000
    one = comp.gzip_compress(payload)
    assert comp.gzip_decompress(one + one) == payload * 2
    assert comp.gzip_decompress(kcodec.gzip_encode(payload)) == payload
    for level in (1, 4, 9):
        assert zlib.decompress(comp.gzip_compress(payload, level), 31) == payload
    with pytest.raises(CorruptRecordError):
        comp.gzip_decompress(b"\x1f\x8bnot gzip at all")
    with pytest.raises(UnsupportedCompressionError):
        comp.decompress(6, b"")
    assert Compression.from_name("ZSTD") is Compression.ZSTD


# ----------------------------------------------------------------------------- interop: kafka-python
@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_memory_records_builder_decodes(codec):
    recs = sample_records(50)
    b = MemoryRecordsBuilder(magic=2, compression_type=int(codec), batch_size=1 << 20)
    for k, v, h, t in recs:
        assert b.append(t, k, v, h) is not None
    b.close()
    batches = decode_produce_records(bytes(b.buffer()))
    assert len(batches) == 1 and batches[0].compression == codec
    assert as_tuples(batches[0]) == [(k, v, h, t) for k, v, h, t in recs]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_transactional_builder_decodes(codec):
    b = DefaultRecordBatchBuilder(
        magic=2, compression_type=int(codec), is_transactional=True, producer_id=4242,
        producer_epoch=7, base_sequence=100, batch_size=1 << 20,
    )
    for i in range(30):
        b.append(i, TS + i, b"k", b"v%d" % i, [("h", b"%d" % i)])
    (batch,) = decode_produce_records(bytes(b.build()))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 7, 100)
    assert batch.is_transactional and batch.last_sequence == 129
    assert [r.value for r in batch.records()] == [b"v%d" % i for i in range(30)]


def test_uncompressed_encoding_is_byte_identical_to_kafka_python():
    recs = sample_records(30)
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, (k, v, h, t) in enumerate(recs):
        b.append(i, t, k, v, h)
    assert encode_batch(recs, partition_leader_epoch=0) == bytes(b.build())


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3])
def test_kafka_python_legacy_builder_decodes(magic, codec):
    recs = [(None if i % 3 == 0 else b"k%d" % i, b"v" * i if i % 4 else None, None, TS + i) for i in range(12)]
    b = MemoryRecordsBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for k, v, _h, t in recs:
        b.append(t, k, v)
    b.close()
    batches = decode_produce_records(bytes(b.buffer()))
    assert all(isinstance(x, LegacyBatch) and x.magic == magic for x in batches)
    got = [(x.base_offset + r.offset_delta, r.key, r.value, r.timestamp) for x in batches for r in x.records()]
    assert got == [(i, k, v, t if magic else -1) for i, (k, v, _h, t) in enumerate(recs)]
    assert len(batches) == (1 if codec else len(recs))


def test_legacy_v1_log_append_time_and_offsets():
    recs = [(b"k", b"v%d" % i, None, TS + i) for i in range(5)]
    data = encode_legacy(recs, magic=1, base_offset=1000, compression=Compression.GZIP,
                         timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=TS + 777)
    (b,) = decode_batches(data)
    assert b.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [(b.base_offset + r.offset_delta, r.timestamp) for r in b] == [(1000 + i, TS + 777) for i in range(5)]
    kp = [(r.offset, r.timestamp) for r in MemoryRecords(data).next_batch()]
    assert kp == [(1000 + i, TS + 777) for i in range(5)]
    with pytest.raises(UnsupportedCompressionError):
        encode_legacy(recs, magic=1, compression=Compression.ZSTD)


def test_legacy_nested_compression_rejected():
    inner = encode_legacy([(b"k", b"v", None, TS)], magic=1, compression=Compression.GZIP)
    wrapped = comp.gzip_compress(inner)
    # a gzip wrapper whose payload is itself a gzip wrapper
    body = struct.pack(">bbq", 1, 1, TS) + b"\xff\xff\xff\xff" + struct.pack(">i", len(wrapped)) + wrapped
    bad = struct.pack(">qiI", 0, len(body) + 4, zlib.crc32(body)) + body
    assert decode_batches(inner)[0].records()[0].value == b"v"
    with pytest.raises(InvalidRecordError, match="nested"):
        decode_batches(bad)


def test_mixed_magic_blob():
    blob = encode_legacy(sample_records(3), magic=0, base_offset=0) + encode_batch(sample_records(3), base_offset=3, compression=Compression.ZSTD)
    kinds = [(type(b).__name__, b.base_offset, len(b)) for b in iter_batches(blob)]
    assert kinds == [("LegacyBatch", 0, 1), ("LegacyBatch", 1, 1), ("LegacyBatch", 2, 1), ("RecordBatch", 3, 3)]


# ----------------------------------------------------------------------------- interop: aiokafka (Cython)
@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_builder_and_reader(codec):
    from aiokafka.record.default_records import DefaultRecordBatchBuilder as ABuilder
    from aiokafka.record.memory_records import MemoryRecords as AMemoryRecords

    recs = sample_records(40)
    b = ABuilder(magic=2, compression_type=int(codec), is_transactional=0, producer_id=-1,
                 producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, (k, v, h, t) in enumerate(recs):
        b.append(i, timestamp=t, key=k, value=v, headers=h)
    (batch,) = decode_produce_records(bytes(b.build()))
    assert as_tuples(batch) == [(k, v, h, t) for k, v, h, t in recs]

    data = encode_batch(recs, base_offset=77, compression=codec)
    ab = AMemoryRecords(data).next_batch()
    got = [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in ab]
    assert got == [(77 + i, k, v, h, t) for i, (k, v, h, t) in enumerate(recs)]


# ----------------------------------------------------------------------------- broker helpers
def test_rebase_batch_keeps_crc_valid():
    stored = encode_batch(sample_records(), compression=Compression.SNAPPY)
    moved = rebase_batch(stored, 9_000_000, partition_leader_epoch=3)
    b = RecordBatch.from_buffer(moved)
    assert (b.base_offset, b.partition_leader_epoch, b.crc) == (9_000_000, 3, RecordBatch(stored).crc)
    assert as_tuples(b) == as_tuples(RecordBatch(stored))
    assert MemoryRecords(moved).next_batch().validate_crc()
    assert RecordBatch(rebase_batch(stored, 5)).base_offset == 5
    appended = rebase_batch(stored, 6, log_append_time=TS + 5000)
    b = RecordBatch.from_buffer(appended)
    assert b.timestamp_type is TimestampType.LOG_APPEND_TIME and b.base_offset == 6
    assert {r.timestamp for r in b.records()} == {TS + 5000}
    kb = MemoryRecords(appended).next_batch()
    assert kb.validate_crc() and {r.timestamp for r in kb} == {TS + 5000}
    with pytest.raises(CorruptRecordError):
        rebase_batch(encode_legacy(sample_records(1), magic=1), 5)


def test_produce_validation():
    ctrl = encode_control_batch(ControlType.COMMIT, producer_id=1, producer_epoch=0)
    with pytest.raises(InvalidRecordError, match="control"):
        decode_produce_records(ctrl)
    gaps = encode_batch(sample_records(3), offset_deltas=[0, 1, 3])
    with pytest.raises(InvalidRecordError, match="offset delta"):
        decode_produce_records(gaps)
    with pytest.raises(InvalidRecordError, match="no records"):
        decode_produce_records(encode_batch([]))
    assert decode_produce_records(b"") == []
    for err, code in ((CorruptRecordError, 2), (InvalidRecordError, 87), (UnsupportedCompressionError, 76), (RecordTooLargeError, 10)):
        assert err.error_code == code and issubclass(err, ValueError)
