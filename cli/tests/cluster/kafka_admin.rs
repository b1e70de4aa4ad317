//! Kafka's admin clients as a team moving from Kafka runs them: kafka-python's
//! `KafkaAdminClient` and confluent-kafka's `AdminClient` (a current librdkafka) create, describe
//! and delete topics and list and describe consumer groups through the Kafka listener
//! (`tests/kafka/admin.py` checks each answer), and what they create is the stream the native
//! side sees: 6 partitions with a default Q of 4 are 2 streamlets of 3 logs, replication factor
//! 2 is R = 1.

use crate::common;

use common::kafka::{bootstrap, python_with, required, run};
use common::{TEST_TIMEOUT, TestCluster};

const ADMIN_PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka/admin.py");

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kafka_admin_clients_create_describe_and_delete_topics_and_list_and_describe_groups() {
    let Some(kafka_python) = required(python_with("kafka"), "kafka-python") else {
        return;
    };
    let Some(confluent) = required(python_with("confluent_kafka"), "confluent-kafka") else {
        return;
    };
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(3, "").await;
        let bootstrap = bootstrap(&test);
        for (python, client) in [(&kafka_python, "kafka-python"), (&confluent, "confluent")] {
            let topic = format!("made-by-{client}");
            let group = format!("group-of-{client}");
            let out = run(python, &[ADMIN_PY, client, &bootstrap, &topic, &group], b"").await;
            assert_eq!(out.trim(), format!("ok {client}"), "{out}");
            // Deleted at the end of the script: the coordinator no longer has it.
            let streams = test.client().list_streams().await.unwrap();
            assert!(
                streams.iter().all(|s| s.name != topic),
                "{topic} was deleted"
            );
        }
        // The shape CreateTopics asked for, seen natively (made again, left in place).
        let out = run(
            &kafka_python,
            &[
                "-c",
                "import sys; from kafka.admin import KafkaAdminClient; \
                 a = KafkaAdminClient(bootstrap_servers=sys.argv[1].split(',')); \
                 r = a.create_topics({'shaped': {'num_partitions': 6, 'replication_factor': 2}}, raise_errors=False); \
                 print(r['topics'][0]['error_code'])",
                &bootstrap,
            ],
            b"",
        )
        .await;
        assert_eq!(out.trim(), "0");
        let stream = test
            .client()
            .list_streams()
            .await
            .unwrap()
            .into_iter()
            .find(|s| s.name == "shaped")
            .expect("the topic is a stream");
        // Q: the largest divisor of 6 not above the default Q (4 here: 2 streamlets of 3).
        let default_q = test.stream_config().logs_per_streamlet;
        let q = (1..=default_q.min(6)).rev().find(|q| 6 % q == 0).unwrap();
        assert_eq!(
            (stream.streamlets.len() as u32, stream.config.logs_per_streamlet),
            (6 / q, q),
            "6 partitions are streamlets of the largest Q that divides them"
        );
        assert_eq!(stream.config.replicas, 1, "replication factor 2 is one backup");
    })
    .await
    .expect("admin client test finished in time");
}
