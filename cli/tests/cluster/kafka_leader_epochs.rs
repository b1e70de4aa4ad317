//! Leader epochs (KIP-320) as a Kafka client sees them across a partition leader's crash: the
//! epoch Metadata answers is the streamlet's ownership epoch and moves on failover; the new
//! leader fences a fetch naming the old epoch (FENCED_LEADER_EPOCH: the client refreshes its
//! metadata), refuses one naming an epoch it has not reached (UNKNOWN_LEADER_EPOCH), and answers
//! OffsetForLeaderEpoch for the old epoch with an end no consumer's position exceeds (its
//! committed end: nothing acknowledged is truncated, so nothing is reported truncated).

use crate::common;
use crate::kafka_hostile::{answer, request};

use bytes::{Bytes, BytesMut};
use common::{TEST_TIMEOUT, TestCluster, wait_until_serving};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{
    FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse, MetadataRequest,
    MetadataResponse, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const TOPIC: &str = "epochs";

fn topic() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

/// One request to `addr` (non-flexible versions only: header v1 out, v0 back).
pub(crate) async fn call<Q: Encodable, A: Decodable>(
    addr: &str,
    api_key: i16,
    version: i16,
    body: &Q,
) -> A {
    let mut encoded = BytesMut::new();
    body.encode(&mut encoded, version).unwrap();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(&request(api_key, version, 1, &encoded))
        .await
        .unwrap();
    let (_, answer) = answer(&mut stream).await.expect("an answer");
    A::decode(&mut Bytes::from(answer), version).unwrap()
}

/// Partition 0's leader (its Kafka address) and leader epoch, asking `addr`.
async fn leader_of_partition_zero(addr: &str) -> (String, i32) {
    let request = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(topic())),
    ]));
    let metadata: MetadataResponse = call(addr, 3, 8, &request).await;
    let partition = &metadata.topics[0].partitions[0];
    assert_eq!(partition.error_code, 0, "{metadata:?}");
    let leader = metadata
        .brokers
        .iter()
        .find(|b| b.node_id == partition.leader_id)
        .expect("the leader is a listed broker");
    (
        format!("{}:{}", leader.host.as_str(), leader.port),
        partition.leader_epoch,
    )
}

async fn fetch_error(addr: &str, leader_epoch: i32) -> i16 {
    let request = FetchRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_max_bytes(1 << 20)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(topic())
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_current_leader_epoch(leader_epoch)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ]);
    let answer: FetchResponse = call(addr, 1, 11, &request).await;
    answer.responses[0].partitions[0].error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_epochs_move_on_failover_and_the_new_leader_fences_the_old_one() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(3, "").await;
        let mut config = test.stream_config();
        config.replicas = 1;
        test.client().create_stream(TOPIC, 2, config).await.unwrap();
        let lines: String = (0..200).map(|i| format!("record-{i}\n")).collect();
        let (ok, _, err) = test.cli(&["produce", TOPIC], lines.as_bytes()).await;
        assert!(ok, "{err}");

        let victim = test.owner_of(TOPIC, 0).await;
        let asked = (0..3)
            .find(|i| *i != victim)
            .and_then(|i| test.cluster.broker(i))
            .and_then(|b| b.kafka_addr)
            .unwrap()
            .to_string();
        let (_, before) = leader_of_partition_zero(&asked).await;
        assert!(before >= 0, "a real leader epoch, not -1");

        let mut test = test;
        test.cluster.kill_broker(victim).await;
        wait_until_serving(&test, TOPIC).await;
        let (leader, after) = leader_of_partition_zero(&asked).await;
        assert!(
            after > before,
            "the epoch moved on failover: {before} -> {after}"
        );

        // The committed end, as ListOffsets (latest) tells it under the current epoch.
        let latest = ListOffsetsRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(topic())
                    .with_partitions(vec![
                        ListOffsetsPartition::default()
                            .with_current_leader_epoch(after)
                            .with_timestamp(-1),
                    ]),
            ]);
        let offsets: ListOffsetsResponse = call(&leader, 2, 5, &latest).await;
        let end = &offsets.topics[0].partitions[0];
        assert_eq!(
            (end.error_code, end.leader_epoch),
            (0, after),
            "{offsets:?}"
        );

        let asked_for_old = OffsetForLeaderEpochRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_topics(vec![
                OffsetForLeaderTopic::default()
                    .with_topic(topic())
                    .with_partitions(vec![
                        OffsetForLeaderPartition::default()
                            .with_current_leader_epoch(after)
                            .with_leader_epoch(before),
                    ]),
            ]);
        let epochs: OffsetForLeaderEpochResponse = call(&leader, 23, 3, &asked_for_old).await;
        let old = &epochs.topics[0].partitions[0];
        assert_eq!(
            (old.error_code, old.leader_epoch, old.end_offset),
            (0, before, end.offset),
            "the old epoch ends at the committed end: nothing truncated"
        );

        assert_eq!(
            fetch_error(&leader, before).await,
            74,
            "FENCED_LEADER_EPOCH"
        );
        assert_eq!(
            fetch_error(&leader, after + 1).await,
            75,
            "UNKNOWN_LEADER_EPOCH"
        );
        assert_eq!(
            fetch_error(&leader, after).await,
            0,
            "the current epoch reads"
        );
    })
    .await
    .expect("leader epoch test finished in time");
}
