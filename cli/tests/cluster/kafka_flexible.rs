//! The flexible versions (KIP-482: compact strings and arrays, tagged fields, request header
//! v2 and response header v1) end to end, as `kafka-protocol`'s client half encodes and decodes
//! them: Metadata v12, Produce v11, Fetch v12, ListOffsets v7, ListGroups v4 with its states
//! filter. librdkafka's tests use these versions too (it prefers them); this one checks the
//! fields it does not look at.

use crate::common;
use crate::kafka_hostile::{answer, request};

use bytes::{BufMut, Bytes, BytesMut};
use common::{TEST_TIMEOUT, TestCluster, wait_until_serving};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, BrokerId, FetchRequest, FetchResponse,
    ListGroupsRequest, ListGroupsResponse, ListOffsetsRequest, ListOffsetsResponse,
    MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tailstream_wire::records::RecordBatchBuilder;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const TOPIC: &str = "flexible";
const VALUES: [&str; 3] = ["compact-one", "compact-two", "compact-three"];

fn topic() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

/// One request of a flexible `version` on `stream`: header v2 (its tagged fields: none) out,
/// header v1 back (its tagged fields, none, ahead of the body).
pub(crate) async fn call<Q: Encodable, A: Decodable>(
    stream: &mut TcpStream,
    api_key: i16,
    version: i16,
    body: &Q,
) -> A {
    let mut encoded = BytesMut::new();
    encoded.put_u8(0); // the request header's tagged fields
    body.encode(&mut encoded, version).unwrap();
    stream
        .write_all(&request(api_key, version, 7, &encoded))
        .await
        .unwrap();
    let (correlation_id, answer) = answer(stream).await.expect("an answer");
    assert_eq!(correlation_id, 7);
    let mut answer = Bytes::from(answer);
    if api_key != 18 {
        assert_eq!(
            answer.first(),
            Some(&0),
            "the response header's tagged fields"
        );
        let _ = answer.split_to(1);
    }
    let decoded = A::decode(&mut answer, version).unwrap();
    assert!(
        answer.is_empty(),
        "api {api_key} v{version}: every byte read"
    );
    decoded
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn flexible_versions_produce_fetch_and_describe_end_to_end() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(1, "").await;
        let config = test.stream_config();
        let logs = config.logs_per_streamlet;
        test.client().create_stream(TOPIC, 1, config).await.unwrap();
        wait_until_serving(&test, TOPIC).await;
        let addr = test.cluster.broker(0).and_then(|b| b.kafka_addr).unwrap();
        let mut stream = TcpStream::connect(addr).await.unwrap();

        // ApiVersions v3 (flexible body, header v0 back) advertises the flexible versions.
        let versions: ApiVersionsResponse =
            call(&mut stream, 18, 3, &ApiVersionsRequest::default()).await;
        let fetch = versions.api_keys.iter().find(|k| k.api_key == 1).unwrap();
        assert_eq!(fetch.max_version, 12, "Fetch up to v12");

        // Metadata v12: the topic by name, and one by a topic id alone, which streams lack.
        let metadata = MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(topic())),
            MetadataRequestTopic::default().with_name(None),
        ]));
        let metadata: MetadataResponse = call(&mut stream, 3, 12, &metadata).await;
        let named = &metadata.topics[0];
        assert_eq!(named.error_code, 0, "{metadata:?}");
        assert_eq!(named.partitions.len(), logs as usize);
        assert!(named.partitions[0].leader_epoch >= 0);
        assert_eq!(metadata.topics[1].error_code, 100, "UNKNOWN_TOPIC_ID");

        // Produce v11: one batch of three records to partition 0.
        let mut builder = RecordBatchBuilder::new(256);
        for value in VALUES {
            builder.push(0, None, Some(value.as_bytes()), &[]);
        }
        let produce = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(topic())
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(builder.finish_without_producer())),
                    ]),
            ]);
        let produced: ProduceResponse = call(&mut stream, 0, 11, &produce).await;
        let written = &produced.responses[0].partition_responses[0];
        assert_eq!(
            (written.error_code, written.base_offset),
            (0, 0),
            "{produced:?}"
        );

        // Fetch v12 reads it back: compact records between tagged fields.
        let fetch = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_bytes(1 << 20)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(topic())
                    .with_partitions(vec![
                        FetchPartition::default()
                            .with_current_leader_epoch(-1)
                            .with_last_fetched_epoch(-1)
                            .with_partition_max_bytes(1 << 20),
                    ]),
            ]);
        let fetched: FetchResponse = call(&mut stream, 1, 12, &fetch).await;
        let partition = &fetched.responses[0].partitions[0];
        assert_eq!(
            (partition.error_code, partition.high_watermark),
            (0, 3),
            "{fetched:?}"
        );
        let records = partition.records.clone().unwrap_or_default();
        for value in VALUES {
            assert!(
                records.windows(value.len()).any(|w| w == value.as_bytes()),
                "{value} read back"
            );
        }

        // ListOffsets v7: the end.
        let latest = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(topic())
                    .with_partitions(vec![
                        ListOffsetsPartition::default()
                            .with_current_leader_epoch(-1)
                            .with_timestamp(-1),
                    ]),
            ]);
        let offsets: ListOffsetsResponse = call(&mut stream, 2, 7, &latest).await;
        let end = &offsets.topics[0].partitions[0];
        assert_eq!((end.error_code, end.offset), (0, 3), "{offsets:?}");

        // ListGroups v4 with a states filter: no group is Stable here.
        let list = ListGroupsRequest::default()
            .with_states_filter(vec![StrBytes::from_static_str("Stable")]);
        let groups: ListGroupsResponse = call(&mut stream, 16, 4, &list).await;
        assert_eq!(groups.error_code, 0);
        assert!(groups.groups.is_empty(), "{groups:?}");
    })
    .await
    .expect("flexible versions test finished in time");
}
