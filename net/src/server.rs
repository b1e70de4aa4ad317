//! The server half: accept loop, per-connection reader and writer, ordered dispatch.
//!
//! Requests on one connection are handed to the [`Service`] *in arrival order*, on the
//! connection's reader task. A service does its ordering-sensitive work there (the broker
//! appends a produce request's batch) and returns either a ready [`Response`] or a future for
//! the part that waits (replication, a long-poll fetch). Pipelined produce requests of one
//! producer are therefore appended in the order they were sent, with no extra sequencing.
//!
//! Bounds: `connections_max` accepted connections (the next waits in the kernel's backlog),
//! `requests_in_flight_per_connection_max` unanswered requests per connection (the reader stops
//! reading until one is answered, which pushes back on the client through TCP), and
//! `frame_body_bytes_max` per frame, checked before the body is buffered.

use crate::write::{OutFrame, write_frames};
use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use tailstream_wire::frame::{FrameDecoder, FrameHeader};
use tailstream_wire::messages::ErrorBody;
use tailstream_wire::{Encode, Opcode, RequestId, Status};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};

/// Bytes the reader keeps free for the next socket read.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// One decoded request with a known opcode.
#[derive(Debug)]
pub struct Request {
    pub opcode: Opcode,
    pub request_id: RequestId,
    pub body: Bytes,
    pub peer: SocketAddr,
}

/// A response: a status and a body made of parts written back to back (so large payloads,
/// such as fetched entries, are sent without being copied into one buffer).
#[derive(Debug)]
pub struct Response {
    pub status: Status,
    pub parts: Vec<Bytes>,
}

impl Response {
    pub fn ok(body: &impl Encode) -> Self {
        Self {
            status: Status::Ok,
            parts: vec![body.to_bytes()],
        }
    }

    pub fn ok_parts(parts: Vec<Bytes>) -> Self {
        Self {
            status: Status::Ok,
            parts,
        }
    }

    pub fn empty() -> Self {
        Self {
            status: Status::Ok,
            parts: Vec::new(),
        }
    }

    /// An error status with a message for humans.
    pub fn error(status: Status, message: impl Into<String>) -> Self {
        debug_assert!(!status.is_ok(), "an error response needs an error status");
        Self {
            status,
            parts: vec![
                ErrorBody {
                    message: message.into(),
                }
                .to_bytes(),
            ],
        }
    }
}

/// What a service gives back for a request.
pub enum Reply {
    Ready(Response),
    /// The answer comes later; the connection keeps reading and dispatching meanwhile.
    Later(BoxFuture<'static, Response>),
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Ready(response) => f.debug_tuple("Ready").field(response).finish(),
            Reply::Later(_) => f.write_str("Later(..)"),
        }
    }
}

/// Handles requests. `dispatch` runs on the connection's reader task, so it must not block:
/// anything that waits goes into `Reply::Later`.
pub trait Service: Send + Sync + 'static {
    fn dispatch(&self, request: Request) -> Reply;
}

#[derive(Clone, Copy, Debug)]
pub struct ServerLimits {
    pub connections_max: usize,
    pub requests_in_flight_per_connection_max: usize,
    pub frame_body_bytes_max: u32,
}

/// Resolves once `shutdown` holds `true` (or its sender is gone).
pub async fn shutdown_signalled(shutdown: &mut watch::Receiver<bool>) {
    while !*shutdown.borrow_and_update() {
        if shutdown.changed().await.is_err() {
            return;
        }
    }
}

/// Waits for `shutdown`, then gives `tasks` (listeners winding down) a bounded time to end.
pub async fn run_until_shutdown(
    mut shutdown: watch::Receiver<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
) {
    shutdown_signalled(&mut shutdown).await;
    let drain = futures::future::join_all(tasks);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), drain).await;
}

/// Serves `listener` until `shutdown` turns true. Each connection runs in its own task and is
/// closed at shutdown.
pub async fn serve<S: Service>(
    listener: TcpListener,
    service: Arc<S>,
    limits: ServerLimits,
    mut shutdown: watch::Receiver<bool>,
) {
    let connections = Arc::new(Semaphore::new(limits.connections_max));
    loop {
        let permit = tokio::select! {
            permit = connections.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = shutdown_signalled(&mut shutdown) => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown_signalled(&mut shutdown) => break,
        };
        let service = service.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(reason) = serve_connection(stream, peer, service, limits, shutdown).await {
                tracing::debug!(%peer, %reason, "connection closed");
            }
        });
    }
}

async fn serve_connection<S: Service>(
    stream: TcpStream,
    peer: SocketAddr,
    service: Arc<S>,
    limits: ServerLimits,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    // Small responses (produce acks) must not wait for Nagle.
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = stream.into_split();
    let in_flight_max = limits.requests_in_flight_per_connection_max.max(1);
    let (out_tx, out_rx) = mpsc::channel::<OutFrame>(in_flight_max);
    let writer = tokio::spawn(write_frames(writer, out_rx));
    let in_flight = Arc::new(Semaphore::new(in_flight_max));
    let decoder = FrameDecoder::new(limits.frame_body_bytes_max);
    let mut buf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let outcome = 'connection: loop {
        loop {
            let frame = match decoder.decode(&mut buf) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(error) => {
                    // After a bad frame the stream cannot be resynchronised: answer if we can
                    // name the request, then close this connection (and only this one).
                    if let Some((request_id, opcode_raw, status)) = error.reply_to() {
                        let response = Response::error(status, error.to_string());
                        let frame = OutFrame::response(opcode_raw, request_id, response, None);
                        let _ = out_tx.send(frame).await;
                    }
                    break 'connection Err(format!("bad frame: {error}"));
                }
            };
            let header = frame.header;
            if header.is_response {
                break 'connection Err("peer sent a response frame to a server".to_string());
            }
            let permit = tokio::select! {
                permit = in_flight.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break 'connection Ok(()),
                },
                _ = shutdown_signalled(&mut shutdown) => break 'connection Ok(()),
            };
            let Some(opcode) = header.opcode() else {
                let response = Response::error(
                    Status::UnknownOpcode,
                    format!("unknown opcode {}", header.opcode_raw),
                );
                let out = OutFrame::response(header.opcode_raw, header.request_id, response, None);
                if out_tx.send(out).await.is_err() {
                    break 'connection Ok(());
                }
                continue;
            };
            let request = Request {
                opcode,
                request_id: header.request_id,
                body: frame.body,
                peer,
            };
            match service.dispatch(request) {
                Reply::Ready(response) => {
                    let out = respond(header, response, permit);
                    if out_tx.send(out).await.is_err() {
                        break 'connection Ok(());
                    }
                }
                Reply::Later(future) => {
                    let out_tx = out_tx.clone();
                    tokio::spawn(async move {
                        let response = future.await;
                        let _ = out_tx.send(respond(header, response, permit)).await;
                    });
                }
            }
        }
        if buf.capacity() - buf.len() < READ_CHUNK_BYTES / 4 {
            buf.reserve(READ_CHUNK_BYTES);
        }
        let read = tokio::select! {
            read = reader.read_buf(&mut buf) => read,
            _ = shutdown_signalled(&mut shutdown) => break Ok(()),
        };
        match read {
            Ok(0) => break Ok(()),
            Ok(_) => {}
            Err(error) => break Err(format!("read: {error}")),
        }
    };
    drop(out_tx);
    // Lets already-queued answers go out; the writer ends when every sender is gone.
    let _ = writer.await;
    outcome
}

fn respond(
    header: FrameHeader,
    response: Response,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> OutFrame {
    OutFrame::response(header.opcode_raw, header.request_id, response, Some(permit))
}
