"""The idempotent-consume helper (SPEC §10): duplicates dropped, failures retried, crashes recovered."""
from __future__ import annotations

import threading

import pytest

from rmq.client.idempotent import MemoryDedupStore, SQLiteDedupStore, idempotent_listener
from rmq.client.message import ConsumeStatus
from rmq.common.message import Message


def _msg(key=None, uniq=None, topic="T"):
    props = {}
    if key:
        props["KEYS"] = key
    if uniq:
        props["UNIQ_KEY"] = uniq
    return Message(topic, b"x", properties=props)


@pytest.fixture(params=["sqlite", "memory"])
def store(request, tmp_path):
    now = [1000.0]
    if request.param == "sqlite":
        s = SQLiteDedupStore(str(tmp_path / "d.sqlite3"), processing_timeout_s=30, clock=lambda: now[0])
    else:
        s = MemoryDedupStore(processing_timeout_s=30, clock=lambda: now[0])
    s.now = now
    yield s


def test_duplicates_are_consumed_once(store):
    seen = []
    listener = idempotent_listener(lambda msgs: seen.extend(m.properties["KEYS"] for m in msgs)
                                   or ConsumeStatus.CONSUME_SUCCESS, store)
    assert listener([_msg("order-1"), _msg("order-2")]) is ConsumeStatus.CONSUME_SUCCESS
    assert listener([_msg("order-1")]) is ConsumeStatus.CONSUME_SUCCESS  # redelivered: skipped
    assert listener([_msg("order-2"), _msg("order-3")]) is ConsumeStatus.CONSUME_SUCCESS
    assert seen == ["order-1", "order-2", "order-3"]
    assert store.is_done("T#order-1") and not store.is_done("T#order-9")


def test_failure_releases_the_claim_so_the_retry_consumes(store):
    attempts = []

    def flaky(msgs):
        attempts.append(len(attempts))
        if len(attempts) == 1:
            return ConsumeStatus.RECONSUME_LATER
        if len(attempts) == 2:
            raise RuntimeError("boom")
        return ConsumeStatus.CONSUME_SUCCESS

    listener = idempotent_listener(flaky, store)
    assert listener([_msg("k")]) is ConsumeStatus.RECONSUME_LATER
    with pytest.raises(RuntimeError):
        listener([_msg("k")])
    assert listener([_msg("k")]) is ConsumeStatus.CONSUME_SUCCESS
    assert listener([_msg("k")]) is ConsumeStatus.CONSUME_SUCCESS
    assert len(attempts) == 3


def test_a_claim_left_by_a_crashed_consumer_expires(store):
    assert store.claim("T#k")
    assert not store.claim("T#k")  # someone is consuming it
    store.now[0] += 31
    assert store.claim("T#k")  # that consumer vanished: take over
    store.mark_done("T#k")
    store.now[0] += 1000
    assert not store.claim("T#k")  # done stays done


def test_uniq_key_is_used_without_keys_and_keyless_pass_through(store):
    seen = []
    listener = idempotent_listener(lambda msgs: seen.extend(msgs) or ConsumeStatus.CONSUME_SUCCESS, store)
    listener([_msg(uniq="7F00000100002A9F0000000000000000"), _msg()])
    listener([_msg(uniq="7F00000100002A9F0000000000000000"), _msg()])
    assert len(seen) == 3  # the keyless message cannot be deduplicated


def test_concurrent_consumers_claim_each_key_once(tmp_path):
    path = str(tmp_path / "shared.sqlite3")
    stores = [SQLiteDedupStore(path) for _ in range(4)]  # separate connections, as separate processes
    won = []
    lock = threading.Lock()

    def worker(s):
        for i in range(200):
            if s.claim(f"k{i}"):
                with lock:
                    won.append(i)
                s.mark_done(f"k{i}")

    threads = [threading.Thread(target=worker, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(won) == list(range(200))
    for s in stores:
        s.close()


def test_sqlite_store_forgets_old_finished_keys_on_open_and_every_purge_every(tmp_path, monkeypatch):
    from rmq.client import idempotent
    now = [1000.0]
    path = str(tmp_path / "dedup.sqlite3")
    store = idempotent.SQLiteDedupStore(path, retention_s=60, clock=lambda: now[0])
    assert store.claim("old") and store.mark_done("old") is None
    store.close()
    now[0] += 30
    store = idempotent.SQLiteDedupStore(path, retention_s=60, clock=lambda: now[0])
    assert store.is_done("old")                     # 30 s old: kept
    store.close()
    now[0] += 31
    store = idempotent.SQLiteDedupStore(path, retention_s=60, clock=lambda: now[0])
    assert not store.is_done("old")                 # 61 s old: purged when the store opened
    monkeypatch.setattr(idempotent, "PURGE_EVERY", 3)
    assert store.claim("a") and store.mark_done("a") is None
    now[0] += 100
    for k in ("b", "c"):
        assert store.claim(k)
        store.mark_done(k)                          # the third finished key triggers a purge
    assert not store.is_done("a") and store.is_done("b") and store.is_done("c")
    store.close()
