//! The backup store against its promises: bounded pool, fencing, persistence across a
//! restart (a reload of the directory), epochs that never drop a complete copy for a
//! half-built one, and corruption that is reported, never served.

use super::ops;
use super::store::{BackupError, BackupLimits, BackupStore};
use tailstream_wire::entry::EntryType;
use tailstream_wire::messages::{
    ReadReplicaRequest, ReplicaCloseRequest, ReplicaId, ReplicaOpenRequest, ReplicaState,
};
use tailstream_wire::segment::SegmentImage;
use tailstream_wire::{GroupId, LogId, ReplicaEpoch, SegmentId, ServerId, StreamId, StreamletId};

const LIMITS: BackupLimits = BackupLimits {
    open_buffers_max: 3,
    open_buffer_bytes_max: 1 << 20,
};

fn id(segment: u64) -> ReplicaId {
    ReplicaId {
        stream: StreamId(1),
        streamlet: StreamletId(0),
        log: LogId(0),
        group: GroupId(0),
        segment: SegmentId(segment),
    }
}

fn open(primary: ServerId, segment: u64, epoch: u32, filling: bool) -> ReplicaOpenRequest {
    ReplicaOpenRequest {
        primary,
        replica: id(segment),
        epoch: ReplicaEpoch(epoch),
        capacity_bytes: 4096,
        filling,
    }
}

/// A segment image with a digest and two batches; returns it and its written length.
fn image() -> (Vec<u8>, usize) {
    let mut image = SegmentImage::new(4096);
    image.append(EntryType::LogDigest, b"digest").unwrap();
    image.append(EntryType::Batch, b"first batch").unwrap();
    image.append(EntryType::Batch, b"second batch").unwrap();
    let written = image.written();
    (image.bytes, written)
}

/// Writes `bytes` into the replica's buffer, as the NIC would.
fn place(store: &BackupStore, primary: ServerId, segment: u64, bytes: &[u8]) {
    let replica = store.find(primary, &id(segment)).unwrap();
    let mut guard = replica.buffer.blocking_lock();
    guard.as_mut().unwrap().write_at(0, bytes);
}

#[test]
fn replicas_survive_a_restart_open_ones_rescanned_closed_ones_verified() {
    let dir = tempfile::tempdir().unwrap();
    let p = ServerId::new(2, 1);
    let (bytes, written) = image();
    {
        let store = BackupStore::load(dir.path(), LIMITS).unwrap();
        store.open(&open(p, 1, 1, false)).unwrap();
        store.open(&open(p, 2, 1, false)).unwrap();
        place(&store, p, 1, &bytes[..written]);
        // Segment 2 gets a torn last write: only the first append is complete.
        place(&store, p, 2, &bytes[..written - 3]);
        let key = store.find(p, &id(1)).unwrap().key;
        ops::close(
            &store,
            &ReplicaCloseRequest {
                primary: p,
                replica: id(1),
                key,
                length: written as u32,
            },
        )
        .unwrap();
        assert_eq!(
            store.pool_usage().0,
            1,
            "a closed replica gives its buffer back"
        );
    }
    // "kill -9": nothing was shut down; reload from the directory.
    let store = BackupStore::load(dir.path(), LIMITS).unwrap();
    let infos: Vec<_> = store
        .replicas(Some(p))
        .iter()
        .map(|r| ops::describe(r))
        .collect();
    assert_eq!(infos.len(), 2);
    assert_eq!(
        (infos[0].state, infos[0].valid_bytes as usize),
        (ReplicaState::Closed, written)
    );
    assert_eq!(infos[1].state, ReplicaState::Open);
    let (_, first_end) = {
        let mut only_first = SegmentImage::new(4096);
        only_first.append(EntryType::LogDigest, b"digest").unwrap();
        only_first.append(EntryType::Batch, b"first batch").unwrap();
        ((), only_first.written())
    };
    assert_eq!(
        infos[1].valid_bytes as usize, first_end,
        "Algorithm 1 keeps exactly the complete appends"
    );
    assert_eq!(&infos[0].digest[..], b"digest");
    let read = ops::read(
        &store,
        &ReadReplicaRequest {
            primary: p,
            replica: id(1),
            epoch: ReplicaEpoch(1),
            offset: 0,
            max_bytes: 1 << 20,
        },
    )
    .unwrap();
    assert_eq!(&read.bytes[..], &bytes[..written]);
}

#[test]
fn a_closed_replica_with_a_flipped_bit_is_never_served_and_then_reported_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let p = ServerId::new(2, 1);
    let (bytes, written) = image();
    let store = BackupStore::load(dir.path(), LIMITS).unwrap();
    store.open(&open(p, 1, 1, false)).unwrap();
    place(&store, p, 1, &bytes[..written]);
    let replica = store.find(p, &id(1)).unwrap();
    ops::close(
        &store,
        &ReplicaCloseRequest {
            primary: p,
            replica: id(1),
            key: replica.key,
            length: written as u32,
        },
    )
    .unwrap();
    for bit in [3, 8 * 20 + 5, 8 * (written - 2)] {
        let mut damaged = std::fs::read(replica.segment_path()).unwrap();
        damaged[bit / 8] ^= 1 << (bit % 8);
        std::fs::write(replica.segment_path(), &damaged).unwrap();
        // Listings answer from the verification done at close (files never change)...
        let listed = ops::describe(&replica);
        assert_eq!(
            (listed.state, listed.valid_bytes),
            (ReplicaState::Closed, written as u32)
        );
        // ... a read verifies the file whole, refuses it, and from then on listings say so.
        let read = ops::read(
            &store,
            &ReadReplicaRequest {
                primary: p,
                replica: id(1),
                epoch: ReplicaEpoch(1),
                offset: 0,
                max_bytes: 100,
            },
        );
        assert!(matches!(read, Err(BackupError::Corrupt(_))), "bit {bit}");
        assert_eq!(
            ops::describe(&replica).state,
            ReplicaState::Corrupt,
            "bit {bit}"
        );
        // A backup that restarts verifies every closed file again.
        let reloaded = BackupStore::load(dir.path(), LIMITS).unwrap();
        assert_eq!(
            ops::describe(&reloaded.find(p, &id(1)).unwrap()).state,
            ReplicaState::Corrupt,
            "bit {bit}"
        );
        drop(reloaded);
        damaged[bit / 8] ^= 1 << (bit % 8);
        std::fs::write(replica.segment_path(), &damaged).unwrap();
        assert_eq!(ops::describe(&replica).state, ReplicaState::Closed);
    }
}

/// Close checks structure, not batch payloads (the backup's CPU does not read the data), so a
/// payload damaged in the buffer closes, but the first read verifies the file whole and
/// refuses it.
#[test]
fn a_payload_damaged_before_close_is_caught_by_the_first_read() {
    let dir = tempfile::tempdir().unwrap();
    let p = ServerId::new(2, 1);
    let (mut bytes, written) = image();
    let store = BackupStore::load(dir.path(), LIMITS).unwrap();
    store.open(&open(p, 1, 1, false)).unwrap();
    // The last byte of "second batch", before its trailer (9-byte header, 4-byte value).
    bytes[written - 9 - 4 - 1] ^= 0x10;
    place(&store, p, 1, &bytes[..written]);
    let replica = store.find(p, &id(1)).unwrap();
    let close = ReplicaCloseRequest {
        primary: p,
        replica: id(1),
        key: replica.key,
        length: written as u32,
    };
    ops::close(&store, &close).unwrap();
    let read = ops::read(
        &store,
        &ReadReplicaRequest {
            primary: p,
            replica: id(1),
            epoch: ReplicaEpoch(1),
            offset: 0,
            max_bytes: 1 << 20,
        },
    );
    assert!(matches!(read, Err(BackupError::Corrupt(_))));
    assert_eq!(ops::describe(&replica).state, ReplicaState::Corrupt);
}

#[test]
fn closing_with_a_length_the_bytes_do_not_have_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = ServerId::new(2, 1);
    let (bytes, written) = image();
    let store = BackupStore::load(dir.path(), LIMITS).unwrap();
    let replica = store.open(&open(p, 1, 1, false)).unwrap();
    place(&store, p, 1, &bytes[..written - 1]);
    let close = ReplicaCloseRequest {
        primary: p,
        replica: id(1),
        key: replica.key,
        length: written as u32,
    };
    assert!(matches!(
        ops::close(&store, &close),
        Err(BackupError::Corrupt(_))
    ));
}

#[test]
fn the_pool_is_bounded_and_old_generations_are_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let store = BackupStore::load(dir.path(), LIMITS).unwrap();
    let p = ServerId::new(1, 1);
    for segment in 0..3 {
        store.open(&open(p, segment, 1, false)).unwrap();
    }
    assert!(matches!(
        store.open(&open(p, 9, 1, false)),
        Err(BackupError::PoolFull { .. })
    ));
    store.free(p, &id(0)).unwrap();
    store.open(&open(p, 9, 1, false)).unwrap();
    // The primary restarted as generation 2: generation 1 may no longer open or write.
    store.note_generation(ServerId::new(1, 2));
    assert!(matches!(
        store.open(&open(p, 10, 1, false)),
        Err(BackupError::Stale(_))
    ));
    let key = store.find(ServerId::new(1, 2), &id(9)).unwrap().key;
    assert!(matches!(
        store.writer_for(key, p),
        Err(BackupError::Stale(_))
    ));
}

/// (epoch, filling) of every replica the store lists.
fn epochs(store: &BackupStore) -> Vec<(u32, bool)> {
    store
        .replicas(None)
        .iter()
        .map(|r| ops::describe(r))
        .map(|i| (i.epoch.0, i.filling))
        .collect()
}

#[test]
fn a_filling_replacement_never_displaces_the_complete_copy_until_it_is_current() {
    let dir = tempfile::tempdir().unwrap();
    let store = BackupStore::load(dir.path(), LIMITS).unwrap();
    let p = ServerId::new(1, 1);
    store.open(&open(p, 5, 1, false)).unwrap();
    store.open(&open(p, 5, 2, true)).unwrap();
    assert_eq!(epochs(&store), vec![(1, false), (2, true)]);
    store.set_epoch(p, &id(5), ReplicaEpoch(2)).unwrap();
    assert_eq!(epochs(&store), vec![(2, false)]);
    // And the change survives a restart.
    drop(store);
    let store = BackupStore::load(dir.path(), LIMITS).unwrap();
    assert_eq!(epochs(&store), vec![(2, false)]);
}

/// Spares are made ahead on their own thread and the start-up signal comes once they are;
/// an open then takes one ready, and the thread makes up for it.
#[tokio::test]
async fn spare_buffers_are_made_ahead_and_replaced_after_an_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(BackupStore::load(dir.path(), LIMITS).unwrap());
    let made = store.keep_spares(2, 4096).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), made)
        .await
        .expect("the first spares are made within seconds")
        .expect("the spare maker signals before it waits");
    assert_eq!(store.pool_usage(), (0, 0));
    assert!(!store.spare_wanted(), "both spares ready");
    let primary = ServerId::new(1, 1);
    store.open(&open(primary, 0, 1, false)).unwrap();
    assert_eq!(store.pool_usage(), (1, 4096));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while store.spare_wanted() {
        assert!(
            std::time::Instant::now() < deadline,
            "the open's spare was not replaced"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
