"""AdminBrokerProcessor and QueryMessageProcessor: topics, subscription groups, runtime info, message
query by key / by offset, topic stats and consume stats (lag per queue) (SPEC §2, §3, §10)."""
from __future__ import annotations

import json
import re
import time
from dataclasses import asdict

from rmq.broker.subscription_group import SubscriptionGroupConfig
from rmq.broker.topic_config import TopicConfig
from rmq.remoting import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumeStatsRequestHeader,
    GetTopicStatsInfoRequestHeader,
    KVTable,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    TopicConfigSerializeWrapper,
    ViewMessageRequestHeader,
    fastjson,
)
from rmq.remoting import TopicConfig as WireTopicConfig
from rmq.remoting.bodies import DataVersion
from rmq.remoting.errors import BodyDecodeError
from rmq.server.processors.common import BrokerServices, response
from rmq.store.message_store import validate_topic

#: MixAll.UNIQUE_MSG_QUERY_FLAG: QUERY_MESSAGE by the client-side uniq key (msgId).
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
DEFAULT_QUERY_MAX_NUM = 32
BROKER_VERSION_DESC = "V4_9_4"
BROKER_VERSION = 401


# ---------------------------------------------------------------------- Map<MessageQueue, T> as fastjson writes it
def encode_mq_table(table: dict[tuple[str, str, int], dict]) -> str:
    """fastjson's form of a map keyed by MessageQueue: the key is the queue's JSON object itself,
    e.g. {{"brokerName":"b","queueId":0,"topic":"t"}:{"maxOffset":3,...}} (not standard JSON)."""
    parts = []
    for (topic, broker, qid), value in table.items():
        key = fastjson.dumps({"brokerName": broker, "queueId": qid, "topic": topic})
        parts.append(key + ":" + fastjson.dumps(value))
    return "{" + ",".join(parts) + "}"


_MQ_ENTRY = re.compile(r'\{"brokerName":("(?:[^"\\]|\\.)*"),"queueId":(-?\d+),"topic":("(?:[^"\\]|\\.)*")\}'
                       r'\s*:\s*(\{[^{}]*\})')


def parse_mq_table(text: str | bytes) -> dict[tuple[str, str, int], dict]:
    """Read back encode_mq_table output (TopicStatsTable / ConsumeStats offsetTable):
    {(topic, brokerName, queueId): {...}}."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode("utf-8")
    out = {}
    for m in _MQ_ENTRY.finditer(text):
        out[(json.loads(m.group(3)), json.loads(m.group(1)), int(m.group(2)))] = json.loads(m.group(4))
    return out


class AdminProcessor:
    def __init__(self, svc: BrokerServices) -> None:
        self.svc = svc

    def table(self) -> dict:
        C = RequestCode
        return {C.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
                C.DELETE_TOPIC_IN_BROKER: self.delete_topic,
                C.GET_ALL_TOPIC_CONFIG: self.get_all_topic_config,
                C.GET_BROKER_RUNTIME_INFO: self.get_broker_runtime_info,
                C.QUERY_MESSAGE: self.query_message,
                C.VIEW_MESSAGE_BY_ID: self.view_message_by_id,
                C.GET_TOPIC_STATS_INFO: self.get_topic_stats_info,
                C.GET_CONSUME_STATS: self.get_consume_stats,
                C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_and_create_subscription_group,
                C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.get_all_subscription_group_config,
                C.DELETE_SUBSCRIPTIONGROUP: self.delete_subscription_group,
                C.GET_ALL_CONSUMER_OFFSET: self.get_all_consumer_offset,
                C.GET_ALL_DELAY_OFFSET: self.get_all_delay_offset,
                C.GET_CONFIG_TABLE_EXT: self.get_config_table}

    # ------------------------------------------------------------------ topics
    def update_and_create_topic(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_command(req)
        svc = self.svc
        if h.topic == svc.broker_config.brokerClusterName:
            return response(req, ResponseCode.SYSTEM_ERROR, f"the topic[{h.topic}] is conflict with system reserved words.")
        reason = validate_topic(h.topic)
        if not reason and svc.controller.topic_config_manager.get(h.topic) is None:
            reason = svc.controller.topic_config_manager.collision(h.topic)
        if reason:
            return response(req, ResponseCode.SYSTEM_ERROR, f"the specified topic is illegal: {reason}")
        if not (0 <= h.readQueueNums <= 1024 and 0 <= h.writeQueueNums <= 1024):
            return response(req, ResponseCode.SYSTEM_ERROR,
                            f"queue numbers out of range: read {h.readQueueNums}, write {h.writeQueueNums} (0..1024)")
        old = svc.controller.topic_config_manager.get(h.topic)
        tc = TopicConfig(h.topic, h.readQueueNums, h.writeQueueNums, h.perm, h.topicFilterType,
                         h.topicSysFlag or 0, bool(h.order), attributes=dict(old.attributes) if old else {})
        svc.controller.topic_config_manager.update(tc)
        svc.topics_changed()
        return response(req)

    def delete_topic(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = DeleteTopicRequestHeader.from_command(req)
        self.svc.controller.delete_topic(h.topic)
        self.svc.topics_changed()
        return response(req)

    def get_all_topic_config(self, conn, req: RemotingCommand) -> RemotingCommand:
        tcm = self.svc.controller.topic_config_manager
        table = {name: WireTopicConfig(tc.topicName, tc.readQueueNums, tc.writeQueueNums, tc.perm,
                                       tc.topicFilterType, tc.topicSysFlag, tc.order)
                 for name, tc in list(tcm.table.items())}
        dv = tcm.data_version
        wrapper = TopicConfigSerializeWrapper(table, DataVersion(dv.get("timestamp", 0), dv.get("counter", 0)))
        return response(req, body=wrapper.encode())

    # ------------------------------------------------------------------ subscription groups
    def update_and_create_subscription_group(self, conn, req: RemotingCommand) -> RemotingCommand:
        obj = fastjson.loads(req.body or b"", what="SubscriptionGroupConfig")
        if not isinstance(obj, dict) or not isinstance(obj.get("groupName"), str) or not obj["groupName"]:
            raise BodyDecodeError("SubscriptionGroupConfig: required property groupName is missing")
        known = set(SubscriptionGroupConfig.__dataclass_fields__)
        kw = {k: v for k, v in obj.items() if k in known and k != "groupName"}
        sgm = self.svc.controller.subscription_group_manager
        with sgm.lock:
            sgm.table[obj["groupName"]] = SubscriptionGroupConfig(obj["groupName"], **kw)
        sgm.persist()
        return response(req)

    def get_all_subscription_group_config(self, conn, req: RemotingCommand) -> RemotingCommand:
        sgm = self.svc.controller.subscription_group_manager
        body = {"dataVersion": {"counter": 0, "timestamp": self.svc.boot_timestamp},
                "subscriptionGroupTable": {k: asdict(v) for k, v in list(sgm.table.items())}}
        return response(req, body=fastjson.dumpb(body))

    def delete_subscription_group(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = DeleteSubscriptionGroupRequestHeader.from_command(req)
        self.svc.controller.subscription_group_manager.delete(h.groupName)
        return response(req)

    def get_all_consumer_offset(self, conn, req: RemotingCommand) -> RemotingCommand:
        om = self.svc.controller.offset_manager
        with om.lock:
            table = {k: {int(q): o for q, o in v.items()} for k, v in om.offset_table.items()}
        return response(req, body=fastjson.dumpb({"offsetTable": table}))

    def get_all_delay_offset(self, conn, req: RemotingCommand) -> RemotingCommand:
        """GET_ALL_DELAY_OFFSET (45): delayOffset.json's content, for a slave's SlaveSynchronize."""
        sched = getattr(self.svc.controller, "schedule_service", None)
        if sched is None:
            return response(req, ResponseCode.SYSTEM_ERROR, "this broker has no schedule message service")
        with sched.offsets.lock:
            body = sched.offsets.encode()
        return response(req, body=fastjson.dumpb(body))

    def get_config_table(self, conn, req: RemotingCommand) -> RemotingCommand:
        """GET_CONFIG_TABLE_EXT (this project's): a plugin's config table by ext field ``name``
        (BrokerController.config_tables), e.g. kafkaShareGroups, the Kafka share-group state."""
        name = (req.ext_fields or {}).get("name") or ""
        tables = getattr(self.svc.controller, "config_tables", {})
        table = tables.get(name)
        if table is None:
            return response(req, ResponseCode.SYSTEM_ERROR,
                            f"no config table {name!r} on this broker (known: {', '.join(sorted(tables)) or 'none'})")
        return response(req, body=table.dump())

    # ------------------------------------------------------------------ runtime info
    def get_broker_runtime_info(self, conn, req: RemotingCommand) -> RemotingCommand:
        svc = self.svc
        store = svc.store
        info = {f"{k}": str(v).lower() if isinstance(v, bool) else str(v) for k, v in store.runtime_info().items()}
        up = max(0, int(time.time() * 1000) - svc.boot_timestamp) // 1000
        d, rem = divmod(up, 86400)
        hh, rem = divmod(rem, 3600)
        mm, ss = divmod(rem, 60)
        info.update({
            "brokerVersionDesc": BROKER_VERSION_DESC,
            "brokerVersion": str(BROKER_VERSION),
            "msgPutTotalTodayNow": str(store.stats.get("put_messages", 0)),
            "msgGetTotalTodayNow": str(store.stats.get("get_messages", 0)),
            "bootTimestamp": str(svc.boot_timestamp),
            "runtime": f"[ {d} days, {hh} hours, {mm} minutes, {ss} seconds ]",
            "commitLogDiskRatio": str(getattr(store, "disk_ratio", 0.0)),
            "brokerName": svc.broker_name,
            "brokerAddr": svc.broker_addr,
            "brokerRole": svc.store_config.brokerRole,
            "flushDiskType": svc.store_config.flushDiskType,
        })
        ha = getattr(svc.controller, "ha_service", None)
        if ha is not None:  # master/slave replication (rmq.server.ha)
            info.update({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in ha.runtime_info().items()})
        return response(req, body=KVTable(info).encode())

    # ------------------------------------------------------------------ messages
    def query_message(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_command(req)
        max_num = h.maxNum
        if req.ext_fields.get(UNIQUE_MSG_QUERY_FLAG) == "true":
            max_num = DEFAULT_QUERY_MAX_NUM
        store = self.svc.store
        msgs = store.query_message(h.topic, h.key, max(0, max_num), h.beginTimestamp, h.endTimestamp)
        units = []
        for m in msgs:
            raw = store.commitlog.read(m.commit_log_offset, m.store_size)
            if raw is not None:
                units.append(raw)
        files = store.index_service.files
        last = files[-1] if files else None
        rh = QueryMessageResponseHeader(indexLastUpdateTimestamp=last.end_timestamp if last else 0,
                                        indexLastUpdatePhyoffset=last.end_phy_offset if last else 0)
        if units:
            return response(req, ext_fields=rh.to_ext_fields(), body=b"".join(units))
        return response(req, ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct",
                        ext_fields=rh.to_ext_fields())

    def view_message_by_id(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_command(req)
        store = self.svc.store
        m = store.look_message_by_offset(h.offset) if h.offset >= 0 else None
        raw = store.commitlog.read(h.offset, m.store_size) if m is not None else None
        if raw is None:
            return response(req, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {h.offset}")
        return response(req, body=raw)

    # ------------------------------------------------------------------ stats
    def _store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        store = self.svc.store
        cq = store.get_consume_queue(topic, queue_id)
        unit = cq.get_unit(offset) if cq is not None else None
        return store.commitlog.store_timestamp_at(unit[0]) if unit else -1

    def get_topic_stats_info(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = GetTopicStatsInfoRequestHeader.from_command(req)
        svc = self.svc
        tc = svc.controller.topic_config_manager.get(h.topic)
        if tc is None:
            return response(req, ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        table = {}
        for i in range(tc.writeQueueNums):
            lo = max(0, svc.store.get_min_offset_in_queue(h.topic, i))
            hi = max(0, svc.store.get_max_offset_in_queue(h.topic, i))
            ts = self._store_timestamp(h.topic, i, hi - 1) if hi > 0 else 0
            table[(h.topic, svc.broker_name, i)] = {"lastUpdateTimestamp": max(ts, 0), "maxOffset": hi, "minOffset": lo}
        return response(req, body=('{"offsetTable":' + encode_mq_table(table) + "}").encode())

    def get_consume_stats(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = GetConsumeStatsRequestHeader.from_command(req)
        svc = self.svc
        ctrl = svc.controller
        topics = [h.topic] if h.topic else sorted(ctrl.offset_manager.topics_of_group(h.consumerGroup))
        table = {}
        for topic in topics:
            tc = ctrl.topic_config_manager.get(topic)
            if tc is None:
                continue
            cm = svc.consumer_manager
            cg = cm.get(h.consumerGroup)
            if cg is not None and cg.subscriptions and topic not in cg.subscriptions:
                continue
            for i in range(tc.readQueueNums):
                broker_off = max(0, svc.store.get_max_offset_in_queue(topic, i))
                consumer_off = max(0, ctrl.offset_manager.query_offset(h.consumerGroup, topic, i))
                last_ts = 0
                if consumer_off - 1 >= 0:
                    last_ts = max(0, self._store_timestamp(topic, i, consumer_off - 1))
                table[(topic, svc.broker_name, i)] = {"brokerOffset": broker_off, "consumerOffset": consumer_off,
                                                      "lastTimestamp": last_ts}
        tps = round(ctrl.offset_manager.consume_tps(h.consumerGroup), 2)
        return response(req, body=(f'{{"consumeTps":{tps!r},"offsetTable":' + encode_mq_table(table) + "}").encode())
