//! The client's view of the cluster: the coordinator stub (with its cache of stream metadata)
//! and one pooled connection per broker. Crate-private: applications use [`crate::Client`],
//! tools and front ends the coordinator stub itself (`tailstream_stubs::CoordinatorClient`).

use crate::error::ClientError;
use std::sync::Arc;
use tailstream_config::ClientConfig;
use tailstream_net::{RpcClient, RpcError, RpcPool};
use tailstream_stubs::CoordinatorClient;
use tailstream_stubs::coordinator::client_rpc_config;
use tailstream_wire::messages::{ListGroupsRequest, ListGroupsResponse, StreamMetadata};
use tailstream_wire::{Opcode, Status, StreamletId};

#[derive(Debug)]
pub(crate) struct Cluster {
    coordinator: Arc<CoordinatorClient>,
    brokers: RpcPool,
}

impl Cluster {
    /// A client of the cluster whose coordinator listens at `coordinator_addr`. Connects
    /// lazily; the first call reports an unreachable coordinator.
    pub(crate) fn new(
        coordinator_addr: &str,
        config: &ClientConfig,
        request_timeout_ms: u64,
    ) -> Arc<Self> {
        let rpc = client_rpc_config(config, request_timeout_ms);
        Arc::new(Self {
            coordinator: CoordinatorClient::new(coordinator_addr, rpc),
            brokers: RpcPool::new(rpc),
        })
    }

    /// The coordinator stub.
    pub(crate) fn coordinator(&self) -> &Arc<CoordinatorClient> {
        &self.coordinator
    }

    /// A connection to the broker at `addr`.
    pub(crate) async fn broker(&self, addr: &str) -> Result<RpcClient, RpcError> {
        self.brokers.get(addr).await
    }

    /// The stream's metadata, from the cache when present.
    pub(crate) async fn stream(&self, name: &str) -> Result<Arc<StreamMetadata>, ClientError> {
        self.coordinator
            .stream(name)
            .await
            .map_err(|error| unknown_stream(name, error.into()))
    }

    /// The stream's metadata, fetched from the coordinator now.
    pub(crate) async fn refresh_stream(
        &self,
        name: &str,
    ) -> Result<Arc<StreamMetadata>, ClientError> {
        self.coordinator
            .refresh_stream(name)
            .await
            .map_err(|error| unknown_stream(name, error.into()))
    }

    /// The live groups and segments of every log of one streamlet, with each log's appended
    /// and committed offsets, from the streamlet's owner (what `stream describe` shows).
    pub(crate) async fn describe_logs(
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
}

/// A refusal for a stream that does not exist, as the error that names it.
fn unknown_stream(name: &str, error: ClientError) -> ClientError {
    if error.status() == Some(Status::UnknownStream) {
        ClientError::UnknownStream(name.to_string())
    } else {
        error
    }
}
