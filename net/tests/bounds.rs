#![allow(clippy::unwrap_used)] // tests may unwrap freely (see clippy.toml)

//! The server's bounds against peers that try to pin it, on 127.0.0.1 with a toy service:
//! idle connections (closed with a GoAway, no request lost), slowloris frames, stalled partial
//! bodies (never more memory than the body budget), connection floods from one address, and
//! long-polls that must not count as idle. Attackers connect from 127.0.0.2, a different
//! loopback address, so the per-address cap can tell them from the legitimate client.

use bytes::{Bytes, BytesMut};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_net::server::{ServerLimits, serve};
use tailstream_net::{
    BodyBudget, ConnectionLimits, Reply, Request, Response, RpcClient, RpcClientConfig, RpcPool,
    Service,
};
use tailstream_wire::frame::{FrameDecoder, FrameHeader};
use tailstream_wire::{Opcode, RequestId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

/// Ping echoes at once; Fetch answers after 1.5 s (a long-poll longer than the idle timeout).
struct Echo;

impl Service for Echo {
    fn dispatch(&self, request: Request) -> Reply {
        match request.opcode {
            Opcode::Fetch => Reply::Later(Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                Response::ok_parts(vec![request.body])
            })),
            _ => Reply::Ready(Response::ok_parts(vec![Bytes::copy_from_slice(
                &request.body.len().to_le_bytes(),
            )])),
        }
    }
}

const BODY_BUDGET_BYTES: u32 = 4 << 20;

struct Server {
    addr: String,
    budget: BodyBudget,
    _stop: watch::Sender<bool>,
}

async fn start() -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = watch::channel(false);
    let budget = BodyBudget::new("test", BODY_BUDGET_BYTES);
    let limits = ServerLimits {
        connections: ConnectionLimits {
            connections_max: 64,
            connections_per_address_max: 8,
        },
        requests_in_flight_per_connection_max: 8,
        frame_body_bytes_max: 2 << 20,
        idle_timeout: Duration::from_millis(500),
        request_read_timeout: Duration::from_millis(800),
        body_budget: budget.clone(),
        tls: None,
        authentication: None,
    };
    tokio::spawn(serve(listener, "test", Arc::new(Echo), limits, stopped));
    Server {
        addr,
        budget,
        _stop: stop,
    }
}

/// A connection from 127.0.0.2: an attacker on another host, as far as the server can tell.
async fn connect_from_elsewhere(addr: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    socket
        .connect(addr.parse::<SocketAddr>().unwrap())
        .await
        .unwrap()
}

fn frame(opcode: Opcode, id: u64, body: &[u8]) -> Vec<u8> {
    let mut out = FrameHeader::request(opcode, RequestId(id))
        .encode_for_body(&[body])
        .to_vec();
    out.extend_from_slice(body);
    out
}

/// The next frame, or `None` once the server closed the connection.
async fn next_frame(stream: &mut TcpStream, within: Duration) -> Option<tailstream_wire::Frame> {
    let decoder = FrameDecoder::new(1 << 20);
    let mut buf = BytesMut::new();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(frame) = decoder.decode(&mut buf).unwrap() {
            return Some(frame);
        }
        match tokio::time::timeout_at(deadline, stream.read_buf(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return None,
            Ok(Ok(_)) => {}
            Err(_) => panic!("no frame and no close within {within:?}"),
        }
    }
}

/// A legitimate round trip from 127.0.0.1 on a fresh connection.
async fn round_trip(addr: &str) {
    let client = RpcClient::connect(addr, RpcClientConfig::default())
        .await
        .unwrap();
    let answer = client
        .call_parts(Opcode::Ping, vec![Bytes::from_static(b"hello")])
        .await
        .unwrap();
    assert_eq!(answer[..], 5usize.to_le_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_gets_a_go_away_and_requests_that_cross_it_are_answered() {
    let server = start().await;
    let mut stream = TcpStream::connect(&server.addr).await.unwrap();
    let started = Instant::now();
    let go_away = next_frame(&mut stream, Duration::from_secs(3))
        .await
        .unwrap();
    assert_eq!(go_away.header.opcode(), Some(Opcode::GoAway));
    assert_eq!(go_away.header.request_id, RequestId(0));
    assert!(started.elapsed() >= Duration::from_millis(450));
    // A request sent right after (it crossed the GoAway) is still answered...
    stream
        .write_all(&frame(Opcode::Ping, 7, b"late"))
        .await
        .unwrap();
    let answer = next_frame(&mut stream, Duration::from_secs(3))
        .await
        .unwrap();
    assert_eq!(answer.header.request_id, RequestId(7));
    // ...and then the connection closes.
    assert!(
        next_frame(&mut stream, Duration::from_secs(3))
            .await
            .is_none()
    );

    // A pooled client sees the GoAway, reports closed, and the pool reconnects unnoticed.
    let pool = RpcPool::new(RpcClientConfig::default());
    let first = pool.get(&server.addr).await.unwrap();
    first.call_parts(Opcode::Ping, vec![]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(first.is_closed(), "GoAway received");
    let second = pool.get(&server.addr).await.unwrap();
    second.call_parts(Opcode::Ping, vec![]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_in_flight_is_not_idle() {
    let server = start().await;
    let client = RpcClient::connect(&server.addr, RpcClientConfig::default())
        .await
        .unwrap();
    // Answered after 1.5 s, three idle timeouts: the connection must stay open for it.
    let answer = client
        .call_parts(Opcode::Fetch, vec![Bytes::from_static(b"poll")])
        .await
        .unwrap();
    assert_eq!(&answer[..], b"poll");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_trickled_byte_by_byte_is_cut_off_at_the_read_timeout() {
    let server = start().await;
    let mut slow = connect_from_elsewhere(&server.addr).await;
    let bytes = frame(Opcode::Ping, 1, b"slowly");
    let started = Instant::now();
    let trickle = async {
        for byte in bytes {
            if slow.write_all(&[byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    // 38 bytes at 10 per second would take 3.8 s; the server gives a frame 0.8 s.
    let _ = tokio::time::timeout(Duration::from_secs(5), trickle).await;
    round_trip(&server.addr).await;
    assert!(
        next_frame(&mut slow, Duration::from_secs(3))
            .await
            .is_none()
    );
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_partial_bodies_never_hold_more_than_the_budget() {
    let server = start().await;
    // Eight connections each announce a 1 MiB body and send all of it but the last byte:
    // 8 MiB announced against a 4 MiB budget.
    let mut stalled = Vec::new();
    for id in 0..8u64 {
        let mut stream = connect_from_elsewhere(&server.addr).await;
        let bytes = frame(Opcode::Ping, id, &vec![7u8; 1 << 20]);
        let partial = bytes[..bytes.len() - 1].to_vec();
        let writer = tokio::spawn(async move {
            let _ = stream.write_all(&partial).await;
            stream
        });
        stalled.push(writer);
    }
    let mut peak = 0;
    for _ in 0..20 {
        peak = peak.max(server.budget.in_use());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(peak > 0, "the stalled bodies took budget");
    assert!(peak <= BODY_BUDGET_BYTES);
    // Small requests need no budget and go through meanwhile.
    round_trip(&server.addr).await;
    // The stalled frames hit their read deadline; their bytes come back.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(server.budget.in_use(), 0);
    for writer in stalled {
        let mut stream = writer.await.unwrap();
        assert!(
            next_frame(&mut stream, Duration::from_secs(3))
                .await
                .is_none()
        );
    }
    // A whole large body is accepted once budget is free again.
    let client = RpcClient::connect(&server.addr, RpcClientConfig::default())
        .await
        .unwrap();
    let answer = client
        .call_parts(Opcode::Ping, vec![Bytes::from(vec![1u8; 1 << 20])])
        .await
        .unwrap();
    assert_eq!(answer[..], (1usize << 20).to_le_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_one_address_does_not_lock_out_another() {
    let server = start().await;
    let mut flood = Vec::new();
    for _ in 0..40 {
        flood.push(connect_from_elsewhere(&server.addr).await);
    }
    // Beyond the per-address cap of 8, the flood's connections were closed at once.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut closed = 0;
    for stream in &mut flood {
        let mut byte = [0u8; 1];
        if let Ok(Ok(0)) =
            tokio::time::timeout(Duration::from_millis(20), stream.read(&mut byte)).await
        {
            closed += 1;
        }
    }
    assert_eq!(closed, 40 - 8);
    round_trip(&server.addr).await;
}
