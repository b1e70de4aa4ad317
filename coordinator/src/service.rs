//! The coordinator's RPC service.
//!
//! Every change is applied to a copy of the metadata, saved to disk, and only then made the
//! live state and answered: a change the client saw acknowledged survives a coordinator
//! crash, and a failed save changes nothing. After creating a stream the coordinator pushes
//! each owning broker its new assignment and waits (bounded) for them, so a client that
//! produces right after `create stream` finds its streamlets in place; a broker it could not
//! reach catches up through its next heartbeat.

use crate::liveness::Liveness;
use crate::metadata::{Metadata, MetadataError};
use crate::persist::MetadataFile;
use bytes::Bytes;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tailstream_net::{Reply, Request, Response, RpcPool, Service};
use tailstream_wire::messages::{
    AllocateProducerIdResponse, BrokerHeartbeatRequest, BrokerHeartbeatResponse,
    CreateStreamRequest, DescribeStreamRequest, Empty, ListBrokersResponse, ListStreamsResponse,
    RegisterBrokerRequest, RegisterBrokerResponse,
};
use tailstream_wire::{Decode, Opcode, ServerId, Status};

#[derive(Debug)]
struct State {
    metadata: Metadata,
    liveness: Liveness,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    file: MetadataFile,
    pool: RpcPool,
    assign_timeout: Duration,
}

#[derive(Clone, Debug)]
pub struct CoordinatorService {
    inner: Arc<Inner>,
}

fn refuse(error: MetadataError) -> Response {
    Response::error(error.status(), error.to_string())
}

fn decode<T: Decode>(body: Bytes) -> Result<T, Response> {
    T::decode_exact(body).map_err(|e| Response::error(Status::Malformed, e.to_string()))
}

impl CoordinatorService {
    pub fn new(
        metadata: Metadata,
        file: MetadataFile,
        pool: RpcPool,
        liveness_timeout: Duration,
        assign_timeout: Duration,
    ) -> Self {
        let state = State {
            metadata,
            liveness: Liveness::new(liveness_timeout),
        };
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                file,
                pool,
                assign_timeout,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `change` to a copy of the metadata, saves the copy, then installs it.
    fn mutate<T>(
        &self,
        state: &mut State,
        change: impl FnOnce(&mut Metadata) -> Result<T, MetadataError>,
    ) -> Result<T, Response> {
        let mut next = state.metadata.clone();
        let value = change(&mut next).map_err(refuse)?;
        self.inner.file.save(&next).map_err(|e| {
            tracing::error!(error = %e, "saving coordinator metadata failed");
            Response::error(Status::Internal, format!("saving metadata: {e}"))
        })?;
        state.metadata = next;
        Ok(value)
    }

    /// Snapshot for the admin endpoint: brokers with liveness, and every stream.
    pub fn snapshot(&self) -> (ListBrokersResponse, ListStreamsResponse) {
        let state = self.lock();
        let now = Instant::now();
        let brokers = state
            .metadata
            .broker_infos(|id| state.liveness.is_alive(id, now));
        (
            ListBrokersResponse { brokers },
            ListStreamsResponse {
                streams: state.metadata.all_streams(),
            },
        )
    }

    fn register(&self, body: Bytes) -> Result<Response, Response> {
        let request: RegisterBrokerRequest = decode(body)?;
        let mut state = self.lock();
        let old = state
            .metadata
            .brokers
            .iter()
            .find(|b| b.rpc_addr == request.rpc_addr)
            .map(|b| b.server_id);
        let server_id = self.mutate(&mut state, |m| {
            m.register_broker(&request.rpc_addr, &request.peer_addr, &request.admin_addr)
        })?;
        if let Some(old) = old {
            state.liveness.forget(old);
        }
        state.liveness.heard(server_id, Instant::now());
        tracing::info!(%server_id, rpc = %request.rpc_addr, "broker registered");
        let assignments = state.metadata.assignments_for(server_id);
        Ok(Response::ok(&RegisterBrokerResponse {
            server_id,
            assignments,
        }))
    }

    fn heartbeat(&self, body: Bytes) -> Result<Response, Response> {
        let request: BrokerHeartbeatRequest = decode(body)?;
        let mut state = self.lock();
        state
            .metadata
            .check_server(request.server_id)
            .map_err(refuse)?;
        state.liveness.heard(request.server_id, Instant::now());
        let assignments = (request.known_version < state.metadata.version)
            .then(|| state.metadata.assignments_for(request.server_id));
        let now = Instant::now();
        let brokers = state
            .metadata
            .broker_infos(|id| state.liveness.is_alive(id, now));
        Ok(Response::ok(&BrokerHeartbeatResponse {
            assignments,
            brokers,
        }))
    }

    fn allocate_producer_id(&self) -> Result<Response, Response> {
        let mut state = self.lock();
        let (producer_id, moved) = state.metadata.allocate_producer_id();
        if moved {
            // Persist the new ceiling before the id is handed out, so it is never reused.
            let snapshot = state.metadata.clone();
            self.inner
                .file
                .save(&snapshot)
                .map_err(|e| Response::error(Status::Internal, e))?;
        }
        Ok(Response::ok(&AllocateProducerIdResponse { producer_id }))
    }

    fn create_stream(&self, body: Bytes) -> Result<Reply, Response> {
        let request: CreateStreamRequest = decode(body)?;
        let mut state = self.lock();
        let now = Instant::now();
        let live: Vec<ServerId> = state
            .metadata
            .brokers
            .iter()
            .map(|b| b.server_id)
            .filter(|id| state.liveness.is_alive(*id, now))
            .collect();
        let metadata = self.mutate(&mut state, |m| {
            let record = m.create_stream(
                &request.name,
                request.streamlets,
                request.config.clone(),
                &live,
            )?;
            let record = record.clone();
            Ok(m.describe(&record))
        })?;
        tracing::info!(stream = %request.name, streamlets = request.streamlets, "stream created");
        let pushes: Vec<_> = state
            .metadata
            .owners_of(&request.name)
            .into_iter()
            .map(|owner| {
                (
                    owner.peer_addr,
                    state.metadata.assignments_for(owner.server_id),
                )
            })
            .collect();
        drop(state);
        let service = self.clone();
        Ok(Reply::Later(Box::pin(async move {
            let timeout = service.inner.assign_timeout;
            let pushed = pushes.into_iter().map(|(addr, assignment)| {
                let service = service.clone();
                async move {
                    let client = service.inner.pool.get(&addr).await?;
                    client
                        .call::<_, Empty>(Opcode::AssignStreamlets, &assignment)
                        .await
                }
            });
            let outcome = tokio::time::timeout(timeout, futures::future::join_all(pushed)).await;
            match outcome {
                Ok(results) => {
                    for error in results.into_iter().filter_map(Result::err) {
                        tracing::warn!(%error, "assignment push failed; the broker's heartbeat will catch up");
                    }
                }
                Err(_) => tracing::warn!("assignment push timed out; heartbeats will catch up"),
            }
            Response::ok(&metadata)
        })))
    }

    fn describe_stream(&self, body: Bytes) -> Result<Response, Response> {
        let request: DescribeStreamRequest = decode(body)?;
        let state = self.lock();
        let metadata = state
            .metadata
            .stream_metadata(&request.name)
            .map_err(refuse)?;
        Ok(Response::ok(&metadata))
    }
}

impl CoordinatorService {
    /// Answers `request` if `facing` serves its opcode.
    fn dispatch_as(&self, facing: Facing, request: Request) -> Reply {
        let ready = |result: Result<Response, Response>| Reply::Ready(result.unwrap_or_else(|e| e));
        match (facing, request.opcode) {
            (_, Opcode::Ping) => Reply::Ready(Response::empty()),
            (Facing::Peers, Opcode::RegisterBroker) => ready(self.register(request.body)),
            (Facing::Peers, Opcode::BrokerHeartbeat) => ready(self.heartbeat(request.body)),
            (Facing::Clients, Opcode::AllocateProducerId) => ready(self.allocate_producer_id()),
            (Facing::Clients, Opcode::CreateStream) => self
                .create_stream(request.body)
                .unwrap_or_else(Reply::Ready),
            (Facing::Clients, Opcode::DescribeStream) => ready(self.describe_stream(request.body)),
            (Facing::Clients, Opcode::ListStreams) => {
                Reply::Ready(Response::ok(&self.snapshot().1))
            }
            (Facing::Clients, Opcode::ListBrokers) => {
                Reply::Ready(Response::ok(&self.snapshot().0))
            }
            (Facing::Clients, Opcode::RegisterBroker | Opcode::BrokerHeartbeat) => {
                Reply::Ready(Response::error(
                    Status::UnknownOpcode,
                    format!(
                        "{:?} is served on the coordinator's peer listener (coordinator.peer_addr), not its client listener",
                        request.opcode
                    ),
                ))
            }
            (_, other) => Reply::Ready(Response::error(
                Status::UnknownOpcode,
                format!("{other:?} is not a coordinator operation on this listener"),
            )),
        }
    }
}

/// Which listener a request arrived on: each serves only its own operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Facing {
    Clients,
    Peers,
}

/// The coordinator as clients see it (`coordinator.rpc_addr`): streams, brokers, producer ids.
#[derive(Clone, Debug)]
pub struct ClientFacing(pub CoordinatorService);

/// The coordinator as brokers see it (`coordinator.peer_addr`): registration and heartbeats.
#[derive(Clone, Debug)]
pub struct PeerFacing(pub CoordinatorService);

impl Service for ClientFacing {
    fn dispatch(&self, request: Request) -> Reply {
        self.0.dispatch_as(Facing::Clients, request)
    }
}

impl Service for PeerFacing {
    fn dispatch(&self, request: Request) -> Reply {
        self.0.dispatch_as(Facing::Peers, request)
    }
}
