//! The client's view of the cluster: the coordinator connection, a cache of stream metadata,
//! and one pooled connection per broker.

use crate::error::ClientError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailstream_config::ClientConfig;
use tailstream_net::{RpcClient, RpcClientConfig, RpcError, RpcPool};
use tailstream_wire::messages::{
    AllocateProducerIdRequest, AllocateProducerIdResponse, BrokerInfo, CreateStreamRequest,
    DeleteStreamRequest, DescribeConsumerGroupsResponse, DescribeStreamRequest, Empty,
    GroupHeartbeatRequest, GroupJoinRequest, GroupJoinResponse, GroupLeaveRequest,
    GroupSyncRequest, GroupSyncResponse, ListBrokersResponse, ListGroupsRequest,
    ListGroupsResponse, ListRecoveriesResponse, ListStreamsResponse, OffsetCommitRequest,
    OffsetFetchRequest, OffsetFetchResponse, ProducerSession, RecoverySummary, StreamConfig,
    StreamMetadata,
};
use tailstream_wire::{Decode, Encode, Opcode, ProducerId, Status, StreamletId};

/// How long control calls keep retrying a coordinator that is restarting or has no brokers.
const CONTROL_RETRY_MS_MAX: u64 = 10_000;

/// The lower-level handle a [`crate::Client`] wraps: one call per coordinator RPC, a cache of
/// stream metadata and a pool of broker connections. Front ends (the Kafka listener) and tools
/// use it directly; applications use [`crate::Client`].
#[derive(Debug)]
pub struct Cluster {
    coordinator_addr: String,
    pool: RpcPool,
    streams: Mutex<HashMap<String, Arc<StreamMetadata>>>,
}

impl Cluster {
    /// A client of the cluster whose coordinator listens at `coordinator_addr`. Connects
    /// lazily; the first call reports an unreachable coordinator.
    pub fn new(
        coordinator_addr: &str,
        config: &ClientConfig,
        request_timeout_ms: u64,
    ) -> Arc<Self> {
        let rpc = RpcClientConfig {
            requests_in_flight_max: config.requests_in_flight_max as usize,
            frame_body_bytes_max: config.frame_body_bytes_max,
            connect_timeout_ms: config.connect_timeout_ms,
            request_timeout_ms,
            // Clients reconnect when a broker closes an idle connection (after its GoAway).
            keepalive_ms: 0,
        };
        Arc::new(Self {
            coordinator_addr: coordinator_addr.to_string(),
            pool: RpcPool::new(rpc),
            streams: Mutex::new(HashMap::new()),
        })
    }

    /// The coordinator's address, as given.
    pub fn coordinator_addr(&self) -> &str {
        &self.coordinator_addr
    }

    /// Opens the coordinator connection now (once), so an unreachable coordinator is reported
    /// at start-up rather than by the first call.
    pub async fn connect_coordinator(&self) -> Result<(), ClientError> {
        self.pool.get(&self.coordinator_addr).await?;
        Ok(())
    }

    /// A connection to the broker at `addr`.
    pub async fn broker(&self, addr: &str) -> Result<RpcClient, RpcError> {
        self.pool.get(addr).await
    }

    /// Calls the coordinator, retrying (bounded) while it is unreachable or has no brokers.
    async fn control<Req: Encode, Resp: Decode>(
        &self,
        opcode: Opcode,
        request: &Req,
    ) -> Result<Resp, ClientError> {
        let mut waited_ms = 0;
        let mut backoff_ms = 50;
        loop {
            let result = match self.pool.get(&self.coordinator_addr).await {
                Ok(client) => client.call(opcode, request).await,
                Err(error) => Err(error),
            };
            match result {
                Ok(response) => return Ok(response),
                Err(error) => {
                    let retry = error.is_transport() || error.status() == Some(Status::NoBrokers);
                    if !retry || waited_ms >= CONTROL_RETRY_MS_MAX {
                        return Err(error.into());
                    }
                    if error.is_transport() {
                        self.pool.forget(&self.coordinator_addr);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
            waited_ms += backoff_ms;
            backoff_ms = (backoff_ms * 2).min(1000);
        }
    }

    /// Creates a stream (the coordinator places its streamlets) and caches its metadata.
    pub async fn create_stream(
        &self,
        name: &str,
        streamlets: u32,
        config: StreamConfig,
    ) -> Result<Arc<StreamMetadata>, ClientError> {
        let request = CreateStreamRequest {
            name: name.to_string(),
            streamlets,
            config,
        };
        let metadata: StreamMetadata = self.control(Opcode::CreateStream, &request).await?;
        self.cache(metadata)
    }

    /// Checks metadata from the coordinator (its settings size our allocations and index
    /// arithmetic) and caches it.
    fn cache(&self, metadata: StreamMetadata) -> Result<Arc<StreamMetadata>, ClientError> {
        let invalid = |why: String| {
            ClientError::InvalidAnswer(format!("metadata of stream {:?}: {why}", metadata.name))
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

    /// Deletes a stream: its owners and backups drop its data. Producers and consumers of it
    /// fail from then on.
    pub async fn delete_stream(&self, name: &str) -> Result<(), ClientError> {
        let request = DeleteStreamRequest {
            name: name.to_string(),
        };
        let _: Empty = self.control(Opcode::DeleteStream, &request).await?;
        if let Ok(mut streams) = self.streams.lock() {
            streams.remove(name);
        }
        Ok(())
    }

    /// The most recent recoveries and their phase times.
    pub async fn list_recoveries(&self) -> Result<Vec<RecoverySummary>, ClientError> {
        let response: ListRecoveriesResponse =
            self.control(Opcode::ListRecoveries, &Empty {}).await?;
        Ok(response.recoveries)
    }

    /// The stream's metadata, from the cache when present.
    pub async fn stream(&self, name: &str) -> Result<Arc<StreamMetadata>, ClientError> {
        let cached = self.streams.lock().ok().and_then(|s| s.get(name).cloned());
        match cached {
            Some(metadata) => Ok(metadata),
            None => self.refresh_stream(name).await,
        }
    }

    /// The stream's metadata, fetched from the coordinator now.
    pub async fn refresh_stream(&self, name: &str) -> Result<Arc<StreamMetadata>, ClientError> {
        let request = DescribeStreamRequest {
            name: name.to_string(),
        };
        match self
            .control::<_, StreamMetadata>(Opcode::DescribeStream, &request)
            .await
        {
            Ok(metadata) => self.cache(metadata),
            Err(error) if error.status() == Some(Status::UnknownStream) => {
                Err(ClientError::UnknownStream(name.to_string()))
            }
            Err(error) => Err(error),
        }
    }

    /// Every stream's metadata.
    pub async fn list_streams(&self) -> Result<Vec<StreamMetadata>, ClientError> {
        let response: ListStreamsResponse = self.control(Opcode::ListStreams, &Empty {}).await?;
        Ok(response.streams)
    }

    /// Every broker the coordinator knows, alive or not.
    pub async fn list_brokers(&self) -> Result<Vec<BrokerInfo>, ClientError> {
        let response: ListBrokersResponse = self.control(Opcode::ListBrokers, &Empty {}).await?;
        Ok(response.brokers)
    }

    /// Joins (or rejoins) a consumer group: answered once the group's rebalance completes.
    pub async fn join_group(
        &self,
        request: &GroupJoinRequest,
    ) -> Result<GroupJoinResponse, ClientError> {
        self.control(Opcode::GroupJoin, request).await
    }

    /// Brings (the leader) or gets (every member) the assignments of a generation.
    pub async fn sync_group(
        &self,
        request: &GroupSyncRequest,
    ) -> Result<GroupSyncResponse, ClientError> {
        self.control(Opcode::GroupSync, request).await
    }

    /// Tells a group's coordinator this member is alive; refused when the group rebalances.
    pub async fn heartbeat_group(
        &self,
        request: &GroupHeartbeatRequest,
    ) -> Result<(), ClientError> {
        let _: Empty = self.control(Opcode::GroupHeartbeat, request).await?;
        Ok(())
    }

    /// Removes members from a group (it rebalances at once).
    pub async fn leave_group(&self, request: &GroupLeaveRequest) -> Result<(), ClientError> {
        let _: Empty = self.control(Opcode::GroupLeave, request).await?;
        Ok(())
    }

    /// Commits a group's offsets; `Ok` once they are on the coordinator's disk.
    pub async fn commit_offsets(&self, request: &OffsetCommitRequest) -> Result<(), ClientError> {
        let _: Empty = self.control(Opcode::OffsetCommit, request).await?;
        Ok(())
    }

    /// Every consumer group with members, and the lag of every partition a group committed.
    pub async fn describe_consumer_groups(
        &self,
    ) -> Result<DescribeConsumerGroupsResponse, ClientError> {
        self.control(Opcode::DescribeConsumerGroups, &Empty {})
            .await
    }

    /// A group's committed offsets.
    pub async fn fetch_offsets(
        &self,
        request: &OffsetFetchRequest,
    ) -> Result<OffsetFetchResponse, ClientError> {
        self.control(Opcode::OffsetFetch, request).await
    }

    /// The live groups and segments of every log of one streamlet, with each log's appended
    /// and committed offsets, from the streamlet's owner (what `stream describe` shows).
    pub async fn describe_logs(
        &self,
        metadata: &StreamMetadata,
        streamlet: StreamletId,
    ) -> Result<ListGroupsResponse, ClientError> {
        let placement = metadata
            .streamlets
            .get(streamlet.0 as usize)
            .ok_or_else(|| ClientError::Config(format!("no {streamlet} in metadata")))?;
        let client = self.broker(&placement.owner_addr).await?;
        let request = ListGroupsRequest {
            stream: metadata.id,
            streamlet,
            epoch: placement.epoch,
        };
        Ok(client.call(Opcode::ListGroups, &request).await?)
    }

    /// A producer id no other producer of the cluster has (at epoch 0).
    pub async fn allocate_producer_id(&self) -> Result<ProducerId, ClientError> {
        Ok(self.init_producer(None).await?.producer_id)
    }

    /// A producer session: with `previous` (a session the coordinator issued), the same id at
    /// the next epoch, which fences every batch of the older ones; else (or when that id's
    /// epochs are used up) a fresh id at epoch 0.
    pub async fn init_producer(
        &self,
        previous: Option<ProducerSession>,
    ) -> Result<ProducerSession, ClientError> {
        let request = AllocateProducerIdRequest { previous };
        let response: AllocateProducerIdResponse =
            self.control(Opcode::AllocateProducerId, &request).await?;
        Ok(ProducerSession {
            producer_id: response.producer_id,
            producer_epoch: response.producer_epoch,
        })
    }
}
