//! The broker's peer service (its `peer_addr` listener): what the cluster's own members call.
//! The coordinator pushes streamlet assignments; primaries open, close, free and re-epoch
//! replicas on this broker's backup, write to them in RPC mode, list and read them.
//!
//! It runs on a listener of its own, with its own connection limits and body budget, so a
//! flood of anonymous connections on the client listener never starves replication, and
//! these operations are not reachable from the client listener at all. It is served on the
//! broker's control runtime (pings are answered there, on time); a recovery order, the one
//! heavy thing asked of it, runs on the data runtime.

use crate::backup::BackupService;
use crate::cluster::ClusterState;
use crate::recovery::Recovery;
use crate::term_fence::stale;
use bytes::Bytes;
use std::sync::Arc;
use tailstream_net::{Reply, Request, Response, Service};
use tailstream_wire::messages::{
    AssignStreamletsRequest, ListReplicasRequest, RecoverStreamletRequest,
};
use tailstream_wire::{Decode, Opcode, Status};

#[derive(Debug)]
pub struct PeerService {
    cluster: Arc<ClusterState>,
    backup: BackupService,
    recovery: Arc<Recovery>,
    /// The data runtime: recoveries (reads, rebuilds, the replicators they start) run there.
    data: tokio::runtime::Handle,
}

impl PeerService {
    pub fn new(
        cluster: Arc<ClusterState>,
        backup: BackupService,
        recovery: Arc<Recovery>,
        data: tokio::runtime::Handle,
    ) -> Self {
        Self {
            cluster,
            backup,
            recovery,
            data,
        }
    }

    fn recover(&self, body: Bytes) -> Reply {
        let request = match RecoverStreamletRequest::decode_exact(body) {
            Ok(request) => request,
            Err(error) => {
                return Reply::Ready(Response::error(
                    Status::Malformed,
                    format!("recover streamlet request: {error}"),
                ));
            }
        };
        if let Err(newest) = self.cluster.term().admit(request.term) {
            return Reply::Ready(Response::error(
                Status::StaleTerm,
                stale("a rebuild order", request.term, newest),
            ));
        }
        let recovery = self.recovery.clone();
        let rebuild = self.data.spawn(async move {
            let stream = request.assignment.stream_name.clone();
            let streamlet = request.assignment.streamlet;
            match recovery.recover(request).await {
                Ok(done) => Response::ok(&done),
                Err(error) => {
                    tracing::warn!(%stream, streamlet = streamlet.0, %error, fault = ?error.fault(), "recovering a streamlet failed");
                    Response::error(error.status(), error.to_string())
                }
            }
        });
        Reply::Later(Box::pin(async move {
            rebuild.await.unwrap_or_else(|error| {
                Response::error(
                    Status::Internal,
                    format!("the recovery task ended: {error}"),
                )
            })
        }))
    }

    /// A listing that fences crashed generations is a coordinator's order: refused whole
    /// when its term is older than one seen. (A malformed body is the backup's to refuse.)
    fn refuse_stale_fence(&self, body: &Bytes) -> Option<Reply> {
        let request = ListReplicasRequest::decode_exact(body.clone()).ok()?;
        if request.fence.is_empty() {
            return None;
        }
        let newest = self.cluster.term().admit(request.term).err()?;
        Some(Reply::Ready(Response::error(
            Status::StaleTerm,
            stale("a fencing listing", request.term, newest),
        )))
    }

    fn assign(&self, body: Bytes) -> Reply {
        let request = match AssignStreamletsRequest::decode_exact(body) {
            Ok(request) => request,
            Err(error) => {
                return Reply::Ready(Response::error(
                    Status::Malformed,
                    format!("assign streamlets request: {error}"),
                ));
            }
        };
        match self.cluster.apply_assignments(&request) {
            Ok(()) => Reply::Ready(Response::empty()),
            Err((status, message)) => Reply::Ready(Response::error(status, message)),
        }
    }
}

impl Service for PeerService {
    fn dispatch(&self, request: Request) -> Reply {
        if request.opcode == Opcode::ListReplicas
            && let Some(refused) = self.refuse_stale_fence(&request.body)
        {
            return refused;
        }
        if let Some(reply) = self.backup.dispatch(request.opcode, request.body.clone()) {
            return reply;
        }
        match request.opcode {
            Opcode::Ping => Reply::Ready(Response::empty()),
            Opcode::AssignStreamlets => self.assign(request.body),
            Opcode::RecoverStreamlet => self.recover(request.body),
            other => Reply::Ready(Response::error(
                Status::UnknownOpcode,
                format!("{other:?} is not a broker operation on its peer listener"),
            )),
        }
    }
}
