//! What a backup does with a replica's bytes: close (verify, flush, unmap), describe (Algorithm 1
//! for open replicas, full verification for closed ones), read the valid prefix, and, in RPC
//! replication mode only, verify and copy entries a primary sent in a request.
//!
//! Blocking (file I/O and whole-buffer scans): run from `spawn_blocking`, except
//! `write_entries`, which is the RPC mode's hot path and takes the buffer's async lock.

use super::replica::Replica;
use super::store::{BackupError, BackupStore};
use bytes::Bytes;
use std::sync::Arc;
use tailstream_wire::entry::{EntryType, TRAILER_VALUE_BYTES};
use tailstream_wire::messages::{
    ReadReplicaRequest, ReadReplicaResponse, ReplicaCloseRequest, ReplicaInfo, ReplicaState,
    ReplicaWriteRequest,
};
use tailstream_wire::scan::{EntryIter, ScanOutcome, scan_segment, verify_closed};

/// Largest slice of a replica one read returns.
pub const READ_BYTES_MAX: u32 = 8 << 20;

fn io(error: std::io::Error) -> BackupError {
    BackupError::Io(error.to_string())
}

/// Closes a replica whose valid prefix is exactly `length` bytes: flushes it, unmaps it, cuts
/// the file to the segment's length, and returns its buffer to the pool.
pub fn close(store: &BackupStore, request: &ReplicaCloseRequest) -> Result<(), BackupError> {
    let replica = store.find_by_key(request.primary, &request.replica, request.key)?;
    let mut guard = replica.buffer.blocking_lock();
    let Some(buffer) = guard.as_ref() else {
        return match replica.sidecar().closed_bytes {
            Some(length) if length == request.length => Ok(()),
            _ => Err(BackupError::State(
                "replica already closed with another length".into(),
            )),
        };
    };
    verify_closed(buffer.bytes(), request.length as usize)
        .map_err(|corruption| BackupError::Corrupt(corruption.to_string()))?;
    buffer.flush().map_err(io)?;
    *guard = None;
    drop(guard);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&replica.data_path)
        .map_err(io)?;
    file.set_len(u64::from(request.length)).map_err(io)?;
    file.sync_all().map_err(io)?;
    replica
        .update(|sidecar| sidecar.closed_bytes = Some(request.length))
        .map_err(io)?;
    store.release_buffer(&replica);
    Ok(())
}

/// The replica's valid bytes: Algorithm 1 over an open buffer; for a closed replica its file,
/// verified to be exactly the closed length (or `Corrupt`).
fn valid_bytes(replica: &Replica) -> Result<(Vec<u8>, ScanOutcome), BackupError> {
    let guard = replica.buffer.blocking_lock();
    if let Some(buffer) = guard.as_ref() {
        let outcome = scan_segment(buffer.bytes());
        return Ok((buffer.bytes()[..outcome.valid_len].to_vec(), outcome));
    }
    drop(guard);
    let closed = replica.sidecar().closed_bytes.unwrap_or(0) as usize;
    let bytes = std::fs::read(&replica.data_path).map_err(io)?;
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
    let sidecar = replica.sidecar().clone();
    let mut info = ReplicaInfo {
        primary: replica.primary,
        replica: replica.id,
        epoch: sidecar.epoch,
        state: if sidecar.closed_bytes.is_some() {
            ReplicaState::Closed
        } else {
            ReplicaState::Open
        },
        filling: sidecar.filling,
        valid_bytes: 0,
        digest: Bytes::new(),
    };
    match valid_bytes(replica) {
        Ok((bytes, outcome)) => {
            info.valid_bytes = outcome.valid_len as u32;
            if let Some(range) = outcome.digest {
                info.digest = Bytes::copy_from_slice(&bytes[range]);
            }
        }
        Err(_) => info.state = ReplicaState::Corrupt,
    }
    info
}

pub fn read(
    store: &BackupStore,
    request: &ReadReplicaRequest,
) -> Result<ReadReplicaResponse, BackupError> {
    let replica = store.find(request.primary, &request.replica)?;
    let (bytes, outcome) = valid_bytes(&replica)?;
    let valid = outcome.valid_len;
    let start = (request.offset as usize).min(valid);
    let end = start
        .saturating_add(request.max_bytes.min(READ_BYTES_MAX) as usize)
        .min(valid);
    Ok(ReadReplicaResponse {
        valid_bytes: valid as u32,
        bytes: Bytes::copy_from_slice(&bytes[start..end]),
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
    let end = start
        .checked_add(request.entries.len())
        .filter(|end| *end <= buffer.len())
        .ok_or_else(|| BackupError::State("write past the end of the buffer".into()))?;
    buffer.bytes_mut()[start..end].copy_from_slice(&request.entries);
    Ok(())
}
