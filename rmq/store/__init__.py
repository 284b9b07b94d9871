"""rmq.store: RocketMQ's storage engine in Python — CommitLog, ConsumeQueue, IndexFile,
ReputMessageService, flush, recovery and cleanup (SPEC §2). No sockets, no asyncio."""
from .config import MessageStoreConfig
from .message import EncodedUnits, Message, MessageBatch, MessageExt
from .message_store import (
    DefaultMessageStore, GetMessageResult, GetMessageStatus, MessageFilter, PutBatchResult, PutMessageResult,
    PutMessageStatus,
)

__all__ = [
    "DefaultMessageStore", "EncodedUnits", "GetMessageResult", "GetMessageStatus", "Message", "MessageBatch", "MessageExt",
    "MessageFilter", "MessageStoreConfig", "PutBatchResult", "PutMessageResult", "PutMessageStatus",
]
