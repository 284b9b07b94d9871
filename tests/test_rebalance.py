"""Queue allocation strategies against hand-checked RocketMQ cases (SPEC §4 "Rebalance ...
strategies"). Every expectation below is derived by hand from the Java classes
(client/.../consumer/rebalance/*.java); the arithmetic is in the comments."""
from __future__ import annotations

import hashlib

import pytest

from rmq.client.rebalance import (AllocateMachineRoomNearby, AllocateMessageQueueAveragely,
                                  AllocateMessageQueueAveragelyByCircle,
                                  AllocateMessageQueueConsistentHash, ConsistentHashRouter,
                                  FunctionMachineRoomResolver, PrefixMachineRoomResolver, md5_hash,
                                  mq_to_string, strategy_by_name)
from rmq.remoting import MessageQueue

CIDS = ["127.0.0.1@c0", "127.0.0.1@c1", "127.0.0.1@c2"]
MQS = [MessageQueue("T", "broker-a", i) for i in range(8)]


def alloc(strategy, mqs=MQS, cids=CIDS):
    return {cid: [f"{mq.brokerName}:{mq.queueId}" if mq.brokerName != "broker-a" else mq.queueId
                  for mq in strategy.allocate("G", cid, mqs, cids)] for cid in cids}


def test_averagely_3_consumers_8_queues():
    # mod = 8 % 3 = 2.
    # c0: index 0 < mod -> averageSize = 8/3 + 1 = 3, startIndex = 0*3 = 0          -> 0 1 2
    # c1: index 1 < mod -> averageSize = 3,           startIndex = 1*3 = 3          -> 3 4 5
    # c2: index 2 >= mod -> averageSize = 8/3 = 2,    startIndex = 2*2 + mod = 6    -> 6 7
    assert alloc(AllocateMessageQueueAveragely()) == {
        "127.0.0.1@c0": [0, 1, 2], "127.0.0.1@c1": [3, 4, 5], "127.0.0.1@c2": [6, 7]}


def test_averagely_more_consumers_than_queues():
    # 2 queues, 3 consumers: averageSize = 1 (mq <= cid); mod = 2.
    # c0: start 0 -> q0; c1: start 1 -> q1; c2: index 2 >= mod -> start = 2*1 + 2 = 4,
    # range = min(1, 2 - 4) = -2 -> nothing (extras idle, SPEC §4).
    assert alloc(AllocateMessageQueueAveragely(), MQS[:2]) == {
        "127.0.0.1@c0": [0], "127.0.0.1@c1": [1], "127.0.0.1@c2": []}


def test_averagely_by_circle_3_consumers_8_queues():
    # queue i goes to the consumer with index i % 3:
    # c0: 0 3 6   c1: 1 4 7   c2: 2 5
    assert alloc(AllocateMessageQueueAveragelyByCircle()) == {
        "127.0.0.1@c0": [0, 3, 6], "127.0.0.1@c1": [1, 4, 7], "127.0.0.1@c2": [2, 5]}


def test_md5_hash_is_first_four_digest_bytes():
    # ConsistentHashRouter.MD5Hash: h = d[0]<<24 | d[1]<<16 | d[2]<<8 | d[3], unsigned.
    d = hashlib.md5(b"127.0.0.1@c1-6").digest()
    assert md5_hash("127.0.0.1@c1-6") == (d[0] << 24) | (d[1] << 16) | (d[2] << 8) | d[3] == 14944688
    assert mq_to_string(MQS[3]) == "MessageQueue [topic=T, brokerName=broker-a, queueId=3]"


def test_consistent_hash_3_consumers_8_queues():
    # Ring: 10 virtual nodes per client, key "<clientId>-<i>", hash = first 4 bytes of MD5:
    #     14944688 c1-6     1246218467 c0-8     2165652129 c1-3     3096827334 c1-4
    #     97726283 c1-9     1425490763 c1-0     2347788434 c0-7     3477378236 c2-2
    #    121807942 c0-2     1469111026 c2-6     2631547166 c2-7     3540318601 c2-8
    #    134237005 c1-8     1850456781 c1-1     2646298493 c2-4     3682332266 c1-7
    #    205521749 c2-9     1897757618 c0-5     2648052509 c0-0     4045595218 c2-3
    #    284912029 c2-0     1919208429 c1-2     2913384317 c0-9     4079532720 c0-6
    #    351976710 c1-5     1951106621 c0-3     2981801074 c0-1     4107941990 c2-1
    #    748346109 c0-4
    #    775304400 c2-5
    # Each queue is keyed "MessageQueue [topic=T, brokerName=broker-a, queueId=N]" and goes to
    # the first ring point >= its hash:
    #   q0 1630488180 -> 1850456781 c1     q4 3178811001 -> 3477378236 c2
    #   q1 2335566527 -> 2347788434 c0     q5  315923837 ->  351976710 c1
    #   q2    5127707 ->   14944688 c1     q6 2269585538 -> 2347788434 c0
    #   q3 3682045333 -> 3682332266 c1     q7 1138816901 -> 1246218467 c0
    assert alloc(AllocateMessageQueueConsistentHash()) == {
        "127.0.0.1@c0": [1, 6, 7], "127.0.0.1@c1": [0, 2, 3, 5], "127.0.0.1@c2": [4]}


def test_consistent_hash_wraps_around_the_ring():
    # A key hashing above every ring point goes to the smallest point (ring.firstKey()).
    table = {"a-0": 10, "b-0": 20, "k-low": 5, "k-mid": 15, "k-high": 25}
    router = ConsistentHashRouter(["a", "b"], 1, table.__getitem__)
    assert [router.route_node(k) for k in ("k-low", "k-mid", "k-high")] == ["a", "b", "a"]


def test_consistent_hash_consumer_not_in_group_gets_nothing():
    assert AllocateMessageQueueConsistentHash().allocate("G", "127.0.0.1@zz", MQS, CIDS) == []


def _rooms():
    return FunctionMachineRoomResolver(lambda mq: mq.brokerName.split("-")[0],
                                       lambda cid: cid.split("@")[1].split("_")[0])


def test_machine_room_nearby_two_brokers_room_without_consumers():
    # Queues: bj-broker-c 0..3 and hz-broker-a 0..3 (sorted: "bj..." < "hz...").
    # Consumers (sorted): hz_c0, hz_c1 (room hz), sh_c2 (room sh; no broker there).
    # Room hz queues (a0..a3) go to the hz consumers by AVG: 4/2 -> hz_c0 a0 a1, hz_c1 a2 a3.
    # Room bj has no consumer, so its queues are shared by all three by AVG:
    #   mod = 4 % 3 = 1; hz_c0 index 0 < 1 -> size 2, start 0 -> c0 c1;
    #   hz_c1 index 1 -> size 1, start 1*1 + 1 = 2 -> c2; sh_c2 index 2 -> start 3 -> c3.
    mqs = [MessageQueue("T", "bj-broker-c", i) for i in range(4)] + \
          [MessageQueue("T", "hz-broker-a", i) for i in range(4)]
    cids = ["127.0.0.1@hz_c0", "127.0.0.1@hz_c1", "127.0.0.1@sh_c2"]
    got = alloc(AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), _rooms()), mqs, cids)
    assert got == {"127.0.0.1@hz_c0": ["hz-broker-a:0", "hz-broker-a:1", "bj-broker-c:0", "bj-broker-c:1"],
                   "127.0.0.1@hz_c1": ["hz-broker-a:2", "hz-broker-a:3", "bj-broker-c:2"],
                   "127.0.0.1@sh_c2": ["bj-broker-c:3"]}


def test_machine_room_nearby_each_room_keeps_its_queues():
    # Rooms hz (broker a, 4 queues; consumers hz_c0 hz_c1) and sh (broker b, 4 queues; sh_c2):
    # every queue stays in its own room: hz split 2/2 by AVG, sh_c2 takes all four of b.
    mqs = [MessageQueue("T", "hz-broker-a", i) for i in range(4)] + \
          [MessageQueue("T", "sh-broker-b", i) for i in range(4)]
    cids = ["127.0.0.1@hz_c0", "127.0.0.1@hz_c1", "127.0.0.1@sh_c2"]
    got = alloc(AllocateMachineRoomNearby(AllocateMessageQueueAveragelyByCircle(), _rooms()), mqs, cids)
    assert got == {"127.0.0.1@hz_c0": ["hz-broker-a:0", "hz-broker-a:2"],
                   "127.0.0.1@hz_c1": ["hz-broker-a:1", "hz-broker-a:3"],
                   "127.0.0.1@sh_c2": ["sh-broker-b:0", "sh-broker-b:1", "sh-broker-b:2", "sh-broker-b:3"]}


def test_prefix_resolver_and_names():
    r = PrefixMachineRoomResolver()
    assert r.broker_deploy_in(MessageQueue("T", "IDC1-broker-a", 0)) == "IDC1"
    assert r.consumer_deploy_in("IDC2-127.0.0.1@x") == "IDC2"
    assert AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), r).name == "MACHINE_ROOM_NEARBY-AVG"
    assert strategy_by_name("avg_by_circle").name == "AVG_BY_CIRCLE"
    with pytest.raises(ValueError):
        strategy_by_name("nope")


@pytest.mark.parametrize("strategy", [AllocateMessageQueueAveragely(), AllocateMessageQueueAveragelyByCircle(),
                                      AllocateMessageQueueConsistentHash()])
@pytest.mark.parametrize("n_mq,n_cid", [(1, 1), (3, 5), (8, 3), (16, 4), (7, 7), (20, 6)])
def test_every_queue_exactly_once(strategy, n_mq, n_cid):
    mqs = [MessageQueue("T", "b", i) for i in range(n_mq)]
    cids = sorted(f"10.0.0.1@{i}" for i in range(n_cid))
    seen = [mq for cid in cids for mq in strategy.allocate("G", cid, mqs, cids)]
    assert sorted(seen, key=lambda m: m.queueId) == mqs


def test_bad_arguments():
    s = AllocateMessageQueueAveragely()
    with pytest.raises(ValueError):
        s.allocate("G", "", MQS, CIDS)
    with pytest.raises(ValueError):
        s.allocate("G", "x", [], CIDS)
    with pytest.raises(ValueError):
        s.allocate("G", "x", MQS, [])
