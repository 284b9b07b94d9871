"""RocketMQ 4.x remoting codec, sans-IO: frames, RemotingCommand (JSON and ROCKETMQ
headers), request/response codes, typed custom headers and JSON bodies.  Bytes in, objects
out; nothing here opens a socket or a file.

Typical server loop::

    decoder = FrameDecoder()
    for payload in decoder.feed(data):          # FramingError -> close the connection
        request = RemotingCommand.decode(payload)   # CommandDecodeError -> close
        try:
            header = decode_request_header(request)
        except HeaderFieldError as exc:
            reply = RemotingCommand.response_to(request, exc.response_code, exc.remark)
        ...
        transport.write(reply.encode())
"""

from .bodies import (BrokerData, ClusterInfo, ConsumerData, ConsumerListByGroupResponseBody,
                     DataVersion, GetConsumerListByGroupResponseBody, HeartbeatData, KVTable,
                     LockBatchRequestBody, LockBatchResponseBody, MessageQueue, ProducerData,
                     QueueData, RegisterBrokerBody, SubscriptionData, TopicConfig,
                     TopicConfigSerializeWrapper, TopicList, TopicRouteData,
                     UnlockBatchRequestBody)
from .command import (FLAG_ONEWAY, FLAG_RESPONSE, MQ_VERSION_V4_9_4, LanguageCode,
                      RemotingCommand, SerializeType, next_opaque)
from .errors import (BadHeaderField, BodyDecodeError, CommandDecodeError, CommandEncodeError,
                     FramingError, HeaderFieldError, MissingHeaderField, RemotingError)
from .frame import DEFAULT_MAX_FRAME_SIZE, JAVA_FRAME_MAX_LENGTH, FrameDecoder
from . import headers as _headers
from .headers import *  # noqa: F401,F403  (every *Header class and helpers)
from .request_code import RequestCode, request_code_name
from .response_code import ResponseCode, response_code_name

__all__ = [
    "FrameDecoder", "DEFAULT_MAX_FRAME_SIZE", "JAVA_FRAME_MAX_LENGTH",
    "RemotingCommand", "SerializeType", "LanguageCode", "FLAG_RESPONSE", "FLAG_ONEWAY",
    "MQ_VERSION_V4_9_4", "next_opaque",
    "RequestCode", "ResponseCode", "request_code_name", "response_code_name",
    "RemotingError", "FramingError", "CommandDecodeError", "CommandEncodeError",
    "HeaderFieldError", "MissingHeaderField", "BadHeaderField", "BodyDecodeError",
    "BrokerData", "ClusterInfo", "ConsumerData", "ConsumerListByGroupResponseBody",
    "DataVersion", "GetConsumerListByGroupResponseBody", "HeartbeatData", "KVTable",
    "LockBatchRequestBody", "LockBatchResponseBody", "MessageQueue", "ProducerData",
    "QueueData", "RegisterBrokerBody", "SubscriptionData", "TopicConfig",
    "TopicConfigSerializeWrapper", "TopicList", "TopicRouteData", "UnlockBatchRequestBody",
]
__all__ += _headers.__all__
