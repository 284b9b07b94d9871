"""The broker's RocketMQ remoting processors (SendMessageProcessor, PullMessageProcessor, offsets,
client management, admin, and this project's DLQ resend extension), registered on a RemotingServer
by request code (SPEC §3, §4, §7)."""
from __future__ import annotations

from .admin import AdminProcessor, encode_mq_table, parse_mq_table
from .client import ClientManageProcessor
from .common import BrokerServices
from .dlq import DlqAdminProcessor
from .offsets import OffsetProcessor
from .pull import ExpressionMessageFilter, PullMessageProcessor, message_filter_for
from .send import SendMessageProcessor


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
