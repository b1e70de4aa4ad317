//! The writer task both sides share: frames queued by many tasks go out on one socket,
//! coalesced in a buffer and flushed when the queue runs dry.

use crate::server::Response;
use bytes::Bytes;
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
