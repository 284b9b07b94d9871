"""rmq.store: RocketMQ's storage engine in Python — CommitLog, ConsumeQueue, IndexFile,
ReputMessageService, flush, recovery and cleanup (SPEC §2). No sockets, no asyncio."""
from .config import MessageStoreConfig
from .message import Message, MessageExt
from .message_store import (
    DefaultMessageStore, GetMessageResult, GetMessageStatus, MessageFilter, PutMessageResult,
    PutMessageStatus,
)

__all__ = [
    "DefaultMessageStore", "GetMessageResult", "GetMessageStatus", "Message", "MessageExt",
    "MessageFilter", "MessageStoreConfig", "PutMessageResult", "PutMessageStatus",
]
