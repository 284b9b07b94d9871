"""PullMessageProcessor with PullRequestHoldService's long polling: a pull that finds nothing is held up
to suspendTimeoutMillis, woken at once by a message arrival, re-checked every 5 s (SPEC §4, §5)."""
from __future__ import annotations

import asyncio
import functools
import logging

from rmq.common.filter import MAX_EXPRESSION_LENGTH, SqlFilter, SqlParseError, TagFilter, build_filter, is_tag_type
from rmq.common.log_limit import RateLimitedLog, host_of
from rmq.common.message import decode_message
from rmq.remoting import PullMessageRequestHeader, PullMessageResponseHeader, RemotingCommand, RequestCode, ResponseCode
from rmq.server.processors.common import MASTER_ID, BrokerServices, response
from rmq.store import GetMessageStatus, MessageFilter

log = logging.getLogger("rmq.broker.remoting")
# a consumer pulling in a loop from a missing topic or with a subscription that does not parse: 5 lines,
# then one per 10 s (issue 22)
refused_pull_log = RateLimitedLog(log, "refused pulls", prefix="broker: ")

# PullSysFlag
FLAG_COMMIT_OFFSET = 0x1 << 0
FLAG_SUSPEND = 0x1 << 1
FLAG_SUBSCRIPTION = 0x1 << 2
FLAG_CLASS_FILTER = 0x1 << 3

#: defaults of maxTransferCountOnMessageInMemory / maxTransferBytesOnMessageInMemory (the store
#: config's keys of those names set them per broker)
MAX_TRANSFER_COUNT = 32
MAX_TRANSFER_BYTES = 256 * 1024
#: PullRequestHoldService checks held requests this often when long polling is on.
HOLD_CHECK_INTERVAL_S = 5.0


class ExpressionMessageFilter(MessageFilter):
    """The store's MessageFilter over a TAG or SQL92 subscription: the tag code pre-filters on the
    consumequeue; SQL92 is evaluated on the unit's properties read from the commitlog."""

    __slots__ = ("filter", "sql", "codes", "native")

    def __init__(self, f) -> None:
        self.filter = f
        self.sql = isinstance(f, SqlFilter)
        # the consumequeue pre-filter as the C pull takes it (store.get_message_body): None for every
        # tag, else the int32 tag codes; SQL92 subscriptions keep get_message
        self.native = isinstance(f, TagFilter)
        self.codes = None if not self.native or f.subscribe_all else tuple(sorted(f.codes))

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return self.filter.matches_code(tags_code)

    def is_matched_by_commit_log(self, raw: bytes) -> bool:
        if not self.sql:
            return True
        try:
            props = decode_message(raw, read_body=False).properties
        except ValueError:
            return False
        return self.filter.matches(props)


def message_filter_for(expression_type: str | None, expression: str | None) -> ExpressionMessageFilter:
    """Parse a subscription into a store filter; raises ValueError / SqlParseError. Cached for
    expressions up to MAX_EXPRESSION_LENGTH characters: they are what clients send, and a cached
    key is kept whole."""
    if isinstance(expression, str) and len(expression) > MAX_EXPRESSION_LENGTH:
        return ExpressionMessageFilter(build_filter(expression_type, expression))
    return _message_filter_cached(expression_type, expression)


@functools.lru_cache(maxsize=1024)
def _message_filter_cached(expression_type: str | None, expression: str | None) -> ExpressionMessageFilter:
    return ExpressionMessageFilter(build_filter(expression_type, expression))


class _Hold:
    __slots__ = ("timeout_s", "filter")

    def __init__(self, timeout_s: float, f) -> None:
        self.timeout_s = timeout_s
        self.filter = f


class PullMessageProcessor:
    def __init__(self, svc: BrokerServices, *, fast: bool = True) -> None:
        self.svc = svc
        self.held = 0
        #: answer tag / every-message pulls through store.get_message_body (C); False keeps every
        #: pull on store.get_message, the reference tests/test_pull_frame.py compares against
        self.fast = fast

    def table(self) -> dict:
        return {RequestCode.PULL_MESSAGE: self.process}

    def process(self, conn, req: RemotingCommand):
        h = PullMessageRequestHeader.from_command(req)
        resp, hold = self._process(conn, req, h, allow_suspend=True)
        if hold is None:
            return resp
        return self._hold(conn, req, h, hold)

    # ------------------------------------------------------------------ PullMessageProcessor.processRequest
    def _process(self, conn, req, h, *, allow_suspend: bool):
        svc = self.svc
        ctrl = svc.controller
        if not svc.broker_readable():
            return response(req, ResponseCode.NO_PERMISSION,
                            f"the broker[{svc.broker_ip}] pulling message is forbidden"), None
        sg = ctrl.subscription_group_manager.find(h.consumerGroup)
        if sg is None:
            return response(req, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                            f"subscription group [{h.consumerGroup}] does not exist"), None
        if not sg.consumeEnable:
            return response(req, ResponseCode.NO_PERMISSION,
                            f"subscription group no permission, {h.consumerGroup}"), None
        sys_flag = h.sysFlag or 0
        has_suspend = bool(sys_flag & FLAG_SUSPEND)
        has_commit = bool(sys_flag & FLAG_COMMIT_OFFSET)
        has_subscription = bool(sys_flag & FLAG_SUBSCRIPTION)
        suspend_ms = (h.suspendTimeoutMillis or 0) if has_suspend else 0
        tc = ctrl.topic_config_manager.get(h.topic)
        if tc is None:
            refused_pull_log.log(logging.ERROR, host_of(conn), "pulled topic does not exist",
                                     "the topic %s not exist, consumer: %s", h.topic, conn.remote_addr)
            return response(req, ResponseCode.TOPIC_NOT_EXIST,
                            f"topic[{h.topic}] not exist, apply first please!"), None
        if not tc.perm & 0x4:
            return response(req, ResponseCode.NO_PERMISSION,
                            f"the topic[{h.topic}] pulling message is forbidden"), None
        if h.queueId < 0 or h.queueId >= tc.readQueueNums:
            return response(req, ResponseCode.SYSTEM_ERROR,
                            f"queueId[{h.queueId}] is illegal, topic:[{h.topic}] topicConfig.readQueueNums:"
                            f"[{tc.readQueueNums}] consumer:[{conn.remote_addr}]"), None
        if has_subscription:
            expr_type, expr = h.expressionType, h.subscription
        else:
            cg = svc.consumer_manager.get(h.consumerGroup)
            if cg is None:
                return response(req, ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's group info not exist"), None
            if not sg.consumeBroadcastEnable and cg.message_model == "BROADCASTING":
                return response(req, ResponseCode.NO_PERMISSION,
                                f"the consumer group[{h.consumerGroup}] can not consume by broadcast way"), None
            sub = cg.subscriptions.get(h.topic)
            if sub is None:
                return response(req, ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist"), None
            if sub.sub_version < (h.subVersion or 0):
                return response(req, ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest"), None
            expr_type, expr = sub.expression_type, sub.sub_string
        if not is_tag_type(expr_type) and not svc.broker_config.enablePropertyFilter:
            return response(req, ResponseCode.SYSTEM_ERROR,
                            f"The broker does not support consumer to filter message by {expr_type}"), None
        try:
            mfilter = message_filter_for(expr_type, expr)
        except (SqlParseError, ValueError) as exc:
            refused_pull_log.warning(host_of(conn), "subscription does not parse",
                                         "parse the consumer's subscription[%s] failed, group: %s: %s", expr,
                                         h.consumerGroup, exc)
            return response(req, ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                            f"parse the consumer's subscription failed: {exc}"), None

        scfg = svc.store_config
        cap_nums = getattr(scfg, "maxTransferCountOnMessageInMemory", MAX_TRANSFER_COUNT)
        cap_bytes = getattr(scfg, "maxTransferBytesOnMessageInMemory", MAX_TRANSFER_BYTES)
        max_nums = max(1, min(h.maxMsgNums or 1, cap_nums))
        max_bytes = cap_bytes if not h.maxMsgBytes or h.maxMsgBytes <= 0 else min(h.maxMsgBytes, cap_bytes)
        res = None
        if mfilter.native and self.fast:  # the common pull: units joined in C (rmq._native.pull_units)
            res = svc.store.get_message_body(h.consumerGroup, h.topic, h.queueId, h.queueOffset, max_nums,
                                             mfilter.codes, max_bytes=max_bytes)
        if res is None:                     # SQL92, or no C extension: the reference walk
            res = svc.store.get_message(h.consumerGroup, h.topic, h.queueId, h.queueOffset, max_nums, mfilter,
                                        max_bytes=max_bytes)
        st = res.status
        suggest = MASTER_ID
        if svc.broker_config.slaveReadEnable:  # consume too slow: redirect to another machine
            suggest = sg.whichBrokerWhenConsumeSlowly if res.suggest_pulling_from_slave else sg.brokerId
        rh = PullMessageResponseHeader(suggestWhichBrokerId=suggest, nextBeginOffset=res.next_begin_offset,
                                       minOffset=res.min_offset, maxOffset=res.max_offset)
        S = GetMessageStatus
        if st is S.FOUND:
            code = ResponseCode.SUCCESS
        elif st is S.MESSAGE_WAS_REMOVING or st is S.NO_MATCHED_MESSAGE:
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        elif st is S.NO_MATCHED_LOGIC_QUEUE or st is S.NO_MESSAGE_IN_QUEUE:
            if h.queueOffset != 0:
                code = ResponseCode.PULL_OFFSET_MOVED
                log.info("the broker stores no queue data, fix the request offset %d to %d, Topic: %s "
                         "QueueId: %d Consumer Group: %s", h.queueOffset, res.next_begin_offset, h.topic,
                         h.queueId, h.consumerGroup)
            else:
                code = ResponseCode.PULL_NOT_FOUND
        elif st is S.OFFSET_FOUND_NULL or st is S.OFFSET_OVERFLOW_ONE:
            code = ResponseCode.PULL_NOT_FOUND
        elif st is S.OFFSET_OVERFLOW_BADLY or st is S.OFFSET_TOO_SMALL:
            code = ResponseCode.PULL_OFFSET_MOVED
            log.info("the request offset %d is out of range [%d, %d] for %s:%d group %s; next %d",
                     h.queueOffset, res.min_offset, res.max_offset, h.topic, h.queueId, h.consumerGroup,
                     res.next_begin_offset)
        else:  # pragma: no cover - every status is listed above
            code = ResponseCode.SYSTEM_ERROR
        if code == ResponseCode.PULL_OFFSET_MOVED and svc.is_slave:
            rh.nextBeginOffset = h.queueOffset
            code = ResponseCode.PULL_RETRY_IMMEDIATELY

        hold = None
        body = b""
        if code == ResponseCode.SUCCESS:
            body = b"".join(res.messages)
        elif code == ResponseCode.PULL_NOT_FOUND and allow_suspend and has_suspend:
            if svc.broker_config.longPollingEnable:
                polling_ms = suspend_ms
            else:
                polling_ms = svc.broker_config.shortPollingTimeMills
            hold = _Hold(max(0, polling_ms) / 1000.0, mfilter)

        if allow_suspend and has_commit and not svc.is_slave:
            ctrl.offset_manager.commit_offset(h.consumerGroup, h.topic, h.queueId, h.commitOffset)
        return response(req, code, st.value, rh.to_ext_fields(), body), hold

    # ------------------------------------------------------------------ PullRequestHoldService
    async def _hold(self, conn, req, h, hold: _Hold):
        svc = self.svc
        loop = asyncio.get_running_loop()
        deadline = loop.time() + hold.timeout_s
        store = svc.store
        hub = svc.controller.arrival_hub
        tick = HOLD_CHECK_INTERVAL_S if svc.broker_config.longPollingEnable else \
            max(0.05, svc.broker_config.shortPollingTimeMills / 1000.0)
        wait_from = h.queueOffset
        self.held += 1
        try:
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    break
                if store.get_max_offset_in_queue(h.topic, h.queueId) <= wait_from:
                    woke = await hub.wait([(h.topic, h.queueId, wait_from)], min(left, tick))
                else:
                    woke = True
                if conn.closed:
                    return None
                if store.get_max_offset_in_queue(h.topic, h.queueId) <= h.queueOffset:
                    continue
                resp, _ = self._process(conn, req, h, allow_suspend=False)
                if (woke and resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY
                        and resp.remark == GetMessageStatus.NO_MATCHED_MESSAGE.value
                        and loop.time() < deadline):
                    # New messages, none matching: keep holding (the hold service's tag-code check).
                    wait_from = max(wait_from, store.get_max_offset_in_queue(h.topic, h.queueId))
                    continue
                return resp
            if conn.closed:
                return None
            resp, _ = self._process(conn, req, h, allow_suspend=False)
            return resp
        finally:
            self.held -= 1
