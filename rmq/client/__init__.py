"""rmq.client — a Python RocketMQ 4.x client speaking the real remoting protocol (SPEC §3-§9):
producers (plain and transactional), pull and push consumers (concurrent or orderly), rebalance
strategies and an admin API.  Works against this project's broker and against Apache RocketMQ 4.x.

Blocking classes (Producer, PullConsumer, PushConsumer, MQAdmin) run the asyncio
implementations (AsyncProducer, AsyncPullConsumer, AsyncPushConsumer, AsyncMQAdmin) on a
shared background event loop.
"""
from rmq.remoting import MessageQueue

from .admin import AsyncMQAdmin, MQAdmin
from .consume_orderly import (ConsumeMessageOrderlyService, ConsumeOrderlyContext, ConsumeOrderlyStatus,
                              MessageListenerOrderly)
from .consume_service import (ConsumeConcurrentlyContext, ConsumeMessageConcurrentlyService,
                              ConsumeMessageService)
from .errors import (ClientErrorCode, MQBrokerError, MQClientError, RemotingConnectError,
                     RemotingError, RemotingSendRequestError, RemotingTimeoutError)
from .instance import ClientConfig
from .message import (ConsumeFromWhere, ConsumeStatus, Message, MessageExt, MessageModel,
                      PullResult, PullStatus, SendResult, SendStatus, encode_messages)
from .producer import AsyncProducer, Producer
from .pull_consumer import AsyncPullConsumer, PullConsumer
from .push_consumer import AsyncPushConsumer, PushConsumer
from .rebalance import (AllocateMachineRoomNearby, AllocateMessageQueueAveragely,
                        AllocateMessageQueueAveragelyByCircle, AllocateMessageQueueConsistentHash,
                        FunctionMachineRoomResolver, MachineRoomResolver, PrefixMachineRoomResolver)
from .transaction import (AsyncTransactionProducer, LocalTransactionState, TransactionListener,
                          TransactionMQProducer, TransactionProducer, TransactionSendResult)
from .selector import (MessageQueueSelector, SelectMessageQueueByHash, SelectMessageQueueByRandom,
                       SelectMessageQueueByRoundRobin)

__all__ = [
    "Producer", "AsyncProducer", "PullConsumer", "AsyncPullConsumer", "PushConsumer",
    "AsyncPushConsumer", "MQAdmin", "AsyncMQAdmin", "ClientConfig",
    "Message", "MessageExt", "MessageQueue", "SendResult", "SendStatus", "PullResult", "PullStatus",
    "ConsumeStatus", "ConsumeFromWhere", "MessageModel", "ConsumeConcurrentlyContext",
    "ConsumeMessageService", "ConsumeMessageConcurrentlyService", "encode_messages",
    "ConsumeMessageOrderlyService", "ConsumeOrderlyContext", "ConsumeOrderlyStatus", "MessageListenerOrderly",
    "TransactionProducer", "TransactionMQProducer", "AsyncTransactionProducer", "TransactionListener",
    "LocalTransactionState", "TransactionSendResult",
    "MessageQueueSelector", "SelectMessageQueueByHash", "SelectMessageQueueByRandom",
    "SelectMessageQueueByRoundRobin",
    "AllocateMessageQueueAveragely", "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueConsistentHash", "AllocateMachineRoomNearby", "MachineRoomResolver",
    "PrefixMachineRoomResolver", "FunctionMachineRoomResolver",
    "MQClientError", "MQBrokerError", "RemotingError", "RemotingConnectError",
    "RemotingTimeoutError", "RemotingSendRequestError", "ClientErrorCode",
]
