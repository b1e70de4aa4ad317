//! A Kafka connection's frames: reading one request (its length prefix checked against the
//! caps of its API and of the connection's phase before its body gets memory, from the
//! listener's budget, within its deadline) and writing one answer. Shared by `connection`
//! (serving) and `authenticate` (the exchange before it), so neither depends on the other.

use crate::shared::ConnectionLimits;
use bytes::{BufMut, Bytes, BytesMut};
use tailstream_kafka_wire::Api;
use tailstream_net::Closed;
use tailstream_net::{StreamReader, StreamWriter};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::time::Instant;

/// Requests other than Produce carry metadata only: this is plenty, and it bounds what the
/// codec allocates for them.
const CONTROL_REQUEST_BYTES_MAX: u32 = 1 << 20;
/// Before a client authenticated, only these are read, and none longer than
/// `AUTHENTICATING_REQUEST_BYTES_MAX`: an anonymous client cannot hold the body budget.
const AUTHENTICATING_APIS: &[Api] = &[Api::ApiVersions, Api::SaslHandshake, Api::SaslAuthenticate];
const AUTHENTICATING_REQUEST_BYTES_MAX: u32 = 8 * 1024;

/// Which requests a connection reads now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Not yet authenticated: the exchange's requests alone, small.
    Authenticating,
    Serving,
}

/// Reads the rest of a request (its length prefix started with `size[0]`) by `deadline`,
/// its body's memory taken from the budget first, and refused unless it fits the cap of its
/// API (read first: a body's first two bytes are its API key).
pub(crate) async fn read_frame(
    reader: &mut BufReader<StreamReader>,
    mut size: [u8; 4],
    deadline: Instant,
    limits: &ConnectionLimits,
    phase: Phase,
) -> Result<(Bytes, tailstream_net::budget::BodyPermit), Closed> {
    let io = |what: &str, error: std::io::Error| Closed::Io(format!("reading {what}: {error}"));
    match tokio::time::timeout_at(deadline, reader.read_exact(&mut size[1..])).await {
        Err(_) => return Err(Closed::RequestTimeout),
        Ok(Err(error)) => return Err(io("a request size", error)),
        Ok(Ok(_)) => {}
    }
    let length = i32::from_be_bytes(size);
    if length < 8 || length as u32 > limits.request_bytes_max {
        return Err(Closed::BadInput(format!(
            "a request of {length} bytes (between 8 and {})",
            limits.request_bytes_max
        )));
    }
    let length = length as u32;
    // Only Produce carries records: anything else is refused past 1 MiB before its body is
    // read, let alone decoded (a 16 MiB Metadata request once took a broker's memory from 128
    // to 720 MB in the decoder, because this check saw only the length's first byte).
    let mut api_key = [0u8; 2];
    match tokio::time::timeout_at(deadline, reader.read_exact(&mut api_key)).await {
        Err(_) => return Err(Closed::RequestTimeout),
        Ok(Err(error)) => return Err(io("a request's API key", error)),
        Ok(Ok(_)) => {}
    }
    let api = Api::from_key(i16::from_be_bytes(api_key));
    if phase == Phase::Authenticating {
        match api {
            Some(api) if !AUTHENTICATING_APIS.contains(&api) => {
                return Err(Closed::Unauthenticated(format!(
                    "a {} request before authenticating",
                    api.name()
                )));
            }
            None => {
                return Err(Closed::Unauthenticated(
                    "an unknown request before authenticating".into(),
                ));
            }
            Some(_) if length > AUTHENTICATING_REQUEST_BYTES_MAX => {
                return Err(Closed::BadInput(format!(
                    "a request of {length} bytes before authenticating (at most \
                     {AUTHENTICATING_REQUEST_BYTES_MAX})"
                )));
            }
            Some(_) => {}
        }
    }
    if api != Some(Api::Produce) && length > CONTROL_REQUEST_BYTES_MAX {
        return Err(Closed::BadInput(format!(
            "a request of {length} bytes for API {api:?} (at most {CONTROL_REQUEST_BYTES_MAX} \
             but for Produce)",
        )));
    }
    // Memory for the body only once the budget grants it; a stalled sender waits unread.
    let permit = match tokio::time::timeout_at(deadline, limits.budget.take(length)).await {
        Err(_) => return Err(Closed::RequestTimeout),
        Ok(None) => {
            return Err(Closed::BadInput(format!(
                "a request of {length} bytes exceeds the listener's whole body budget"
            )));
        }
        Ok(Some(permit)) => permit,
    };
    // Read into spare capacity (no zeroing), never past this request's end.
    let mut body = BytesMut::with_capacity(length as usize);
    body.extend_from_slice(&api_key);
    let read_all = async {
        while body.len() < length as usize {
            let left = length as u64 - body.len() as u64;
            if (&mut *reader).take(left).read_buf(&mut body).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(())
    };
    match tokio::time::timeout_at(deadline, read_all).await {
        Err(_) => return Err(Closed::RequestTimeout),
        Ok(Err(error)) => return Err(io("a request", error)),
        Ok(Ok(())) => {}
    }
    Ok((body.freeze(), permit))
}

/// One answer: its length, the response header (the correlation id: every version served
/// answers with header v0) and its body parts.
pub(crate) async fn write_answer(
    out: &mut BufWriter<StreamWriter>,
    correlation_id: i32,
    parts: &[Bytes],
) -> Result<(), Closed> {
    let body: usize = parts.iter().map(Bytes::len).sum();
    let length =
        i32::try_from(body + 4).map_err(|_| Closed::Io(format!("an answer of {body} bytes")))?;
    let mut head = BytesMut::with_capacity(8);
    head.put_i32(length);
    head.put_i32(correlation_id);
    let io = |e: std::io::Error| Closed::Io(format!("sending an answer: {e}"));
    out.write_all(&head).await.map_err(io)?;
    for part in parts {
        out.write_all(part).await.map_err(io)?;
    }
    Ok(())
}
