//! Who a native client of the coordinator is, and what it may do (`security.client_authentication`).
//!
//! The client listener authenticates connections with SCRAM against the users in this
//! coordinator's own metadata ([`MetadataCredentials`]), then checks every request against the
//! access control rules, as the brokers' listeners do: a stream's create, describe and delete
//! need that operation on the stream (create may be on the cluster instead), a producer id
//! needs idempotent write, a group's calls need read on the group (and a commit read on each
//! stream it commits), the cluster's recoveries and consumer groups need describe on the
//! cluster. Listing streams, and a group's committed offsets, show only the streams the user
//! may describe. Brokers, on the peer
//! listener, are members: nothing is checked of them here. User and rule operations carry the
//! admin token, and are checked by it (`service_users`).

use super::{CoordinatorService, decode};
use futures::future::{BoxFuture, FutureExt};
use std::sync::Arc;
use tailstream_auth::acl::{Access, CLUSTER, rules_of};
use tailstream_net::scram_server::CredentialSource;
use tailstream_net::{Request, Response};
use tailstream_wire::messages::{
    AclOperation, AclResource, AddStreamletsRequest, AlterRetentionRequest, CreateStreamRequest,
    DeleteGroupsRequest, DeleteRecordsRequest, DeleteStreamRequest, DescribeStreamRequest,
    GroupHeartbeatRequest, GroupJoinRequest, GroupLeaveRequest, GroupSyncRequest,
    ListStreamsResponse, OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest,
    OffsetFetchResponse, ScramCredential,
};
use tailstream_wire::{Decode, Opcode, Status};

/// Users' credentials as this coordinator's metadata holds them; decoys (from the cluster's
/// secret, as brokers are given) for a name that is no user's.
#[derive(Debug)]
pub struct MetadataCredentials(pub CoordinatorService);

impl CredentialSource for MetadataCredentials {
    fn credentials<'a>(
        &'a self,
        user: &'a str,
    ) -> BoxFuture<'a, Result<Arc<Vec<ScramCredential>>, String>> {
        let (credentials, _known) = self.0.credentials_or_decoys(user);
        futures::future::ready(Ok(Arc::new(credentials))).boxed()
    }
}

/// Whether the user may do `operation` on `resource` `name`: refused with `Forbidden` if not.
fn allowed(
    access: &Access,
    operation: AclOperation,
    resource: AclResource,
    name: &str,
) -> Result<(), Response> {
    if access.allows(operation, resource, name) {
        return Ok(());
    }
    Err(Response::error(
        Status::Forbidden,
        format!(
            "not authorized: no access control rule allows {} on {} {name:?} (tailstream acl add)",
            operation.name(),
            resource.name()
        ),
    ))
}

impl CoordinatorService {
    /// What the client listener's `request` may do: everything where authentication is off or
    /// for a super user; what the rules give its user otherwise.
    pub(super) fn client_access(&self, request: &Request) -> Access {
        if !self.settings.client_authentication {
            return Access::Everything;
        }
        // What every authenticated client may do, checked against nothing: no rules copied.
        if matches!(
            request.opcode,
            Opcode::Ping | Opcode::ListBrokers | Opcode::DescribeLeadership
        ) {
            return Access::Everything;
        }
        let Some(user) = request.session.user() else {
            // Only what may come before authenticating gets here, and checks its own token.
            return Access::Everything;
        };
        if self.settings.super_users.iter().any(|s| s == user) {
            return Access::Everything;
        }
        let rules = self.core.lock().metadata.list_acls();
        Access::Rules(rules_of(&rules, user))
    }

    /// Refuses `request` (on the client listener) if its user may not make it.
    pub(super) fn authorize_client(
        &self,
        access: &Access,
        request: &Request,
    ) -> Result<(), Response> {
        if matches!(access, Access::Everything) {
            return Ok(());
        }
        let body = || request.body.clone();
        let group = |group: &str| allowed(access, AclOperation::Read, AclResource::Group, group);
        let stream = |operation, name: &str| allowed(access, operation, AclResource::Topic, name);
        let cluster = |operation| allowed(access, operation, AclResource::Cluster, CLUSTER);
        match request.opcode {
            Opcode::AllocateProducerId if !access.may_write_idempotently() => {
                cluster(AclOperation::IdempotentWrite)
            }
            Opcode::CreateStream => {
                let request: CreateStreamRequest = decode(body())?;
                if access.may_create_topic(&request.name) {
                    Ok(())
                } else {
                    stream(AclOperation::Create, &request.name)
                }
            }
            Opcode::DescribeStream => {
                let request: DescribeStreamRequest = decode(body())?;
                stream(AclOperation::Describe, &request.name)
            }
            Opcode::DeleteStream => {
                let request: DeleteStreamRequest = decode(body())?;
                stream(AclOperation::Delete, &request.name)
            }
            // Kafka's CreatePartitions needs Alter on the topic.
            Opcode::AddStreamlets => {
                let request: AddStreamletsRequest = decode(body())?;
                stream(AclOperation::Alter, &request.name)
            }
            // Kafka's AlterConfigs on a topic; Tailstream's rules have Alter for both.
            Opcode::AlterRetention => {
                let request: AlterRetentionRequest = decode(body())?;
                stream(AclOperation::Alter, &request.name)
            }
            // Kafka's DeleteRecords needs Delete on the topic.
            Opcode::DeleteRecords => {
                let request: DeleteRecordsRequest = decode(body())?;
                stream(AclOperation::Delete, &request.name)
            }
            Opcode::GroupJoin => group(&decode::<GroupJoinRequest>(body())?.group),
            Opcode::GroupSync => group(&decode::<GroupSyncRequest>(body())?.group),
            Opcode::GroupHeartbeat => group(&decode::<GroupHeartbeatRequest>(body())?.group),
            Opcode::GroupLeave => group(&decode::<GroupLeaveRequest>(body())?.group),
            Opcode::OffsetFetch => group(&decode::<OffsetFetchRequest>(body())?.group),
            Opcode::DeleteGroups => decode::<DeleteGroupsRequest>(body())?
                .groups
                .iter()
                .try_for_each(|name| {
                    allowed(access, AclOperation::Delete, AclResource::Group, name)
                }),
            Opcode::OffsetDelete => {
                let request: OffsetDeleteRequest = decode(body())?;
                allowed(
                    access,
                    AclOperation::Delete,
                    AclResource::Group,
                    &request.group,
                )?;
                request
                    .partitions
                    .iter()
                    .try_for_each(|p| stream(AclOperation::Read, &p.topic))
            }
            Opcode::OffsetCommit => {
                let request: OffsetCommitRequest = decode(body())?;
                group(&request.group)?;
                request
                    .offsets
                    .iter()
                    .try_for_each(|offset| stream(AclOperation::Read, &offset.topic))
            }
            Opcode::ListRecoveries | Opcode::DescribeConsumerGroups | Opcode::DescribeGroups => {
                cluster(AclOperation::Describe)
            }
            // Every stream is checked as it is listed; brokers and the leadership are what any
            // authenticated client needs to find its way.
            _ => Ok(()),
        }
    }

    /// A group's committed offsets (`answer`) cut to the streams `access` may describe: the
    /// group's read right does not show streams the user may not see.
    pub(super) fn visible_offsets(&self, access: &Access, answer: Response) -> Response {
        if matches!(access, Access::Everything) || !answer.status.is_ok() {
            return answer;
        }
        let Some(body) = answer.parts.first().cloned() else {
            return answer;
        };
        match OffsetFetchResponse::decode_exact(body) {
            Ok(mut offsets) => {
                offsets
                    .offsets
                    .retain(|o| access.topic(AclOperation::Describe, &o.topic));
                Response::ok(&offsets)
            }
            // Our own answer, encoded a moment ago: not expected; shown to nobody.
            Err(error) => Response::error(Status::Internal, format!("offsets: {error}")),
        }
    }

    /// `streams` cut to those `access` may describe.
    pub(super) fn visible_streams(
        &self,
        access: &Access,
        mut streams: ListStreamsResponse,
    ) -> ListStreamsResponse {
        if !matches!(access, Access::Everything) {
            streams
                .streams
                .retain(|s| access.topic(AclOperation::Describe, &s.name));
        }
        streams
    }
}

/// The opcodes a client may send before it authenticated: those that carry the admin token.
pub(super) fn carries_its_own_credential(opcode: Opcode) -> bool {
    matches!(
        opcode,
        Opcode::CreateUser
            | Opcode::DeleteUser
            | Opcode::ListUsers
            | Opcode::AddAcl
            | Opcode::RemoveAcl
            | Opcode::ListAcls
    )
}
