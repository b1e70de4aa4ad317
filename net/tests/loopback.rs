#![allow(clippy::unwrap_used)] // tests may unwrap freely (see clippy.toml)

//! The transport against a toy service on 127.0.0.1: pipelining, ordering, bounds, and bad
//! peers losing only their own connection.

use bytes::{BufMut, Bytes, BytesMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tailstream_net::server::{ServerLimits, serve};
use tailstream_net::{
    BodyBudget, ConnectionLimits, Reply, Request, Response, RpcClient, RpcClientConfig, RpcError,
    Service,
};
use tailstream_wire::frame::{FrameDecoder, FrameHeader};
use tailstream_wire::{Opcode, RequestId, Status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Ping echoes its body, answering later; Produce records the order requests were dispatched in
/// and answers at once.
#[derive(Default)]
struct Toy {
    dispatched: AtomicU64,
}

impl Service for Toy {
    fn dispatch(&self, request: Request) -> Reply {
        match request.opcode {
            Opcode::Ping => Reply::Later(Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                Response::ok_parts(vec![request.body])
            })),
            Opcode::Produce => {
                let seen = self.dispatched.fetch_add(1, Ordering::SeqCst);
                Reply::Ready(Response::ok_parts(vec![Bytes::copy_from_slice(
                    &seen.to_le_bytes(),
                )]))
            }
            _ => Reply::Ready(Response::error(
                Status::InvalidArgument,
                "toy does not know it",
            )),
        }
    }
}

async fn start(frame_body_bytes_max: u32) -> (String, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = watch::channel(false);
    let limits = ServerLimits {
        connections: ConnectionLimits {
            connections_max: 16,
            connections_per_address_max: 16,
        },
        requests_in_flight_per_connection_max: 8,
        frame_body_bytes_max,
        idle_timeout: Duration::from_secs(60),
        request_read_timeout: Duration::from_secs(10),
        body_budget: BodyBudget::new("test", 1 << 20),
        tls: None,
        authentication: None,
    };
    tokio::spawn(serve(
        listener,
        "test",
        Arc::new(Toy::default()),
        limits,
        stopped,
    ));
    (addr, stop)
}

#[tokio::test]
async fn pipelined_calls_each_get_their_own_answer_and_keep_dispatch_order() {
    let (addr, _stop) = start(1 << 20).await;
    let client = RpcClient::connect(&addr, RpcClientConfig::default())
        .await
        .unwrap();
    let echoes = (0..200u32).map(|i| {
        let client = client.clone();
        async move {
            let body = Bytes::from(format!("echo-{i}"));
            let answer = client
                .call_parts(Opcode::Ping, vec![body.clone()])
                .await
                .unwrap();
            assert_eq!(answer, body);
        }
    });
    futures::future::join_all(echoes).await;
    // Requests queued one after another on the connection are dispatched in that order.
    let mut last = None;
    for _ in 0..50 {
        let answer = client.call_parts(Opcode::Produce, vec![]).await.unwrap();
        let seen = u64::from_le_bytes(answer[..].try_into().unwrap());
        assert!(last.is_none_or(|l| seen > l));
        last = Some(seen);
    }
}

#[tokio::test]
async fn error_statuses_and_unknown_opcodes_come_back_as_errors() {
    let (addr, _stop) = start(1 << 20).await;
    let client = RpcClient::connect(&addr, RpcClientConfig::default())
        .await
        .unwrap();
    let err = client.call_parts(Opcode::Fetch, vec![]).await.unwrap_err();
    assert_eq!(err.status(), Some(Status::InvalidArgument));
    assert!(err.to_string().contains("toy does not know it"));

    // An opcode this server has never heard of.
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let mut header = FrameHeader::request(Opcode::Ping, RequestId(7));
    header.opcode_raw = 999;
    stream
        .write_all(&header.encode_for_body(&[]))
        .await
        .unwrap();
    let frame = read_one_frame(&mut stream).await.unwrap();
    assert_eq!(frame.header.status(), Status::UnknownOpcode);
    assert_eq!(frame.header.request_id, RequestId(7));
}

async fn read_one_frame(stream: &mut TcpStream) -> Option<tailstream_wire::Frame> {
    let decoder = FrameDecoder::new(1 << 20);
    let mut buf = BytesMut::new();
    loop {
        if let Some(frame) = decoder.decode(&mut buf).unwrap() {
            return Some(frame);
        }
        if stream.read_buf(&mut buf).await.unwrap() == 0 {
            return None;
        }
    }
}

#[tokio::test]
async fn oversized_frames_are_refused_and_garbage_closes_only_its_connection() {
    let (addr, _stop) = start(1024).await;
    let good = RpcClient::connect(&addr, RpcClientConfig::default())
        .await
        .unwrap();

    // A frame that announces 1 GiB: refused from the header alone, then the connection closes.
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let mut header = FrameHeader::request(Opcode::Ping, RequestId(1)).encode_for_body(&[]);
    header[8..12].copy_from_slice(&(1u32 << 30).to_le_bytes());
    let crc = crc32fast::hash(&header[8..]);
    header[4..8].copy_from_slice(&crc.to_le_bytes());
    stream.write_all(&header).await.unwrap();
    let frame = read_one_frame(&mut stream).await.unwrap();
    assert_eq!(frame.header.status(), Status::FrameTooLarge);
    assert!(
        read_one_frame(&mut stream).await.is_none(),
        "connection must close"
    );

    // Plain garbage: closed without an answer.
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    stream.write_all(&[0u8; 64]).await.unwrap();
    assert!(read_one_frame(&mut stream).await.is_none());

    // A client call with a body larger than the server's maximum fails with that status.
    let big = Bytes::from(vec![1u8; 4096]);
    let err = good.call_parts(Opcode::Ping, vec![big]).await.unwrap_err();
    assert_eq!(err.status(), Some(Status::FrameTooLarge));

    // Other connections are unaffected.
    let other = RpcClient::connect(&addr, RpcClientConfig::default())
        .await
        .unwrap();
    let body = Bytes::from_static(b"still here");
    assert_eq!(
        other
            .call_parts(Opcode::Ping, vec![body.clone()])
            .await
            .unwrap(),
        body
    );
}

#[tokio::test]
async fn a_dead_server_fails_pending_calls_and_the_client_reports_closed() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 64];
        let _ = socket.read(&mut buf).await;
        // Drop without answering.
    });
    let client = RpcClient::connect(&addr, RpcClientConfig::default())
        .await
        .unwrap();
    let err = client
        .call_parts(Opcode::Ping, vec![Bytes::from_static(b"x")])
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Connection { .. }), "{err}");
    assert!(err.is_retryable());
    server.await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(client.is_closed());
}

#[tokio::test]
async fn a_silent_server_times_out_the_call() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let _server = tokio::spawn(async move {
        let (_socket, _) = listener.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    let config = RpcClientConfig {
        request_timeout_ms: 100,
        ..RpcClientConfig::default()
    };
    let client = RpcClient::connect(&addr, config).await.unwrap();
    let mut body = BytesMut::new();
    body.put_u8(1);
    let err = client
        .call_parts(Opcode::Ping, vec![body.freeze()])
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Timeout { .. }));
    assert!(client.is_closed());
}
