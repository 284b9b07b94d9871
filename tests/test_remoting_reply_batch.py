"""Remoting replies of one read written in one call (issue 24): requests that arrive together are
answered with one transport write, fast-path and processor replies alike, in request order;
a processor that awaits answers later, and a large body is written without being joined."""
from __future__ import annotations

import asyncio

from rmq.remoting import RemotingCommand
from rmq.remoting.command import FLAG_RESPONSE
from rmq.server.remoting_server import _BATCH_BODY_MAX, Dispatcher, RemotingConnection

SYNC, ASYNC, BIG, FAST = 901, 902, 903, 904


class _Transport(asyncio.Transport):
    def __init__(self):
        super().__init__()
        self.writes: list[bytes] = []

    def write(self, data):
        self.writes.append(bytes(data))

    def writelines(self, parts):
        self.writes.append(b"".join(bytes(p) for p in parts))

    def is_closing(self):
        return False

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 5555), "sockname": ("127.0.0.1", 10911)}.get(name, default)

    def close(self):
        pass

    def abort(self):
        pass


def _frames(blob: bytes) -> list[RemotingCommand]:
    out, pos = [], 0
    while pos < len(blob):
        n = int.from_bytes(blob[pos:pos + 4], "big")
        out.append(RemotingCommand.decode(blob[pos + 4:pos + 4 + n]))
        pos += 4 + n
    return out


def _serve(requests: list[RemotingCommand], offered: list | None = None,
           reads: list[bytes] | None = None) -> tuple[list[bytes], list[RemotingCommand]]:
    """The writes and replies of one read holding `requests` (or of the reads `reads`); `offered`
    collects the opaque of every payload handed to the fast path."""
    d = Dispatcher("test")
    d.register(SYNC, lambda conn, req: RemotingCommand.response_to(req, 0, remark=f"sync {req.opaque}"))

    async def later(conn, req):
        await asyncio.sleep(0)
        return RemotingCommand.response_to(req, 0, remark=f"async {req.opaque}")
    d.register(ASYNC, later)
    d.register(BIG, lambda conn, req: RemotingCommand.response_to(req, 0, body=b"x" * (_BATCH_BODY_MAX + 1)))

    def fast(conn, payload):
        cmd = RemotingCommand.decode(payload)
        if offered is not None:
            offered.append(cmd.opaque)
        if cmd.code != FAST:
            return None
        return RemotingCommand.response_to(cmd, 0, remark=f"fast {cmd.opaque}").encode()
    d.fast_frame = fast

    async def run():
        conn = RemotingConnection(d)
        t = _Transport()
        conn.connection_made(t)
        for data in reads if reads is not None else [b"".join(r.encode() for r in requests)]:
            conn.data_received(data)
        for _ in range(20):
            await asyncio.sleep(0)
        return t.writes
    writes = asyncio.run(run())
    return writes, [c for w in writes for c in _frames(w)]


def _req(code: int, opaque: int) -> RemotingCommand:
    return RemotingCommand.request(code, {"a": "b"}, opaque=opaque)


def test_one_read_one_write_in_request_order():
    reqs = [_req(SYNC, 1), _req(FAST, 2), _req(SYNC, 3), _req(FAST, 4), _req(SYNC, 5)]
    writes, replies = _serve(reqs)
    assert len(writes) == 1
    assert [(r.opaque, r.remark) for r in replies] == [(1, "sync 1"), (2, "fast 2"), (3, "sync 3"), (4, "fast 4"),
                                                         (5, "sync 5")]
    assert all(r.flag & FLAG_RESPONSE for r in replies)


def test_awaited_processors_answer_after_the_read():
    writes, replies = _serve([_req(SYNC, 1), _req(ASYNC, 2), _req(FAST, 3)])
    assert len(writes) == 2
    assert [r.opaque for r in _frames(writes[0])] == [1, 3]
    assert [(r.opaque, r.remark) for r in _frames(writes[1])] == [(2, "async 2")]


def test_a_large_body_is_written_on_its_own_after_what_came_before():
    writes, replies = _serve([_req(SYNC, 1), _req(BIG, 2), _req(SYNC, 3)])
    assert [r.opaque for r in replies] == [1, 2, 3]
    assert len(replies[1].body) == _BATCH_BODY_MAX + 1
    assert len(writes) == 3


def test_oneway_requests_get_no_reply():
    oneway = RemotingCommand.request(SYNC, {}, opaque=9, oneway=True)
    writes, replies = _serve([oneway, _req(SYNC, 10)])
    assert [r.opaque for r in replies] == [10] and len(writes) == 1


def test_reads_of_one_request_each():
    """The common read, one request: the fast path's answer is written at once; a request it
    declines goes to its processor (offered to the fast path once, not twice)."""
    offered: list = []
    reqs = [_req(FAST, 1), _req(SYNC, 2), _req(ASYNC, 3), _req(FAST, 4)]
    writes, replies = _serve([], offered, [r.encode() for r in reqs])
    assert offered == [1, 2, 3, 4]
    assert [(r.opaque, r.remark) for r in replies] == [(1, "fast 1"), (2, "sync 2"), (4, "fast 4"), (3, "async 3")]
    assert len(writes) == 4 and all(r.flag & FLAG_RESPONSE for r in replies)
    # a request split over two reads is answered once it is whole
    frame = _req(FAST, 5).encode()
    writes, replies = _serve([], None, [frame[:7], frame[7:]])
    assert [(r.opaque, r.remark) for r in replies] == [(5, "fast 5")]
