//! The tcp backend's software "NIC": receives one-sided writes and places their payload
//! straight into registered replica buffers, without looking at it.
//!
//! Per connection: a hello names the primary (fenced generations are refused), then each
//! write is a checksummed header (key, offset, len) followed by `len` bytes, which are read
//! from the socket directly into the buffer at that offset. Completions go back in write
//! order. A bad header, an unknown key, a write out of bounds, a fenced primary or a payload
//! that does not arrive in time ends the connection, as a queue pair enters the error state:
//! only that primary's connection is affected, and the primary treats its replicas as lost.

use super::store::BackupStore;
use std::sync::Arc;
use std::time::Duration;
use tailstream_net::server::shutdown_signalled;
use tailstream_wire::nic::{Completion, HELLO_BYTES, Hello, WRITE_HEADER_BYTES, WriteHeader};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

/// Small on purpose: headers are read through it, but a payload larger than what it holds is
/// read from the socket straight into the replica buffer, not copied through it.
const NIC_READ_BUFFER_BYTES: usize = 4 * 1024;

#[derive(Clone, Copy, Debug)]
pub struct NicLimits {
    pub connections_max: usize,
    pub write_timeout: Duration,
}

/// Serves one-sided writes until `shutdown`.
pub async fn serve_nic(
    listener: TcpListener,
    store: Arc<BackupStore>,
    limits: NicLimits,
    mut shutdown: watch::Receiver<bool>,
) {
    let connections = Arc::new(Semaphore::new(limits.connections_max.max(1)));
    loop {
        let permit = tokio::select! {
            permit = connections.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            _ = shutdown_signalled(&mut shutdown) => return,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "nic accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown_signalled(&mut shutdown) => return,
        };
        let store = store.clone();
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _permit = permit;
            tokio::select! {
                outcome = serve_connection(stream, store, limits) => {
                    if let Err(reason) = outcome {
                        tracing::info!(%reason, "one-sided connection closed");
                    }
                }
                _ = shutdown_signalled(&mut shutdown) => {}
            }
        });
    }
}

async fn serve_connection(
    stream: TcpStream,
    store: Arc<BackupStore>,
    limits: NicLimits,
) -> Result<(), String> {
    let _ = stream.set_nodelay(true);
    let (read_half, write_half) = stream.into_split();
    let mut reader = BufReader::with_capacity(NIC_READ_BUFFER_BYTES, read_half);
    let mut writer = BufWriter::new(write_half);
    let mut raw_hello = [0u8; HELLO_BYTES];
    tokio::time::timeout(limits.write_timeout, reader.read_exact(&mut raw_hello))
        .await
        .map_err(|_| "no hello in time".to_string())?
        .map_err(|e| format!("reading hello: {e}"))?;
    let primary = Hello::decode(&raw_hello)
        .map_err(|e| e.to_string())?
        .primary;
    store.check_primary(primary).map_err(|e| e.to_string())?;
    loop {
        // Completions are flushed only when no further write is already waiting, so a
        // pipelining primary gets them batched.
        if reader.buffer().is_empty() {
            writer
                .flush()
                .await
                .map_err(|e| format!("sending completions: {e}"))?;
        }
        let mut raw = [0u8; WRITE_HEADER_BYTES];
        match reader.read_exact(&mut raw).await {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(error) => return Err(format!("reading write header: {error}")),
        }
        let header = WriteHeader::decode(&raw).map_err(|e| format!("{primary}: {e}"))?;
        let replica = store
            .writer_for(header.key, primary)
            .map_err(|e| format!("{primary}: write to key {}: {e}", header.key))?;
        let end = header.end_within(replica.capacity_bytes).ok_or_else(|| {
            format!(
                "{primary}: write of {} at {} past the buffer's end",
                header.len, header.offset
            )
        })?;
        {
            let mut guard = replica.buffer.lock().await;
            let buffer = guard
                .as_mut()
                .and_then(|b| b.pool_mut())
                .ok_or_else(|| format!("{primary}: write to closed replica {:?}", replica.id))?;
            let slot = &mut buffer.map.bytes_mut()[header.offset as usize..end as usize];
            tokio::time::timeout(limits.write_timeout, reader.read_exact(slot))
                .await
                .map_err(|_| format!("{primary}: payload did not arrive in time"))?
                .map_err(|e| format!("{primary}: reading payload: {e}"))?;
            buffer.high_water = buffer.high_water.max(end as usize);
        }
        metrics::counter!(crate::metrics::BACKUP_WRITTEN_BYTES).increment(u64::from(header.len));
        let completion = Completion {
            write_id: header.write_id,
            status: 0,
        };
        writer
            .write_all(&completion.encode())
            .await
            .map_err(|e| format!("completion: {e}"))?;
    }
}
