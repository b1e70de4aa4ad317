//! DeleteRecords as a Kafka admin client sends it: a partition's log start moves forward to
//! the offset asked (-1: the high watermark), ListOffsets and Fetch start there, offsets past
//! the end and partitions led elsewhere are refused with Kafka's codes, and the start holds
//! on the new leader after the old one is killed; `stream alter --delete-before` does the same
//! from the CLI.

use crate::common;
use crate::kafka_leader_epochs::call;

use common::{TEST_TIMEOUT, TestCluster, wait_until_serving};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    BrokerId, DeleteRecordsRequest, DeleteRecordsResponse, FetchRequest, FetchResponse,
    ListOffsetsRequest, ListOffsetsResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

const TOPIC: &str = "trimmed";

fn topic() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

/// Partition 0's leader (its Kafka address), asking `addr`.
async fn leader(addr: &str) -> String {
    let request = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(topic())),
    ]));
    let metadata: MetadataResponse = call(addr, 3, 8, &request).await;
    let partition = &metadata.topics[0].partitions[0];
    let leader = metadata
        .brokers
        .iter()
        .find(|b| b.node_id == partition.leader_id)
        .expect("the leader is a listed broker");
    format!("{}:{}", leader.host.as_str(), leader.port)
}

/// DeleteRecords v1 of `(partition, offset)`s: each partition's (error code, low watermark).
async fn delete(addr: &str, asked: &[(i32, i64)]) -> Vec<(i16, i64)> {
    let partitions = asked
        .iter()
        .map(|(partition, offset)| {
            DeleteRecordsPartition::default()
                .with_partition_index(*partition)
                .with_offset(*offset)
        })
        .collect();
    let request = DeleteRecordsRequest::default()
        .with_topics(vec![
            DeleteRecordsTopic::default()
                .with_name(topic())
                .with_partitions(partitions),
        ])
        .with_timeout_ms(10_000);
    let answer: DeleteRecordsResponse = call(addr, 21, 1, &request).await;
    answer.topics[0]
        .partitions
        .iter()
        .map(|p| (p.error_code, p.low_watermark))
        .collect()
}

/// ListOffsets v5 of partition 0 at `timestamp` (-2 earliest, -1 latest).
async fn offset(addr: &str, timestamp: i64) -> i64 {
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(topic())
                .with_partitions(vec![
                    ListOffsetsPartition::default()
                        .with_current_leader_epoch(-1)
                        .with_timestamp(timestamp),
                ]),
        ]);
    let answer: ListOffsetsResponse = call(addr, 2, 5, &request).await;
    let partition = &answer.topics[0].partitions[0];
    assert_eq!(partition.error_code, 0, "{answer:?}");
    partition.offset
}

/// Fetch v11 of partition 0 from `fetch_offset`: (error code, log start, has records).
async fn fetch(addr: &str, fetch_offset: i64) -> (i16, i64, bool) {
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_bytes(1 << 20)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(topic())
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_fetch_offset(fetch_offset)
                        .with_current_leader_epoch(-1)
                        .with_last_fetched_epoch(-1)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ]);
    let answer: FetchResponse = call(addr, 1, 11, &request).await;
    let partition = &answer.responses[0].partitions[0];
    let records = partition.records.as_ref().is_some_and(|r| !r.is_empty());
    (partition.error_code, partition.log_start_offset, records)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delete_records_moves_a_partitions_start_and_it_holds_on_the_next_leader() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(3, "").await;
        let mut config = test.stream_config();
        config.replicas = 1;
        config.logs_per_streamlet = 1;
        // Small segments, one per group: deleting the first 150 records frees whole groups.
        config.segment_size_bytes = 4096;
        config.segments_per_group = 1;
        test.client().create_stream(TOPIC, 1, config).await.unwrap();
        let lines: String = (0..200)
            .map(|i| format!("record-{i:04}-{}\n", "x".repeat(60)))
            .collect();
        let (ok, _, err) = test.cli(&["produce", TOPIC], lines.as_bytes()).await;
        assert!(ok, "{err}");

        let victim = test.owner_of(TOPIC, 0).await;
        let asked = (0..3)
            .find(|i| *i != victim)
            .and_then(|i| test.cluster.broker(i))
            .and_then(|b| b.kafka_addr)
            .unwrap()
            .to_string();
        let leader_addr = leader(&asked).await;
        assert_eq!(offset(&leader_addr, -1).await, 200);
        assert_eq!(offset(&leader_addr, -2).await, 0);

        // Past the end, and a partition the topic lacks, are refused; nothing moves.
        assert_eq!(
            delete(&leader_addr, &[(0, 201), (1, 5)]).await,
            [(1, -1), (3, -1)]
        );
        // A broker that does not lead the partition says so.
        if leader_addr != asked {
            assert_eq!(delete(&asked, &[(0, 150)]).await, [(6, -1)]);
        }
        assert_eq!(delete(&leader_addr, &[(0, 150)]).await, [(0, 150)]);
        // At or before the start: nothing changes, the start is answered.
        assert_eq!(delete(&leader_addr, &[(0, 20)]).await, [(0, 150)]);
        assert_eq!(offset(&leader_addr, -2).await, 150);
        assert_eq!(fetch(&leader_addr, 10).await.0, 1, "OFFSET_OUT_OF_RANGE");
        assert_eq!(fetch(&leader_addr, 150).await, (0, 150, true));
        assert_eq!(
            offset(&leader_addr, 0).await,
            150,
            "by timestamp: never a deleted record"
        );

        // Retention frees the groups wholly before the start (and their replicas), whatever
        // the stream's limits.
        let owner_admin = test.cluster.broker(victim).unwrap().admin_addr;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let metrics = TestCluster::http_get(owner_admin, "/metrics").await;
            let freed: u64 = metrics
                .lines()
                .filter(|l| l.starts_with("tailstream_retention_freed_bytes_total"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .sum();
            if freed > 0 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "no group was freed");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        // The next leader starts there too, rebuilt from what the backups still hold, after a
        // coordinator restart (the start is durable with the streamlet's placement).
        let mut test = test;
        test.cluster.restart_coordinator().await.unwrap();
        test.wait_for_brokers(3).await;
        test.cluster.kill_broker(victim).await;
        wait_until_serving(&test, TOPIC).await;
        let next = leader(&asked).await;
        assert_ne!(next, leader_addr);
        assert_eq!(offset(&next, -2).await, 150);
        assert_eq!(fetch(&next, 100).await.0, 1, "OFFSET_OUT_OF_RANGE");
        assert_eq!(fetch(&next, 150).await, (0, 150, true));
        // -1 is the high watermark: everything is deleted, and new records are served.
        assert_eq!(delete(&next, &[(0, -1)]).await, [(0, 200)]);
        assert_eq!(fetch(&next, 199).await.0, 1);
        let (ok, _, err) = test.cli(&["produce", TOPIC], b"after\n").await;
        assert!(ok, "{err}");
        assert_eq!(fetch(&next, 200).await, (0, 200, true));

        // The CLI does the same (streamlet 0, log 0 is partition 0), refusing past the end.
        let (ok, _, err) = test
            .cli(
                &["stream", "alter", TOPIC, "--delete-before", "0/0:500"],
                b"",
            )
            .await;
        assert!(!ok && err.contains("ends at offset 201"), "{err}");
        let (ok, out, err) = test
            .cli(
                &["stream", "alter", TOPIC, "--delete-before", "0/0:201"],
                b"",
            )
            .await;
        assert!(ok, "{err}");
        let out = String::from_utf8_lossy(&out);
        assert!(out.contains("before offset 201"), "{out}");
        // The owner hears it through its assignment (pushed before the answer, or at its
        // next heartbeat).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while offset(&next, -2).await != 201 {
            assert!(
                std::time::Instant::now() < deadline,
                "the owner took the new start"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(fetch(&next, 200).await.0, 1);
    })
    .await
    .expect("delete records test finished in time");
}
