"""Produce: record batches -> ordinary commitlog units, one per record (SPEC §11).

Each partition's batches are decoded and checked (CRC, lengths, magic), mapped to Messages
(kafka_bridge.mapping) and put as one contiguous batch into the queue = partition. With the C
extension, a batch whose records map plainly is encoded to commitlog units in one go instead
(mapping.batch_to_units -> store.put_encoded): the same stored bytes. Idempotent
producers' retried batches are answered from the producer state without a second write.

In cluster mode (kafka_bridge.cluster) a partition owned by another broker is answered with
NOT_LEADER_OR_FOLLOWER, and an owned partition p is written to local queue p - base. A slave
(a follower) answers NOT_LEADER_OR_FOLLOWER for every partition, also while it leads its
master's partitions for reads because the master is down (RocketMQ 4.x does not promote a slave).

The Kafka listener hands the common request to produce_frame.handle_frame first, which takes it
straight from the frame in C; what that declines comes here. This module is the reference both are
tested against (tests/test_produce_frame.py).
"""
from __future__ import annotations

import asyncio
import logging

from rmq.store import PutMessageStatus

from ..cluster import cluster_of, resolve_partition
from ..mapping import MappingError, batch_to_units, entry_mapper, record_to_message
from ..protocol import error_codes as ec
from ..records import RecordsError, check_produce_batch, iter_batches

log = logging.getLogger("kafka_bridge.produce")


def put_status_to_error(status: PutMessageStatus, remark: str) -> int:
    if status is PutMessageStatus.PUT_OK:
        return ec.NONE
    if status is PutMessageStatus.FLUSH_DISK_TIMEOUT:
        return ec.REQUEST_TIMED_OUT
    if status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
        return ec.KAFKA_STORAGE_ERROR
    if status is PutMessageStatus.MESSAGE_ILLEGAL and "maxMessageSize" in remark:
        return ec.MESSAGE_TOO_LARGE
    if status is PutMessageStatus.MESSAGE_ILLEGAL and "topic" in remark and "not exist" in remark:
        return ec.UNKNOWN_TOPIC_OR_PARTITION
    if status in (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED):
        return ec.INVALID_RECORD
    return ec.UNKNOWN_SERVER_ERROR


async def wait_replicas(bridge, end_offset: int) -> tuple[int, str | None]:
    """acks=all on a SYNC_MASTER: wait until the slave (the follower replica) has the commitlog up to
    `end_offset`, as a RocketMQ send waits (CommitLog.handleHA). The records are stored either way;
    no slave connected -> NOT_ENOUGH_REPLICAS_AFTER_APPEND, no acknowledgement within syncFlushTimeout
    -> REQUEST_TIMED_OUT (what a Kafka leader answers when the ISR does not catch up in time)."""
    ha = getattr(bridge.controller, "ha_service", None)
    if ha is None or not ha.sync_master:
        return ec.NONE, None
    status = await ha.wait_for_slave(end_offset)
    if status is PutMessageStatus.PUT_OK:
        return ec.NONE, None
    if status is PutMessageStatus.SLAVE_NOT_AVAILABLE:
        return ec.NOT_ENOUGH_REPLICAS_AFTER_APPEND, "SLAVE_NOT_AVAILABLE: no slave of this SYNC_MASTER is connected"
    return ec.REQUEST_TIMED_OUT, "FLUSH_SLAVE_TIMEOUT: the slave did not acknowledge within syncFlushTimeout"


def _refuse_all(body: dict, err: int, message: str | None = None) -> dict:
    """A Produce response with the same error for every partition of the request."""
    responses = [{"name": td["name"], "partition_responses": [
        {"index": pd["index"], "error_code": err, "base_offset": -1, "error_message": message}
        for pd in td["partition_data"]]} for td in body["topic_data"]]
    return {"responses": responses, "throttle_time_ms": 0}


def slave_refusal(bridge, cl) -> str:
    """Why a slave refuses a produce (the error_message next to NOT_LEADER_OR_FOLLOWER)."""
    b = bridge.config
    group = cl.group_of.get(b.brokerName) if cl is not None else None
    if group is not None and group.master is None:
        return (f"the master of {b.brokerName} is down; its slave (brokerId {b.brokerId}) serves reads only: "
                f"RocketMQ 4.x does not promote a slave")
    return f"this broker is a slave of {b.brokerName} (brokerId {b.brokerId}): produce to its master"


def _new_out(partition: int) -> dict:
    return {"index": partition, "error_code": ec.NONE, "base_offset": -1, "log_append_time_ms": -1,
            "log_start_offset": -1, "record_errors": [], "error_message": None}


def record_errors(out: dict, bad: list[tuple[int, str]]) -> dict:
    """A batch refused for some of its records, as Kafka's LogValidator refuses it: INVALID_RECORD
    for the partition, one record_errors entry per bad record (batch_index = the record's index in
    its batch), and processRecordErrors' message. The batch is not stored; clients fail the other
    records of it without blaming them (librdkafka: _INVALID_DIFFERENT_RECORD)."""
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in bad[:3])
    out["error_code"] = ec.INVALID_RECORD
    out["error_message"] = (f"One or more records have been rejected due to {len(bad)} record errors in total, "
                            f"and only showing the first three errors at most: [{shown}]")
    out["record_errors"] = [{"batch_index": i, "batch_index_error_message": m} for i, m in bad]
    out["base_offset"] = -1
    return out


def _check_entry(tc, records, acks: int, out: dict) -> bool:
    """The checks of one partition entry before decoding (the partition itself is checked by the
    caller): False when `out` now holds the error."""
    if records is None or len(records) == 0:
        out["error_code"] = ec.CORRUPT_MESSAGE
        out["error_message"] = "no records"
        return False
    attrs = tc.attributes
    if attrs:  # Kafka topic configs with a meaning here (kafka_bridge/topic_configs.py EFFECTIVE)
        if acks == -1 and int(attrs.get("min.insync.replicas", "1")) > 1:
            out["error_code"] = ec.NOT_ENOUGH_REPLICAS
            out["error_message"] = (f"min.insync.replicas={attrs['min.insync.replicas']} but the topic has one "
                                    "replica: acks=all cannot be satisfied")
            return False
        limit = attrs.get("max.message.bytes")
        if limit is not None and len(records) > int(limit):
            out["error_code"] = ec.MESSAGE_TOO_LARGE
            out["error_message"] = f"the record batch ({len(records)} bytes) is larger than max.message.bytes={limit}"
            return False
    return True


def _decode_entry(store, topic: str, partition: int, records, born_host, compact: bool, out: dict):
    """The entry's batches as [(batch, its records as EncodedUnits when C mapped them, else None)],
    or None when `out` now holds the error."""
    batches = []
    try:
        for batch in iter_batches(records, max_batch_size=store.config.maxMessageSize + (1 << 20)):
            encoded = None if compact else batch_to_units(batch, topic, partition, born_host, store.commitlog.store_v6,
                                                         store.config.maxMessageSize)
            if encoded is None:  # the Python path: decode_produce_records' checks, then record_to_message
                check_produce_batch(batch)
            batches.append((batch, encoded))
    except RecordsError as exc:
        out["error_code"] = exc.error_code
        out["error_message"] = str(exc)
        return None
    return batches


async def produce_partition(bridge, conn, topic: str, partition: int, records, acks: int,
                            transactional_id: str | None) -> dict:
    """Append one partition's records; returns the PartitionProduceResponse dict."""
    out = _new_out(partition)
    tc = bridge.topic(topic)
    if tc is None or not bridge.writeable(tc, partition):
        out["error_code"] = ec.UNKNOWN_TOPIC_OR_PARTITION
        return out
    if records is None or len(records) == 0:
        out["error_code"] = ec.CORRUPT_MESSAGE
        out["error_message"] = "no records"
        return out
    if bridge.klog is not None:
        return produce_to_kafka_log(bridge, tc, topic, partition, records, acks, out)
    if not _check_entry(tc, records, acks, out):
        return out
    compact = "compact" in tc.attributes.get("cleanup.policy", "")
    batches = _decode_entry(bridge.store, topic, partition, records, conn.peer, compact, out)
    if batches is None:
        return out
    return await _put_batches(bridge, conn, topic, partition, batches, acks, transactional_id, compact, out)


async def _put_batches(bridge, conn, topic: str, partition: int, batches, acks: int,
                       transactional_id: str | None, compact: bool, out: dict) -> dict:
    """produce_partition after the decoding: the producer checks and the puts, batch by batch."""
    store = bridge.store
    born_host = conn.peer
    first_base = None
    for batch, encoded in batches:
        pid = getattr(batch, "producer_id", -1)
        epoch = getattr(batch, "producer_epoch", -1)
        seq = getattr(batch, "base_sequence", -1)
        transactional = getattr(batch, "is_transactional", False)  # never C-mapped
        recs = batch.records() if encoded is None else None
        count = len(recs) if encoded is None else encoded.count
        if compact:
            why = f"Compacted topic cannot accept message without key in topic partition {topic}-{partition}."
            bad = [(i, why) for i, r in enumerate(recs) if r.key is None]
            if bad:
                return record_errors(out, bad)
        if transactional:
            if bridge.txn is None:
                out["error_code"] = ec.INVALID_TXN_STATE
                out["error_message"] = "transactions are not enabled on this broker"
                return out
            err = bridge.txn.check_produce(transactional_id, pid, epoch, topic, partition)
            if err != ec.NONE:
                out["error_code"] = err
                return out
        err, dup_base = bridge.producers.check(pid, epoch, topic, partition, seq, count)
        if err != ec.NONE:
            out["error_code"] = err
            return out
        if dup_base is not None:
            if first_base is None:
                first_base = dup_base
            continue
        if encoded is not None:  # C mapped the batch: one put of the encoded units
            res = bridge.controller.put_encoded(encoded, wait_flush=False)
            wait = res.ok and acks != 0 and store.needs_flush_wait()
            base, end_offset = res.queue_offset, res.end_offset
        else:
            msgs, bad = [], []
            for i, r in enumerate(recs):
                try:
                    msgs.append(record_to_message(topic, partition, r.key, r.value, r.headers, r.timestamp,
                                                  born_host, bridge.delay_levels))
                except MappingError as exc:
                    bad.append((i, str(exc)))
            if bad:
                return record_errors(out, bad)
            if transactional:
                res = bridge.txn.put_transactional(transactional_id, pid, epoch, msgs)
            else:
                res = bridge.controller.put_messages(msgs, wait_flush=False)
            wait = res.ok and acks != 0 and store.needs_flush_wait(msgs[-1])
            if res.ok:
                first, last = res.results[0], res.results[-1]
                base, end_offset = first.queue_offset, last.wrote_offset + last.wrote_bytes
        if wait:
            flushed = await asyncio.get_running_loop().run_in_executor(None, store.wait_flushed, end_offset)
            if not flushed:
                out["error_code"] = ec.REQUEST_TIMED_OUT
                out["error_message"] = "not flushed within syncFlushTimeout"
                return out
        if res.ok and acks == -1:
            err, why = await wait_replicas(bridge, end_offset)
            if err != ec.NONE:
                out["error_code"], out["error_message"] = err, why
                return out
        if not res.ok:
            out["error_code"] = put_status_to_error(res.status, res.remark)
            out["error_message"] = res.remark
            return out
        bridge.producers.record(pid, epoch, topic, partition, seq, count, base)
        if first_base is None:
            first_base = base
    out["base_offset"] = first_base if first_base is not None else -1
    out["log_start_offset"] = store.get_min_offset_in_queue(topic, partition)
    return out


def produce_to_kafka_log(bridge, tc, topic: str, partition: int, records, acks: int, out: dict) -> dict:
    """kafkaStorage kafka-log: the batches go, as received, to the partition's own log (Kafka's
    design) instead of becoming commitlog units. Idempotent producers are checked as on the
    commitlog; transactional batches are refused (the kafka-log peer has no transaction markers)."""
    from ..kafka_log import AppendError
    attrs = tc.attributes or {}
    if acks == -1 and int(attrs.get("min.insync.replicas", "1")) > 1:
        out["error_code"] = ec.NOT_ENOUGH_REPLICAS
        return out
    try:
        batches = list(iter_batches(records, max_batch_size=int(attrs.get("max.message.bytes", 1 << 30))))
    except RecordsError as exc:
        out["error_code"], out["error_message"] = exc.error_code, str(exc)
        return out
    plog = bridge.partition_log(topic, partition, tc)
    first_base = None
    for batch in batches:
        if getattr(batch, "magic", 2) != 2:
            out["error_code"] = ec.UNSUPPORTED_FOR_MESSAGE_FORMAT
            out["error_message"] = "the kafka-log storage keeps record batches v2 only"
            return out
        if batch.is_transactional:
            out["error_code"] = ec.INVALID_TXN_STATE
            out["error_message"] = "transactions are not supported with kafkaStorage kafka-log"
            return out
        # a compacted topic's cleaner keys every record: Kafka refuses keyless ones (LogValidator)
        # (one record error per keyless record, by its index in the batch, as on the commitlog storage)
        if "compact" in attrs.get("cleanup.policy", ""):
            why = f"Compacted topic cannot accept message without key in topic partition {topic}-{partition}."
            bad = [(i, why) for i, r in enumerate(batch.records()) if r.key is None]
            if bad:
                return record_errors(out, bad)
        count = batch.last_offset_delta + 1
        err, dup_base = bridge.producers.check(batch.producer_id, batch.producer_epoch, topic, partition,
                                               batch.base_sequence, count)
        if err != ec.NONE:
            out["error_code"] = err
            return out
        if dup_base is not None:
            first_base = dup_base if first_base is None else first_base
            continue
        raw = bytes(batch._buf[batch._start:batch._start + batch.batch_length + 12])
        try:
            base, last, append_time = plog.append(raw)
        except AppendError as exc:
            out["error_code"], out["error_message"] = exc.code, str(exc)
            return out
        bridge.producers.record(batch.producer_id, batch.producer_epoch, topic, partition, batch.base_sequence,
                                count, base)
        bridge.controller.arrival_hub.notify(topic, partition, last + 1)
        out["log_append_time_ms"] = append_time
        first_base = base if first_base is None else first_base
    out["base_offset"] = first_base if first_base is not None else -1
    out["log_start_offset"] = plog.log_start_offset
    return out


async def handle_produce(bridge, conn, version: int, body: dict):
    acks = body["acks"]
    if acks not in (0, 1, -1):
        return _refuse_all(body, ec.INVALID_REQUIRED_ACKS)
    txn_id = body.get("transactional_id")
    cl = await cluster_of(bridge)
    if bridge.is_slave:
        return None if acks == 0 else _refuse_all(body, ec.NOT_LEADER_OR_FOLLOWER, slave_refusal(bridge, cl))
    if cl is None and bridge.klog is None:
        responses = await _produce_local(bridge, conn, body["topic_data"], acks, txn_id)
        bridge.producers.sync()  # idempotent producers' sequences on disk before the answer
        return None if acks == 0 else {"responses": responses, "throttle_time_ms": 0}
    responses = []
    for td in body["topic_data"]:
        name = td["name"]
        parts = []
        for pd in td["partition_data"]:
            if cl is None:
                parts.append(await produce_partition(bridge, conn, name, pd["index"], pd["records"], acks, txn_id))
                continue
            err, queue_id = await resolve_partition(cl, name, pd["index"])
            if err == ec.NONE and txn_id is not None:
                err = ec.INVALID_TXN_STATE
            if err != ec.NONE:
                parts.append({"index": pd["index"], "error_code": err, "base_offset": -1, "log_append_time_ms": -1,
                              "log_start_offset": -1, "record_errors": [], "error_message": None})
                continue
            out = await produce_partition(bridge, conn, name, queue_id, pd["records"], acks, txn_id)
            out["index"] = pd["index"]
            parts.append(out)
        responses.append({"name": name, "partition_responses": parts})
    bridge.producers.sync()
    if acks == 0:
        return None
    return {"responses": responses, "throttle_time_ms": 0}


async def _produce_local(bridge, conn, topic_data, acks: int, txn_id: str | None) -> list:
    """handle_produce on a single broker storing in the commitlog. Entries (partition data) are
    taken in request order; a run of consecutive entries whose records are one batch the C
    mapping encoded (plain, not transactional) is put in one store call (put_encoded_many: one put
    lock, one commitlog write), the same puts produce_partition would make one entry at a time.
    Every other entry is produce_partition's work. A run is put before an entry that is not part
    of it, and before a second entry of a partition already in it, so each partition's producer
    state checks and puts keep their order."""
    store = bridge.store
    born_host = conn.peer
    producers = bridge.producers
    check = producers.check
    max_message_size = store.config.maxMessageSize
    mapper = entry_mapper(born_host, store.commitlog.store_v6, max_message_size, max_message_size + (1 << 20))
    run: list = []  # (out, topic, partition, encoded, pid, epoch, seq)
    run_keys: set = set()
    responses = []
    for td in topic_data:
        name = td["name"]
        name_b = name.encode("utf-8") if name is not None else b""
        parts = []
        tc = bridge.topic(name)
        compact = tc is not None and "compact" in tc.attributes.get("cleanup.policy", "")
        fast = mapper if not compact else None
        for pd in td["partition_data"]:
            partition = pd["index"]
            records = pd["records"]
            out = _new_out(partition)
            parts.append(out)
            if tc is None or not bridge.writeable(tc, partition):
                out["error_code"] = ec.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if not _check_entry(tc, records, acks, out):
                continue
            mapped = fast(records, name, name_b, partition) if fast is not None else None
            if mapped is None:
                batches = _decode_entry(store, name, partition, records, born_host, compact, out)
                if batches is None:
                    continue
                if len(batches) == 1 and batches[0][1] is not None:
                    batch, encoded = batches[0]
                    mapped = batch.producer_id, batch.producer_epoch, batch.base_sequence, encoded
            key = (name, partition)
            if mapped is not None:
                if key in run_keys:
                    await _put_run(bridge, run, acks)
                    run, run_keys = [], set()
                pid, epoch, seq, encoded = mapped
                err, dup_base = check(pid, epoch, name, partition, seq, encoded.count)
                if err != ec.NONE:
                    out["error_code"] = err
                elif dup_base is not None:
                    out["base_offset"] = dup_base
                    out["log_start_offset"] = store.get_min_offset_in_queue(name, partition)
                else:
                    run.append((out, name, partition, encoded, pid, epoch, seq))
                    run_keys.add(key)
                continue
            if run:
                await _put_run(bridge, run, acks)
                run, run_keys = [], set()
            await _put_batches(bridge, conn, name, partition, batches, acks, txn_id, compact, out)
        responses.append({"name": name, "partition_responses": parts})
    if run:
        await _put_run(bridge, run, acks)
    return responses


async def _put_run(bridge, run: list, acks: int) -> None:
    """_put_batches for entries of one C-encoded batch each (already checked against the producer
    state), all put in one store call; fills each entry's response."""
    store = bridge.store
    results = bridge.controller.put_encoded_many([r[3] for r in run], wait_flush=False)
    # how far the commitlog must be flushed (and replicated) for all of them
    end_offset = max((res.end_offset for res in results if res.status is PutMessageStatus.PUT_OK), default=-1)
    flushed = True
    if end_offset >= 0 and acks != 0 and store.needs_flush_wait():
        flushed = await asyncio.get_running_loop().run_in_executor(None, store.wait_flushed, end_offset)
    replica_err, replica_why = ec.NONE, None
    if end_offset >= 0 and acks == -1 and flushed:
        replica_err, replica_why = await wait_replicas(bridge, end_offset)
    record = bridge.producers.record
    min_offset = store.get_min_offset_in_queue
    put_ok = PutMessageStatus.PUT_OK
    for (out, topic, partition, encoded, pid, epoch, seq), res in zip(run, results):
        if res.status is not put_ok:
            out["error_code"] = put_status_to_error(res.status, res.remark)
            out["error_message"] = res.remark
        elif not flushed:
            out["error_code"] = ec.REQUEST_TIMED_OUT
            out["error_message"] = "not flushed within syncFlushTimeout"
        elif replica_err != ec.NONE:
            out["error_code"], out["error_message"] = replica_err, replica_why
        else:
            record(pid, epoch, topic, partition, seq, encoded.count, res.queue_offset)
            out["base_offset"] = res.queue_offset
            out["log_start_offset"] = min_offset(topic, partition)
