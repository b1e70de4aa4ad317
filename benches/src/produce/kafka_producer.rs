//! `--protocol kafka`: a closed-loop Kafka producer for one partition, as lean as a Kafka
//! client can be: it builds full record batches (idempotent: producer id, epoch, sequences
//! counting records), sends them as Produce v7 with acks = all, keeps up to `max_in_flight`
//! requests unanswered, and reads the answers in order on a task of its own. What it measures
//! is the broker's Kafka front end, not a client library's overheads.

use super::kafka_connection::{KafkaConnection, encode_request, read_answer};
use super::{ProducerOutcome, Progress};
use bytes::BytesMut;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::{Decodable, StrBytes};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tailstream_wire::records::RecordBatchBuilder;
use tailstream_wire::{BatchSequence, ProducerEpoch, ProducerId};
use tokio::io::AsyncWriteExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// Produce v7: record batches, non-flexible, the newest version most clients send to a
/// broker that serves up to v8.
const PRODUCE_VERSION: i16 = 7;
/// How long the broker may wait for every backup before answering.
const PRODUCE_TIMEOUT_MS: i32 = 30_000;

/// One producer's share of the load.
#[derive(Clone, Debug)]
pub(super) struct Plan {
    pub leader: String,
    pub topic: String,
    pub partition: i32,
    pub records: u64,
    pub record_bytes: usize,
    pub batch_bytes: usize,
    pub max_in_flight: usize,
    pub deadline: Instant,
}

/// A request on the wire: what its answer settles.
struct InFlight {
    correlation_id: i32,
    records: u64,
    built: Instant,
    measured: bool,
    _slot: OwnedSemaphorePermit,
}

/// Sends the plan's records; latency runs from a record's batch being built to its ack.
pub(super) async fn produce(
    plan: Plan,
    progress: Arc<Progress>,
) -> Result<ProducerOutcome, String> {
    let mut connection = KafkaConnection::connect(&plan.leader).await?;
    let (producer_id, epoch) = connection.init_producer_id().await?;
    let producer_id = u64::try_from(producer_id)
        .map_err(|_| format!("InitProducerId gave producer id {producer_id}"))?;
    let (mut reader, mut writer) = connection.into_split();
    let slots = Arc::new(Semaphore::new(plan.max_in_flight.max(1)));
    let (sent, mut to_settle) = mpsc::unbounded_channel::<InFlight>();
    let partition = plan.partition;
    let settle_progress = progress.clone();
    let settler = tokio::spawn(async move {
        let progress = settle_progress;
        let mut outcome = ProducerOutcome::new();
        while let Some(request) = to_settle.recv().await {
            let (correlation_id, mut body) = read_answer(&mut reader).await?;
            if correlation_id != request.correlation_id {
                return Err(format!(
                    "answer {correlation_id} to request {}",
                    request.correlation_id
                ));
            }
            let answer = ProduceResponse::decode(&mut body, PRODUCE_VERSION)
                .map_err(|e| format!("decoding a Produce answer: {e}"))?;
            let code = answer
                .responses
                .first()
                .and_then(|t| t.partition_responses.first())
                .map(|p| p.error_code);
            if code != Some(0) {
                return Err(format!("partition {partition}: Produce error {code:?}"));
            }
            outcome.settle(
                &progress,
                request.built,
                request.measured,
                Ok::<_, ()>(Instant::now()),
                request.records,
            );
        }
        outcome.finish(&progress);
        Ok::<_, String>(outcome)
    });

    let topic = TopicName(StrBytes::from_string(plan.topic.clone()));
    let record_bound = RecordBatchBuilder::record_len_bound(0, plan.record_bytes, 0);
    let mut value = vec![b'x'; plan.record_bytes];
    let mut sequence = BatchSequence(0);
    let mut correlation_id = 0i32;
    let mut built_records = 0u64;
    let mut frame = BytesMut::with_capacity(plan.batch_bytes + 256);
    while built_records < plan.records {
        let built = Instant::now();
        if built >= plan.deadline {
            break;
        }
        let measured = progress.measuring.load(Ordering::Relaxed);
        let mut batch = RecordBatchBuilder::new(plan.batch_bytes);
        while built_records < plan.records
            && !batch.is_full()
            && (batch.is_empty() || batch.encoded_len() + record_bound <= plan.batch_bytes)
        {
            // Vary the value so batches are not trivially identical, as `bench produce` does.
            let stamp = built_records.to_le_bytes();
            let n = stamp.len().min(value.len());
            value[..n].copy_from_slice(&stamp[..n]);
            batch.push(0, None, Some(&value), &[]);
            built_records += 1;
        }
        let records = batch.record_count();
        let batch = batch.finish(ProducerId(producer_id), ProducerEpoch(epoch), sequence);
        sequence = sequence.advance(records);
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(PRODUCE_TIMEOUT_MS)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(topic.clone())
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(partition)
                            .with_records(Some(batch)),
                    ]),
            ]);
        frame.clear();
        correlation_id = correlation_id.wrapping_add(1);
        encode_request(
            &mut frame,
            ApiKey::Produce,
            PRODUCE_VERSION,
            correlation_id,
            &request,
        )?;
        let slot = slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| "in-flight slots closed".to_string())?;
        let in_flight = InFlight {
            correlation_id,
            records: u64::from(records),
            built,
            measured,
            _slot: slot,
        };
        if sent.send(in_flight).is_err() {
            break;
        }
        writer
            .write_all(&frame)
            .await
            .map_err(|e| format!("sending a Produce request: {e}"))?;
    }
    drop(sent);
    let outcome = settler.await.map_err(|e| e.to_string())??;
    let _ = writer.shutdown().await;
    Ok(outcome)
}
