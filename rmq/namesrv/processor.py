"""The NameServer's DefaultRequestProcessor: REGISTER_BROKER, GET_ROUTEINFO_BY_TOPIC, cluster and
topic lists, KV config (SPEC §9). Each handler takes (connection, request) and returns the response."""
from __future__ import annotations

import logging
import struct
import zlib

from ..remoting import (DataVersion, DeleteKVConfigRequestHeader, DeleteTopicInNamesrvRequestHeader,
                        GetKVConfigRequestHeader, GetKVConfigResponseHeader,
                        GetKVListByNamespaceRequestHeader, GetRouteInfoRequestHeader,
                        GetTopicsByClusterRequestHeader, PutKVConfigRequestHeader,
                        RegisterBrokerBody, RegisterBrokerRequestHeader, RegisterBrokerResponseHeader,
                        RemotingCommand, RequestCode, ResponseCode, TopicConfig,
                        TopicConfigSerializeWrapper, UnRegisterBrokerRequestHeader,
                        WipeWritePermOfBrokerRequestHeader, WipeWritePermOfBrokerResponseHeader)
from ..remoting import fastjson
from ..remoting.errors import BodyDecodeError
from .kv_config import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from .route_info import RouteInfoManager

log = logging.getLogger("rmq.namesrv")

_I32 = struct.Struct(">i")
#: Largest inflated REGISTER_BROKER body accepted (a broker with ~100k topics stays far below).
MAX_INFLATED_REGISTER_BODY = 64 * 1024 * 1024


def body_crc32(data: bytes) -> int:
    """UtilAll.crc32: CRC-32 masked to a non-negative int."""
    return zlib.crc32(data) & 0x7FFFFFFF


def decode_compressed_register_body(data: bytes) -> RegisterBrokerBody:
    """RegisterBrokerBody.decode(data, compressed=true): a deflated stream of
    int len + DataVersion JSON, int count, count x (int len + "name read write perm filterType"),
    int len + filter server list JSON."""
    d = zlib.decompressobj()
    try:
        raw = d.decompress(data, MAX_INFLATED_REGISTER_BODY)
    except zlib.error as exc:
        raise BodyDecodeError(f"RegisterBrokerBody: compressed body does not inflate ({exc})") from None
    if d.unconsumed_tail:
        raise BodyDecodeError(f"RegisterBrokerBody: inflated body exceeds {MAX_INFLATED_REGISTER_BODY} bytes")
    pos = 0

    def take(n: int, what: str) -> bytes:
        nonlocal pos
        if n < 0 or pos + n > len(raw):
            raise BodyDecodeError(f"RegisterBrokerBody: compressed body truncated in {what}")
        out = raw[pos:pos + n]
        pos += n
        return out

    def take_int(what: str) -> int:
        return _I32.unpack(take(4, what))[0]

    version = DataVersion.decode(take(take_int("dataVersion length"), "dataVersion"))
    count = take_int("topic count")
    if count < 0 or count > len(raw):
        raise BodyDecodeError(f"RegisterBrokerBody: bad topic count {count}")
    table = {}
    for i in range(count):
        text = take(take_int(f"topic {i} length"), f"topic {i}").decode("utf-8", errors="replace")
        parts = text.split(" ")
        if len(parts) < 5:
            raise BodyDecodeError(f"RegisterBrokerBody: topic config {text!r:.60} has {len(parts)} fields, expected 5")
        try:
            tc = TopicConfig(parts[0], int(parts[1]), int(parts[2]), int(parts[3]), parts[4])
        except ValueError:
            raise BodyDecodeError(f"RegisterBrokerBody: topic config {text!r:.60} is not numeric") from None
        table[tc.topicName] = tc
    filters: list[str] = []
    if pos < len(raw):
        obj = fastjson.loads(take(take_int("filter server list length"), "filter server list"),
                             what="RegisterBrokerBody.filterServerList")
        if isinstance(obj, list):
            filters = [str(x) for x in obj]
    return RegisterBrokerBody(TopicConfigSerializeWrapper(table, version), filters)


class NamesrvProcessor:
    """DefaultRequestProcessor over one RouteInfoManager and KVConfigManager."""

    def __init__(self, route_info: RouteInfoManager, kv_config: KVConfigManager, *,
                 order_message_enable: bool = False) -> None:
        self.route = route_info
        self.kv = kv_config
        self.order_message_enable = order_message_enable
        # brokerAddr -> (body, decoded RegisterBrokerBody) of its last registration: a broker
        # re-registers its whole topic table every 30 s, mostly unchanged (1,000 topics: 22 ms to decode)
        self._last_register: dict[str, tuple[bytes, RegisterBrokerBody]] = {}

    def table(self) -> dict:
        C = RequestCode
        return {
            C.PUT_KV_CONFIG: self.put_kv_config,
            C.GET_KV_CONFIG: self.get_kv_config,
            C.DELETE_KV_CONFIG: self.delete_kv_config,
            C.GET_KVLIST_BY_NAMESPACE: self.get_kv_list_by_namespace,
            C.REGISTER_BROKER: self.register_broker,
            C.UNREGISTER_BROKER: self.unregister_broker,
            C.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            C.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list,
            C.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            C.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topic_list,
            C.DELETE_TOPIC_IN_NAMESRV: self.delete_topic_in_namesrv,
            C.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm_of_broker,
        }

    # ------------------------------------------------------------------ KV config
    def put_kv_config(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = PutKVConfigRequestHeader.from_command(req)
        self.kv.put(h.namespace, h.key, h.value)
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS)

    def get_kv_config(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = GetKVConfigRequestHeader.from_command(req)
        value = self.kv.get(h.namespace, h.key)
        if value is None:
            return RemotingCommand.response_to(req, ResponseCode.QUERY_NOT_FOUND,
                                               f"No config item, Namespace: {h.namespace} Key: {h.key}")
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS,
                                           ext_fields=GetKVConfigResponseHeader(value).to_ext_fields())

    def delete_kv_config(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = DeleteKVConfigRequestHeader.from_command(req)
        self.kv.delete(h.namespace, h.key)
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS)

    def get_kv_list_by_namespace(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = GetKVListByNamespaceRequestHeader.from_command(req)
        body = self.kv.get_kv_list_by_namespace(h.namespace)
        if body is None:
            return RemotingCommand.response_to(req, ResponseCode.QUERY_NOT_FOUND,
                                               f"No config item, Namespace: {h.namespace}")
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS, body=body)

    # ------------------------------------------------------------------ brokers
    def register_broker(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = RegisterBrokerRequestHeader.from_command(req)
        body = req.body or b""
        if h.bodyCrc32 and body_crc32(body) != h.bodyCrc32:
            log.warning("receive registerBroker request, crc32 not match, from %s", conn.remote_addr)
            return RemotingCommand.response_to(req, ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if body:
            last = self._last_register.get(h.brokerAddr)
            if last is not None and last[0] == body:
                rb = last[1]
            else:
                rb = decode_compressed_register_body(body) if h.compressed else RegisterBrokerBody.decode(body)
                for gone in [a for a in self._last_register if a not in self.route.broker_live_table]:
                    del self._last_register[gone]  # brokers the NameServer no longer lists
                self._last_register[h.brokerAddr] = (bytes(body), rb)
        else:
            rb = RegisterBrokerBody(TopicConfigSerializeWrapper({}, DataVersion(0, 0)), [])
        result = self.route.register_broker(h.clusterName, h.brokerAddr, h.brokerName, h.brokerId,
                                            h.haServerAddr, rb.topicConfigSerializeWrapper,
                                            rb.filterServerList, conn)
        rh = RegisterBrokerResponseHeader(haServerAddr=result.ha_server_addr, masterAddr=result.master_addr)
        kv = self.kv.get_kv_list_by_namespace(NAMESPACE_ORDER_TOPIC_CONFIG) or b""
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS, ext_fields=rh.to_ext_fields(), body=kv)

    def unregister_broker(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = UnRegisterBrokerRequestHeader.from_command(req)
        self._last_register.pop(h.brokerAddr, None)
        self.route.unregister_broker(h.clusterName, h.brokerAddr, h.brokerName, h.brokerId)
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS)

    # ------------------------------------------------------------------ routes
    def get_route_info_by_topic(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = GetRouteInfoRequestHeader.from_command(req)
        route = self.route.pickup_topic_route_data(h.topic)
        if route is None:
            return RemotingCommand.response_to(
                req, ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {h.topic}")
        if self.order_message_enable:
            route.orderTopicConf = self.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, h.topic)
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS,
                                           body=route.encode(quote_int_keys=bool(h.acceptStandardJsonOnly)))

    def get_broker_cluster_info(self, conn, req: RemotingCommand) -> RemotingCommand:
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS, body=self.route.get_all_cluster_info().encode())

    def get_all_topic_list(self, conn, req: RemotingCommand) -> RemotingCommand:
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS, body=self.route.get_all_topic_list().encode())

    def get_topics_by_cluster(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = GetTopicsByClusterRequestHeader.from_command(req)
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS,
                                           body=self.route.get_topics_by_cluster(h.cluster).encode())

    def get_system_topic_list(self, conn, req: RemotingCommand) -> RemotingCommand:
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS, body=self.route.get_system_topic_list().encode())

    def delete_topic_in_namesrv(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = DeleteTopicInNamesrvRequestHeader.from_command(req)
        self.route.delete_topic(h.topic)
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS)

    def wipe_write_perm_of_broker(self, conn, req: RemotingCommand) -> RemotingCommand:
        h = WipeWritePermOfBrokerRequestHeader.from_command(req)
        n = self.route.wipe_write_perm_of_broker(h.brokerName)
        log.info("wipe write perm of broker[%s], client: %s, %d", h.brokerName, conn.remote_addr, n)
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS,
                                           ext_fields=WipeWritePermOfBrokerResponseHeader(n).to_ext_fields())
