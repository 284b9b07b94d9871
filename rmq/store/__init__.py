"""rmq.store: RocketMQ's storage engine in Python — CommitLog, ConsumeQueue, IndexFile,
ReputMessageService, flush, recovery and cleanup (SPEC §2). No sockets, no asyncio."""
from rmq.common.message import Message, MessageExt
from rmq.store.unit import EncodedUnits, MessageBatch

from .config import MessageStoreConfig
from .message_store import (
    DefaultMessageStore,
    GetMessageResult,
    GetMessageStatus,
    MessageFilter,
    PutBatchResult,
    PutMessageResult,
    PutMessageStatus,
)

__all__ = [
    "DefaultMessageStore", "EncodedUnits", "GetMessageResult", "GetMessageStatus", "Message", "MessageBatch", "MessageExt",
    "MessageFilter", "MessageStoreConfig", "PutBatchResult", "PutMessageResult", "PutMessageStatus",
]
