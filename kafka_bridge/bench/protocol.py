"""Micro-benchmark of the Kafka codec: `python -m kafka_bridge.bench.protocol` (SPEC §11).

Prints decode/encode operations per second for a Produce v9 request and a Fetch v12
response of 100 partitions, side by side with kio and kafka-python when they are installed
(neither is a dependency of this package). Figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import io
import time

from kafka_bridge.protocol import codec
from kafka_bridge.protocol.messages import FETCH, PRODUCE

PARTITIONS = 100
RECORD_BYTES = 1024


def produce_v9_body(partitions: int = PARTITIONS) -> dict:
    records = bytes(range(256)) * (RECORD_BYTES // 256)
    return {
        "transactional_id": None, "acks": -1, "timeout_ms": 30000,
        "topic_data": [{"name": "bench-topic", "partition_data": [
            {"index": i, "records": records} for i in range(partitions)]}],
    }


def fetch_v12_body(partitions: int = PARTITIONS) -> dict:
    records = bytes(range(256)) * (RECORD_BYTES // 256)
    return {
        "throttle_time_ms": 0, "error_code": 0, "session_id": 12345,
        "responses": [{"topic": "bench-topic", "partitions": [
            {"partition_index": i, "error_code": 0, "high_watermark": 1_000_000 + i,
             "last_stable_offset": 1_000_000 + i, "log_start_offset": 0,
             "aborted_transactions": None, "preferred_read_replica": -1, "records": records}
            for i in range(partitions)]}],
    }


def rate(fn, min_time: float) -> float:
    """Calls of fn per second, measured over at least min_time seconds."""
    fn()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_time:
            return n / dt
        n = max(n * 2, int(n * min_time / max(dt, 1e-9) * 1.1))


def _ours(api_key: int, version: int, request: bool, body: dict):
    data = codec.encode_body(api_key, version, body, request=request)
    decode = lambda: codec.decode_body(api_key, version, data, request=request)  # noqa: E731
    encode = lambda: codec.encode_body(api_key, version, body, request=request)  # noqa: E731
    return data, decode, encode


def _kio(data: bytes, module: str, cls_name: str):
    try:
        import importlib

        from kio.serial import entity_reader, entity_writer
        cls = getattr(importlib.import_module(module), cls_name)
    except Exception:  # noqa: BLE001 - kio is optional
        return None
    reader = entity_reader(cls)
    writer = entity_writer(cls)
    obj, _ = reader(data, 0)

    def encode():
        buf = io.BytesIO()
        writer(buf, obj)
        return buf.getvalue()

    if encode() != data:
        return None
    return (lambda: reader(data, 0)), encode


def _kafka_python(data: bytes, module: str, cls_name: str, version: int):
    try:
        import importlib
        cls = getattr(importlib.import_module(module), cls_name)
    except Exception:  # noqa: BLE001 - kafka-python is optional here
        return None
    obj = cls.decode(data, version=version)
    obj._header = None

    def encode():
        return obj.encode(version=version)

    if bytes(encode()) != data:
        return None
    return (lambda: cls.decode(data, version=version)), encode


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-time", type=float, default=0.5,
                        help="seconds spent on each measurement (default 0.5)")
    args = parser.parse_args(argv)
    codec.precompile()

    cases = [
        (f"Produce v9 request, {PARTITIONS} partitions", PRODUCE, 9, True, produce_v9_body(),
         ("kio.schema.produce.v9.request", "ProduceRequest"),
         ("kafka.protocol.producer", "ProduceRequest")),
        (f"Fetch v12 response, {PARTITIONS} partitions", FETCH, 12, False, fetch_v12_body(),
         ("kio.schema.fetch.v12.response", "FetchResponse"),
         ("kafka.protocol.consumer", "FetchResponse")),
    ]
    print(f"{'message':<36} {'codec':<16} {'decode ops/s':>14} {'encode ops/s':>14} {'bytes':>8}")
    for title, key, version, request, body, kio_ref, kp_ref in cases:
        data, dec, enc = _ours(key, version, request, body)
        rows = [("kafka_bridge", dec, enc)]
        kio_fns = _kio(data, *kio_ref)
        rows.append(("kio", *kio_fns) if kio_fns else ("kio", None, None))
        kp_fns = _kafka_python(data, *kp_ref, version)
        rows.append(("kafka-python", *kp_fns) if kp_fns else ("kafka-python", None, None))
        for name, d, e in rows:
            if d is None:
                print(f"{title:<36} {name:<16} {'n/a':>14} {'n/a':>14} {len(data):>8}")
                continue
            print(f"{title:<36} {name:<16} {rate(d, args.min_time):>14,.0f} "
                  f"{rate(e, args.min_time):>14,.0f} {len(data):>8}")


if __name__ == "__main__":
    main()
