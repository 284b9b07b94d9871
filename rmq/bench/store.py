"""`rmq bench store`: put throughput and latency of the store, next to raw sequential-write bandwidth;
`rmq bench recovery`: how long the store takes to open after a machine crash.

Both sides of `bench store` write the same number of bytes to the same file system in the same run
and end with one fdatasync, so `ratio_to_raw` compares like with like. The raw write runs three
times right after the store's run; its median is the reference.
"""
from __future__ import annotations

import logging
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import threading
import time

from rmq.common.message import Message, encode_batch_element, properties_to_bytes
from rmq.store.config import MessageStoreConfig
from rmq.store.message_store import DefaultMessageStore
from rmq.store.unit import MessageBatch


def _percentile(sorted_vals: list[int], q: float) -> float:
    if not sorted_vals:
        return 0.0
    idx = min(len(sorted_vals) - 1, max(0, int(round(q * (len(sorted_vals) - 1)))))
    return float(sorted_vals[idx])


def raw_write_mb_per_s(directory: str, total_bytes: int, chunk: int = 1 << 20) -> float:
    """Sequential os.write of `total_bytes` in 1 MiB chunks plus one fdatasync."""
    path = os.path.join(directory, "raw-bench.bin")
    buf = os.urandom(chunk)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        left = total_bytes
        while left > 0:
            n = os.write(fd, buf if left >= chunk else buf[:left])
            left -= n
        os.fdatasync(fd)
        dt = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return total_bytes / dt / 1e6


def _batch_body(body: bytes, keys: list[str] | None, n: int) -> bytes:
    """A SEND_BATCH_MESSAGE body of n elements (MessageDecoder.encodeMessages), as a client sends it."""
    return b"".join(encode_batch_element(0, body, properties_to_bytes({"KEYS": keys[j]}) if keys else b"")
                    for j in range(n))


def run_store_bench(*, size: int = 100, count: int = 200_000, flush: str = "async", writers: int = 1,
                    batch: int = 1, data: str | None = None, keys: bool = False, queues: int = 4,
                    reput: str = "inline", progress=None, kafka_encoder=None, message_lists: bool = False) -> dict:
    """Put `count` messages of `size` bytes from `writers` threads and time it.

    batch 1: put_message per message. batch > 1: put_batch with SEND_BATCH_MESSAGE bodies (the
    store's putMessages(MessageExtBatch)); the body bytes are what a client sends, built before
    the clock starts unless every message carries its own KEYS. message_lists: put_messages with
    lists of Message objects instead. `kafka_encoder(store, size, body, topic)`
    (kafka_bridge.bench.handlers.store_batch_encoder): Kafka RecordBatches of `batch` records
    through the produce fast path (C mapping + put_encoded)."""
    own_dir = data is None
    root = tempfile.mkdtemp(prefix="rmq-bench-") if own_dir else data
    os.makedirs(root, exist_ok=True)
    store_dir = os.path.join(root, "store")
    if os.path.exists(store_dir):
        shutil.rmtree(store_dir)
    cfg = MessageStoreConfig(storePathRootDir=store_dir,
                             flushDiskType="SYNC_FLUSH" if flush == "sync" else "ASYNC_FLUSH",
                             reputMode=reput)
    store = DefaultMessageStore(cfg).load().start()
    body = os.urandom(size)
    per_writer = count // writers
    total = per_writer * writers
    lat_lists: list[list[int]] = [[] for _ in range(writers)]
    errors: list[str] = []
    done = [0]
    lock = threading.Lock()
    if kafka_encoder is not None:
        path = "kafka-batches"
    elif batch == 1:
        path = "put_message"
    else:
        path = "put_messages" if message_lists else "put_batch"
    encode = kafka_encoder(store, size, body, "BenchTopic") if kafka_encoder is not None else None
    bodies: dict[int, bytes] = {}

    def make_put(w: int):
        """put(qid, first, n) -> result, for this writer and path; n messages from number `first`."""
        if path == "kafka-batches":
            return lambda qid, first, n: store.put_encoded(encode(qid, n))
        if path == "put_batch":
            def put_batch(qid, first, n):
                if keys:
                    b = _batch_body(body, [f"k{w}-{first + j}" for j in range(n)], n)
                else:
                    b = bodies.get(n) or bodies.setdefault(n, _batch_body(body, None, n))
                return store.put_batch(MessageBatch("BenchTopic", qid, b))
            return put_batch

        def put_list(qid, first, n):
            msgs = [Message("BenchTopic", body, queue_id=qid,
                            properties={"KEYS": f"k{w}-{first + j}"} if keys else {}) for j in range(n)]
            return store.put_messages(msgs)
        return put_list

    def single_writer(w: int) -> None:
        """batch 1: one put_message per message, the loop kept thin."""
        lat = lat_lists[w]
        put = store.put_message
        perf = time.perf_counter_ns
        append = lat.append
        for i in range(per_writer):
            m = Message("BenchTopic", body, queue_id=(w + i) % queues,
                        properties={"KEYS": f"k{w}-{i}"} if keys else {})
            t0 = perf()
            r = put(m)
            append(perf() - t0)
            if not r.ok:
                errors.append(f"{r.status.value}: {r.remark}")
                return
            if progress is not None and i % 8192 == 8191:
                with lock:
                    done[0] += 8192
                progress(min(done[0], total), total)

    def writer(w: int) -> None:
        if path == "put_message":
            return single_writer(w)
        lat = lat_lists[w]
        put = make_put(w)
        perf = time.perf_counter_ns
        sent = 0
        i = 0
        while sent < per_writer:
            n = min(batch, per_writer - sent)
            t0 = perf()
            r = put((w + i) % queues, sent, n)
            lat.append(perf() - t0)
            if not r.ok:
                errors.append(f"{r.status.value}: {r.remark}")
                return
            sent += n
            i += 1
            if progress is not None and i % 256 == 0:
                with lock:
                    done[0] += 256 * batch
                progress(min(done[0], total), total)

    try:
        t0 = time.perf_counter()
        if writers == 1:
            writer(0)
        else:
            threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        store.flush_commitlog(0)
        elapsed = time.perf_counter() - t0
        if progress is not None:
            progress(total, total)
        info = store.runtime_info()
        unit_bytes = info["commitLogMaxOffset"] - info["commitLogMinOffset"]
    finally:
        store.shutdown()
    raw_runs = [raw_write_mb_per_s(root, max(unit_bytes, 1 << 20)) for _ in range(3)]
    raw = statistics.median(raw_runs)
    if own_dir:
        shutil.rmtree(root, ignore_errors=True)
    else:
        shutil.rmtree(store_dir, ignore_errors=True)
    lats = sorted(x for lst in lat_lists for x in lst)
    mb_per_s = unit_bytes / elapsed / 1e6
    return {
        "size": size, "count": total, "flush": flush, "writers": writers, "batch": batch, "keys": keys,
        "reput": reput, "path": path,
        "elapsed_s": round(elapsed, 3),
        "msgs_per_s": round(total / elapsed),
        "mb_per_s": round(mb_per_s, 1),
        "p50_us": round(_percentile(lats, 0.50) / 1000, 1),
        "p99_us": round(_percentile(lats, 0.99) / 1000, 1),
        "mean_us": round(statistics.fmean(lats) / 1000, 1) if lats else 0.0,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "raw_mb_per_s": round(raw, 1),  # median of 3 runs right after the store's
        "raw_runs_mb_per_s": [round(r, 1) for r in raw_runs],
        "ratio_to_raw": round(mb_per_s / raw, 3) if raw else 0.0,
        "group_commit_flushes": info["groupCommitFlushes"],
        "commitlog_bytes": unit_bytes,
        "errors": errors[:3],
    }


# ---------------------------------------------------------------------------------- recovery
GIB = 1 << 30
OTHER_BOOT_ID = "00000000-0000-0000-0000-000000000000"  # what a marker left before a reboot holds


def _fill(store: DefaultMessageStore, upto: int, body: bytes, keys: bool, first: int, queues: int = 4,
          batch: int = 64, progress=None) -> int:
    """put_batch SEND_BATCH_MESSAGE bodies of `batch` messages (each with its own KEYS when `keys`)
    until the commitlog reaches `upto` bytes; returns the number of the next message."""
    plain = _batch_body(body, None, batch)
    i = first
    while store.commitlog.max_offset < upto:
        b = _batch_body(body, [f"key-{i + j}" for j in range(batch)], batch) if keys else plain
        r = store.put_batch(MessageBatch("BenchRecovery", (i // batch) % queues, b), wait_flush=False)
        if not r.ok:
            raise RuntimeError(f"put_batch failed while building the store: {r.status.value}: {r.remark}")
        i += batch
        if progress is not None and (i // batch) % 512 == 0:
            progress(store.commitlog.max_offset, upto)
    return i


def _abandon(store: DefaultMessageStore) -> None:
    """The process dies: its mappings go, nothing is flushed, the checkpoint keeps what its last
    flush wrote and the abort marker stays."""
    store.commitlog.close()
    for cq in store._all_cqs():
        cq.close()
    store.index_service.close()
    if store.checkpoint is not None:
        store.checkpoint.mm.close()
    if store._dir_lock is not None:
        store._dir_lock.release()  # as the kernel does for a dead process


def drop_page_cache() -> bool:
    """sync, then `echo 3 > /proc/sys/vm/drop_caches` (root only): False when not allowed."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def build_crashed_store(root: str, *, total_bytes: int, size: int, keys: bool, file_size: int,
                        after_checkpoint: int, progress=None) -> dict:
    """A store at `root` as a machine crash leaves it: `total_bytes` of commitlog in files of
    `file_size`; all but the last `after_checkpoint` bytes dispatched, flushed and recorded in the
    checkpoint (the store's last flush of its consumequeues, index and checkpoint, here a clean
    shutdown); the rest appended and flushed to the commitlog but never dispatched (consumequeue and
    index pages the crash lost); then the abort marker of another boot."""
    body = os.urandom(size)
    cfg = dict(storePathRootDir=root, mappedFileSizeCommitLog=file_size)
    first = DefaultMessageStore(MessageStoreConfig(**cfg)).load().start()
    try:
        n = _fill(first, max(total_bytes - after_checkpoint, 1), body, keys, 0, progress=progress)
    finally:
        first.shutdown()
    checkpointed = n
    second = DefaultMessageStore(MessageStoreConfig(reputMode="thread", **cfg)).load()  # no reput thread
    n = _fill(second, total_bytes, body, keys, n, progress=progress)
    second.commitlog.flush(0)
    _abandon(second)
    with open(os.path.join(root, "abort"), "w", encoding="ascii") as f:
        f.write(OTHER_BOOT_ID)
    return {"messages": n, "after_checkpoint_messages": n - checkpointed}


def _snapshot(root: str, dest: str) -> None:
    """Copy what recovery rewrites (consumequeue/, index/, checkpoint, abort), sparse files kept sparse."""
    os.makedirs(dest)
    for name in ("consumequeue", "index", "checkpoint", "abort"):
        src = os.path.join(root, name)
        if os.path.exists(src):
            subprocess.run(["cp", "-a", "--sparse=always", src, dest], check=True)


def _restore(snap: str, root: str) -> None:
    for name in ("consumequeue", "index"):
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    for name in os.listdir(snap):
        subprocess.run(["cp", "-a", "--sparse=always", os.path.join(snap, name), root], check=True)


def _recover(root: str, file_size: int) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    s = DefaultMessageStore(MessageStoreConfig(storePathRootDir=root, mappedFileSizeCommitLog=file_size))
    s.load()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    try:
        out = {"mode": s.recovery_mode, "scan_start": s.recovery_scan_start, "walked": s._rescanned,
               "redispatched": s._redispatched, "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3),
               "commitlog_bytes": s.commitlog.max_offset - s.commitlog.min_offset,
               "commitlog_files": len(s.commitlog.queue.files), "index_files": len(s.index_service.files)}
    finally:
        s.shutdown()
    return out


def run_recovery_bench(*, gb: float = 1.0, size: int = 100, keys=(False, True), file_mb: int = 1024,
                       after_checkpoint_mb: float = 8.0, drop_caches: bool = False, data: str | None = None,
                       progress=None) -> list[dict]:
    """For each of `keys` (False: no message has keys, True: each has its own KEYS), build a store of
    `gb` GiB as a machine crash leaves it (build_crashed_store), reopen it and time load(): the
    recovery mode, where the walk started, units walked in C, units re-dispatched, seconds and
    seconds per GiB of commitlog. With drop_caches (root) the same crash state is recovered again
    after dropping the page cache. The stores are deleted afterwards."""
    total = int(gb * GIB)
    after = int(after_checkpoint_mb * (1 << 20))
    file_size = file_mb << 20
    if total <= 0 or after < 0 or after >= total:
        raise ValueError("expected 0 <= after-checkpoint bytes < store bytes")
    if data is not None:
        os.makedirs(data, exist_ok=True)
    base = tempfile.mkdtemp(prefix="rmq-bench-recovery-", dir=data)
    need = total + total // 4 + (600 << 20)  # commitlog + consumequeues + an index file
    free = shutil.disk_usage(base).free
    if free < need:
        shutil.rmtree(base, ignore_errors=True)
        raise ValueError(f"{base}: {free >> 20} MiB free, the store needs about {need >> 20} MiB")
    results = []
    log = logging.getLogger("rmq.store")
    level = log.level
    log.setLevel(logging.ERROR)  # the recovery's own WARNING line says what the table prints
    try:
        for with_keys in keys:
            root = os.path.join(base, "keys" if with_keys else "no-keys")
            label = "keys" if with_keys else "no keys"
            built = build_crashed_store(root, total_bytes=total, size=size, keys=with_keys, file_size=file_size,
                                        after_checkpoint=after,
                                        progress=(lambda d, t, lb=label: progress(lb, d, t)) if progress else None)
            runs = [("warm", None)]
            if drop_caches:
                snap = os.path.join(base, "snapshot")
                _snapshot(root, snap)
                runs.append(("cold", snap))
            for cache, snap in runs:
                if snap is not None:
                    _restore(snap, root)
                    if not drop_page_cache():
                        raise PermissionError("--drop-caches: cannot write /proc/sys/vm/drop_caches (run as root)")
                rec = _recover(root, file_size)
                gib = rec["commitlog_bytes"] / GIB
                rec.update(keys=with_keys, cache=cache, size=size, messages=built["messages"],
                           after_checkpoint_messages=built["after_checkpoint_messages"],
                           s_per_gb=round(rec["seconds"] / gib, 3) if gib else 0.0,
                           cpu_s_per_gb=round(rec["cpu_seconds"] / gib, 3) if gib else 0.0)
                results.append(rec)
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(os.path.join(base, "snapshot"), ignore_errors=True)
    finally:
        log.setLevel(level)
        shutil.rmtree(base, ignore_errors=True)
    return results
