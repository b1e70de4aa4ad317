//! Issue 23, item 4: decompression work is bounded per connection, on the Kafka listener and
//! on the native one. A compressed batch of a
//! few KiB can decompress to 32 MiB, and the broker decompresses every batch once to check its
//! records; a client sending such batches back to back would have the broker's cores
//! decompress for it. Past `kafka.decompressed_bytes_per_second_per_connection` the connection
//! waits before each batch, within one request as across requests, until its debt has drained.
//! Every batch is still taken (nothing is refused), and another client on another connection
//! is not slowed. A native produce is handled on the connection's reader, in arrival order, so
//! it is answered `Busy` (clients retry) while its connection owes, rather than held.

use crate::common;
use crate::kafka_hostile::{answer, produce, produce_copies, produce_error};

use common::hostile::{connect_from_elsewhere, metric, round_trip};
use common::{TEST_TIMEOUT, TestCluster};
use std::time::{Duration, Instant};
use tailstream_wire::batch::compress_batch;
use tailstream_wire::compression::Compression;
use tailstream_wire::records::RecordBatchBuilder;
use tokio::io::AsyncWriteExt;

/// 32 MiB of decompression per second per connection, one second of burst.
const OVERRIDES: &str = "[kafka]\ndecompressed_bytes_per_second_per_connection = 33554432\n";
/// Each batch: one record of 24 MiB of zeros, gzip-compressed to a few KiB.
const PLAIN_BYTES: usize = 24 << 20;
const REQUESTS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_makes_the_broker_decompress_a_lot_is_throttled() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(1, OVERRIDES).await;
        round_trip(&test, "bombs", 0).await;
        let broker = test.cluster.broker(0).unwrap();
        let kafka = broker.kafka_addr.unwrap();

        let mut builder = RecordBatchBuilder::new(PLAIN_BYTES + 64);
        builder.push(0, None, Some(&vec![0u8; PLAIN_BYTES]), &[]);
        let plain = builder.finish_without_producer();
        let bomb = compress_batch(&plain, Compression::Gzip).unwrap();
        assert!(bomb.len() < 256 << 10, "a {} byte batch", bomb.len());

        // One request carrying six of them (the same partition six times): paced within it.
        let started = Instant::now();
        let mut stream = connect_from_elsewhere(kafka).await;
        stream
            .write_all(&produce_copies(1000, "bombs", 0, &bomb, 6))
            .await
            .unwrap();
        let (id, _) = answer_within(&mut stream, Duration::from_secs(30)).await;
        assert_eq!(id, 1000);
        let took = started.elapsed();
        eprintln!("one request of 6 took {took:?}");
        // 144 MiB at 32 MiB/s, one second of it free, the last batch not waited for: 2.75 s.
        assert!(took >= Duration::from_secs(2), "not paced: {took:?}");

        // Request after request on a fresh connection.
        let started = Instant::now();
        let mut stream = connect_from_elsewhere(kafka).await;
        for i in 0..REQUESTS {
            let correlation_id = i as i32;
            stream
                .write_all(&produce(correlation_id, "bombs", 0, &bomb))
                .await
                .unwrap();
            let (id, body) = answer(&mut stream).await.expect("an answer");
            assert_eq!(id, correlation_id);
            assert_eq!(produce_error(&body), 0, "batch {i} taken");
        }
        let took = started.elapsed();
        // 192 MiB of decompression at 32 MiB/s, one second of it free: about 5 s.
        let throttled = metric(
            broker.admin_addr,
            "tailstream_kafka_throttled_milliseconds_total",
            &[("kind", "decompress")],
        )
        .await;
        eprintln!("{REQUESTS} requests took {took:?}; throttled {throttled} ms");
        assert!(took >= Duration::from_secs(3), "not held back: {took:?}");
        assert!(throttled >= 2000.0, "throttled {throttled} ms");
        // Another connection meanwhile is not held back by this one's debt.
        let mut other = connect_from_elsewhere(kafka).await;
        let asked = Instant::now();
        other
            .write_all(&produce(99, "bombs", 0, &plain_batch()))
            .await
            .unwrap();
        let (_, body) = answer(&mut other).await.expect("an answer");
        assert_eq!(produce_error(&body), 0);
        assert!(asked.elapsed() < Duration::from_secs(2));
        test.stop().await;
    })
    .await
    .expect("the decompression test finished in time");
}

/// The next answer's correlation id and body, within `limit`.
async fn answer_within(stream: &mut tokio::net::TcpStream, limit: Duration) -> (i32, Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let read = async {
        let length = stream.read_i32().await.unwrap();
        let id = stream.read_i32().await.unwrap();
        let mut body = vec![0u8; length as usize - 4];
        stream.read_exact(&mut body).await.unwrap();
        (id, body)
    };
    tokio::time::timeout(limit, read).await.expect("an answer")
}

/// A small uncompressed batch: no decompression at all.
fn plain_batch() -> Vec<u8> {
    let mut builder = RecordBatchBuilder::new(64);
    builder.push(0, None, Some(b"ordinary"), &[]);
    builder.finish_without_producer().to_vec()
}

/// A native connection past `broker.decompressed_bytes_per_second_per_connection` is told to
/// retry, and is taken again once its debt has drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_connection_that_makes_the_broker_decompress_a_lot_is_told_to_retry() {
    use bytes::Bytes;
    use tailstream_net::{RpcClient, RpcClientConfig};
    use tailstream_wire::messages::{ProduceRequest, ProduceResponse};
    use tailstream_wire::{BatchSequence, Decode, Opcode, ProducerEpoch, Status};

    tokio::time::timeout(TEST_TIMEOUT, async {
        let overrides = "[broker]\ndecompressed_bytes_per_second_per_connection = 33554432\n";
        let test = TestCluster::start(1, overrides).await;
        round_trip(&test, "bombs", 0).await;
        let client = test.client();
        let producer = client.coordinator().allocate_producer_id().await.unwrap();
        let stream = client.coordinator().refresh_stream("bombs").await.unwrap();
        let placement = &stream.streamlets[0];
        let broker = test.cluster.broker(0).unwrap();
        let connection =
            RpcClient::connect(&broker.rpc_addr.to_string(), RpcClientConfig::default())
                .await
                .unwrap();
        let send = |sequence: u32| {
            let mut builder = RecordBatchBuilder::new(PLAIN_BYTES + 64);
            builder.push(0, None, Some(&vec![0u8; PLAIN_BYTES]), &[]);
            let plain = builder.finish(producer, ProducerEpoch(0), BatchSequence(sequence));
            let bomb = compress_batch(&plain, Compression::Gzip).unwrap();
            let prefix = ProduceRequest {
                stream: stream.id,
                streamlet: placement.streamlet,
                epoch: placement.epoch,
                batch: Bytes::new(),
            }
            .encode_prefix();
            let connection = connection.clone();
            async move {
                let parts = vec![Bytes::copy_from_slice(&prefix), Bytes::from(bomb)];
                connection
                    .call_parts(Opcode::Produce, parts)
                    .await
                    .map(|body| ProduceResponse::decode_exact(body).unwrap())
            }
        };
        // 24 MiB each, at 32 MiB/s with a second's burst: two go through, then the
        // connection owes and the third is told to retry.
        send(0).await.unwrap();
        send(1).await.unwrap();
        let refused = send(2).await.unwrap_err();
        assert_eq!(refused.status(), Some(Status::Busy), "{refused}");
        assert!(
            refused
                .to_string()
                .contains("decompressed_bytes_per_second_per_connection"),
            "{refused}"
        );
        // Once the debt has drained, the same batch is taken.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let taken = send(2).await.unwrap();
        assert!(!taken.duplicate);
        let paced = metric(broker.admin_addr, "tailstream_produces_paced_total", &[]).await;
        assert!(paced >= 1.0, "paced {paced}");
        test.stop().await;
    })
    .await
    .expect("the native decompression test finished in time");
}
