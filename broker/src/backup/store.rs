//! Every replica this backup holds, the buffer pool's bounds, and the fencing of old primary
//! generations. Methods do file I/O and may block: callers run them off the async workers
//! (`spawn_blocking`), except `writer_for`, which only looks up the index.

use super::mapped::MappedBuffer;
use super::replica::{Replica, Sidecar, replica_paths};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tailstream_wire::messages::{ReplicaId, ReplicaOpenRequest};
use tailstream_wire::{ServerId, Status};
use thiserror::Error;

/// Largest replica buffer a backup accepts (the largest segment size).
pub const REPLICA_BYTES_MAX: u32 = tailstream_config::SEGMENT_SIZE_BYTES_MAX;

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum BackupError {
    #[error("backup pool is full ({open} open buffers, {bytes} bytes)")]
    PoolFull { open: u32, bytes: u64 },
    #[error("{0} is an old generation of its server")]
    Stale(ServerId),
    #[error("no such replica on this backup")]
    UnknownReplica,
    #[error("{0}")]
    State(String),
    #[error("replica is corrupt: {0}")]
    Corrupt(String),
    #[error("replica of {0} bytes exceeds the maximum of {REPLICA_BYTES_MAX}")]
    TooLarge(u32),
    #[error("backup storage: {0}")]
    Io(String),
}

impl BackupError {
    pub fn status(&self) -> Status {
        match self {
            BackupError::PoolFull { .. } => Status::BackupPoolFull,
            BackupError::Stale(_) => Status::StaleGeneration,
            BackupError::UnknownReplica => Status::UnknownReplica,
            BackupError::State(_) => Status::ReplicaState,
            BackupError::Corrupt(_) => Status::ReplicaCorrupt,
            BackupError::TooLarge(_) => Status::InvalidArgument,
            BackupError::Io(_) => Status::Internal,
        }
    }
}

fn io(error: std::io::Error) -> BackupError {
    BackupError::Io(error.to_string())
}

#[derive(Clone, Copy, Debug)]
pub struct BackupLimits {
    pub open_buffers_max: u32,
    pub open_buffer_bytes_max: u64,
}

#[derive(Debug, Default)]
struct Index {
    by_key: HashMap<u64, Arc<Replica>>,
    /// Every replica by (primary server slot, segment, epoch). A replacement (higher epoch)
    /// sits beside the replica it supersedes until it is made current (`set_epoch`), so a
    /// backup never drops a complete copy for a half-built one.
    by_id: BTreeMap<(u32, ReplicaId, u32), Arc<Replica>>,
    open_buffers: u32,
    open_bytes: u64,
    /// Newest generation seen of each server slot: older ones are fenced.
    newest_generation: HashMap<u32, u32>,
}

#[derive(Debug)]
pub struct BackupStore {
    root: PathBuf,
    limits: BackupLimits,
    next_key: AtomicU64,
    index: Mutex<Index>,
}

impl BackupStore {
    /// Loads every replica found under `root` (creating it if needed): open ones are mapped
    /// again, so a restarted backup still holds what it held.
    pub fn load(root: &Path, limits: BackupLimits) -> Result<Self, BackupError> {
        std::fs::create_dir_all(root).map_err(io)?;
        // Keys start at a random point so a key from a previous incarnation never matches.
        let store = Self {
            root: root.to_path_buf(),
            limits,
            next_key: AtomicU64::new(rand::random::<u64>() >> 1),
            index: Mutex::new(Index::default()),
        };
        for dir in std::fs::read_dir(root).map_err(io)? {
            let dir = dir.map_err(io)?.path();
            if !dir.is_dir() {
                continue;
            }
            for entry in std::fs::read_dir(&dir).map_err(io)? {
                let path = entry.map_err(io)?.path();
                if path.extension().is_some_and(|e| e == "json")
                    && let Err(error) = store.load_one(&path)
                {
                    tracing::warn!(path = %path.display(), %error, "skipping unreadable replica");
                }
            }
        }
        Ok(store)
    }

    fn load_one(&self, sidecar_path: &Path) -> Result<(), BackupError> {
        let sidecar = Sidecar::load(sidecar_path).map_err(io)?;
        // Files keep the name of the epoch they were opened with; the sidecar may hold a newer one.
        let data_path = sidecar_path.with_extension("seg");
        let buffer = match sidecar.closed_bytes {
            Some(_) => None,
            None => Some(MappedBuffer::open(&data_path).map_err(io)?),
        };
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        let open = buffer.is_some();
        let replica = Arc::new(Replica::new(
            key,
            sidecar,
            data_path,
            sidecar_path.to_path_buf(),
            buffer,
        ));
        let mut index = self.lock();
        if open {
            index.open_buffers += 1;
            index.open_bytes += u64::from(replica.capacity_bytes);
        }
        Self::note_generation_locked(&mut index, replica.primary);
        index.by_key.insert(key, replica.clone());
        let epoch = replica.sidecar().epoch;
        index
            .by_id
            .insert((replica.primary.index, replica.id, epoch), replica);
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn note_generation_locked(index: &mut Index, server: ServerId) {
        let newest = index
            .newest_generation
            .entry(server.index)
            .or_insert(server.generation);
        *newest = (*newest).max(server.generation);
    }

    /// Records that `server` exists (from membership or a request): older generations of its
    /// slot are fenced from now on.
    pub fn note_generation(&self, server: ServerId) {
        Self::note_generation_locked(&mut self.lock(), server);
    }

    /// Refuses `primary` if a newer generation of its slot is known.
    pub fn check_primary(&self, primary: ServerId) -> Result<(), BackupError> {
        let mut index = self.lock();
        let newest = index
            .newest_generation
            .get(&primary.index)
            .copied()
            .unwrap_or(0);
        if primary.generation < newest {
            return Err(BackupError::Stale(primary));
        }
        Self::note_generation_locked(&mut index, primary);
        Ok(())
    }

    /// Opens a replica buffer (replacing an older replica of the same segment from the same
    /// primary slot, if any). Returns the replica.
    pub fn open(&self, request: &ReplicaOpenRequest) -> Result<Arc<Replica>, BackupError> {
        if request.capacity_bytes == 0 || request.capacity_bytes > REPLICA_BYTES_MAX {
            return Err(BackupError::TooLarge(request.capacity_bytes));
        }
        self.check_primary(request.primary)?;
        let capacity = u64::from(request.capacity_bytes);
        let replaced = {
            let mut index = self.lock();
            // Re-opening the same epoch (a retried open) replaces it; other epochs stay.
            let replaced =
                index
                    .by_id
                    .remove(&(request.primary.index, request.replica, request.epoch));
            if let Some(old) = &replaced {
                index.by_key.remove(&old.key);
                if !old.is_closed() {
                    index.open_buffers -= 1;
                    index.open_bytes -= u64::from(old.capacity_bytes);
                }
            }
            let full = index.open_buffers >= self.limits.open_buffers_max
                || index.open_bytes + capacity > self.limits.open_buffer_bytes_max;
            if full {
                let (open, bytes) = (index.open_buffers, index.open_bytes);
                drop(index);
                if let Some(old) = replaced {
                    remove_files(&old);
                }
                return Err(BackupError::PoolFull { open, bytes });
            }
            index.open_buffers += 1;
            index.open_bytes += capacity;
            replaced
        };
        if let Some(old) = replaced {
            remove_files(&old);
        }
        let created = self.create_files(request);
        let mut index = self.lock();
        match created {
            Ok(replica) => {
                index.by_key.insert(replica.key, replica.clone());
                index.by_id.insert(
                    (replica.primary.index, replica.id, request.epoch),
                    replica.clone(),
                );
                Ok(replica)
            }
            Err(error) => {
                index.open_buffers -= 1;
                index.open_bytes -= capacity;
                Err(error)
            }
        }
    }

    fn create_files(&self, request: &ReplicaOpenRequest) -> Result<Arc<Replica>, BackupError> {
        let (data_path, sidecar_path) =
            replica_paths(&self.root, request.primary, &request.replica, request.epoch);
        if let Some(dir) = data_path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let buffer = MappedBuffer::create(&data_path, request.capacity_bytes).map_err(io)?;
        let sidecar = Sidecar {
            primary: request.primary,
            replica: request.replica,
            epoch: request.epoch,
            filling: request.filling,
            capacity_bytes: request.capacity_bytes,
            closed_bytes: None,
        };
        sidecar.save(&sidecar_path).map_err(io)?;
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(Replica::new(
            key,
            sidecar,
            data_path,
            sidecar_path,
            Some(buffer),
        )))
    }

    /// The newest replica (highest epoch) of segment `id` from `primary`'s slot, if `primary`
    /// is not fenced.
    pub fn find(&self, primary: ServerId, id: &ReplicaId) -> Result<Arc<Replica>, BackupError> {
        self.check_primary(primary)?;
        let index = self.lock();
        let replica = Self::epochs(&index, primary.index, id)
            .next_back()
            .ok_or(BackupError::UnknownReplica)?
            .clone();
        if replica.primary.generation > primary.generation {
            return Err(BackupError::Stale(primary));
        }
        Ok(replica)
    }

    fn epochs<'a>(
        index: &'a Index,
        slot: u32,
        id: &ReplicaId,
    ) -> impl DoubleEndedIterator<Item = &'a Arc<Replica>> {
        index
            .by_id
            .range((slot, *id, 0)..=(slot, *id, u32::MAX))
            .map(|(_, replica)| replica)
    }

    /// The replica the key names, if it is `primary`'s replica of `id`.
    pub fn find_by_key(
        &self,
        primary: ServerId,
        id: &ReplicaId,
        key: u64,
    ) -> Result<Arc<Replica>, BackupError> {
        self.check_primary(primary)?;
        let index = self.lock();
        let replica = index.by_key.get(&key).ok_or(BackupError::UnknownReplica)?;
        if replica.primary.index != primary.index || replica.id != *id {
            return Err(BackupError::UnknownReplica);
        }
        Ok(replica.clone())
    }

    /// Makes the newest replica of `id` current at `epoch` (and complete, if it was filling),
    /// then drops the older epochs it supersedes.
    pub fn set_epoch(
        &self,
        primary: ServerId,
        id: &ReplicaId,
        epoch: u32,
    ) -> Result<(), BackupError> {
        let current = self.find(primary, id)?;
        current
            .update(|sidecar| {
                sidecar.epoch = sidecar.epoch.max(epoch);
                sidecar.filling = false;
            })
            .map_err(io)?;
        let superseded: Vec<Arc<Replica>> = {
            let mut index = self.lock();
            let keys: Vec<(u32, ReplicaId, u32)> = index
                .by_id
                .range((primary.index, *id, 0)..=(primary.index, *id, u32::MAX))
                .filter(|(_, r)| !Arc::ptr_eq(r, &current))
                .map(|(k, _)| *k)
                .collect();
            let mut superseded = Vec::new();
            for key in keys {
                if let Some(old) = index.by_id.remove(&key) {
                    index.by_key.remove(&old.key);
                    if !old.is_closed() {
                        index.open_buffers = index.open_buffers.saturating_sub(1);
                        index.open_bytes = index
                            .open_bytes
                            .saturating_sub(u64::from(old.capacity_bytes));
                    }
                    superseded.push(old);
                }
            }
            // Re-key the current replica under its new epoch.
            let stale_key = index
                .by_id
                .iter()
                .find(|(_, r)| Arc::ptr_eq(r, &current))
                .map(|(k, _)| *k);
            if let Some(stale_key) = stale_key {
                index.by_id.remove(&stale_key);
                index.by_id.insert(
                    (primary.index, *id, current.sidecar().epoch),
                    current.clone(),
                );
            }
            superseded
        };
        for old in superseded {
            remove_files(&old);
        }
        Ok(())
    }

    /// The open replica a one-sided write names by `key`, if `primary` may write it.
    pub fn writer_for(&self, key: u64, primary: ServerId) -> Result<Arc<Replica>, BackupError> {
        let index = self.lock();
        let newest = index
            .newest_generation
            .get(&primary.index)
            .copied()
            .unwrap_or(0);
        if primary.generation < newest {
            return Err(BackupError::Stale(primary));
        }
        let replica = index.by_key.get(&key).ok_or(BackupError::UnknownReplica)?;
        if replica.primary != primary {
            return Err(BackupError::UnknownReplica);
        }
        Ok(replica.clone())
    }

    /// Gives a closed replica's buffer slot back to the pool.
    pub fn release_buffer(&self, replica: &Replica) {
        let mut index = self.lock();
        index.open_buffers = index.open_buffers.saturating_sub(1);
        index.open_bytes = index
            .open_bytes
            .saturating_sub(u64::from(replica.capacity_bytes));
    }

    /// Drops every replica (all epochs) of segment `id` from `primary`'s slot, and their files.
    pub fn free(&self, primary: ServerId, id: &ReplicaId) -> Result<(), BackupError> {
        self.check_primary(primary)?;
        let freed: Vec<Arc<Replica>> = {
            let mut index = self.lock();
            let keys: Vec<(u32, ReplicaId, u32)> = index
                .by_id
                .range((primary.index, *id, 0)..=(primary.index, *id, u32::MAX))
                .map(|(k, _)| *k)
                .collect();
            let mut freed = Vec::new();
            for key in keys {
                if let Some(replica) = index.by_id.remove(&key) {
                    index.by_key.remove(&replica.key);
                    if !replica.is_closed() {
                        index.open_buffers = index.open_buffers.saturating_sub(1);
                        index.open_bytes = index
                            .open_bytes
                            .saturating_sub(u64::from(replica.capacity_bytes));
                    }
                    freed.push(replica);
                }
            }
            freed
        };
        if freed.is_empty() {
            return Err(BackupError::UnknownReplica);
        }
        for replica in freed {
            remove_files(&replica);
        }
        Ok(())
    }

    /// Every replica (of `primary`'s slot, any generation, when given).
    pub fn replicas(&self, primary: Option<ServerId>) -> Vec<Arc<Replica>> {
        let index = self.lock();
        let mut all: Vec<_> = index
            .by_id
            .values()
            .filter(|r| primary.is_none_or(|p| p.index == r.primary.index))
            .cloned()
            .collect();
        all.sort_by_key(|r| (r.primary, r.id, r.sidecar().epoch));
        all
    }

    /// (open buffers, their bytes).
    pub fn pool_usage(&self) -> (u32, u64) {
        let index = self.lock();
        (index.open_buffers, index.open_bytes)
    }

    pub fn limits(&self) -> BackupLimits {
        self.limits
    }
}

fn remove_files(replica: &Replica) {
    let _ = std::fs::remove_file(&replica.data_path);
    let _ = std::fs::remove_file(&replica.sidecar_path);
}
