//! A Kafka client connection as small as a benchmark needs: one request at a time for the
//! set-up calls (Metadata, InitProducerId), then split into a writer and a reader for
//! pipelined Produce. Requests are encoded and answers decoded by `kafka-protocol` (its client
//! half), as a Rust Kafka client would.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, InitProducerIdResponse, MetadataRequest, MetadataResponse,
    RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tailstream_client::CoordinatorClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// Answers larger than this are refused (a benchmark's answers are a few hundred bytes).
const ANSWER_BYTES_MAX: usize = 1 << 20;
/// Set-up calls give up after this long.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const CLIENT_ID: &str = "tailstream-bench";

/// Encodes one request frame (length prefix, header v1, body) into `out`.
pub(crate) fn encode_request<R: Encodable>(
    out: &mut BytesMut,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &R,
) -> Result<(), String> {
    let start = out.len();
    out.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)))
        .encode(out, 1)
        .map_err(|e| format!("encoding a request header: {e}"))?;
    body.encode(out, version)
        .map_err(|e| format!("encoding a {api:?} request: {e}"))?;
    let length = (out.len() - start - 4) as i32;
    out[start..start + 4].copy_from_slice(&length.to_be_bytes());
    Ok(())
}

/// Reads one answer: (correlation id, body).
pub(crate) async fn read_answer(
    reader: &mut BufReader<OwnedReadHalf>,
) -> Result<(i32, Bytes), String> {
    let length = reader
        .read_i32()
        .await
        .map_err(|e| format!("reading an answer: {e}"))?;
    let length = usize::try_from(length)
        .ok()
        .filter(|l| (4..=ANSWER_BYTES_MAX).contains(l))
        .ok_or_else(|| format!("an answer of {length} bytes"))?;
    let mut body = BytesMut::zeroed(length);
    reader
        .read_exact(&mut body)
        .await
        .map_err(|e| format!("reading an answer: {e}"))?;
    let correlation_id = body.get_i32();
    Ok((correlation_id, body.freeze()))
}

/// One connection to one broker's Kafka listener.
pub(crate) struct KafkaConnection {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    next_correlation_id: i32,
}

impl KafkaConnection {
    pub async fn connect(addr: &str) -> Result<Self, String> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting to kafka listener {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let (read, writer) = stream.into_split();
        Ok(Self {
            reader: BufReader::with_capacity(64 * 1024, read),
            writer,
            next_correlation_id: 1,
        })
    }

    /// Sends one request and waits for its answer.
    async fn call<R: Encodable, A: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        body: &R,
    ) -> Result<A, String> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id += 1;
        let mut frame = BytesMut::new();
        encode_request(&mut frame, api, version, correlation_id, body)?;
        let exchange = async {
            self.writer
                .write_all(&frame)
                .await
                .map_err(|e| format!("sending a {api:?} request: {e}"))?;
            read_answer(&mut self.reader).await
        };
        let (got, mut answer) = tokio::time::timeout(CALL_TIMEOUT, exchange)
            .await
            .map_err(|_| format!("no {api:?} answer within {CALL_TIMEOUT:?}"))??;
        if got != correlation_id {
            return Err(format!("answer {got} to request {correlation_id}"));
        }
        A::decode(&mut answer, version).map_err(|e| format!("decoding a {api:?} answer: {e}"))
    }

    /// Each partition of `topic` and the Kafka address of its leader.
    pub async fn leaders(&mut self, topic: &str) -> Result<Vec<(i32, String)>, String> {
        let request = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
                TopicName(StrBytes::from_string(topic.to_owned())),
            ))]));
        let answer: MetadataResponse = self.call(ApiKey::Metadata, 1, &request).await?;
        let brokers: HashMap<i32, String> = answer
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
            .collect();
        let found = answer
            .topics
            .first()
            .ok_or_else(|| format!("no metadata for topic {topic}"))?;
        if found.error_code != 0 {
            return Err(format!("metadata for {topic}: error {}", found.error_code));
        }
        let mut leaders = Vec::new();
        for partition in &found.partitions {
            let leader = brokers.get(&partition.leader_id.0).ok_or_else(|| {
                format!(
                    "partition {} has no known leader",
                    partition.partition_index
                )
            })?;
            leaders.push((partition.partition_index, leader.clone()));
        }
        leaders.sort();
        Ok(leaders)
    }

    /// A producer id and epoch for an idempotent producer.
    pub async fn init_producer_id(&mut self) -> Result<(i64, i16), String> {
        // No transactional id (the default is an empty one, which means a transaction).
        let request = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000);
        let answer: InitProducerIdResponse = self.call(ApiKey::InitProducerId, 1, &request).await?;
        if answer.error_code != 0 {
            return Err(format!("InitProducerId: error {}", answer.error_code));
        }
        Ok((answer.producer_id.0, answer.producer_epoch))
    }

    pub fn into_split(self) -> (BufReader<OwnedReadHalf>, OwnedWriteHalf) {
        (self.reader, self.writer)
    }
}

/// Every partition of `stream` and its leader's Kafka address, from a Kafka Metadata request
/// to a live broker's Kafka listener (retried briefly while the new stream settles).
pub(super) async fn partition_leaders(
    cluster: &CoordinatorClient,
    stream: &str,
) -> Result<Vec<(i32, String)>, String> {
    let brokers = cluster.list_brokers().await.map_err(|e| e.to_string())?;
    let bootstrap = brokers
        .iter()
        .find(|b| b.alive && !b.kafka_addr.is_empty())
        .map(|b| b.kafka_addr.clone())
        .ok_or("no live broker has a Kafka listener ([kafka] enabled = false?)")?;
    let mut connection = KafkaConnection::connect(&bootstrap).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match connection.leaders(stream).await {
            Ok(leaders) if !leaders.is_empty() => return Ok(leaders),
            Ok(_) if Instant::now() < deadline => {}
            Err(_) if Instant::now() < deadline => {}
            Ok(_) => return Err(format!("topic {stream} has no partitions")),
            Err(error) => return Err(error),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
