//! Every replica this backup holds, the buffer pool they are written into, and the fencing of
//! old primary generations. Methods do file I/O and may block: callers run them off the async
//! workers (`spawn_blocking`), except `writer_for`, which only looks up the index.

use super::buffer::ReplicaBuffer;
use super::pool::{AcquireError, BufferPool, NextSpare};
use super::replica::{Replica, ReplicaMeta, parse_segment_file};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tailstream_wire::messages::{ReplicaId, ReplicaOpenRequest};
use tailstream_wire::{ReplicaEpoch, ServerId, Status, StreamId};
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

pub(super) fn io(error: std::io::Error) -> BackupError {
    BackupError::Io(error.to_string())
}

impl From<AcquireError> for BackupError {
    fn from(error: AcquireError) -> Self {
        match error {
            AcquireError::Full { in_use, bytes } => BackupError::PoolFull {
                open: in_use,
                bytes,
            },
            AcquireError::Io(error) => io(error),
        }
    }
}

/// What a backup records about a replica it opens.
fn opened_meta(request: &ReplicaOpenRequest) -> ReplicaMeta {
    ReplicaMeta {
        primary: request.primary,
        replica: request.replica,
        epoch: request.epoch,
        filling: request.filling,
        capacity_bytes: request.capacity_bytes,
        closed_bytes: None,
    }
}

#[derive(Clone, Copy, Debug)]
pub struct BackupLimits {
    pub open_buffers_max: u32,
    pub open_buffer_bytes_max: u64,
}

type ReplicaKey = (u32, ReplicaId, ReplicaEpoch);

#[derive(Debug, Default)]
struct Index {
    by_key: HashMap<u64, Arc<Replica>>,
    /// Every replica by (primary server slot, segment, epoch). A replacement (higher epoch)
    /// sits beside the replica it supersedes until it is made current (`set_epoch`), so a
    /// backup never drops a complete copy for a half-built one.
    by_id: BTreeMap<ReplicaKey, Arc<Replica>>,
    /// Newest generation seen of each server slot: older ones are fenced.
    newest_generation: HashMap<u32, u32>,
}

/// How often the spare maker looks again without being woken (it also notices the store gone).
const SPARE_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// How long the spare maker lets an open that took a spare finish before it makes another.
const SPARE_SETTLE: std::time::Duration = std::time::Duration::from_millis(100);
/// The pause after a spare could not be made.
const SPARE_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Debug)]
pub struct BackupStore {
    root: PathBuf,
    limits: BackupLimits,
    pool: BufferPool,
    next_key: AtomicU64,
    index: Mutex<Index>,
    /// What the software NIC asks of a connection (granted in buffer descriptors).
    nic_tickets: crate::nic_ticket::NicTickets,
    /// Queue pairs and registered regions of primaries that write with RDMA: fenced with the
    /// index, so a fenced generation's writes fail at the NIC too.
    #[cfg(feature = "rdma")]
    rdma: Arc<crate::rdma::RdmaBackup>,
}

impl BackupStore {
    /// Loads every replica found under `root` (creating it if needed): open ones are the
    /// claims of pool buffers, closed ones are segment files. A restarted backup holds what it
    /// held.
    pub fn load(root: &Path, limits: BackupLimits) -> Result<Self, BackupError> {
        std::fs::create_dir_all(root).map_err(io)?;
        let (pool, claimed) = BufferPool::load(
            &root.join("buffers"),
            limits.open_buffers_max,
            limits.open_buffer_bytes_max,
        )
        .map_err(io)?;
        // Keys start at a random point so a key from a previous incarnation never matches.
        let store = Self {
            root: root.to_path_buf(),
            limits,
            pool,
            next_key: AtomicU64::new(rand::random::<u64>() >> 1),
            index: Mutex::new(Index::default()),
            nic_tickets: crate::nic_ticket::NicTickets::new(),
            #[cfg(feature = "rdma")]
            rdma: Arc::default(),
        };
        for dir in std::fs::read_dir(root).map_err(io)? {
            let dir = dir.map_err(io)?.path();
            let Some(dir_name) = dir.file_name().and_then(|n| n.to_str()).map(String::from) else {
                continue;
            };
            if !dir.is_dir() || dir_name == "buffers" {
                continue;
            }
            for entry in std::fs::read_dir(&dir).map_err(io)? {
                let path = entry.map_err(io)?.path();
                let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
                    continue;
                };
                if file_name.ends_with(".tmp") {
                    // A close that did not finish: the replica is still open in its buffer.
                    let _ = std::fs::remove_file(&path);
                    continue;
                }
                let Some((primary, replica, epoch, filling)) =
                    parse_segment_file(&dir_name, file_name)
                else {
                    continue;
                };
                let length = std::fs::metadata(&path).map_err(io)?.len();
                let length = u32::try_from(length).unwrap_or(u32::MAX);
                let meta = ReplicaMeta {
                    primary,
                    replica,
                    epoch,
                    filling,
                    capacity_bytes: length,
                    closed_bytes: Some(length),
                };
                store.insert(Replica::new(store.new_key(), root, meta, None));
            }
        }
        for (meta, buffer) in claimed {
            let exists =
                store
                    .lock()
                    .by_id
                    .contains_key(&(meta.primary.index, meta.replica, meta.epoch));
            if exists {
                // Closed just before the stop: the segment file is the replica.
                store.pool.release(buffer);
            } else {
                store.insert(Replica::new(
                    store.new_key(),
                    root,
                    meta,
                    Some(ReplicaBuffer::Pool(buffer)),
                ));
            }
        }
        Ok(store)
    }

    fn new_key(&self) -> u64 {
        loop {
            let key = self.next_key.fetch_add(1, Ordering::Relaxed);
            // Key 0 is the one-sided protocol's keepalive, never a buffer.
            if key != tailstream_wire::nic::KEEPALIVE_KEY {
                return key;
            }
        }
    }

    fn insert(&self, replica: Replica) -> Arc<Replica> {
        let replica = Arc::new(replica);
        let epoch = replica.meta().epoch;
        let mut index = self.lock();
        // A replica found at load, or one whose open already checked its primary: nothing
        // registered with rdma can be of an older generation here.
        let _ = Self::note_generation_locked(&mut index, replica.primary);
        index.by_key.insert(replica.key, replica.clone());
        index
            .by_id
            .insert((replica.primary.index, replica.id, epoch), replica.clone());
        replica
    }

    fn lock(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Returns whether `server` fences generations not fenced before (the caller then fences
    /// them on the rdma backend too, once the index lock is released).
    #[must_use]
    fn note_generation_locked(index: &mut Index, server: ServerId) -> bool {
        let newest = index.newest_generation.entry(server.index).or_insert(0);
        let advanced = server.generation > *newest;
        *newest = (*newest).max(server.generation);
        advanced
    }

    /// Generations of `newest`'s slot older than it write nothing more by any transport.
    fn fenced_older_than(&self, newest: ServerId) {
        #[cfg(feature = "rdma")]
        self.rdma.fence_older_than(newest);
        #[cfg(not(feature = "rdma"))]
        let _ = newest;
    }

    /// The rdma backend's queue pairs and regions.
    #[cfg(feature = "rdma")]
    pub fn rdma(&self) -> &Arc<crate::rdma::RdmaBackup> {
        &self.rdma
    }

    /// Records that `server` exists (from membership or a request): older generations of its
    /// slot are fenced from now on.
    pub fn note_generation(&self, server: ServerId) {
        // Fenced on rdma even when the index already knew it: another caller may be between
        // its index update and its rdma fence (the rdma fence itself is idempotent).
        let _ = Self::note_generation_locked(&mut self.lock(), server);
        self.fenced_older_than(server);
    }

    /// Whether a newer generation of `primary`'s slot is known.
    fn fenced_locked(index: &Index, primary: ServerId) -> bool {
        let newest = index
            .newest_generation
            .get(&primary.index)
            .copied()
            .unwrap_or(0);
        primary.generation < newest
    }

    /// This incarnation's NIC tickets.
    pub fn nic_tickets(&self) -> &crate::nic_ticket::NicTickets {
        &self.nic_tickets
    }

    /// Refuses `primary` if a newer generation of its slot is known.
    pub fn check_primary(&self, primary: ServerId) -> Result<(), BackupError> {
        let mut index = self.lock();
        if Self::fenced_locked(&index, primary) {
            return Err(BackupError::Stale(primary));
        }
        let advanced = Self::note_generation_locked(&mut index, primary);
        drop(index);
        if advanced {
            self.fenced_older_than(primary);
        }
        Ok(())
    }

    /// Checks an open (size, fencing) and drops an earlier replica of the same segment and
    /// epoch (a retried open replaces the first; other epochs of the segment stay).
    fn prepare_open(&self, request: &ReplicaOpenRequest) -> Result<(), BackupError> {
        if request.capacity_bytes == 0 || request.capacity_bytes > REPLICA_BYTES_MAX {
            return Err(BackupError::TooLarge(request.capacity_bytes));
        }
        self.check_primary(request.primary)?;
        let replaced = {
            let mut index = self.lock();
            let key = (request.primary.index, request.replica, request.epoch);
            let replaced = index.by_id.remove(&key);
            if let Some(old) = &replaced {
                index.by_key.remove(&old.key);
            }
            replaced
        };
        if let Some(old) = replaced {
            self.discard(&old);
        }
        Ok(())
    }

    /// Keeps `count` free pool buffers made ahead of need (of `capacity_hint` bytes until opens
    /// ask for another size), on a thread of their own: writing a buffer through and syncing it
    /// takes milliseconds per MiB, which a fresh log's first append would otherwise wait for
    /// on each of its backups. The thread ends with the store. The receiver hears once the
    /// first spares are made (or could not be), so a broker can finish starting with them.
    pub fn keep_spares(
        self: &Arc<Self>,
        count: u32,
        capacity_hint: u32,
    ) -> std::io::Result<tokio::sync::oneshot::Receiver<()>> {
        let (made, first_made) = tokio::sync::oneshot::channel();
        if count == 0 {
            let _ = made.send(());
            return Ok(first_made);
        }
        self.pool.want_spares(count, capacity_hint);
        let store = Arc::downgrade(self);
        let mut made = Some(made);
        std::thread::Builder::new()
            .name("backup-spares".into())
            .spawn(move || {
                let mut failures = 0u32;
                loop {
                    let Some(store) = store.upgrade() else {
                        return;
                    };
                    // The first spares are made (or there is no room for them): say so
                    // before waiting for demand.
                    if made.is_some()
                        && store.pool.spare_to_make().is_none()
                        && let Some(made) = made.take()
                    {
                        let _ = made.send(());
                    }
                    let capacity = match store.pool.next_spare(SPARE_CHECK_INTERVAL) {
                        NextSpare::Make(capacity) => capacity,
                        next => {
                            if next == NextSpare::Woken {
                                // Not on the heels of the open that took one: its segment's
                                // bounds are being saved (an fsync at the coordinator, maybe
                                // on this disk) before its first record is acknowledged.
                                drop(store);
                                std::thread::sleep(SPARE_SETTLE);
                            }
                            continue;
                        }
                    };
                    match store.pool.make_spare(capacity) {
                        Ok(()) => failures = 0,
                        Err(error) => {
                            // A full disk, say: opens still make their own (and say why).
                            failures = failures.saturating_add(1);
                            if let Some(made) = made.take() {
                                let _ = made.send(());
                            }
                            if failures == 1 {
                                tracing::warn!(%error, "making a spare replica buffer failed; retrying every few seconds");
                            }
                            drop(store);
                            std::thread::sleep(SPARE_RETRY_PAUSE);
                        }
                    }
                }
            })
            .map(|_| first_made)
    }

    /// Opens a replica in a pool buffer, claimed for it.
    pub fn open(&self, request: &ReplicaOpenRequest) -> Result<Arc<Replica>, BackupError> {
        self.prepare_open(request)?;
        let buffer = self.pool.acquire(request.capacity_bytes)?;
        let meta = opened_meta(request);
        if let Err(error) = buffer.claim(Some(&meta)) {
            self.pool.release(buffer);
            return Err(io(error));
        }
        let buffer = ReplicaBuffer::Pool(buffer);
        Ok(self.insert(Replica::new(self.new_key(), &self.root, meta, Some(buffer))))
    }

    /// Opens a replica in a memory region registered with the RDMA device (the rdma
    /// backend). The region counts against the pool's bounds; it has no claim, as it does not
    /// outlive the process.
    #[cfg(feature = "rdma")]
    pub fn open_registered(
        &self,
        request: &ReplicaOpenRequest,
        region: crate::rdma::RegisteredBuffer,
    ) -> Result<Arc<Replica>, BackupError> {
        self.prepare_open(request)?;
        self.pool.reserve(request.capacity_bytes)?;
        let buffer = ReplicaBuffer::Rdma(region);
        let meta = opened_meta(request);
        Ok(self.insert(Replica::new(self.new_key(), &self.root, meta, Some(buffer))))
    }

    /// Drops a replica that is no longer in the index: its buffer back to the pool, its files
    /// removed.
    fn discard(&self, replica: &Replica) {
        match replica.buffer.blocking_lock().take() {
            Some(buffer) => self.release(buffer),
            None => {
                let _ = std::fs::remove_file(replica.segment_path());
            }
        }
    }

    /// Gives a closed replica's buffer back: a pool buffer to the pool (zeroed, unclaimed), a
    /// registered region to the device (its bytes count against the pool until then).
    pub fn release(&self, buffer: ReplicaBuffer) {
        match buffer {
            ReplicaBuffer::Pool(buffer) => self.pool.release(buffer),
            #[cfg(feature = "rdma")]
            ReplicaBuffer::Rdma(buffer) => self.pool.unreserve(buffer.capacity()),
        }
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
            .range((slot, *id, ReplicaEpoch(0))..=(slot, *id, ReplicaEpoch(u32::MAX)))
            .map(|(_, replica)| replica)
    }

    /// `primary`'s replica of `id` at exactly `epoch`, fenced or not (for reads).
    pub fn find_epoch(
        &self,
        primary: ServerId,
        id: &ReplicaId,
        epoch: ReplicaEpoch,
    ) -> Result<Arc<Replica>, BackupError> {
        let index = self.lock();
        index
            .by_id
            .get(&(primary.index, *id, epoch))
            .filter(|r| r.primary == primary)
            .cloned()
            .ok_or(BackupError::UnknownReplica)
    }

    /// Fences `crashed` (declared crashed by the coordinator): from now on nothing of that
    /// generation is accepted, whether or not its slot has a newer incarnation yet.
    pub fn fence(&self, crashed: ServerId) {
        let next = ServerId::new(crashed.index, crashed.generation.saturating_add(1));
        let _ = Self::note_generation_locked(&mut self.lock(), next);
        self.fenced_older_than(next);
    }

    /// Recovery adopts a closed replica: `from`'s replica of `id` at `epoch` becomes
    /// `new_primary`'s at `new_epoch`, its segment file moved into the new primary's
    /// directory. Idempotent: adopting again what was adopted succeeds.
    pub fn adopt(
        &self,
        from: ServerId,
        new_primary: ServerId,
        id: &ReplicaId,
        epoch: ReplicaEpoch,
        new_epoch: ReplicaEpoch,
    ) -> Result<(), BackupError> {
        self.check_primary(new_primary)?;
        {
            let index = self.lock();
            if let Some(done) = index.by_id.get(&(new_primary.index, *id, new_epoch))
                && done.primary == new_primary
            {
                return Ok(());
            }
        }
        let old = self.find_epoch(from, id, epoch)?;
        if !old.is_closed() {
            return Err(BackupError::State(
                "only a closed replica can be adopted".into(),
            ));
        }
        let mut meta = old.meta().clone();
        meta.primary = new_primary;
        meta.epoch = new_epoch;
        let adopted = Replica::new(self.new_key(), &self.root, meta, None);
        std::fs::create_dir_all(adopted.dir()).map_err(io)?;
        std::fs::rename(old.segment_path(), adopted.segment_path()).map_err(io)?;
        std::fs::File::open(adopted.dir())
            .and_then(|d| d.sync_all())
            .map_err(io)?;
        {
            let mut index = self.lock();
            index.by_id.remove(&(from.index, *id, epoch));
            index.by_key.remove(&old.key);
        }
        self.insert(adopted);
        Ok(())
    }

    /// Drops every replica of exactly this (crashed, recovered) generation: what recovery
    /// adopted belongs to other primaries by now, the rest is garbage. Returns how many.
    pub fn drop_generation(&self, retired: ServerId) -> usize {
        self.remove_selected(|index| {
            index
                .by_id
                .iter()
                .filter(|(_, r)| r.primary == retired)
                .map(|(k, _)| *k)
                .collect()
        })
    }

    /// Drops every replica of a deleted stream (stream ids are never reused). Returns how many.
    pub fn drop_stream(&self, stream: StreamId) -> usize {
        self.remove_selected(|index| {
            index
                .by_id
                .iter()
                .filter(|(_, r)| r.id.stream == stream)
                .map(|(k, _)| *k)
                .collect()
        })
    }

    /// Removes the replicas `select` names from the index, then discards their files.
    fn remove_selected(&self, select: impl FnOnce(&Index) -> Vec<ReplicaKey>) -> usize {
        let removed: Vec<Arc<Replica>> = {
            let mut index = self.lock();
            let keys = select(&index);
            keys.into_iter()
                .filter_map(|key| {
                    let replica = index.by_id.remove(&key)?;
                    index.by_key.remove(&replica.key);
                    Some(replica)
                })
                .collect()
        };
        for replica in &removed {
            self.discard(replica);
        }
        removed.len()
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

    /// The open replica a one-sided write names by `key`, if `primary` may write it.
    pub fn writer_for(&self, key: u64, primary: ServerId) -> Result<Arc<Replica>, BackupError> {
        let index = self.lock();
        if Self::fenced_locked(&index, primary) {
            return Err(BackupError::Stale(primary));
        }
        let replica = index.by_key.get(&key).ok_or(BackupError::UnknownReplica)?;
        if replica.primary != primary {
            return Err(BackupError::UnknownReplica);
        }
        Ok(replica.clone())
    }

    /// Removes every replica of segment `id` from `primary`'s slot that `keep` rejects.
    fn remove_epochs(
        &self,
        primary: ServerId,
        id: &ReplicaId,
        keep: impl Fn(&Arc<Replica>) -> bool,
    ) -> usize {
        self.remove_selected(|index| {
            index
                .by_id
                .range(
                    (primary.index, *id, ReplicaEpoch(0))
                        ..=(primary.index, *id, ReplicaEpoch(u32::MAX)),
                )
                .filter(|(_, r)| !keep(r))
                .map(|(k, _)| *k)
                .collect()
        })
    }

    /// Makes the newest replica of `id` current at `epoch` (and complete, if it was filling),
    /// then drops the older epochs it supersedes.
    pub fn set_epoch(
        &self,
        primary: ServerId,
        id: &ReplicaId,
        epoch: ReplicaEpoch,
    ) -> Result<(), BackupError> {
        let current = self.find(primary, id)?;
        {
            // Under the buffer's lock: a close cannot run meanwhile, so the replica is either
            // open (update its claim) or closed (rename its segment file).
            let buffer = current.buffer.blocking_lock();
            let old_path = current.segment_path();
            let updated = {
                let mut meta = current.meta();
                meta.epoch = meta.epoch.max(epoch);
                meta.filling = false;
                meta.clone()
            };
            match buffer.as_ref() {
                // Registered regions have no claim: they do not outlive the process.
                Some(buffer) => {
                    if let Some(pool) = buffer.pool() {
                        pool.claim(Some(&updated)).map_err(io)?;
                    }
                }
                None => {
                    std::fs::rename(&old_path, current.segment_path()).map_err(io)?;
                    std::fs::File::open(current.dir())
                        .and_then(|d| d.sync_all())
                        .map_err(io)?;
                }
            }
        }
        self.remove_epochs(primary, id, |r| Arc::ptr_eq(r, &current));
        // Re-key the current replica under its new epoch.
        let mut index = self.lock();
        let stale: Vec<ReplicaKey> = index
            .by_id
            .iter()
            .filter(|(_, r)| Arc::ptr_eq(r, &current))
            .map(|(k, _)| *k)
            .collect();
        for key in stale {
            index.by_id.remove(&key);
        }
        let new_epoch = current.meta().epoch;
        index.by_id.insert((primary.index, *id, new_epoch), current);
        Ok(())
    }

    /// Drops every replica (all epochs) of segment `id` from `primary`'s slot.
    pub fn free(&self, primary: ServerId, id: &ReplicaId) -> Result<(), BackupError> {
        self.check_primary(primary)?;
        if self.remove_epochs(primary, id, |_| false) == 0 {
            return Err(BackupError::UnknownReplica);
        }
        Ok(())
    }

    /// Every replica (of `primary`'s slot, any generation, when given).
    pub fn replicas(&self, primary: Option<ServerId>) -> Vec<Arc<Replica>> {
        let index = self.lock();
        index
            .by_id
            .values()
            .filter(|r| primary.is_none_or(|p| p.index == r.primary.index))
            .cloned()
            .collect()
    }

    /// (buffers in use, their bytes).
    /// Whether a spare buffer is wanted now (for tests of the spare maker).
    #[cfg(test)]
    pub(crate) fn spare_wanted(&self) -> bool {
        self.pool.spare_to_make().is_some()
    }

    pub fn pool_usage(&self) -> (u32, u64) {
        let (in_use, bytes, _) = self.pool.usage();
        (in_use, bytes)
    }

    pub fn limits(&self) -> BackupLimits {
        self.limits
    }
}
