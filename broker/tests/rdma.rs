//! One-sided RDMA WRITE on real verbs: a primary writes appends into a backup's registered
//! buffer, the backup's scan recovers exactly the completed prefix, and a write with a wrong
//! key is refused; and (`cpu`) a backup's own CPU time over one-sided writes is a fraction of
//! what the RPC mode costs it. Runs where an RDMA device exists (CI runs it under soft-RoCE in a VM, with
//! `TAILSTREAM_RDMA_TEST=required`, through `.ci/rdma-test.sh`); elsewhere it says why it
//! skipped, unless required.
#![cfg(feature = "rdma")]
#![allow(clippy::unwrap_used)] // tests may unwrap freely (see clippy.toml)

#[path = "rdma/cpu.rs"]
mod cpu;

use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tailstream_broker::backup::{BackupLimits, BackupService, BackupStore};
use tailstream_broker::rdma::RdmaWriter;
use tailstream_broker::replication::transport::{ReplicaWriter, WriteTarget};
use tailstream_net::server::{ServerLimits, serve};
use tailstream_net::{
    BodyBudget, ConnectionLimits, Reply, Request, Response, RpcClient, RpcClientConfig, Service,
};
use tailstream_wire::entry::EntryType;
use tailstream_wire::messages::{
    BufferDescriptor, Empty, ListReplicasRequest, ListReplicasResponse, ReplicaCloseRequest,
    ReplicaId, ReplicaOpenRequest,
};
use tailstream_wire::segment::SegmentImage;
use tailstream_wire::{
    GroupId, LogId, Opcode, ReplicaEpoch, SegmentId, ServerId, Status, StreamId, StreamletId,
};

/// The backup's RPCs and nothing else.
struct BackupOnly(BackupService);

impl Service for BackupOnly {
    fn dispatch(&self, request: Request) -> Reply {
        self.0
            .dispatch(request.opcode, request.body)
            .unwrap_or_else(|| {
                Reply::Ready(Response::error(
                    Status::UnknownOpcode,
                    "not a backup operation",
                ))
            })
    }
}

fn replica() -> ReplicaId {
    ReplicaId {
        stream: StreamId(1),
        streamlet: StreamletId(0),
        log: LogId(0),
        group: GroupId(0),
        segment: SegmentId(7),
    }
}

/// A backup (store and RPC service, nothing else) on 127.0.0.1: its address, the sender that
/// keeps it serving, and its directory.
async fn start_backup(
    limits: BackupLimits,
) -> (String, tokio::sync::watch::Sender<bool>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(BackupStore::load(dir.path(), limits).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let server_limits = ServerLimits {
        connections: ConnectionLimits {
            connections_max: 8,
            connections_per_address_max: 8,
        },
        requests_in_flight_per_connection_max: 64,
        frame_body_bytes_max: 1 << 20,
        idle_timeout: Duration::from_secs(60),
        request_read_timeout: Duration::from_secs(30),
        body_budget: BodyBudget::new("members", 16 << 20),
        tls: None,
        authentication: None,
    };
    tokio::spawn(serve(
        listener,
        "peer",
        Arc::new(BackupOnly(BackupService::new(store, "127.0.0.1:1".into()))),
        server_limits,
        stopped,
    ));
    (addr, stop, dir)
}

/// Whether an RDMA device is here; without one the test is skipped (saying why), unless
/// `TAILSTREAM_RDMA_TEST=required`, which fails it.
fn rdma_here() -> bool {
    match tailstream_broker::rdma::probe() {
        Ok(()) => true,
        Err(reason) => {
            assert_ne!(
                std::env::var("TAILSTREAM_RDMA_TEST").as_deref(),
                Ok("required"),
                "{reason}"
            );
            eprintln!("skipped: {reason}");
            false
        }
    }
}

async fn valid_bytes(client: &RpcClient) -> u32 {
    let listed: ListReplicasResponse = client
        .call(
            Opcode::ListReplicas,
            &ListReplicasRequest {
                term: Default::default(),
                primary: None,
                fence: Vec::new(),
            },
        )
        .await
        .unwrap();
    assert_eq!(listed.replicas.len(), 1);
    listed.replicas[0].valid_bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rdma_writes_land_in_the_registered_buffer_and_a_wrong_key_is_refused() {
    if !rdma_here() {
        return;
    }
    let limits = BackupLimits {
        open_buffers_max: 8,
        open_buffer_bytes_max: 1 << 26,
    };
    let (addr, _stop, _dir) = start_backup(limits).await;

    // The primary connects a queue pair (endpoints over our RPC), then opens a replica: the
    // backup registers a region for it and returns its token.
    let primary = ServerId::new(4, 1);
    let client = RpcClient::connect(&addr, RpcClientConfig::default())
        .await
        .unwrap();
    let writer = RdmaWriter::connect(&client, primary).await.unwrap();
    let open = ReplicaOpenRequest {
        primary,
        replica: replica(),
        epoch: ReplicaEpoch(1),
        capacity_bytes: 1 << 16,
        filling: false,
    };
    let descriptor: BufferDescriptor = client.call(Opcode::ReplicaOpen, &open).await.unwrap();
    assert!(
        !descriptor.rdma_token.is_empty(),
        "the backup registered no region"
    );
    writer.register(descriptor.key, &descriptor).unwrap();
    let target = WriteTarget {
        replica: replica(),
        key: descriptor.key,
    };

    // A digest and three batches, one RDMA WRITE per append.
    let mut image = SegmentImage::new(1 << 16);
    image.append(EntryType::LogDigest, b"digest").unwrap();
    for batch in [&b"first batch"[..], &[7u8; 3000], b"third"] {
        image.append(EntryType::Batch, batch).unwrap();
    }
    let mut written = 0;
    let mut ends = Vec::new();
    let mut scratch = SegmentImage::new(1 << 16);
    scratch.append(EntryType::LogDigest, b"digest").unwrap();
    ends.push(scratch.written());
    for batch in [&b"first batch"[..], &[7u8; 3000], b"third"] {
        scratch.append(EntryType::Batch, batch).unwrap();
        ends.push(scratch.written());
    }
    for end in &ends {
        let part = Bytes::copy_from_slice(&image.bytes[written..*end]);
        writer
            .write(target, written as u32, vec![part])
            .await
            .unwrap();
        written = *end;
    }
    assert_eq!(valid_bytes(&client).await as usize, image.written());

    // A fourth append torn halfway: the scan keeps exactly the three completed ones.
    let acked = image.written();
    image.append(EntryType::Batch, &[9u8; 500]).unwrap();
    let torn = acked + (image.written() - acked) / 2;
    writer
        .write(
            target,
            acked as u32,
            vec![Bytes::copy_from_slice(&image.bytes[acked..torn])],
        )
        .await
        .unwrap();
    assert_eq!(valid_bytes(&client).await as usize, acked);

    // Closing at the completed prefix verifies it and writes the segment file.
    let close = ReplicaCloseRequest {
        primary,
        replica: replica(),
        key: descriptor.key,
        length: acked as u32,
    };
    let _: Empty = client.call(Opcode::ReplicaClose, &close).await.unwrap();

    // A write with a wrong remote key is refused by the NIC, and the queue pair is dead after.
    let open = ReplicaOpenRequest {
        replica: ReplicaId {
            segment: SegmentId(8),
            ..replica()
        },
        ..open
    };
    let descriptor: BufferDescriptor = client.call(Opcode::ReplicaOpen, &open).await.unwrap();
    writer.register(descriptor.key, &descriptor).unwrap();
    let mut wrong = writer.token(descriptor.key).unwrap();
    wrong.rkey ^= 0x5a5a;
    let refused = writer
        .write_with_token(wrong, 0, vec![Bytes::from_static(b"intruder")])
        .await;
    assert!(refused.is_err(), "a write with a wrong key was accepted");
    assert!(writer.is_broken());
}

/// Issue 21, finding 1: fencing a generation used to update only the backup's index; its queue
/// pair and registered regions stayed writable, so a fenced primary's one-sided writes still
/// landed. Now the fence deregisters its regions (keeping their bytes for recovery) and drops
/// its queue pairs before anything is answered about its replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_primary_s_rdma_writes_fail_at_the_nic_and_what_it_wrote_stays_readable() {
    if !rdma_here() {
        return;
    }
    let limits = BackupLimits {
        open_buffers_max: 8,
        open_buffer_bytes_max: 1 << 26,
    };
    let (addr, _stop, _dir) = start_backup(limits).await;
    let primary = ServerId::new(5, 1);
    let client = RpcClient::connect(&addr, RpcClientConfig::default())
        .await
        .unwrap();
    let writer = RdmaWriter::connect(&client, primary).await.unwrap();
    let open = ReplicaOpenRequest {
        primary,
        replica: replica(),
        epoch: ReplicaEpoch(1),
        capacity_bytes: 1 << 16,
        filling: false,
    };
    let descriptor: BufferDescriptor = client.call(Opcode::ReplicaOpen, &open).await.unwrap();
    writer.register(descriptor.key, &descriptor).unwrap();
    let target = WriteTarget {
        replica: replica(),
        key: descriptor.key,
    };
    let mut image = SegmentImage::new(1 << 16);
    image.append(EntryType::LogDigest, b"digest").unwrap();
    image.append(EntryType::Batch, b"before the fence").unwrap();
    let written = image.written();
    writer
        .write(
            target,
            0,
            vec![Bytes::copy_from_slice(&image.bytes[..written])],
        )
        .await
        .unwrap();
    assert_eq!(valid_bytes(&client).await as usize, written);

    // The coordinator's recovery fences the generation with its listing.
    let listed: ListReplicasResponse = client
        .call(
            Opcode::ListReplicas,
            &ListReplicasRequest {
                term: Default::default(),
                primary: None,
                fence: vec![primary],
            },
        )
        .await
        .unwrap();
    assert_eq!(listed.replicas[0].valid_bytes as usize, written);

    // A write the fenced primary still sends fails at the NIC, and lands nowhere.
    image.append(EntryType::Batch, b"after the fence").unwrap();
    let late = writer
        .write(
            target,
            written as u32,
            vec![Bytes::copy_from_slice(
                &image.bytes[written..image.written()],
            )],
        )
        .await;
    assert!(late.is_err(), "a fenced primary's RDMA write was accepted");
    assert_eq!(valid_bytes(&client).await as usize, written);
    // Nor can it open a replica or connect a queue pair again.
    let reopen = ReplicaOpenRequest {
        replica: ReplicaId {
            segment: SegmentId(9),
            ..replica()
        },
        ..open
    };
    assert!(
        client
            .call::<_, BufferDescriptor>(Opcode::ReplicaOpen, &reopen)
            .await
            .is_err()
    );
    assert!(RdmaWriter::connect(&client, primary).await.is_err());
}
