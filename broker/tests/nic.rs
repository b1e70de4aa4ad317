//! The tcp backend's software NIC against its contract: payloads land at their offset in the
//! registered buffer, completions come back in write order, and a bad key, an out-of-bounds
//! write, a forged header, a hello without the backup's ticket or a fenced primary ends that
//! connection (and only that one).

#![allow(clippy::unwrap_used)] // tests may unwrap freely (see clippy.toml)

use std::sync::Arc;
use std::time::Duration;
use tailstream_broker::backup::nic::{NicLimits, serve_nic};
use tailstream_broker::backup::{BackupLimits, BackupStore};
use tailstream_net::ConnectionLimits;
use tailstream_wire::messages::{ReplicaId, ReplicaOpenRequest};
use tailstream_wire::nic::{COMPLETION_BYTES, Completion, Hello, WriteHeader};
use tailstream_wire::{GroupId, LogId, ReplicaEpoch, SegmentId, ServerId, StreamId, StreamletId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Nic {
    addr: String,
    store: Arc<BackupStore>,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::watch::Sender<bool>,
}

fn replica(segment: u64) -> ReplicaId {
    ReplicaId {
        stream: StreamId(1),
        streamlet: StreamletId(0),
        log: LogId(0),
        group: GroupId(0),
        segment: SegmentId(segment),
    }
}

const PRIMARY: ServerId = ServerId::new(5, 2);

async fn start() -> Nic {
    let dir = tempfile::tempdir().unwrap();
    let limits = BackupLimits {
        open_buffers_max: 8,
        open_buffer_bytes_max: 1 << 24,
    };
    let store = Arc::new(BackupStore::load(dir.path(), limits).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let nic_limits = NicLimits {
        connections: ConnectionLimits {
            connections_max: 8,
            connections_per_address_max: 6,
        },
        write_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_millis(400),
    };
    tokio::spawn(serve_nic(listener, store.clone(), nic_limits, stopped));
    Nic {
        addr,
        store,
        _dir: dir,
        _stop: stop,
    }
}

/// Opens a 4 KiB replica (on the blocking pool, as the RPC service does).
async fn open(nic: &Nic, segment: u64) -> u64 {
    let store = nic.store.clone();
    let request = ReplicaOpenRequest {
        primary: PRIMARY,
        replica: replica(segment),
        epoch: ReplicaEpoch(1),
        capacity_bytes: 4096,
        filling: false,
    };
    tokio::task::spawn_blocking(move || store.open(&request).unwrap().key)
        .await
        .unwrap()
}

/// A connection as `primary`, with the ticket the backup grants it (as a buffer descriptor
/// carries it).
async fn connect(nic: &Nic, primary: ServerId) -> TcpStream {
    let ticket = nic.store.nic_tickets().ticket_for(primary);
    connect_with_ticket(nic, primary, ticket).await
}

async fn connect_with_ticket(nic: &Nic, primary: ServerId, ticket: u64) -> TcpStream {
    let mut stream = TcpStream::connect(&nic.addr).await.unwrap();
    stream
        .write_all(&Hello { primary, ticket }.encode())
        .await
        .unwrap();
    stream
}

/// The next completion, or `None` once the backup closed the connection.
async fn completion(stream: &mut TcpStream) -> Option<Completion> {
    let mut raw = [0u8; COMPLETION_BYTES];
    match tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut raw)).await {
        Ok(Ok(_)) => Some(Completion::decode(&raw).unwrap()),
        Ok(Err(_)) => None,
        Err(_) => panic!("neither a completion nor a close within 5 s"),
    }
}

async fn write(stream: &mut TcpStream, key: u64, offset: u32, payload: &[u8], write_id: u64) {
    let header = WriteHeader {
        key,
        offset,
        len: payload.len() as u32,
        write_id,
    };
    let _ = stream.write_all(&header.encode()).await;
    let _ = stream.write_all(payload).await;
}

/// The replica's buffer, looked up as `viewer` (the current generation of the primary's slot).
async fn buffer_bytes_as(nic: &Nic, viewer: ServerId, segment: u64) -> Vec<u8> {
    let replica = nic.store.find(viewer, &replica(segment)).unwrap();
    let guard = replica.buffer.lock().await;
    guard.as_ref().unwrap().with_bytes(|b| b.to_vec())
}

async fn buffer_bytes(nic: &Nic, segment: u64) -> Vec<u8> {
    buffer_bytes_as(nic, PRIMARY, segment).await
}

#[tokio::test]
async fn pipelined_writes_land_at_their_offsets_and_complete_in_order() {
    let nic = start().await;
    let key = open(&nic, 1).await;
    let mut stream = connect(&nic, PRIMARY).await;
    for i in 0..20u64 {
        write(
            &mut stream,
            key,
            (i * 100) as u32,
            &[i as u8 + 1; 100],
            1000 + i,
        )
        .await;
    }
    for i in 0..20u64 {
        assert_eq!(
            completion(&mut stream).await,
            Some(Completion {
                write_id: 1000 + i,
                status: 0
            })
        );
    }
    let bytes = buffer_bytes(&nic, 1).await;
    for i in 0..20usize {
        assert!(
            bytes[i * 100..(i + 1) * 100]
                .iter()
                .all(|b| *b == i as u8 + 1)
        );
    }
    assert!(
        bytes[2000..].iter().all(|b| *b == 0),
        "nothing past the writes"
    );
}

#[tokio::test]
async fn a_bad_key_an_out_of_bounds_write_or_a_forged_header_closes_only_that_connection() {
    let nic = start().await;
    let key = open(&nic, 1).await;
    let mut healthy = connect(&nic, PRIMARY).await;

    let mut bad_key = connect(&nic, PRIMARY).await;
    write(&mut bad_key, key ^ 0xdead, 0, b"intruder", 1).await;
    assert_eq!(completion(&mut bad_key).await, None);

    let mut out_of_bounds = connect(&nic, PRIMARY).await;
    write(&mut out_of_bounds, key, 4090, b"too long", 2).await;
    assert_eq!(completion(&mut out_of_bounds).await, None);

    let mut forged = connect(&nic, PRIMARY).await;
    let mut header = WriteHeader {
        key,
        offset: 0,
        len: 4,
        write_id: 3,
    }
    .encode();
    header[8] ^= 1;
    forged.write_all(&header).await.unwrap();
    assert_eq!(completion(&mut forged).await, None);

    // Another primary (even another generation of the same server) cannot use the key.
    let mut stranger = connect(&nic, ServerId::new(6, 1)).await;
    write(&mut stranger, key, 0, b"not mine", 4).await;
    assert_eq!(completion(&mut stranger).await, None);

    // None of that reached the buffer, and the healthy connection still works.
    write(&mut healthy, key, 0, b"fine", 5).await;
    assert_eq!(
        completion(&mut healthy).await,
        Some(Completion {
            write_id: 5,
            status: 0
        })
    );
    let bytes = buffer_bytes(&nic, 1).await;
    assert_eq!(&bytes[..4], b"fine");
    assert!(bytes[4..].iter().all(|b| *b == 0));
}

#[tokio::test]
async fn a_hello_without_its_ticket_is_closed_and_fences_nobody() {
    let nic = start().await;
    let key = open(&nic, 1).await;
    // A stranger names a newer generation of the primary (which would fence the live one),
    // with a made-up ticket, and with the live primary's own ticket: both closed unheard.
    let newer = ServerId::new(PRIMARY.index, PRIMARY.generation + 1);
    let borrowed = nic.store.nic_tickets().ticket_for(PRIMARY);
    for ticket in [0, 0x5eed, borrowed] {
        let mut stranger = connect_with_ticket(&nic, newer, ticket).await;
        write(&mut stranger, key, 0, b"forged", 1).await;
        assert_eq!(completion(&mut stranger).await, None);
    }
    // The live primary was not fenced: its writes still land.
    let mut live = connect(&nic, PRIMARY).await;
    write(&mut live, key, 0, b"mine!!", 2).await;
    assert!(completion(&mut live).await.is_some());
    assert_eq!(&buffer_bytes(&nic, 1).await[..6], b"mine!!");
}

#[tokio::test]
async fn a_fenced_primary_generation_is_refused() {
    let nic = start().await;
    let key = open(&nic, 1).await;
    let mut old = connect(&nic, PRIMARY).await;
    write(&mut old, key, 0, b"before", 1).await;
    assert!(completion(&mut old).await.is_some());
    // The primary's slot came back as a newer generation: the old one is fenced at once.
    nic.store
        .note_generation(ServerId::new(PRIMARY.index, PRIMARY.generation + 1));
    write(&mut old, key, 0, b"after!", 2).await;
    assert_eq!(completion(&mut old).await, None);
    let mut reconnect = connect(&nic, PRIMARY).await;
    write(&mut reconnect, key, 0, b"again!", 3).await;
    assert_eq!(completion(&mut reconnect).await, None);
    let newer = ServerId::new(PRIMARY.index, PRIMARY.generation + 1);
    assert_eq!(&buffer_bytes_as(&nic, newer, 1).await[..6], b"before");
}

#[tokio::test]
async fn a_payload_that_never_arrives_times_out_the_connection() {
    let nic = start().await;
    let key = open(&nic, 1).await;
    let mut stalled = connect(&nic, PRIMARY).await;
    let header = WriteHeader {
        key,
        offset: 0,
        len: 100,
        write_id: 1,
    };
    stalled.write_all(&header.encode()).await.unwrap();
    stalled.write_all(&[1u8; 10]).await.unwrap();
    assert_eq!(completion(&mut stalled).await, None);
}

#[tokio::test]
async fn a_header_trickled_byte_by_byte_is_cut_off_at_the_write_timeout() {
    // Slowloris: one byte every 100 ms never completes a 32-byte header within 500 ms.
    let nic = start().await;
    let key = open(&nic, 1).await;
    let mut slow = connect(&nic, PRIMARY).await;
    let header = WriteHeader {
        key,
        offset: 0,
        len: 4,
        write_id: 1,
    }
    .encode();
    let started = std::time::Instant::now();
    for byte in header {
        if slow.write_all(&[byte]).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        if started.elapsed() > Duration::from_secs(2) {
            break;
        }
    }
    assert_eq!(completion(&mut slow).await, None);
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "closed at the write timeout, not when the header finally came"
    );
}

#[tokio::test]
async fn silent_connections_are_closed_and_keepalives_keep_a_primary_connected() {
    let nic = start().await;
    let key = open(&nic, 1).await;
    let mut silent = connect(&nic, PRIMARY).await;
    let mut alive = connect(&nic, PRIMARY).await;
    for write_id in 1..=8u64 {
        let keepalive = WriteHeader::keepalive(write_id);
        alive.write_all(&keepalive.encode()).await.unwrap();
        assert_eq!(
            completion(&mut alive).await,
            Some(Completion {
                write_id,
                status: 0
            })
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // 800 ms have passed: the silent one is gone, the one with keepalives still writes.
    assert_eq!(completion(&mut silent).await, None);
    write(&mut alive, key, 0, b"live", 9).await;
    assert!(completion(&mut alive).await.is_some());
    assert!(buffer_bytes(&nic, 1).await[4..].iter().all(|b| *b == 0));
}

#[tokio::test]
async fn connections_beyond_the_per_address_cap_are_closed_at_once() {
    let nic = start().await;
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(connect(&nic, PRIMARY).await);
    }
    // Let the accept loop admit all six before the seventh arrives.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut seventh = TcpStream::connect(&nic.addr).await.unwrap();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(1), seventh.read(&mut byte)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "refused at once, not left waiting: {read:?}"
    );
    drop(held);
}
