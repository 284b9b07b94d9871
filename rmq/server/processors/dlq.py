"""RESEND_DLQ_MESSAGE_EXT (99001): the admin request behind ``rmq admin resendDLQ`` — put the
dead letters of a consumer group back where they can be consumed again (SPEC §7 "resend is an
admin action").

This is a project extension, not a RocketMQ request: RocketMQ 4.x has no broker request for it
(mqadmin offers none; the RocketMQ dashboard resends a dead letter through
CONSUME_MESSAGE_DIRECTLY to one online consumer of the group).  Request ext fields:
``consumerGroup`` (required), ``topic`` (optional destination; default ``%RETRY%<group>``, so
only that group consumes the messages again, with their original topic restored by the client
from RETRY_TOPIC), ``maxCount`` (default 1000).  Response: SUCCESS with ext field ``resent`` and a
JSON body ``{"dlqTopic", "destination", "resent"}``; TOPIC_NOT_EXIST when the destination topic
does not exist.  rmq.broker.retry.resend_from_dlq does the work (each dead letter is resent once).
"""
from __future__ import annotations

import logging

from rmq.broker.retry import dlq_topic, resend_from_dlq, retry_topic
from rmq.remoting import RemotingCommand, RequestCode, ResponseCode, fastjson
from rmq.server.processors.common import BrokerServices, response

log = logging.getLogger("rmq.broker.remoting")


class DlqAdminProcessor:
    def __init__(self, svc: BrokerServices) -> None:
        self.svc = svc

    def table(self) -> dict:
        return {RequestCode.RESEND_DLQ_MESSAGE_EXT: self.resend_dlq}

    def resend_dlq(self, conn, req: RemotingCommand) -> RemotingCommand:
        ext = req.ext_fields or {}
        group = (ext.get("consumerGroup") or "").strip()
        if not group:
            return response(req, ResponseCode.SYSTEM_ERROR, "consumerGroup is required")
        try:
            max_count = int(ext.get("maxCount") or 1000)
        except ValueError:
            return response(req, ResponseCode.SYSTEM_ERROR, f"maxCount {ext.get('maxCount')!r} is not a number")
        if not 1 <= max_count <= 1_000_000:
            return response(req, ResponseCode.SYSTEM_ERROR, "maxCount: expected 1..1000000")
        dest = (ext.get("topic") or "").strip() or retry_topic(group)
        ctrl = self.svc.controller
        if ctrl.get_topic(dest) is None:
            return response(req, ResponseCode.TOPIC_NOT_EXIST, f"topic[{dest}] not exist")
        n = resend_from_dlq(ctrl, group, max_count=max_count, target_topic=dest)
        log.info("resent %d message(s) of %s to %s (requested by %s)", n, dlq_topic(group), dest, conn.remote_addr)
        body = fastjson.dumpb({"dlqTopic": dlq_topic(group), "destination": dest, "resent": n})
        return response(req, ext_fields={"resent": str(n)}, body=body)
