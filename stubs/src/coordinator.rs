//! [`CoordinatorClient`]: what clients and front ends ask the coordinator (streams, groups,
//! producer ids, brokers, recoveries), with a cache of stream metadata. Calls retry (bounded)
//! while the coordinator is unreachable or has no brokers yet, so a restarting coordinator
//! costs a caller a wait, not an error.

use crate::addresses::CoordinatorAddresses;
use crate::error::StubError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailstream_config::ClientConfig;
use tailstream_net::{RpcClientConfig, RpcPool};
use tailstream_wire::messages::{
    AclChangeRequest, AclRule, AddStreamletsRequest, AllocateProducerIdRequest,
    AllocateProducerIdResponse, AlterRetentionRequest, BrokerInfo, CreateStreamRequest,
    CreateUserRequest, DeleteGroupsRequest, DeleteGroupsResponse, DeleteRecordsRequest,
    DeleteStreamRequest, DeleteUserRequest, DescribeConsumerGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, DescribeLeadershipResponse, DescribeStreamRequest, Empty,
    GroupHeartbeatRequest, GroupJoinRequest, GroupJoinResponse, GroupLeaveRequest, GroupRemoval,
    GroupSyncRequest, GroupSyncResponse, ListAclsResponse, ListBrokersResponse,
    ListRecoveriesResponse, ListStreamsResponse, ListUsersResponse, LogStart,
    LookupCredentialsRequest, LookupCredentialsResponse, OffsetCommitRequest, OffsetDeleteRequest,
    OffsetFetchRequest, OffsetFetchResponse, ProducerIdBindingKeyResponse, ProducerSession,
    RecoverySummary, ScramCredential, SecurityListRequest, StreamConfig, StreamMetadata,
    UserSummary,
};
use tailstream_wire::{Decode, Encode, Opcode, OwnershipEpoch, Status, StreamletId};

/// How long calls keep retrying a coordinator that is restarting or has no brokers.
const CONTROL_RETRY_MS_MAX: u64 = 10_000;
/// The longest pause between attempts while looking for the leading coordinator.
const LEADER_SEARCH_BACKOFF_MS_MAX: u64 = 100;

/// The connection settings of a client's calls (clients, tools, the Kafka front end), each
/// answered within `request_timeout_ms`.
pub fn client_rpc_config(config: &ClientConfig, request_timeout_ms: u64) -> RpcClientConfig {
    RpcClientConfig {
        requests_in_flight_max: config.requests_in_flight_max as usize,
        frame_body_bytes_max: config.frame_body_bytes_max,
        connect_timeout_ms: config.connect_timeout_ms,
        request_timeout_ms,
        // Clients reconnect when a server closes an idle connection (after its GoAway).
        keepalive_ms: 0,
    }
}

/// The coordinator's client-facing operations (its `rpc_addr` listener).
#[derive(Debug)]
pub struct CoordinatorClient {
    addrs: CoordinatorAddresses,
    pool: RpcPool,
    streams: Mutex<HashMap<String, Arc<StreamMetadata>>>,
}

impl CoordinatorClient {
    /// A client of the coordinator at `addr`, or of whichever of several ("a,b,c") leads.
    /// Connects lazily; the first call reports an unreachable coordinator.
    pub fn new(addr: &str, config: RpcClientConfig) -> Arc<Self> {
        Arc::new(Self {
            addrs: CoordinatorAddresses::parse(addr),
            pool: RpcPool::new(config),
            streams: Mutex::new(HashMap::new()),
        })
    }

    /// The coordinator's address (or addresses), as given.
    pub fn addr(&self) -> String {
        self.addrs.to_string()
    }

    /// Opens a connection now, to the first coordinator that takes it, so an unreachable
    /// coordinator is reported at start-up rather than by the first call.
    pub async fn connect(&self) -> Result<(), StubError> {
        let mut last = None;
        for _ in 0..self.addrs.len().max(1) {
            let addr = self.addrs.current();
            match self.pool.get(&addr).await {
                Ok(_) => return Ok(()),
                Err(error) => {
                    self.addrs.unanswered(&addr);
                    last = Some(error);
                }
            }
        }
        Err(last.map_or_else(
            || StubError::Fatal("no coordinator address".into()),
            Into::into,
        ))
    }

    /// Calls the coordinator, retrying (bounded) while it is unreachable or has no brokers.
    async fn call<Req: Encode, Resp: Decode>(
        &self,
        opcode: Opcode,
        request: &Req,
    ) -> Result<Resp, StubError> {
        let mut waited_ms = 0;
        let mut backoff_ms = 50;
        let mut redirected = false;
        loop {
            let addr = self.addrs.current();
            let result = match self.pool.get(&addr).await {
                Ok(client) => client.call(opcode, request).await,
                Err(error) => Err(error),
            };
            let error = match result {
                Ok(response) => return Ok(response),
                Err(error) => StubError::from(error),
            };
            let retry =
                error.wants_another_coordinator() || error.status() == Some(Status::NoBrokers);
            if !retry || waited_ms >= CONTROL_RETRY_MS_MAX {
                return Err(error);
            }
            if error.wants_another_coordinator() {
                // A dead, standby or deposed coordinator: the next attempt asks the next one
                // (or the leader a standby named).
                self.pool.forget(&addr);
                self.addrs.after_error(&addr, &error);
            }
            // A standby named the leader: asked at once, once in a row (two standbys that
            // name each other do not make a loop without pauses).
            let named = error.leader_named().is_some();
            if named && !std::mem::replace(&mut redirected, true) {
                continue;
            }
            redirected &= named;
            let backoff_ms_max = if error.wants_another_coordinator() {
                // Looking for the leader stays brisk (a refused connection costs nothing):
                // a pause grown to a second while no coordinator led would be waited out
                // after a new one began to, a second of unavailability of its own.
                LEADER_SEARCH_BACKOFF_MS_MAX
            } else {
                1000
            };
            tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
            waited_ms += backoff_ms;
            backoff_ms = (backoff_ms * 2).min(backoff_ms_max);
        }
    }

    /// Creates a stream (the coordinator places its streamlets) and caches its metadata.
    pub async fn create_stream(
        &self,
        name: &str,
        streamlets: u32,
        config: StreamConfig,
    ) -> Result<Arc<StreamMetadata>, StubError> {
        let request = CreateStreamRequest {
            name: name.to_string(),
            streamlets,
            config,
        };
        let metadata: StreamMetadata = self.call(Opcode::CreateStream, &request).await?;
        self.cache(metadata)
    }

    /// Grows a stream to `streamlets` streamlets (the same count again changes nothing, so a
    /// retry is harmless) and caches its metadata.
    pub async fn add_streamlets(
        &self,
        name: &str,
        streamlets: u32,
    ) -> Result<Arc<StreamMetadata>, StubError> {
        let request = AddStreamletsRequest {
            name: name.to_string(),
            streamlets,
        };
        let metadata: StreamMetadata = self.call(Opcode::AddStreamlets, &request).await?;
        self.cache(metadata)
    }

    /// Sets a stream's retention limits (`None` leaves one as it is, 0 is none; the same
    /// again changes nothing, so a retry is harmless) and caches its metadata.
    pub async fn alter_retention(
        &self,
        name: &str,
        retention_ms: Option<u64>,
        retention_bytes: Option<u64>,
    ) -> Result<Arc<StreamMetadata>, StubError> {
        let request = AlterRetentionRequest {
            name: name.to_string(),
            retention_ms,
            retention_bytes,
        };
        let metadata: StreamMetadata = self.call(Opcode::AlterRetention, &request).await?;
        self.cache(metadata)
    }

    /// Deletes the records of `streamlet`'s logs before the offsets of `starts` (Kafka's
    /// DeleteRecords), checked against its logs under ownership `epoch` (refused if it moved
    /// since): durable once answered; a start at or before the kept one changes nothing, so a
    /// retry is harmless.
    pub async fn delete_records(
        &self,
        stream: &StreamMetadata,
        streamlet: StreamletId,
        epoch: OwnershipEpoch,
        starts: Vec<LogStart>,
    ) -> Result<(), StubError> {
        let request = DeleteRecordsRequest {
            name: stream.name.clone(),
            stream: stream.id,
            streamlet,
            epoch,
            starts,
        };
        let _: Empty = self.call(Opcode::DeleteRecords, &request).await?;
        Ok(())
    }

    /// Checks metadata from the coordinator (its settings size callers' allocations and index
    /// arithmetic) and caches it.
    fn cache(&self, metadata: StreamMetadata) -> Result<Arc<StreamMetadata>, StubError> {
        let invalid = |why: String| {
            StubError::Fatal(format!(
                "invalid metadata of stream {:?} from the coordinator: {why}",
                metadata.name
            ))
        };
        tailstream_config::validate_stream_config(&metadata.config).map_err(invalid)?;
        let streamlets = metadata.streamlets.len();
        if streamlets == 0 || streamlets > tailstream_config::STREAMLETS_MAX as usize {
            return Err(invalid(format!("{streamlets} streamlets")));
        }
        let metadata = Arc::new(metadata);
        if let Ok(mut streams) = self.streams.lock() {
            streams.insert(metadata.name.clone(), metadata.clone());
        }
        Ok(metadata)
    }

    /// Deletes a stream: its owners and backups drop its data.
    pub async fn delete_stream(&self, name: &str) -> Result<(), StubError> {
        let request = DeleteStreamRequest {
            name: name.to_string(),
        };
        let _: Empty = self.call(Opcode::DeleteStream, &request).await?;
        if let Ok(mut streams) = self.streams.lock() {
            streams.remove(name);
        }
        Ok(())
    }

    /// Adds a user with its credentials (derived by the caller: no password is sent).
    /// `admin_token`: the cluster's, where the coordinator requires one (else empty).
    pub async fn create_user(
        &self,
        admin_token: &str,
        name: &str,
        credentials: Vec<ScramCredential>,
    ) -> Result<(), StubError> {
        let request = CreateUserRequest {
            admin_token: admin_token.to_owned(),
            name: name.to_owned(),
            credentials,
        };
        let _: Empty = self.call(Opcode::CreateUser, &request).await?;
        Ok(())
    }

    pub async fn delete_user(&self, admin_token: &str, name: &str) -> Result<(), StubError> {
        let request = DeleteUserRequest {
            admin_token: admin_token.to_owned(),
            name: name.to_owned(),
        };
        let _: Empty = self.call(Opcode::DeleteUser, &request).await?;
        Ok(())
    }

    pub async fn list_users(&self, admin_token: &str) -> Result<Vec<UserSummary>, StubError> {
        let request = SecurityListRequest {
            admin_token: admin_token.to_owned(),
        };
        let response: ListUsersResponse = self.call(Opcode::ListUsers, &request).await?;
        Ok(response.users)
    }

    /// A user's credentials, or decoys for a user that does not exist (brokers only: the
    /// coordinator answers this on its peer listener).
    pub async fn lookup_credentials(
        &self,
        name: &str,
    ) -> Result<LookupCredentialsResponse, StubError> {
        let request = LookupCredentialsRequest {
            name: name.to_owned(),
        };
        self.call(Opcode::LookupCredentials, &request).await
    }

    /// The cluster's producer id binding key (brokers only: answered on the coordinator's peer
    /// listener).
    pub async fn producer_id_binding_key(&self) -> Result<Vec<u8>, StubError> {
        let response: ProducerIdBindingKeyResponse =
            self.call(Opcode::ProducerIdBindingKey, &Empty {}).await?;
        Ok(response.key.to_vec())
    }

    /// Adds (`add`) or removes an access control rule.
    pub async fn change_acl(
        &self,
        admin_token: &str,
        rule: AclRule,
        add: bool,
    ) -> Result<(), StubError> {
        let opcode = if add {
            Opcode::AddAcl
        } else {
            Opcode::RemoveAcl
        };
        let request = AclChangeRequest {
            admin_token: admin_token.to_owned(),
            rule,
        };
        let _: Empty = self.call(opcode, &request).await?;
        Ok(())
    }

    pub async fn list_acls(&self, admin_token: &str) -> Result<Vec<AclRule>, StubError> {
        let request = SecurityListRequest {
            admin_token: admin_token.to_owned(),
        };
        let response: ListAclsResponse = self.call(Opcode::ListAcls, &request).await?;
        Ok(response.rules)
    }

    /// The most recent recoveries and their phase times.
    pub async fn list_recoveries(&self) -> Result<Vec<RecoverySummary>, StubError> {
        let response: ListRecoveriesResponse = self.call(Opcode::ListRecoveries, &Empty {}).await?;
        Ok(response.recoveries)
    }

    /// The stream's metadata, from the cache when present.
    pub async fn stream(&self, name: &str) -> Result<Arc<StreamMetadata>, StubError> {
        let cached = self.streams.lock().ok().and_then(|s| s.get(name).cloned());
        match cached {
            Some(metadata) => Ok(metadata),
            None => self.refresh_stream(name).await,
        }
    }

    /// The stream's metadata, fetched now. No such stream: refused with `UnknownStream`.
    pub async fn refresh_stream(&self, name: &str) -> Result<Arc<StreamMetadata>, StubError> {
        let request = DescribeStreamRequest {
            name: name.to_string(),
        };
        let metadata: StreamMetadata = self.call(Opcode::DescribeStream, &request).await?;
        self.cache(metadata)
    }

    /// Every stream's metadata.
    pub async fn list_streams(&self) -> Result<Vec<StreamMetadata>, StubError> {
        let response: ListStreamsResponse = self.call(Opcode::ListStreams, &Empty {}).await?;
        Ok(response.streams)
    }

    /// Who leads, in which term, and who stands by.
    pub async fn describe_leadership(&self) -> Result<DescribeLeadershipResponse, StubError> {
        self.call(Opcode::DescribeLeadership, &Empty {}).await
    }

    /// Every broker the coordinator knows, alive or not.
    pub async fn list_brokers(&self) -> Result<Vec<BrokerInfo>, StubError> {
        let response: ListBrokersResponse = self.call(Opcode::ListBrokers, &Empty {}).await?;
        Ok(response.brokers)
    }

    /// Joins (or rejoins) a consumer group: answered once the group's rebalance completes.
    pub async fn join_group(
        &self,
        request: &GroupJoinRequest,
    ) -> Result<GroupJoinResponse, StubError> {
        self.call(Opcode::GroupJoin, request).await
    }

    /// Brings (the leader) or gets (every member) the assignments of a generation.
    pub async fn sync_group(
        &self,
        request: &GroupSyncRequest,
    ) -> Result<GroupSyncResponse, StubError> {
        self.call(Opcode::GroupSync, request).await
    }

    /// Tells a group's coordinator this member is alive; refused when the group rebalances.
    pub async fn heartbeat_group(&self, request: &GroupHeartbeatRequest) -> Result<(), StubError> {
        let _: Empty = self.call(Opcode::GroupHeartbeat, request).await?;
        Ok(())
    }

    /// Removes members from a group (it rebalances at once).
    pub async fn leave_group(&self, request: &GroupLeaveRequest) -> Result<(), StubError> {
        let _: Empty = self.call(Opcode::GroupLeave, request).await?;
        Ok(())
    }

    /// Commits a group's offsets; `Ok` once they are on the coordinator's disk.
    pub async fn commit_offsets(&self, request: &OffsetCommitRequest) -> Result<(), StubError> {
        let _: Empty = self.call(Opcode::OffsetCommit, request).await?;
        Ok(())
    }

    /// Every consumer group with members, and the lag of every partition a group committed.
    pub async fn describe_consumer_groups(
        &self,
    ) -> Result<DescribeConsumerGroupsResponse, StubError> {
        self.call(Opcode::DescribeConsumerGroups, &Empty {}).await
    }

    /// The named groups with their members, or (none named) every group's phase.
    pub async fn describe_groups(
        &self,
        groups: Vec<String>,
    ) -> Result<DescribeGroupsResponse, StubError> {
        self.call(Opcode::DescribeGroups, &DescribeGroupsRequest { groups })
            .await
    }

    /// Removes the named groups' committed offsets (each must have no members).
    pub async fn delete_groups(
        &self,
        groups: Vec<String>,
    ) -> Result<DeleteGroupsResponse, StubError> {
        self.call(Opcode::DeleteGroups, &DeleteGroupsRequest { groups })
            .await
    }

    /// Removes some committed offsets of a group without members.
    pub async fn delete_offsets(
        &self,
        request: &OffsetDeleteRequest,
    ) -> Result<GroupRemoval, StubError> {
        self.call(Opcode::OffsetDelete, request).await
    }

    /// A group's committed offsets.
    pub async fn fetch_offsets(
        &self,
        request: &OffsetFetchRequest,
    ) -> Result<OffsetFetchResponse, StubError> {
        self.call(Opcode::OffsetFetch, request).await
    }

    /// A producer id no other producer of the cluster has (at epoch 0).
    pub async fn allocate_producer_id(&self) -> Result<tailstream_wire::ProducerId, StubError> {
        Ok(self.init_producer(None, None).await?.producer_id)
    }

    /// A producer session: with `previous` (a session the coordinator issued to the same
    /// user), the same id at the next epoch, which fences every batch of the older ones; else
    /// (or when that id's epochs are used up) a fresh id at epoch 0. The id is bound to this
    /// connection's user; a broker asking for its Kafka client names that client's user as
    /// `owner` (honoured on the coordinator's peer listener only).
    pub async fn init_producer(
        &self,
        previous: Option<ProducerSession>,
        owner: Option<String>,
    ) -> Result<ProducerSession, StubError> {
        let request = AllocateProducerIdRequest { previous, owner };
        let response: AllocateProducerIdResponse =
            self.call(Opcode::AllocateProducerId, &request).await?;
        Ok(ProducerSession {
            producer_id: response.producer_id,
            producer_epoch: response.producer_epoch,
        })
    }
}
