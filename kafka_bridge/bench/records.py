"""Micro-benchmark of the RecordBatch codec (SPEC §11) against kafka-python's builder and
reader: ``python -m kafka_bridge.bench.records [--records N] [--size B]``."""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import types

from kafka_bridge.records import Compression, RecordBatch, decode_produce_records, encode_batch, rebase_batch


def _payloads(n: int, size: int) -> list[tuple]:
    """Semi-compressible values (words plus a random tail), short keys, no headers."""
    rnd = random.Random(42)
    words = [b"order", b"user", b"price", b"qty", b"sku", b"alpha", b"beta", b"2024", b"eu", b"ok"]
    ts = 1_700_000_000_000
    out = []
    for i in range(n):
        text = b" ".join(rnd.choice(words) for _ in range(size // 4))
        value = (text[: size - 8] + os.urandom(4).hex().encode())[:size].ljust(size, b"x")
        out.append((b"key-%d" % (i % 100), value, None, ts + i // 10))
    return out


def _rate(fn, n_records: int, min_time: float = 0.3) -> float:
    fn()
    loops = 0
    start = time.perf_counter()
    while True:
        fn()
        loops += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return loops * n_records / elapsed


def _kafka_python():
    """Import kafka-python's record code; plug a cramjam-backed ``snappy`` module in
    when python-snappy is absent (kafka-python keeps its own xerial framing)."""
    try:
        import kafka.codec as kc
        from kafka.record.default_records import DefaultRecordBatchBuilder
        from kafka.record.memory_records import MemoryRecords
    except ImportError:
        return None
    if not kc.has_snappy():
        import cramjam

        kc.snappy = types.SimpleNamespace(
            compress=lambda b: bytes(cramjam.snappy.compress_raw(b)),
            decompress=lambda b: bytes(cramjam.snappy.decompress_raw(b)),
        )
    return DefaultRecordBatchBuilder, MemoryRecords


def _aiokafka():
    """aiokafka's Cython record builder/reader, as a compiled-code reference point."""
    try:
        from aiokafka.record.default_records import DefaultRecordBatchBuilder
        from aiokafka.record.memory_records import MemoryRecords
    except ImportError:
        return None
    return DefaultRecordBatchBuilder, MemoryRecords


def _peer_rates(lib, codec, recs, data, min_time):
    Builder, MemoryRecords = lib

    def enc():
        b = Builder(magic=2, compression_type=int(codec), is_transactional=False,
                    producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
        for i, (k, v, h, ts) in enumerate(recs):
            b.append(i, ts, k, v, h or [])
        b.build()

    def dec():
        mr = MemoryRecords(data)
        while True:
            batch = mr.next_batch()
            if batch is None:
                break
            for _ in batch:
                pass

    return _rate(enc, len(recs), min_time), _rate(dec, len(recs), min_time)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=1000, help="records per batch")
    ap.add_argument("--size", type=int, default=100, help="value bytes per record")
    ap.add_argument("--min-time", type=float, default=0.3, help="seconds per measurement")
    args = ap.parse_args(argv)

    recs = _payloads(args.records, args.size)
    with_headers = [(k, v, [("trace-id", b"abc123"), ("TAGS", b"TagA")], ts) for k, v, _h, ts in recs]
    kp, aio = _kafka_python(), _aiokafka()
    print(f"{args.records} records x {args.size} B per batch, records/s (higher is better)")
    print("ours = kafka_bridge.records (pure Python); kp = kafka-python " + ("" if kp else "[not installed] ")
          + "(pure Python); aio = aiokafka " + ("" if aio else "[not installed] ") + "(Cython), for reference")
    cols = f"{'codec':10} {'bytes':>7} {'ours enc':>11} {'ours dec':>11}"
    if kp:
        cols += f" {'kp enc':>11} {'kp dec':>11} {'enc x':>6} {'dec x':>6}"
    if aio:
        cols += f" {'aio enc':>11} {'aio dec':>11}"
    print(cols)
    rows = [(c.name, c, recs) for c in Compression] + [("NONE+2hdr", Compression.NONE, with_headers)]
    for label, codec, rs in rows:
        data = encode_batch(rs, compression=codec)
        e = _rate(lambda: encode_batch(rs, compression=codec), len(rs), args.min_time)
        d = _rate(lambda: RecordBatch(data).records(), len(rs), args.min_time)
        line = f"{label:10} {len(data):7d} {e:11,.0f} {d:11,.0f}"
        if kp:
            ke, kd = _peer_rates(kp, codec, rs, data, args.min_time)
            line += f" {ke:11,.0f} {kd:11,.0f} {e / ke:6.1f} {d / kd:6.1f}"
        if aio:
            ae, ad = _peer_rates(aio, codec, rs, data, args.min_time)
            line += f" {ae:11,.0f} {ad:11,.0f}"
        print(line, flush=True)

    stored = encode_batch(recs)
    r = _rate(lambda: rebase_batch(stored, 123456, 7), len(recs), args.min_time)
    print(f"rebase_batch (re-emit a stored {len(stored)}-byte batch): {r:,.0f} records/s")
    r = _rate(lambda: decode_produce_records(stored), len(recs), args.min_time)
    print(f"decode_produce_records (uncompressed, validated): {r:,.0f} records/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
