"""The broker's RocketMQ remoting listener (BrokerController's NettyRemotingServer side) with the
BrokerOuterAPI loop that registers with every NameServer every 30 s, and client housekeeping (SPEC §9)."""
from __future__ import annotations

import asyncio
import logging
import threading

from rmq.broker.topic_config import PERM_READ, PERM_WRITE
from rmq.remoting import (
    CheckTransactionStateRequestHeader,
    DataVersion,
    NotifyConsumerIdsChangedRequestHeader,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    TopicConfig,
    TopicConfigSerializeWrapper,
    UnRegisterBrokerRequestHeader,
)
from rmq.server.processors import BrokerServices, register_all
from rmq.server.processors.common import encode_message_ext
from rmq.server.remoting_server import (
    RemotingClient,
    RemotingConnectError,
    RemotingConnection,
    RemotingServer,
    RemotingTimeout,
    cancel_and_wait,
)

log = logging.getLogger("rmq.broker.remoting")

#: ClientHousekeepingService scans idle client channels this often.
CLIENT_HOUSEKEEPING_INTERVAL_S = 10.0


def parse_namesrv_addr(text: str | None) -> list[str]:
    """namesrvAddr "a:9876;b:9876" -> ["a:9876", "b:9876"]."""
    return [p.strip() for p in (text or "").split(";") if p.strip()]


def body_crc32(data: bytes) -> int:
    import zlib
    return zlib.crc32(data) & 0x7FFFFFFF


class BrokerRemotingServer:
    """Owns the remoting server, the processors' shared services, the NameServer registration loop
    and the housekeeping loop. The BrokerController (store, topics, offsets) is the caller's."""

    def __init__(self, controller, *, namesrv_addr: str | None = None) -> None:
        self.controller = controller
        bc = controller.broker_config
        self.remoting = RemotingServer("broker", max_frame_size=bc.remotingFrameMaxLength,
                                       max_idle_s=bc.serverChannelMaxIdleTimeSeconds,
                                       max_connections=bc.serverMaxConnections)
        self.client = RemotingClient("broker->namesrv")
        self.services: BrokerServices | None = None
        self.processors: dict = {}
        self.address = ""
        self.broker_addr = ""
        self.namesrv_addrs = parse_namesrv_addr(namesrv_addr if namesrv_addr is not None
                                                else controller.broker_config.namesrvAddr)
        self._tasks: list[asyncio.Task] = []
        self._register_now: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._ns_failing: dict[str, bool] = {}
        self.registrations = 0
        # (topic table, its data_version, brokerPermission) -> the REGISTER_BROKER body: the periodic
        # registration of an unchanged table reuses it (1,000 topics: 20 ms of encoding on the loop)
        self._register_body: tuple | None = None
        self.master_addr: str | None = None
        self.ha_service = None       # rmq.server.ha.HAService when started with ha=True
        self.ha_server_addr = ""     # the master's HA listener, registered with the NameServers

    # ------------------------------------------------------------------ lifecycle
    async def start(self, host: str, port: int, *, sock=None, ha: bool = False) -> str:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._register_now = asyncio.Event()
        from rmq.server.acl import acl_validator
        acl = acl_validator(self.controller)  # aclEnable: a bad plain_acl.yml stops the start here
        if acl is not None:
            self.remoting.request_check = acl.check
        self.address = await self.remoting.start(host, port, sock=sock)
        self._adopt_port(self.remoting.port)
        store_cfg = self.controller.cfg.store
        self.broker_addr = f"{store_cfg.brokerIP1}:{self.remoting.port}"
        svc = BrokerServices(self.controller, broker_addr=self.broker_addr)
        svc.on_topics_changed = self.request_register
        # a topic created another way (a Kafka CreateTopics, the store's own system topics) also goes
        # to the NameServers at once, not at the next registerNameServerPeriod
        tcm = self.controller.topic_config_manager
        earlier = tcm.on_created

        def on_created(tc, _earlier=earlier):
            if _earlier is not None:
                _earlier(tc)
            self.request_register()
        tcm.on_created = on_created
        svc.consumer_manager.ids_change_listener = self._notify_consumer_ids_changed
        self.services = svc
        self.processors = register_all(self.remoting, svc)
        fast = self.processors["send"].fast
        if fast is not None:
            self.remoting.fast_frame = fast.on_frame
        self.remoting.close_listeners.append(self._on_channel_close)
        txn = getattr(self.controller, "transaction_service", None)
        if txn is not None and getattr(txn, "checker", None) is None:
            txn.checker = self.check_transaction_state
        self._tasks.append(self._loop.create_task(self._housekeeping_loop(), name="ClientHousekeepingService"))
        if ha:
            await self._start_ha(host, port == 0 and sock is None)
        if self.namesrv_addrs:
            self._tasks.append(self._loop.create_task(self._register_loop(), name="registerBrokerAll"))
        log.info("broker %s (%s) serves RocketMQ remoting on %s; NameServers: %s",
                 self.controller.broker_config.brokerName, self.broker_addr, self.address,
                 ";".join(self.namesrv_addrs) or "none")
        return self.address

    async def _start_ha(self, host: str, ephemeral: bool) -> None:
        """Master/slave replication (rmq.server.ha): a master listens on haListenPort (-1: listenPort
        + 1, or ephemeral when the remoting port was); a slave connects to its master's HA port and
        runs SlaveSynchronize against its master's remoting port."""
        from rmq.server.ha import HAService, SlaveSynchronize
        cfg = self.controller.cfg.store
        ha = HAService(self.controller)
        ha_port = cfg.haListenPort
        if ha_port < 0:
            ha_port = 0 if ephemeral else self.remoting.port + 1
        try:
            addr = await ha.start(host, ha_port)
        except OSError as exc:
            exc.listener, exc.port = "ha", ha_port  # for the caller's one-sentence start-up error
            raise
        self.ha_service = ha
        self.controller.ha_service = ha
        if addr:
            self.ha_server_addr = f"{cfg.brokerIP1}:{addr.rpartition(':')[2]}"
        if ha.is_slave:
            interval = max(0.1, self.controller.broker_config.slaveSynchronizeInterval / 1000.0)
            sync = SlaveSynchronize(self.controller, self.client.invoke, lambda: self.master_addr, interval)
            self.slave_synchronize = sync
            self._tasks.append(self._loop.create_task(sync.run(), name="SlaveSynchronize"))

    def _adopt_port(self, port: int) -> None:
        """With listenPort 0 the store host (in every unit and offsetMsgId) must name the bound port."""
        store = self.controller.store
        cfg = self.controller.cfg.store
        if store.store_host[1] == port:
            return
        from rmq.common.message import pack_host
        host = (cfg.brokerIP1, port)
        cfg.listenPort = port
        store.store_host = host
        cl = store.commitlog
        cl.store_host = host
        cl.store_addr, cl.store_port, cl.store_v6 = pack_host(host)

    async def close_async(self) -> None:
        txn = getattr(self.controller, "transaction_service", None)
        if txn is not None and getattr(txn, "checker", None) == self.check_transaction_state:
            txn.checker = None
        await cancel_and_wait(self._tasks)
        self._tasks.clear()
        if self.ha_service is not None:
            await self.ha_service.close_async()
            if getattr(self.controller, "ha_service", None) is self.ha_service:
                self.controller.ha_service = None
        if self.namesrv_addrs and self.broker_addr:
            await self.unregister_broker_all()
        await self.client.close_async()
        await self.remoting.close_async()
        if self.services is not None:
            self.services.shutdown()

    # ------------------------------------------------------------------ client channels
    def _on_channel_close(self, conn: RemotingConnection) -> None:
        svc = self.services
        if svc is None:
            return
        svc.producer_manager.do_channel_close_event(conn)
        svc.consumer_manager.do_channel_close_event(conn)

    def _notify_consumer_ids_changed(self, group: str, channels: list) -> None:
        if threading.get_ident() != self._loop_thread and self._loop is not None:
            self._loop.call_soon_threadsafe(self._notify_consumer_ids_changed, group, channels)
            return
        for ch in channels:
            if isinstance(ch, RemotingConnection) and not ch.closed:
                req = ch.new_request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                     NotifyConsumerIdsChangedRequestHeader(group).to_ext_fields())
                ch.invoke_oneway(req)

    def check_transaction_state(self, group: str, ext) -> bool:
        """The transaction check-back (any thread): CHECK_TRANSACTION_STATE, oneway, to a live connection
        of the producer group, with the half message under its real topic as the body
        (Broker2Client.checkProducerTransactionState). False when the group has no connection."""
        svc = self.services
        if svc is None or self._loop is None:
            return False
        ch = svc.producer_manager.available_channel(group)
        if ch is None:
            log.warning("Check transaction failed, channel is null. groupId=%s", group)
            return False
        props = ext.properties
        uniq = props.get("UNIQ_KEY")
        header = CheckTransactionStateRequestHeader(tranStateTableOffset=ext.queue_offset,
                                                    commitLogOffset=ext.commit_log_offset, msgId=uniq,
                                                    transactionId=uniq, offsetMsgId=ext.msg_id)
        real_qid = props.get("REAL_QID", "")
        body = encode_message_ext(ext, topic=props.get("REAL_TOPIC", ext.topic),
                                  queue_id=int(real_qid) if real_qid.lstrip("-").isdigit() else ext.queue_id)

        def send() -> None:
            if not ch.closed:
                ch.invoke_oneway(ch.new_request(RequestCode.CHECK_TRANSACTION_STATE, header.to_ext_fields(), body))

        if threading.get_ident() == self._loop_thread:
            send()
        else:
            self._loop.call_soon_threadsafe(send)
        return True

    async def _housekeeping_loop(self) -> None:
        while True:
            await asyncio.sleep(CLIENT_HOUSEKEEPING_INTERVAL_S)
            svc = self.services
            try:
                for ch in svc.producer_manager.scan_not_active_channel() + svc.consumer_manager.scan_not_active_channel():
                    close = getattr(ch, "close", None)
                    if close is not None:
                        close()
            except Exception:  # noqa: BLE001
                log.exception("client housekeeping failed")

    # ------------------------------------------------------------------ BrokerOuterAPI
    def request_register(self) -> None:
        """Register with the NameServers as soon as possible (a topic was created or changed)."""
        if self._loop is None or self._register_now is None:
            return
        if threading.get_ident() != self._loop_thread:
            self._loop.call_soon_threadsafe(self._register_now.set)
        else:
            self._register_now.set()

    def _topic_config_wrapper(self) -> TopicConfigSerializeWrapper:
        ctrl = self.controller
        tcm = ctrl.topic_config_manager
        bperm = ctrl.broker_config.brokerPermission
        rw = PERM_READ | PERM_WRITE
        table = {}
        for name, tc in list(tcm.table.items()):
            perm = tc.perm if (bperm & rw) == rw else bperm
            table[name] = TopicConfig(tc.topicName, tc.readQueueNums, tc.writeQueueNums, perm,
                                      tc.topicFilterType, tc.topicSysFlag, tc.order)
        dv = tcm.data_version
        return TopicConfigSerializeWrapper(table, DataVersion(int(dv.get("timestamp", 0)), int(dv.get("counter", 0))))

    async def _register_loop(self) -> None:
        bc = self.controller.broker_config
        period = max(1.0, min(bc.registerNameServerPeriod, 60_000) / 1000.0)
        loop = asyncio.get_running_loop()
        last_version = None
        next_at = 0.0
        while True:
            tcm = self.controller.topic_config_manager
            version = (tcm.data_version.get("timestamp"), tcm.data_version.get("counter"))
            if loop.time() >= next_at or version != last_version or self._register_now.is_set():
                self._register_now.clear()
                last_version = version
                try:
                    await self.register_broker_all()
                except Exception:  # noqa: BLE001 - keep registering
                    log.exception("registerBrokerAll failed")
                next_at = loop.time() + period
            try:
                async with asyncio.timeout(min(1.0, period)):  # not wait_for: it can swallow a cancel (3.11)
                    await self._register_now.wait()
            except TimeoutError:
                pass

    async def register_broker_all(self) -> int:
        """REGISTER_BROKER to every NameServer at once; returns how many accepted."""
        ctrl = self.controller
        bc = ctrl.broker_config
        tcm = ctrl.topic_config_manager
        key = (tcm.table, tcm.data_version, bc.brokerPermission)
        cached = self._register_body
        if cached is not None and all(a is b for a, b in zip(cached[0], key[:2])) and cached[0][2] == key[2]:
            body = cached[1]
        else:
            body = RegisterBrokerBody(self._topic_config_wrapper(), []).encode()
            self._register_body = (key, body)
        port = self.remoting.port
        header = RegisterBrokerRequestHeader(
            brokerName=bc.brokerName, brokerAddr=self.broker_addr, clusterName=bc.brokerClusterName,
            haServerAddr=self.ha_server_addr or f"{ctrl.cfg.store.brokerIP1}:{port + 1}", brokerId=bc.brokerId,
            compressed=False, bodyCrc32=body_crc32(body))
        timeout = max(0.5, bc.registerBrokerTimeoutMills / 1000.0)

        async def one(addr: str) -> bool:
            req = RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body)
            try:
                resp = await self.client.invoke(addr, req, timeout)
            except (RemotingConnectError, RemotingTimeout, OSError) as exc:
                if not self._ns_failing.get(addr):
                    log.warning("registerBroker to name server %s failed: %s", addr, exc)
                self._ns_failing[addr] = True
                self.client.close_connection(addr)
                return False
            if resp.code != ResponseCode.SUCCESS:
                log.warning("registerBroker to name server %s: code %d %s", addr, resp.code, resp.remark)
                self._ns_failing[addr] = True
                return False
            if self._ns_failing.get(addr, True):
                log.info("registered broker %s to name server %s", self.broker_addr, addr)
            self._ns_failing[addr] = False
            master = resp.ext_fields.get("masterAddr")
            if master and bc.brokerId != 0:
                self.master_addr = master
                if self.ha_service is not None:  # updateMasterHAServerAddrPeriodically
                    self.ha_service.update_master_address(resp.ext_fields.get("haServerAddr"))
            return True

        results = await asyncio.gather(*(one(a) for a in self.namesrv_addrs))
        self.registrations += 1
        return sum(results)

    async def unregister_broker_all(self) -> None:
        bc = self.controller.broker_config
        header = UnRegisterBrokerRequestHeader(brokerName=bc.brokerName, brokerAddr=self.broker_addr,
                                               clusterName=bc.brokerClusterName, brokerId=bc.brokerId)

        async def one(addr: str) -> None:
            try:
                resp = await self.client.invoke(addr, RemotingCommand.request(
                    RequestCode.UNREGISTER_BROKER, header.to_ext_fields()), 1.5)
                if resp.code == ResponseCode.SUCCESS:
                    log.info("unregisterBroker OK, NamesrvAddr: %s", addr)
            except (RemotingConnectError, RemotingTimeout, OSError) as exc:
                log.info("unregisterBroker from %s failed: %s", addr, exc)

        await asyncio.gather(*(one(a) for a in self.namesrv_addrs))


async def start_remoting_listener(controller, host: str, port: int, *, sock=None,
                                  namesrv_addr: str | None = None, ha: bool = False) -> tuple[BrokerRemotingServer, str]:
    """Start the broker's RocketMQ remoting listener on host:port (0 = ephemeral) over a started
    BrokerController; registers with the NameServers in `namesrv_addr` ("a:9876;b:9876"), by default
    the broker config's namesrvAddr. Returns (server, "host:port"); `await server.close_async()`."""
    srv = BrokerRemotingServer(controller, namesrv_addr=namesrv_addr)
    try:
        addr = await srv.start(host, port, sock=sock, ha=ha)
    except BaseException:
        await srv.close_async()  # the remoting socket may be bound already (the HA port was not)
        raise
    return srv, addr


__all__ = ["BrokerRemotingServer", "start_remoting_listener", "parse_namesrv_addr"]
