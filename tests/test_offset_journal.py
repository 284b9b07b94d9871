"""The consumer offsets journal (rmq/broker/offsets.py, issue 27): a Kafka commit (durable=True,
then journal_sync) is on disk before it is acknowledged and comes back after a crash that skipped
the periodic persist; RocketMQ commits keep RocketMQ's 5 s persist; persist compacts the journal."""
from __future__ import annotations

import json
import logging
import os

from kafka_bridge.group_coordinator import GroupCoordinator
from rmq.broker.offsets import ConsumerOffsetManager


def _journals(d) -> list[str]:
    return sorted(n for n in os.listdir(d) if ".journal." in n)


def test_a_journaled_commit_survives_a_crash_before_the_persist(tmp_path):
    om = ConsumerOffsetManager(str(tmp_path))
    om.load()
    om.commit_offset("kgroup", "T", 0, 41, durable=True)
    om.commit_offset("kgroup", "T", 1, 7, durable=True)
    om.commit_offset("rgroup", "T", 0, 99)  # a RocketMQ client's commit: memory until the persist
    om.journal_sync()
    # the process dies here: no persist, the journal's file descriptor never closed
    after = ConsumerOffsetManager(str(tmp_path))
    after.load()
    assert after.query_offset("kgroup", "T", 0) == 41 and after.query_offset("kgroup", "T", 1) == 7
    assert after.query_offset("rgroup", "T", 0) == -1  # RocketMQ semantics: lost with the last 5 s
    assert after.dirty  # the replayed commits go to consumerOffset.json at the next persist


def test_persist_compacts_and_later_generations_replay_in_order(tmp_path):
    om = ConsumerOffsetManager(str(tmp_path), journal_fsync=True)  # SYNC_FLUSH: fdatasync'ed as well
    om.load()
    for off in range(1, 6):
        om.commit_offset("g", "T", 0, off, durable=True)
        om.journal_sync()
    assert _journals(tmp_path) == ["consumerOffset.journal.1"]
    om.persist()
    assert _journals(tmp_path) == []  # covered by the file now
    data = json.loads((tmp_path / "consumerOffset.json").read_text())
    assert data["offsetTable"] == {"T@g": {"0": 5}} and data["journalGeneration"] == 1
    om.commit_offset("g", "T", 0, 8, durable=True)
    om.commit_offset("g", "T", 0, 3, durable=True)  # a seek backwards: the last commit wins
    om.journal_sync()
    assert _journals(tmp_path) == ["consumerOffset.journal.2"]
    after = ConsumerOffsetManager(str(tmp_path))
    after.load()
    assert after.query_offset("g", "T", 0) == 3
    after.commit_offset("g", "T", 0, 4, durable=True)  # the restarted broker journals past what it replayed
    after.journal_sync()
    assert _journals(tmp_path) == ["consumerOffset.journal.2", "consumerOffset.journal.3"]
    again = ConsumerOffsetManager(str(tmp_path))
    again.load()
    assert again.query_offset("g", "T", 0) == 4
    after.persist()
    assert _journals(tmp_path) == []
    last = ConsumerOffsetManager(str(tmp_path))
    last.load()
    assert last.query_offset("g", "T", 0) == 4 and not last.dirty


def test_a_journal_older_than_the_file_is_not_replayed(tmp_path):
    """A crash between writing consumerOffset.json and deleting the journals it covers."""
    om = ConsumerOffsetManager(str(tmp_path))
    om.load()
    om.commit_offset("g", "T", 0, 10, durable=True)
    om.journal_sync()
    stale = (tmp_path / "consumerOffset.journal.1").read_bytes()
    om.persist()
    om.commit_offset("g", "T", 0, 2)  # then a RocketMQ tool resets the offset, persisted
    om.persist()
    (tmp_path / "consumerOffset.journal.1").write_bytes(stale)
    after = ConsumerOffsetManager(str(tmp_path))
    after.load()
    assert after.query_offset("g", "T", 0) == 2


def test_a_torn_tail_is_skipped_and_a_deleted_topic_stays_deleted(tmp_path, caplog):
    om = ConsumerOffsetManager(str(tmp_path))
    om.load()
    om.commit_offset("g", "gone", 0, 5, durable=True)
    om.commit_offset("g", "T", 0, 6, durable=True)
    om.journal_sync()
    om.remove_topic("gone")
    path = tmp_path / "consumerOffset.journal.1"
    with open(path, "ab") as fh:
        fh.write(b'0badc0de ["T@g",0,')  # a write cut short (not possible on kill -9; on power loss)
    after = ConsumerOffsetManager(str(tmp_path))
    store_log = logging.getLogger("rmq.store")  # its own handler: another test may have cut propagation
    store_log.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger="rmq.store"):
            after.load()
    finally:
        store_log.removeHandler(caplog.handler)
    assert after.query_offset("g", "T", 0) == 6
    assert after.query_offset("g", "gone", 0) == -1
    assert "torn or corrupt" in caplog.text


def test_the_group_coordinator_journals_every_commit_before_answering(tmp_path):
    """Classic OffsetCommit and the TxnOffsetCommit / KIP-848 path (commit_offsets_unchecked)."""
    om = ConsumerOffsetManager(str(tmp_path))
    om.load()
    gc = GroupCoordinator(om)
    assert gc.commit_offsets("simple", -1, "", None, [("T", 0, 12, None)]) == [("T", 0, 0)]
    assert gc.commit_offsets_unchecked("txn", [("T", 1, 30, "meta")]) == [("T", 1, 0)]
    after = ConsumerOffsetManager(str(tmp_path))
    after.load()
    assert after.query_offset("simple", "T", 0) == 12 and after.query_offset("txn", "T", 1) == 30


def test_store_inspect_history_counts_journaled_commits(tmp_path):
    """`rmq store inspect history` on the store of a broker killed before its persist: the group's
    Kafka commit is in the journal only, and history reports the record consumed."""
    from rmq.store import DefaultMessageStore, Message, MessageStoreConfig
    from rmq.store.inspect import message_history
    root = str(tmp_path / "store")
    cfg = MessageStoreConfig(storePathRootDir=root, mappedFileSizeCommitLog=256 * 1024, maxMessageSize=64 * 1024,
                             mappedFileSizeConsumeQueue=20 * 1000, maxHashSlotNum=1000, maxIndexNum=4000)
    s = DefaultMessageStore(cfg).load().start()
    try:
        for i in range(3):
            assert s.put_message(Message("HistT", b"v%d" % i, queue_id=0)).ok
    finally:
        s.shutdown()
    om = ConsumerOffsetManager(os.path.join(root, "config"))
    om.load()
    om.commit_offset("kgroup", "HistT", 0, 2, durable=True)
    om.journal_sync()
    rows = {g["group"]: g for g in message_history(root, topic="HistT", queue_id=0, offset=1)["groups"]}
    assert rows["kgroup"]["committedOffset"] == 2 and rows["kgroup"]["state"] == "consumed"
