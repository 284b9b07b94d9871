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

Steps 1, 3 and 4 run in C for the common request (rmq/_native_send.h: send_frame_parse reads the JSON
header, makes the checks of step 1 and encodes the units with a one-entry table that
DefaultMessageStore.put_entry appends and dispatches in C; send_frame_reply writes the success
frame): Python is left with the topic checks of step 2 and the put_entry call. What the C reader
declines goes to the Python reader (_on_frame_py, the steps above) before anything is stored.

Anything less common returns None and the processor handles it: unknown topics (auto-create),
retry topics, transactions, delay levels, SYNC_FLUSH, SYNC_MASTER, slaves, a read-only broker,
oversized bodies, a store refusal of any kind is answered the way the processor answers it
(both call the same store methods and the same _refused). tests/test_send_frame.py sends the same
requests through both and compares responses and store files.
"""
from __future__ import annotations

import json
import logging
import re
import struct

from rmq import native
from rmq.broker.topic_config import AUTO_CREATE_TOPIC_KEY_TOPIC, PERM_WRITE, RETRY_GROUP_TOPIC_PREFIX
from rmq.common.message import MULTI_TAGS_FLAG, TRANSACTION_ROLLBACK_TYPE, pack_host, properties_from_bytes
from rmq.remoting import RemotingCommand, RequestCode, ResponseCode
from rmq.remoting.command import FLAG_RESPONSE, MQ_VERSION_V4_9_4, LanguageCode, SerializeType
from rmq.server.processors.common import response
from rmq.store import MessageBatch, PutMessageStatus
from rmq.store.message_store import validate_topic
from rmq.store.unit import EncodedEntries, EncodedUnits

_V1 = ("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
       "flag", "properties", "reconsumeTimes", "unitMode", "batch", "maxReconsumeTimes")
_V2 = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m", "l")
_ELEMENT_HEAD = struct.Struct(">iiiii")
_PROPS_LEN = struct.Struct(">h")
_OK = {PutMessageStatus.PUT_OK: ResponseCode.SUCCESS}
_BATCH_CODE = RequestCode.SEND_BATCH_MESSAGE
_V2_CODES = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
_SEND_CODES = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE})
_WORD = struct.Struct(">i")
_BASE_OFFSET = struct.Struct("=q")  # a pentry's base_offset, at byte 40
_PREFIX = struct.Struct(">ii")
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_loads = json.loads
_FALSE = (None, "false", "0", "")
_TRUE = ("true", "1")
_SEND_CODE_TEXT = re.compile(rb'"code"\s*:\s*(?:10|310|320)\b')
log = logging.getLogger("rmq.broker.remoting")


def _int32(v) -> bool:
    return v.__class__ is int and _INT32_MIN <= v <= _INT32_MAX


def _int(raw, digits: int) -> int:
    """A non-negative decimal of at most `digits` digits, else -1 (the processor decides)."""
    if raw is None or not (0 < len(raw) <= digits and raw.isascii() and raw.isdigit()):
        return -1
    return int(raw)


def _opt_int(raw, digits: int) -> int:
    """An optional field: 0 when absent, -1 when not plain digits."""
    return 0 if raw is None else _int(raw, digits)


def _ext_strings(ext: dict) -> dict | None:
    """extFields with the values RemotingCommand.decode converts (None left out, booleans as
    true/false, numbers as str()), or None for a value it would write back as JSON."""
    out = {}
    for k, v in ext.items():
        if v is None:
            continue
        if v.__class__ is str:
            out[k] = v
        elif v.__class__ is bool:
            out[k] = "true" if v else "false"
        elif v.__class__ in (int, float):
            out[k] = str(v)
        else:
            return None
    return out


class SendFrame:
    """The fast path of one SendMessageProcessor (per-listener caches: legal topic names, msgId prefix)."""

    def __init__(self, processor, forbidden_topics: frozenset) -> None:
        self.proc = processor
        self.forbidden = forbidden_topics  # send.NOT_ALLOWED_SEND_TOPICS
        self.svc = processor.svc
        self._legal: set = set()
        self._id_prefix = None
        self._born: dict = {}  # remote host -> pack_host's (address bytes, port)
        #: requests answered from the frame by the C reader (send_frame_parse), refusals included
        self.answered_c = 0
        #: on_frame's encoded success frame from _stored (False: not called from on_frame)
        self._fast_reply = False

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
        if (topic == AUTO_CREATE_TOPIC_KEY_TOPIC or topic == svc.broker_config.brokerClusterName
                or topic in self.forbidden or topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
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
        if unit not in _FALSE or (batch not in _FALSE and batch not in _TRUE):
            return None  # other spellings parse_value takes (" TRUE "): the processor reads them
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
        if batch in _TRUE or req.code == _BATCH_CODE:
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

    # ------------------------------------------------------------------ from the frame, in C
    def on_frame(self, conn, payload) -> bytes | None:
        """The whole response frame to this request payload (the bytes after the length field), or
        None when the listener must decode and dispatch it as usual. The common request is read,
        checked and encoded by rmq._native.send_frame_parse (a plain JSON header whose extFields
        hold strings, integers, booleans or null) and appended by DefaultMessageStore.put_entry;
        whatever it declines goes to _on_frame_py, the Python reader, unchanged, before anything is
        stored."""
        ext = native.ext
        if ext is None:
            return self._on_frame_py(conn, payload)
        born = conn.remote_host if hasattr(conn, "remote_host") else ("127.0.0.1", 0)
        packed = self._born.get(born)
        if packed is None:
            if len(self._born) >= 4096:
                self._born.clear()
            addr, port, _ = pack_host(born)
            packed = self._born[born] = (addr, port)
        svc = self.svc
        store = svc.store
        v6 = store.commitlog.store_v6
        parsed = ext.send_frame_parse(payload, packed[0], packed[1], v6, svc.store_config.maxMessageSize)
        if parsed is None:
            return self._on_frame_py(conn, payload)
        code, opaque, version, language, topic, qid, batch = parsed[:7]
        dispatcher = conn.dispatcher
        if dispatcher.request_check is not None or dispatcher.processors.get(code) != self.proc.process:
            return None  # ACL, or another processor took the code: as _on_frame_py answers
        if not self.usable() or not self._legal_topic(topic):
            return self._on_frame_py(conn, payload)
        tc = svc.controller.topic_config_manager.get(topic)
        if (tc is None or not tc.perm & PERM_WRITE or qid >= max(tc.writeQueueNums, tc.readQueueNums)
                or tc.topicFilterType == "MULTI_TAG"):
            return self._on_frame_py(conn, payload)
        table, units, tags_codes, index_hashes, index_units, max_size, count = parsed[7:]
        try:
            res = None
            if not store.needs_flush_wait():  # one C append and dispatch (no flush wait to make)
                res = store.put_entry(EncodedEntries([topic], table, units, tags_codes, index_hashes, index_units,
                                                     count, v6))
                if res.__class__ is int:  # PUT_OK: the commitlog end offset of the units
                    wrote, queue_offset, ok = res - len(units), _BASE_OFFSET.unpack_from(table, 40)[0], True
                elif res is not None and res.status is PutMessageStatus.PUT_OK:
                    wrote, queue_offset, ok = res.end_offset - len(units), _BASE_OFFSET.unpack_from(table, 40)[0], True
            if res is None:  # a flush wait, or the units do not fit in this commitlog file (it rolls over)
                if batch:
                    return self._on_frame_py(conn, payload)  # nothing was put: put_batch's way
                res = svc.controller.put_encoded(EncodedUnits(topic, qid, units, 1, max_size, v6, tags_codes or None,
                                                              index_hashes or None, index_units or None))
                wrote, queue_offset = res.wrote_offset, res.queue_offset
                ok = res.status is PutMessageStatus.PUT_OK and res.count
            elif res.__class__ is not int and res.status is not PutMessageStatus.PUT_OK:
                ok = False
        except Exception as exc:  # noqa: BLE001 - as Dispatcher.dispatch answers a failing processor
            self.answered_c += 1
            req = self._request(payload)
            return self._frame_of(conn, req, dispatcher.error_response(conn, req, exc))
        self.answered_c += 1
        conn.serialize_type, conn.language = SerializeType.JSON, LanguageCode.JAVA if language is None else language
        if not ok:
            req = self._request(payload)
            return self._frame_of(conn, req, self.proc._refused(req, res.status, res.remark))
        host = store.store_host
        cached = self._id_prefix
        if cached is None or cached[0] != host:
            cached = self._id_prefix = self._prefix_of(host)
        return ext.send_frame_reply(cached[2], units, wrote, qid, queue_offset, opaque, MQ_VERSION_V4_9_4)

    @staticmethod
    def _prefix_of(host) -> tuple:
        """(store host, create_message_id's first 12 (IPv6: 24) bytes as hex text, the same as ASCII bytes)."""
        addr, port, _ = pack_host(host)
        text = (addr + struct.pack(">i", port)).hex().upper()
        return host, text, text.encode("ascii")

    def _request(self, payload) -> RemotingCommand:
        """The RemotingCommand _on_frame_py builds for a payload send_frame_parse took (for a refusal's
        or an error's response)."""
        parsed = self._parse_py(payload)
        # a header only the C reader takes (an escaped key, say): as the listener would decode it
        return parsed[0] if parsed is not None else RemotingCommand.decode(payload)

    @staticmethod
    def _frame_of(conn, req, resp) -> bytes:
        conn.serialize_type, conn.language = SerializeType.JSON, req.language
        resp.opaque, resp.serialize_type = req.opaque, SerializeType.JSON
        resp.flag |= FLAG_RESPONSE
        return resp.encode()

    # ------------------------------------------------------------------ from the frame, in Python
    def _parse_py(self, payload):
        """(the request, opaque) for a send payload whose JSON header the Python reader takes, else None."""
        n = len(payload)
        if n < 4:
            return None
        word = _WORD.unpack_from(payload, 0)[0]
        hlen = word & 0xFFFFFF
        if word >> 24 != SerializeType.JSON or hlen > n - 4:
            return None
        head = bytes(payload[4:4 + hlen])
        if _SEND_CODE_TEXT.search(head) is None:
            return None  # not a send: the usual path, without parsing the header twice
        if b"\\ud" in head or b"\\uD" in head:
            return None  # surrogate escapes: RemotingCommand.decode's checks decide
        try:
            obj = _loads(head.decode("utf-8"))
        except ValueError:  # includes UnicodeDecodeError and JSONDecodeError
            return None
        if obj.__class__ is not dict:
            return None
        code, opaque, flag, version = obj.get("code"), obj.get("opaque", 0), obj.get("flag", 0), obj.get("version", 0)
        language, remark, ext = obj.get("language"), obj.get("remark"), obj.get("extFields")
        if (code not in _SEND_CODES or code.__class__ is not int or flag != 0 or flag.__class__ is not int
                or not _int32(opaque) or not _int32(version) or ext.__class__ is not dict
                or (language is not None and language.__class__ is not str)
                or (remark is not None and remark.__class__ is not str)):
            return None
        for v in ext.values():
            if v.__class__ is not str:
                ext = _ext_strings(ext)  # numbers as a C++ client writes some: as RemotingCommand.decode
                if ext is None:
                    return None
                break
        req = RemotingCommand.__new__(RemotingCommand)
        req.code, req.language, req.version, req.opaque, req.flag, req.remark = (
            code, LanguageCode.JAVA if language is None else language, version, opaque, 0, remark)
        req.ext_fields, req.body, req.serialize_type = ext, bytes(payload[4 + hlen:]), SerializeType.JSON
        return req, opaque

    def _on_frame_py(self, conn, payload) -> bytes | None:
        """on_frame in Python: the response frame, or None when the listener must decode and
        dispatch the request as usual (not a send, not the common header shape, or declined by
        try_send). Only a JSON header whose fields are all of the plain types
        RemotingCommand.decode reads without conversion is taken, so the request the processor
        would see is the one built here."""
        parsed = self._parse_py(payload)
        if parsed is None:
            return None
        req, opaque = parsed
        code = req.code
        dispatcher = conn.dispatcher
        if dispatcher.request_check is not None or dispatcher.processors.get(code) != self.proc.process:
            return None  # ACL, or another processor took the code
        self._fast_reply = None
        try:
            resp = self.try_send(conn, req)
        except Exception as exc:  # noqa: BLE001 - as Dispatcher.dispatch answers a failing processor
            resp = dispatcher.error_response(conn, req, exc)
        finally:
            reply, self._fast_reply = self._fast_reply, False
        if resp is None:
            return None
        conn.serialize_type, conn.language = SerializeType.JSON, req.language
        if reply is not None and resp is reply[0]:
            return reply[1]
        resp.opaque, resp.serialize_type = opaque, SerializeType.JSON
        resp.flag |= FLAG_RESPONSE
        return resp.encode()

    def _stored(self, req, offsets, queue_id: int, queue_offset: int):
        host = self.svc.store.store_host
        cached = self._id_prefix
        if cached is None or cached[0] != host:  # create_message_id's first 12 (IPv6: 24) bytes
            cached = self._id_prefix = self._prefix_of(host)
        prefix = cached[1]
        msg_id = ",".join(f"{prefix}{o:016X}" for o in offsets)
        resp = response(req, ResponseCode.SUCCESS, None,
                        {"msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(queue_offset),
                         "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"})
        if self._fast_reply is False or req.serialize_type != SerializeType.JSON:
            return resp
        # the frame RemotingCommand.encode_prefix writes for this response, without its encoder
        head = (f'{{"code":0,"extFields":{{"msgId":"{msg_id}","queueId":"{queue_id}","queueOffset":"{queue_offset}",'
                f'"MSG_REGION":"DefaultRegion","TRACE_ON":"true"}},"flag":1,"language":"JAVA","opaque":{req.opaque},'
                f'"serializeTypeCurrentRPC":"JSON","version":{MQ_VERSION_V4_9_4}}}').encode()
        self._fast_reply = (resp, _PREFIX.pack(4 + len(head), len(head)) + head)
        return resp


__all__ = ["SendFrame"]
