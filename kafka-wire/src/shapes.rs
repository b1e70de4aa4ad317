//! The shape of every request body the Kafka listener accepts, field by field, for exactly the
//! versions it advertises: what `guard` walks before `kafka-protocol` decodes anything.
//!
//! Transcribed from the Kafka protocol's message definitions (and checked against the crate's
//! own encoder in the tests: every request it encodes walks to its last byte). Only what the
//! walk needs is kept: each field's wire type and the versions it is present in. Strings,
//! byte fields and arrays are walked as nullable whatever the schema says: the guard only
//! bounds lengths, the crate then refuses a null where none is allowed.
//!
//! A shape is written once for classic and flexible versions alike: in a flexible version
//! (KIP-482) the guard reads each length compact and a struct's tagged fields after its last
//! field, which is exactly how the protocol derives those versions.

use super::versions::Api;

/// A field's wire type.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    I8,
    I16,
    I32,
    I64,
    /// 16 bytes.
    Uuid,
    /// i16 length (-1: null), then that many bytes.
    Str,
    /// i32 length (-1: null), then that many bytes.
    Bytes,
    /// i32 count (-1: null), then that many structs of this shape (each with its own tagged
    /// fields in a flexible version).
    Array(&'static [Field]),
    /// An array of i32s (no tagged fields per element).
    I32s,
    /// An array of strings (no tagged fields per element).
    Strs,
}

/// A field present in versions `since..=until`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Field {
    pub kind: Kind,
    pub since: i16,
    pub until: i16,
}

impl Field {
    pub fn present_in(&self, version: i16) -> bool {
        self.since <= version && version <= self.until
    }
}

const fn f(kind: Kind) -> Field {
    Field {
        kind,
        since: 0,
        until: i16::MAX,
    }
}

const fn since(version: i16, kind: Kind) -> Field {
    Field {
        kind,
        since: version,
        until: i16::MAX,
    }
}

const fn until(version: i16, kind: Kind) -> Field {
    Field {
        kind,
        since: 0,
        until: version,
    }
}

const fn between(first: i16, last: i16, kind: Kind) -> Field {
    Field {
        kind,
        since: first,
        until: last,
    }
}

use Kind::*;

const PRODUCE_PARTITION: &[Field] = &[f(I32), f(Bytes)];
const PRODUCE_TOPIC: &[Field] = &[f(Str), f(Array(PRODUCE_PARTITION))];
/// transactional_id, acks, timeout_ms, topic_data.
const PRODUCE: &[Field] = &[f(Str), f(I16), f(I32), f(Array(PRODUCE_TOPIC))];

/// partition, current_leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset,
/// partition_max_bytes.
const FETCH_PARTITION: &[Field] = &[
    f(I32),
    since(9, I32),
    f(I64),
    since(12, I32),
    since(5, I64),
    f(I32),
];
const FETCH_TOPIC: &[Field] = &[f(Str), f(Array(FETCH_PARTITION))];
const FETCH_FORGOTTEN: &[Field] = &[f(Str), f(I32s)];
/// replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session_id,
/// session_epoch, topics, forgotten_topics_data, rack_id.
const FETCH: &[Field] = &[
    f(I32),
    f(I32),
    f(I32),
    f(I32),
    f(I8),
    since(7, I32),
    since(7, I32),
    f(Array(FETCH_TOPIC)),
    since(7, Array(FETCH_FORGOTTEN)),
    since(11, Str),
];

/// partition_index, current_leader_epoch, timestamp.
const LIST_OFFSETS_PARTITION: &[Field] = &[f(I32), since(4, I32), f(I64)];
const LIST_OFFSETS_TOPIC: &[Field] = &[f(Str), f(Array(LIST_OFFSETS_PARTITION))];
/// replica_id, isolation_level, topics.
const LIST_OFFSETS: &[Field] = &[f(I32), since(2, I8), f(Array(LIST_OFFSETS_TOPIC))];

/// topic_id (v10), name.
const METADATA_TOPIC: &[Field] = &[since(10, Uuid), f(Str)];
/// topics, allow_auto_topic_creation, include_cluster_authorized_operations (v8-10),
/// include_topic_authorized_operations.
const METADATA: &[Field] = &[
    f(Array(METADATA_TOPIC)),
    since(4, I8),
    between(8, 10, I8),
    since(8, I8),
];

/// key, key_type.
const FIND_COORDINATOR: &[Field] = &[f(Str), since(1, I8)];

/// name, metadata.
const JOIN_GROUP_PROTOCOL: &[Field] = &[f(Str), f(Bytes)];
/// group_id, session_timeout_ms, rebalance_timeout_ms, member_id, group_instance_id,
/// protocol_type, protocols, reason.
const JOIN_GROUP: &[Field] = &[
    f(Str),
    f(I32),
    since(1, I32),
    f(Str),
    since(5, Str),
    f(Str),
    f(Array(JOIN_GROUP_PROTOCOL)),
    since(8, Str),
];

/// member_id, assignment.
const SYNC_GROUP_ASSIGNMENT: &[Field] = &[f(Str), f(Bytes)];
/// group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name,
/// assignments.
const SYNC_GROUP: &[Field] = &[
    f(Str),
    f(I32),
    f(Str),
    since(3, Str),
    since(5, Str),
    since(5, Str),
    f(Array(SYNC_GROUP_ASSIGNMENT)),
];

/// group_id, generation_id, member_id, group_instance_id.
const HEARTBEAT: &[Field] = &[f(Str), f(I32), f(Str), since(3, Str)];

/// member_id, group_instance_id, reason.
const LEAVE_GROUP_MEMBER: &[Field] = &[f(Str), f(Str), since(5, Str)];
/// group_id, member_id (up to v2), members (from v3).
const LEAVE_GROUP: &[Field] = &[f(Str), until(2, Str), since(3, Array(LEAVE_GROUP_MEMBER))];

/// partition_index, committed_offset, committed_leader_epoch, committed_metadata.
const OFFSET_COMMIT_PARTITION: &[Field] = &[f(I32), f(I64), since(6, I32), f(Str)];
const OFFSET_COMMIT_TOPIC: &[Field] = &[f(Str), f(Array(OFFSET_COMMIT_PARTITION))];
/// group_id, generation_id, member_id, group_instance_id, retention_time_ms, topics.
const OFFSET_COMMIT: &[Field] = &[
    f(Str),
    f(I32),
    f(Str),
    since(7, Str),
    until(4, I64),
    f(Array(OFFSET_COMMIT_TOPIC)),
];

/// name, partition_indexes.
const OFFSET_FETCH_TOPIC: &[Field] = &[f(Str), f(I32s)];
/// group_id, topics, require_stable (v7).
const OFFSET_FETCH: &[Field] = &[f(Str), f(Array(OFFSET_FETCH_TOPIC)), since(7, I8)];

/// transactional_id, transaction_timeout_ms, producer_id and producer_epoch (v3: the session
/// to bump).
const INIT_PRODUCER_ID: &[Field] = &[f(Str), f(I32), since(3, I64), since(3, I16)];

/// client_software_name, client_software_version (v3; empty before).
const API_VERSIONS: &[Field] = &[since(3, Str), since(3, Str)];

/// groups, include_authorized_operations.
const DESCRIBE_GROUPS: &[Field] = &[f(Strs), since(3, I8)];

/// states_filter (v4).
const LIST_GROUPS: &[Field] = &[since(4, Strs)];

/// partition_index, broker_ids.
const CREATE_TOPICS_ASSIGNMENT: &[Field] = &[f(I32), f(I32s)];
/// name, value.
const CREATE_TOPICS_CONFIG: &[Field] = &[f(Str), f(Str)];
/// name, num_partitions, replication_factor, assignments, configs.
const CREATE_TOPICS_TOPIC: &[Field] = &[
    f(Str),
    f(I32),
    f(I16),
    f(Array(CREATE_TOPICS_ASSIGNMENT)),
    f(Array(CREATE_TOPICS_CONFIG)),
];
/// topics, timeout_ms, validate_only.
const CREATE_TOPICS: &[Field] = &[f(Array(CREATE_TOPICS_TOPIC)), f(I32), since(1, I8)];

/// topic_names, timeout_ms.
const DELETE_TOPICS: &[Field] = &[f(Strs), f(I32)];

/// resource_type, resource_name, configuration_keys.
const DESCRIBE_CONFIGS_RESOURCE: &[Field] = &[f(I8), f(Str), f(Strs)];
/// resources, include_synonyms, include_documentation.
const DESCRIBE_CONFIGS: &[Field] = &[
    f(Array(DESCRIBE_CONFIGS_RESOURCE)),
    since(1, I8),
    since(3, I8),
];

/// name, value.
const ALTER_CONFIGS_CONFIG: &[Field] = &[f(Str), f(Str)];
/// resource_type, resource_name, configs.
const ALTER_CONFIGS_RESOURCE: &[Field] = &[f(I8), f(Str), f(Array(ALTER_CONFIGS_CONFIG))];
/// resources, validate_only.
const ALTER_CONFIGS: &[Field] = &[f(Array(ALTER_CONFIGS_RESOURCE)), f(I8)];

/// name, config_operation, value.
const INCREMENTAL_ALTER_CONFIGS_CONFIG: &[Field] = &[f(Str), f(I8), f(Str)];
/// resource_type, resource_name, configs.
const INCREMENTAL_ALTER_CONFIGS_RESOURCE: &[Field] =
    &[f(I8), f(Str), f(Array(INCREMENTAL_ALTER_CONFIGS_CONFIG))];
/// resources, validate_only.
const INCREMENTAL_ALTER_CONFIGS: &[Field] = &[f(Array(INCREMENTAL_ALTER_CONFIGS_RESOURCE)), f(I8)];

/// partition, current_leader_epoch, leader_epoch.
const LEADER_EPOCH_PARTITION: &[Field] = &[f(I32), f(I32), f(I32)];
const LEADER_EPOCH_TOPIC: &[Field] = &[f(Str), f(Array(LEADER_EPOCH_PARTITION))];
/// replica_id (v3), topics.
const OFFSET_FOR_LEADER_EPOCH: &[Field] = &[since(3, I32), f(Array(LEADER_EPOCH_TOPIC))];

/// broker_ids (one assignment per new partition).
const CREATE_PARTITIONS_ASSIGNMENT: &[Field] = &[f(I32s)];
/// name, count, assignments.
const CREATE_PARTITIONS_TOPIC: &[Field] = &[f(Str), f(I32), f(Array(CREATE_PARTITIONS_ASSIGNMENT))];
/// topics, timeout_ms, validate_only.
const CREATE_PARTITIONS: &[Field] = &[f(Array(CREATE_PARTITIONS_TOPIC)), f(I32), f(I8)];

/// partition_index, offset.
const DELETE_RECORDS_PARTITION: &[Field] = &[f(I32), f(I64)];
const DELETE_RECORDS_TOPIC: &[Field] = &[f(Str), f(Array(DELETE_RECORDS_PARTITION))];
/// topics, timeout_ms.
const DELETE_RECORDS: &[Field] = &[f(Array(DELETE_RECORDS_TOPIC)), f(I32)];

/// groups_names.
const DELETE_GROUPS: &[Field] = &[f(Strs)];

/// name, partitions (structs of one field, partition_index: OffsetDelete has no flexible
/// version, so no tagged fields tell them apart from an i32 array).
const OFFSET_DELETE_PARTITION: &[Field] = &[f(I32)];
const OFFSET_DELETE_TOPIC: &[Field] = &[f(Str), f(Array(OFFSET_DELETE_PARTITION))];
/// group_id, topics.
const OFFSET_DELETE: &[Field] = &[f(Str), f(Array(OFFSET_DELETE_TOPIC))];

/// include_cluster_authorized_operations, endpoint_type (v1).
const DESCRIBE_CLUSTER: &[Field] = &[f(I8), since(1, I8)];

/// mechanism.
const SASL_HANDSHAKE: &[Field] = &[f(Str)];
/// auth_bytes.
const SASL_AUTHENTICATE: &[Field] = &[f(Bytes)];

/// The body shape of `api`'s requests (the versions it is accepted in are in `versions`).
pub(crate) fn request_shape(api: Api) -> &'static [Field] {
    match api {
        Api::Produce => PRODUCE,
        Api::Fetch => FETCH,
        Api::ListOffsets => LIST_OFFSETS,
        Api::Metadata => METADATA,
        Api::OffsetCommit => OFFSET_COMMIT,
        Api::OffsetFetch => OFFSET_FETCH,
        Api::FindCoordinator => FIND_COORDINATOR,
        Api::JoinGroup => JOIN_GROUP,
        Api::Heartbeat => HEARTBEAT,
        Api::LeaveGroup => LEAVE_GROUP,
        Api::SyncGroup => SYNC_GROUP,
        Api::DescribeGroups => DESCRIBE_GROUPS,
        Api::ListGroups => LIST_GROUPS,
        Api::ApiVersions => API_VERSIONS,
        Api::CreateTopics => CREATE_TOPICS,
        Api::DeleteTopics => DELETE_TOPICS,
        Api::InitProducerId => INIT_PRODUCER_ID,
        Api::DescribeConfigs => DESCRIBE_CONFIGS,
        Api::AlterConfigs => ALTER_CONFIGS,
        Api::IncrementalAlterConfigs => INCREMENTAL_ALTER_CONFIGS,
        Api::CreatePartitions => CREATE_PARTITIONS,
        Api::DeleteGroups => DELETE_GROUPS,
        Api::DeleteRecords => DELETE_RECORDS,
        Api::OffsetForLeaderEpoch => OFFSET_FOR_LEADER_EPOCH,
        Api::OffsetDelete => OFFSET_DELETE,
        Api::SaslHandshake => SASL_HANDSHAKE,
        Api::SaslAuthenticate => SASL_AUTHENTICATE,
        Api::DescribeCluster => DESCRIBE_CLUSTER,
    }
}
