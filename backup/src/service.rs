//! The backup's RPCs (the control path of replication, plus RPC-mode writes), served on the
//! broker's RPC port. File I/O and whole-buffer scans run on the blocking pool, never on the
//! connection's reader task.

use super::ops;
use super::store::{BackupError, BackupStore};
use bytes::Bytes;
use std::sync::Arc;
use tailstream_net::{Reply, Response};
#[cfg(feature = "rdma")]
use tailstream_wire::messages::RdmaConnectResponse;
use tailstream_wire::messages::{
    BufferDescriptor, ListReplicasRequest, ListReplicasResponse, RdmaConnectRequest,
    ReadReplicaRequest, ReplicaAdoptRequest, ReplicaCloseRequest, ReplicaFreeRequest,
    ReplicaOpenRequest, ReplicaSetEpochRequest, ReplicaWriteRequest,
};
use tailstream_wire::{Decode, Encode, Opcode, Status};

#[derive(Debug)]
pub struct BackupService {
    store: Arc<BackupStore>,
    /// Advertised in every buffer descriptor (tcp backend).
    nic_addr: String,
}

fn refuse(error: BackupError) -> Response {
    Response::error(error.status(), error.to_string())
}

/// Runs blocking backup work off the async workers and turns its outcome into a response.
fn blocking<T: Encode + Send + 'static>(
    work: impl FnOnce() -> Result<T, BackupError> + Send + 'static,
) -> Reply {
    Reply::Later(Box::pin(async move {
        match tokio::task::spawn_blocking(work).await {
            Ok(Ok(value)) => Response::ok(&value),
            Ok(Err(error)) => refuse(error),
            Err(join) => Response::error(Status::Internal, format!("backup task failed: {join}")),
        }
    }))
}

impl BackupService {
    pub fn new(store: Arc<BackupStore>, nic_addr: String) -> Self {
        Self { store, nic_addr }
    }

    /// Opens a replica: in a registered region if its primary writes with RDMA, else in a
    /// pool buffer. Returns the buffer descriptor.
    fn open(&self, request: &ReplicaOpenRequest) -> Result<BufferDescriptor, BackupError> {
        #[cfg(feature = "rdma")]
        if let Some(region) = self
            .store
            .rdma()
            .buffer_for(request.primary, request.capacity_bytes)
        {
            let region = region.map_err(BackupError::Io)?;
            let rdma_token = region.token().map_err(BackupError::Io)?;
            let replica = self.store.open_registered(request, region)?;
            return Ok(BufferDescriptor {
                key: replica.key,
                capacity_bytes: replica.capacity_bytes,
                nic_addr: self.nic_addr.clone(),
                nic_ticket: self.store.nic_tickets().ticket_for(request.primary),
                rdma_token,
            });
        }
        let replica = self.store.open(request)?;
        Ok(BufferDescriptor {
            key: replica.key,
            capacity_bytes: replica.capacity_bytes,
            nic_addr: self.nic_addr.clone(),
            nic_ticket: self.store.nic_tickets().ticket_for(request.primary),
            rdma_token: Bytes::new(),
        })
    }

    fn rdma_connect(&self, body: Bytes) -> Reply {
        let request = match RdmaConnectRequest::decode_exact(body) {
            Ok(request) => request,
            Err(e) => return Reply::Ready(Response::error(Status::Malformed, e.to_string())),
        };
        if let Err(error) = self.store.check_primary(request.primary) {
            return Reply::Ready(refuse(error));
        }
        #[cfg(feature = "rdma")]
        {
            let rdma = self.store.rdma().clone();
            Reply::Later(Box::pin(async move {
                match rdma.accept(request.primary, &request.endpoint).await {
                    Ok(endpoint) => Response::ok(&RdmaConnectResponse { endpoint }),
                    Err(error) => Response::error(Status::Internal, error),
                }
            }))
        }
        #[cfg(not(feature = "rdma"))]
        {
            let _ = request;
            Reply::Ready(Response::error(
                Status::InvalidArgument,
                "this backup was built without RDMA support",
            ))
        }
    }

    /// A cheap copy for moving into blocking work.
    fn clone_handle(&self) -> Self {
        Self {
            store: self.store.clone(),
            nic_addr: self.nic_addr.clone(),
        }
    }

    fn pool_gauges(store: &BackupStore) {
        let (open, bytes) = store.pool_usage();
        let limits = store.limits();
        metrics::gauge!(crate::metrics::BACKUP_BUFFERS_USED).set(f64::from(open));
        metrics::gauge!(crate::metrics::BACKUP_BUFFERS_FREE)
            .set(f64::from(limits.open_buffers_max.saturating_sub(open)));
        metrics::gauge!(crate::metrics::BACKUP_BUFFER_BYTES_USED).set(bytes as f64);
    }

    /// Handles a backup opcode; `None` for any other opcode.
    pub fn dispatch(&self, opcode: Opcode, body: Bytes) -> Option<Reply> {
        let malformed = |e: tailstream_wire::DecodeError| {
            Reply::Ready(Response::error(Status::Malformed, e.to_string()))
        };
        let store = self.store.clone();
        Some(match opcode {
            Opcode::ReplicaOpen => match ReplicaOpenRequest::decode_exact(body) {
                Ok(request) => {
                    let service = self.clone_handle();
                    blocking(move || {
                        let descriptor = service.open(&request)?;
                        Self::pool_gauges(&service.store);
                        Ok(descriptor)
                    })
                }
                Err(e) => malformed(e),
            },
            Opcode::RdmaConnect => self.rdma_connect(body),
            Opcode::ReplicaClose => match ReplicaCloseRequest::decode_exact(body) {
                Ok(request) => blocking(move || {
                    ops::close(&store, &request)?;
                    Self::pool_gauges(&store);
                    Ok(tailstream_wire::messages::Empty {})
                }),
                Err(e) => malformed(e),
            },
            Opcode::ReplicaFree => match ReplicaFreeRequest::decode_exact(body) {
                Ok(request) => blocking(move || {
                    store.free(request.primary, &request.replica)?;
                    Self::pool_gauges(&store);
                    Ok(tailstream_wire::messages::Empty {})
                }),
                Err(e) => malformed(e),
            },
            Opcode::ReplicaSetEpoch => match ReplicaSetEpochRequest::decode_exact(body) {
                Ok(request) => blocking(move || {
                    store.set_epoch(request.primary, &request.replica, request.epoch)?;
                    Self::pool_gauges(&store);
                    Ok(tailstream_wire::messages::Empty {})
                }),
                Err(e) => malformed(e),
            },
            Opcode::ListReplicas => match ListReplicasRequest::decode_exact(body) {
                Ok(request) => blocking(move || {
                    for crashed in &request.fence {
                        store.fence(*crashed);
                    }
                    let mut replicas: Vec<_> = store
                        .replicas(request.primary)
                        .iter()
                        .map(|r| ops::describe(r))
                        .collect();
                    crate::listing::trim_digests(&mut replicas);
                    Ok(ListReplicasResponse { replicas })
                }),
                Err(e) => malformed(e),
            },
            Opcode::ReplicaAdopt => match ReplicaAdoptRequest::decode_exact(body) {
                Ok(request) => blocking(move || {
                    store.adopt(
                        request.from,
                        request.new_primary,
                        &request.replica,
                        request.epoch,
                        request.new_epoch,
                    )?;
                    Ok(tailstream_wire::messages::Empty {})
                }),
                Err(e) => malformed(e),
            },
            Opcode::ReadReplica => match ReadReplicaRequest::decode_exact(body) {
                Ok(request) => blocking(move || ops::read(&store, &request)),
                Err(e) => malformed(e),
            },
            Opcode::ReplicaWrite => match ReplicaWriteRequest::decode_exact(body) {
                Ok(request) => {
                    match store.find_by_key(request.primary, &request.replica, request.key) {
                        Ok(replica) => Reply::Later(Box::pin(async move {
                            let bytes = request.entries.len() as u64;
                            match ops::write_entries(replica, request).await {
                                Ok(()) => {
                                    metrics::counter!(crate::metrics::BACKUP_WRITTEN_BYTES)
                                        .increment(bytes);
                                    Response::empty()
                                }
                                Err(error) => refuse(error),
                            }
                        })),
                        Err(error) => Reply::Ready(refuse(error)),
                    }
                }
                Err(e) => malformed(e),
            },
            _ => return None,
        })
    }
}
