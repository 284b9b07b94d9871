"""The common SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE answered with little Python (issue 24).

SendMessageProcessor.process (rmq/server/processors/send.py) stays the reference and takes every
request this path declines. For the common request this module:

1. reads the send header straight from the extFields strings (V1 names or the V2 letters a..n),
   without the typed header classes: a field that is missing or not plain decimal digits declines;
2. checks the broker (master, writeable, ASYNC_FLUSH, no SYNC_MASTER replication wait) and the
   topic (in the topic table, writeable, queue in range, a legal name that is not reserved, not a
   %RETRY% topic, no delay level or transaction flag in the properties);
3. encodes the message as commitlog units in C (rmq._native.batch_body_to_units: a single message
   is handed over as a batch body of one element, whose unit is byte for byte the one
   CommitLog.append writes) and puts them with BrokerController.put_encoded (the same write
   refusal, disk-full refusal, put lock, C append and dispatch as every put); a batch body goes
   to BrokerController.put_batch exactly as the processor sends it;
4. builds the response's extFields directly (msgId from a cached store-host prefix).

Anything less common returns None and the processor handles it: unknown topics (auto-create),
retry topics, transactions, delay levels, SYNC_FLUSH, SYNC_MASTER, slaves, a read-only broker,
oversized bodies, a store refusal of any kind is answered the way the processor answers it
(both call the same store methods and the same _refused). tests/test_send_frame.py sends the same
requests through both and compares responses and store files.
"""
from __future__ import annotations

import struct

from rmq import native
from rmq.broker.topic_config import AUTO_CREATE_TOPIC_KEY_TOPIC, PERM_WRITE, RETRY_GROUP_TOPIC_PREFIX
from rmq.common.message import MULTI_TAGS_FLAG, TRANSACTION_ROLLBACK_TYPE, pack_host, properties_from_bytes
from rmq.remoting import RequestCode, ResponseCode
from rmq.server.processors.common import response
from rmq.store import MessageBatch, PutMessageStatus
from rmq.store.message_store import validate_topic
from rmq.store.unit import EncodedUnits

_V1 = ("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
       "flag", "properties", "reconsumeTimes", "unitMode", "batch", "maxReconsumeTimes")
_V2 = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m", "l")
_ELEMENT_HEAD = struct.Struct(">iiiii")
_PROPS_LEN = struct.Struct(">h")
_OK = {PutMessageStatus.PUT_OK: ResponseCode.SUCCESS}
_BATCH_CODE = RequestCode.SEND_BATCH_MESSAGE
_V2_CODES = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)


def _int(raw, digits: int) -> int:
    """A non-negative decimal of at most `digits` digits, else -1 (the processor decides)."""
    if raw is None or not (0 < len(raw) <= digits and raw.isascii() and raw.isdigit()):
        return -1
    return int(raw)


def _opt_int(raw, digits: int) -> int:
    """An optional field: 0 when absent, -1 when not plain digits."""
    return 0 if raw is None else _int(raw, digits)


class SendFrame:
    """The fast path of one SendMessageProcessor (per-listener caches: legal topic names, msgId prefix)."""

    def __init__(self, processor) -> None:
        self.proc = processor
        self.svc = processor.svc
        self._legal: set = set()
        self._id_prefix = None

    def usable(self) -> bool:
        svc = self.svc
        if native.ext is None or svc.executor is not None or svc.is_slave or not svc.broker_writeable():
            return False
        ha = getattr(svc.controller, "ha_service", None)
        return ha is None or not ha.sync_master

    def _legal_topic(self, topic: str) -> bool:
        if topic in self._legal:
            return True
        svc = self.svc
        from rmq.server.processors.send import NOT_ALLOWED_SEND_TOPICS
        if (topic == AUTO_CREATE_TOPIC_KEY_TOPIC or topic == svc.broker_config.brokerClusterName
                or topic in NOT_ALLOWED_SEND_TOPICS or topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
                or validate_topic(topic)):
            return False
        if len(self._legal) < 65536:
            self._legal.add(topic)
        return True

    def try_send(self, conn, req):
        """The response to this send request, or None when the processor must take it."""
        if not self.usable():
            return None
        ext = req.ext_fields
        names = _V2 if req.code in _V2_CODES else _V1
        get = ext.get
        group, topic, default_topic, d_nums, qid, sys_flag, born_ts, flag, props, reconsume, unit, batch, max_re = (
            get(n) for n in names)
        if group is None or topic is None or default_topic is None:
            return None
        qid = _int(qid, 9)
        sys_flag = _int(sys_flag, 9)
        flag = _int(flag, 9)
        born_ts = _int(born_ts, 18)
        if (qid < 0 or sys_flag < 0 or flag < 0 or born_ts < 0 or _int(d_nums, 9) < 0
                or _opt_int(max_re, 9) < 0):
            return None
        reconsume = _opt_int(reconsume, 9)
        if reconsume < 0 or sys_flag & TRANSACTION_ROLLBACK_TYPE:
            return None
        if unit not in (None, "false") or batch not in (None, "false", "true"):
            return None
        if not self._legal_topic(topic):
            return None
        svc = self.svc
        tc = svc.controller.topic_config_manager.get(topic)
        if tc is None or not tc.perm & PERM_WRITE or qid >= max(tc.writeQueueNums, tc.readQueueNums):
            return None
        body = req.body or b""
        if len(body) > svc.store_config.maxMessageSize:
            return None
        if tc.topicFilterType == "MULTI_TAG":
            sys_flag |= MULTI_TAGS_FLAG
        born = conn.remote_host if hasattr(conn, "remote_host") else ("127.0.0.1", 0)
        if batch == "true" or req.code == _BATCH_CODE:
            if props and ("DELAY\x01" in props or "TRAN_MSG\x01" in props):
                return None
            pmap = properties_from_bytes(props.encode("utf-8")) if props else {}
            res = svc.controller.put_batch(MessageBatch(topic, qid, body, pmap, sys_flag, born_ts, born, reconsume))
            if res.status is not PutMessageStatus.PUT_OK or not res.count:
                return self.proc._refused(req, res.status, res.remark)
            return self._stored(req, res.commit_log_offsets(), qid, res.queue_offset)
        pb = props.encode("utf-8") if props else b""
        if len(pb) > 32767:
            return None
        element = b"".join((_ELEMENT_HEAD.pack(22 + len(body) + len(pb), 0, 0, flag, len(body)), body,
                            _PROPS_LEN.pack(len(pb)), pb))
        store = svc.store
        addr, port, _ = pack_host(born)
        v6 = store.commitlog.store_v6
        out = native.ext.batch_body_to_units(element, topic.encode("utf-8"), qid, sys_flag, born_ts, addr, port, v6,
                                             reconsume, b"", svc.store_config.maxMessageSize)
        if out is None or out.__class__ is int:
            return None  # unusual properties (delay, transaction, malformed): the processor decides
        units, tags_codes, index_hashes, index_units, max_size, count, _ = out
        if count != 1:
            return None
        res = svc.controller.put_encoded(EncodedUnits(topic, qid, units, 1, max_size, v6, tags_codes, index_hashes,
                                                      index_units))
        if res.status is not PutMessageStatus.PUT_OK or not res.count:
            return self.proc._refused(req, res.status, res.remark)
        return self._stored(req, (res.wrote_offset,), qid, res.queue_offset)

    def _stored(self, req, offsets, queue_id: int, queue_offset: int):
        prefix = self._id_prefix
        if prefix is None:
            addr, port, _ = pack_host(self.svc.store.store_host)
            prefix = self._id_prefix = (addr + struct.pack(">i", port)).hex().upper()
        msg_id = ",".join(f"{prefix}{o:016X}" for o in offsets)
        return response(req, ResponseCode.SUCCESS, None,
                        {"msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(queue_offset),
                         "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"})


__all__ = ["SendFrame"]
