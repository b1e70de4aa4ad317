//! The server half: per-connection reader and writer, ordered dispatch, and every bound a
//! peer could otherwise push against.
//!
//! Requests on one connection are handed to the [`Service`] *in arrival order*, on the
//! connection's reader task. A service does its ordering-sensitive work there (the broker
//! appends a produce request's batch) and returns either a ready [`Response`] or a future for
//! the part that waits (replication, a long-poll fetch). Pipelined produce requests of one
//! producer are therefore appended in the order they were sent, with no extra sequencing.
//!
//! Bounds, all in [`ServerLimits`]:
//! - connections in total and per remote address (the shared accept loop, `listener`);
//! - `requests_in_flight_per_connection_max` unanswered requests per connection (the reader
//!   stops reading until one is answered, which pushes back on the client through TCP);
//! - `frame_body_bytes_max` per frame, checked before the body is buffered;
//! - a frame must arrive whole within `request_read_timeout` of its first byte (slowloris);
//! - a body larger than the standing read buffer is given room only after its bytes were
//!   taken from the listener's [`BodyBudget`] (stalled partial bodies cannot pile up memory);
//! - a connection with nothing in flight and nothing received for `idle_timeout` is sent a
//!   `GoAway` and closed once requests that crossed it are answered, so no request is lost to
//!   an idle close.

use crate::budget::{BodyBudget, BodyPermit};
use crate::listener::{Closed, ConnectionLimits, accept_loop_authenticating};
use crate::session::{Authentication, Session};
use crate::write::{OutFrame, Outgoing, write_answers};
use bytes::{Bytes, BytesMut};
use futures::future::{BoxFuture, FutureExt};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tailstream_wire::frame::{FrameDecoder, FrameHeader};
use tailstream_wire::{Opcode, RequestId, Status};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::Instant;

pub use crate::listener::shutdown_signalled;

mod authentication;

pub use crate::response::Response;

use authentication::{UNPROVEN_BODY_BYTES_MAX, too_large_before_authenticating};

/// Bytes the reader keeps free for the next socket read; a frame up to this size is read into
/// this standing buffer (reused from frame to frame) without touching the body budget. Large
/// enough for the producer's default 64 KiB batches, so the common produce frame costs no
/// allocation; a larger frame gets one of its own, from the budget.
const READ_CHUNK_BYTES: usize = 128 * 1024;
/// After a `GoAway`, how long requests that crossed it still get answered.
const GO_AWAY_GRACE: Duration = Duration::from_secs(1);
/// How long a closing connection waits for its queued answers to be written.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// One decoded request with a known opcode.
#[derive(Debug)]
pub struct Request {
    pub opcode: Opcode,
    pub request_id: RequestId,
    pub body: Bytes,
    pub peer: SocketAddr,
    /// Who the connection is (the user it authenticated as, where the listener requires it).
    pub session: Arc<Session>,
}

/// What a service gives back for a request.
pub enum Reply {
    Ready(Response),
    /// The answer comes later; the connection keeps reading and dispatching meanwhile. The
    /// future runs in a task of its own, to the end, even if the connection closes first.
    Later(BoxFuture<'static, Response>),
    /// The answer only waits for something (a produce for its commit): the future holds no
    /// lock and does no work a client would miss if it were dropped. The connection's writer
    /// drives it, which saves a task and a wake-up per request; it is dropped with the
    /// connection, and is not polled while the writer waits on a slow socket.
    Awaiting(BoxFuture<'static, Response>),
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Ready(response) => f.debug_tuple("Ready").field(response).finish(),
            Reply::Later(_) => f.write_str("Later(..)"),
            Reply::Awaiting(_) => f.write_str("Awaiting(..)"),
        }
    }
}

/// Handles requests. `dispatch` runs on the connection's reader task, so it must not block:
/// anything that waits goes into `Reply::Later`.
pub trait Service: Send + Sync + 'static {
    fn dispatch(&self, request: Request) -> Reply;

    /// Whether a connection that has not authenticated yet may send `opcode` (on a listener
    /// that requires authentication): a request that carries a credential of its own, such as
    /// the admin token. `Ping` and `Authenticate` always may.
    fn open_before_authentication(&self, _opcode: Opcode) -> bool {
        false
    }
}

/// Everything a listener bounds. Cheap to clone (the budget is shared).
#[derive(Clone, Debug)]
pub struct ServerLimits {
    pub connections: ConnectionLimits,
    pub requests_in_flight_per_connection_max: usize,
    pub frame_body_bytes_max: u32,
    /// A connection with no request in flight that sends nothing for this long is closed.
    pub idle_timeout: Duration,
    /// Once a frame's first byte arrived, the whole frame must arrive within this long.
    pub request_read_timeout: Duration,
    pub body_budget: BodyBudget,
    /// TLS on this listener (a peer listener's acceptor requires a member's certificate);
    /// `None`: plain TCP. The handshake must end within `request_read_timeout`.
    pub tls: Option<crate::tls::ServerTls>,
    /// Where clients must authenticate (`security.client_authentication`); `None`: anyone
    /// may send anything, and `Authenticate` is answered `NotRequired`.
    pub authentication: Option<Authentication>,
}

/// Waits for `shutdown`, then gives `tasks` (listeners winding down) a bounded time to end.
pub async fn run_until_shutdown(
    mut shutdown: watch::Receiver<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
) {
    shutdown_signalled(&mut shutdown).await;
    let drain = futures::future::join_all(tasks);
    let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
}

/// Serves `listener` (named `name` in metrics and logs) until `shutdown` turns true.
pub async fn serve<S: Service>(
    listener: tokio::net::TcpListener,
    name: &'static str,
    service: Arc<S>,
    limits: ServerLimits,
    shutdown: watch::Receiver<bool>,
) {
    let connections = limits.connections;
    let authenticating = limits.authentication.is_some();
    let limits = Arc::new(limits);
    accept_loop_authenticating(
        listener,
        name,
        connections,
        shutdown,
        authenticating,
        move |stream, peer, standing| {
            let standing = authenticating.then_some(standing);
            authentication::serve_connection(
                stream,
                peer,
                service.clone(),
                limits.clone(),
                standing,
            )
        },
    )
    .await;
}

async fn serve_session<S: Service>(
    tcp: TcpStream,
    peer: SocketAddr,
    service: Arc<S>,
    limits: Arc<ServerLimits>,
    session: Arc<Session>,
) -> Closed {
    let stream = match crate::tls::accept(limits.tls.as_ref(), tcp, limits.request_read_timeout)
        .await
    {
        Ok(stream) => stream,
        Err(crate::tls::Refused::PlainText(tcp)) => {
            return crate::tls_required::refuse_plain_text(tcp, limits.request_read_timeout).await;
        }
        Err(refused) => return Closed::Tls(refused.to_string()),
    };
    // Small responses (produce acks) must not wait for Nagle.
    stream.set_nodelay();
    let (reader, writer) = stream.into_split();
    let in_flight_max = limits.requests_in_flight_per_connection_max.max(1);
    // One slot more than requests in flight: room for a GoAway.
    let (out_tx, out_rx) = mpsc::channel::<Outgoing>(in_flight_max + 1);
    // Ended with the connection however it ends: drained below when the reader returns, and
    // aborted if this future is dropped first (a handshake deadline, a revoked session,
    // eviction, shutdown), so a writer stuck on a client that reads nothing never outlives it.
    let mut writer = AbortOnDrop(tokio::spawn(write_answers(writer, out_rx)));
    let mut connection = Connection {
        reader,
        out_tx,
        in_flight: Arc::new(Semaphore::new(in_flight_max)),
        in_flight_max,
        decoder: FrameDecoder::new(limits.frame_body_bytes_max),
        buf: BytesMut::with_capacity(READ_CHUNK_BYTES),
        body: None,
        peer,
        limits: limits.clone(),
        session,
        muted_lately: false,
    };
    let closed = connection.run(&*service).await;
    drop(connection);
    // Lets already-queued answers go out; the writer ends when every sender is gone (or is
    // aborted past the drain timeout, as the guard is dropped).
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, &mut writer.0).await;
    closed
}

/// A task aborted when this is dropped (aborting a finished task does nothing).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One connection's reader side.
struct Connection {
    reader: crate::stream::StreamReader,
    out_tx: mpsc::Sender<Outgoing>,
    in_flight: Arc<Semaphore>,
    in_flight_max: usize,
    decoder: FrameDecoder,
    buf: BytesMut,
    /// Budget held for the large frame being received into `buf`.
    body: Option<BodyPermit>,
    peer: SocketAddr,
    limits: Arc<ServerLimits>,
    session: Arc<Session>,
    /// Set when the reader slept out a mute, so the partial frame's deadline starts again.
    muted_lately: bool,
}

impl Connection {
    fn busy(&self) -> bool {
        self.in_flight.available_permits() < self.in_flight_max
    }

    async fn run<S: Service>(&mut self, service: &S) -> Closed {
        let limits = self.limits.clone();
        let mut idle_deadline = Instant::now() + limits.idle_timeout;
        // Deadline of the partial frame at the front of `buf`, set when its first byte came.
        let mut frame_deadline: Option<Instant> = None;
        // Set once a GoAway was sent: when the connection may close.
        let mut going_away: Option<Instant> = None;
        // One timer for the connection's life. It is moved earlier when a deadline comes
        // closer, and otherwise only re-armed when it fires: deadlines that move later with
        // every read (the idle one) cost nothing per request.
        let mut armed = idle_deadline;
        let timer = tokio::time::sleep_until(armed);
        tokio::pin!(timer);
        loop {
            match self.dispatch_whole_frames(service).await {
                Ok(0) => {}
                Ok(_) => idle_deadline = Instant::now() + limits.idle_timeout,
                Err(closed) => return closed,
            }
            if std::mem::take(&mut self.muted_lately) {
                // The time the server chose not to read is not the client's: a partial frame
                // gets its whole deadline from now.
                frame_deadline = None;
            }
            if self.buf.is_empty() {
                frame_deadline = None;
            } else if frame_deadline.is_none() {
                frame_deadline = Some(Instant::now() + limits.request_read_timeout);
            }
            if let Err(closed) = self.make_room(frame_deadline).await {
                return closed;
            }
            let deadline = frame_deadline.or(going_away).unwrap_or(idle_deadline);
            if deadline < armed {
                armed = deadline;
                timer.as_mut().reset(armed);
            }
            let read = tokio::select! {
                read = self.reader.read_buf(&mut self.buf) => Some(read),
                _ = &mut timer => None,
            };
            match read {
                Some(Ok(0)) => return Closed::ByPeer,
                Some(Ok(_)) => idle_deadline = Instant::now() + limits.idle_timeout,
                Some(Err(error)) => return Closed::Io(format!("read: {error}")),
                None if Instant::now() < deadline => {
                    // Fired for a deadline that has since moved later: wait for the new one.
                    armed = deadline;
                    timer.as_mut().reset(armed);
                }
                None if frame_deadline.is_some() => return Closed::RequestTimeout,
                None if self.busy() => {
                    // Requests are still being answered: not idle (a long-poll, a produce
                    // waiting for its replicas). Look again later.
                    idle_deadline = Instant::now() + limits.idle_timeout;
                    if going_away.is_some() {
                        going_away = Some(Instant::now() + GO_AWAY_GRACE);
                    }
                }
                None if going_away.is_some() => return Closed::Idle,
                None => {
                    // Idle: tell the client to use a new connection for what comes next, and
                    // answer whatever it sent before it read this.
                    let go_away = OutFrame::response(
                        Opcode::GoAway as u16,
                        RequestId(0),
                        Response::empty(),
                        None,
                    );
                    if self.out_tx.try_send(Outgoing::Frame(go_away)).is_err() {
                        return Closed::Idle;
                    }
                    going_away = Some(Instant::now() + GO_AWAY_GRACE);
                }
            }
            if Instant::now() >= armed {
                // The timer fired (or is due): arm it for whatever comes next.
                armed = frame_deadline.or(going_away).unwrap_or(idle_deadline);
                timer.as_mut().reset(armed);
            }
        }
    }

    /// Dispatches every whole frame at the front of `buf`; returns how many.
    async fn dispatch_whole_frames<S: Service>(&mut self, service: &S) -> Result<usize, Closed> {
        let mut dispatched = 0;
        loop {
            // A throttled connection is not read (nor are frames it already sent dispatched)
            // until its mute has passed; what it is owed meanwhile goes out.
            if let Some(until) = self.session.take_mute() {
                tokio::time::sleep_until(until).await;
                self.muted_lately = true;
            }
            let frame = match self.decoder.decode(&mut self.buf) {
                Ok(Some(frame)) => frame,
                Ok(None) => return Ok(dispatched),
                Err(error) => {
                    // After a bad frame the stream cannot be resynchronised: answer if we can
                    // name the request, then close this connection (and only this one).
                    if let Some((request_id, opcode_raw, status)) = error.reply_to() {
                        let response = Response::error(status, error.to_string());
                        let frame = OutFrame::response(opcode_raw, request_id, response, None);
                        let _ = self.out_tx.try_send(Outgoing::Frame(frame));
                    }
                    return Err(Closed::BadInput(format!("bad frame: {error}")));
                }
            };
            // The body is now the frame's: its bytes leave the budget once it is dispatched.
            let _body = self.body.take();
            if self.unproven() && frame.header.body_len > UNPROVEN_BODY_BYTES_MAX {
                return Err(too_large_before_authenticating(frame.header.body_len));
            }
            dispatched += 1;
            let header = frame.header;
            if header.is_response {
                return Err(Closed::BadInput(
                    "peer sent a response frame to a server".into(),
                ));
            }
            let Ok(permit) = self.in_flight.clone().acquire_owned().await else {
                return Err(Closed::Shutdown);
            };
            let Some(opcode) = header.opcode() else {
                let response = Response::error(
                    Status::UnknownOpcode,
                    format!("unknown opcode {}", header.opcode_raw),
                );
                self.queue(Outgoing::Frame(respond(header, response, permit)))
                    .await?;
                continue;
            };
            if opcode == Opcode::Authenticate {
                let (response, then_closed) = self.authenticate(frame.body).await?;
                self.queue(Outgoing::Frame(respond(header, response, permit)))
                    .await?;
                match then_closed {
                    Some(closed) => return Err(closed),
                    None => continue,
                }
            }
            if let Some(response) = self.refused_before_authentication(opcode, service) {
                self.queue(Outgoing::Frame(respond(header, response, permit)))
                    .await?;
                continue;
            }
            let request = Request {
                opcode,
                request_id: header.request_id,
                body: frame.body,
                peer: self.peer,
                session: self.session.clone(),
            };
            match service.dispatch(request) {
                Reply::Ready(response) => {
                    self.queue(Outgoing::Frame(respond(header, response, permit)))
                        .await?;
                }
                Reply::Later(future) => {
                    let out_tx = self.out_tx.clone();
                    tokio::spawn(async move {
                        let response = future.await;
                        let answer = respond(header, response, permit);
                        let _ = out_tx.send(Outgoing::Frame(answer)).await;
                    });
                }
                Reply::Awaiting(future) => {
                    // The writer drives it: the answer's wake-up is the writer's own.
                    let answer =
                        Box::pin(future.map(move |response| respond(header, response, permit)));
                    self.queue(Outgoing::Later(answer)).await?;
                }
            }
        }
    }

    /// Hands `out` to the writer (waiting while its queue is full).
    async fn queue(&self, out: Outgoing) -> Result<(), Closed> {
        self.out_tx
            .send(out)
            .await
            .map_err(|_| Closed::Io("writer gone".into()))
    }

    /// Makes room in `buf` for what comes next. A frame larger than the standing buffer gets
    /// its own allocation of exactly its size, and only after its body bytes were taken from
    /// the budget (waiting at most until the frame's deadline).
    async fn make_room(&mut self, frame_deadline: Option<Instant>) -> Result<(), Closed> {
        // `decode` just ran on this buffer, so a header here was already verified.
        let header = self.decoder.peek(&self.buf).ok().flatten();
        // Before authenticating, a connection gets no budgeted memory: only small frames (an
        // exchange's steps, a token-carrying user operation) are read at all.
        if let Some(header) = &header
            && self.unproven()
            && header.body_len > UNPROVEN_BODY_BYTES_MAX
        {
            return Err(too_large_before_authenticating(header.body_len));
        }
        let Some(header) = header.filter(|h| h.frame_bytes() > self.buf.capacity()) else {
            if self.buf.capacity() - self.buf.len() < READ_CHUNK_BYTES / 4 {
                self.buf.reserve(READ_CHUNK_BYTES);
            }
            return Ok(());
        };
        if header.frame_bytes() > READ_CHUNK_BYTES && self.body.is_none() {
            let deadline = frame_deadline.unwrap_or_else(Instant::now);
            let taken = tokio::select! {
                taken = self.limits.body_budget.take(header.body_len) => taken,
                _ = tokio::time::sleep_until(deadline) => return Err(Closed::RequestTimeout),
            };
            let Some(taken) = taken else {
                return Err(Closed::BadInput(format!(
                    "a {}-byte body exceeds the whole body budget",
                    header.body_len
                )));
            };
            self.body = Some(taken);
        }
        let mut frame = BytesMut::with_capacity(header.frame_bytes());
        frame.extend_from_slice(&self.buf);
        self.buf = frame;
        Ok(())
    }
}

fn respond(
    header: FrameHeader,
    response: Response,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> OutFrame {
    OutFrame::response(header.opcode_raw, header.request_id, response, Some(permit))
}
