//! The tcp backend's primary side: one connection per backup, writes pipelined, completions
//! matched to writes in order.

use super::{ReplicaWriter, TransportError, WriteFuture, WriteTarget, failed};
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailstream_wire::ServerId;
use tailstream_wire::nic::{COMPLETION_BYTES, Completion, Hello, WriteHeader};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

type Done = oneshot::Sender<Result<(), TransportError>>;

#[derive(Debug)]
struct Queued {
    header: WriteHeader,
    parts: Vec<Bytes>,
    done: Done,
}

#[derive(Debug)]
struct Shared {
    broken: AtomicBool,
    next_write_id: AtomicU64,
    /// Writes sent and not yet completed, in send order.
    awaiting: Mutex<VecDeque<(u64, Done)>>,
}

impl Shared {
    fn break_with(&self, reason: &str) {
        self.broken.store(true, Ordering::Release);
        let drained: Vec<(u64, Done)> = match self.awaiting.lock() {
            Ok(mut awaiting) => awaiting.drain(..).collect(),
            Err(poisoned) => poisoned.into_inner().drain(..).collect(),
        };
        for (_, done) in drained {
            let _ = done.send(Err(TransportError::Broken(reason.to_string())));
        }
    }
}

/// Writes to one backup's NIC endpoint.
#[derive(Debug)]
pub struct NicWriter {
    queue: mpsc::UnboundedSender<Queued>,
    shared: Arc<Shared>,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for NicWriter {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl NicWriter {
    /// Connects to the NIC endpoint at `addr` as `primary`, showing the `ticket` the backup
    /// granted it (in its buffer descriptors). When nothing was sent for
    /// `keepalive`, a keepalive write goes out, so the backup never closes the connection as
    /// idle (which would make this primary treat its replicas there as lost).
    pub async fn connect(
        addr: &str,
        primary: ServerId,
        ticket: u64,
        timeout: Duration,
        keepalive: Duration,
    ) -> Result<Self, TransportError> {
        let broken = |e: String| TransportError::Broken(format!("{addr}: {e}"));
        let stream = tokio::time::timeout(timeout, tailstream_net::source::connect(addr))
            .await
            .map_err(|_| broken("connect timed out".into()))?
            .map_err(|e| broken(e.to_string()))?;
        let _ = stream.set_nodelay(true);
        let (reader, mut writer) = stream.into_split();
        let mut reader = BufReader::with_capacity(64 * 1024, reader);
        writer
            .write_all(&Hello { primary, ticket }.encode())
            .await
            .map_err(|e| broken(e.to_string()))?;
        let shared = Arc::new(Shared {
            broken: AtomicBool::new(false),
            next_write_id: AtomicU64::new(1),
            awaiting: Mutex::new(VecDeque::new()),
        });
        // Unbounded, but bounded in practice: every queued write belongs to a replica slot
        // with at most `writes_in_flight_per_replica_max` writes outstanding.
        let (queue, mut queued) = mpsc::unbounded_channel::<Queued>();
        let send_shared = shared.clone();
        let sender = tokio::spawn(async move {
            let outcome: std::io::Result<()> = async {
                let mut batch = Vec::new();
                loop {
                    let write = match tokio::time::timeout(keepalive, queued.recv()).await {
                        Ok(Some(write)) => write,
                        Ok(None) => break,
                        Err(_) => {
                            // Nobody waits for a keepalive's completion; it only has to come.
                            let write_id =
                                send_shared.next_write_id.fetch_add(1, Ordering::Relaxed);
                            Queued {
                                header: WriteHeader::keepalive(write_id),
                                parts: Vec::new(),
                                done: oneshot::channel().0,
                            }
                        }
                    };
                    batch.push(write);
                    while batch.len() < WRITES_PER_SEND_MAX
                        && let Ok(write) = queued.try_recv()
                    {
                        batch.push(write);
                    }
                    send_batch(&mut writer, &send_shared, &mut batch).await?;
                }
                Ok(())
            }
            .await;
            if let Err(error) = outcome {
                send_shared.break_with(&format!("sending: {error}"));
            }
        });
        let read_shared = shared.clone();
        let receiver = tokio::spawn(async move {
            let reason = loop {
                let mut raw = [0u8; COMPLETION_BYTES];
                if let Err(error) = reader.read_exact(&mut raw).await {
                    break format!("connection closed by backup ({error})");
                }
                let completion = match Completion::decode(&raw) {
                    Ok(completion) => completion,
                    Err(error) => break format!("bad completion: {error}"),
                };
                let front = read_shared
                    .awaiting
                    .lock()
                    .ok()
                    .and_then(|mut a| a.pop_front());
                match front {
                    Some((write_id, done))
                        if write_id == completion.write_id && completion.status == 0 =>
                    {
                        let _ = done.send(Ok(()));
                    }
                    Some((_, done)) => {
                        let _ = done.send(Err(TransportError::Broken(
                            "completion out of order".into(),
                        )));
                        break "completion out of order".to_string();
                    }
                    None => break "completion for no write".to_string(),
                }
            };
            read_shared.break_with(&reason);
        });
        Ok(Self {
            queue,
            shared,
            tasks: [sender, receiver],
        })
    }
}

/// Writes queued before a send goes out in one vectored write: headers and the segment's own
/// chunks, never copied into a staging buffer.
const WRITES_PER_SEND_MAX: usize = 64;

async fn send_batch(
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    shared: &Shared,
    batch: &mut Vec<Queued>,
) -> std::io::Result<()> {
    let mut out = BytesList::default();
    for write in batch.drain(..) {
        if shared.broken.load(Ordering::Acquire) {
            let _ = write
                .done
                .send(Err(TransportError::Broken("connection broken".into())));
            continue;
        }
        if let Ok(mut awaiting) = shared.awaiting.lock() {
            awaiting.push_back((write.header.write_id, write.done));
        }
        out.push(Bytes::copy_from_slice(&write.header.encode()));
        for part in write.parts {
            out.push(part);
        }
    }
    writer.write_all_buf(&mut out).await
}

/// A sequence of `Bytes` read as one buffer, so one vectored write can send them all.
#[derive(Debug, Default)]
struct BytesList {
    parts: VecDeque<Bytes>,
    remaining: usize,
}

impl BytesList {
    fn push(&mut self, part: Bytes) {
        if !part.is_empty() {
            self.remaining += part.len();
            self.parts.push_back(part);
        }
    }
}

impl bytes::Buf for BytesList {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.parts.front().map_or(&[], |part| &part[..])
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [std::io::IoSlice<'a>]) -> usize {
        let mut filled = 0;
        for (slot, part) in dst.iter_mut().zip(&self.parts) {
            *slot = std::io::IoSlice::new(part);
            filled += 1;
        }
        filled
    }

    fn advance(&mut self, mut cnt: usize) {
        self.remaining = self.remaining.saturating_sub(cnt);
        while cnt > 0 {
            let Some(front) = self.parts.front_mut() else {
                return;
            };
            if cnt < front.len() {
                bytes::Buf::advance(front, cnt);
                return;
            }
            cnt -= front.len();
            self.parts.pop_front();
        }
    }
}

impl ReplicaWriter for NicWriter {
    fn write(&self, target: WriteTarget, offset: u32, parts: Vec<Bytes>) -> WriteFuture {
        if self.is_broken() {
            return failed("connection broken");
        }
        let len: usize = parts.iter().map(Bytes::len).sum();
        let Ok(len) = u32::try_from(len) else {
            return failed("write larger than 4 GiB");
        };
        let write_id = self.shared.next_write_id.fetch_add(1, Ordering::Relaxed);
        let header = WriteHeader {
            key: target.key,
            offset,
            len,
            write_id,
        };
        let (done, completed) = oneshot::channel();
        if self
            .queue
            .send(Queued {
                header,
                parts,
                done,
            })
            .is_err()
        {
            return failed("connection closed");
        }
        Box::pin(async move {
            completed
                .await
                .unwrap_or_else(|_| Err(TransportError::Broken("connection closed".into())))
        })
    }

    fn is_broken(&self) -> bool {
        self.shared.broken.load(Ordering::Acquire)
    }
}
