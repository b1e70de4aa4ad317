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
//!
//! Each connection is served by a thread of its own (`tailstream-nic`, one per primary that
//! writes here, bounded by the listener's connection caps) doing plain blocking reads: the
//! way a NIC's own engine would, and what Tailwind asks of a backup's CPU. A write costs the
//! kernel's copy into place and a few instructions, with no async runtime, timer or task
//! wake-up in between (on the async workers, those were most of a backup's user CPU on the
//! write path). The thread's socket wakes at least every `wake_interval` so that deadlines are
//! checked without a syscall per write to arm them.

use super::store::BackupStore;
use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_net::{Closed, ConnectionLimits, accept_loop};
use tailstream_wire::nic::{Completion, HELLO_BYTES, Hello, WRITE_HEADER_BYTES, WriteHeader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

/// Small on purpose: headers are read through it, but a payload larger than what it holds is
/// read from the socket straight into the replica buffer, not copied through it. It is also
/// the only memory a connection holds: payloads land in pool buffers that already exist, so
/// the NIC needs no body budget.
const NIC_READ_BUFFER_BYTES: usize = 4 * 1024;
/// Completions are small; a burst of them goes out in one write.
const NIC_WRITE_BUFFER_BYTES: usize = 4 * 1024;
/// The longest a blocked read waits before the thread checks its deadlines again.
const WAKE_INTERVAL_MAX: Duration = Duration::from_millis(250);

#[derive(Clone, Copy, Debug)]
pub struct NicLimits {
    pub connections: ConnectionLimits,
    /// The hello, and each write (header and payload) once its first byte arrived, must
    /// arrive within this long.
    pub write_timeout: Duration,
    /// A connection that sends nothing for this long is closed (primaries send keepalives).
    pub idle_timeout: Duration,
}

impl NicLimits {
    /// How often a blocked read returns to look at the clock: fine enough that a deadline is
    /// enforced within a fraction of itself.
    fn wake_interval(&self) -> Duration {
        (self.write_timeout.min(self.idle_timeout) / 4)
            .clamp(Duration::from_millis(1), WAKE_INTERVAL_MAX)
    }
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

/// Shuts the socket down when the connection's future is dropped (the accept loop's shutdown),
/// so that its thread's blocked read returns and the thread ends.
struct ShutdownOnDrop(std::net::TcpStream);

impl Drop for ShutdownOnDrop {
    fn drop(&mut self) {
        let _ = self.0.shutdown(Shutdown::Both);
    }
}

/// Hands the connection to a thread of its own and waits for it to end.
async fn serve_connection(stream: TcpStream, store: Arc<BackupStore>, limits: NicLimits) -> Closed {
    let _ = stream.set_nodelay(true);
    let socket = match stream.into_std() {
        Ok(socket) => socket,
        Err(error) => return Closed::Io(format!("taking the socket: {error}")),
    };
    let prepared = socket
        .set_nonblocking(false)
        .and_then(|()| socket.set_read_timeout(Some(limits.wake_interval())))
        .and_then(|()| socket.try_clone());
    let closer = match prepared {
        Ok(clone) => ShutdownOnDrop(clone),
        Err(error) => return Closed::Io(format!("preparing the socket: {error}")),
    };
    let (done, ended) = oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("tailstream-nic".into())
        .spawn(move || {
            let closed = Connection::new(socket, limits).serve(&store);
            let _ = done.send(closed);
        });
    if let Err(error) = spawned {
        return Closed::Io(format!("starting a nic thread: {error}"));
    }
    let closed = ended
        .await
        .unwrap_or_else(|_| Closed::Io("the nic thread ended without a word".into()));
    drop(closer);
    closed
}

/// One primary's connection, served by blocking reads on its own thread.
struct Connection {
    socket: std::net::TcpStream,
    limits: NicLimits,
    /// Bytes read ahead of what was consumed: `buf[start..end]`.
    buf: Box<[u8; NIC_READ_BUFFER_BYTES]>,
    start: usize,
    end: usize,
    completions: Vec<u8>,
    written: metrics::Counter,
}

impl Connection {
    fn new(socket: std::net::TcpStream, limits: NicLimits) -> Self {
        Self {
            socket,
            limits,
            buf: Box::new([0; NIC_READ_BUFFER_BYTES]),
            start: 0,
            end: 0,
            completions: Vec::with_capacity(NIC_WRITE_BUFFER_BYTES),
            written: metrics::counter!(crate::metrics::BACKUP_WRITTEN_BYTES),
        }
    }

    fn serve(mut self, store: &BackupStore) -> Closed {
        let mut raw_hello = [0u8; HELLO_BYTES];
        let deadline = Instant::now() + self.limits.write_timeout;
        if let Err(closed) = self.read_exact(&mut raw_hello, deadline, "hello") {
            return closed;
        }
        let primary = match Hello::decode(&raw_hello) {
            // Checked before the primary it names is believed: a stranger's hello must not
            // fence a live primary by naming a newer generation of it.
            Ok(hello) if store.nic_tickets().admits(hello.primary, hello.ticket) => hello.primary,
            Ok(hello) => {
                return Closed::Unauthenticated(format!(
                    "a NIC hello for {} without the ticket this backup granted it",
                    hello.primary
                ));
            }
            Err(error) => return Closed::BadInput(error.to_string()),
        };
        if let Err(error) = store.check_primary(primary) {
            return Closed::BadInput(error.to_string());
        }
        loop {
            // Completions go out only when no further write is already here, so a pipelining
            // primary gets them batched.
            if self.start == self.end
                && let Err(closed) = self.flush_completions()
            {
                return closed;
            }
            // Idle until the next write's first byte; from then on its deadline runs.
            match self.fill(Instant::now() + self.limits.idle_timeout) {
                Ok(true) => {}
                Ok(false) => return Closed::ByPeer,
                Err(Waited::Deadline) => return Closed::Idle,
                Err(Waited::Failed(error)) => {
                    return Closed::Io(format!("reading write header: {error}"));
                }
            }
            let deadline = Instant::now() + self.limits.write_timeout;
            let completion = match self.write_one(store, primary, deadline) {
                Ok(completion) => completion,
                Err(closed) => return closed,
            };
            self.completions.extend_from_slice(&completion.encode());
            if self.completions.len() >= NIC_WRITE_BUFFER_BYTES
                && let Err(closed) = self.flush_completions()
            {
                return closed;
            }
        }
    }

    /// Reads one write (header, then payload straight into its buffer) by `deadline`.
    fn write_one(
        &mut self,
        store: &BackupStore,
        primary: tailstream_wire::ServerId,
        deadline: Instant,
    ) -> Result<Completion, Closed> {
        let mut raw = [0u8; WRITE_HEADER_BYTES];
        self.read_exact(&mut raw, deadline, "write header")?;
        let header =
            WriteHeader::decode(&raw).map_err(|e| Closed::BadInput(format!("{primary}: {e}")))?;
        let done = Completion {
            write_id: header.write_id,
            status: 0,
        };
        if header.is_keepalive() {
            return Ok(done);
        }
        let replica = store.writer_for(header.key, primary).map_err(|e| {
            Closed::BadInput(format!("{primary}: write to key {}: {e}", header.key))
        })?;
        let end = header.end_within(replica.capacity_bytes).ok_or_else(|| {
            Closed::BadInput(format!(
                "{primary}: write of {} at {} past the buffer's end",
                header.len, header.offset
            ))
        })?;
        {
            // This thread is not a runtime worker: blocking on the buffer's lock is allowed
            // here, and only a close of this replica can hold it.
            let mut guard = replica.buffer.blocking_lock();
            let buffer = guard.as_mut().and_then(|b| b.pool_mut()).ok_or_else(|| {
                Closed::BadInput(format!(
                    "{primary}: write to closed replica {:?}",
                    replica.id
                ))
            })?;
            // The claim's capacity was checked against the mapping at load; a slice that still
            // does not fit is refused, never indexed out of bounds.
            let slot = buffer
                .map
                .bytes_mut()
                .get_mut(header.offset as usize..end as usize)
                .ok_or_else(|| {
                    Closed::BadInput(format!("{primary}: write past the mapped buffer"))
                })?;
            self.read_exact(slot, deadline, "payload")
                .map_err(|closed| match closed {
                    Closed::Io(error) => Closed::Io(format!("{primary}: {error}")),
                    other => other,
                })?;
            buffer.high_water = buffer.high_water.max(end as usize);
        }
        self.written.increment(u64::from(header.len));
        Ok(done)
    }

    /// Fills `out` from what is buffered, then from the socket: a large `out` (a payload) is
    /// read into directly, a small one (a header) through the buffer.
    fn read_exact(&mut self, out: &mut [u8], deadline: Instant, what: &str) -> Result<(), Closed> {
        let mut at = 0;
        while at < out.len() {
            if self.start < self.end {
                let n = (self.end - self.start).min(out.len() - at);
                out[at..at + n].copy_from_slice(&self.buf[self.start..self.start + n]);
                self.start += n;
                at += n;
                continue;
            }
            // Checked before every read, not only when one times out: a peer trickling a
            // byte at a time must not stretch a write past its deadline.
            if Instant::now() >= deadline {
                return Err(Closed::RequestTimeout);
            }
            let outcome = if out.len() - at >= NIC_READ_BUFFER_BYTES {
                read_by(&mut self.socket, &mut out[at..], deadline).inspect(|n| at += n)
            } else {
                self.fill(deadline).map(usize::from)
            };
            match outcome {
                Ok(0) => return Err(Closed::Io(format!("reading {what}: connection closed"))),
                Ok(_) => {}
                Err(Waited::Deadline) => return Err(Closed::RequestTimeout),
                Err(Waited::Failed(error)) => {
                    return Err(Closed::Io(format!("reading {what}: {error}")));
                }
            }
        }
        Ok(())
    }

    /// Reads into the (empty) buffer; `Ok(false)` at the end of the stream.
    fn fill(&mut self, deadline: Instant) -> Result<bool, Waited> {
        if self.start < self.end {
            return Ok(true);
        }
        let n = read_by(&mut self.socket, &mut self.buf[..], deadline)?;
        self.start = 0;
        self.end = n;
        Ok(n > 0)
    }

    fn flush_completions(&mut self) -> Result<(), Closed> {
        if self.completions.is_empty() {
            return Ok(());
        }
        let sent = self.socket.write_all(&self.completions);
        self.completions.clear();
        sent.map_err(|error| Closed::Io(format!("sending completions: {error}")))
    }
}

/// Why a read returned nothing.
enum Waited {
    Deadline,
    Failed(std::io::Error),
}

/// One `read` that returns what arrived (0 at the end of the stream), retrying the socket's
/// periodic time-outs until `deadline`.
fn read_by(
    socket: &mut std::net::TcpStream,
    out: &mut [u8],
    deadline: Instant,
) -> Result<usize, Waited> {
    loop {
        match socket.read(out) {
            Ok(n) => return Ok(n),
            Err(error)
                if matches!(
                    error.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                if Instant::now() >= deadline {
                    return Err(Waited::Deadline);
                }
            }
            Err(error) => return Err(Waited::Failed(error)),
        }
    }
}
