//! Kafka's own clients against a Tailstream cluster's Kafka listeners, as a user would run
//! them: kcat (librdkafka) and kafka-python, unmodified. Every record acknowledged is read
//! back exactly once and, per partition, in the order it was produced.
//!
//! The clients are installed by `.ci/install-deps.sh` (kcat from Debian, kafka-python from
//! PyPI into `target/kafka-venv`). Without them these tests say so and pass, unless
//! `TAILSTREAM_REQUIRE_KAFKA_CLIENTS` is set (as `.ci/run` does), when a missing client fails.

use crate::common;

use common::kafka::{
    CLIENTS_PY, Seen, bootstrap, check_exactly_once_in_order, kafka_python, kcat, parse, required,
    run,
};
use common::{TEST_TIMEOUT, TestCluster};
use std::collections::HashSet;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kafka_python_produces_idempotently_through_a_crash_and_a_rebalancing_group_reads_each_record_once()
 {
    let Some(python) = required(kafka_python(), "kafka-python") else {
        return;
    };
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(3, "").await;
        let bootstrap = bootstrap(&test);
        let py = |args: &[&str]| {
            let mut all = vec![CLIENTS_PY];
            all.extend_from_slice(args);
            all.into_iter().map(str::to_owned).collect::<Vec<_>>()
        };
        // Replicated, so a broker crash loses nothing: 2 streamlets x 4 logs = 8 partitions.
        let mut config = test.stream_config();
        config.replicas = 1;
        test.client()
            .create_stream("clicks", 2, config)
            .await
            .unwrap();

        // Produce at a bounded rate, and crash the owner of streamlet 1 meanwhile.
        let args = py(&["produce", &bootstrap, "clicks", "20000", "8000"]);
        let producer = {
            let python = python.clone();
            tokio::spawn(async move {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                run(&python, &args, b"").await
            })
        };
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let victim = test.owner_of("clicks", 1).await;
        let mut test = test;
        test.cluster.kill_broker(victim).await;
        let acked = parse(&producer.await.unwrap());
        assert_eq!(acked.len(), 20000, "every record acknowledged");

        // A group of two: one member alone first, reading slowly (4000 records/s) so the
        // second joins while most is unread; the second leaves after 3000 records and the
        // first takes its partitions back, from the offsets the second committed.
        let first_args = py(&["consume", &bootstrap, "clicks", "readers", "0", "6", "4000"]);
        let first = {
            let python = python.clone();
            tokio::spawn(async move {
                let args: Vec<&str> = first_args.iter().map(String::as_str).collect();
                run(&python, &args, b"").await
            })
        };
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let second_args = py(&["consume", &bootstrap, "clicks", "readers", "3000", "6"]);
        let second_args: Vec<&str> = second_args.iter().map(String::as_str).collect();
        let second = parse(&run(&python, &second_args, b"").await);
        let first = parse(&first.await.unwrap());
        assert!(!second.is_empty(), "the second member got partitions");
        let mut read = first;
        read.extend(second);
        check_exactly_once_in_order(&acked, &read);
        // kafka-python fetched through fetch sessions (KIP-227), incremental ones mostly: a
        // client that rejected incremental answers would start over with a full fetch each
        // time.
        let (mut incremental, mut full) = (0u64, 0u64);
        for broker in test.cluster.brokers() {
            let metrics = TestCluster::http_get(broker.admin_addr, "/metrics").await;
            let count = |kind: &str| -> u64 {
                let prefix = format!("tailstream_kafka_fetches_total{{kind=\"{kind}\"}}");
                metrics
                    .lines()
                    .filter(|l| l.starts_with(&prefix))
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                    .sum()
            };
            incremental += count("incremental");
            full += count("full");
        }
        assert!(
            incremental > 2 * full,
            "{incremental} incremental fetches for {full} that opened sessions"
        );

        // Committed offsets survive a coordinator restart: the group goes on from them.
        test.cluster.restart_coordinator().await.unwrap();
        test.wait_for_brokers(2).await;
        let more_args = py(&["produce", &bootstrap, "clicks", "160"]);
        let more_args: Vec<&str> = more_args.iter().map(String::as_str).collect();
        let more = parse(&run(&python, &more_args, b"").await);
        let again_args = py(&["consume", &bootstrap, "clicks", "readers", "0", "5"]);
        let again_args: Vec<&str> = again_args.iter().map(String::as_str).collect();
        let again = parse(&run(&python, &again_args, b"").await);
        let again_set: HashSet<&Seen> = again.iter().collect();
        assert!(
            more.iter().all(|r| again_set.contains(r)) && again.len() == more.len(),
            "only the new records: {} read, {} new",
            again.len(),
            more.len()
        );
        test.stop().await;
    })
    .await
    .expect("kafka-python test finished in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kcat_produces_consumes_and_shares_a_group_and_native_and_kafka_clients_read_each_other() {
    let Some(kcat) = required(kcat(), "kcat") else {
        return;
    };
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(3, "").await;
        let bootstrap = bootstrap(&test);
        // kcat -P: keyed lines, the topic auto-created on first use.
        let lines: String = (0..12_000)
            .map(|i| format!("{}:{}:{}\n", i % 16, i % 16, i / 16))
            .collect();
        run(
            &kcat,
            &["-b", &bootstrap, "-t", "lines", "-P", "-K:", "-z", "lz4"],
            lines.as_bytes(),
        )
        .await;
        // kcat -C reads everything back once, in order per key.
        let read = parse(
            &run(
                &kcat,
                &[
                    "-b",
                    &bootstrap,
                    "-t",
                    "lines",
                    "-C",
                    "-o",
                    "beginning",
                    "-e",
                    "-q",
                    "-f",
                    "%p %o %s\n",
                ],
                b"",
            )
            .await,
        );
        assert_eq!(read.len(), 12_000);
        check_exactly_once_in_order(&read, &read);
        // Two kcat members of one group: however the partitions fall between them (and
        // whichever leaves first), together they read each record once.
        let member = || {
            let (kcat, bootstrap) = (kcat.clone(), bootstrap.clone());
            tokio::spawn(async move {
                run(
                    &kcat,
                    &[
                        "-b",
                        &bootstrap,
                        "-G",
                        "pair",
                        "-X",
                        "auto.offset.reset=earliest",
                        "-q",
                        "-e",
                        "-f",
                        "%p %o %s\n",
                        "lines",
                    ],
                    b"",
                )
                .await
            })
        };
        let (a, b) = (member(), member());
        let mut both = parse(&a.await.unwrap());
        both.extend(parse(&b.await.unwrap()));
        check_exactly_once_in_order(&read, &both);

        // Native producer -> kcat, kcat -> native consumer.
        test.client()
            .create_stream("mixed", 1, test.stream_config())
            .await
            .unwrap();
        let native: String = (0..500).map(|i| format!("{i}\n")).collect();
        let (ok, _, err) = test.cli(&["produce", "mixed"], native.as_bytes()).await;
        assert!(ok, "{err}");
        let through_kcat = run(
            &kcat,
            &[
                "-b",
                &bootstrap,
                "-t",
                "mixed",
                "-C",
                "-o",
                "beginning",
                "-e",
                "-q",
            ],
            b"",
        )
        .await;
        let mut values: Vec<u32> = through_kcat.lines().map(|l| l.parse().unwrap()).collect();
        values.sort_unstable();
        assert_eq!(values, (0..500).collect::<Vec<_>>());
        let from_kcat: String = (0..300).map(|i| format!("k{i}\n")).collect();
        run(
            &kcat,
            &["-b", &bootstrap, "-t", "back", "-P", "-z", "snappy"],
            from_kcat.as_bytes(),
        )
        .await;
        let (ok, out, err) = test
            .cli(
                &[
                    "consume",
                    "back",
                    "--from-beginning",
                    "--max-records",
                    "300",
                ],
                b"",
            )
            .await;
        assert!(ok, "{err}");
        let mut got: Vec<String> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        got.sort();
        let mut expected: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
        expected.sort();
        assert_eq!(got, expected);
        test.stop().await;
    })
    .await
    .expect("kcat test finished in time");
}
