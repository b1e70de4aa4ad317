//! Fetch sessions (KIP-227) on the wire: a full fetch with epoch 0 opens a session over its
//! partitions; incremental fetches name only what moved and are answered only what changed;
//! out-of-order epochs, unknown ids and forgotten partitions are handled as Kafka does, and a
//! fetch with the final epoch ends the session. kafka-python's consumers (the other Kafka
//! tests) fetch through sessions too, through a leader's crash.

use crate::common;
use crate::kafka_flexible::call;

use common::{TEST_TIMEOUT, TestCluster, wait_until_serving};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, FetchRequest, FetchResponse, ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use tailstream_wire::records::RecordBatchBuilder;
use tokio::net::TcpStream;

const TOPIC: &str = "sessions";
const FETCH: i16 = 1;

fn topic() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

async fn produce(stream: &mut TcpStream, partition: i32, count: usize) {
    let mut builder = RecordBatchBuilder::new(256);
    for i in 0..count {
        builder.push(0, None, Some(format!("value-{i}").as_bytes()), &[]);
    }
    let produce = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(topic())
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(builder.finish_without_producer())),
                ]),
        ]);
    let produced: ProduceResponse = call(stream, 0, 11, &produce).await;
    let written = &produced.responses[0].partition_responses[0];
    assert_eq!(written.error_code, 0, "{produced:?}");
}

fn fetch(session_id: i32, epoch: i32, named: &[(i32, i64)], forgotten: &[i32]) -> FetchRequest {
    let partitions = named
        .iter()
        .map(|(partition, offset)| {
            FetchPartition::default()
                .with_partition(*partition)
                .with_fetch_offset(*offset)
                .with_current_leader_epoch(-1)
                .with_last_fetched_epoch(-1)
                .with_partition_max_bytes(1 << 20)
        })
        .collect();
    let topics = if named.is_empty() {
        vec![]
    } else {
        vec![
            FetchTopic::default()
                .with_topic(topic())
                .with_partitions(partitions),
        ]
    };
    let forgotten = if forgotten.is_empty() {
        vec![]
    } else {
        vec![
            ForgottenTopic::default()
                .with_topic(topic())
                .with_partitions(forgotten.to_vec()),
        ]
    };
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_session_id(session_id)
        .with_session_epoch(epoch)
        .with_topics(topics)
        .with_forgotten_topics_data(forgotten)
}

/// The answer's partitions as (partition, high watermark, has records), in its order.
fn carried(answer: &FetchResponse) -> Vec<(i32, i64, bool)> {
    assert_eq!(answer.error_code, 0, "{answer:?}");
    answer
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| {
            assert_eq!(p.error_code, 0, "{answer:?}");
            let records = p.records.as_ref().is_some_and(|r| !r.is_empty());
            (p.partition_index, p.high_watermark, records)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fetch_sessions_answer_only_what_changed_and_follow_kafkas_rules() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(1, "").await;
        let config = test.stream_config();
        let logs = config.logs_per_streamlet as i32;
        assert!(logs >= 3, "the test reads three partitions");
        test.client().create_stream(TOPIC, 1, config).await.unwrap();
        wait_until_serving(&test, TOPIC).await;
        let addr = test.cluster.broker(0).and_then(|b| b.kafka_addr).unwrap();
        let mut stream = TcpStream::connect(addr).await.unwrap();
        produce(&mut stream, 0, 3).await;

        let opened: FetchResponse = call(
            &mut stream,
            FETCH,
            12,
            &fetch(0, 0, &[(0, 0), (1, 0), (2, 0)], &[]),
        )
        .await;
        // Full fetch, epoch 0: a session over three partitions, all of them answered.
        assert!(opened.session_id > 0, "{opened:?}");
        assert_eq!(
            carried(&opened),
            [(0, 3, true), (1, 0, false), (2, 0, false)]
        );
        let id = opened.session_id;

        // Epoch 1 names partition 0 read up to 3: nothing is new anywhere, nothing is carried.
        let quiet: FetchResponse =
            call(&mut stream, FETCH, 12, &fetch(id, 1, &[(0, 3)], &[])).await;
        assert_eq!((quiet.error_code, quiet.session_id), (0, id), "{quiet:?}");
        assert_eq!(carried(&quiet), []);

        // Records on partition 1: epoch 2 names nothing and gets partition 1 alone.
        produce(&mut stream, 1, 2).await;
        let moved: FetchResponse = call(&mut stream, FETCH, 12, &fetch(id, 2, &[], &[])).await;
        assert_eq!(carried(&moved), [(1, 2, true)]);
        assert_eq!(moved.session_id, id);

        // Epoch 2 again is out of order; an unknown id is not found. Neither has partitions,
        // and neither moves the session on.
        let again: FetchResponse = call(&mut stream, FETCH, 12, &fetch(id, 2, &[], &[])).await;
        assert_eq!((again.error_code, again.session_id), (71, 0), "{again:?}");
        assert!(again.responses.is_empty());
        let unknown: FetchResponse = call(
            &mut stream,
            FETCH,
            12,
            &fetch(id.wrapping_add(1), 3, &[], &[]),
        )
        .await;
        assert_eq!(
            unknown.error_code, 70,
            "FETCH_SESSION_ID_NOT_FOUND: {unknown:?}"
        );

        // Epoch 3 forgets partition 1 (and reads it to 2): what it gets next is not carried;
        // partition 2's records are.
        let forgot: FetchResponse = call(&mut stream, FETCH, 12, &fetch(id, 3, &[], &[1])).await;
        assert_eq!(carried(&forgot), []);
        assert_eq!(forgot.session_id, id);
        produce(&mut stream, 1, 1).await;
        produce(&mut stream, 2, 4).await;
        let after: FetchResponse = call(&mut stream, FETCH, 12, &fetch(id, 4, &[], &[])).await;
        assert_eq!(carried(&after), [(2, 4, true)]);
        assert_eq!(after.session_id, id);

        // The final epoch ends the session and is answered sessionless, in full.
        let last: FetchResponse =
            call(&mut stream, FETCH, 12, &fetch(id, -1, &[(0, 3)], &[])).await;
        assert_eq!(last.session_id, 0);
        assert_eq!(carried(&last), [(0, 3, false)]);
        let gone: FetchResponse = call(&mut stream, FETCH, 12, &fetch(id, 5, &[], &[])).await;
        assert_eq!(gone.error_code, 70, "{gone:?}");

        // Another connection (the same anonymous principal) may carry a session on, as a
        // client that reconnects does.
        let reopened: FetchResponse =
            call(&mut stream, FETCH, 12, &fetch(0, 0, &[(2, 4)], &[])).await;
        let mut other = TcpStream::connect(addr).await.unwrap();
        let carried_on: FetchResponse = call(
            &mut other,
            FETCH,
            12,
            &fetch(reopened.session_id, 1, &[], &[]),
        )
        .await;
        assert!(reopened.session_id > 0, "{reopened:?}");
        assert_eq!(carried(&carried_on), []);
        assert_eq!(carried_on.session_id, reopened.session_id);
    })
    .await
    .expect("fetch sessions test finished in time");
}
