"""Produce: record batches -> ordinary commitlog units, one per record (SPEC §11).

Each partition's batches are decoded and checked (CRC, lengths, magic), mapped to Messages
(kafka_bridge.mapping) and put as one contiguous batch into the queue = partition. With the C
extension, a batch whose records map plainly is encoded to commitlog units in one go instead
(mapping.batch_to_units -> store.put_encoded): the same stored bytes. Idempotent
producers' retried batches are answered from the producer state without a second write.

In cluster mode (kafka_bridge.cluster) a partition owned by another broker is answered with
NOT_LEADER_OR_FOLLOWER, and an owned partition p is written to local queue p - base.
"""
from __future__ import annotations

import asyncio
import logging

from rmq.store import PutMessageStatus

from ..cluster import cluster_of, resolve_partition
from ..mapping import MappingError, batch_to_units, record_to_message
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


async def produce_partition(bridge, conn, topic: str, partition: int, records, acks: int,
                            transactional_id: str | None) -> dict:
    """Append one partition's records; returns the PartitionProduceResponse dict."""
    out = {"index": partition, "error_code": ec.NONE, "base_offset": -1, "log_append_time_ms": -1,
           "log_start_offset": -1, "record_errors": [], "error_message": None}
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
    store = bridge.store
    born_host = conn.peer
    attrs = tc.attributes
    if attrs:  # Kafka topic configs with a meaning here (kafka_bridge/topic_configs.py EFFECTIVE)
        if acks == -1 and int(attrs.get("min.insync.replicas", "1")) > 1:
            out["error_code"] = ec.NOT_ENOUGH_REPLICAS
            out["error_message"] = (f"min.insync.replicas={attrs['min.insync.replicas']} but the topic has one "
                                    "replica: acks=all cannot be satisfied")
            return out
        limit = attrs.get("max.message.bytes")
        if limit is not None and len(records) > int(limit):
            out["error_code"] = ec.MESSAGE_TOO_LARGE
            out["error_message"] = f"the record batch ({len(records)} bytes) is larger than max.message.bytes={limit}"
            return out
    compact = "compact" in attrs.get("cleanup.policy", "")
    batches = []  # (batch, its records as EncodedUnits when C mapped them, else None)
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
        return out
    first_base = None
    for bi, (batch, encoded) in enumerate(batches):
        pid = getattr(batch, "producer_id", -1)
        epoch = getattr(batch, "producer_epoch", -1)
        seq = getattr(batch, "base_sequence", -1)
        transactional = getattr(batch, "is_transactional", False)  # never C-mapped
        recs = batch.records() if encoded is None else None
        count = len(recs) if encoded is None else encoded.count
        if compact and any(r.key is None for r in recs):
            out["error_code"] = ec.INVALID_RECORD
            out["error_message"] = f"Compacted topic cannot accept message without key in topic partition {topic}-{partition}."
            out["record_errors"] = [{"batch_index": bi, "batch_index_error_message": out["error_message"]}]
            return out
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
            try:
                msgs = [record_to_message(topic, partition, r.key, r.value, r.headers, r.timestamp, born_host,
                                          bridge.delay_levels) for r in recs]
            except MappingError as exc:
                out["error_code"] = ec.INVALID_RECORD
                out["error_message"] = str(exc)
                out["record_errors"] = [{"batch_index": bi, "batch_index_error_message": str(exc)}]
                return out
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
        err = ec.INVALID_REQUIRED_ACKS
        responses = [{"name": td["name"], "partition_responses": [
            {"index": pd["index"], "error_code": err, "base_offset": -1} for pd in td["partition_data"]]}
            for td in body["topic_data"]]
        return {"responses": responses, "throttle_time_ms": 0}
    txn_id = body.get("transactional_id")
    cl = await cluster_of(bridge)
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
    if acks == 0:
        return None
    return {"responses": responses, "throttle_time_ms": 0}
