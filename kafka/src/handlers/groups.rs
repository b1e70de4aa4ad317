//! Consumer groups: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
//! each forwarded to the Tailstream coordinator, which keeps every group's membership (Kafka's
//! classic protocol: the members' protocol metadata and assignments stay opaque bytes) and its
//! committed offsets, durably. Whatever broker a client asked, the answer is the same.

use super::{Answer, encode, str_bytes};
use crate::shared::Kafka;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::{
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
    OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use tailstream_auth::Principal;
use tailstream_identity::Access;
use tailstream_stubs::StubError;
use tailstream_wire::messages as native;
use tailstream_wire::messages::AclOperation;
use tailstream_wire::{Appended, Status};

/// The Kafka error code for a group operation the coordinator refused (or could not be
/// reached for: the client finds the coordinator again and retries).
fn group_error_code(error: &StubError) -> i16 {
    let kafka = match error.status() {
        Some(Status::RebalanceInProgress) => ResponseError::RebalanceInProgress,
        Some(Status::UnknownMember) => ResponseError::UnknownMemberId,
        Some(Status::IllegalGeneration) => ResponseError::IllegalGeneration,
        Some(Status::InconsistentGroupProtocol) => ResponseError::InconsistentGroupProtocol,
        Some(Status::InvalidSessionTimeout) => ResponseError::InvalidSessionTimeout,
        Some(Status::GroupFull) => ResponseError::GroupMaxSizeReached,
        Some(Status::InvalidArgument) => ResponseError::InvalidGroupId,
        Some(Status::UnknownStream) => ResponseError::UnknownTopicOrPartition,
        _ => ResponseError::CoordinatorNotAvailable,
    };
    kafka.code()
}

pub(crate) fn join(
    kafka: Arc<Kafka>,
    access: &Access,
    principal: &Principal,
    version: i16,
    client_id: Option<String>,
    request: JoinGroupRequest,
) -> Answer {
    let denied = !access.group(AclOperation::Read, request.group_id.as_str());
    let group_refusal = crate::errors::group_denied(access);
    // A group this join makes is counted against the client's user's limits.
    let owner = Appended(principal.user().map(str::to_owned));
    Answer::Later(Box::pin(async move {
        let member_id = request.member_id.as_str().to_owned();
        if denied {
            let response = JoinGroupResponse::default()
                .with_error_code(group_refusal)
                .with_generation_id(-1)
                .with_member_id(str_bytes(&member_id));
            return encode(&response, version);
        }
        // v7 answers it back; a group's members all joined with the same one.
        let protocol_type = request.protocol_type.clone();
        let native = native::GroupJoinRequest {
            group: request.group_id.as_str().to_owned(),
            member_id: member_id.clone(),
            client_id: client_id.unwrap_or_default(),
            session_timeout_ms: u32::try_from(request.session_timeout_ms).unwrap_or(0),
            // v0 has none: the coordinator uses the session timeout.
            rebalance_timeout_ms: u32::try_from(request.rebalance_timeout_ms).unwrap_or(0),
            protocol_type: request.protocol_type.as_str().to_owned(),
            protocols: request
                .protocols
                .into_iter()
                .map(|p| native::GroupProtocol {
                    name: p.name.as_str().to_owned(),
                    metadata: p.metadata,
                })
                .collect(),
            owner,
        };
        let response = match kafka.groups.join_group(&native).await {
            Ok(joined) => JoinGroupResponse::default()
                .with_generation_id(i32::try_from(joined.generation).unwrap_or(i32::MAX))
                .with_protocol_name(Some(str_bytes(&joined.protocol)))
                .with_protocol_type(Some(protocol_type))
                .with_leader(str_bytes(&joined.leader))
                .with_member_id(str_bytes(&joined.member_id))
                .with_members(
                    joined
                        .members
                        .into_iter()
                        .map(|m| {
                            JoinGroupResponseMember::default()
                                .with_member_id(str_bytes(&m.member_id))
                                .with_metadata(m.metadata)
                        })
                        .collect(),
                ),
            Err(error) => JoinGroupResponse::default()
                .with_error_code(group_error_code(&error))
                .with_generation_id(-1)
                .with_member_id(str_bytes(&member_id)),
        };
        encode(&response, version)
    }))
}

pub(crate) fn sync(
    kafka: Arc<Kafka>,
    access: &Access,
    version: i16,
    request: SyncGroupRequest,
) -> Answer {
    let denied = !access.group(AclOperation::Read, request.group_id.as_str());
    let group_refusal = crate::errors::group_denied(access);
    Answer::Later(Box::pin(async move {
        if denied {
            return encode(
                &SyncGroupResponse::default().with_error_code(group_refusal),
                version,
            );
        }
        let native = native::GroupSyncRequest {
            group: request.group_id.as_str().to_owned(),
            generation: u32::try_from(request.generation_id).unwrap_or(u32::MAX),
            member_id: request.member_id.as_str().to_owned(),
            assignments: request
                .assignments
                .into_iter()
                .map(|a| native::GroupAssignment {
                    member_id: a.member_id.as_str().to_owned(),
                    assignment: a.assignment,
                })
                .collect(),
        };
        let response = match kafka.groups.sync_group(&native).await {
            Ok(synced) => SyncGroupResponse::default().with_assignment(synced.assignment),
            Err(error) => SyncGroupResponse::default().with_error_code(group_error_code(&error)),
        };
        encode(&response, version)
    }))
}

pub(crate) fn heartbeat(
    kafka: Arc<Kafka>,
    access: &Access,
    version: i16,
    request: HeartbeatRequest,
) -> Answer {
    let denied = !access.group(AclOperation::Read, request.group_id.as_str());
    let group_refusal = crate::errors::group_denied(access);
    Answer::Later(Box::pin(async move {
        if denied {
            return encode(
                &HeartbeatResponse::default().with_error_code(group_refusal),
                version,
            );
        }
        let native = native::GroupHeartbeatRequest {
            group: request.group_id.as_str().to_owned(),
            generation: u32::try_from(request.generation_id).unwrap_or(u32::MAX),
            member_id: request.member_id.as_str().to_owned(),
        };
        let code = match kafka.group_calls.heartbeat_group(&native).await {
            Ok(()) => 0,
            Err(error) => group_error_code(&error),
        };
        encode(&HeartbeatResponse::default().with_error_code(code), version)
    }))
}

pub(crate) fn leave(
    kafka: Arc<Kafka>,
    access: &Access,
    version: i16,
    request: LeaveGroupRequest,
) -> Answer {
    let denied = !access.group(AclOperation::Read, request.group_id.as_str());
    let group_refusal = crate::errors::group_denied(access);
    Answer::Later(Box::pin(async move {
        // Up to v2 one member leaves; from v3 a list of them.
        let members: Vec<String> = if version <= 2 {
            vec![request.member_id.as_str().to_owned()]
        } else {
            request
                .members
                .iter()
                .map(|m| m.member_id.as_str().to_owned())
                .collect()
        };
        let native = native::GroupLeaveRequest {
            group: request.group_id.as_str().to_owned(),
            member_ids: members.clone(),
        };
        let code = match denied {
            true => group_refusal,
            false => match kafka.group_calls.leave_group(&native).await {
                Ok(()) => 0,
                Err(error) => group_error_code(&error),
            },
        };
        let mut response = LeaveGroupResponse::default().with_error_code(code);
        if version >= 3 {
            response = response.with_members(
                members
                    .iter()
                    .map(|m| {
                        MemberResponse::default()
                            .with_member_id(str_bytes(m))
                            .with_error_code(code)
                    })
                    .collect(),
            );
        }
        encode(&response, version)
    }))
}

pub(crate) fn commit(
    kafka: Arc<Kafka>,
    access: Access,
    principal: &Principal,
    version: i16,
    request: OffsetCommitRequest,
) -> Answer {
    let owner = Appended(principal.user().map(str::to_owned));
    Answer::Later(Box::pin(async move {
        let group_denied = !access.group(AclOperation::Read, request.group_id.as_str());
        let group_refusal = crate::errors::group_denied(&access);
        // Generation -1 and no member: a consumer that assigns its partitions itself.
        let member = (request.generation_id_or_member_epoch >= 0 || !request.member_id.is_empty())
            .then(|| native::GroupMemberRef {
                member_id: request.member_id.as_str().to_owned(),
                generation: u32::try_from(request.generation_id_or_member_epoch)
                    .unwrap_or(u32::MAX),
            });
        let mut offsets = Vec::new();
        let mut refused: BTreeMap<(String, i32), i16> = BTreeMap::new();
        for topic in &request.topics {
            // A partition the client may not read, or that does not exist, is refused alone
            // (as Kafka does); the others are committed.
            let topic_refused = if !access.topic(AclOperation::Read, topic.name.as_str()) {
                Err(crate::errors::topic_denied(&access))
            } else {
                kafka
                    .topics
                    .route(
                        topic.name.as_str(),
                        None,
                        crate::topics::highest(topic.partitions.iter().map(|p| p.partition_index)),
                    )
                    .await
                    .map_err(|error| error.code)
            };
            for partition in &topic.partitions {
                let unknown = ResponseError::UnknownTopicOrPartition.code();
                let refusal = match &topic_refused {
                    Err(code) => Some(*code),
                    Ok(stream) => crate::topics::partition(stream, partition.partition_index)
                        .is_none()
                        .then_some(unknown),
                };
                if let Some(code) = refusal {
                    refused.insert(
                        (topic.name.as_str().to_owned(), partition.partition_index),
                        code,
                    );
                    continue;
                }
                let valid = (
                    u32::try_from(partition.partition_index),
                    u64::try_from(partition.committed_offset),
                );
                match valid {
                    (Ok(index), Ok(offset)) => offsets.push(native::CommittedOffset {
                        topic: topic.name.as_str().to_owned(),
                        partition: index,
                        offset,
                        metadata: partition
                            .committed_metadata
                            .as_ref()
                            .map_or(String::new(), |m| m.as_str().to_owned()),
                    }),
                    _ => {
                        refused.insert(
                            (topic.name.as_str().to_owned(), partition.partition_index),
                            ResponseError::OffsetMetadataTooLarge.code(),
                        );
                    }
                }
            }
        }
        let native = native::OffsetCommitRequest {
            group: request.group_id.as_str().to_owned(),
            member,
            offsets,
            owner,
        };
        let committed = match group_denied {
            true => Err(None),
            // Every partition refused already: nothing to commit.
            false if native.offsets.is_empty() && !refused.is_empty() => Ok(()),
            false => kafka
                .group_calls
                .commit_offsets(&native)
                .await
                .map_err(Some),
        };
        let code = match committed {
            Ok(()) => 0,
            Err(None) => group_refusal,
            Err(Some(error)) if error.status() == Some(Status::InvalidArgument) => {
                ResponseError::OffsetMetadataTooLarge.code()
            }
            Err(Some(error)) => group_error_code(&error),
        };
        let topics = request
            .topics
            .iter()
            .map(|topic| {
                let partitions = topic
                    .partitions
                    .iter()
                    .map(|p| {
                        let key = (topic.name.as_str().to_owned(), p.partition_index);
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            // A group the client may not use refuses every partition alike.
                            .with_error_code(match group_denied {
                                true => group_refusal,
                                false => refused.get(&key).copied().unwrap_or(code),
                            })
                    })
                    .collect();
                OffsetCommitResponseTopic::default()
                    .with_name(topic.name.clone())
                    .with_partitions(partitions)
            })
            .collect();
        encode(
            &OffsetCommitResponse::default().with_topics(topics),
            version,
        )
    }))
}

pub(crate) fn fetch(
    kafka: Arc<Kafka>,
    access: Access,
    version: i16,
    request: OffsetFetchRequest,
) -> Answer {
    Answer::Later(Box::pin(async move {
        let group_denied = !access.group(AclOperation::Describe, request.group_id.as_str());
        let group_refusal = crate::errors::group_denied(&access);
        let wanted: Option<Vec<native::TopicPartition>> = request.topics.as_ref().map(|topics| {
            topics
                .iter()
                .flat_map(|t| {
                    t.partition_indexes.iter().filter_map(|p| {
                        Some(native::TopicPartition {
                            topic: t.name.as_str().to_owned(),
                            partition: u32::try_from(*p).ok()?,
                        })
                    })
                })
                .collect()
        });
        let native = native::OffsetFetchRequest {
            group: request.group_id.as_str().to_owned(),
            partitions: wanted,
        };
        let fetched = match group_denied {
            true => Err(group_refusal),
            false => kafka
                .group_calls
                .fetch_offsets(&native)
                .await
                .map_err(|error| group_error_code(&error)),
        };
        let (committed, code) = match fetched {
            Ok(response) => (response.offsets, 0),
            Err(code) => (Vec::new(), code),
        };
        let mut by_topic: BTreeMap<String, BTreeMap<i32, (i64, String)>> = BTreeMap::new();
        // Offsets of topics the client may not describe are not shown.
        for c in committed
            .into_iter()
            .filter(|c| access.topic(AclOperation::Describe, &c.topic))
        {
            by_topic.entry(c.topic).or_default().insert(
                i32::try_from(c.partition).unwrap_or(i32::MAX),
                (i64::try_from(c.offset).unwrap_or(i64::MAX), c.metadata),
            );
        }
        // Every partition asked for is answered (-1: nothing committed); with no list, what
        // the group committed.
        if let Some(topics) = &request.topics {
            for topic in topics {
                let known = by_topic.entry(topic.name.as_str().to_owned()).or_default();
                for p in &topic.partition_indexes {
                    known.entry(*p).or_insert((-1, String::new()));
                }
            }
        }
        let topics = by_topic
            .into_iter()
            .map(|(name, partitions)| {
                // A topic asked for by name that the client may not describe: refused, as Kafka
                // does, not shown as nothing committed.
                let code = match code == 0 && !access.topic(AclOperation::Describe, &name) {
                    true => crate::errors::topic_denied(&access),
                    false => code,
                };
                OffsetFetchResponseTopic::default()
                    .with_name(TopicName(str_bytes(&name)))
                    .with_partitions(
                        partitions
                            .into_iter()
                            .map(|(index, (offset, metadata))| {
                                OffsetFetchResponsePartition::default()
                                    .with_partition_index(index)
                                    .with_committed_offset(offset)
                                    .with_metadata(Some(str_bytes(&metadata)))
                                    .with_error_code(code)
                            })
                            .collect(),
                    )
            })
            .collect();
        let mut response = OffsetFetchResponse::default().with_topics(topics);
        if version >= 2 {
            response = response.with_error_code(code);
        }
        encode(&response, version)
    }))
}
