"""The C pull path (store.get_message_body over rmq._native.pull_units) against the reference
(store.get_message): the same PULL_MESSAGE requests to PullMessageProcessor(fast=True) and
PullMessageProcessor(fast=False) over one broker give the same response code, remark, header
fields and body bytes, for offsets in range, at and past the end, below the minimum, tag filters,
max message counts and byte limits; pull_units refuses bad arguments with an exception, and a
real broker keeps answering after truncated and mutated PULL_MESSAGE frames."""
from __future__ import annotations

import asyncio
import random
import socket
import struct

import pytest

from rmq import native
from rmq.broker.controller import BrokerController
from rmq.common.message import decode_message
from rmq.config import load_config
from rmq.remoting import RemotingCommand, RequestCode, ResponseCode
from rmq.server.processors import BrokerServices, PullMessageProcessor
from rmq.server.processors.pull import FLAG_SUBSCRIPTION
from rmq.store import Message

pytestmark = pytest.mark.skipif(native.ext is None, reason="needs the C extension rmq._native")

TAGS = ["TagA", "TagB", "TagC", None]


class Conn:
    remote_addr = "127.0.0.1:45678"
    closed = False


@pytest.fixture
def broker(tmp_path):
    ctl = BrokerController(load_config(None, {"storePathRootDir": str(tmp_path / "store"),
                                              "mappedFileSizeCommitLog": 32 * 1024,
                                              "maxMessageSize": 16 * 1024,
                                              "mappedFileSizeConsumeQueue": 20 * 64}))
    ctl.start()
    try:
        ctl.topic_config_manager.create_if_absent("PullT", 2)
        rnd = random.Random(7)
        for i in range(300):   # several commitlog and consumequeue files
            tag = TAGS[i % 4]
            props = {"TAGS": tag} if tag else {}
            body = bytes(rnd.randrange(256) for _ in range(rnd.choice((1, 50, 700))))
            r = ctl.store.put_message(Message("PullT", body, queue_id=i % 2, properties=props))
            assert r.ok, r
        assert len(ctl.store.commitlog.queue.files) > 2
        svc = BrokerServices(ctl, broker_addr="127.0.0.1:10911")
        yield ctl, PullMessageProcessor(svc, fast=True), PullMessageProcessor(svc, fast=False)
    finally:
        ctl.shutdown()


def pull(queue_id: int, offset: int, *, max_nums: int = 32, expr: str = "*", expr_type: str = "TAG",
         max_bytes: int | None = None, topic: str = "PullT") -> RemotingCommand:
    ext = {"consumerGroup": "cg_pull", "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
           "maxMsgNums": str(max_nums), "sysFlag": str(FLAG_SUBSCRIPTION), "commitOffset": "0",
           "suspendTimeoutMillis": "0", "subscription": expr, "subVersion": "0", "expressionType": expr_type}
    if max_bytes is not None:
        ext["maxMsgBytes"] = str(max_bytes)
    return RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=ext, opaque=1)


def answer(proc: PullMessageProcessor, req: RemotingCommand):
    resp = proc.process(Conn(), req)
    assert isinstance(resp, RemotingCommand), resp   # sysFlag has no SUSPEND: never held
    return resp.code, resp.remark, dict(resp.ext_fields or {}), bytes(resp.body or b"")


SHAPES = [dict(offset=o, max_nums=n) for o in (0, 1, 17, 60, 149, 150, 151, 1000, -1) for n in (1, 3, 32, 64)]
SHAPES += [dict(offset=o, expr=e) for o in (0, 5, 140) for e in ("TagA", "TagB || TagC", "TagZ", "TagA||TagZ", "*")]
SHAPES += [dict(offset=o, max_bytes=b) for o in (0, 30) for b in (1, 100, 800, 5000, 0, -5)]


@pytest.mark.parametrize("queue_id", [0, 1])
def test_fast_pull_answers_as_the_reference(broker, queue_id, monkeypatch):
    ctl, fast, slow = broker
    calls = []
    real = ctl.store.get_message_body
    monkeypatch.setattr(ctl.store, "get_message_body", lambda *a, **k: calls.append(1) or real(*a, **k))
    seen_found = 0
    for shape in SHAPES:
        req = pull(queue_id, **shape)
        a, b = answer(fast, req), answer(slow, req)
        assert a == b, (shape, a[:3], b[:3])
        if a[0] == ResponseCode.SUCCESS:
            seen_found += 1
            n = 0
            pos = 0
            while pos < len(a[3]):      # the body is whole units back to back
                m = decode_message(a[3], pos)
                pos += m.store_size
                n += 1
            assert 1 <= n <= max(1, shape.get("max_nums", 32))
    assert seen_found > 10
    assert len(calls) >= seen_found          # the fast processor did take the C path
    codes = {answer(fast, pull(queue_id, **s))[0] for s in SHAPES}
    assert {ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED} <= codes


def test_fast_pull_after_cleanup_and_on_missing_queue(broker):
    ctl, fast, slow = broker
    for req in (pull(0, 0, topic="NoSuchTopic"), pull(5, 0), pull(0, 0, expr="a||", expr_type="TAG")):
        assert answer(fast, req) == answer(slow, req)
    # commitlog units below the commitlog's min offset are skipped as removed by both paths
    cl = ctl.store.commitlog
    real_min = type(cl).min_offset
    try:
        type(cl).min_offset = property(lambda self: self.queue.files[1].file_from_offset)
        for o in (0, 10, 40):
            req = pull(0, o)
            assert answer(fast, req) == answer(slow, req)
    finally:
        type(cl).min_offset = real_min


def test_pull_units_refuses_bad_arguments(broker):
    ctl, _, _ = broker
    cq = ctl.store.get_consume_queue("PullT", 0)
    mf = cq.mfq.files[0]
    files, size = ctl.store.commitlog.queue.files, ctl.store.commitlog.file_size
    ext = native.ext
    with pytest.raises(ValueError):
        ext.pull_units(mf.mm, 0, 10 ** 9, files, size, 0, 1024, 32, None)      # range past the buffer
    with pytest.raises(ValueError):
        ext.pull_units(mf.mm, 40, 20, files, size, 0, 1024, 32, None)         # start after end
    with pytest.raises(ValueError):
        ext.pull_units(mf.mm, 0, 20, files, 0, 0, 1024, 32, None)             # file size
    with pytest.raises(TypeError):
        ext.pull_units(mf.mm, 0, 20, files, size, 0, 1024, 32, [1, 2])       # codes not a tuple
    with pytest.raises(ValueError):
        ext.pull_units(mf.mm, 0, 20, files, size, 0, 1024, 32, (2 ** 40,))   # code not int32
    body, n, consumed, removed, last_phy = ext.pull_units(mf.mm, 0, 100, files, size, 0, 10 ** 6, 32, None)
    assert n == consumed == 5 and removed == 0 and last_phy >= 0
    assert decode_message(body, 0).topic == "PullT"


# ------------------------------------------------------------------ a real broker and broken frames
def _frame(cmd: RemotingCommand) -> bytes:
    return cmd.encode()


def test_broker_survives_truncated_and_mutated_pull_frames(tmp_path):
    """Frames cut short or with bytes flipped get an error answer or a closed connection; the
    broker then answers a good pull on a new connection, identical to before."""
    from rmq.server.broker_listener import start_remoting_listener

    async def main():
        ctl = BrokerController(load_config(None, {"storePathRootDir": str(tmp_path / "s"), "listenPort": 0}))
        ctl.start()
        server = None
        try:
            ctl.topic_config_manager.create_if_absent("PullT", 1)
            for i in range(40):
                assert ctl.store.put_message(Message("PullT", b"m%d" % i, queue_id=0,
                                                     properties={"TAGS": "TagA"})).ok
            server, addr = await start_remoting_listener(ctl, "127.0.0.1", 0, namesrv_addr="")
            host, port = addr.rsplit(":", 1)

            async def roundtrip(data: bytes, want_answer: bool) -> bytes | None:
                r, w = await asyncio.open_connection(host, int(port))
                try:
                    w.write(data)
                    await w.drain()
                    if not want_answer:
                        w.write_eof()
                    try:
                        head = await asyncio.wait_for(r.readexactly(4), 5)
                    except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError):
                        return None
                    (n,) = struct.unpack(">i", head)
                    return head + await asyncio.wait_for(r.readexactly(n), 5)
                finally:
                    w.close()

            good = _frame(pull(0, 3, max_nums=8))
            before = await roundtrip(good, True)
            assert before is not None
            resp = RemotingCommand.decode(before[4:])
            assert resp.code == ResponseCode.SUCCESS and len(resp.body) > 0
            rnd = random.Random(11)
            for cut in (1, 3, 4, 7, 9, len(good) // 2, len(good) - 1):
                await roundtrip(good[:cut], False)
            for _ in range(60):
                bad = bytearray(good)
                for _ in range(rnd.randint(1, 4)):
                    bad[rnd.randrange(4, len(bad))] = rnd.randrange(256)
                await roundtrip(bytes(bad), False)
            after = await roundtrip(good, True)
            assert after is not None
            r2 = RemotingCommand.decode(after[4:])
            assert (r2.code, r2.ext_fields, bytes(r2.body)) == (resp.code, resp.ext_fields, bytes(resp.body))
        finally:
            if server is not None:
                await server.close_async()
            ctl.shutdown()
    asyncio.run(main())


# ------------------------------------------------------------------ the client's decode of a pull body
def _py_decode(body, **kw):
    from rmq.client.message import decode_messages
    real = native.ext
    native.ext = None
    try:
        return decode_messages(body, "broker-a", **kw)
    finally:
        native.ext = real


def test_client_batch_decode_matches_the_python_decoder(broker, tmp_path):
    """rmq._native.decode_units (through rmq.client.message.decode_messages) gives the same
    MessageExt list as decode_message per unit; malformed bodies are left to the Python decoder."""
    from rmq.client.message import MessageExt, decode_messages
    from rmq.common.message import CorruptMessage
    ctl, fast, _ = broker
    ctl.store.put_message(Message("PullT", "héllo".encode(), queue_id=0,
                                  properties={"TAGS": "T\u00e9", "KEYS": "k1 k2", "odd": "a\x01b", "UNIQ_KEY": "X"}))
    bodies = []
    for o in (0, 20, 100, 150):
        resp = fast.process(Conn(), pull(0, o, max_nums=32))
        if resp.body:
            bodies.append(bytes(resp.body))
    assert len(bodies) >= 3
    for body in bodies:
        for kw in ({}, {"min_offset": 0, "max_offset": 151}):
            got = decode_messages(body, "broker-a", **kw)
            want = _py_decode(body, **kw)
            assert got == want and all(type(m) is MessageExt for m in got)
            assert got[0].broker_name == "broker-a"
    assert native.ext.decode_units(bodies[0], MessageExt, "b", ()) is not None
    rnd = random.Random(3)
    for _ in range(300):
        bad = bytearray(rnd.choice(bodies))
        if rnd.random() < 0.3:
            bad = bad[:rnd.randrange(len(bad))]
        else:
            for _ in range(rnd.randint(1, 3)):
                bad[rnd.randrange(len(bad))] = rnd.randrange(256)
        try:
            want = _py_decode(bytes(bad))
        except (CorruptMessage, ValueError, UnicodeError, OSError) as exc:
            want = type(exc)
        try:
            got = decode_messages(bytes(bad), "broker-a")
        except (CorruptMessage, ValueError, UnicodeError, OSError) as exc:
            got = type(exc)
        assert got == want


def _count_units(body: bytes) -> int:
    n = pos = 0
    while pos < len(body):
        pos += struct.unpack_from(">i", body, pos)[0]
        n += 1
    return n


def test_max_transfer_count_caps_a_pull_on_both_paths(broker):
    """maxTransferCountOnMessageInMemory (store config, default 32) caps maxMsgNums on the C path
    and the reference alike; raised, one pull carries more, with the same answer on both paths;
    maxTransferBytesOnMessageInMemory caps the bytes."""
    ctl, fast, ref = broker
    cfg = ctl.cfg.store
    assert cfg.maxTransferCountOnMessageInMemory == 32
    for proc in (fast, ref):
        code, _, fields, body = answer(proc, pull(0, 0, max_nums=100))
        assert code == ResponseCode.SUCCESS and _count_units(body) == 32 and fields["nextBeginOffset"] == "32"
    cfg.maxTransferCountOnMessageInMemory = 100
    # (a pull stops at the end of a consumequeue file: 64 units each here)
    assert answer(fast, pull(0, 0, max_nums=50)) == answer(ref, pull(0, 0, max_nums=50))
    code, _, fields, body = answer(fast, pull(0, 0, max_nums=50))
    assert code == ResponseCode.SUCCESS and _count_units(body) == 50 and fields["nextBeginOffset"] == "50"
    cfg.maxTransferBytesOnMessageInMemory = 2000
    a = answer(fast, pull(0, 0, max_nums=50))
    assert a == answer(ref, pull(0, 0, max_nums=50)) and a[0] == ResponseCode.SUCCESS
    assert 0 < _count_units(a[3]) < 50 and len(a[3]) <= 2000 + 1000


def test_max_transfer_keys_are_validated(tmp_path):
    for key in ("maxTransferCountOnMessageInMemory", "maxTransferBytesOnMessageInMemory"):
        with pytest.raises(ValueError, match=key):
            load_config(None, {"storePathRootDir": str(tmp_path / "s"), key: 0})


def test_client_decode_fills_slotted_messages_in_place_only_when_the_layout_fits(broker):
    """decode_units fills rmq.client.message.MessageExt's slots directly (no __init__ call per
    message) with the same result as the constructor; a class whose layout does not fit (a
    __post_init__, a __dict__, other fields) is still built by calling it, and a malformed layout
    argument is a TypeError, not a crash."""
    import dataclasses

    from rmq.client.message import MessageExt
    from rmq.common.message import _slot_layout, decode_units_native
    ctl, fast, _ = broker
    body = bytes(fast.process(Conn(), pull(1, 0, max_nums=32)).body)
    layout = _slot_layout(MessageExt)
    assert layout is not None and len(layout[0]) == 18 and layout[1] == (None,)
    filled = native.ext.decode_units(body, MessageExt, "b", (("MIN_OFFSET", "0"),), layout)
    called = native.ext.decode_units(body, MessageExt, "b", (("MIN_OFFSET", "0"),))
    assert filled == called and len(filled) == 32
    m = filled[0]
    assert m.transaction_id is None and m.broker_name == "b" and m.properties["MIN_OFFSET"] == "0"
    m.transaction_id = "t"                       # the slots behave as the constructor's
    assert dataclasses.replace(m, transaction_id=None) == called[0]

    seen = []

    @dataclasses.dataclass(slots=True)
    class Watched(MessageExt):
        def __post_init__(self):
            seen.append(self.queue_offset)

    assert _slot_layout(Watched) is None
    got = decode_units_native(body, Watched, "b")
    assert [x.queue_offset for x in got] == seen == list(range(32))

    @dataclasses.dataclass(slots=True)
    class OwnInit(MessageExt):                    # its own __init__ (dataclass keeps it): called
        def __init__(self, *a):
            seen.append(-1)
            MessageExt.__init__(self, *a)

    assert _slot_layout(OwnInit) is None
    own = decode_units_native(body, OwnInit, "b")
    assert seen.count(-1) == 32 and all(type(x) is OwnInit for x in own)
    assert [(x.queue_offset, x.body, x.broker_name) for x in own] == [(m.queue_offset, m.body, "b") for m in called]

    class Plain:                                  # not a dataclass: called with 17 arguments
        def __init__(self, *a):
            self.a = a
    assert _slot_layout(Plain) is None
    assert decode_units_native(body, Plain, "b")[0].a[12] == 0
    for bad in ((1, 2, 3), ("x", ()), ((), ())):
        with pytest.raises(TypeError):
            native.ext.decode_units(body, MessageExt, "b", (), bad)
    # strings, or member descriptors of an unrelated class: not used (the constructor is called)
    plain = native.ext.decode_units(body, MessageExt, "b", ())
    names = (tuple(f.name for f in dataclasses.fields(MessageExt)), (None,))

    @dataclasses.dataclass(slots=True)
    class Unrelated:
        a0: int = 0; a1: int = 0; a2: int = 0; a3: int = 0; a4: int = 0; a5: int = 0  # noqa: E702
        a6: int = 0; a7: int = 0; a8: int = 0; a9: int = 0; b0: int = 0; b1: int = 0  # noqa: E702
        b2: int = 0; b3: int = 0; b4: int = 0; b5: int = 0; b6: int = 0; b7: int = 0  # noqa: E702
    foreign = (tuple(Unrelated.__dict__[f.name] for f in dataclasses.fields(Unrelated)), (None,))
    for lay in (names, foreign):
        assert native.ext.decode_units(body, MessageExt, "b", (), lay) == plain
