//! What a backup does with a replica's bytes: close (verify, flush, unmap), describe (Algorithm 1
//! for open replicas, full verification for closed ones), read the valid prefix, and, in RPC
//! replication mode only, verify and copy entries a primary sent in a request.
//!
//! Blocking (file I/O and whole-buffer scans): run from `spawn_blocking`, except
//! `write_entries`, which is the RPC mode's hot path and takes the buffer's async lock.

use super::replica::Replica;
use super::store::{BackupError, BackupStore, io};
use bytes::Bytes;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use tailstream_wire::entry::{EntryType, TRAILER_VALUE_BYTES};
use tailstream_wire::messages::{
    ReadReplicaRequest, ReadReplicaResponse, ReplicaCloseRequest, ReplicaInfo, ReplicaState,
    ReplicaWriteRequest,
};
use tailstream_wire::scan::{
    EntryIter, PayloadChecks, ScanOutcome, scan_segment, verify_closed, verify_closed_with,
};

/// Largest slice of a replica one read returns.
pub const READ_BYTES_MAX: u32 = 8 << 20;

/// Closes a replica whose valid prefix is exactly `length` bytes: copies that prefix to the
/// replica's segment file (fsynced, then renamed into place), records it as closed, and gives
/// the buffer back to the pool, zeroed.
///
/// Close checks the structure only (every header, the trailer chain, the digest), not the
/// batch payloads: those bytes came over a checksummed transport into place, the backup's CPU
/// is not to read them (Tailwind), and every read of the replica (recovery, repair) and every
/// restart verifies them whole before a byte is served. Hashing them here cost a backup 12 %
/// of its CPU under load.
pub fn close(store: &BackupStore, request: &ReplicaCloseRequest) -> Result<(), BackupError> {
    let replica = store.find_by_key(request.primary, &request.replica, request.key)?;
    let mut guard = replica.buffer.blocking_lock();
    let Some(buffer) = guard.as_ref() else {
        return match replica.meta().closed_bytes {
            Some(length) if length == request.length => Ok(()),
            _ => Err(BackupError::State(
                "replica already closed with another length".into(),
            )),
        };
    };
    let length = request.length as usize;
    let verified = buffer.with_bytes(|bytes| -> Result<_, BackupError> {
        let outcome = verify_closed_with(bytes, length, PayloadChecks::SkipBatches)
            .map_err(|corruption| BackupError::Corrupt(corruption.to_string()))?;
        std::fs::create_dir_all(replica.dir()).map_err(io)?;
        write_segment_file(&replica.segment_path(), bytes, length).map_err(io)?;
        Ok(verified_summary(bytes, &outcome))
    })?;
    replica.meta().closed_bytes = Some(request.length);
    replica.set_verified(Some(verified));
    // The segment file is the replica now; the buffer's claim is cleared as it goes back.
    if let Some(buffer) = guard.take() {
        store.release(buffer);
    }
    Ok(())
}

/// Writes `buffer[..length]` as the file at `path`, durably: temp file, fsync, rename,
/// directory fsync. The data goes with direct I/O when the file system supports it: the bytes
/// are already in (page-aligned, zero-padded) buffer memory, so copying them through the page
/// cache would only cost CPU on the replication path.
fn write_segment_file(path: &Path, buffer: &[u8], length: usize) -> std::io::Result<()> {
    let tmp = path.with_extension("seg.tmp");
    if write_direct(&tmp, buffer, length).is_err() {
        let mut file = File::create(&tmp)?;
        file.write_all(&buffer[..length])?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Block size direct I/O is aligned to (the largest logical block size in common use).
const DIRECT_IO_ALIGN: usize = 4096;

/// Direct-I/O write of `buffer[..length]` rounded up to whole blocks (the buffer is zero past
/// `length`), then cut to `length`. Fails on file systems without direct I/O (e.g. tmpfs).
fn write_direct(path: &Path, buffer: &[u8], length: usize) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let padded = length.div_ceil(DIRECT_IO_ALIGN) * DIRECT_IO_ALIGN;
    if padded > buffer.len() || !(buffer.as_ptr() as usize).is_multiple_of(DIRECT_IO_ALIGN) {
        return Err(std::io::Error::other("buffer not suitable for direct I/O"));
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    file.write_all(&buffer[..padded])?;
    file.set_len(length as u64)?;
    file.sync_all()
}

/// The replica's valid bytes: Algorithm 1 over an open buffer; for a closed replica its file,
/// verified to be exactly the closed length (or `Corrupt`).
fn valid_bytes(replica: &Replica) -> Result<(Vec<u8>, ScanOutcome), BackupError> {
    let guard = replica.buffer.blocking_lock();
    if let Some(buffer) = guard.as_ref() {
        return Ok(buffer.with_bytes(|bytes| {
            let bytes = &bytes[..(replica.capacity_bytes as usize).min(bytes.len())];
            let outcome = scan_segment(bytes);
            (bytes[..outcome.valid_len].to_vec(), outcome)
        }));
    }
    drop(guard);
    let closed = replica.meta().closed_bytes.unwrap_or(0) as usize;
    let bytes = std::fs::read(replica.segment_path()).map_err(io)?;
    let outcome = verify_closed(&bytes, closed).map_err(|c| BackupError::Corrupt(c.to_string()))?;
    if bytes.len() != closed {
        return Err(BackupError::Corrupt(format!(
            "file is {} bytes, closed at {closed}",
            bytes.len()
        )));
    }
    Ok((bytes, outcome))
}

/// What `ListReplicas` says about one replica.
pub fn describe(replica: &Replica) -> ReplicaInfo {
    let meta = replica.meta().clone();
    let mut info = ReplicaInfo {
        primary: replica.primary,
        replica: replica.id,
        epoch: meta.epoch,
        state: if meta.closed_bytes.is_some() {
            ReplicaState::Closed
        } else {
            ReplicaState::Open
        },
        filling: meta.filling,
        valid_bytes: 0,
        digest: Bytes::new(),
    };
    if info.state == ReplicaState::Closed
        && let Some((valid_bytes, digest)) = replica.verified()
    {
        info.valid_bytes = valid_bytes;
        info.digest = digest;
        return info;
    }
    match valid_bytes(replica) {
        Ok((bytes, outcome)) => {
            let (valid_bytes, digest) = verified_summary(&bytes, &outcome);
            if info.state == ReplicaState::Closed {
                replica.set_verified(Some((valid_bytes, digest.clone())));
            }
            info.valid_bytes = valid_bytes;
            info.digest = digest;
        }
        Err(_) => info.state = ReplicaState::Corrupt,
    }
    info
}

/// A verified prefix's length and log digest bytes (empty when it has none).
fn verified_summary(bytes: &[u8], outcome: &ScanOutcome) -> (u32, Bytes) {
    let digest = outcome
        .digest
        .clone()
        .and_then(|range| bytes.get(range))
        .map(Bytes::copy_from_slice)
        .unwrap_or_default();
    (outcome.valid_len as u32, digest)
}

/// Bytes of one replica's valid prefix. No fencing check: recovery reads the replicas of a
/// crashed primary, and reading changes nothing.
pub fn read(
    store: &BackupStore,
    request: &ReadReplicaRequest,
) -> Result<ReadReplicaResponse, BackupError> {
    let replica = store.find_epoch(request.primary, &request.replica, request.epoch)?;
    let (bytes, outcome) = valid_bytes(&replica).inspect_err(|_| {
        // The file went bad since it was verified: listings must say so from now on.
        replica.set_verified(None);
    })?;
    let valid = outcome.valid_len;
    let start = (request.offset as usize).min(valid);
    let end = start
        .saturating_add(request.max_bytes.min(READ_BYTES_MAX) as usize)
        .min(valid);
    Ok(ReadReplicaResponse {
        valid_bytes: valid as u32,
        bytes: Bytes::from(bytes).slice(start..end),
    })
}

/// RPC mode: parse and verify every entry, then copy them into the replica at `offset`.
pub async fn write_entries(
    replica: Arc<Replica>,
    request: ReplicaWriteRequest,
) -> Result<(), BackupError> {
    for entry in EntryIter::new(&request.entries, true) {
        let entry = entry.map_err(|e| BackupError::Corrupt(e.to_string()))?;
        if entry.header.entry_type == EntryType::Trailer
            && entry.payload.len() != TRAILER_VALUE_BYTES
        {
            return Err(BackupError::Corrupt(format!(
                "malformed trailer at {}",
                entry.position
            )));
        }
    }
    let mut guard = replica.buffer.lock().await;
    let buffer = guard
        .as_mut()
        .ok_or_else(|| BackupError::State("replica is closed".into()))?;
    let start = request.offset as usize;
    let fits = start
        .checked_add(request.entries.len())
        .is_some_and(|end| end <= replica.capacity_bytes as usize);
    if !fits {
        return Err(BackupError::State(
            "write past the end of the buffer".into(),
        ));
    }
    buffer.write_at(start, &request.entries);
    Ok(())
}
