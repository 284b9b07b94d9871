"""The send fast path (rmq/server/processors/send_frame.py) against the reference processor: the same
SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE requests to two in-process brokers with the same
store clock, one with the fast path and one without, give identical responses (code, remark,
extFields, encoded frame) and byte-identical commitlog, consumequeue and index files; truncated and
mutated frames give the same answer on both (or the same decode error) and never crash."""
from __future__ import annotations

import os
import random
import struct
import time

import pytest

from rmq import native
from rmq.broker.controller import BrokerController
from rmq.common.message import encode_batch_element, properties_to_bytes
from rmq.config import load_config
from rmq.remoting import RemotingCommand, RequestCode, ResponseCode
from rmq.remoting.command import SerializeType
from rmq.remoting.errors import CommandDecodeError
from rmq.server.processors import send as send_mod
from rmq.server.processors.common import BrokerServices
from rmq.server.processors.send import SendMessageProcessor
from rmq.server.remoting_server import Dispatcher

pytestmark = pytest.mark.skipif(native.ext is None, reason="needs the C extension rmq._native")

BORN_TS = 1_700_000_000_000
V1_TO_V2 = {"producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d", "queueId": "e",
            "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i", "reconsumeTimes": "j",
            "unitMode": "k", "maxReconsumeTimes": "l", "batch": "m"}


class Conn:
    remote_host = ("127.0.0.1", 45678)
    remote_addr = "127.0.0.1:45678"


class Side:
    """One broker in-process and its send processor; `fast` says whether the fast path is on."""

    def __init__(self, root: str, fast: bool, overrides: dict, store_ts: int):
        small_index = {"maxHashSlotNum": 4096, "maxIndexNum": 16384}  # whole index files compared below
        self.ctl = BrokerController(load_config(None, {"storePathRootDir": root, **small_index, **overrides}))
        self.ctl.start()
        self.ctl.store.commitlog.clock = lambda: store_ts
        self.svc = BrokerServices(self.ctl, broker_addr="127.0.0.1:10911")
        self.proc = SendMessageProcessor(self.svc, fast=fast)
        self.conn = Conn()
        self.conn.dispatcher = Dispatcher("test")  # as the listener's: the send processor registered
        self.conn.dispatcher.register_many(self.proc.table())
        self.root = root
        self.py_fast_answers = 0  # answered by SendFrame.try_send (from the frame or from process)
        self.frame_answers = 0  # answered from the frame (by the C reader or the Python one)
        if self.proc.fast is not None:
            try_send = self.proc.fast.try_send

            def counting(conn, req):
                resp = try_send(conn, req)
                self.py_fast_answers += resp is not None
                return resp
            self.proc.fast.try_send = counting

    @property
    def c_answers(self) -> int:
        """Requests answered from the frame by the C reader (rmq._native.send_frame_parse)."""
        return self.proc.fast.answered_c if self.proc.fast is not None else 0

    @property
    def fast_answers(self) -> int:
        """Requests answered by the fast path: the C reader, or try_send (from the frame or from process)."""
        return self.py_fast_answers + self.c_answers

    def send(self, payload: bytes, seed: int):
        """(code, remark, extFields, response frame) as the listener would write it; None when the
        listener would close the connection (undecodable) or the request is not a send."""
        send_mod._random.seed(seed)  # a negative queueId picks a random queue: the same on both sides
        if self.proc.fast is not None:
            frame = self.proc.fast.on_frame(self.conn, payload)
            if frame is not None:
                self.frame_answers += 1
                resp = RemotingCommand.decode(frame[4:])
                return resp.code, resp.remark, resp.ext_fields, frame
        try:
            req = RemotingCommand.decode(payload)
        except CommandDecodeError:
            return None
        if req.code not in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            return None
        try:
            resp = self.proc.process(self.conn, req)
        except Exception as exc:  # noqa: BLE001 - as Dispatcher.dispatch
            resp = self.conn.dispatcher.error_response(self.conn, req, exc)
        assert not hasattr(resp, "__await__"), "ASYNC_FLUSH sends answer at once"
        resp.opaque = req.opaque  # as Dispatcher.reply
        resp.flag |= 1
        resp.serialize_type = req.serialize_type
        return resp.code, resp.remark, dict(resp.ext_fields or {}), resp.encode()

    def files(self) -> dict:
        store = self.ctl.store
        out = {}
        for mf in store.commitlog.queue.files:
            out[os.path.relpath(mf.path, self.root)] = bytes(mf.mm[:mf.wrote_position])
        for topic, queues in store.consume_queue_table.items():
            for qid, cq in queues.items():
                for mf in cq.mfq.files:
                    out[os.path.relpath(mf.path, self.root)] = bytes(mf.mm[:mf.wrote_position])
        for i, f in enumerate(store.index_service.files):
            out[f"index/{i}"] = bytes(f.mm[:])
        # consumequeue files of a new topic are made ahead by a background thread: an empty one
        # holds nothing, and whether it exists yet is a matter of timing
        return {k: v for k, v in out.items() if v or not k.startswith("consumequeue/")}

    def close(self):
        self.ctl.shutdown()


@pytest.fixture
def sides(tmp_path):
    made = []

    def make(**overrides):
        # one store clock for both, near the real time: the transaction check and the schedule
        # service compare store times with the clock, and must find nothing due while the test runs
        now = int(time.time() * 1000)
        pair = [Side(str(tmp_path / f"{name}-{len(made)}"), fast, overrides, now)
                for name, fast in (("py", False), ("c", True))]
        made.extend(pair)
        for s in pair:
            s.ctl.create_topic("T", 4)
            s.ctl.create_topic("Tags", 2)
            s.ctl.create_topic("ReadOnly", 2, perm=4)
        return pair
    yield make
    for s in made:
        s.close()


def props(**kw) -> str:
    return properties_to_bytes(kw).decode("utf-8")


def header(topic="T", queue_id="1", properties=None, **extra) -> dict:
    h = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
         "queueId": queue_id, "sysFlag": "0", "bornTimestamp": str(BORN_TS), "flag": "0", "reconsumeTimes": "0",
         "unitMode": "false", "batch": "false", "maxReconsumeTimes": "16"}
    if properties is not None:
        h["properties"] = properties
    h.update(extra)
    return {k: v for k, v in h.items() if v is not None}


def v2(h: dict) -> dict:
    return {V1_TO_V2.get(k, k): v for k, v in h.items()}


def wire(code: int, ext: dict, body: bytes, opaque: int, serialize_type: int = SerializeType.JSON) -> bytes:
    """The frame payload (after the length field) a client writes."""
    return RemotingCommand.request(code, ext, body, opaque=opaque, serialize_type=serialize_type).encode()[4:]


def batch_body(*items) -> bytes:
    return b"".join(encode_batch_element(flag, body, properties_to_bytes(p)) for flag, body, p in items)


def requests() -> list[tuple[int, dict, bytes]]:
    """Every request shape: V1 and V2, tags, keys, user properties, batches, and the shapes the fast
    path declines or refuses."""
    uniq = "0A0A0A0A00002A9F0000000000000001"
    common = props(UNIQ_KEY=uniq, WAIT="true", TAGS="TagA", KEYS="k1 k2")
    out = []
    for code, conv in ((RequestCode.SEND_MESSAGE, dict), (RequestCode.SEND_MESSAGE_V2, v2)):
        out += [
            (code, conv(header(properties=common)), b"x" * 1024),
            (code, conv(header(queue_id="0")), b"no properties"),
            (code, conv(header(properties=props(TAGS="TagB", color="red", size="10"))), b"user props"),
            (code, conv(header(topic="Tags", queue_id="1", properties=props(KEYS="  a  b ", UNIQ_KEY="u2"))), b"k"),
            (code, conv(header(properties=common, flag="7", sysFlag="0", reconsumeTimes="2")), b""),
            (code, conv(header(properties=common + "dup\x01x\x02")), b"odd props"),
            (code, conv(header(properties="a\x01b")), b"no trailing separator"),
            (code, conv(header(properties="x\x01y\x02x\x01z\x02")), b"duplicate name"),
            (code, conv(header(topic="Unknown")), b"unknown topic, autocreate"),
            (code, conv(header(topic="Unknown", defaultTopic="NoSuch")), b"unknown topic"),
            (code, conv(header(queue_id="9")), b"bad queue id"),
            (code, conv(header(queue_id="-1")), b"random queue"),
            (code, conv(header(queue_id="x1")), b"garbage queue id"),
            (code, conv(header(queue_id="+1")), b"signed queue id"),
            (code, conv(header(queue_id="99999999999")), b"queue id out of int32"),
            (code, conv(header(bornTimestamp=None)), b"missing born timestamp"),
            (code, conv(header(topic=None)), b"missing topic"),
            (code, conv(header(topic="T" * 128)), b"too-long topic"),
            (code, conv(header(topic="bad topic!")), b"illegal topic"),
            (code, conv(header(topic="TBW102")), b"reserved topic"),
            (code, conv(header(topic="SCHEDULE_TOPIC_XXXX")), b"forbidden topic"),
            (code, conv(header(topic="ReadOnly", queue_id="0")), b"read-only topic"),
            (code, conv(header(topic="%RETRY%G", reconsumeTimes="3")), b"retry topic"),
            # level 18 (2 h): the schedule service delivers nothing while the test runs
            (code, conv(header(properties=props(DELAY="18"))), b"delayed"),
            (code, conv(header(properties=props(TRAN_MSG="true", PGROUP="PG"))), b"half message"),
            (code, conv(header(sysFlag="4")), b"transaction sys flag"),
            (code, conv(header(unitMode="true")), b"unit mode"),
            (code, conv(header(properties=props(big="v" * 40000))), b"properties too long"),
            (code, conv(header()), b"b" * (4 * 1024 * 1024 + 1)),
            (code, conv(header(batch="true")), batch_body((0, b"m1", {"TAGS": "t1"}), (0, b"m2", {}))),
        ]
    bh = v2(header(properties=props(WAIT="true"), batch="true"))
    out += [
        (RequestCode.SEND_BATCH_MESSAGE, bh, batch_body((0, b"one", {"UNIQ_KEY": "u1", "KEYS": "k"}),
                                                        (3, b"two" * 100, {"TAGS": "T2", "UNIQ_KEY": "u2"}),
                                                        (0, b"", {"x": "y"}))),
        (RequestCode.SEND_BATCH_MESSAGE, bh, batch_body((0, b"delayed", {"DELAY": "2"}))),
        (RequestCode.SEND_BATCH_MESSAGE, bh, b"\x00\x00\x00\x05junk"),
        (RequestCode.SEND_BATCH_MESSAGE, v2(header(topic="%RETRY%G")), batch_body((0, b"r", {}))),
        (RequestCode.SEND_BATCH_MESSAGE, v2(header(queue_id="7")), batch_body((0, b"q", {}))),
    ]
    return out


def hand_written_headers() -> list[tuple[bytes, bytes]]:
    """JSON headers as other clients write them, with what the C reader must read as
    RemotingCommand.decode does (numbers, booleans and null in extFields, escapes, unicode,
    duplicate keys, whitespace) and what it must decline (floats, lists, surrogates)."""
    cpp = (rb'{"code":10,"extFields":{"AccessKey":"","ONSChannelKey":"","Signature":"",'
           rb'"bornTimestamp":"1700000000000","defaultTopic":"TBW102",'
           rb'"defaultTopicQueueNums":4,"flag":0,"producerGroup":"pg","properties":"%s",'
           rb'"queueId":%s,"reconsumeTimes":"0","sysFlag":0,"topic":"T","unitMode":"0"},'
           rb'"flag":0,"language":"CPP","opaque":%d,"remark":"","version":0}' + b"\n")
    tags = rb"TAGS\u0001cpp\u0002UNIQ_KEY\u0001C0FFEE\u0002"
    v2 = rb'"a":"PG","c":"TBW102","d":"4","f":"0","g":"1700000000000","h":"0","l":"16"'
    return [
        (cpp % (tags, b"2", 21), b"jsoncpp"),  # the stock C++ client: ints in extFields
        (cpp % (tags, b"-0", 22), b"minus zero queue"),  # str(-0) == "0"
        (cpp % (b"", b"1.0", 23), b"a float queue id"),  # declined by the C reader
        (cpp % (b"", b"[1]", 24), b"a list"),
        (rb'{"code":310,"extFields":{%s,"b":"T","e":"1","i":"TAGS\u0001caf\u00e9 \u4e2d\u0002x\u0001\u00fc'
         rb'\\u\"\/\b\f\n\r\t\u0002"},"flag":0,"opaque":25}' % v2, "unicode: caf\u00e9 \u4e2d".encode()),
        (rb'{"code":310,"extFields":{%s,"b":"T","e":"0","i":"TAGS\u0001' % v2 + "raw ü 中".encode() + rb'\u0002"},'
         rb'"opaque":26}', b"raw UTF-8 in the header"),
        (rb'{"code":310,"extFields":{%s,"\u0062":"T","e":"1"},"opaque":27}' % v2, b"an escaped key"),
        (rb'{"code":310,"extFields":{%s,"b":"T","e":"3","e":"1","j":null,"m":false,"k":false},"opaque":28}' % v2,
         b"a repeated key, null, booleans"),
        (rb'{"code":310,"extFields":{%s,"b":"T","e":"1","b":null},"opaque":29}' % v2, b"the topic nulled"),
        (rb' { "opaque" : 30 , "code" : 310 , "extFields" : { %s , "b" : "T" , "e" : "2" } , "x" : [1] } ' % v2,
         b"a list at the top level"),
        (rb' { "opaque" : 31 , "code" : 310 , "extFields" : { %s , "b" : "T" , "e" : "2" } , "x" : 1.5, "y": true,'
         rb' "z": null, "remark": null, "language": "GO" }' % v2 + b"\r\n", b"whitespace, other keys"),
        (rb'{"code":310,"extFields":{%s,"b":"T","e":"1","i":"k\u0001\ud83d\ude00\u0002"},"opaque":32}' % v2,
         b"a surrogate pair"),
        (rb'{"code":310,"extFields":{%s,"b":"T","e":"1","i":"k\u0001\\ud\u0002"},"opaque":33}' % v2,
         b"an escaped backslash before ud"),
        (rb'{"code":310,"extFields":{%s,"b":"T","e":"1"},"opaque":2147483648}' % v2, b"opaque beyond int32"),
        (rb'{"code":310,"extFields":{%s,"b":"T","e":"1"},"opaque":-2147483648,"version":-1}' % v2, b"int32 min"),
        (rb'{"code":310,"extFields":{%s,"b":"T","e":"1"},"flag":1,"opaque":35}' % v2, b"a response flag"),
        (rb'{"code":310,"extFields":{%s,"b":"T","e":"1"},"opaque":36}x' % v2, b"trailing garbage"),
        (rb'{"code":320,"extFields":{%s,"b":"T","e":"1","i":"WAIT\u0001true\u0002"},"opaque":37}' % v2,
         batch_body((0, b"b1", {"TAGS": "x"}), (0, b"b2", {"KEYS": "k1 k2"}))),
    ]


def compare(py: Side, c: Side, payloads) -> list:
    """Sends every payload to both sides; returns the reference's (code, remark) answers."""
    answers = []
    for i, payload in enumerate(payloads):
        a, b = py.send(payload, i), c.send(payload, i)
        assert a == b, f"request {i} ({payload[:300]!r}): reference {a and a[:3]} != fast {b and b[:3]}"
        if a is not None:
            answers.append(a[:2])
    assert py.files() == c.files()
    return answers


def test_every_request_shape_matches_the_reference(sides):
    py, c = sides()
    reqs = requests()
    payloads = [wire(code, ext, body, opaque=100 + i) for i, (code, ext, body) in enumerate(reqs)]
    # the binary ROCKETMQ header goes to process(), whose first step is the same fast path
    payloads += [wire(code, ext, body, 500 + i, SerializeType.ROCKETMQ) for i, (code, ext, body) in enumerate(reqs[:6])]
    # JSON the listener reads but the frame path leaves to RemotingCommand.decode
    ext = ('"a":"PG","b":"T","c":"TBW102","d":4,"e":1,"f":0,"g":1700000000000,"h":0,"j":null,"k":false,'
           '"i":"TAGS\\u0001x\\u0002"')
    for head in ('{"code":310,"extFields":{%s},"flag":0,"opaque":7}' % ext,  # numbers, null, a boolean
                 '{"code" : 310, "extFields" : {%s}, "flag" : 0, "opaque" : 8, "language" : "CPP"}' % ext,
                 '{"code":310,"extFields":{%s,"l":[1]},"flag":0,"opaque":9}' % ext,  # a list: decode's job
                 '{"code":310,"extFields":{%s},"flag":0,"opaque":10,"version":"x"}' % ext,
                 '{"code":310,"extFields":{%s,"b":"\\ud800"},"flag":0,"opaque":11}' % ext):
        head = head.encode()
        payloads.append(struct.pack(">i", len(head)) + head + b"from hand-written JSON")
    payloads += [b"\x00\x00\x00\x05{\"co", b"\x00\x00"]
    # headers the C reader (send_frame_parse) takes or declines; the same answers either way
    payloads += [struct.pack(">i", len(head)) + head + body for head, body in hand_written_headers()]
    answers = compare(py, c, payloads)
    # the common shapes were answered by the fast path (V1, V2, tags, keys, user properties, batches)
    assert c.fast_answers >= 15, c.fast_answers
    assert c.frame_answers >= 13, c.frame_answers  # with the two hand-written JSON headers
    assert c.fast_answers > c.frame_answers  # the ROCKETMQ-header ones
    # closed: the list, bad version and surrogate ones above; an opaque beyond int32, trailing garbage
    assert len(answers) == len(reqs) + 6 + 3 + len(hand_written_headers()) - 2
    assert py.fast_answers == 0
    # the C reader answered the common shapes (V1, V2, batches, the C++ client's numbers, escapes)
    assert c.c_answers >= 25, c.c_answers
    stored = c.ctl.store.get_max_offset_in_queue("T", 1)
    assert stored >= 6 and stored == py.ctl.store.get_max_offset_in_queue("T", 1)


def test_many_sends_roll_the_commitlog_and_match(sides):
    py, c = sides(mappedFileSizeCommitLog=64 * 1024, maxMessageSize=16 * 1024)
    rnd = random.Random(7)
    payloads = []
    for i in range(300):
        body = bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 3000)))
        p = props(UNIQ_KEY=f"U{i}", TAGS=f"tag{i % 3}", KEYS=f"key{i} other{i % 5}") if i % 4 else None
        code = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)[i % 2]
        ext = header(queue_id=str(i % 4), properties=p)
        if i % 7 == 0:
            code, body = RequestCode.SEND_BATCH_MESSAGE, batch_body(*((0, body[:100], {"UNIQ_KEY": f"B{i}.{k}"})
                                                                     for k in range(rnd.randrange(1, 5))))
        payloads.append(wire(code, v2(ext) if code != RequestCode.SEND_MESSAGE else ext, body, opaque=i))
    compare(py, c, payloads)
    assert c.fast_answers == c.frame_answers == 300
    assert len(c.ctl.store.commitlog.queue.files) > 2


def test_fast_put_keeps_the_store_bookkeeping(sides):
    """DefaultMessageStore.put_entry (the one-entry put of the C reader) counts, samples the put
    latency, moves the reput progress and tells long polling as the reference path does."""
    py, c = sides()
    arrived = {s: [] for s in (py, c)}
    for s in (py, c):
        s.ctl.store.message_arriving_listener = lambda t, q, n, s=s: arrived[s].append((t, q, n))
    payloads = [wire(RequestCode.SEND_MESSAGE_V2, v2(header(queue_id=str(i % 4), properties=props(UNIQ_KEY=f"U{i}"))),
                     b"x" * 1024, opaque=i) for i in range(40)]
    compare(py, c, payloads)
    assert c.c_answers == 40
    ps, cs = py.ctl.store, c.ctl.store
    assert cs.stats["put_messages"] == ps.stats["put_messages"] == 40
    assert cs.put_latency.count == ps.put_latency.count >= 40 // 16
    assert cs.reput.reput_from_offset == cs.commitlog.max_offset == ps.commitlog.max_offset
    assert cs.reput.dispatched_count == ps.reput.dispatched_count
    assert cs.last_dispatched_timestamp == ps.last_dispatched_timestamp
    assert arrived[c] == arrived[py] and len(arrived[c]) == 40


def test_disk_full_refusal_is_the_same(sides):
    py, c = sides()
    for s in (py, c):  # the put path's own disk check finds the disk 99% used
        s.ctl.store._disk_probe = lambda root: 0.99
        s.ctl.store._disk_next_check = 0
    payloads = [wire(RequestCode.SEND_MESSAGE_V2, v2(header(properties=props(TAGS="a"))), b"x" * 100, opaque=1),
                wire(RequestCode.SEND_BATCH_MESSAGE, v2(header()), batch_body((0, b"m", {})), opaque=2)]
    answers = compare(py, c, payloads)
    assert [code for code, _ in answers] == [ResponseCode.SERVICE_NOT_AVAILABLE] * 2, answers
    assert "disk full" in answers[0][1]
    assert c.fast_answers == 2  # answered from the frame, with the store's own refusal
    assert c.ctl.store.commitlog.max_offset == 0


def test_truncated_and_mutated_frames(sides):
    py, c = sides()
    rnd = random.Random(24)
    payloads = []
    base = [wire(code, ext, body, opaque=i) for i, (code, ext, body) in enumerate(requests()[:5] + requests()[-5:])]
    for p in base:
        payloads += [p[:n] for n in range(0, len(p), max(1, len(p) // 200))]
        for _ in range(150):
            m = bytearray(p)
            for _ in range(rnd.randrange(1, 4)):
                m[rnd.randrange(len(m))] = rnd.randrange(256)
            payloads.append(bytes(m))
    compare(py, c, payloads)
    assert c.fast_answers > 0 and c.c_answers > 0


def test_listener_writes_the_replies_of_one_read_in_one_call(sides):
    """RemotingConnection.data_received with the fast path on: three sends in one read get one
    write of three frames; a request the fast path declines in between is answered in the same
    write, in request order."""
    from rmq.server.remoting_server import RemotingConnection
    _, c = sides()
    disp = c.conn.dispatcher
    disp.fast_frame = c.proc.fast.on_frame
    writes = []

    class Transport:
        def write(self, data):
            writes.append(bytes(data))

        def writelines(self, parts):
            writes.append(b"".join(parts))

        def is_closing(self):
            return False

    conn = RemotingConnection(disp)
    conn.transport = Transport()
    conn.remote_host = Conn.remote_host

    def framed(payload):
        return struct.pack(">i", len(payload)) + payload

    sends = [framed(wire(RequestCode.SEND_MESSAGE_V2, v2(header(queue_id=str(i))), b"m%d" % i, opaque=i))
             for i in range(3)]
    conn.data_received(b"".join(sends))
    assert len(writes) == 1 and c.fast_answers == 3
    replies, at = [], 0
    while at < len(writes[0]):
        n = struct.unpack_from(">i", writes[0], at)[0]
        replies.append(RemotingCommand.decode(writes[0][at + 4:at + 4 + n]))
        at += 4 + n
    assert [(r.opaque, r.code, r.ext_fields["queueId"]) for r in replies] == [(0, 0, "0"), (1, 0, "1"), (2, 0, "2")]
    writes.clear()
    declined = framed(wire(RequestCode.SEND_MESSAGE_V2, v2(header(queue_id="9")), b"bad queue", opaque=10))
    conn.data_received(sends[0][:-2].replace(b'"opaque":0', b'"opaque":7') + b"m0" + declined + sends[1])
    got, at = [], 0  # the declined request's reply joins the same write (issue 24), in request order
    assert len(writes) == 1
    while at < len(writes[0]):
        n = struct.unpack_from(">i", writes[0], at)[0]
        got.append(RemotingCommand.decode(writes[0][at + 4:at + 4 + n]))
        at += 4 + n
    assert [(r.opaque, r.code) for r in got] == [(7, 0), (10, 1), (1, 0)]


def test_header_mutations_read_by_the_c_reader_match_the_reference(sides):
    """Mutations aimed at the JSON header (the C reader's input): characters that matter to JSON
    put at random places, bytes deleted or doubled; every answer is the reference's."""
    py, c = sides()
    rnd = random.Random(2424)
    base = [wire(code, ext, body, opaque=i) for i, (code, ext, body) in enumerate(requests()[:4])]
    base += [struct.pack(">i", len(h)) + h + b for h, b in hand_written_headers()[:2]]
    specials = b'"\\{}[],:0123456789-.eEtrufalsn u\x00\x01\x7f\xc3\xa9\xed\xa0\x80'
    payloads = []
    for p in base:
        hlen = struct.unpack_from(">i", p, 0)[0] & 0xFFFFFF
        for _ in range(120):
            m = bytearray(p)
            at = 4 + rnd.randrange(hlen)
            op = rnd.randrange(3)
            if op == 0:
                m[at] = specials[rnd.randrange(len(specials))]
            elif op == 1:  # delete a byte
                del m[at]
            else:  # double one
                m[at:at] = m[at:at + 1]
            payloads.append(bytes(m))
            if op:  # and the same with the header length word following the change
                struct.pack_into(">i", m, 0, hlen + (1 if op == 2 else -1))
                payloads.append(bytes(m))
    compare(py, c, payloads)
    assert c.c_answers > 0
