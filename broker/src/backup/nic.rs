//! The tcp backend's software "NIC": receives one-sided writes and places their payload
//! straight into registered replica buffers, without looking at it.
//!
//! Per connection: a hello names the primary (fenced generations are refused), then each
//! write is a checksummed header (key, offset, len) followed by `len` bytes, which are read
//! from the socket directly into the buffer at that offset. Completions go back in write
//! order. A bad header, an unknown key, a write out of bounds, a fenced primary or a write
//! that does not arrive whole within `write_timeout` of its first byte ends the connection, as
//! a queue pair enters the error state: only that primary's connection is affected, and the
//! primary treats its replicas as lost. A connection silent for the idle timeout is closed;
//! primaries keep theirs alive with keepalive writes (key 0, no payload) when they have nothing
//! to replicate. Connections come through the accept loop every listener shares.

use super::store::BackupStore;
use std::sync::Arc;
use std::time::Duration;
use tailstream_net::{Closed, ConnectionLimits, accept_loop};
use tailstream_wire::nic::{Completion, HELLO_BYTES, Hello, WRITE_HEADER_BYTES, WriteHeader};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

/// Small on purpose: headers are read through it, but a payload larger than what it holds is
/// read from the socket straight into the replica buffer, not copied through it. It is also
/// the only memory a connection holds: payloads land in pool buffers that already exist, so
/// the NIC needs no body budget.
const NIC_READ_BUFFER_BYTES: usize = 4 * 1024;

#[derive(Clone, Copy, Debug)]
pub struct NicLimits {
    pub connections: ConnectionLimits,
    /// The hello, and each write (header and payload) once its first byte arrived, must
    /// arrive within this long.
    pub write_timeout: Duration,
    /// A connection that sends nothing for this long is closed (primaries send keepalives).
    pub idle_timeout: Duration,
}

/// Serves one-sided writes until `shutdown`.
pub async fn serve_nic(
    listener: TcpListener,
    store: Arc<BackupStore>,
    limits: NicLimits,
    shutdown: watch::Receiver<bool>,
) {
    accept_loop(
        listener,
        "nic",
        limits.connections,
        shutdown,
        move |stream, _peer| serve_connection(stream, store.clone(), limits),
    )
    .await;
}

async fn serve_connection(stream: TcpStream, store: Arc<BackupStore>, limits: NicLimits) -> Closed {
    let _ = stream.set_nodelay(true);
    let (read_half, write_half) = stream.into_split();
    let mut reader = BufReader::with_capacity(NIC_READ_BUFFER_BYTES, read_half);
    let mut writer = BufWriter::new(write_half);
    let mut raw_hello = [0u8; HELLO_BYTES];
    match tokio::time::timeout(limits.write_timeout, reader.read_exact(&mut raw_hello)).await {
        Err(_) => return Closed::RequestTimeout,
        Ok(Err(error)) => return Closed::Io(format!("reading hello: {error}")),
        Ok(Ok(_)) => {}
    }
    let primary = match Hello::decode(&raw_hello) {
        Ok(hello) => hello.primary,
        Err(error) => return Closed::BadInput(error.to_string()),
    };
    if let Err(error) = store.check_primary(primary) {
        return Closed::BadInput(error.to_string());
    }
    loop {
        // Completions are flushed only when no further write is already waiting, so a
        // pipelining primary gets them batched.
        if reader.buffer().is_empty()
            && let Err(error) = writer.flush().await
        {
            return Closed::Io(format!("sending completions: {error}"));
        }
        // Idle until the next write's first byte; from then on its deadline runs.
        match tokio::time::timeout(limits.idle_timeout, reader.fill_buf()).await {
            Err(_) => return Closed::Idle,
            Ok(Err(error)) => return Closed::Io(format!("reading write header: {error}")),
            Ok(Ok([])) => return Closed::ByPeer,
            Ok(Ok(_)) => {}
        }
        let deadline = Instant::now() + limits.write_timeout;
        let completion = match write_one(&mut reader, &store, primary, deadline).await {
            Ok(completion) => completion,
            Err(closed) => return closed,
        };
        if let Err(error) = writer.write_all(&completion.encode()).await {
            return Closed::Io(format!("completion: {error}"));
        }
    }
}

/// Reads one write (header, then payload straight into its buffer) by `deadline`.
async fn write_one(
    reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    store: &BackupStore,
    primary: tailstream_wire::ServerId,
    deadline: Instant,
) -> Result<Completion, Closed> {
    let mut raw = [0u8; WRITE_HEADER_BYTES];
    match tokio::time::timeout_at(deadline, reader.read_exact(&mut raw)).await {
        Err(_) => return Err(Closed::RequestTimeout),
        Ok(Err(error)) => return Err(Closed::Io(format!("reading write header: {error}"))),
        Ok(Ok(_)) => {}
    }
    let header =
        WriteHeader::decode(&raw).map_err(|e| Closed::BadInput(format!("{primary}: {e}")))?;
    let done = Completion {
        write_id: header.write_id,
        status: 0,
    };
    if header.is_keepalive() {
        return Ok(done);
    }
    let replica = store
        .writer_for(header.key, primary)
        .map_err(|e| Closed::BadInput(format!("{primary}: write to key {}: {e}", header.key)))?;
    let end = header.end_within(replica.capacity_bytes).ok_or_else(|| {
        Closed::BadInput(format!(
            "{primary}: write of {} at {} past the buffer's end",
            header.len, header.offset
        ))
    })?;
    {
        let mut guard = replica.buffer.lock().await;
        let buffer = guard.as_mut().and_then(|b| b.pool_mut()).ok_or_else(|| {
            Closed::BadInput(format!(
                "{primary}: write to closed replica {:?}",
                replica.id
            ))
        })?;
        // The claim's capacity was checked against the mapping at load; a slice that still does
        // not fit is refused, never indexed out of bounds.
        let slot = buffer
            .map
            .bytes_mut()
            .get_mut(header.offset as usize..end as usize)
            .ok_or_else(|| Closed::BadInput(format!("{primary}: write past the mapped buffer")))?;
        match tokio::time::timeout_at(deadline, reader.read_exact(slot)).await {
            Err(_) => return Err(Closed::RequestTimeout),
            Ok(Err(error)) => {
                return Err(Closed::Io(format!("{primary}: reading payload: {error}")));
            }
            Ok(Ok(_)) => {}
        }
        buffer.high_water = buffer.high_water.max(end as usize);
    }
    metrics::counter!(crate::metrics::BACKUP_WRITTEN_BYTES).increment(u64::from(header.len));
    Ok(done)
}
