"""The broker's RocketMQ remoting processors (SendMessageProcessor, PullMessageProcessor, offsets,
client management, admin, and this project's DLQ resend extension), registered on a RemotingServer
by request code (SPEC §3, §4, §7)."""
from __future__ import annotations

from rmq.server.processors.admin import AdminProcessor, encode_mq_table, parse_mq_table
from rmq.server.processors.client import ClientManageProcessor
from rmq.server.processors.common import BrokerServices
from rmq.server.processors.dlq import DlqAdminProcessor
from rmq.server.processors.offsets import OffsetProcessor
from rmq.server.processors.pull import ExpressionMessageFilter, PullMessageProcessor, message_filter_for
from rmq.server.processors.send import SendMessageProcessor


def register_all(server, svc: BrokerServices) -> dict:
    """Register every processor on `server` (a RemotingServer); returns them by name."""
    procs = {"send": SendMessageProcessor(svc), "pull": PullMessageProcessor(svc),
             "offsets": OffsetProcessor(svc), "client": ClientManageProcessor(svc), "admin": AdminProcessor(svc),
             "dlq": DlqAdminProcessor(svc)}
    for p in procs.values():
        server.register_many(p.table())
    return procs


__all__ = ["AdminProcessor", "BrokerServices", "ClientManageProcessor", "DlqAdminProcessor", "ExpressionMessageFilter",
           "OffsetProcessor", "PullMessageProcessor", "SendMessageProcessor",
           "encode_mq_table", "message_filter_for", "parse_mq_table", "register_all"]
