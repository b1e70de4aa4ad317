//! Bad peers against real processes: garbage, oversized and forged frames, unknown opcodes,
//! malformed bodies, corrupt batches, bad positions. Each gets an error status or loses its
//! own connection; the broker keeps serving everyone else, and stored data is untouched.

use crate::common;

use bytes::{Bytes, BytesMut};
use common::{TEST_TIMEOUT, TestCluster};
use std::time::Duration;
use tailstream_net::{RpcClient, RpcClientConfig};
use tailstream_wire::frame::{FrameDecoder, FrameHeader};
use tailstream_wire::messages::{
    FetchRequest, ListGroupsRequest, ListGroupsResponse, ProduceRequest,
};
use tailstream_wire::records::RecordBatchBuilder;
use tailstream_wire::{
    BatchSequence, Encode, GroupId, LogId, Opcode, ProducerId, RequestId, SegmentId,
    SegmentPosition, Status, StreamId, StreamletId,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn read_frame(stream: &mut TcpStream) -> Option<tailstream_wire::Frame> {
    let decoder = FrameDecoder::new(1 << 20);
    let mut buf = BytesMut::new();
    loop {
        if let Some(frame) = decoder.decode(&mut buf).ok()? {
            return Some(frame);
        }
        match tokio::time::timeout(Duration::from_secs(5), stream.read_buf(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return None,
            Ok(Ok(_)) => {}
            Err(_) => panic!("no answer and no close within 5 s"),
        }
    }
}

fn batch(producer: u64, sequence: u32, value: &str) -> Bytes {
    let mut builder = RecordBatchBuilder::new(128);
    builder.push(0, None, Some(value.as_bytes()), &[]);
    builder.finish(
        ProducerId(producer),
        tailstream_wire::ProducerEpoch(0),
        BatchSequence(sequence),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_and_requests_are_refused_without_harming_the_broker() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(1, "").await;
        let cluster = test.client();
        let mut config = test.stream_config();
        config.logs_per_streamlet = 1;
        let stream = cluster.create_stream("victim", 1, config).await.unwrap();
        let broker_addr = stream.streamlets[0].owner_addr.clone();
        let client = RpcClient::connect(&broker_addr, RpcClientConfig::default())
            .await
            .unwrap();

        // Good data first, to check later that nothing below damaged it.
        let producer = cluster
            .clone()
            .producer("victim")
            .config(test.config.producer.clone())
            .build()
            .await
            .unwrap();
        for i in 0..100 {
            producer
                .send(None, format!("good-{i}").as_bytes())
                .await
                .unwrap();
        }
        producer.flush().await.unwrap();

        // Garbage: the connection is closed without an answer.
        let mut raw = TcpStream::connect(&broker_addr).await.unwrap();
        raw.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        raw.write_all(&[0xAB; 100]).await.unwrap();
        assert!(read_frame(&mut raw).await.is_none());

        // A well-formed header announcing 4 GiB: refused before anything is allocated.
        let mut raw = TcpStream::connect(&broker_addr).await.unwrap();
        let mut header = FrameHeader::request(Opcode::Produce, RequestId(9)).encode_for_body(&[]);
        header[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        let crc = crc32fast::hash(&header[8..]);
        header[4..8].copy_from_slice(&crc.to_le_bytes());
        raw.write_all(&header).await.unwrap();
        let answer = read_frame(&mut raw).await.unwrap();
        assert_eq!(
            (answer.header.status(), answer.header.request_id),
            (Status::FrameTooLarge, RequestId(9))
        );
        assert!(read_frame(&mut raw).await.is_none());

        // A body that does not match its checksum.
        let mut raw = TcpStream::connect(&broker_addr).await.unwrap();
        let body = b"some body";
        let mut frame = FrameHeader::request(Opcode::Ping, RequestId(3))
            .encode_for_body(&[body])
            .to_vec();
        frame.extend_from_slice(body);
        let last = frame.len() - 1;
        frame[last] ^= 0x40;
        raw.write_all(&frame).await.unwrap();
        assert_eq!(
            read_frame(&mut raw).await.unwrap().header.status(),
            Status::ChecksumMismatch
        );
        assert!(read_frame(&mut raw).await.is_none());

        // An unknown opcode is answered and the connection stays usable.
        let mut raw = TcpStream::connect(&broker_addr).await.unwrap();
        let mut header = FrameHeader::request(Opcode::Ping, RequestId(4));
        header.opcode_raw = 4242;
        raw.write_all(&header.encode_for_body(&[])).await.unwrap();
        assert_eq!(
            read_frame(&mut raw).await.unwrap().header.status(),
            Status::UnknownOpcode
        );
        raw.write_all(&FrameHeader::request(Opcode::Ping, RequestId(5)).encode_for_body(&[]))
            .await
            .unwrap();
        assert_eq!(
            read_frame(&mut raw).await.unwrap().header.status(),
            Status::Ok
        );

        // Malformed bodies, for every opcode the broker serves to clients.
        for opcode in [
            Opcode::Produce,
            Opcode::Fetch,
            Opcode::ListGroups,
            Opcode::LocateOffset,
        ] {
            let err = client
                .call_parts(opcode, vec![Bytes::from_static(b"\x01\x02\x03")])
                .await
                .unwrap_err();
            assert_eq!(err.status(), Some(Status::Malformed), "{opcode:?}");
        }
        // What members call is not served on the client listener at all...
        for opcode in [
            Opcode::AssignStreamlets,
            Opcode::ReplicaOpen,
            Opcode::ReplicaFree,
            Opcode::ListReplicas,
            Opcode::ReadReplica,
        ] {
            let err = client
                .call_parts(opcode, vec![Bytes::from_static(b"\x01\x02\x03")])
                .await
                .unwrap_err();
            assert_eq!(err.status(), Some(Status::UnknownOpcode), "{opcode:?}");
        }
        // ...but on the peer listener, where malformed bodies are refused the same way.
        let peer_addr = test.cluster.broker(0).unwrap().peer_addr.to_string();
        let peer = RpcClient::connect(&peer_addr, RpcClientConfig::default())
            .await
            .unwrap();
        for opcode in [Opcode::AssignStreamlets, Opcode::ReplicaOpen] {
            let err = peer
                .call_parts(opcode, vec![Bytes::from_static(b"\x01\x02\x03")])
                .await
                .unwrap_err();
            assert_eq!(err.status(), Some(Status::Malformed), "{opcode:?}");
        }
        let err = peer.call_parts(Opcode::Produce, vec![]).await.unwrap_err();
        assert_eq!(err.status(), Some(Status::UnknownOpcode));
        // Coordinator-only operations are refused by a broker.
        let err = client
            .call_parts(Opcode::CreateStream, vec![])
            .await
            .unwrap_err();
        assert_eq!(err.status(), Some(Status::UnknownOpcode));

        let produce = |stream: StreamId, batch: Bytes| ProduceRequest {
            stream,
            streamlet: StreamletId(0),
            epoch: tailstream_wire::OwnershipEpoch(1),
            batch,
        };
        // Unknown stream: not this broker's.
        let err = client
            .call_parts(
                Opcode::Produce,
                vec![produce(StreamId(999), batch(77, 0, "x")).to_bytes()],
            )
            .await
            .unwrap_err();
        assert_eq!(err.status(), Some(Status::NotOwner));
        // A batch whose CRC-32C does not match: refused, nothing appended.
        let mut corrupt = batch(77, 0, "corrupt").to_vec();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 1;
        let err = client
            .call_parts(
                Opcode::Produce,
                vec![produce(stream.id, Bytes::from(corrupt)).to_bytes()],
            )
            .await
            .unwrap_err();
        assert_eq!(err.status(), Some(Status::InvalidBatch));
        // Truncated batch.
        let truncated = batch(77, 0, "t").slice(..30);
        let err = client
            .call_parts(
                Opcode::Produce,
                vec![produce(stream.id, truncated).to_bytes()],
            )
            .await
            .unwrap_err();
        assert_eq!(err.status(), Some(Status::InvalidBatch));
        // A sequence gap.
        let err = client
            .call_parts(
                Opcode::Produce,
                vec![produce(stream.id, batch(producer.id().0, 1_000, "gap")).to_bytes()],
            )
            .await
            .unwrap_err();
        assert_eq!(err.status(), Some(Status::OutOfOrderSequence));

        // Fetches of things that do not exist.
        let groups: ListGroupsResponse = client
            .call(
                Opcode::ListGroups,
                &ListGroupsRequest {
                    stream: stream.id,
                    streamlet: StreamletId(0),
                    epoch: tailstream_wire::OwnershipEpoch(1),
                },
            )
            .await
            .unwrap();
        let group = &groups.logs[0].groups[0];
        let fetch = |log, group, segment, position| FetchRequest {
            stream: stream.id,
            streamlet: StreamletId(0),
            epoch: tailstream_wire::OwnershipEpoch(1),
            log: LogId(log),
            group,
            segment,
            position: SegmentPosition(position),
            max_bytes: 1 << 20,
            max_wait_ms: 0,
        };
        let cases = [
            (
                fetch(5, group.group, group.segments[0].segment, 0),
                Status::UnknownLog,
            ),
            (
                fetch(0, GroupId(12345), group.segments[0].segment, 0),
                Status::UnknownGroup,
            ),
            (
                fetch(0, group.group, SegmentId(999), 0),
                Status::UnknownSegment,
            ),
            (
                fetch(0, group.group, group.segments[0].segment, 7),
                Status::PositionOutOfRange,
            ),
            (
                fetch(0, group.group, group.segments[0].segment, u32::MAX),
                Status::PositionOutOfRange,
            ),
        ];
        for (request, status) in cases {
            let err = client
                .call_parts(Opcode::Fetch, vec![request.to_bytes()])
                .await
                .unwrap_err();
            assert_eq!(err.status(), Some(status), "{request:?}");
        }

        // Random bodies for every opcode: never a crash.
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for round in 0..400 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 300) as usize;
            let body: Vec<u8> = (0..len)
                .map(|i| (seed.rotate_left(i as u32 % 64) >> 3) as u8)
                .collect();
            let opcode = tailstream_wire::Opcode::ALL[round % tailstream_wire::Opcode::ALL.len()];
            let _ = client.call_parts(opcode, vec![Bytes::from(body)]).await;
        }

        // The broker still serves, and the good data is intact and alone.
        let mut consumer = cluster
            .consumer("victim")
            .config(test.config.consumer.clone())
            .from_beginning()
            .build()
            .await
            .unwrap();
        let mut values = Vec::new();
        for _ in 0..50 {
            values.extend(consumer.poll(Duration::from_millis(100)).await.unwrap());
            if values.len() >= 100 {
                break;
            }
        }
        let values: Vec<String> = values
            .iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
            .collect();
        let expected: Vec<String> = (0..100).map(|i| format!("good-{i}")).collect();
        assert_eq!(values, expected);
        test.stop().await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_and_coordinator_refuse_unknown_and_invalid_streams_clearly() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(1, "").await;
        let (ok, _, err) = test.cli(&["stream", "describe", "nope"], b"").await;
        assert!(!ok && err.contains("no stream named \"nope\""), "{err}");
        let (ok, _, err) = test.cli(&["produce", "nope"], b"x\n").await;
        assert!(!ok && err.contains("nope"), "{err}");
        let (ok, _, err) = test
            .cli(&["stream", "create", "bad name!", "--streamlets", "1"], b"")
            .await;
        assert!(!ok && err.contains("stream name"), "{err}");
        let (ok, _, err) = test
            .cli(&["stream", "create", "zero", "--streamlets", "0"], b"")
            .await;
        assert!(!ok && err.contains("streamlets"), "{err}");
        let (ok, _, err) = test
            .cli(
                &["stream", "create", "s", "--streamlets", "1", "--logs", "0"],
                b"",
            )
            .await;
        assert!(!ok && err.contains("logs"), "{err}");
        let (ok, _, err) = test
            .cli(&["stream", "create", "s", "--streamlets", "1"], b"")
            .await;
        assert!(ok, "{err}");
        let (ok, _, err) = test
            .cli(&["stream", "create", "s", "--streamlets", "1"], b"")
            .await;
        assert!(!ok && err.contains("already exists"), "{err}");
        // Garbage to the coordinator closes only that connection.
        let mut raw = TcpStream::connect(test.coordinator()).await.unwrap();
        raw.write_all(&[0u8; 64]).await.unwrap();
        assert!(read_frame(&mut raw).await.is_none());
        let (ok, out, _) = test.cli(&["stream", "list"], b"").await;
        assert!(ok && String::from_utf8(out).unwrap().contains("stream s "));
        test.stop().await;
    })
    .await
    .unwrap();
}
