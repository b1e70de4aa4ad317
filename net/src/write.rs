//! The writer task both sides share: frames queued by many tasks go out on one socket,
//! coalesced in a buffer and flushed when the queue runs dry.

use crate::response::Response;
use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt};
use futures::stream::{FuturesUnordered, StreamExt};
use tailstream_wire::frame::{FRAME_HEADER_BYTES, FrameHeader};
use tailstream_wire::{Opcode, RequestId};
use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{OwnedSemaphorePermit, mpsc};

const WRITE_BUFFER_BYTES: usize = 64 * 1024;

/// A frame ready to be written: its encoded header (checksums computed by the task that built
/// it, not by the writer) and its body parts.
#[derive(Debug)]
pub(crate) struct OutFrame {
    header: [u8; FRAME_HEADER_BYTES],
    parts: Vec<Bytes>,
    /// Released once the frame is written: what bounds a connection's in-flight requests.
    _permit: Option<OwnedSemaphorePermit>,
}

impl OutFrame {
    pub(crate) fn request(opcode: Opcode, request_id: RequestId, parts: Vec<Bytes>) -> Self {
        let header = FrameHeader::request(opcode, request_id);
        Self::new(header, parts, None)
    }

    pub(crate) fn response(
        opcode_raw: u16,
        request_id: RequestId,
        response: Response,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Self {
        let header = FrameHeader::response(opcode_raw, request_id, response.status);
        Self::new(header, response.parts, permit)
    }

    fn new(header: FrameHeader, parts: Vec<Bytes>, permit: Option<OwnedSemaphorePermit>) -> Self {
        let slices: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        let header = header.encode_for_body(&slices);
        Self {
            header,
            parts,
            _permit: permit,
        }
    }
}

/// Writes queued frames until every sender is gone or the socket fails.
pub(crate) async fn write_frames<W: AsyncWrite + Unpin>(
    writer: W,
    mut queue: mpsc::Receiver<OutFrame>,
) -> std::io::Result<()> {
    let mut out = BufWriter::with_capacity(WRITE_BUFFER_BYTES, writer);
    while let Some(frame) = queue.recv().await {
        write_one(&mut out, frame).await?;
        loop {
            while let Ok(frame) = queue.try_recv() {
                write_one(&mut out, frame).await?;
            }
            // Answers tend to come in bursts (one commit completes many produce requests):
            // give the tasks finishing them one turn to queue theirs, so one flush (one
            // syscall, one wake-up of the peer) carries them all.
            tokio::task::yield_now().await;
            if queue.is_empty() {
                break;
            }
        }
        out.flush().await?;
    }
    let _ = out.shutdown().await;
    Ok(())
}

/// What a server connection queues for its writer: an answer ready now, or one that only
/// waits (`Reply::Awaiting`: a produce waiting for its commit).
pub(crate) enum Outgoing {
    Frame(OutFrame),
    Later(BoxFuture<'static, OutFrame>),
}

/// The server's writer: writes ready answers, and itself drives the answers that only wait,
/// so a commit wakes this task directly (no task per request in between: one wake-up less on
/// every produce's ack path). Answers ready together go out in one flush. Ends when the
/// reader is gone and every later answer is written.
pub(crate) async fn write_answers<W: AsyncWrite + Unpin>(
    writer: W,
    mut queue: mpsc::Receiver<Outgoing>,
) -> std::io::Result<()> {
    let mut out = BufWriter::with_capacity(WRITE_BUFFER_BYTES, writer);
    // Bounded by the connection's in-flight permits, which the answers hold.
    let mut later: FuturesUnordered<BoxFuture<'static, OutFrame>> = FuturesUnordered::new();
    let mut open = true;
    loop {
        tokio::select! {
            Some(frame) = later.next(), if !later.is_empty() => write_one(&mut out, frame).await?,
            item = queue.recv(), if open => match item {
                Some(Outgoing::Frame(frame)) => write_one(&mut out, frame).await?,
                Some(Outgoing::Later(answer)) => later.push(answer),
                None => open = false,
            },
            else => break,
        }
        // Everything else ready now joins this flush; then one turn for the tasks finishing
        // answers in the same burst, as `write_frames` does.
        let mut yielded = false;
        loop {
            let mut progressed = false;
            while let Ok(item) = queue.try_recv() {
                progressed = true;
                match item {
                    Outgoing::Frame(frame) => write_one(&mut out, frame).await?,
                    Outgoing::Later(answer) => later.push(answer),
                }
            }
            while let Some(Some(frame)) = later.next().now_or_never() {
                progressed = true;
                write_one(&mut out, frame).await?;
            }
            if !progressed {
                if yielded {
                    break;
                }
                yielded = true;
                tokio::task::yield_now().await;
            }
        }
        out.flush().await?;
    }
    let _ = out.shutdown().await;
    Ok(())
}

async fn write_one<W: AsyncWrite + Unpin>(
    out: &mut BufWriter<W>,
    frame: OutFrame,
) -> std::io::Result<()> {
    out.write_all(&frame.header).await?;
    for part in &frame.parts {
        out.write_all(part).await?;
    }
    Ok(())
}
