"""Sans-IO Kafka wire protocol codec for the bridge (SPEC §11): bytes in, dicts out, and back.

No sockets, files or asyncio here. A server uses it like this::

    from kafka_bridge import protocol as kp

    frames = kp.FrameDecoder(max_frame_size=100 * 1024 * 1024)
    frames.feed(data_from_socket)                 # may raise FrameTooLarge / CorruptFrame
    for frame in frames.frames():
        try:
            req = kp.decode_request(frame)        # Request(header, body)
        except kp.UnsupportedVersion as e:        # also UnknownApiKey
            if e.header.api_key == kp.API_VERSIONS:
                write(kp.encode_unsupported_api_versions(e.header.correlation_id))
            else:
                close()                           # what a Kafka broker does
            continue
        except kp.CorruptRequest:
            close()
            continue
        body = handle(req.header, req.body)       # a dict, see below
        writelines(kp.encode_response_parts(req.header, body))   # framed, zero-copy records

Message shape: plain dicts with snake_case keys, one per field of Kafka's message JSON
(``TopicData`` -> ``"topic_data"``, ``PartitionIndex`` -> ``"partition_index"``); nested
structs are dicts, arrays are lists. A decoded dict holds every field of the schema: those
not present in the decoded version hold their default (so handlers need not test versions).
Nullable values are None. ``records`` fields decode to a memoryview slice of the frame (no
copy), ``bytes`` fields to bytes, ``uuid`` fields to uuid.UUID. When encoding, a missing key
takes the field's default; fields not present in the target version are ignored; records may
be bytes, bytearray or memoryview.

Produce v9 request body::

    {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
     "topic_data": [{"name": "orders",
                     "partition_data": [{"index": 0, "records": <memoryview>}]}]}

Fetch v12 response body (what a handler returns; defaults may be left out)::

    {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
     "responses": [{"topic": "orders", "partitions": [
         {"partition_index": 0, "error_code": 0, "high_watermark": 42,
          "last_stable_offset": 42, "log_start_offset": 0,
          "aborted_transactions": None, "preferred_read_replica": -1,
          "records": record_batch_bytes}]}]}

SUPPORTED maps api_key -> (min_version, max_version) and API_NAMES api_key -> name; build
the ApiVersions answer from them with api_versions_response_body().
"""

from __future__ import annotations

from . import error_codes
from .codec import (Request, api_versions_response_body, decode_body, decode_request,
                    decode_request_body, decode_request_header_checked, decode_response, decode_response_body, encode_body,
                    encode_request, encode_request_body, encode_response, encode_response_body,
                    encode_response_parts, encode_unsupported_api_versions, generated_source,
                    precompile)
from .exceptions import (CorruptFrame, CorruptMessage, CorruptRequest, CorruptResponse,
                         EncodeError, FrameError, FrameTooLarge, ProtocolError, UnknownApiKey,
                         UnsupportedVersion)
from .frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame
from .header import (RequestHeader, decode_request_header, decode_response_header,
                     encode_request_header, encode_response_header, parse_request_header,
                     request_header_version, response_header_version)
from .messages import (ADD_OFFSETS_TO_TXN, ADD_PARTITIONS_TO_TXN, API_NAMES, API_VERSIONS, APIS,
                       BY_KEY, CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CLUSTER,
                       DELETE_RECORDS, DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS, DESCRIBE_LOG_DIRS, DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS, DELETE_GROUPS, ELECT_LEADERS, LIST_PARTITION_REASSIGNMENTS, OFFSET_DELETE, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS,
                       ALTER_CONFIGS, DESCRIBE_CONFIGS, DESCRIBE_GROUPS, INCREMENTAL_ALTER_CONFIGS, END_TXN, FETCH, FIND_COORDINATOR,
                       HEARTBEAT, INIT_PRODUCER_ID, JOIN_GROUP, LEAVE_GROUP, LIST_GROUPS,
                       LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH, PRODUCE,
                       SASL_AUTHENTICATE, SASL_HANDSHAKE, SUPPORTED, SYNC_GROUP, TXN_OFFSET_COMMIT)

__all__ = [
    "ADD_OFFSETS_TO_TXN", "ADD_PARTITIONS_TO_TXN", "API_NAMES", "API_VERSIONS", "APIS", "BY_KEY",
    "CREATE_PARTITIONS", "CREATE_TOPICS", "CorruptFrame", "CorruptMessage", "CorruptRequest",
    "CorruptResponse", "DEFAULT_MAX_FRAME_SIZE", "DELETE_TOPICS", "DESCRIBE_CLUSTER",
    "DELETE_RECORDS", "DESCRIBE_ACLS", "CREATE_ACLS", "DELETE_ACLS", "DESCRIBE_LOG_DIRS", "DESCRIBE_USER_SCRAM_CREDENTIALS", "ALTER_USER_SCRAM_CREDENTIALS", "DELETE_GROUPS", "ELECT_LEADERS", "LIST_PARTITION_REASSIGNMENTS", "OFFSET_DELETE", "DESCRIBE_PRODUCERS", "DESCRIBE_TRANSACTIONS", "LIST_TRANSACTIONS",
    "ALTER_CONFIGS", "DESCRIBE_CONFIGS", "DESCRIBE_GROUPS", "INCREMENTAL_ALTER_CONFIGS", "END_TXN", "EncodeError", "FETCH", "FIND_COORDINATOR",
    "FrameDecoder", "FrameError", "FrameTooLarge", "HEARTBEAT", "INIT_PRODUCER_ID", "JOIN_GROUP",
    "LEAVE_GROUP", "LIST_GROUPS", "LIST_OFFSETS", "METADATA", "OFFSET_COMMIT", "OFFSET_FETCH",
    "PRODUCE", "ProtocolError", "Request", "RequestHeader", "SASL_AUTHENTICATE",
    "SASL_HANDSHAKE", "SUPPORTED", "SYNC_GROUP", "TXN_OFFSET_COMMIT", "UnknownApiKey",
    "UnsupportedVersion", "api_versions_response_body", "decode_body", "decode_request",
    "decode_request_body", "decode_request_header", "decode_request_header_checked", "decode_response", "decode_response_body",
    "decode_response_header", "encode_body", "encode_frame", "encode_request",
    "encode_request_body", "encode_request_header", "encode_response", "encode_response_body",
    "encode_response_header", "encode_response_parts", "encode_unsupported_api_versions",
    "error_codes", "generated_source", "parse_request_header", "precompile",
    "request_header_version", "response_header_version",
]
