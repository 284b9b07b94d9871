"""ClientManageProcessor and the queue-lock requests: HEART_BEAT, UNREGISTER_CLIENT, CHECK_CLIENT_CONFIG,
GET_CONSUMER_LIST_BY_GROUP, LOCK_BATCH_MQ, UNLOCK_BATCH_MQ, consumer/producer connection lists (SPEC §4)."""
from __future__ import annotations

import logging

from rmq.broker.client_manager import ClientChannelInfo, Subscription
from rmq.broker.topic_config import PERM_READ, PERM_WRITE, RETRY_GROUP_TOPIC_PREFIX
from rmq.common.filter import SqlParseError, build_filter, is_tag_type
from rmq.remoting import (
    GetConsumerConnectionListRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetConsumerListByGroupResponseBody,
    GetProducerConnectionListRequestHeader,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SubscriptionData,
    UnlockBatchRequestBody,
    UnregisterClientRequestHeader,
    fastjson,
)
from rmq.remoting.errors import BodyDecodeError
from rmq.server.processors.common import BrokerServices, response

log = logging.getLogger("rmq.broker.remoting")


# The C++ client sends these enums as their ordinals; Java sends the names.
_CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
_MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
_CONSUME_FROM = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
                 "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
                 "CONSUME_FROM_TIMESTAMP")


def enum_name(value, names: tuple) -> str | None:
    """"1" -> names[1]; a name stays as it is."""
    if value is None:
        return None
    text = str(value).strip()
    if text.isdigit() and int(text) < len(names):
        return names[int(text)]
    return text


def to_subscription(sd: SubscriptionData) -> Subscription:
    return Subscription(topic=sd.topic, sub_string=sd.subString if sd.subString is not None else "*",
                        expression_type=sd.expressionType or "TAG", sub_version=sd.subVersion or 0,
                        tags_set=tuple(sd.tagsSet), code_set=tuple(sd.codeSet))


def subscription_json(sub: Subscription) -> dict:
    return SubscriptionData(topic=sub.topic, subString=sub.sub_string, tagsSet=list(sub.tags_set),
                            codeSet=list(sub.code_set), subVersion=sub.sub_version,
                            expressionType=sub.expression_type).to_json()


def _connection_json(info: ClientChannelInfo) -> dict:
    ch = info.channel
    return {"clientAddr": getattr(ch, "remote_addr", "?"), "clientId": info.client_id,
            "language": info.language or "JAVA", "version": info.version}


class ClientManageProcessor:
    def __init__(self, svc: BrokerServices) -> None:
        self.svc = svc

    def table(self) -> dict:
        C = RequestCode
        return {C.HEART_BEAT: self.heart_beat,
                C.UNREGISTER_CLIENT: self.unregister_client,
                C.CHECK_CLIENT_CONFIG: self.check_client_config,
                C.GET_CONSUMER_LIST_BY_GROUP: self.get_consumer_list_by_group,
                C.LOCK_BATCH_MQ: self.lock_batch_mq,
                C.UNLOCK_BATCH_MQ: self.unlock_batch_mq,
                C.GET_CONSUMER_CONNECTION_LIST: self.get_consumer_connection_list,
                C.GET_PRODUCER_CONNECTION_LIST: self.get_producer_connection_list}

    def _channel_info(self, conn, req: RemotingCommand, client_id: str) -> ClientChannelInfo:
        return ClientChannelInfo(conn, client_id, req.language, req.version)

    def heart_beat(self, conn, req: RemotingCommand) -> RemotingCommand:
        hb = HeartbeatData.decode(req.body)
        svc = self.svc
        info = self._channel_info(conn, req, hb.clientID)
        conn.attrs["clientId"] = hb.clientID
        for cd in hb.consumerDataSet:
            sg = svc.controller.subscription_group_manager.find(cd.groupName)
            notify = True
            if sg is not None:
                notify = sg.notifyConsumerIdsChangedEnable
                svc.create_topic_in_send_message_back_method(RETRY_GROUP_TOPIC_PREFIX + cd.groupName,
                                                             sg.retryQueueNums, PERM_WRITE | PERM_READ)
            subs = [to_subscription(sd) for sd in cd.subscriptionDataSet]
            changed = svc.consumer_manager.register_consumer(
                cd.groupName, ClientChannelInfo(conn, hb.clientID, req.language, req.version),
                enum_name(cd.consumeType, _CONSUME_TYPES), enum_name(cd.messageModel, _MESSAGE_MODELS),
                enum_name(cd.consumeFromWhere, _CONSUME_FROM), subs, notify)
            if changed:
                log.info("registerConsumer info changed, group %s client %s %s", cd.groupName, hb.clientID,
                         conn.remote_addr)
        for pd in hb.producerDataSet:
            svc.producer_manager.register_producer(pd.groupName, info)
        return response(req)

    def unregister_client(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = UnregisterClientRequestHeader.from_command(req)
        svc = self.svc
        if h.producerGroup:
            svc.producer_manager.unregister_producer(h.producerGroup, conn)
        if h.consumerGroup:
            sg = svc.controller.subscription_group_manager.table.get(h.consumerGroup)
            notify = sg.notifyConsumerIdsChangedEnable if sg is not None else True
            svc.consumer_manager.unregister_consumer(h.consumerGroup, conn, notify)
        return response(req)

    def check_client_config(self, conn, req: RemotingCommand) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG: may this broker serve the subscription (SQL92 needs enablePropertyFilter)?"""
        obj = fastjson.loads(req.body or b"", what="CheckClientRequestBody")
        if not isinstance(obj, dict):
            raise BodyDecodeError("CheckClientRequestBody: expected a JSON object")
        sd_obj = obj.get("subscriptionData")
        if sd_obj is None:
            return response(req)
        sd = SubscriptionData.from_json(sd_obj, "CheckClientRequestBody.subscriptionData")
        if is_tag_type(sd.expressionType):
            return response(req)
        if not self.svc.broker_config.enablePropertyFilter:
            return response(req, ResponseCode.SYSTEM_ERROR,
                            f"The broker does not support consumer to filter message by {sd.expressionType}")
        try:
            build_filter(sd.expressionType, sd.subString)
        except (SqlParseError, ValueError) as exc:
            return response(req, ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"{exc}")
        return response(req)

    def get_consumer_list_by_group(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = GetConsumerListByGroupRequestHeader.from_command(req)
        cg = self.svc.consumer_manager.get(h.consumerGroup)
        if cg is not None:
            ids = cg.all_client_ids()
            if ids:
                return response(req, body=GetConsumerListByGroupResponseBody(ids).encode())
            log.warning("getAllClientId failed, %s %s", h.consumerGroup, conn.remote_addr)
        else:
            log.warning("getConsumerGroupInfo failed, %s %s", h.consumerGroup, conn.remote_addr)
        return response(req, ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {h.consumerGroup}")

    def lock_batch_mq(self, conn, req: RemotingCommand) -> RemotingCommand:
        body = LockBatchRequestBody.decode(req.body)
        mqs = [(m.topic, m.brokerName, m.queueId) for m in body.mqSet]
        locked = self.svc.lock_manager.try_lock_batch(body.consumerGroup, mqs, body.clientId)
        out = LockBatchResponseBody([MessageQueue(t, b, q) for t, b, q in locked])
        return response(req, body=out.encode())

    def unlock_batch_mq(self, conn, req: RemotingCommand) -> RemotingCommand:
        body = UnlockBatchRequestBody.decode(req.body)
        mqs = [(m.topic, m.brokerName, m.queueId) for m in body.mqSet]
        self.svc.lock_manager.unlock_batch(body.consumerGroup, mqs, body.clientId)
        return response(req)

    def get_consumer_connection_list(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = GetConsumerConnectionListRequestHeader.from_command(req)
        cg = self.svc.consumer_manager.get(h.consumerGroup)
        if cg is None:
            return response(req, ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{h.consumerGroup}] not online")
        body = {"connectionSet": [_connection_json(i) for i in cg.channels.values()],
                "consumeFromWhere": cg.consume_from_where, "consumeType": cg.consume_type,
                "messageModel": cg.message_model,
                "subscriptionTable": {t: subscription_json(s) for t, s in cg.subscriptions.items()}}
        return response(req, body=fastjson.dumpb({k: v for k, v in body.items() if v is not None}))

    def get_producer_connection_list(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = GetProducerConnectionListRequestHeader.from_command(req)
        infos = self.svc.producer_manager.channels(h.producerGroup)
        if not infos:
            return response(req, ResponseCode.SYSTEM_ERROR, f"the producer group[{h.producerGroup}] not exist")
        return response(req, body=fastjson.dumpb({"connectionSet": [_connection_json(i) for i in infos]}))
