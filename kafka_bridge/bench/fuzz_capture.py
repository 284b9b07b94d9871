"""Records the request frames real clients send, as seeds for `rmq bench fuzz` (issue 16 part 4).

    .venv/bin/python -m kafka_bridge.bench.fuzz_capture

starts the embedded broker (NameServer, remoting, Kafka listener) in this process, records every
byte the server side receives, and runs: rmq.client's Producer (send, batch, oneway), PushConsumer
and PullConsumer, MQAdmin (as `rmq admin` does: updateTopic, topicList, clusterList, topicStatus,
brokerStatus, consumerProgress, updateSubGroup, queryMsgByKey); kafka-python (producer, group
consumer, admin) and confluent-kafka (idempotent producer, group consumer, AdminClient). The
streams are written as they came off the wire (4-byte length + frame, back to back) to
rmq/bench/fuzz_seeds/remoting.bin and kafka_bridge/bench/fuzz_seeds/kafka.bin.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KAFKA_OUT = os.path.join(HERE, "fuzz_seeds", "kafka.bin")
REMOTING_OUT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "rmq", "bench", "fuzz_seeds", "remoting.bin")


def capture() -> tuple[int, int]:
    from kafka_bridge import protocol as kp
    from rmq.client.loop import LoopThread
    from rmq.config import load_config
    from rmq.server import remoting_server as rs
    from rmq.server.app import EmbeddedServer

    remoting_rec: list[bytes] = []
    kafka_rec: list[bytes] = []
    orig_dr = rs.RemotingConnection.data_received

    def data_received(self, data):  # server side only (the clients in this process use it too)
        if isinstance(self.dispatcher, rs.RemotingServer):
            remoting_rec.append(bytes(data))
        return orig_dr(self, data)
    rs.RemotingConnection.data_received = data_received

    class RecordingDecoder(kp.FrameDecoder):
        def feed(self, data):
            kafka_rec.append(bytes(data))
            return super().feed(data)
    orig_decoder = kp.FrameDecoder
    kp.FrameDecoder = RecordingDecoder  # only the server side decodes Kafka frames in this process

    root = tempfile.mkdtemp(prefix="rmq-fuzz-capture-")
    cfg = load_config(None, {"storePathRootDir": root, "namesrvPort": 0, "listenPort": 0, "kafkaPort": 0})
    lt = LoopThread(name="capture-server")
    srv = EmbeddedServer(cfg)
    try:
        listeners = lt.run(srv.start(), 60)
        namesrv, kafka = listeners["namesrv"], listeners["kafka"]
        _rocketmq_clients(namesrv)
        _kafka_clients(kafka)
    finally:
        lt.run(srv.stop(), 60)
        lt.stop()
        rs.RemotingConnection.data_received = orig_dr
        kp.FrameDecoder = orig_decoder
        shutil.rmtree(root, ignore_errors=True)
    for path, rec in ((REMOTING_OUT, remoting_rec), (KAFKA_OUT, kafka_rec)):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(b"".join(rec))
    return sum(map(len, remoting_rec)), sum(map(len, kafka_rec))


def _rocketmq_clients(namesrv: str) -> None:
    from rmq.client import Message, MQAdmin, Producer, PullConsumer, PushConsumer
    with MQAdmin(namesrv) as admin:
        cluster = admin.cluster_info()
        broker_addr = next(iter(cluster.brokerAddrTable.values())).brokerAddrs[0]
        admin.create_topic("FuzzSeed", cluster="DefaultCluster", read_queue_nums=2, write_queue_nums=2)
        admin.create_subscription_group("fuzz_seed_cg", cluster="DefaultCluster")
        admin.wait_for_route("FuzzSeed", timeout=10)
        admin.topic_list()
        admin.topic_status("FuzzSeed")
        admin.broker_runtime_info(broker_addr)
    p = Producer("fuzz_seed_pg", namesrv)
    p.start()
    try:
        p.send(Message("FuzzSeed", b"hello", tags="TagA", keys="k1"))
        p.send(Message("FuzzSeed", b"x" * 300, tags="TagB", properties={"a": "b"}))
        p.send_batch([Message("FuzzSeed", b"b%d" % i) for i in range(3)])
        p.send_oneway(Message("FuzzSeed", b"oneway"))
    finally:
        p.shutdown()
    got = []
    c = PushConsumer("fuzz_seed_cg", namesrv)
    c.subscribe("FuzzSeed", "TagA || TagB")
    c.register_message_listener(lambda msgs, ctx: got.extend(msgs) or "CONSUME_SUCCESS")
    c.start()
    deadline = time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    c.shutdown()
    pc = PullConsumer("fuzz_seed_pull", namesrv)
    pc.start()
    try:
        for mq in pc.fetch_subscribe_message_queues("FuzzSeed"):
            pc.pull(mq, "*", 0, 32)
    finally:
        pc.shutdown()
    with MQAdmin(namesrv) as admin:
        try:
            admin.consumer_progress("fuzz_seed_cg", "FuzzSeed")
            admin.query_msg_by_key("FuzzSeed", "k1")
        except Exception:  # noqa: BLE001 - seeds only: what was sent is recorded either way
            pass


def _kafka_clients(bootstrap: str) -> None:
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    a = AdminClient({"bootstrap.servers": bootstrap})
    for f in a.create_topics([NewTopic("fuzz-seed", 2, 1)]).values():
        f.result(15)
    for f in a.describe_configs([ConfigResource("topic", "fuzz-seed")]).values():
        f.result(15)
    a.list_topics(timeout=10)
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "compression.type": "lz4"})
    for i in range(5):
        p.produce("fuzz-seed", key=b"k%d" % i, value=b"v" * (i * 10), headers=[("h", b"1")])
    p.flush(15)
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-seed-cg",
                                  "auto.offset.reset": "earliest"})
    c.subscribe(["fuzz-seed"])
    deadline, n = time.monotonic() + 15, 0
    while n < 5 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            n += 1
    c.commit(asynchronous=False) if n else None
    c.close()
    kp_ = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip", acks="all")
    for i in range(3):
        kp_.send("fuzz-seed", key=b"kp", value=b"kafka-python %d" % i)
    kp_.flush(15)
    kp_.close()
    kc = KafkaConsumer("fuzz-seed", bootstrap_servers=bootstrap, group_id="fuzz-seed-kp",
                       auto_offset_reset="earliest", consumer_timeout_ms=3000)
    for _ in kc:
        pass
    kc.commit()
    kc.close()
    ka = KafkaAdminClient(bootstrap_servers=bootstrap)
    for call in ("list_groups", "list_consumer_groups", "describe_consumer_groups", "list_consumer_group_offsets"):
        fn = getattr(ka, call, None)
        if fn is not None:
            try:
                fn(["fuzz-seed-kp"]) if call == "describe_consumer_groups" else (
                    fn("fuzz-seed-kp") if call == "list_consumer_group_offsets" else fn())
            except Exception:  # noqa: BLE001 - seeds only: what was sent is recorded either way
                pass
    ka.close()
    del p, a  # librdkafka handles would reconnect to a stopped listener


if __name__ == "__main__":  # pragma: no cover
    r, k = capture()
    print(f"recorded {r} bytes of remoting requests -> {REMOTING_OUT}")
    print(f"recorded {k} bytes of Kafka requests -> {KAFKA_OUT}")
