"""BrokerServices: what every broker remoting processor shares — the controller, the client and lock
managers, the store host address and a hook to re-register with the NameServers (SPEC §3, §4, §9)."""
from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from rmq.broker.client_manager import ConsumerManager, ProducerManager, RebalanceLockManager
from rmq.broker.topic_config import PERM_INHERIT, PERM_READ, PERM_WRITE, TopicConfig
from rmq.remoting import RemotingCommand, ResponseCode

log = logging.getLogger("rmq.broker.remoting")

MASTER_ID = 0


def total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 8 * 1024 ** 3


class BrokerServices:
    """Shared state of the broker's remoting processors (one per listener)."""

    def __init__(self, controller, *, broker_addr: str) -> None:
        self.controller = controller
        self.store = controller.store
        self.broker_config = controller.broker_config
        self.store_config = controller.cfg.store
        idle = float(getattr(self.broker_config, "clientChannelMaxIdleTimeSeconds", 120))
        lock_live = getattr(self.broker_config, "rebalanceLockMaxLiveTime", 60_000) / 1000.0
        # Reuse managers the controller may already own (another listener of the same broker).
        self.consumer_manager: ConsumerManager = _attach(controller, "consumer_manager", lambda: ConsumerManager(idle))
        self.producer_manager: ProducerManager = _attach(controller, "producer_manager", lambda: ProducerManager(idle))
        self.lock_manager: RebalanceLockManager = _attach(controller, "rebalance_lock_manager",
                                                          lambda: RebalanceLockManager(lock_live))
        self.broker_addr = broker_addr
        self.boot_timestamp = int(time.time() * 1000)
        self.sync_flush = self.store_config.flushDiskType == "SYNC_FLUSH"
        self.executor = ThreadPoolExecutor(max_workers=16, thread_name_prefix="SendMessageThread") \
            if self.sync_flush else None
        #: Called when topics change so the BrokerOuterAPI registers again at once.
        self.on_topics_changed: Callable[[], None] = lambda: None
        self.memory_bytes = total_physical_memory()

    @property
    def broker_name(self) -> str:
        return self.broker_config.brokerName

    @property
    def broker_ip(self) -> str:
        return self.store_config.brokerIP1

    @property
    def is_slave(self) -> bool:
        return self.store_config.brokerRole == "SLAVE"

    def broker_writeable(self) -> bool:
        return bool(self.broker_config.brokerPermission & PERM_WRITE)

    def broker_readable(self) -> bool:
        return bool(self.broker_config.brokerPermission & PERM_READ)

    def topics_changed(self) -> None:
        try:
            self.on_topics_changed()
        except Exception:  # noqa: BLE001
            log.exception("registering the broker after a topic change failed")

    # ------------------------------------------------------------------ topic creation
    def create_topic_in_send_message_method(self, topic: str, default_topic: str | None,
                                            client_queue_nums: int, sys_flag: int = 0) -> TopicConfig | None:
        """TopicConfigManager.createTopicInSendMessageMethod: inherit from the default topic (TBW102)
        when it carries PERM_INHERIT; queue count = min(client's defaultTopicQueueNums, default's)."""
        tcm = self.controller.topic_config_manager
        tc = tcm.get(topic)
        if tc is not None:
            return tc
        default = tcm.get(default_topic) if default_topic else None
        if default is None:
            log.warning("Create new topic failed, because the default topic[%s] not exist.", default_topic)
            return None
        perm = default.perm
        if default_topic == "TBW102" and not self.broker_config.autoCreateTopicEnable:
            perm = PERM_READ | PERM_WRITE
        if not perm & PERM_INHERIT:
            log.warning("Create new topic failed, because the default topic[%s] has no perm [%d]", default_topic, perm)
            return None
        n = max(0, min(int(client_queue_nums), default.writeQueueNums))
        tc = tcm.create_if_absent(topic, n, perm & ~PERM_INHERIT, sys_flag)
        log.info("Create new topic by default topic:[%s] config:[%s]", default_topic, tc)
        self.topics_changed()
        return tc

    def create_topic_in_send_message_back_method(self, topic: str, queue_nums: int, perm: int,
                                                 sys_flag: int = 0) -> TopicConfig:
        tcm = self.controller.topic_config_manager
        tc = tcm.get(topic)
        if tc is not None:
            return tc
        tc = tcm.create_if_absent(topic, queue_nums, perm, sys_flag)
        log.info("create new topic %s", tc)
        self.topics_changed()
        return tc

    def shutdown(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)


def encode_message_ext(ext, *, topic: str | None = None, queue_id: int | None = None) -> bytes:
    """MessageDecoder.encode(messageExt): a stored message as a commitlog unit, optionally with another
    topic / queue id (CHECK_TRANSACTION_STATE sends the half message under its REAL_TOPIC / REAL_QID)."""
    from rmq.common.message import pack_host
    from rmq.store import Message
    from rmq.store.unit import PreparedMessage
    msg = Message(topic if topic is not None else ext.topic, ext.body,
                  ext.queue_id if queue_id is None else queue_id, ext.flag, dict(ext.properties), ext.sys_flag,
                  ext.born_timestamp, ext.born_host, ext.reconsume_times, ext.prepared_transaction_offset)
    addr, port, v6 = pack_host(ext.store_host)
    return PreparedMessage(msg, v6).encode(ext.queue_offset, ext.commit_log_offset, ext.store_timestamp, addr, port)


def _attach(controller, name: str, factory):
    obj = getattr(controller, name, None)
    if obj is None:
        obj = factory()
        try:
            setattr(controller, name, obj)
        except AttributeError:  # pragma: no cover - a controller with __slots__
            pass
    return obj


def response(req: RemotingCommand, code: int = ResponseCode.SUCCESS, remark: str | None = None,
             ext_fields: dict | None = None, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.response_to(req, code, remark, ext_fields, body)
