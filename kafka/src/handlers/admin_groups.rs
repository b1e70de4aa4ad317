//! Group administration: ListGroups and DescribeGroups, answered from the coordinator's view
//! of every group (members and their assignments, or only committed offsets); DeleteGroups and
//! OffsetDelete, which remove committed offsets of groups without members. A group the client
//! may not describe is left out of a listing (unless it may describe the cluster, which lists
//! every group, as in Kafka) and refused by name; removing needs Delete on the
//! group (and, for OffsetDelete, Read on each topic, as Kafka asks).
//!
//! Admin clients send ListGroups to every broker and merge the answers (Kafka spreads groups
//! over coordinators); every broker here can answer for every group, so each lists only the
//! groups whose name hashes to it among the live Kafka brokers, and a merge lists each once.

use super::{Answer, encode, str_bytes};
use crate::shared::Kafka;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    GroupId, ListGroupsRequest, ListGroupsResponse, OffsetDeleteRequest, OffsetDeleteResponse,
};
use std::sync::Arc;
use tailstream_identity::Access;
use tailstream_wire::messages::{
    AclOperation, AclResource, GroupDescription, OffsetsRemoval, TopicPartition,
};

/// Groups one DescribeGroups request may name (the coordinator's own bound).
const DESCRIBED_GROUPS_MAX: usize = 1000;

pub(crate) fn list(
    kafka: Arc<Kafka>,
    access: Access,
    version: i16,
    request: ListGroupsRequest,
) -> Answer {
    Answer::Later(Box::pin(async move {
        let spread = listing_spread(&kafka);
        // As in Kafka, Describe on the cluster lists every group, else those the client may
        // describe.
        let every = access.allows(
            AclOperation::Describe,
            AclResource::Cluster,
            tailstream_auth::acl::CLUSTER,
        );
        // v4's filter: the states asked for (Kafka compares them ignoring case), or all.
        let states = &request.states_filter;
        let wanted =
            |state: &str| states.is_empty() || states.iter().any(|s| s.eq_ignore_ascii_case(state));
        let response = match kafka.group_calls.describe_groups(Vec::new()).await {
            Ok(answer) => ListGroupsResponse::default().with_groups(
                answer
                    .groups
                    .into_iter()
                    .filter(|g| every || access.group(AclOperation::Describe, &g.group))
                    .filter(|g| lists_here(&spread, &g.group))
                    .filter(|g| wanted(g.phase.kafka_name()))
                    .map(|g| {
                        ListedGroup::default()
                            .with_group_id(GroupId(str_bytes(&g.group)))
                            .with_protocol_type(str_bytes(&g.protocol_type))
                            .with_group_state(str_bytes(g.phase.kafka_name()))
                    })
                    .collect(),
            ),
            Err(error) => {
                tracing::debug!(%error, "ListGroups: the coordinator could not be asked");
                ListGroupsResponse::default()
                    .with_error_code(ResponseError::CoordinatorNotAvailable.code())
            }
        };
        encode(&response, version)
    }))
}

/// Which groups this broker lists: the live Kafka brokers (sorted) and this one's index, or
/// `None` (list every group) when this broker is not among them: better listed twice than
/// not at all.
fn listing_spread(kafka: &Kafka) -> Option<(Vec<u32>, u32)> {
    let own = kafka.cluster.server_id()?.index;
    let mut live: Vec<u32> = {
        let members = kafka.cluster.brokers();
        let members = members.borrow();
        members
            .iter()
            .filter(|b| b.alive && !b.crashed && !b.kafka_addr.is_empty())
            .map(|b| b.server_id.index)
            .collect()
    };
    live.sort_unstable();
    live.dedup();
    live.contains(&own).then_some((live, own))
}

/// Whether `group` is this broker's to list: the live broker its name hashes to.
fn lists_here(spread: &Option<(Vec<u32>, u32)>, group: &str) -> bool {
    match spread {
        None => true,
        Some((live, own)) => {
            let at = crc32fast::hash(group.as_bytes()) as usize % live.len();
            live[at] == *own
        }
    }
}

pub(crate) fn describe(
    kafka: Arc<Kafka>,
    access: Access,
    version: i16,
    request: DescribeGroupsRequest,
) -> Answer {
    Answer::Later(Box::pin(async move {
        let named: Vec<String> = request
            .groups
            .iter()
            .map(|g| g.as_str().to_owned())
            .collect();
        let refused = |group: &str, code: i16| {
            DescribedGroup::default()
                .with_group_id(GroupId(str_bytes(group)))
                .with_error_code(code)
        };
        if named.len() > DESCRIBED_GROUPS_MAX {
            let code = ResponseError::InvalidRequest.code();
            let groups = named.iter().map(|g| refused(g, code)).collect();
            return encode(
                &DescribeGroupsResponse::default().with_groups(groups),
                version,
            );
        }
        let allowed: Vec<String> = named
            .iter()
            .filter(|g| access.group(AclOperation::Describe, g))
            .cloned()
            .collect();
        let described = if allowed.is_empty() {
            Ok(Vec::new())
        } else {
            kafka
                .group_calls
                .describe_groups(allowed)
                .await
                .map(|answer| answer.groups)
        };
        let groups = named
            .iter()
            .map(|name| {
                if !access.group(AclOperation::Describe, name) {
                    return refused(name, crate::errors::group_denied(&access));
                }
                match &described {
                    Ok(found) => match found.iter().find(|g| &g.group == name) {
                        Some(group) => described_group(group),
                        None => refused(name, ResponseError::CoordinatorNotAvailable.code()),
                    },
                    Err(_) => refused(name, ResponseError::CoordinatorNotAvailable.code()),
                }
            })
            .collect();
        encode(
            &DescribeGroupsResponse::default().with_groups(groups),
            version,
        )
    }))
}

fn described_group(group: &GroupDescription) -> DescribedGroup {
    let members = group
        .members
        .iter()
        .map(|m| {
            DescribedGroupMember::default()
                .with_member_id(str_bytes(&m.member_id))
                .with_client_id(str_bytes(&m.client_id))
                // The coordinator does not learn a member's address (a broker forwards it).
                .with_client_host(str_bytes(""))
                .with_member_metadata(m.metadata.clone())
                .with_member_assignment(m.assignment.clone())
        })
        .collect();
    DescribedGroup::default()
        .with_group_id(GroupId(str_bytes(&group.group)))
        .with_group_state(str_bytes(group.phase.kafka_name()))
        .with_protocol_type(str_bytes(&group.protocol_type))
        .with_protocol_data(str_bytes(&group.protocol))
        .with_members(members)
}

/// A removal's outcome as Kafka's error code.
fn removal_code(outcome: OffsetsRemoval) -> i16 {
    match outcome {
        OffsetsRemoval::Removed => 0,
        OffsetsRemoval::GroupNotEmpty => ResponseError::NonEmptyGroup.code(),
        OffsetsRemoval::UnknownGroup => ResponseError::GroupIdNotFound.code(),
    }
}

pub(crate) fn delete(
    kafka: Arc<Kafka>,
    access: Access,
    version: i16,
    request: DeleteGroupsRequest,
) -> Answer {
    Answer::Later(Box::pin(async move {
        let named: Vec<String> = request
            .groups_names
            .iter()
            .map(|g| g.as_str().to_owned())
            .collect();
        let may = |g: &str| access.group(AclOperation::Delete, g);
        let allowed: Vec<String> = named.iter().filter(|g| may(g)).cloned().collect();
        let removed = if allowed.is_empty() || named.len() > DESCRIBED_GROUPS_MAX {
            Ok(Vec::new())
        } else {
            kafka
                .group_calls
                .delete_groups(allowed)
                .await
                .map(|answer| answer.groups)
        };
        let results = named
            .iter()
            .map(|name| {
                let code = if named.len() > DESCRIBED_GROUPS_MAX {
                    ResponseError::InvalidRequest.code()
                } else if !may(name) {
                    crate::errors::group_denied(&access)
                } else {
                    match &removed {
                        Ok(groups) => groups
                            .iter()
                            .find(|g| &g.group == name)
                            .map_or(ResponseError::CoordinatorNotAvailable.code(), |g| {
                                removal_code(g.outcome)
                            }),
                        Err(_) => ResponseError::CoordinatorNotAvailable.code(),
                    }
                };
                DeletableGroupResult::default()
                    .with_group_id(GroupId(str_bytes(name)))
                    .with_error_code(code)
            })
            .collect();
        encode(
            &DeleteGroupsResponse::default().with_results(results),
            version,
        )
    }))
}

pub(crate) fn delete_offsets(
    kafka: Arc<Kafka>,
    access: Access,
    version: i16,
    request: OffsetDeleteRequest,
) -> Answer {
    Answer::Later(Box::pin(async move {
        let group = request.group_id.as_str().to_owned();
        // Per partition: refused where the topic may not be read, else the group's outcome.
        let readable = |topic: &str| access.topic(AclOperation::Read, topic);
        let partitions: Vec<TopicPartition> = request
            .topics
            .iter()
            .filter(|t| readable(t.name.as_str()))
            .flat_map(|t| {
                t.partitions.iter().filter_map(|p| {
                    Some(TopicPartition {
                        topic: t.name.as_str().to_owned(),
                        partition: u32::try_from(p.partition_index).ok()?,
                    })
                })
            })
            .collect();
        let top = if !access.group(AclOperation::Delete, &group) {
            crate::errors::group_denied(&access)
        } else if partitions.is_empty() {
            0
        } else {
            let native = tailstream_wire::messages::OffsetDeleteRequest {
                group: group.clone(),
                partitions,
            };
            match kafka.group_calls.delete_offsets(&native).await {
                Ok(answer) => removal_code(answer.outcome),
                Err(_) => ResponseError::CoordinatorNotAvailable.code(),
            }
        };
        let topics = if top != 0 {
            Vec::new()
        } else {
            request
                .topics
                .into_iter()
                .map(|t| {
                    let code = if readable(t.name.as_str()) {
                        0
                    } else {
                        crate::errors::topic_denied(&access)
                    };
                    OffsetDeleteResponseTopic::default()
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    OffsetDeleteResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(code)
                                })
                                .collect(),
                        )
                        .with_name(t.name)
                })
                .collect()
        };
        encode(
            &OffsetDeleteResponse::default()
                .with_error_code(top)
                .with_topics(topics),
            version,
        )
    }))
}
