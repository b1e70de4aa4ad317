//! A hostile Kafka client against a real broker's Kafka listener, from 127.0.0.2: garbage,
//! lying length prefixes, arrays claiming 2^31 elements, unserved APIs and versions each close
//! only their own connection; corrupt and poisoned record batches are refused with Kafka's
//! error code and the connection goes on; a client that pipelines thousands of requests
//! without reading is answered in order, at the pace it reads. Meanwhile the broker's memory
//! stays flat, legitimate clients keep working and nothing bad lands in the log.

use crate::common;

use bytes::{BufMut, BytesMut};
use common::hostile::{connect_from_elsewhere, metric, round_trip, rss_bytes};
use common::{TEST_TIMEOUT, TestCluster};
use std::net::SocketAddr;
use std::time::Duration;
use tailstream_wire::records::RecordBatchBuilder;
use tailstream_wire::{BatchSequence, ProducerId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const API_VERSIONS: i16 = 18;
const METADATA: i16 = 3;
const PRODUCE: i16 = 0;
/// Kafka's error codes the broker must answer with.
const CORRUPT_MESSAGE: i16 = 2;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

/// A request frame: length, header v1 (api key, version, correlation id, no client id), body.
pub(crate) fn request(api_key: i16, version: i16, correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_i32((10 + body.len()) as i32);
    out.put_i16(api_key);
    out.put_i16(version);
    out.put_i32(correlation_id);
    out.put_i16(-1);
    out.put_slice(body);
    out.to_vec()
}

/// Produce v3, acks=all, one partition of `topic` carrying `records`.
pub(crate) fn produce(correlation_id: i32, topic: &str, partition: i32, records: &[u8]) -> Vec<u8> {
    produce_copies(correlation_id, topic, partition, records, 1)
}

/// Produce v3, acks=all, `copies` entries for `partition` of `topic`, each carrying `records`.
pub(crate) fn produce_copies(
    correlation_id: i32,
    topic: &str,
    partition: i32,
    records: &[u8],
    copies: i32,
) -> Vec<u8> {
    let mut body = BytesMut::new();
    body.put_i16(-1); // no transactional id
    body.put_i16(-1); // acks = all
    body.put_i32(10_000);
    body.put_i32(1);
    body.put_i16(topic.len() as i16);
    body.put_slice(topic.as_bytes());
    body.put_i32(copies);
    for _ in 0..copies {
        body.put_i32(partition);
        body.put_i32(records.len() as i32);
        body.put_slice(records);
    }
    request(PRODUCE, 3, correlation_id, &body)
}

/// The next answer on `stream`: (correlation id, body), or `None` if the broker closed it.
pub(crate) async fn answer(stream: &mut TcpStream) -> Option<(i32, Vec<u8>)> {
    let read = async {
        let length = stream.read_i32().await.ok()?;
        assert!(
            (4..1 << 20).contains(&length),
            "an answer of {length} bytes"
        );
        let correlation_id = stream.read_i32().await.ok()?;
        let mut body = vec![0u8; length as usize - 4];
        stream.read_exact(&mut body).await.ok()?;
        Some((correlation_id, body))
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("an answer or a close within 10 s")
}

/// The error code of a Produce v3 answer's first partition.
pub(crate) fn produce_error(body: &[u8]) -> i16 {
    // topics count, topic name (i16 length + bytes), partitions count, index, error code
    let name = i16::from_be_bytes([body[4], body[5]]) as usize;
    let at = 6 + name + 8;
    i16::from_be_bytes([body[at], body[at + 1]])
}

/// Sends `bytes` on a fresh connection from elsewhere and expects the broker to close it
/// without an answer.
async fn closes_without_answer(addr: SocketAddr, what: &str, bytes: &[u8]) {
    let mut stream = connect_from_elsewhere(addr).await;
    stream.write_all(bytes).await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "{what}: the connection was not closed ({read:?}, {} bytes answered)",
        rest.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_kafka_requests_cost_their_sender_its_connection_and_nobody_else_anything() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(1, "").await;
        let broker = test.cluster.broker(0).unwrap();
        let kafka = broker
            .kafka_addr
            .expect("the kafka listener is on by default");
        let pid = broker.pid().unwrap();
        let rss_before = rss_bytes(pid);
        let (ok, _, err) = test
            .cli(
                &[
                    "stream",
                    "create",
                    "victim",
                    "--streamlets",
                    "1",
                    "--logs",
                    "1",
                ],
                b"",
            )
            .await;
        assert!(ok, "{err}");
        let lines: String = (0..100).map(|i| format!("good-{i}\n")).collect();
        let (ok, _, err) = test.cli(&["produce", "victim"], lines.as_bytes()).await;
        assert!(ok, "{err}");

        // Frames that do not parse, or lie about their size: each closes its connection.
        // Metadata v8 whose topics array claims 2^31 - 1 names, in a 4-byte body.
        let metadata_lie = request(METADATA, 8, 3, &i32::MAX.to_be_bytes());
        let unserved_version = request(PRODUCE, 99, 4, &[0; 16]);
        // A 2 MiB Metadata request, of which only the head is sent: anything but Produce is
        // refused past 1 MiB on its API key, before its body is awaited or decoded.
        let mut oversized_metadata = request(METADATA, 8, 6, &[]);
        oversized_metadata[..4].copy_from_slice(&(2i32 << 20).to_be_bytes());
        let attacks: [(&str, Vec<u8>); 8] = [
            ("a 2 MiB Metadata request", oversized_metadata),
            ("garbage", [&16i32.to_be_bytes()[..], &[0xab; 16]].concat()),
            ("a 2 GiB length prefix", i32::MAX.to_be_bytes().to_vec()),
            ("a negative length prefix", (-1i32).to_be_bytes().to_vec()),
            (
                "a frame shorter than a header",
                [0, 0, 0, 4, 0, 18, 0, 0].to_vec(),
            ),
            ("an array claiming 2^31 topics", metadata_lie),
            ("an unserved version", unserved_version),
            ("an unknown api", request(1000, 0, 5, &[])),
        ];
        for (what, bytes) in &attacks {
            closes_without_answer(kafka, what, bytes).await;
        }
        let refused = metric(
            broker.admin_addr,
            "tailstream_kafka_requests_refused_total",
            &[],
        )
        .await;
        assert!(refused >= 4.0, "{refused} requests refused");

        // Bad record batches are refused by partition, with Kafka's codes; the connection
        // stays and answers the next request.
        let mut stream = connect_from_elsewhere(kafka).await;
        let mut builder = RecordBatchBuilder::new(64);
        builder.push(0, None, Some(b"evil"), &[]);
        let mut corrupt = builder
            .finish(
                ProducerId(77),
                tailstream_wire::ProducerEpoch(0),
                BatchSequence(0),
            )
            .to_vec();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0x40; // a bit flip under the CRC
        let mut poisoned = corrupt.clone();
        poisoned[last] ^= 0x40;
        // A negative record length (zigzag 5 = -3) behind a valid CRC.
        let header = tailstream_wire::batch::BATCH_HEADER_BYTES;
        poisoned.truncate(header);
        poisoned.extend_from_slice(&[5, 0, 0, 0, 1, 1, 0]);
        let length = (poisoned.len() - 12) as i32;
        poisoned[8..12].copy_from_slice(&length.to_be_bytes());
        tailstream_wire::batch::restamp_sequence(&mut poisoned, BatchSequence(0)).unwrap();
        // Without idempotence (producer id -1) Kafka ignores the epoch and sequence: a
        // widely used client's default producer sends sequence 0 there.
        let mut plain = RecordBatchBuilder::new(64);
        plain.push(0, None, Some(b"plain"), &[]);
        let mut plain = plain.finish_without_producer().to_vec();
        tailstream_wire::batch::restamp_sequence(&mut plain, BatchSequence(0)).unwrap();
        let cases = [
            (
                "no producer id, sequence 0",
                produce(9, "victim", 0, &plain),
                0,
            ),
            (
                "a bit flip",
                produce(10, "victim", 0, &corrupt),
                CORRUPT_MESSAGE,
            ),
            (
                "a poisoned record",
                produce(11, "victim", 0, &poisoned),
                CORRUPT_MESSAGE,
            ),
            (
                "a partition that does not exist",
                produce(12, "victim", 99, &corrupt),
                UNKNOWN_TOPIC_OR_PARTITION,
            ),
        ];
        for (what, bytes, code) in &cases {
            stream.write_all(bytes).await.unwrap();
            let (_, body) = answer(&mut stream).await.expect("answered, not closed");
            assert_eq!(produce_error(&body), *code, "{what}");
        }

        // Thousands of requests pipelined without reading: the broker stops reading at its
        // in-flight bound, and answers every one, in order, as the client reads.
        let pipelined = 3000;
        let burst: Vec<u8> = (0..pipelined)
            .flat_map(|id| request(API_VERSIONS, 0, 100 + id, &[]))
            .collect();
        let (mut read_half, mut write_half) = stream.into_split();
        let writer = tokio::spawn(async move {
            write_half.write_all(&burst).await.unwrap();
            write_half
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut stream_answers = 0;
        while stream_answers < pipelined {
            let length = read_half.read_i32().await.unwrap();
            let correlation_id = read_half.read_i32().await.unwrap();
            assert_eq!(
                correlation_id,
                100 + stream_answers,
                "answers in request order"
            );
            let mut body = vec![0u8; length as usize - 4];
            read_half.read_exact(&mut body).await.unwrap();
            stream_answers += 1;
        }
        drop(writer.await.unwrap());

        // The broker lives, its memory did not follow the lies, and nothing bad was stored:
        // a consumer reads the 100 good records, the one without a producer id, and nothing
        // else.
        round_trip(&test, "after-kafka-attacks", 100).await;
        let rss_after = rss_bytes(pid);
        assert!(
            rss_after < rss_before + (128 << 20),
            "RSS grew from {rss_before} to {rss_after}"
        );
        let (ok, out, err) = test
            .cli(
                &[
                    "consume",
                    "victim",
                    "--from-beginning",
                    "--max-records",
                    "102",
                    "--idle-timeout-ms",
                    "1500",
                ],
                b"",
            )
            .await;
        assert!(ok, "{err}");
        assert_eq!(String::from_utf8(out).unwrap(), format!("{lines}plain\n"));
        test.stop().await;
    })
    .await
    .unwrap();
}

/// Metadata v4 naming `topics`, auto-creation asked for.
fn metadata_naming(correlation_id: i32, topics: &[String]) -> Vec<u8> {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{MetadataRequest, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};
    let named = topics
        .iter()
        .map(|t| {
            MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
        })
        .collect();
    let body = MetadataRequest::default()
        .with_topics(Some(named))
        .with_allow_auto_topic_creation(true);
    let mut encoded = BytesMut::new();
    body.encode(&mut encoded, 4).unwrap();
    request(METADATA, 4, correlation_id, &encoded)
}

/// Each topic of a Metadata v4 answer with its error code.
fn topic_errors(body: &[u8]) -> Vec<(String, i16)> {
    use kafka_protocol::messages::MetadataResponse;
    use kafka_protocol::protocol::Decodable;
    let answer = MetadataResponse::decode(&mut bytes::Bytes::copy_from_slice(body), 4).unwrap();
    answer
        .topics
        .iter()
        .map(|t| {
            let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
            (name, t.error_code)
        })
        .collect()
}

/// Issue 23's auto-creation flood: one Metadata request naming 524,000 new topics kept a
/// coordinator busy for 35 minutes, and any client could create streams without end. Now a
/// request naming more than `kafka.metadata_topics_max` topics is answered from one listing
/// and creates nothing; a broker auto-creates at its budget's pace (the rest are answered
/// LEADER_NOT_AVAILABLE, which clients retry, and created once the budget refills); and the
/// cluster holds at most `coordinator.streams_max` streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_auto_creation_floods_are_bounded_by_request_rate_and_cluster() {
    const LEADER_NOT_AVAILABLE: i16 = 5;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let overrides = "[kafka]\nmetadata_topics_max = 50\nauto_creates_per_second = 2\n\
                         auto_create_burst = 4\n[coordinator]\nstreams_max = 7\n";
        let test = TestCluster::start(1, overrides).await;
        let broker = test.cluster.broker(0).unwrap();
        let kafka = broker.kafka_addr.unwrap();
        let names = |prefix: &str, count: usize| -> Vec<String> {
            (0..count).map(|i| format!("{prefix}-{i}")).collect()
        };
        let streams = || async { test.client().list_streams().await.unwrap().len() };
        let mut stream = connect_from_elsewhere(kafka).await;

        // 51 names: answered from one listing, nothing created.
        stream
            .write_all(&metadata_naming(1, &names("flood", 51)))
            .await
            .unwrap();
        let (_, body) = answer(&mut stream).await.expect("answered, not closed");
        let errors = topic_errors(&body);
        assert_eq!(errors.len(), 51);
        assert!(
            errors
                .iter()
                .all(|(_, code)| *code == UNKNOWN_TOPIC_OR_PARTITION),
            "{errors:?}"
        );
        assert_eq!(streams().await, 0, "nothing created for a refused request");
        let too_many = metric(
            broker.admin_addr,
            "tailstream_kafka_metadata_too_many_topics_total",
            &[],
        )
        .await;
        assert_eq!(too_many, 1.0);

        // 10 new names at once: the burst (4) is created, and what the budget refilled
        // (2 a second) while it was; the rest wait for the budget.
        let asked = std::time::Instant::now();
        stream
            .write_all(&metadata_naming(2, &names("burst", 10)))
            .await
            .unwrap();
        let (_, body) = answer(&mut stream).await.expect("answered, not closed");
        let refilled = (asked.elapsed().as_secs_f64() * 2.0).ceil() as usize;
        let errors = topic_errors(&body);
        let created = errors.iter().filter(|(_, code)| *code == 0).count();
        let refused = errors
            .iter()
            .filter(|(_, code)| *code == LEADER_NOT_AVAILABLE)
            .count();
        assert!(
            created >= 4 && created <= 4 + refilled,
            "{created} created at once, {refilled} refilled meanwhile"
        );
        assert!(created + refused <= 10);
        assert_eq!(streams().await, created);
        let by_rate = metric(
            broker.admin_addr,
            "tailstream_kafka_auto_creates_refused_total",
            &[("reason", "rate")],
        )
        .await;
        // On a slow machine the budget may refill past the cluster's 7 during the request.
        let by_limit = metric(
            broker.admin_addr,
            "tailstream_kafka_auto_creates_refused_total",
            &[("reason", "limit")],
        )
        .await;
        assert_eq!(by_rate, refused as f64);
        assert_eq!(by_rate + by_limit, (10 - created) as f64);

        // Asked again as the budget refills, the rest are created, up to the cluster's 7
        // streams; the last ones are refused for the cluster's limit, not the rate.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut correlation_id = 3;
        while streams().await < 7 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "never reached 7 streams"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
            stream
                .write_all(&metadata_naming(correlation_id, &names("burst", 10)))
                .await
                .unwrap();
            correlation_id += 1;
            answer(&mut stream).await.expect("answered, not closed");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        stream
            .write_all(&metadata_naming(correlation_id, &names("burst", 10)))
            .await
            .unwrap();
        let (_, body) = answer(&mut stream).await.expect("answered, not closed");
        let errors = topic_errors(&body);
        assert_eq!(
            errors.iter().filter(|(_, code)| *code == 0).count(),
            7,
            "{errors:?}"
        );
        assert_eq!(streams().await, 7, "never past coordinator.streams_max");
        let by_limit = metric(
            broker.admin_addr,
            "tailstream_kafka_auto_creates_refused_total",
            &[("reason", "limit")],
        )
        .await;
        assert!(
            by_limit >= 1.0,
            "{by_limit} refused for the cluster's limit"
        );
        // A request over the cap still answers the topics that exist.
        let mut many = names("burst", 7);
        many.extend(names("absent", 44));
        stream
            .write_all(&metadata_naming(correlation_id + 1, &many))
            .await
            .unwrap();
        let (_, body) = answer(&mut stream).await.expect("answered, not closed");
        let errors = topic_errors(&body);
        assert_eq!(errors.iter().filter(|(_, code)| *code == 0).count(), 7);
        assert_eq!(streams().await, 7);
        let (ok, _, err) = test
            .cli(&["stream", "create", "explicit", "--streamlets", "1"], b"")
            .await;
        assert!(!ok, "an explicit create past the limit is refused too");
        assert!(err.contains("streams_max"), "{err}");
        test.stop().await;
    })
    .await
    .unwrap();
}

/// JoinGroup v1 of a new member to `group`, sessions and rebalances of 60 s.
fn join_group(correlation_id: i32, group: &str) -> Vec<u8> {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::{GroupId, JoinGroupRequest};
    use kafka_protocol::protocol::{Encodable, StrBytes};
    let body = JoinGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
        .with_session_timeout_ms(60_000)
        .with_rebalance_timeout_ms(60_000)
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str("range"))
                .with_metadata(bytes::Bytes::from_static(b"m")),
        ]);
    let mut encoded = BytesMut::new();
    body.encode(&mut encoded, 1).unwrap();
    request(11, 1, correlation_id, &encoded)
}

/// OffsetCommit v2 of a group without members: `topic` partition 0 at `offset`.
fn commit_offset(correlation_id: i32, group: &str, topic: &str, offset: i64) -> Vec<u8> {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, OffsetCommitRequest, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};
    let body = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
        .with_generation_id_or_member_epoch(-1)
        .with_retention_time_ms(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset),
                ]),
        ]);
    let mut encoded = BytesMut::new();
    body.encode(&mut encoded, 2).unwrap();
    request(8, 2, correlation_id, &encoded)
}

/// Issue 23's group lockout through one broker: its Kafka clients' group calls went to the
/// coordinator over one connection, so one client's 1,100 joins (each waiting for a rebalance
/// that a silent member holds open) blocked every offset commit through that broker for
/// minutes. Joins and syncs now have a connection of their own: with 1,100 of them waiting,
/// another group's commit is answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_waiting_joins_never_delay_another_groups_commits() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(1, "[coordinator]\ngroup_members_max = 2000\n").await;
        let kafka = test.cluster.broker(0).unwrap().kafka_addr.unwrap();
        test.client()
            .create_stream("ledger", 1, test.stream_config())
            .await
            .unwrap();
        // The silent member: joins (alone, the group forms), then never rejoins, so every
        // later join waits for the rebalance's 60 s deadline.
        let mut silent = connect_from_elsewhere(kafka).await;
        silent.write_all(&join_group(1, "held")).await.unwrap();
        answer(&mut silent).await.expect("the first member joined");
        // 1,100 joins on 20 connections (55 each, under the per-connection cap of 64).
        let mut joiners = Vec::new();
        for connection in 0..20 {
            let mut stream = connect_from_elsewhere(kafka).await;
            for i in 0..55 {
                stream
                    .write_all(&join_group(connection * 100 + i, "held"))
                    .await
                    .unwrap();
            }
            joiners.push(stream);
        }
        // Give them time to reach the coordinator and wait there.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut committer = connect_from_elsewhere(kafka).await;
        for round in 0..3 {
            let asked = std::time::Instant::now();
            committer
                .write_all(&commit_offset(round, "bystander", "ledger", 1))
                .await
                .unwrap();
            let (_, body) = answer(&mut committer).await.expect("answered, not closed");
            let code = {
                use kafka_protocol::messages::OffsetCommitResponse;
                use kafka_protocol::protocol::Decodable;
                let mut body = bytes::Bytes::from(body);
                OffsetCommitResponse::decode(&mut body, 2).unwrap().topics[0].partitions[0]
                    .error_code
            };
            assert_eq!(code, 0, "the bystander's commit was refused");
            eprintln!(
                "a commit behind 1,100 waiting joins answered in {:?}",
                asked.elapsed()
            );
            assert!(
                asked.elapsed() < Duration::from_secs(2),
                "a commit took {:?} behind 1,100 waiting joins",
                asked.elapsed()
            );
        }
        drop(joiners);
        test.stop().await;
    })
    .await
    .unwrap();
}
