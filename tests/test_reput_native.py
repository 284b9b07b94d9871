"""ReputMessageService.do_reput with the walk in C (issue 24) against the Python walk, the
reference: the same consumequeue and index files byte for byte, the same dispatch progress, for
a log of mixed units (tags, keys, unique keys, prepared / rollback / commit transactions, delay
levels, IPv6 hosts, several topics and queues, units across commitlog files)."""
from __future__ import annotations

import random

import pytest

from rmq import native
from rmq.store import DefaultMessageStore, Message
from rmq.store import reput as reput_mod

from .conftest import small_config
from .test_native import STORE_TS, _files, scratch  # noqa: F401 - scratch is a fixture

pytestmark = pytest.mark.skipif(native.ext is None, reason="the C extension is not built")


def _messages(seed: int, n: int) -> list[Message]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        topic = rnd.choice(["RA", "RB", "R-c.1|x%", "SCHEDULE_TOPIC_XXXX"])
        props = {}
        if rnd.random() < 0.5:
            props["TAGS"] = rnd.choice(["a", "tag-b", "标签", "x" * 40])
        if rnd.random() < 0.4:
            props["KEYS"] = " ".join(rnd.choice(["k1", "k2", "ключ", f"k{i}"]) for _ in range(rnd.randint(1, 3)))
        if rnd.random() < 0.3:
            props["UNIQ_KEY"] = f"U{i:08X}"
        if topic == "SCHEDULE_TOPIC_XXXX":
            props["DELAY"] = str(rnd.choice([1, 3, 18, 99, 0]))
        sys_flag = rnd.choice([0, 0, 0, 0x4, 0x8, 0xC])
        host = ("::1", 4000 + i) if rnd.random() < 0.2 else ("10.0.0.%d" % (i % 250), 5000)
        out.append(Message(topic, bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 300))),
                           queue_id=rnd.randrange(3), properties=props, sys_flag=sys_flag, born_host=host,
                           born_timestamp=1_700_000_000_000 + i))
    return out


def _run(path, native_walk: bool, msgs: list[Message], **kw) -> DefaultMessageStore:
    s = DefaultMessageStore(small_config(str(path), reputMode="thread", reputIntervalMs=1, **kw),
                            clock=lambda: STORE_TS).load()
    s.reput.native_walk = native_walk
    s.start()
    for i in range(0, len(msgs), 97):
        for m in msgs[i:i + 97]:
            assert s.put_message(m).ok
        if i % 3 == 0:
            assert s.wait_dispatched(10)
    assert s.wait_dispatched(10)
    return s


def _compare(scratch, msgs, **kw):  # noqa: F811
    a = _run(scratch(), True, msgs, **kw)
    b = _run(scratch(), False, msgs, **kw)
    try:
        assert len(a.commitlog.queue.files) > 1  # units on both sides of a file's end
        assert _files(a, "commitlog") == _files(b, "commitlog")
        cq_a, cq_b = _files(a, "consumequeue"), _files(b, "consumequeue")
        assert cq_a and cq_a == cq_b
        ix_a, ix_b = _files(a, "index"), _files(b, "index")
        assert ix_a and ix_a == ix_b
        assert (a.reput.reput_from_offset, a.reput.dispatched_count, a.last_dispatched_timestamp) == \
               (b.reput.reput_from_offset, b.reput.dispatched_count, b.last_dispatched_timestamp)
        assert a.reput.reput_from_offset == a.commitlog.max_offset
        assert a.reput.dispatched_count == len(msgs)
    finally:
        a.shutdown()
        b.shutdown()


@pytest.mark.parametrize("seed", [1, 2])
def test_native_walk_gives_the_python_walks_files(scratch, seed):  # noqa: F811
    _compare(scratch, _messages(seed, 700))


def test_native_walk_in_short_steps_and_a_unit_longer_than_a_step(scratch, monkeypatch):  # noqa: F811
    """_WALK_BYTES smaller than most units: every walk covers one unit or falls back to the log's end."""
    monkeypatch.setattr(reput_mod, "_WALK_BYTES", 180)
    _compare(scratch, _messages(3, 400))


def test_native_walk_of_a_log_ending_in_prepared_units(scratch):  # noqa: F811
    """Prepared units without keys need no dispatch: the walk still moves past them."""
    msgs = [Message("TP", b"x%d" % i, sys_flag=0x4) for i in range(900)]
    _compare(scratch, [Message("TP", b"first", properties={"KEYS": "k"})] + msgs)
