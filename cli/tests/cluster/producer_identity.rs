//! A producer is (producer id, producer epoch), and an acknowledgement means the batch is in
//! the log (issue 20, cases 1 and 5), against real processes:
//! - another client writing under the producer ids that come next cannot make the next real
//!   producer's records look delivered: ids are not handed out in sequence;
//! - a client writing under a producer's very id gets its batch refused as a clash, never
//!   acknowledged as a duplicate of the other client's, and the producer moves to a new epoch
//!   and goes on;
//! - through the Kafka listener: InitProducerId v3 bumps the epoch of a session it issued, a
//!   newer epoch starts its sequences afresh (its sequence 0 is no duplicate of the old
//!   epoch's), the older epoch is fenced, a retry of the same batch is a duplicate with its
//!   stored offset and another batch at a used sequence is an error; transactional producers
//!   are refused at once.

use crate::common;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use common::{TEST_TIMEOUT, TestCluster};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, FindCoordinatorRequest, FindCoordinatorResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProduceRequest, ProduceResponse, ProducerId as KafkaProducerId,
    RequestHeader, TopicName, TransactionalId,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use std::collections::HashSet;
use std::time::Duration;
use tailstream_client::ClientError;
use tailstream_net::{RpcClient, RpcClientConfig};
use tailstream_wire::messages::ProduceRequest as NativeProduce;
use tailstream_wire::records::RecordBatchBuilder;
use tailstream_wire::{BatchSequence, Encode, Opcode, ProducerEpoch, ProducerId, Status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn batch(producer: u64, epoch: i16, sequence: u32, value: &str) -> Bytes {
    let mut builder = RecordBatchBuilder::new(128);
    builder.push(0, None, Some(value.as_bytes()), &[]);
    builder.finish(
        ProducerId(producer),
        ProducerEpoch(epoch),
        BatchSequence(sequence),
    )
}

/// Every value in the stream, read from the beginning by the native consumer.
async fn read_all(test: &TestCluster, stream: &str, expected: usize) -> Vec<String> {
    let client = test.client();
    let mut consumer = client
        .consumer(stream)
        .from_beginning()
        .build()
        .await
        .unwrap();
    let mut values = Vec::new();
    for _ in 0..100 {
        for record in consumer.poll(Duration::from_millis(200)).await.unwrap() {
            values.push(String::from_utf8(record.value.unwrap().to_vec()).unwrap());
        }
        if values.len() >= expected {
            // One more poll: anything beyond what was expected shows up too.
            for record in consumer.poll(Duration::from_millis(300)).await.unwrap() {
                values.push(String::from_utf8(record.value.unwrap().to_vec()).unwrap());
            }
            break;
        }
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_under_the_next_or_the_same_producer_id_never_gets_a_producer_acked() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(1, "").await;
        let client = test.client();
        let mut config = test.stream_config();
        config.logs_per_streamlet = 1;
        let stream = client.create_stream("ids", 1, config).await.unwrap();
        let owner =
            RpcClient::connect(&stream.streamlets[0].owner_addr, RpcClientConfig::default())
                .await
                .unwrap();
        let squat = |producer: u64, value: &str| NativeProduce {
            stream: stream.id,
            streamlet: tailstream_wire::StreamletId(0),
            epoch: tailstream_wire::OwnershipEpoch(1),
            batch: batch(producer, 0, 0, value),
        };

        // Case 5's recipe: take an id, then write sequence 0 under the ids after it.
        let taken = client.coordinator().allocate_producer_id().await.unwrap();
        for guess in 1..=16u64 {
            let request = squat(taken.0.wrapping_add(guess) & (u64::MAX >> 1), "squatter");
            owner
                .call_parts(Opcode::Produce, vec![request.to_bytes()])
                .await
                .unwrap();
        }
        let mut ids = HashSet::new();
        for _ in 0..32 {
            let id = client.coordinator().allocate_producer_id().await.unwrap();
            assert!(
                id.0.abs_diff(taken.0) > 1 << 20,
                "{id} is not guessable from {taken}"
            );
            assert!(ids.insert(id));
        }
        let lines: String = (0..1000).map(|i| format!("line-{i}\n")).collect();
        let (ok, _, stderr) = test.cli(&["produce", "ids"], lines.as_bytes()).await;
        assert!(ok, "{stderr}");
        assert!(stderr.contains("acked 1000 records"), "{stderr}");
        let values = read_all(&test, "ids", 1016).await;
        let ours: Vec<_> = values.iter().filter(|v| v.starts_with("line-")).collect();
        let expected: Vec<_> = (0..1000).map(|i| format!("line-{i}")).collect();
        assert_eq!(
            ours.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            expected,
            "every acked record stored once, in order"
        );

        // Under the very id: the producer's batch clashes with the other client's and is
        // refused; the producer moves to a new epoch and the rest are stored.
        let producer = client
            .producer("ids")
            .config(test.config.producer.clone())
            .linger_ms(0)
            .build()
            .await
            .unwrap();
        owner
            .call_parts(
                Opcode::Produce,
                vec![squat(producer.id().0, "same-id").to_bytes()],
            )
            .await
            .unwrap();
        let first = producer.send(None, b"r0").await.unwrap().await;
        match first {
            Err(ClientError::Refused {
                status: Status::SequenceClash,
                ..
            }) => {}
            other => panic!("a clash must be refused, not acknowledged: {other:?}"),
        }
        for i in 1..10 {
            let value = format!("r{i}");
            producer
                .send(None, value.as_bytes())
                .await
                .unwrap()
                .await
                .unwrap();
        }
        let values = read_all(&test, "ids", 1016 + 1 + 9).await;
        let tail: Vec<_> = values
            .iter()
            .filter(|v| v.starts_with('r') || *v == "same-id")
            .map(String::as_str)
            .collect();
        assert_eq!(
            tail,
            [
                "same-id", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9"
            ]
        );
        test.stop().await;
    })
    .await
    .unwrap();
}

/// A Kafka connection, one request at a time.
struct Kafka {
    stream: TcpStream,
    correlation_id: i32,
}

impl Kafka {
    async fn connect(addr: &str) -> Kafka {
        Kafka {
            stream: TcpStream::connect(addr).await.unwrap(),
            correlation_id: 0,
        }
    }

    /// Sends `body` as `api` at `version` (header v2 for a flexible version) and returns the
    /// answer's body (after the response header's tagged fields, for a flexible version).
    async fn call<R: Encodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        flexible: bool,
        body: &R,
    ) -> Bytes {
        self.correlation_id += 1;
        let mut out = BytesMut::new();
        out.put_i32(0);
        RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("identity-test")))
            .encode(&mut out, if flexible { 2 } else { 1 })
            .unwrap();
        body.encode(&mut out, version).unwrap();
        let length = (out.len() - 4) as i32;
        out[..4].copy_from_slice(&length.to_be_bytes());
        self.stream.write_all(&out).await.unwrap();
        let length = self.stream.read_i32().await.unwrap();
        let mut answer = vec![0u8; length as usize];
        self.stream.read_exact(&mut answer).await.unwrap();
        let mut answer = Bytes::from(answer);
        assert_eq!(answer.get_i32(), self.correlation_id);
        if flexible {
            assert_eq!(
                answer.get_u8(),
                0,
                "no tagged fields in the response header"
            );
        }
        answer
    }

    async fn init_producer_id(&mut self, previous: Option<(i64, i16)>) -> (i16, i64, i16) {
        let (id, epoch) = previous.unwrap_or((-1, -1));
        let request = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(KafkaProducerId(id))
            .with_producer_epoch(epoch);
        let mut body = self.call(ApiKey::InitProducerId, 4, true, &request).await;
        let answer = InitProducerIdResponse::decode(&mut body, 4).unwrap();
        (
            answer.error_code,
            answer.producer_id.0,
            answer.producer_epoch,
        )
    }

    /// Produce v7, acks = all, one batch to partition 0: (error code, base offset).
    async fn produce(&mut self, topic: &str, batch: Bytes) -> (i16, i64) {
        let request = ProduceRequest::default()
            .with_transactional_id(None)
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(batch)),
                    ]),
            ]);
        let mut body = self.call(ApiKey::Produce, 7, false, &request).await;
        let answer = ProduceResponse::decode(&mut body, 7).unwrap();
        let partition = &answer.responses[0].partition_responses[0];
        (partition.error_code, partition.base_offset)
    }
}

const INVALID_PRODUCER_EPOCH: i16 = 47;
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_producer_epochs_fence_the_old_session_and_restart_sequences() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(1, "").await;
        let mut config = test.stream_config();
        config.logs_per_streamlet = 1;
        test.client()
            .create_stream("epochs", 1, config)
            .await
            .unwrap();
        let addr = test
            .cluster
            .broker(0)
            .unwrap()
            .kafka_addr
            .unwrap()
            .to_string();
        let mut kafka = Kafka::connect(&addr).await;

        let (error, id, epoch) = kafka.init_producer_id(None).await;
        assert_eq!((error, epoch), (0, 0));
        let produced =
            |epoch: i16, sequence: u32, value: &str| batch(id as u64, epoch, sequence, value);
        assert_eq!(kafka.produce("epochs", produced(0, 0, "a")).await, (0, 0));
        assert_eq!(kafka.produce("epochs", produced(0, 1, "b")).await, (0, 1));
        // librdkafka's timeout path bumps the epoch itself; InitProducerId v3 does it here.
        let (error, same_id, bumped) = kafka.init_producer_id(Some((id, 0))).await;
        assert_eq!((error, same_id, bumped), (0, id, 1));
        assert_eq!(
            kafka.produce("epochs", produced(1, 0, "c")).await,
            (0, 2),
            "a new epoch's sequence 0 is appended, not taken for the old epoch's"
        );
        assert_eq!(
            kafka.produce("epochs", produced(0, 2, "late")).await.0,
            INVALID_PRODUCER_EPOCH
        );
        assert_eq!(
            kafka.produce("epochs", produced(1, 0, "c")).await,
            (0, 2),
            "a retry is answered with its stored offset"
        );
        assert_eq!(
            kafka.produce("epochs", produced(1, 0, "not-c")).await.0,
            OUT_OF_ORDER_SEQUENCE_NUMBER,
            "another batch at a used sequence is an error, never a duplicate"
        );
        // An id this coordinator never issued gets a fresh one.
        let (_, fresh, fresh_epoch) = kafka.init_producer_id(Some((12345, 3))).await;
        assert!(fresh != 12345 && fresh != id && fresh_epoch == 0);

        // Transactions: refused at once, with the code both librdkafka and Java give up on.
        let find = FindCoordinatorRequest::default()
            .with_key(StrBytes::from_static_str("txn"))
            .with_key_type(1);
        let mut body = kafka.call(ApiKey::FindCoordinator, 2, false, &find).await;
        let found = FindCoordinatorResponse::decode(&mut body, 2).unwrap();
        assert_eq!(found.error_code, TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
        let init = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("txn"))))
            .with_transaction_timeout_ms(60_000);
        let mut body = kafka.call(ApiKey::InitProducerId, 1, false, &init).await;
        let refused = InitProducerIdResponse::decode(&mut body, 1).unwrap();
        assert_eq!(refused.error_code, TRANSACTIONAL_ID_AUTHORIZATION_FAILED);

        let values = read_all(&test, "epochs", 3).await;
        assert_eq!(values, ["a", "b", "c"]);
        test.stop().await;
    })
    .await
    .unwrap();
}
