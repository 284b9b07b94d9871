"""Produce straight from the request frame: the common request in a few C calls (issue 13).

A Produce request of a stock client with many partitions carries thousands of partition entries of
one or two records each; decoding them into dicts, handling them one by one and encoding a dict per
entry cost more than storing the records. For the common request this module takes the frame as it
came in, and:

1. `rmq._native.kafka_produce_map` parses the body and maps every entry that is one plain
   RecordBatch v2 to commitlog units, into one table of entries (rmq.store.unit.EncodedEntries);
2. the topics are checked once each (exists, writable, queue count), then `produce_select` checks
   every entry against them and picks those to put;
3. Python looks only at the entries that need it (no records; an idempotent producer's sequence
   check and state);
4. `DefaultMessageStore.put_entries` appends them all under one put lock (C: staging + pwrite,
   consumequeue units, arrival notices, index keys);
5. the flush and replica waits are those of _produce_local, once for the request;
6. `kafka_produce_response` writes the response body from the table.

Every stored byte, queue offset and response field is what handle_produce gives the same
request (tests/test_produce_frame.py compares the two). Anything less common is declined and goes
to the decoder and handle_produce: no C extension, a transactional or duplicate-partition request,
a slave, a cluster of Kafka nodes, kafka-log storage, ACLs, a topic with a topic config that
changes produce (max.message.bytes, min.insync.replicas), an entry the C mapping leaves to Python,
a read-only broker, the thread reput mode. On a compacted topic (cleanup.policy=compact) the keys
of each mapped batch are checked first: a batch with keyless records is answered as handle_produce
answers it (produce.record_errors: INVALID_RECORD, one record error per keyless record by its index
in the batch) and not put.
"""
from __future__ import annotations

import asyncio
import struct

from rmq import native
from rmq.broker.topic_config import PERM_WRITE, SCHEDULE_TOPIC
from rmq.common.message import pack_host
from rmq.store import PutMessageStatus
from rmq.store.unit import EncodedEntries, EncodedUnits

from ..cluster import cluster_of
from ..protocol import error_codes as ec
from ..protocol.header import encode_response_header, response_header_version
from ..records import RecordsError, iter_batches
from .produce import _new_out, put_status_to_error, record_errors, wait_replicas

#: One entry of the table (rmq/_native_produce.h, struct pentry), native byte order.
PENTRY = struct.Struct("=7q10i2hi")
(F_PID, F_UNITS_OFF, F_UNITS_LEN, F_REC_OFF, F_REC_LEN, F_BASE, F_LOG_START, F_PARTITION, F_KIND, F_SEQ, F_COUNT,
 F_MAX_SIZE, F_TAGS_OFF, F_KEYS_OFF, F_N_KEYS, F_UNIT_BASE, F_TOPIC, F_EPOCH, F_ERROR) = range(19)
KIND_MAPPED, KIND_PYTHON, KIND_EMPTY = 0, 1, 2
#: topic configs that change what a produce does (produce._check_entry): declined
PRODUCE_CONFIGS = ("max.message.bytes", "min.insync.replicas")
MIN_VERSION, MAX_VERSION = 3, 11
_SIZE = struct.Struct(">i")
_SCHEDULE_TOPIC = SCHEDULE_TOPIC.encode()  # its entries go to Python (delay levels)


class Declined(Exception):
    """This request goes to the decoder and handle_produce."""


def usable(bridge, conn) -> bool:
    """Whether the fast path may take this connection's Produce requests at all."""
    acl = getattr(bridge, "acl", None)
    return (native.ext is not None and not bridge.is_slave and bridge.klog is None
            and (acl is None or conn.extra.get("acl_white")) and bridge.store._inline
            and not getattr(bridge.config, "kafkaAclEnable", False)  # Kafka ACLs: authorizer.py checks WRITE
            and bool(bridge.config.brokerPermission & PERM_WRITE))


def _born_addr(conn) -> tuple[bytes, int]:
    born = conn.extra.get("born_addr")
    if born is None:
        addr, port, _ = pack_host(conn.peer)
        born = conn.extra["born_addr"] = (addr, port)
    return born


async def handle_frame(bridge, conn, header, frame, offset: int) -> list | None:
    """The response to this Produce request as buffers for writelines (None for acks=0), or
    Declined when handle_produce must take it."""
    version = header.api_version
    if not MIN_VERSION <= version <= MAX_VERSION or not usable(bridge, conn):
        raise Declined
    if bridge.cluster is not None and await cluster_of(bridge) is not None:
        raise Declined
    store = bridge.store
    max_size = store.config.maxMessageSize
    addr, port = _born_addr(conn)
    v6 = store.commitlog.store_v6
    parsed = native.ext.kafka_produce_map(frame, offset, version, addr, port, v6, max_size, max_size + (1 << 20),
                                          _SCHEDULE_TOPIC)
    if parsed is None:
        raise Declined
    txn_id, acks, _timeout, topics, table, units, tags, hashes, iunits, duplicates, unit_count = parsed
    if txn_id is not None or duplicates or acks not in (0, 1, -1):
        raise Declined
    names = []
    compacted = set()
    limits = bytearray(4 * len(topics))
    for t, (name, _first, _n) in enumerate(topics):
        names.append(name)
        tc = bridge.topic(name)
        limit = -1
        if tc is not None:
            attrs = tc.attributes
            if attrs and any(k in attrs for k in PRODUCE_CONFIGS):
                raise Declined
            if attrs and "compact" in attrs.get("cleanup.policy", ""):
                compacted.add(t)
            if tc.perm & PERM_WRITE:
                limit = tc.writeQueueNums
        struct.pack_into("=i", limits, 4 * t, limit)
    selection, attention, biggest = native.ext.produce_select(table, limits)
    answers: dict = {}
    if compacted and selection:
        selection = _check_keys(frame, names, table, selection, compacted, answers)
    idempotent = []
    for i in attention:
        if i in answers:  # refused for its keys
            continue
        row = PENTRY.unpack_from(table, i * PENTRY.size)
        if row[F_KIND] == KIND_PYTHON:
            raise Declined
        if row[F_KIND] == KIND_EMPTY:
            answers[i] = _answer(row[F_PARTITION], ec.CORRUPT_MESSAGE, "no records")
        else:
            idempotent.append((i, row))
    if idempotent:
        selection = _check_producers(bridge, store, names, table, selection, idempotent, answers)
    if selection:
        await _put(bridge, store, names, table, selection, biggest,
                   EncodedEntries(names, table, units, tags, hashes, iunits, unit_count, v6), acks, answers)
    for i, row in idempotent:
        if i not in answers:
            base = struct.unpack_from("=q", table, i * PENTRY.size + 8 * F_BASE)[0]
            bridge.producers.record(row[F_PID], row[F_EPOCH], names[row[F_TOPIC]], row[F_PARTITION], row[F_SEQ],
                                    row[F_COUNT], base)
    if idempotent:  # the recorded batches journaled with one write before the answer
        bridge.producers.sync()
    if acks == 0:
        return None
    body = native.ext.kafka_produce_response(version, topics, table, answers or None, 0)
    head = encode_response_header(header.correlation_id, response_header_version(header.api_key, version))
    return [_SIZE.pack(len(head) + len(body)) + head, body]


def _answer(partition: int, error: int, message: str | None = None, base: int = -1, log_start: int = -1) -> dict:
    """The PartitionProduceResponse handle_produce would give (produce._new_out, then filled)."""
    out = _new_out(partition)
    out.update(error_code=error, error_message=message, base_offset=base, log_start_offset=log_start)
    return out


def _check_keys(frame, names, table, selection: bytes, compacted: set, answers: dict) -> bytes:
    """Kafka's key check on a compacted topic (LogValidator), for the selected entries of such
    topics: an entry whose batch has records without a key is answered with their record errors
    and leaves the selection (nothing of it is stored), as handle_produce does."""
    ids = memoryview(selection).cast("i")
    dropped = set()
    view = memoryview(frame)
    for i in ids:
        row = PENTRY.unpack_from(table, i * PENTRY.size)
        if row[F_TOPIC] not in compacted:
            continue
        name, partition = names[row[F_TOPIC]], row[F_PARTITION]
        try:
            (batch,) = iter_batches(view[row[F_REC_OFF]:row[F_REC_OFF] + row[F_REC_LEN]])
            keyless = [n for n, r in enumerate(batch.records()) if r.key is None]
        except (RecordsError, ValueError):
            raise Declined from None  # C mapped it, so it parses; if not, the reference path reports it
        if keyless:
            why = f"Compacted topic cannot accept message without key in topic partition {name}-{partition}."
            answers[i] = record_errors(_answer(partition, ec.NONE), [(n, why) for n in keyless])
            dropped.add(i)
    if not dropped:
        return selection
    return struct.pack(f"={len(ids) - len(dropped)}i", *(i for i in ids if i not in dropped)) if \
        len(ids) > len(dropped) else b""


def _check_producers(bridge, store, names, table, selection: bytes, idempotent: list, answers: dict) -> bytes:
    """The producer-state checks of an idempotent producer's entries (ProducerStateManager.check,
    before their put): an entry with an error, or a retried batch already stored (answered with its
    first offset), leaves the selection."""
    check = bridge.producers.check
    dropped = set()
    for i, row in idempotent:
        name, partition = names[row[F_TOPIC]], row[F_PARTITION]
        err, dup_base = check(row[F_PID], row[F_EPOCH], name, partition, row[F_SEQ], row[F_COUNT])
        if err != ec.NONE:
            answers[i] = _answer(partition, err)
        elif dup_base is not None:
            answers[i] = _answer(partition, ec.NONE, base=dup_base,
                                 log_start=store.get_min_offset_in_queue(name, partition))
        else:
            continue
        dropped.add(i)
    if not dropped:
        return selection
    ids = memoryview(selection).cast("i")
    return struct.pack(f"={len(ids) - len(dropped)}i", *(i for i in ids if i not in dropped)) if \
        len(ids) > len(dropped) else b""


async def _put(bridge, store, names, table, selection: bytes, biggest: int, entries: EncodedEntries, acks: int,
               answers: dict) -> None:
    """The selected entries put (store.put_entries; entry by entry through put_encoded_many when
    the commitlog file must roll over), then the flush and replica waits of _put_run."""
    ids = memoryview(selection).cast("i")
    res = store.put_entries(entries, selection, biggest)
    if res is None:
        end_offset = _put_one_by_one(bridge, names, table, ids, entries, answers)
    elif res.status is not PutMessageStatus.PUT_OK:
        err = put_status_to_error(res.status, res.remark)
        for i in ids:
            answers[i] = _answer(_field(table, i, F_PARTITION), err, res.remark)
        return
    else:
        end_offset = res.end_offset
    if end_offset < 0:
        return
    failure = None
    if acks != 0 and store.needs_flush_wait():
        if not await asyncio.get_running_loop().run_in_executor(None, store.wait_flushed, end_offset):
            failure = ec.REQUEST_TIMED_OUT, "not flushed within syncFlushTimeout"
    if failure is None and acks == -1:
        err, why = await wait_replicas(bridge, end_offset)
        if err != ec.NONE:
            failure = err, why
    if failure is not None:
        for i in ids:
            if i not in answers:
                answers[i] = _answer(_field(table, i, F_PARTITION), *failure)


def _field(table, i: int, f: int) -> int:
    return PENTRY.unpack_from(table, i * PENTRY.size)[f]


def _put_one_by_one(bridge, names, table, ids, entries: EncodedEntries, answers: dict) -> int:
    """put_entries' fallback when the commitlog file rolls over: each entry as EncodedUnits through
    put_encoded_many (which rolls the file), results written back to the table. Returns the end
    offset reached (-1 when nothing was put)."""
    batches = []
    for i in ids:
        row = PENTRY.unpack_from(table, i * PENTRY.size)
        count, toff, koff, nk, ub = row[F_COUNT], row[F_TAGS_OFF], row[F_KEYS_OFF], row[F_N_KEYS], row[F_UNIT_BASE]
        iunits = None
        if nk:  # the unit numbers of its keys, counted from its own first unit
            iunits = struct.pack(f"={nk}i", *(u - ub for u in struct.unpack_from(f"={nk}i", entries.iunits, 4 * koff)))
        batches.append(EncodedUnits(
            names[row[F_TOPIC]], row[F_PARTITION], entries.units[row[F_UNITS_OFF]:row[F_UNITS_OFF] + row[F_UNITS_LEN]],
            count, row[F_MAX_SIZE], entries.store_v6,
            entries.tags[8 * toff:8 * (toff + count)] if toff >= 0 else None,
            entries.hashes[4 * koff:4 * (koff + nk)] if nk else None, iunits))
    end = -1
    store = bridge.store
    for i, b, res in zip(ids, batches, bridge.controller.put_encoded_many(batches, wait_flush=False)):
        if res.status is not PutMessageStatus.PUT_OK:
            answers[i] = _answer(b.queue_id, put_status_to_error(res.status, res.remark), res.remark)
            continue
        struct.pack_into("=qq", table, i * PENTRY.size + 8 * F_BASE, res.queue_offset,
                         store.get_min_offset_in_queue(b.topic, b.queue_id))
        end = max(end, res.end_offset)
    return end


__all__ = ["Declined", "PENTRY", "handle_frame", "usable"]
