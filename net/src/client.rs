//! The client half: one TCP connection carrying many requests at once.
//!
//! A call registers a one-shot slot under a fresh request id, queues its frame to the writer
//! task and waits. The reader task matches each response to its slot. When the connection
//! dies (read error, bad frame, timeout) every waiting call fails with `RpcError::Connection`
//! and the client reports `is_closed`, so its owner (usually an `RpcPool`) reconnects. When the
//! server says `GoAway` (it closes idle connections), the client takes no new call (it reports
//! `is_closed`, and a call started now fails as never sent) but still receives the answers to
//! the calls already sent.

use crate::error::RpcError;
use crate::stream::{Stream, StreamReader};
use crate::write::{OutFrame, write_frames};
use bytes::{Bytes, BytesMut};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailstream_wire::frame::{Frame, FrameDecoder};
use tailstream_wire::messages::ErrorBody;
use tailstream_wire::{Decode, Encode, Opcode, RequestId};
use tokio::io::AsyncReadExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;

#[derive(Clone, Copy, Debug)]
pub struct RpcClientConfig {
    /// Requests awaiting an answer on this connection; more calls wait for a slot.
    pub requests_in_flight_max: usize,
    pub frame_body_bytes_max: u32,
    pub connect_timeout_ms: u64,
    /// A call with no answer after this long fails and closes the connection.
    pub request_timeout_ms: u64,
    /// When positive, a `Ping` goes out this often, so a server never closes the connection
    /// as idle (for connections whose loss costs more than a reconnect, e.g. a primary's
    /// RPC-mode replica writes). 0: none.
    pub keepalive_ms: u64,
}

impl Default for RpcClientConfig {
    fn default() -> Self {
        Self {
            requests_in_flight_max: 1024,
            frame_body_bytes_max: 64 << 20,
            connect_timeout_ms: 3000,
            request_timeout_ms: 10_000,
            keepalive_ms: 0,
        }
    }
}

type Slot = oneshot::Sender<Result<Frame, RpcError>>;
type Answer = oneshot::Receiver<Result<Frame, RpcError>>;

/// State the reader task shares with callers.
#[derive(Debug, Default)]
struct Shared {
    pending: Mutex<HashMap<u64, Slot>>,
    /// No new call may start: the connection died, or the server said `GoAway`.
    closed: AtomicBool,
}

impl Shared {
    fn fail_all(&self, error: RpcError) {
        self.closed.store(true, Ordering::Release);
        let drained: Vec<Slot> = match self.pending.lock() {
            Ok(mut pending) => pending.drain().map(|(_, slot)| slot).collect(),
            Err(poisoned) => poisoned
                .into_inner()
                .drain()
                .map(|(_, slot)| slot)
                .collect(),
        };
        for slot in drained {
            let _ = slot.send(Err(error.clone()));
        }
    }

    fn take(&self, id: u64) -> Option<Slot> {
        self.pending.lock().ok()?.remove(&id)
    }
}

#[derive(Debug)]
struct Inner {
    addr: String,
    config: RpcClientConfig,
    queue: mpsc::Sender<OutFrame>,
    shared: Arc<Shared>,
    next_id: AtomicU64,
    in_flight: Arc<Semaphore>,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A request on its way: await `wait` for the answer.
#[derive(Debug)]
pub struct PendingCall {
    client: RpcClient,
    id: u64,
    answer: Answer,
    timeout_ms: u64,
    /// Holds the request's slot in the connection's in-flight window until answered.
    _permit: OwnedSemaphorePermit,
}

impl PendingCall {
    /// The body of an `Ok` answer, or why there is none.
    pub async fn wait(self) -> Result<Bytes, RpcError> {
        let client = &self.client;
        let timeout = Duration::from_millis(self.timeout_ms);
        let frame = match tokio::time::timeout(timeout, self.answer).await {
            Ok(Ok(result)) => result?,
            Ok(Err(_)) => {
                return Err(RpcError::Connection {
                    addr: client.inner.addr.clone(),
                    reason: "connection closed before the answer".into(),
                });
            }
            Err(_) => {
                client.inner.shared.take(self.id);
                // A server that does not answer within the deadline is treated as gone: the
                // caller retries on a fresh connection rather than behind a stuck one.
                client.close("request timed out");
                let addr = client.inner.addr.clone();
                return Err(RpcError::Timeout {
                    addr,
                    timeout_ms: self.timeout_ms,
                });
            }
        };
        let status = frame.header.status();
        if status.is_ok() {
            Ok(frame.body)
        } else {
            let message = ErrorBody::decode_exact(frame.body)
                .map(|body| body.message)
                .unwrap_or_else(|_| String::from("(no message)"));
            Err(RpcError::Status { status, message })
        }
    }
}

/// A pipelined connection to one server. Cheap to clone; the connection closes when the last
/// clone is dropped.
#[derive(Clone, Debug)]
pub struct RpcClient {
    inner: Arc<Inner>,
}

impl RpcClient {
    pub async fn connect(addr: &str, config: RpcClientConfig) -> Result<Self, RpcError> {
        let failed = |reason: String| RpcError::Connection {
            addr: addr.to_string(),
            reason,
        };
        let timeout = Duration::from_millis(config.connect_timeout_ms);
        // The handshake, where TLS is on, counts against the same timeout.
        let stream = tokio::time::timeout(timeout, crate::tls::connect(addr))
            .await
            .map_err(|_| {
                failed(format!(
                    "connect timed out after {} ms",
                    config.connect_timeout_ms
                ))
            })?
            .map_err(|e| failed(e.to_string()))?;
        Ok(Self::over(stream, addr, config))
    }

    /// A client over a connection the caller made (one that needs to tell a refused connect
    /// from a slow one, say).
    pub fn over(stream: Stream, addr: &str, config: RpcClientConfig) -> Self {
        stream.set_nodelay();
        let (reader, writer) = stream.into_split();
        let in_flight_max = config.requests_in_flight_max.max(1);
        let (queue, queue_rx) = mpsc::channel(in_flight_max);
        let shared = Arc::new(Shared::default());
        let write_shared = shared.clone();
        let write_addr = addr.to_string();
        let writer = tokio::spawn(async move {
            if let Err(error) = write_frames(writer, queue_rx).await {
                let reason = format!("write: {error}");
                write_shared.fail_all(RpcError::Connection {
                    addr: write_addr,
                    reason,
                });
            }
        });
        let decoder = FrameDecoder::new(config.frame_body_bytes_max);
        let reader = tokio::spawn(read_responses(
            reader,
            decoder,
            shared.clone(),
            addr.to_string(),
        ));
        let client = Self {
            inner: Arc::new(Inner {
                addr: addr.to_string(),
                config,
                queue,
                shared,
                next_id: AtomicU64::new(1),
                in_flight: Arc::new(Semaphore::new(in_flight_max)),
                tasks: [writer, reader],
            }),
        };
        if config.keepalive_ms > 0 {
            tokio::spawn(keep_alive(
                Arc::downgrade(&client.inner),
                Duration::from_millis(config.keepalive_ms),
            ));
        }
        client
    }

    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// The connection is gone; calls fail at once. Make a new client.
    pub fn is_closed(&self) -> bool {
        self.inner.shared.closed.load(Ordering::Acquire)
    }

    /// Closes the connection: pending and future calls fail.
    pub fn close(&self, reason: &str) {
        let error = RpcError::Connection {
            addr: self.inner.addr.clone(),
            reason: reason.into(),
        };
        self.inner.shared.fail_all(error);
        for task in &self.inner.tasks {
            task.abort();
        }
    }

    /// Sends a request whose body is `parts` back to back; returns the body of an `Ok` answer.
    pub async fn call_parts(&self, opcode: Opcode, parts: Vec<Bytes>) -> Result<Bytes, RpcError> {
        let timeout_ms = self.inner.config.request_timeout_ms;
        self.call_parts_with_timeout(opcode, parts, timeout_ms)
            .await
    }

    pub async fn call_parts_with_timeout(
        &self,
        opcode: Opcode,
        parts: Vec<Bytes>,
        timeout_ms: u64,
    ) -> Result<Bytes, RpcError> {
        let permit = self
            .inner
            .in_flight
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| self.closed_error())?;
        let (id, answer, frame) = self.register(opcode, parts)?;
        if self.inner.queue.send(frame).await.is_err() {
            self.inner.shared.take(id);
            return Err(self.closed_error());
        }
        PendingCall {
            client: self.clone(),
            id,
            answer,
            timeout_ms,
            _permit: permit,
        }
        .wait()
        .await
    }

    /// Queues a request *now*, without waiting, or fails at once with `RpcError::Busy` when the
    /// connection has no free slot. Calls started one after another from one task reach the
    /// server in that order (the producer relies on it to keep a streamlet's batches ordered).
    pub fn try_start(&self, opcode: Opcode, parts: Vec<Bytes>) -> Result<PendingCall, RpcError> {
        let busy = || RpcError::Busy {
            addr: self.inner.addr.clone(),
        };
        let permit = self
            .inner
            .in_flight
            .clone()
            .try_acquire_owned()
            .map_err(|_| busy())?;
        let (id, answer, frame) = self.register(opcode, parts)?;
        if let Err(error) = self.inner.queue.try_send(frame) {
            self.inner.shared.take(id);
            return Err(match error {
                mpsc::error::TrySendError::Full(_) => busy(),
                mpsc::error::TrySendError::Closed(_) => self.closed_error(),
            });
        }
        let timeout_ms = self.inner.config.request_timeout_ms;
        Ok(PendingCall {
            client: self.clone(),
            id,
            answer,
            timeout_ms,
            _permit: permit,
        })
    }

    fn closed_error(&self) -> RpcError {
        RpcError::Connection {
            addr: self.inner.addr.clone(),
            reason: "connection closed (the request was not sent)".into(),
        }
    }

    /// Allocates a request id and its answer slot, and builds the frame.
    fn register(
        &self,
        opcode: Opcode,
        parts: Vec<Bytes>,
    ) -> Result<(u64, Answer, OutFrame), RpcError> {
        let inner = &self.inner;
        if self.is_closed() {
            return Err(self.closed_error());
        }
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (slot, answer) = oneshot::channel();
        inner
            .shared
            .pending
            .lock()
            .map_err(|_| self.closed_error())?
            .insert(id, slot);
        // The reader may have failed everything between the check above and the insert.
        if self.is_closed() {
            inner.shared.take(id);
            return Err(self.closed_error());
        }
        Ok((id, answer, OutFrame::request(opcode, RequestId(id), parts)))
    }

    /// Encodes `request`, calls, decodes the answer.
    pub async fn call<Req: Encode, Resp: Decode>(
        &self,
        opcode: Opcode,
        request: &Req,
    ) -> Result<Resp, RpcError> {
        let body = self.call_parts(opcode, vec![request.to_bytes()]).await?;
        Ok(Resp::decode_exact(body)?)
    }
}

/// Pings through the connection every `period` while any clone of its client lives.
async fn keep_alive(inner: std::sync::Weak<Inner>, period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let client = RpcClient { inner };
        if client.is_closed() {
            return;
        }
        let Ok(call) = client.try_start(Opcode::Ping, Vec::new()) else {
            continue;
        };
        drop(client);
        let _ = call.wait().await;
    }
}

async fn read_responses(
    mut reader: StreamReader,
    decoder: FrameDecoder,
    shared: Arc<Shared>,
    addr: String,
) {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let reason = 'read: loop {
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    if !frame.header.is_response {
                        break 'read "server sent a request frame".to_string();
                    }
                    // Request ids start at 1: id 0 is the server speaking unasked.
                    if frame.header.request_id.0 == 0
                        && frame.header.opcode() == Some(Opcode::GoAway)
                    {
                        // Calls already sent are still answered; new ones go elsewhere.
                        shared.closed.store(true, Ordering::Release);
                        continue;
                    }
                    // An unknown id belongs to a call that timed out: drop the late answer.
                    if let Some(slot) = shared.take(frame.header.request_id.0) {
                        let _ = slot.send(Ok(frame));
                    }
                }
                Ok(None) => break,
                Err(error) => break 'read format!("bad frame from server: {error}"),
            }
        }
        // Room for a large answer (bounded by `frame_body_bytes_max`), else for the next read.
        let needed = match decoder.peek(&buf) {
            Ok(Some(header)) => header.frame_bytes().saturating_sub(buf.len()),
            _ => 0,
        };
        if needed > buf.capacity() - buf.len() {
            buf.reserve(needed);
        } else if buf.capacity() - buf.len() < 16 * 1024 {
            buf.reserve(64 * 1024);
        }
        match reader.read_buf(&mut buf).await {
            Ok(0) => break "closed by server".to_string(),
            Ok(_) => {}
            Err(error) => break format!("read: {error}"),
        }
    };
    shared.fail_all(RpcError::Connection { addr, reason });
}
