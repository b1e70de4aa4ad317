//! The producer: batch records per streamlet, ship batches pipelined, retry idempotently.
//!
//! ```text
//! send ──► accumulator (open batch per streamlet; seal by size) ──► sender task
//!            ▲ linger timer seals partial batches ─────────────────┘  │
//!            │                                   lanes (sequence, window, retries)
//!  AckFuture ◄─────────────── batch cell settled by the broker's answer ◄┘
//! ```
//! - `accumulator`: open batches and routing (by key hash, or round-robin by batch).
//! - `lane`: per-streamlet sequence numbers, in-flight window and retry state machine (pure).
//! - `sender`: the task that drives the lanes and owns the broker connections.
//! - `ack`: per-batch ack cells and per-record ack futures.
//! - [`builder`]: [`ProducerBuilder`], the producer's settings.

mod accumulator;
mod ack;
pub mod builder;
mod lane;
mod sender;

use crate::cluster::Cluster;
use crate::error::ClientError;
use accumulator::{Accumulator, PendingRecord};
pub use ack::{AckFuture, RecordAck, RecordLocation};
pub use builder::ProducerBuilder;
use sender::{Command, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tailstream_config::ProducerConfig;
use tailstream_wire::batch::{BATCH_HEADER_BYTES, PRODUCE_BATCH_BYTES_MAX};
use tailstream_wire::messages::StreamMetadata;
use tailstream_wire::{ProducerId, StreamletId};
use tokio::sync::{Notify, Semaphore, mpsc};

/// Commands (flushes) queued to the sender task before the caller waits.
const COMMANDS_MAX: usize = 64;
/// Producer buffer bytes `send` takes from the buffer's semaphore at a time.
const BUFFER_CREDIT_CHUNK_BYTES: usize = 64 << 10;

/// Monotonic and wall-clock time, read when a batch is opened.
fn wall_and_monotonic_now() -> (Instant, i64) {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    (Instant::now(), i64::try_from(wall).unwrap_or(i64::MAX))
}

#[derive(Debug)]
struct Shared {
    producer_id: ProducerId,
    metadata: Arc<StreamMetadata>,
    accumulator: Arc<Mutex<Accumulator>>,
    commands: mpsc::Sender<Command>,
    wake_sender: Arc<Notify>,
    buffer: Arc<Semaphore>,
    buffer_bytes_max: usize,
    record_bytes_max: usize,
}

/// Sends records to one stream. Cheap to clone; every clone feeds the same batches. Records
/// still buffered when the last clone is dropped are delivered in the background; call
/// [`Producer::flush`] to wait for them. Build one with [`crate::Client::producer`].
///
/// ```no_run
/// # async fn demo() -> Result<(), tailstream_client::ClientError> {
/// let client = tailstream_client::Client::connect("127.0.0.1:7400").await?;
/// let producer = client.producer("clicks").linger_ms(5).build().await?;
/// // `send` returns once the record is buffered; its future resolves once all R backups
/// // hold it.
/// let ack = producer.send(Some(b"user-1"), b"clicked").await?;
/// println!("stored at {:?}", ack.await?.location);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Producer {
    shared: Arc<Shared>,
}

impl Producer {
    /// A producer for `stream` with a fresh producer id from the coordinator.
    pub(crate) async fn new(
        cluster: Arc<Cluster>,
        stream: &str,
        config: ProducerConfig,
    ) -> Result<Self, ClientError> {
        if config.max_in_flight as usize > lane_window_max() {
            return Err(ClientError::Config(format!(
                "producer.max_in_flight must be at most {} (what a broker remembers per producer)",
                lane_window_max()
            )));
        }
        let metadata = cluster.stream(stream).await?;
        let producer_id = cluster.coordinator().allocate_producer_id().await?;
        let streamlets = metadata.streamlets.len() as u32;
        // A batch never exceeds what an empty segment of this stream (or a frame) takes.
        let batch_bytes_max = batch_bytes_max(metadata.config.segment_size_bytes);
        let record_bytes_max =
            (batch_bytes_max - BATCH_HEADER_BYTES).min(config.buffer_bytes_max as usize);
        let batch_size_bytes = (config.batch_size_bytes as usize).min(batch_bytes_max);
        let accumulator = Arc::new(Mutex::new(Accumulator::new(
            streamlets,
            batch_size_bytes,
            // Consecutive producers start their round-robin at different streamlets.
            (producer_id.0 % u64::from(streamlets.max(1))) as u32,
        )));
        let (commands, commands_rx) = mpsc::channel(COMMANDS_MAX);
        let buffer_permits = (config.buffer_bytes_max as usize).min(Semaphore::MAX_PERMITS);
        let sender = Sender::new(
            cluster,
            metadata.clone(),
            accumulator.clone(),
            config,
            producer_id,
        );
        let wake_sender = Arc::new(Notify::new());
        tokio::spawn(sender.run(commands_rx, wake_sender.clone()));
        Ok(Self {
            shared: Arc::new(Shared {
                producer_id,
                metadata,
                accumulator,
                commands,
                wake_sender,
                buffer: Arc::new(Semaphore::new(buffer_permits)),
                buffer_bytes_max: buffer_permits,
                record_bytes_max,
            }),
        })
    }

    /// The producer id the coordinator gave this producer (brokers drop its retried batches
    /// by it and the batch sequence).
    pub fn id(&self) -> ProducerId {
        self.shared.producer_id
    }

    /// How many streamlets the stream has.
    pub fn streamlets(&self) -> u32 {
        self.shared.metadata.streamlets.len() as u32
    }

    /// Buffers one record. Returns once the record is accepted (waiting while the producer's
    /// buffer is full); the returned future resolves when the record is acknowledged.
    pub async fn send(&self, key: Option<&[u8]>, value: &[u8]) -> Result<AckFuture, ClientError> {
        let shared = &self.shared;
        let bytes = Accumulator::record_bytes(key, Some(value));
        if bytes > shared.record_bytes_max {
            return Err(ClientError::RecordTooLarge {
                bytes,
                max: shared.record_bytes_max,
            });
        }
        let appended = loop {
            let missing = {
                let mut accumulator = shared.accumulator.lock().unwrap_or_else(|p| p.into_inner());
                let record = PendingRecord {
                    key,
                    value: Some(value),
                };
                let missing = match accumulator.append(record, wall_and_monotonic_now) {
                    Ok(appended) => break appended,
                    Err(missing) => missing,
                };
                // Buffer bytes come from the semaphore in chunks, so most records take none
                // there: a chunk if one is free now...
                let chunk = BUFFER_CREDIT_CHUNK_BYTES
                    .max(missing)
                    .min(shared.buffer_bytes_max);
                if let Ok(permit) = shared.buffer.clone().try_acquire_many_owned(chunk as u32) {
                    accumulator.add_credit(permit);
                    continue;
                }
                // ...else this record waits for exactly its bytes, and credit no batch holds
                // goes back first: nobody may wait on bytes that sit unused here.
                accumulator.release_free_credit();
                Accumulator::record_bytes(key, Some(value))
            };
            // `missing` is at most record_bytes_max, itself at most the buffer: it fits.
            let permit = shared
                .buffer
                .clone()
                .acquire_many_owned(missing as u32)
                .await
                .map_err(|_| ClientError::Closed)?;
            shared
                .accumulator
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .add_credit(permit);
        };
        if appended.wake_sender {
            shared.wake_sender.notify_one();
        }
        Ok(appended.ack)
    }

    /// Sends everything buffered now and waits until every record sent before this call is
    /// settled (acknowledged or failed; each record's own future says which).
    pub async fn flush(&self) -> Result<(), ClientError> {
        let (reply, cells) = tokio::sync::oneshot::channel();
        self.shared
            .commands
            .send(Command::Flush(reply))
            .await
            .map_err(|_| ClientError::Closed)?;
        let cells = cells.await.map_err(|_| ClientError::Closed)?;
        for cell in cells {
            cell.wait().await;
        }
        Ok(())
    }

    /// The streamlet a keyed record goes to (for tests and tools).
    pub fn streamlet_for_key(&self, key: &[u8]) -> StreamletId {
        crate::routing::streamlet_for_key(key, self.streamlets())
    }
}

/// The largest batch for a stream with `segment_size_bytes` segments: half a segment (the
/// rest leaves room for the segment's digest and framing), and never more than a produce
/// frame may carry.
fn batch_bytes_max(segment_size_bytes: u32) -> usize {
    (segment_size_bytes as usize / 2).min(PRODUCE_BATCH_BYTES_MAX)
}

/// The most batches of one streamlet a producer may have in flight: what a broker log
/// remembers per producer for answering retries.
const fn lane_window_max() -> usize {
    tailstream_wire::batch::IDEMPOTENCE_WINDOW_BATCHES
}
