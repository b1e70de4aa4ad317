//! The primary's side of the rdma backend: a `ReplicaWriter` issuing one-sided RDMA WRITEs.
//!
//! Writes to one backup go through one task, in order: each is copied into a registered
//! staging region (async-rdma writes only from registered memory, and holds a lock on the
//! whole region while the write is in flight, so the task owns it and never blocks a
//! runtime worker on it) and written, in pieces of the staging size, at its offset of the
//! remote region named by the buffer's token. A failed write (a bad key puts the queue pair
//! in the error state) fails it and every later one: the replicas on that backup are lost.

use crate::replication::transport::{
    ReplicaWriter, TransportError, WriteFuture, WriteTarget, failed,
};
use async_rdma::{LocalMr, LocalMrWriteAccess, MrToken, QueuePairEndpoint, Rdma, RemoteMr};
use bytes::Bytes;
use std::alloc::Layout;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tailstream_net::RpcClient;
use tailstream_wire::ServerId;
use tailstream_wire::messages::{BufferDescriptor, RdmaConnectRequest};
use tokio::sync::{mpsc, oneshot};

/// Size of the registered staging region writes are copied through.
const STAGING_BYTES: usize = 1 << 20;

type Done = oneshot::Sender<Result<(), TransportError>>;

#[derive(Debug)]
struct Queued {
    token: MrToken,
    offset: u32,
    parts: Vec<Bytes>,
    done: Done,
}

#[derive(Debug)]
pub struct RdmaWriter {
    tokens: Mutex<HashMap<u64, MrToken>>,
    queue: mpsc::UnboundedSender<Queued>,
    broken: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RdmaWriter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RdmaWriter {
    /// Connects a queue pair to the backup behind `client`, as `primary`.
    pub async fn connect(client: &RpcClient, primary: ServerId) -> Result<Self, TransportError> {
        let broken = |e: String| TransportError::Broken(format!("rdma: {e}"));
        let mut rdma = super::builder()
            .build()
            .map_err(|e| broken(e.to_string()))?;
        let ours =
            serde_json::to_vec(&rdma.get_qp_endpoint()).map_err(|e| broken(e.to_string()))?;
        let request = RdmaConnectRequest {
            primary,
            endpoint: Bytes::from(ours),
        };
        let response = tailstream_stubs::backup::rdma_connect(client, &request)
            .await
            .map_err(|e| broken(e.to_string()))?;
        let theirs: QueuePairEndpoint =
            serde_json::from_slice(&response.endpoint).map_err(|e| broken(e.to_string()))?;
        rdma.ibv_connect(theirs)
            .await
            .map_err(|e| broken(e.to_string()))?;
        let layout =
            Layout::from_size_align(STAGING_BYTES, 4096).map_err(|e| broken(e.to_string()))?;
        let staging = rdma
            .alloc_local_mr(layout)
            .map_err(|e| broken(e.to_string()))?;
        let (queue, queued) = mpsc::unbounded_channel();
        let broken_flag = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(run(rdma, staging, queued, broken_flag.clone()));
        Ok(Self {
            tokens: Mutex::new(HashMap::new()),
            queue,
            broken: broken_flag,
            task,
        })
    }

    /// Writes at `offset` of the region `token` names, bypassing the key table (tests use it
    /// to present a wrong key).
    pub fn write_with_token(&self, token: MrToken, offset: u32, parts: Vec<Bytes>) -> WriteFuture {
        if self.is_broken() {
            return failed("rdma queue pair in error state");
        }
        let (done, completed) = oneshot::channel();
        if self
            .queue
            .send(Queued {
                token,
                offset,
                parts,
                done,
            })
            .is_err()
        {
            return failed("rdma writer stopped");
        }
        Box::pin(async move {
            completed
                .await
                .unwrap_or_else(|_| Err(TransportError::Broken("rdma writer stopped".into())))
        })
    }

    /// The token the backup returned for `key`, if registered.
    pub fn token(&self, key: u64) -> Option<MrToken> {
        self.tokens.lock().ok()?.get(&key).copied()
    }
}

async fn run(
    rdma: Rdma,
    mut staging: LocalMr,
    mut queued: mpsc::UnboundedReceiver<Queued>,
    broken: Arc<AtomicBool>,
) {
    while let Some(write) = queued.recv().await {
        if broken.load(Ordering::Acquire) {
            let _ = write.done.send(Err(TransportError::Broken(
                "rdma queue pair in error state".into(),
            )));
            continue;
        }
        let result = write_one(&rdma, &mut staging, &write).await;
        if result.is_err() {
            broken.store(true, Ordering::Release);
        }
        let _ = write.done.send(result);
    }
}

async fn write_one(
    rdma: &Rdma,
    staging: &mut LocalMr,
    write: &Queued,
) -> Result<(), TransportError> {
    let broken = |e: String| TransportError::Broken(format!("rdma write: {e}"));
    let mut remote = RemoteMr::new(write.token);
    let mut at = write.offset as usize;
    let data: Vec<u8> = write.parts.iter().flat_map(|p| p.iter().copied()).collect();
    for piece in data.chunks(STAGING_BYTES) {
        staging.as_mut_slice()[..piece.len()].copy_from_slice(piece);
        let local = staging
            .get(0..piece.len())
            .ok_or_else(|| broken("staging slice".into()))?;
        let mut target = remote
            .get_mut(at..at + piece.len())
            .map_err(|e| broken(e.to_string()))?;
        rdma.write(&local, &mut target)
            .await
            .map_err(|e| broken(e.to_string()))?;
        at += piece.len();
    }
    Ok(())
}

impl ReplicaWriter for RdmaWriter {
    fn register(&self, key: u64, descriptor: &BufferDescriptor) -> Result<(), TransportError> {
        let token: MrToken = serde_json::from_slice(&descriptor.rdma_token)
            .map_err(|e| TransportError::Broken(format!("backup returned no rdma token: {e}")))?;
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, token);
        Ok(())
    }

    fn write(&self, target: WriteTarget, offset: u32, parts: Vec<Bytes>) -> WriteFuture {
        match self.token(target.key) {
            Some(token) => self.write_with_token(token, offset, parts),
            None => failed(format!("no rdma token for buffer {}", target.key)),
        }
    }

    fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }
}
