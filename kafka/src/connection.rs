//! One Kafka client connection: requests are read, guarded, decoded and dispatched in arrival
//! order on the reader (so a producer's pipelined batches are appended in order), and answered
//! in that same order by the writer, as Kafka requires, however long each takes.
//!
//! Bounds: a request's length prefix is checked against `request_bytes_max` (1 MiB for
//! anything but Produce) before its body gets memory, and that memory comes from the
//! listener's body budget; at most `requests_in_flight_max` requests of a connection are being
//! answered, beyond which the reader stops; a request must arrive whole within
//! `request_read_timeout` of its first byte, and a connection with nothing in flight is closed
//! after `idle_timeout`. A request that does not parse closes its connection, and only it.
//! On a listener that requires authentication, `authenticate` runs first, alone (the TLS
//! handshake and it share `handshake_timeout`), and the session is rechecked every
//! `session_recheck_ms` (`session_ends`). A Produce or Fetch over its principal's quota
//! (`quotas`) carries throttle_time_ms, and the reader is muted that long after queueing it.

use crate::authenticate::{Proven, authenticate};
use crate::frames::{Phase, read_frame, write_answer};
use crate::handlers::{Answer, Body, dispatch};
use crate::quotas::{ConnectionBudget, Pacing, QuotaKind};
use crate::shared::{ConnectionLimits, Kafka};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use std::sync::Arc;
use std::time::Duration;
use tailstream_auth::Principal;
use tailstream_kafka_wire::{Decoded, RequestBody, RequestHeader, decode_request};
use tailstream_net::tls::ServerTls;
use tailstream_net::{Closed, Standing};
use tailstream_net::{StreamReader, StreamWriter};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;

const READ_BUFFER_BYTES: usize = 64 * 1024;
const WRITE_BUFFER_BYTES: usize = 64 * 1024;

/// An answer on its way to the writer, holding its in-flight slot until written.
struct Queued {
    correlation_id: i32,
    answer: BoxFuture<'static, Option<Body>>,
    _slot: OwnedSemaphorePermit,
}

pub(crate) async fn serve_connection(
    tcp: TcpStream,
    tls: Option<ServerTls>,
    kafka: Arc<Kafka>,
    limits: ConnectionLimits,
    standing: Standing,
) -> Closed {
    // SSL / SASL_SSL: the TLS handshake first; it and the authentication after it share one
    // bound, `handshake_timeout` from the connection's opening.
    let handshake_deadline = Instant::now() + limits.handshake_timeout;
    let stream =
        match tailstream_net::tls::accept(tls.as_ref(), tcp, limits.handshake_timeout).await {
            Ok(stream) => stream,
            Err(refused) => return Closed::Tls(refused.to_string()),
        };
    stream.set_nodelay();
    let (read_half, write_half) = stream.into_split();
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, read_half);
    let mut out = BufWriter::with_capacity(WRITE_BUFFER_BYTES, write_half);
    // Where the listener requires it, nothing but the exchange until the client proved who
    // it is (answered one at a time, before the pipeline below starts).
    let phase = authenticate(
        &mut reader,
        &mut out,
        &kafka,
        &limits,
        &standing,
        handshake_deadline,
    );
    let proven = match phase.await {
        Ok(proven) => proven,
        Err(closed) => return closed,
    };
    let session_ends = session_ends(&kafka, &limits, &proven);
    let principal = &proven.principal;
    tracing::debug!(%principal, "kafka connection serving");
    let (queue, queued) = mpsc::unbounded_channel();
    let mut writer = tokio::spawn(write_answers(out, queued));
    let reader = read_requests(reader, &kafka, &limits, principal, queue);
    tokio::select! {
        closed = reader => {
            // The reader is done: what it dispatched is still answered, in order.
            match (&mut writer).await {
                Ok(Err(closed)) => closed,
                _ => closed,
            }
        }
        written = &mut writer => match written {
            Ok(Err(closed)) => closed,
            _ => Closed::Io("the kafka writer ended".into()),
        },
        // The user is gone: nothing more is written to it, and the socket closes now.
        closed = session_ends => {
            writer.abort();
            closed
        }
    }
}

/// Ends when the session's user no longer holds the credential it proved (deleted, or its
/// password changed), checked every `session_recheck`; never for an anonymous connection.
async fn session_ends(kafka: &Arc<Kafka>, limits: &ConnectionLimits, proven: &Proven) -> Closed {
    let (Some(auth), Principal::User(user), Some(stored_key)) =
        (&kafka.authenticator, &proven.principal, &proven.stored_key)
    else {
        return std::future::pending().await;
    };
    if limits.session_recheck.is_zero() {
        return std::future::pending().await;
    }
    loop {
        tokio::time::sleep(limits.session_recheck).await;
        if auth.still_holds(user, stored_key).await == Some(false) {
            metrics::counter!(crate::metrics::SESSIONS_REVOKED).increment(1);
            return Closed::Unauthenticated(format!(
                "{user}'s session ended: the user was deleted or its password changed"
            ));
        }
    }
}

/// Reads and dispatches requests until the peer closes, a limit is broken, or a request
/// does not parse.
async fn read_requests(
    mut reader: BufReader<StreamReader>,
    kafka: &Arc<Kafka>,
    limits: &ConnectionLimits,
    principal: &Principal,
    queue: mpsc::UnboundedSender<Queued>,
) -> Closed {
    let slots = Arc::new(Semaphore::new(limits.requests_in_flight_max.max(1)));
    // Decompression this connection's produces cost, at `decompressed_bytes_per_second`:
    // a produce waits before each batch while the connection owes (`produce::answer`).
    let mut decompression =
        ConnectionBudget::new(limits.decompressed_bytes_per_second, Instant::now());
    loop {
        // At most `requests_in_flight_max` requests being answered: stop reading beyond.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return Closed::Io("in-flight slots closed".into());
        };
        let idle = slots.available_permits() + 1 == limits.requests_in_flight_max.max(1);
        let mut size = [0u8; 4];
        // The first byte of the length prefix: idle until it comes (a connection that is
        // being answered is not idle).
        let first = if idle {
            match tokio::time::timeout(limits.idle_timeout, reader.read_u8()).await {
                Err(_) => return Closed::Idle,
                Ok(read) => read,
            }
        } else {
            reader.read_u8().await
        };
        match first {
            Ok(byte) => size[0] = byte,
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Closed::ByPeer;
            }
            Err(error) => return Closed::Io(format!("reading a request: {error}")),
        }
        let deadline = Instant::now() + limits.request_read_timeout;
        let frame = match read_frame(&mut reader, size, deadline, limits, Phase::Serving).await {
            Ok(frame) => frame,
            Err(closed) => return closed,
        };
        let (bytes, _body) = frame;
        let request_bytes = bytes.len() as u64;
        // Set for a Produce or Fetch over its principal's quota: once its answer is queued, the
        // connection is not read for this long (the client is told, in throttle_time_ms).
        let mut throttle = Duration::ZERO;
        let answer = match decode_request(bytes) {
            Ok(Decoded::Request { header, api, body }) => {
                let correlation_id = header.correlation_id;
                // Only a Produce or Fetch under a quota pays (no work for anything else).
                let kind = match &*body {
                    RequestBody::Produce(_) => Some(QuotaKind::Produce),
                    RequestBody::Fetch(_) => Some(QuotaKind::Fetch),
                    _ => None,
                }
                .filter(|kind| kafka.quotas.limits(*kind));
                let payer = kind.map(|_| quota_principal(principal, &header));
                if let (Some(kind), Some(payer)) = (kind, &payer) {
                    // A produce is charged its size now; a fetch its answer's size once built
                    // (what it owes from earlier fetches throttles this one).
                    let charged = match kind {
                        QuotaKind::Produce => request_bytes,
                        QuotaKind::Fetch | QuotaKind::Decompress => 0,
                    };
                    throttle = kafka.quotas.charge(kind, payer, charged, Instant::now());
                }
                let throttle_ms = crate::quotas::throttle_ms(throttle);
                let pacing = Pacing {
                    throttle_ms,
                    decompression: &mut decompression,
                };
                let answer = dispatch(kafka, limits, principal, header, api, *body, pacing);
                let mut answer = answer.await;
                if let (Some(QuotaKind::Fetch), Some(payer)) = (kind, payer) {
                    answer = charge_fetched(kafka.clone(), payer, answer);
                }
                if let Some(kind) = kind.filter(|_| !throttle.is_zero()) {
                    metrics::counter!(crate::metrics::THROTTLED_MS, "kind" => kind.name())
                        .increment(throttle.as_millis() as u64);
                }
                (correlation_id, answer)
            }
            Ok(Decoded::ApiVersionsFallback { header }) => (
                header.correlation_id,
                crate::handlers::api_versions::unsupported_version(),
            ),
            Err(error) => {
                metrics::counter!(crate::metrics::REQUESTS_REFUSED).increment(1);
                return Closed::BadInput(error.to_string());
            }
        };
        let (correlation_id, answer) = answer;
        let answer: BoxFuture<'static, Option<Body>> = match answer {
            Answer::Ready(body) => Box::pin(std::future::ready(Some(body))),
            Answer::Later(later) => Box::pin(async move { Some(later.await) }),
            Answer::Silent => Box::pin(std::future::ready(None)),
        };
        let queued = Queued {
            correlation_id,
            answer,
            _slot: slot,
        };
        if queue.send(queued).is_err() {
            return Closed::Io("the kafka writer is gone".into());
        }
        if !throttle.is_zero() {
            // KIP-219: the answer goes out now; the connection is muted after it.
            tokio::time::sleep(throttle).await;
        }
    }
}

/// Who pays a quota: the authenticated user, else the client id (as Kafka quotas
/// unauthenticated clients).
fn quota_principal(principal: &Principal, header: &RequestHeader) -> String {
    match principal {
        Principal::User(user) => format!("User:{user}"),
        _ => format!("client-id:{}", header.client_id.as_deref().unwrap_or("")),
    }
}

/// `answer`, charging its size to `payer`'s fetch quota once it is built.
fn charge_fetched(kafka: Arc<Kafka>, payer: String, answer: Answer) -> Answer {
    let charge = move |body: &Body| {
        if let Ok(parts) = body {
            let bytes: usize = parts.iter().map(|part| part.len()).sum();
            kafka
                .quotas
                .charge(QuotaKind::Fetch, &payer, bytes as u64, Instant::now());
        }
    };
    match answer {
        Answer::Ready(body) => {
            charge(&body);
            Answer::Ready(body)
        }
        Answer::Later(later) => Answer::Later(Box::pin(async move {
            let body = later.await;
            charge(&body);
            body
        })),
        Answer::Silent => Answer::Silent,
    }
}

/// Writes answers in request order until the reader is gone and every answer is written.
async fn write_answers(
    mut out: BufWriter<StreamWriter>,
    mut queued: mpsc::UnboundedReceiver<Queued>,
) -> Result<(), Closed> {
    let mut pending = FuturesOrdered::new();
    let mut reading = true;
    loop {
        tokio::select! {
            next = queued.recv(), if reading => match next {
                Some(Queued { correlation_id, answer, _slot }) => {
                    pending.push_back(async move { (correlation_id, answer.await, _slot) });
                }
                None => reading = false,
            },
            Some((correlation_id, body, _slot)) = pending.next(), if !pending.is_empty() => {
                match body {
                    None => {}
                    Some(Ok(parts)) => write_answer(&mut out, correlation_id, &parts).await?,
                    Some(Err(reason)) => {
                        // An answer this broker could not encode is a bug: say so and close.
                        tracing::error!(correlation_id, %reason, "kafka answer not encodable");
                        return Err(Closed::Io(format!("answer not encodable: {reason}")));
                    }
                }
                if pending.is_empty() {
                    out.flush()
                        .await
                        .map_err(|e| Closed::Io(format!("sending answers: {e}")))?;
                }
            }
            else => break,
        }
    }
    let _ = out.shutdown().await;
    Ok(())
}
