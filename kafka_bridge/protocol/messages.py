"""Schemas of the Kafka APIs the bridge speaks, from Apache Kafka's message JSON files (SPEC §11).

Field names, types, versions, nullable/tagged versions, tags and defaults are those of
clients/src/main/resources/common/message/<Name>{Request,Response}.json, in snake_case,
limited to the version range each Api supports here (fields outside it are left out).
"""

from __future__ import annotations

from .schema import Api, F

APIS: list[Api] = [
    Api(0, 'Produce', 3, 11, flexible='9+',
        request=[
            F('transactional_id', 'string', '3+', nullable='3+', default=None),
            F('acks', 'int16', '0+'),
            F('timeout_ms', 'int32', '0+'),
            F('topic_data', '[]TopicProduceData', '0+', fields=[
                F('name', 'string', '0-12'),
                F('partition_data', '[]PartitionProduceData', '0+', fields=[
                    F('index', 'int32', '0+'),
                    F('records', 'records', '0+', nullable='0+'),
                ]),
            ]),
        ],
        response=[
            F('responses', '[]TopicProduceResponse', '0+', fields=[
                F('name', 'string', '0-12'),
                F('partition_responses', '[]PartitionProduceResponse', '0+', fields=[
                    F('index', 'int32', '0+'),
                    F('error_code', 'int16', '0+'),
                    F('base_offset', 'int64', '0+'),
                    F('log_append_time_ms', 'int64', '2+', default=-1),
                    F('log_start_offset', 'int64', '5+', default=-1),
                    F('record_errors', '[]BatchIndexAndErrorMessage', '8+', fields=[
                        F('batch_index', 'int32', '8+'),
                        F('batch_index_error_message', 'string', '8+', nullable='8+', default=None),
                    ]),
                    F('error_message', 'string', '8+', nullable='8+', default=None),
                    F('current_leader', 'LeaderIdAndEpoch', '10+', tagged='10+', tag=0, fields=[
                        F('leader_id', 'int32', '10+', default=-1),
                        F('leader_epoch', 'int32', '10+', default=-1),
                    ]),
                ]),
            ]),
            F('throttle_time_ms', 'int32', '1+', default=0),
            F('node_endpoints', '[]NodeEndpoint', '10+', tagged='10+', tag=0, fields=[
                F('node_id', 'int32', '10+'),
                F('host', 'string', '10+'),
                F('port', 'int32', '10+'),
                F('rack', 'string', '10+', nullable='10+', default=None),
            ]),
        ],
    ),

    Api(1, 'Fetch', 4, 16, flexible='12+',
        request=[
            F('cluster_id', 'string', '12+', nullable='12+', tagged='12+', tag=0, default=None),
            F('replica_id', 'int32', '0-14', default=-1),
            F('replica_state', 'ReplicaState', '15+', tagged='15+', tag=1, fields=[
                F('replica_id', 'int32', '15+', default=-1),
                F('replica_epoch', 'int64', '15+', default=-1),
            ]),
            F('max_wait_ms', 'int32', '0+'),
            F('min_bytes', 'int32', '0+'),
            F('max_bytes', 'int32', '3+', default=2147483647),
            F('isolation_level', 'int8', '4+', default=0),
            F('session_id', 'int32', '7+', default=0),
            F('session_epoch', 'int32', '7+', default=-1),
            F('topics', '[]FetchTopic', '0+', fields=[
                F('topic', 'string', '0-12'),
                F('topic_id', 'uuid', '13+'),
                F('partitions', '[]FetchPartition', '0+', fields=[
                    F('partition', 'int32', '0+'),
                    F('current_leader_epoch', 'int32', '9+', default=-1),
                    F('fetch_offset', 'int64', '0+'),
                    F('last_fetched_epoch', 'int32', '12+', default=-1),
                    F('log_start_offset', 'int64', '5+', default=-1),
                    F('partition_max_bytes', 'int32', '0+'),
                ]),
            ]),
            F('forgotten_topics_data', '[]ForgottenTopic', '7+', fields=[
                F('topic', 'string', '7-12'),
                F('topic_id', 'uuid', '13+'),
                F('partitions', '[]int32', '7+'),
            ]),
            F('rack_id', 'string', '11+', default=''),
        ],
        response=[
            F('throttle_time_ms', 'int32', '1+'),
            F('error_code', 'int16', '7+'),
            F('session_id', 'int32', '7+', default=0),
            F('responses', '[]FetchableTopicResponse', '0+', fields=[
                F('topic', 'string', '0-12'),
                F('topic_id', 'uuid', '13+'),
                F('partitions', '[]PartitionData', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('error_code', 'int16', '0+'),
                    F('high_watermark', 'int64', '0+'),
                    F('last_stable_offset', 'int64', '4+', default=-1),
                    F('log_start_offset', 'int64', '5+', default=-1),
                    F('diverging_epoch', 'EpochEndOffset', '12+', tagged='12+', tag=0, fields=[
                        F('epoch', 'int32', '12+', default=-1),
                        F('end_offset', 'int64', '12+', default=-1),
                    ]),
                    F('current_leader', 'LeaderIdAndEpoch', '12+', tagged='12+', tag=1, fields=[
                        F('leader_id', 'int32', '12+', default=-1),
                        F('leader_epoch', 'int32', '12+', default=-1),
                    ]),
                    F('snapshot_id', 'SnapshotId', '12+', tagged='12+', tag=2, fields=[
                        F('end_offset', 'int64', '0+', default=-1),
                        F('epoch', 'int32', '0+', default=-1),
                    ]),
                    F('aborted_transactions', '[]AbortedTransaction', '4+', nullable='4+', fields=[
                        F('producer_id', 'int64', '4+'),
                        F('first_offset', 'int64', '4+'),
                    ]),
                    F('preferred_read_replica', 'int32', '11+', default=-1),
                    F('records', 'records', '0+', nullable='0+'),
                ]),
            ]),
            F('node_endpoints', '[]NodeEndpoint', '16+', tagged='16+', tag=0, fields=[
                F('node_id', 'int32', '16+'),
                F('host', 'string', '16+'),
                F('port', 'int32', '16+'),
                F('rack', 'string', '16+', nullable='16+', default=None),
            ]),
        ],
    ),

    Api(2, 'ListOffsets', 1, 8, flexible='6+',
        request=[
            F('replica_id', 'int32', '0+'),
            F('isolation_level', 'int8', '2+'),
            F('topics', '[]ListOffsetsTopic', '0+', fields=[
                F('name', 'string', '0+'),
                F('partitions', '[]ListOffsetsPartition', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('current_leader_epoch', 'int32', '4+', default=-1),
                    F('timestamp', 'int64', '0+'),
                ]),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '2+'),
            F('topics', '[]ListOffsetsTopicResponse', '0+', fields=[
                F('name', 'string', '0+'),
                F('partitions', '[]ListOffsetsPartitionResponse', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('error_code', 'int16', '0+'),
                    F('timestamp', 'int64', '1+', default=-1),
                    F('offset', 'int64', '1+', default=-1),
                    F('leader_epoch', 'int32', '4+', default=-1),
                ]),
            ]),
        ],
    ),

    Api(3, 'Metadata', 1, 12, flexible='9+',
        request=[
            F('topics', '[]MetadataRequestTopic', '0+', nullable='1+', fields=[
                F('topic_id', 'uuid', '10+'),
                F('name', 'string', '0+', nullable='10+'),
            ]),
            F('allow_auto_topic_creation', 'bool', '4+', default=True),
            F('include_cluster_authorized_operations', 'bool', '8-10'),
            F('include_topic_authorized_operations', 'bool', '8+'),
        ],
        response=[
            F('throttle_time_ms', 'int32', '3+'),
            F('brokers', '[]MetadataResponseBroker', '0+', fields=[
                F('node_id', 'int32', '0+'),
                F('host', 'string', '0+'),
                F('port', 'int32', '0+'),
                F('rack', 'string', '1+', nullable='1+', default=None),
            ]),
            F('cluster_id', 'string', '2+', nullable='2+', default=None),
            F('controller_id', 'int32', '1+', default=-1),
            F('topics', '[]MetadataResponseTopic', '0+', fields=[
                F('error_code', 'int16', '0+'),
                F('name', 'string', '0+', nullable='12+'),
                F('topic_id', 'uuid', '10+'),
                F('is_internal', 'bool', '1+', default=False),
                F('partitions', '[]MetadataResponsePartition', '0+', fields=[
                    F('error_code', 'int16', '0+'),
                    F('partition_index', 'int32', '0+'),
                    F('leader_id', 'int32', '0+'),
                    F('leader_epoch', 'int32', '7+', default=-1),
                    F('replica_nodes', '[]int32', '0+'),
                    F('isr_nodes', '[]int32', '0+'),
                    F('offline_replicas', '[]int32', '5+'),
                ]),
                F('topic_authorized_operations', 'int32', '8+', default=-2147483648),
            ]),
            F('cluster_authorized_operations', 'int32', '8-10', default=-2147483648),
        ],
    ),

    Api(8, 'OffsetCommit', 2, 9, flexible='8+',
        request=[
            F('group_id', 'string', '0+'),
            F('generation_id_or_member_epoch', 'int32', '1+', default=-1),
            F('member_id', 'string', '1+'),
            F('group_instance_id', 'string', '7+', nullable='7+', default=None),
            F('retention_time_ms', 'int64', '2-4', default=-1),
            F('topics', '[]OffsetCommitRequestTopic', '0+', fields=[
                F('name', 'string', '0-9'),
                F('partitions', '[]OffsetCommitRequestPartition', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('committed_offset', 'int64', '0+'),
                    F('committed_leader_epoch', 'int32', '6+', default=-1),
                    F('committed_metadata', 'string', '0+', nullable='0+'),
                ]),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '3+'),
            F('topics', '[]OffsetCommitResponseTopic', '0+', fields=[
                F('name', 'string', '0-9'),
                F('partitions', '[]OffsetCommitResponsePartition', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('error_code', 'int16', '0+'),
                ]),
            ]),
        ],
    ),

    Api(9, 'OffsetFetch', 1, 9, flexible='6+',
        request=[
            F('group_id', 'string', '0-7'),
            F('topics', '[]OffsetFetchRequestTopic', '0-7', nullable='2-7', fields=[
                F('name', 'string', '0-7'),
                F('partition_indexes', '[]int32', '0-7'),
            ]),
            F('groups', '[]OffsetFetchRequestGroup', '8+', fields=[
                F('group_id', 'string', '8+'),
                F('member_id', 'string', '9+', nullable='9+', default=None),
                F('member_epoch', 'int32', '9+', default=-1),
                F('topics', '[]OffsetFetchRequestTopics', '8+', nullable='8+', fields=[
                    F('name', 'string', '8-9'),
                    F('partition_indexes', '[]int32', '8+'),
                ]),
            ]),
            F('require_stable', 'bool', '7+', default=False),
        ],
        response=[
            F('throttle_time_ms', 'int32', '3+'),
            F('topics', '[]OffsetFetchResponseTopic', '0-7', fields=[
                F('name', 'string', '0-7'),
                F('partitions', '[]OffsetFetchResponsePartition', '0-7', fields=[
                    F('partition_index', 'int32', '0-7'),
                    F('committed_offset', 'int64', '0-7'),
                    F('committed_leader_epoch', 'int32', '5-7', default=-1),
                    F('metadata', 'string', '0-7', nullable='0-7'),
                    F('error_code', 'int16', '0-7'),
                ]),
            ]),
            F('error_code', 'int16', '2-7', default=0),
            F('groups', '[]OffsetFetchResponseGroup', '8+', fields=[
                F('group_id', 'string', '8+'),
                F('topics', '[]OffsetFetchResponseTopics', '8+', fields=[
                    F('name', 'string', '8-9'),
                    F('partitions', '[]OffsetFetchResponsePartitions', '8+', fields=[
                        F('partition_index', 'int32', '8+'),
                        F('committed_offset', 'int64', '8+'),
                        F('committed_leader_epoch', 'int32', '8+', default=-1),
                        F('metadata', 'string', '8+', nullable='8+'),
                        F('error_code', 'int16', '8+'),
                    ]),
                ]),
                F('error_code', 'int16', '8+', default=0),
            ]),
        ],
    ),

    Api(10, 'FindCoordinator', 0, 5, flexible='3+',
        request=[
            F('key', 'string', '0-3'),
            F('key_type', 'int8', '1+', default=0),
            F('coordinator_keys', '[]string', '4+'),
        ],
        response=[
            F('throttle_time_ms', 'int32', '1+'),
            F('error_code', 'int16', '0-3'),
            F('error_message', 'string', '1-3', nullable='1-3'),
            F('node_id', 'int32', '0-3'),
            F('host', 'string', '0-3'),
            F('port', 'int32', '0-3'),
            F('coordinators', '[]Coordinator', '4+', fields=[
                F('key', 'string', '4+'),
                F('node_id', 'int32', '4+'),
                F('host', 'string', '4+'),
                F('port', 'int32', '4+'),
                F('error_code', 'int16', '4+'),
                F('error_message', 'string', '4+', nullable='4+'),
            ]),
        ],
    ),

    Api(11, 'JoinGroup', 0, 9, flexible='6+',
        request=[
            F('group_id', 'string', '0+'),
            F('session_timeout_ms', 'int32', '0+'),
            F('rebalance_timeout_ms', 'int32', '1+', default=-1),
            F('member_id', 'string', '0+'),
            F('group_instance_id', 'string', '5+', nullable='5+', default=None),
            F('protocol_type', 'string', '0+'),
            F('protocols', '[]JoinGroupRequestProtocol', '0+', fields=[
                F('name', 'string', '0+'),
                F('metadata', 'bytes', '0+'),
            ]),
            F('reason', 'string', '8+', nullable='8+', default=None),
        ],
        response=[
            F('throttle_time_ms', 'int32', '2+'),
            F('error_code', 'int16', '0+'),
            F('generation_id', 'int32', '0+', default=-1),
            F('protocol_type', 'string', '7+', nullable='7+', default=None),
            F('protocol_name', 'string', '0+', nullable='7+'),
            F('leader', 'string', '0+'),
            F('skip_assignment', 'bool', '9+', default=False),
            F('member_id', 'string', '0+'),
            F('members', '[]JoinGroupResponseMember', '0+', fields=[
                F('member_id', 'string', '0+'),
                F('group_instance_id', 'string', '5+', nullable='5+', default=None),
                F('metadata', 'bytes', '0+'),
            ]),
        ],
    ),

    Api(12, 'Heartbeat', 0, 4, flexible='4+',
        request=[
            F('group_id', 'string', '0+'),
            F('generation_id', 'int32', '0+'),
            F('member_id', 'string', '0+'),
            F('group_instance_id', 'string', '3+', nullable='3+', default=None),
        ],
        response=[
            F('throttle_time_ms', 'int32', '1+'),
            F('error_code', 'int16', '0+'),
        ],
    ),

    Api(13, 'LeaveGroup', 0, 5, flexible='4+',
        request=[
            F('group_id', 'string', '0+'),
            F('member_id', 'string', '0-2'),
            F('members', '[]MemberIdentity', '3+', fields=[
                F('member_id', 'string', '3+'),
                F('group_instance_id', 'string', '3+', nullable='3+', default=None),
                F('reason', 'string', '5+', nullable='5+', default=None),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '1+'),
            F('error_code', 'int16', '0+'),
            F('members', '[]MemberResponse', '3+', fields=[
                F('member_id', 'string', '3+'),
                F('group_instance_id', 'string', '3+', nullable='3+'),
                F('error_code', 'int16', '3+'),
            ]),
        ],
    ),

    Api(14, 'SyncGroup', 0, 5, flexible='4+',
        request=[
            F('group_id', 'string', '0+'),
            F('generation_id', 'int32', '0+'),
            F('member_id', 'string', '0+'),
            F('group_instance_id', 'string', '3+', nullable='3+', default=None),
            F('protocol_type', 'string', '5+', nullable='5+', default=None),
            F('protocol_name', 'string', '5+', nullable='5+', default=None),
            F('assignments', '[]SyncGroupRequestAssignment', '0+', fields=[
                F('member_id', 'string', '0+'),
                F('assignment', 'bytes', '0+'),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '1+'),
            F('error_code', 'int16', '0+'),
            F('protocol_type', 'string', '5+', nullable='5+', default=None),
            F('protocol_name', 'string', '5+', nullable='5+', default=None),
            F('assignment', 'bytes', '0+'),
        ],
    ),

    Api(15, 'DescribeGroups', 0, 5, flexible='5+',
        request=[
            F('groups', '[]string', '0+'),
            F('include_authorized_operations', 'bool', '3+'),
        ],
        response=[
            F('throttle_time_ms', 'int32', '1+'),
            F('groups', '[]DescribedGroup', '0+', fields=[
                F('error_code', 'int16', '0+'),
                F('group_id', 'string', '0+'),
                F('group_state', 'string', '0+'),
                F('protocol_type', 'string', '0+'),
                F('protocol_data', 'string', '0+'),
                F('members', '[]DescribedGroupMember', '0+', fields=[
                    F('member_id', 'string', '0+'),
                    F('group_instance_id', 'string', '4+', nullable='4+', default=None),
                    F('client_id', 'string', '0+'),
                    F('client_host', 'string', '0+'),
                    F('member_metadata', 'bytes', '0+'),
                    F('member_assignment', 'bytes', '0+'),
                ]),
                F('authorized_operations', 'int32', '3+', default=-2147483648),
            ]),
        ],
    ),

    Api(16, 'ListGroups', 0, 5, flexible='3+',
        request=[
            F('states_filter', '[]string', '4+'),
            F('types_filter', '[]string', '5+'),
        ],
        response=[
            F('throttle_time_ms', 'int32', '1+'),
            F('error_code', 'int16', '0+'),
            F('groups', '[]ListedGroup', '0+', fields=[
                F('group_id', 'string', '0+'),
                F('protocol_type', 'string', '0+'),
                F('group_state', 'string', '4+'),
                F('group_type', 'string', '5+'),
            ]),
        ],
    ),

    Api(17, 'SaslHandshake', 0, 1, flexible='none',
        request=[
            F('mechanism', 'string', '0+'),
        ],
        response=[
            F('error_code', 'int16', '0+'),
            F('mechanisms', '[]string', '0+'),
        ],
    ),

    Api(18, 'ApiVersions', 0, 4, flexible='3+',
        request=[
            F('client_software_name', 'string', '3+'),
            F('client_software_version', 'string', '3+'),
        ],
        response=[
            F('error_code', 'int16', '0+'),
            F('api_keys', '[]ApiVersion', '0+', fields=[
                F('api_key', 'int16', '0+'),
                F('min_version', 'int16', '0+'),
                F('max_version', 'int16', '0+'),
            ]),
            F('throttle_time_ms', 'int32', '1+'),
            F('supported_features', '[]SupportedFeatureKey', '3+', tagged='3+', tag=0, fields=[
                F('name', 'string', '3+'),
                F('min_version', 'int16', '3+'),
                F('max_version', 'int16', '3+'),
            ]),
            F('finalized_features_epoch', 'int64', '3+', tagged='3+', tag=1, default=-1),
            F('finalized_features', '[]FinalizedFeatureKey', '3+', tagged='3+', tag=2, fields=[
                F('name', 'string', '3+'),
                F('max_version_level', 'int16', '3+'),
                F('min_version_level', 'int16', '3+'),
            ]),
            F('zk_migration_ready', 'bool', '3+', tagged='3+', tag=3, default=False),
        ],
    ),

    Api(19, 'CreateTopics', 2, 7, flexible='5+',
        request=[
            F('topics', '[]CreatableTopic', '0+', fields=[
                F('name', 'string', '0+'),
                F('num_partitions', 'int32', '0+'),
                F('replication_factor', 'int16', '0+'),
                F('assignments', '[]CreatableReplicaAssignment', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('broker_ids', '[]int32', '0+'),
                ]),
                F('configs', '[]CreatableTopicConfig', '0+', fields=[
                    F('name', 'string', '0+'),
                    F('value', 'string', '0+', nullable='0+'),
                ]),
            ]),
            F('timeout_ms', 'int32', '0+', default=60000),
            F('validate_only', 'bool', '1+', default=False),
        ],
        response=[
            F('throttle_time_ms', 'int32', '2+'),
            F('topics', '[]CreatableTopicResult', '0+', fields=[
                F('name', 'string', '0+'),
                F('topic_id', 'uuid', '7+'),
                F('error_code', 'int16', '0+'),
                F('error_message', 'string', '1+', nullable='0+'),
                F('topic_config_error_code', 'int16', '5+', tagged='5+', tag=0),
                F('num_partitions', 'int32', '5+', default=-1),
                F('replication_factor', 'int16', '5+', default=-1),
                F('configs', '[]CreatableTopicConfigs', '5+', nullable='5+', fields=[
                    F('name', 'string', '5+'),
                    F('value', 'string', '5+', nullable='5+'),
                    F('read_only', 'bool', '5+'),
                    F('config_source', 'int8', '5+', default=-1),
                    F('is_sensitive', 'bool', '5+'),
                ]),
            ]),
        ],
    ),

    Api(20, 'DeleteTopics', 1, 6, flexible='4+',
        request=[
            F('topics', '[]DeleteTopicState', '6+', fields=[
                F('name', 'string', '6+', nullable='6+', default=None),
                F('topic_id', 'uuid', '6+'),
            ]),
            F('topic_names', '[]string', '0-5'),
            F('timeout_ms', 'int32', '0+'),
        ],
        response=[
            F('throttle_time_ms', 'int32', '1+'),
            F('responses', '[]DeletableTopicResult', '0+', fields=[
                F('name', 'string', '0+', nullable='6+'),
                F('topic_id', 'uuid', '6+'),
                F('error_code', 'int16', '0+'),
                F('error_message', 'string', '5+', nullable='5+', default=None),
            ]),
        ],
    ),

    Api(22, 'InitProducerId', 0, 5, flexible='2+',
        request=[
            F('transactional_id', 'string', '0+', nullable='0+'),
            F('transaction_timeout_ms', 'int32', '0+'),
            F('producer_id', 'int64', '3+', default=-1),
            F('producer_epoch', 'int16', '3+', default=-1),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('error_code', 'int16', '0+'),
            F('producer_id', 'int64', '0+', default=-1),
            F('producer_epoch', 'int16', '0+'),
        ],
    ),

    Api(24, 'AddPartitionsToTxn', 0, 3, flexible='3+',
        request=[
            F('v3_and_below_transactional_id', 'string', '0-3'),
            F('v3_and_below_producer_id', 'int64', '0-3'),
            F('v3_and_below_producer_epoch', 'int16', '0-3'),
            F('v3_and_below_topics', '[]AddPartitionsToTxnTopic', '0-3', fields=[
                F('name', 'string', '0+'),
                F('partitions', '[]int32', '0+'),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('results_by_topic_v3_and_below', '[]AddPartitionsToTxnTopicResult', '0-3', fields=[
                F('name', 'string', '0+'),
                F('results_by_partition', '[]AddPartitionsToTxnPartitionResult', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('partition_error_code', 'int16', '0+'),
                ]),
            ]),
        ],
    ),

    Api(25, 'AddOffsetsToTxn', 0, 3, flexible='3+',
        request=[
            F('transactional_id', 'string', '0+'),
            F('producer_id', 'int64', '0+'),
            F('producer_epoch', 'int16', '0+'),
            F('group_id', 'string', '0+'),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('error_code', 'int16', '0+'),
        ],
    ),

    Api(26, 'EndTxn', 0, 3, flexible='3+',
        request=[
            F('transactional_id', 'string', '0+'),
            F('producer_id', 'int64', '0+'),
            F('producer_epoch', 'int16', '0+'),
            F('committed', 'bool', '0+'),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('error_code', 'int16', '0+'),
        ],
    ),

    Api(28, 'TxnOffsetCommit', 0, 3, flexible='3+',
        request=[
            F('transactional_id', 'string', '0+'),
            F('group_id', 'string', '0+'),
            F('producer_id', 'int64', '0+'),
            F('producer_epoch', 'int16', '0+'),
            F('generation_id', 'int32', '3+', default=-1),
            F('member_id', 'string', '3+', default=''),
            F('group_instance_id', 'string', '3+', nullable='3+', default=None),
            F('topics', '[]TxnOffsetCommitRequestTopic', '0+', fields=[
                F('name', 'string', '0+'),
                F('partitions', '[]TxnOffsetCommitRequestPartition', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('committed_offset', 'int64', '0+'),
                    F('committed_leader_epoch', 'int32', '2+', default=-1),
                    F('committed_metadata', 'string', '0+', nullable='0+'),
                ]),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('topics', '[]TxnOffsetCommitResponseTopic', '0+', fields=[
                F('name', 'string', '0+'),
                F('partitions', '[]TxnOffsetCommitResponsePartition', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('error_code', 'int16', '0+'),
                ]),
            ]),
        ],
    ),

    Api(32, 'DescribeConfigs', 1, 4, flexible='4+',
        request=[
            F('resources', '[]DescribeConfigsResource', '0+', fields=[
                F('resource_type', 'int8', '0+'),
                F('resource_name', 'string', '0+'),
                F('configuration_keys', '[]string', '0+', nullable='0+'),
            ]),
            F('include_synonyms', 'bool', '1+', default=False),
            F('include_documentation', 'bool', '3+', default=False),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('results', '[]DescribeConfigsResult', '0+', fields=[
                F('error_code', 'int16', '0+'),
                F('error_message', 'string', '0+', nullable='0+'),
                F('resource_type', 'int8', '0+'),
                F('resource_name', 'string', '0+'),
                F('configs', '[]DescribeConfigsResourceResult', '0+', fields=[
                    F('name', 'string', '0+'),
                    F('value', 'string', '0+', nullable='0+'),
                    F('read_only', 'bool', '0+'),
                    F('config_source', 'int8', '1+', default=-1),
                    F('is_sensitive', 'bool', '0+'),
                    F('synonyms', '[]DescribeConfigsSynonym', '1+', fields=[
                        F('name', 'string', '1+'),
                        F('value', 'string', '1+', nullable='0+'),
                        F('source', 'int8', '1+'),
                    ]),
                    F('config_type', 'int8', '3+', default=0),
                    F('documentation', 'string', '3+', nullable='0+'),
                ]),
            ]),
        ],
    ),

    Api(33, 'AlterConfigs', 0, 2, flexible='2+',
        request=[
            F('resources', '[]AlterConfigsResource', '0+', fields=[
                F('resource_type', 'int8', '0+'),
                F('resource_name', 'string', '0+'),
                F('configs', '[]AlterableConfig', '0+', fields=[
                    F('name', 'string', '0+'),
                    F('value', 'string', '0+', nullable='0+'),
                ]),
            ]),
            F('validate_only', 'bool', '0+'),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('responses', '[]AlterConfigsResourceResponse', '0+', fields=[
                F('error_code', 'int16', '0+'),
                F('error_message', 'string', '0+', nullable='0+'),
                F('resource_type', 'int8', '0+'),
                F('resource_name', 'string', '0+'),
            ]),
        ],
    ),

    Api(44, 'IncrementalAlterConfigs', 0, 1, flexible='1+',
        request=[
            F('resources', '[]AlterConfigsResource', '0+', fields=[
                F('resource_type', 'int8', '0+'),
                F('resource_name', 'string', '0+'),
                F('configs', '[]AlterableConfig', '0+', fields=[
                    F('name', 'string', '0+'),
                    F('config_operation', 'int8', '0+'),
                    F('value', 'string', '0+', nullable='0+'),
                ]),
            ]),
            F('validate_only', 'bool', '0+'),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('responses', '[]AlterConfigsResourceResponse', '0+', fields=[
                F('error_code', 'int16', '0+'),
                F('error_message', 'string', '0+', nullable='0+'),
                F('resource_type', 'int8', '0+'),
                F('resource_name', 'string', '0+'),
            ]),
        ],
    ),

    Api(36, 'SaslAuthenticate', 0, 2, flexible='2+',
        request=[
            F('auth_bytes', 'bytes', '0+'),
        ],
        response=[
            F('error_code', 'int16', '0+'),
            F('error_message', 'string', '0+', nullable='0+'),
            F('auth_bytes', 'bytes', '0+'),
            F('session_lifetime_ms', 'int64', '1+', default=0),
        ],
    ),

    Api(37, 'CreatePartitions', 0, 3, flexible='2+',
        request=[
            F('topics', '[]CreatePartitionsTopic', '0+', fields=[
                F('name', 'string', '0+'),
                F('count', 'int32', '0+'),
                F('assignments', '[]CreatePartitionsAssignment', '0+', nullable='0+', fields=[
                    F('broker_ids', '[]int32', '0+'),
                ]),
            ]),
            F('timeout_ms', 'int32', '0+'),
            F('validate_only', 'bool', '0+'),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('results', '[]CreatePartitionsTopicResult', '0+', fields=[
                F('name', 'string', '0+'),
                F('error_code', 'int16', '0+'),
                F('error_message', 'string', '0+', nullable='0+', default=None),
            ]),
        ],
    ),

    Api(21, 'DeleteRecords', 0, 2, flexible='2+',
        request=[
            F('topics', '[]DeleteRecordsTopic', '0+', fields=[
                F('name', 'string', '0+'),
                F('partitions', '[]DeleteRecordsPartition', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('offset', 'int64', '0+'),
                ]),
            ]),
            F('timeout_ms', 'int32', '0+'),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('topics', '[]DeleteRecordsTopicResult', '0+', fields=[
                F('name', 'string', '0+'),
                F('partitions', '[]DeleteRecordsPartitionResult', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('low_watermark', 'int64', '0+'),
                    F('error_code', 'int16', '0+'),
                ]),
            ]),
        ],
    ),

    Api(29, 'DescribeAcls', 0, 3, flexible='2+',
        request=[
            F('resource_type_filter', 'int8', '0+'),
            F('resource_name_filter', 'string', '0+', nullable='0+'),
            F('pattern_type_filter', 'int8', '1+', default=3),
            F('principal_filter', 'string', '0+', nullable='0+'),
            F('host_filter', 'string', '0+', nullable='0+'),
            F('operation', 'int8', '0+'),
            F('permission_type', 'int8', '0+'),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('error_code', 'int16', '0+'),
            F('error_message', 'string', '0+', nullable='0+'),
            F('resources', '[]DescribeAclsResource', '0+', fields=[
                F('resource_type', 'int8', '0+'),
                F('resource_name', 'string', '0+'),
                F('pattern_type', 'int8', '1+', default=3),
                F('acls', '[]AclDescription', '0+', fields=[
                    F('principal', 'string', '0+'),
                    F('host', 'string', '0+'),
                    F('operation', 'int8', '0+'),
                    F('permission_type', 'int8', '0+'),
                ]),
            ]),
        ],
    ),

    Api(30, 'CreateAcls', 0, 3, flexible='2+',
        request=[
            F('creations', '[]AclCreation', '0+', fields=[
                F('resource_type', 'int8', '0+'),
                F('resource_name', 'string', '0+'),
                F('resource_pattern_type', 'int8', '1+', default=3),
                F('principal', 'string', '0+'),
                F('host', 'string', '0+'),
                F('operation', 'int8', '0+'),
                F('permission_type', 'int8', '0+'),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('results', '[]AclCreationResult', '0+', fields=[
                F('error_code', 'int16', '0+'),
                F('error_message', 'string', '0+', nullable='0+'),
            ]),
        ],
    ),

    Api(31, 'DeleteAcls', 0, 3, flexible='2+',
        request=[
            F('filters', '[]DeleteAclsFilter', '0+', fields=[
                F('resource_type_filter', 'int8', '0+'),
                F('resource_name_filter', 'string', '0+', nullable='0+'),
                F('pattern_type_filter', 'int8', '1+', default=3),
                F('principal_filter', 'string', '0+', nullable='0+'),
                F('host_filter', 'string', '0+', nullable='0+'),
                F('operation', 'int8', '0+'),
                F('permission_type', 'int8', '0+'),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('filter_results', '[]DeleteAclsFilterResult', '0+', fields=[
                F('error_code', 'int16', '0+'),
                F('error_message', 'string', '0+', nullable='0+'),
                F('matching_acls', '[]DeleteAclsMatchingAcl', '0+', fields=[
                    F('error_code', 'int16', '0+'),
                    F('error_message', 'string', '0+', nullable='0+'),
                    F('resource_type', 'int8', '0+'),
                    F('resource_name', 'string', '0+'),
                    F('pattern_type', 'int8', '1+', default=3),
                    F('principal', 'string', '0+'),
                    F('host', 'string', '0+'),
                    F('operation', 'int8', '0+'),
                    F('permission_type', 'int8', '0+'),
                ]),
            ]),
        ],
    ),

    Api(35, 'DescribeLogDirs', 0, 4, flexible='2+',
        request=[
            F('topics', '[]DescribableLogDirTopic', '0+', nullable='0+', fields=[
                F('topic', 'string', '0+'),
                F('partitions', '[]int32', '0+'),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('error_code', 'int16', '3+'),
            F('results', '[]DescribeLogDirsResult', '0+', fields=[
                F('error_code', 'int16', '0+'),
                F('log_dir', 'string', '0+'),
                F('topics', '[]DescribeLogDirsTopic', '0+', fields=[
                    F('name', 'string', '0+'),
                    F('partitions', '[]DescribeLogDirsPartition', '0+', fields=[
                        F('partition_index', 'int32', '0+'),
                        F('partition_size', 'int64', '0+'),
                        F('offset_lag', 'int64', '0+'),
                        F('is_future_key', 'bool', '0+'),
                    ]),
                ]),
                F('total_bytes', 'int64', '4+', default=-1),
                F('usable_bytes', 'int64', '4+', default=-1),
            ]),
        ],
    ),

    Api(42, 'DeleteGroups', 0, 2, flexible='2+',
        request=[
            F('groups_names', '[]string', '0+'),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('results', '[]DeletableGroupResult', '0+', fields=[
                F('group_id', 'string', '0+'),
                F('error_code', 'int16', '0+'),
            ]),
        ],
    ),

    Api(43, 'ElectLeaders', 0, 2, flexible='2+',
        request=[
            F('election_type', 'int8', '1+'),
            F('topic_partitions', '[]TopicPartitions', '0+', nullable='0+', fields=[
                F('topic', 'string', '0+'),
                F('partitions', '[]int32', '0+'),
            ]),
            F('timeout_ms', 'int32', '0+', default=60000),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('error_code', 'int16', '1+'),
            F('replica_election_results', '[]ReplicaElectionResult', '0+', fields=[
                F('topic', 'string', '0+'),
                F('partition_result', '[]PartitionResult', '0+', fields=[
                    F('partition_id', 'int32', '0+'),
                    F('error_code', 'int16', '0+'),
                    F('error_message', 'string', '0+', nullable='0+'),
                ]),
            ]),
        ],
    ),

    Api(46, 'ListPartitionReassignments', 0, 0, flexible='0+',
        request=[
            F('timeout_ms', 'int32', '0+', default=60000),
            F('topics', '[]ListPartitionReassignmentsTopics', '0+', nullable='0+', default=None, fields=[
                F('name', 'string', '0+'),
                F('partition_indexes', '[]int32', '0+'),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('error_code', 'int16', '0+'),
            F('error_message', 'string', '0+', nullable='0+'),
            F('topics', '[]OngoingTopicReassignment', '0+', fields=[
                F('name', 'string', '0+'),
                F('partitions', '[]OngoingPartitionReassignment', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('replicas', '[]int32', '0+'),
                    F('adding_replicas', '[]int32', '0+'),
                    F('removing_replicas', '[]int32', '0+'),
                ]),
            ]),
        ],
    ),

    Api(47, 'OffsetDelete', 0, 0, flexible='none',
        request=[
            F('group_id', 'string', '0+'),
            F('topics', '[]OffsetDeleteRequestTopic', '0+', fields=[
                F('name', 'string', '0+'),
                F('partitions', '[]OffsetDeleteRequestPartition', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                ]),
            ]),
        ],
        response=[
            F('error_code', 'int16', '0+'),
            F('throttle_time_ms', 'int32', '0+'),
            F('topics', '[]OffsetDeleteResponseTopic', '0+', fields=[
                F('name', 'string', '0+'),
                F('partitions', '[]OffsetDeleteResponsePartition', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('error_code', 'int16', '0+'),
                ]),
            ]),
        ],
    ),

    Api(61, 'DescribeProducers', 0, 0, flexible='0+',
        request=[
            F('topics', '[]TopicRequest', '0+', fields=[
                F('name', 'string', '0+'),
                F('partition_indexes', '[]int32', '0+'),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('topics', '[]TopicResponse', '0+', fields=[
                F('name', 'string', '0+'),
                F('partitions', '[]PartitionResponse', '0+', fields=[
                    F('partition_index', 'int32', '0+'),
                    F('error_code', 'int16', '0+'),
                    F('error_message', 'string', '0+', nullable='0+', default=None),
                    F('active_producers', '[]ProducerState', '0+', fields=[
                        F('producer_id', 'int64', '0+'),
                        F('producer_epoch', 'int32', '0+'),
                        F('last_sequence', 'int32', '0+', default=-1),
                        F('last_timestamp', 'int64', '0+', default=-1),
                        F('coordinator_epoch', 'int32', '0+'),
                        F('current_txn_start_offset', 'int64', '0+', default=-1),
                    ]),
                ]),
            ]),
        ],
    ),

    Api(65, 'DescribeTransactions', 0, 0, flexible='0+',
        request=[
            F('transactional_ids', '[]string', '0+'),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('transaction_states', '[]TransactionState', '0+', fields=[
                F('error_code', 'int16', '0+'),
                F('transactional_id', 'string', '0+'),
                F('transaction_state', 'string', '0+'),
                F('transaction_timeout_ms', 'int32', '0+'),
                F('transaction_start_time_ms', 'int64', '0+'),
                F('producer_id', 'int64', '0+'),
                F('producer_epoch', 'int16', '0+'),
                F('topics', '[]TopicData', '0+', fields=[
                    F('topic', 'string', '0+'),
                    F('partitions', '[]int32', '0+'),
                ]),
            ]),
        ],
    ),

    Api(66, 'ListTransactions', 0, 1, flexible='0+',
        request=[
            F('state_filters', '[]string', '0+'),
            F('producer_id_filters', '[]int64', '0+'),
            F('duration_filter', 'int64', '1+', default=-1),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('error_code', 'int16', '0+'),
            F('unknown_state_filters', '[]string', '0+'),
            F('transaction_states', '[]TransactionState', '0+', fields=[
                F('transactional_id', 'string', '0+'),
                F('producer_id', 'int64', '0+'),
                F('transaction_state', 'string', '0+'),
            ]),
        ],
    ),

    Api(50, 'DescribeUserScramCredentials', 0, 0, flexible='0+',
        request=[
            F('users', '[]UserName', '0+', nullable='0+', fields=[
                F('name', 'string', '0+'),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('error_code', 'int16', '0+'),
            F('error_message', 'string', '0+', nullable='0+', default=None),
            F('results', '[]DescribeUserScramCredentialsResult', '0+', fields=[
                F('user', 'string', '0+'),
                F('error_code', 'int16', '0+'),
                F('error_message', 'string', '0+', nullable='0+', default=None),
                F('credential_infos', '[]CredentialInfo', '0+', fields=[
                    F('mechanism', 'int8', '0+'),
                    F('iterations', 'int32', '0+'),
                ]),
            ]),
        ],
    ),

    Api(51, 'AlterUserScramCredentials', 0, 0, flexible='0+',
        request=[
            F('deletions', '[]ScramCredentialDeletion', '0+', fields=[
                F('name', 'string', '0+'),
                F('mechanism', 'int8', '0+'),
            ]),
            F('upsertions', '[]ScramCredentialUpsertion', '0+', fields=[
                F('name', 'string', '0+'),
                F('mechanism', 'int8', '0+'),
                F('iterations', 'int32', '0+'),
                F('salt', 'bytes', '0+'),
                F('salted_password', 'bytes', '0+'),
            ]),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('results', '[]AlterUserScramCredentialsResult', '0+', fields=[
                F('user', 'string', '0+'),
                F('error_code', 'int16', '0+'),
                F('error_message', 'string', '0+', nullable='0+', default=None),
            ]),
        ],
    ),

    Api(60, 'DescribeCluster', 0, 1, flexible='0+',
        request=[
            F('include_cluster_authorized_operations', 'bool', '0+'),
            F('endpoint_type', 'int8', '1+', default=1),
        ],
        response=[
            F('throttle_time_ms', 'int32', '0+'),
            F('error_code', 'int16', '0+'),
            F('error_message', 'string', '0+', nullable='0+', default=None),
            F('endpoint_type', 'int8', '1+', default=1),
            F('cluster_id', 'string', '0+'),
            F('controller_id', 'int32', '0+', default=-1),
            F('brokers', '[]DescribeClusterBroker', '0+', fields=[
                F('broker_id', 'int32', '0+'),
                F('host', 'string', '0+'),
                F('port', 'int32', '0+'),
                F('rack', 'string', '0+', nullable='0+', default=None),
            ]),
            F('cluster_authorized_operations', 'int32', '0+', default=-2147483648),
        ],
    ),

]

# Kafka 4's group protocols (KIP-848, KIP-932), declared in their own module
from .messages_groups import GROUP_APIS  # noqa: E402

APIS += GROUP_APIS

#: api_key -> Api
BY_KEY: dict[int, Api] = {api.key: api for api in APIS}

#: api_key -> (min_version, max_version) this codec encodes and decodes.
SUPPORTED: dict[int, tuple[int, int]] = {
    api.key: (api.min_version, api.max_version) for api in APIS
}

#: api_key -> Kafka API name ("Produce", "Fetch", ...)
API_NAMES: dict[int, str] = {api.key: api.name for api in APIS}

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
SASL_HANDSHAKE = 17
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28
DELETE_RECORDS = 21
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
DESCRIBE_LOG_DIRS = 35
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
DELETE_GROUPS = 42
ELECT_LEADERS = 43
LIST_PARTITION_REASSIGNMENTS = 46
OFFSET_DELETE = 47
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
SASL_AUTHENTICATE = 36
CREATE_PARTITIONS = 37
INCREMENTAL_ALTER_CONFIGS = 44
DESCRIBE_CLUSTER = 60
