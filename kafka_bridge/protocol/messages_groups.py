"""Schemas of Kafka 4's group APIs: KIP-848 consumer groups (ConsumerGroupHeartbeat,
ConsumerGroupDescribe) and KIP-932 share groups (ShareGroupHeartbeat, ShareGroupDescribe,
ShareFetch, ShareAcknowledge), from Apache Kafka's message JSON files (SPEC §11).

Kept apart from messages.py (which appends them to APIS) so the group work does not touch the
other schemas. Only the versions librdkafka 2.16 and the Kafka 4.1+ Java client speak are
declared: ConsumerGroupHeartbeat v1 (v1 adds SubscribedTopicRegex; the v0 of Kafka 3.7 had
client-side assignors, dropped before it was stable), ConsumerGroupDescribe v0, and v1 of the
share-group APIs (their v0 was Kafka 4.0's early access, removed in 4.1); the share-group offset
admin APIs (DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets) at v0.
"""

from __future__ import annotations

from .schema import Api, F


def _topic_partitions(name: str, with_names: bool = False) -> F:
    fields = [F('topic_id', 'uuid', '0+')]
    if with_names:
        fields.append(F('topic_name', 'string', '0+'))
    fields.append(F('partitions', '[]int32', '0+'))
    return F(name, '[]TopicPartitions', '0+', fields=fields)


def _heartbeat_response() -> list[F]:
    return [
        F('throttle_time_ms', 'int32', '0+'),
        F('error_code', 'int16', '0+'),
        F('error_message', 'string', '0+', nullable='0+', default=None),
        F('member_id', 'string', '0+', nullable='0+', default=None),
        F('member_epoch', 'int32', '0+'),
        F('heartbeat_interval_ms', 'int32', '0+'),
        F('assignment', 'Assignment', '0+', nullable='0+', default=None, fields=[
            _topic_partitions('topic_partitions'),
        ]),
    ]


def _ack_batches() -> F:
    return F('acknowledgement_batches', '[]AcknowledgementBatch', '0+', fields=[
        F('first_offset', 'int64', '0+'),
        F('last_offset', 'int64', '0+'),
        F('acknowledge_types', '[]int8', '0+'),
    ])


def _leader() -> F:
    return F('current_leader', 'LeaderIdAndEpoch', '0+', fields=[
        F('leader_id', 'int32', '0+'),
        F('leader_epoch', 'int32', '0+'),
    ])


def _node_endpoints() -> F:
    return F('node_endpoints', '[]NodeEndpoint', '0+', fields=[
        F('node_id', 'int32', '0+'),
        F('host', 'string', '0+'),
        F('port', 'int32', '0+'),
        F('rack', 'string', '0+', nullable='0+', default=None),
    ])


GROUP_APIS: list[Api] = [
    Api(68, 'ConsumerGroupHeartbeat', 1, 1, flexible='0+',
        request=[
            F('group_id', 'string', '0+'),
            F('member_id', 'string', '0+'),
            F('member_epoch', 'int32', '0+'),
            F('instance_id', 'string', '0+', nullable='0+', default=None),
            F('rack_id', 'string', '0+', nullable='0+', default=None),
            F('rebalance_timeout_ms', 'int32', '0+', default=-1),
            F('subscribed_topic_names', '[]string', '0+', nullable='0+', default=None),
            F('subscribed_topic_regex', 'string', '1+', nullable='1+', default=None),
            F('server_assignor', 'string', '0+', nullable='0+', default=None),
            F('topic_partitions', '[]TopicPartitions', '0+', nullable='0+', default=None, fields=[
                F('topic_id', 'uuid', '0+'),
                F('partitions', '[]int32', '0+'),
            ]),
        ],
        response=_heartbeat_response(),
    ),

    Api(69, 'ConsumerGroupDescribe', 0, 0, flexible='0+',
        request=[
            F('group_ids', '[]string', '0+'),
            F('include_authorized_operations', 'bool', '0+'),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('groups', '[]DescribedGroup', '0+', fields=[
                F('error_code', 'int16', '0+'),
                F('error_message', 'string', '0+', nullable='0+', default=None),
                F('group_id', 'string', '0+'),
                F('group_state', 'string', '0+'),
                F('group_epoch', 'int32', '0+'),
                F('assignment_epoch', 'int32', '0+'),
                F('assignor_name', 'string', '0+'),
                F('members', '[]Member', '0+', fields=[
                    F('member_id', 'string', '0+'),
                    F('instance_id', 'string', '0+', nullable='0+', default=None),
                    F('rack_id', 'string', '0+', nullable='0+', default=None),
                    F('member_epoch', 'int32', '0+'),
                    F('client_id', 'string', '0+'),
                    F('client_host', 'string', '0+'),
                    F('subscribed_topic_names', '[]string', '0+'),
                    F('subscribed_topic_regex', 'string', '0+', nullable='0+', default=None),
                    F('assignment', 'Assignment', '0+', fields=[_topic_partitions('topic_partitions', True)]),
                    F('target_assignment', 'Assignment', '0+', fields=[_topic_partitions('topic_partitions', True)]),
                ]),
                F('authorized_operations', 'int32', '0+', default=-2147483648),
            ]),
        ],
    ),

    Api(76, 'ShareGroupHeartbeat', 1, 1, flexible='0+',
        request=[
            F('group_id', 'string', '0+'),
            F('member_id', 'string', '0+'),
            F('member_epoch', 'int32', '0+'),
            F('rack_id', 'string', '0+', nullable='0+', default=None),
            F('subscribed_topic_names', '[]string', '0+', nullable='0+', default=None),
        ],
        response=_heartbeat_response(),
    ),

    Api(77, 'ShareGroupDescribe', 1, 1, flexible='0+',
        request=[
            F('group_ids', '[]string', '0+'),
            F('include_authorized_operations', 'bool', '0+'),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('groups', '[]DescribedGroup', '0+', fields=[
                F('error_code', 'int16', '0+'),
                F('error_message', 'string', '0+', nullable='0+', default=None),
                F('group_id', 'string', '0+'),
                F('group_state', 'string', '0+'),
                F('group_epoch', 'int32', '0+'),
                F('assignment_epoch', 'int32', '0+'),
                F('assignor_name', 'string', '0+'),
                F('members', '[]Member', '0+', fields=[
                    F('member_id', 'string', '0+'),
                    F('rack_id', 'string', '0+', nullable='0+', default=None),
                    F('member_epoch', 'int32', '0+'),
                    F('client_id', 'string', '0+'),
                    F('client_host', 'string', '0+'),
                    F('subscribed_topic_names', '[]string', '0+'),
                    F('assignment', 'Assignment', '0+', fields=[_topic_partitions('topic_partitions', True)]),
                ]),
                F('authorized_operations', 'int32', '0+', default=-2147483648),
            ]),
        ],
    ),

    Api(78, 'ShareFetch', 1, 1, flexible='0+',
        request=[
            F('group_id', 'string', '0+', nullable='0+', default=None),
            F('member_id', 'string', '0+', nullable='0+'),
            F('share_session_epoch', 'int32', '0+'),
            F('max_wait_ms', 'int32', '0+'),
            F('min_bytes', 'int32', '0+'),
            F('max_bytes', 'int32', '0+', default=0x7FFFFFFF),
            F('max_records', 'int32', '1+'),
            F('batch_size', 'int32', '1+'),
            F('topics', '[]FetchTopic', '0+', fields=[
                F('topic_id', 'uuid', '0+'),
                F('partitions', '[]FetchPartition', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    _ack_batches(),
                ]),
            ]),
            F('forgotten_topics_data', '[]ForgottenTopic', '0+', fields=[
                F('topic_id', 'uuid', '0+'),
                F('partitions', '[]int32', '0+'),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('error_code', 'int16', '0+'),
            F('error_message', 'string', '0+', nullable='0+', default=None),
            F('acquisition_lock_timeout_ms', 'int32', '0+'),
            F('responses', '[]ShareFetchableTopicResponse', '0+', fields=[
                F('topic_id', 'uuid', '0+'),
                F('partitions', '[]PartitionData', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('error_code', 'int16', '0+'),
                    F('error_message', 'string', '0+', nullable='0+', default=None),
                    F('acknowledge_error_code', 'int16', '0+'),
                    F('acknowledge_error_message', 'string', '0+', nullable='0+', default=None),
                    _leader(),
                    F('records', 'records', '0+', nullable='0+'),
                    F('acquired_records', '[]AcquiredRecords', '0+', fields=[
                        F('first_offset', 'int64', '0+'),
                        F('last_offset', 'int64', '0+'),
                        F('delivery_count', 'int16', '0+'),
                    ]),
                ]),
            ]),
            _node_endpoints(),
        ],
    ),

    Api(79, 'ShareAcknowledge', 1, 1, flexible='0+',
        request=[
            F('group_id', 'string', '0+', nullable='0+', default=None),
            F('member_id', 'string', '0+', nullable='0+'),
            F('share_session_epoch', 'int32', '0+'),
            F('topics', '[]AcknowledgeTopic', '0+', fields=[
                F('topic_id', 'uuid', '0+'),
                F('partitions', '[]AcknowledgePartition', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    _ack_batches(),
                ]),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('error_code', 'int16', '0+'),
            F('error_message', 'string', '0+', nullable='0+', default=None),
            F('responses', '[]ShareAcknowledgeTopicResponse', '0+', fields=[
                F('topic_id', 'uuid', '0+'),
                F('partitions', '[]PartitionData', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('error_code', 'int16', '0+'),
                    F('error_message', 'string', '0+', nullable='0+', default=None),
                    _leader(),
                ]),
            ]),
            _node_endpoints(),
        ],
    ),

    # the share-group offset admin APIs (KIP-932); no stock client here sends them yet
    Api(90, 'DescribeShareGroupOffsets', 0, 0, flexible='0+',
        request=[
            F('groups', '[]DescribeShareGroupOffsetsRequestGroup', '0+', fields=[
                F('group_id', 'string', '0+'),
                F('topics', '[]DescribeShareGroupOffsetsRequestTopic', '0+', nullable='0+', fields=[
                    F('topic_name', 'string', '0+'),
                    F('partitions', '[]int32', '0+'),
                ]),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('groups', '[]DescribeShareGroupOffsetsResponseGroup', '0+', fields=[
                F('group_id', 'string', '0+'),
                F('topics', '[]DescribeShareGroupOffsetsResponseTopic', '0+', fields=[
                    F('topic_name', 'string', '0+'),
                    F('topic_id', 'uuid', '0+'),
                    F('partitions', '[]DescribeShareGroupOffsetsResponsePartition', '0+', fields=[
                        F('partition_index', 'int32', '0+'),
                        F('start_offset', 'int64', '0+'),
                        F('leader_epoch', 'int32', '0+'),
                        F('error_code', 'int16', '0+'),
                        F('error_message', 'string', '0+', nullable='0+', default=None),
                    ]),
                ]),
                F('error_code', 'int16', '0+'),
                F('error_message', 'string', '0+', nullable='0+', default=None),
            ]),
        ],
    ),

    Api(91, 'AlterShareGroupOffsets', 0, 0, flexible='0+',
        request=[
            F('group_id', 'string', '0+'),
            F('topics', '[]AlterShareGroupOffsetsRequestTopic', '0+', fields=[
                F('topic_name', 'string', '0+'),
                F('partitions', '[]AlterShareGroupOffsetsRequestPartition', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('start_offset', 'int64', '0+'),
                ]),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('responses', '[]AlterShareGroupOffsetsResponseTopic', '0+', fields=[
                F('topic_name', 'string', '0+'),
                F('topic_id', 'uuid', '0+'),
                F('partitions', '[]AlterShareGroupOffsetsResponsePartition', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('error_code', 'int16', '0+'),
                    F('error_message', 'string', '0+', nullable='0+', default=None),
                ]),
            ]),
        ],
    ),

    Api(92, 'DeleteShareGroupOffsets', 0, 0, flexible='0+',
        request=[
            F('group_id', 'string', '0+'),
            F('topics', '[]DeleteShareGroupOffsetsRequestTopic', '0+', fields=[
                F('topic_name', 'string', '0+'),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('error_code', 'int16', '0+'),
            F('error_message', 'string', '0+', nullable='0+', default=None),
            F('responses', '[]DeleteShareGroupOffsetsResponseTopic', '0+', fields=[
                F('topic_name', 'string', '0+'),
                F('topic_id', 'uuid', '0+'),
                F('partitions', '[]DeleteShareGroupOffsetsResponsePartition', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('error_code', 'int16', '0+'),
                    F('error_message', 'string', '0+', nullable='0+', default=None),
                ]),
            ]),
        ],
    ),
]

CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
SHARE_GROUP_HEARTBEAT = 76
SHARE_GROUP_DESCRIBE = 77
SHARE_FETCH = 78
SHARE_ACKNOWLEDGE = 79
DESCRIBE_SHARE_GROUP_OFFSETS = 90
ALTER_SHARE_GROUP_OFFSETS = 91
DELETE_SHARE_GROUP_OFFSETS = 92
