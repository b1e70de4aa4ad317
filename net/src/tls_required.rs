//! The answer a TLS-only RPC listener gives a client that spoke plain text: one error frame,
//! `Status::TlsRequired` with a message saying how to connect, so a misconfigured client fails
//! at once with a reason instead of seeing its connection reset and retrying until its
//! deadline. Only a well-formed request header is answered; anything else is just closed.

use crate::listener::Closed;
use std::time::Duration;
use tailstream_wire::Encode;
use tailstream_wire::Status;
use tailstream_wire::frame::{FRAME_HEADER_BYTES, FrameHeader};
use tailstream_wire::messages::ErrorBody;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long the refused client's request body is read and dropped after the answer, so the
/// close does not reset the connection before the client read its answer.
const DRAIN_FOR: Duration = Duration::from_secs(1);
/// The most of that body read.
const DRAIN_BYTES_MAX: usize = 1 << 20;

const MESSAGE: &str = "this listener speaks TLS only: connect with TLS (the CLI: --tls-dir DIR or \
                       $TAILSTREAM_TLS_DIR; a program: tailstream_net::tls::set_outgoing)";

/// Reads the first request header from `tcp` (within `timeout`), answers it with
/// `TlsRequired`, and closes.
pub(crate) async fn refuse_plain_text(mut tcp: TcpStream, timeout: Duration) -> Closed {
    let closed = Closed::Tls("plain text on a TLS listener: answered TlsRequired".into());
    let mut raw = [0u8; FRAME_HEADER_BYTES];
    match tokio::time::timeout(timeout, tcp.read_exact(&mut raw)).await {
        Ok(Ok(_)) => {}
        _ => return Closed::Tls("plain text on a TLS listener".into()),
    }
    let header = match FrameHeader::decode(&raw) {
        Ok(header) if !header.is_response => header,
        _ => return Closed::Tls("plain text on a TLS listener, not a request".into()),
    };
    let body = ErrorBody {
        message: MESSAGE.into(),
    }
    .to_bytes();
    let answer = FrameHeader::response(header.opcode_raw, header.request_id, Status::TlsRequired)
        .encode_for_body(&[&body]);
    let written = async {
        tcp.write_all(&answer).await?;
        tcp.write_all(&body).await?;
        tcp.shutdown().await
    };
    if tokio::time::timeout(timeout, written).await.is_err() {
        return closed;
    }
    // Lingers until the client closes, reading what it still sends (bounded).
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    let _ = tokio::time::timeout(DRAIN_FOR, async {
        while drained < DRAIN_BYTES_MAX {
            match tcp.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    })
    .await;
    closed
}
