//! The backup's pool of replica buffers: memory-mapped files, pre-zeroed, reused.
//!
//! A buffer is created once (its file fully allocated, its pages resident) and then serves one
//! open replica after another: writes land in pages that are already mapped, so the
//! replication path neither faults in fresh pages nor allocates file blocks. When its replica
//! closes, the valid prefix is copied to a segment file (fsynced), the written part of the
//! buffer is zeroed again, and the buffer goes back to the free list. Buffers in use are
//! bounded in count and bytes; an open beyond either bound is refused (`PoolFull`).
//!
//! Which replica a buffer holds is its *claim*: `buf-N.claim` beside `buf-N.buf`, a fixed-size
//! record (`tailstream_wire::replica_files`: length, CRC32, the encoded `ReplicaMeta`)
//! overwritten in place, never re-created.
//! It is not fsynced: like the buffer's bytes, it lives in the page cache, which survives the
//! crash of the backup process (the durability model does not promise more for open
//! segments). A claim is trusted only whole: its checksum matches, its JSON parses, and the
//! capacity it names is the mapped buffer's real length. Anything else is logged, counted
//! (`backup_claims_rejected_total`) and treated as no claim: the buffer is zeroed and freed.

use super::mapped::MappedBuffer;
use super::replica::ReplicaMeta;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;
use tailstream_wire::replica_files::{
    CLAIM_BYTES, Claim as ClaimRecord, decode_claim, encode_claim,
};

/// One pool buffer, owned by at most one open replica at a time.
#[derive(Debug)]
pub struct PoolBuffer {
    pub file_name: String,
    pub map: MappedBuffer,
    /// Bytes past which the buffer is known to be zero (grows with writes; reset on release).
    pub high_water: usize,
    claim_file: File,
}

impl PoolBuffer {
    pub fn capacity(&self) -> u32 {
        self.map.len() as u32
    }

    /// Records which replica the buffer holds (`None`: none), in place.
    pub fn claim(&self, meta: Option<&ReplicaMeta>) -> std::io::Result<()> {
        self.claim_file.write_all_at(&encode_claim(meta), 0)
    }

    /// What the claim file says, checked against the buffer it sits beside.
    fn read_claim(claim_file: &File, buffer_len: usize) -> Claim {
        let mut record = [0u8; CLAIM_BYTES];
        if let Err(error) = claim_file.read_exact_at(&mut record, 0) {
            return Claim::Rejected(format!("unreadable: {error}"));
        }
        let meta = match decode_claim(&record) {
            Ok(ClaimRecord::Free) => return Claim::Free,
            Ok(ClaimRecord::Replica(meta)) => meta,
            Err(error) => return Claim::Rejected(error.to_string()),
        };
        if meta.capacity_bytes as usize != buffer_len {
            return Claim::Rejected(format!(
                "names a {}-byte replica, the buffer has {buffer_len} bytes",
                meta.capacity_bytes
            ));
        }
        Claim::Replica(meta)
    }

    /// Zeroes what was written, so the buffer reads as unwritten again.
    fn rezero(&mut self) {
        let end = self.high_water.min(self.map.len());
        self.map.bytes_mut()[..end].fill(0);
        self.high_water = 0;
    }
}

/// A claim file's verdict.
#[derive(Debug)]
enum Claim {
    Free,
    Replica(ReplicaMeta),
    /// Present but not to be trusted, and why.
    Rejected(String),
}

#[derive(Debug, Default)]
struct PoolState {
    free: HashMap<u32, Vec<PoolBuffer>>,
    in_use: u32,
    in_use_bytes: u64,
    /// Free buffers to keep made ahead of need (0: none), of `spare_capacity` bytes: the size
    /// last asked for (or the configured segment size until then).
    spares_wanted: u32,
    spare_capacity: u32,
}

impl PoolState {
    /// (free buffers, their bytes).
    fn free_totals(&self) -> (u32, u64) {
        self.free
            .iter()
            .fold((0, 0), |(count, bytes), (capacity, buffers)| {
                let n = u32::try_from(buffers.len()).unwrap_or(u32::MAX);
                (
                    count.saturating_add(n),
                    bytes.saturating_add(u64::from(*capacity) * u64::from(n)),
                )
            })
    }
}

#[derive(Debug)]
pub struct BufferPool {
    dir: PathBuf,
    buffers_max: u32,
    bytes_max: u64,
    next_id: AtomicU64,
    state: Mutex<PoolState>,
    /// Woken when a buffer is taken: the spare maker may have one to make.
    demand: Condvar,
}

/// The extension of a buffer file while it is being made (renamed to `.buf` when whole).
const PARTIAL_EXTENSION: &str = "partial";

/// What the spare maker does next ([`BufferPool::next_spare`]).
#[derive(Debug, PartialEq, Eq)]
pub enum NextSpare {
    /// Make one of this many bytes.
    Make(u32),
    /// None wanted, and a buffer was taken or given back while waiting.
    Woken,
    /// None wanted, and nothing happened within the timeout.
    TimedOut,
}

/// Why a buffer could not be had.
#[derive(Debug)]
pub enum AcquireError {
    Full { in_use: u32, bytes: u64 },
    Io(std::io::Error),
}

impl BufferPool {
    /// A pool in `dir`, with the buffers found there: those whose claim names a replica come
    /// back with it; the others are zeroed and become free buffers.
    pub fn load(
        dir: &Path,
        buffers_max: u32,
        bytes_max: u64,
    ) -> std::io::Result<(Self, Vec<(ReplicaMeta, PoolBuffer)>)> {
        std::fs::create_dir_all(dir)?;
        let mut state = PoolState::default();
        let mut claimed = Vec::new();
        let mut highest = 0u64;
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()).map(String::from) else {
                continue;
            };
            if name.starts_with("buf-") && path.extension().is_some_and(|e| e == PARTIAL_EXTENSION)
            {
                // A buffer whose making a crash cut short: never whole, never a buffer.
                std::fs::remove_file(&path)?;
                continue;
            }
            let Some(id) = name
                .strip_prefix("buf-")
                .and_then(|n| n.strip_suffix(".buf"))
            else {
                continue;
            };
            let Ok(id) = id.parse::<u64>() else {
                tracing::warn!(file = %name, "ignoring a pool file whose name is not buf-<id>.buf");
                continue;
            };
            if id == u64::MAX {
                tracing::warn!(file = %name, "ignoring a pool file with an impossible id");
                continue;
            }
            let map = MappedBuffer::open(&path)?;
            if u32::try_from(map.len()).is_err() {
                tracing::warn!(file = %name, bytes = map.len(), "ignoring a pool buffer over 4 GiB");
                continue;
            }
            highest = highest.max(id);
            let claim_file = open_claim_file(&path.with_extension("claim"))?;
            let meta = match PoolBuffer::read_claim(&claim_file, map.len()) {
                Claim::Free => None,
                Claim::Replica(meta) => Some(meta),
                Claim::Rejected(reason) => {
                    metrics::counter!(crate::metrics::BACKUP_CLAIMS_REJECTED).increment(1);
                    tracing::warn!(
                        buffer = %name,
                        %reason,
                        "rejecting a corrupt replica claim: the buffer is zeroed and reused"
                    );
                    None
                }
            };
            let mut buffer = PoolBuffer {
                file_name: name,
                high_water: map.len(),
                map,
                claim_file,
            };
            match meta {
                Some(meta) => {
                    state.in_use += 1;
                    state.in_use_bytes += u64::from(buffer.capacity());
                    claimed.push((meta, buffer));
                }
                None => {
                    // Whatever it held belongs to no open replica: make it unwritten again.
                    buffer.rezero();
                    state
                        .free
                        .entry(buffer.capacity())
                        .or_default()
                        .push(buffer);
                }
            }
        }
        let pool = Self {
            dir: dir.to_path_buf(),
            buffers_max,
            bytes_max,
            next_id: AtomicU64::new(highest + 1),
            state: Mutex::new(state),
            demand: Condvar::new(),
        };
        Ok((pool, claimed))
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A zeroed buffer of exactly `capacity` bytes: a free one, or a new one within bounds.
    pub fn acquire(&self, capacity: u32) -> Result<PoolBuffer, AcquireError> {
        {
            let mut state = self.lock();
            let full = state.in_use >= self.buffers_max
                || state.in_use_bytes + u64::from(capacity) > self.bytes_max;
            if full {
                return Err(AcquireError::Full {
                    in_use: state.in_use,
                    bytes: state.in_use_bytes,
                });
            }
            state.in_use += 1;
            state.in_use_bytes += u64::from(capacity);
            // The spares follow the size asked for; the maker makes up for this one.
            state.spare_capacity = capacity;
            self.demand.notify_one();
            if let Some(buffer) = state.free.get_mut(&capacity).and_then(Vec::pop) {
                return Ok(buffer);
            }
        }
        // None ready: this open waits for a buffer to be written through (not synced).
        metrics::counter!(crate::metrics::BACKUP_BUFFERS_MADE_ON_OPEN).increment(1);
        match self.create(capacity, false) {
            Ok(buffer) => Ok(buffer),
            Err(error) => {
                let mut state = self.lock();
                state.in_use -= 1;
                state.in_use_bytes -= u64::from(capacity);
                Err(AcquireError::Io(error))
            }
        }
    }

    /// A new buffer of `capacity` bytes, every block written (and `synced`: see
    /// [`MappedBuffer::create_allocated`]), counted nowhere yet. Written under a temporary
    /// name and renamed when whole: a crash meanwhile leaves no buffer of an odd size for
    /// `load` to adopt (the leftover is removed there).
    fn create(&self, capacity: u32, synced: bool) -> std::io::Result<PoolBuffer> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let file_name = format!("buf-{id}.buf");
        let path = self.dir.join(&file_name);
        let partial = path.with_extension(PARTIAL_EXTENSION);
        let map = MappedBuffer::create_allocated(&partial, capacity, synced)?;
        std::fs::rename(&partial, &path)?;
        let claim_file = open_claim_file(&path.with_extension("claim"))?;
        Ok(PoolBuffer {
            file_name,
            map,
            high_water: 0,
            claim_file,
        })
    }

    /// Keeps `count` free buffers of `capacity` bytes made ahead of need (until opens ask for
    /// another size), so that an open finds one ready instead of writing one through: made by
    /// whoever calls [`Self::make_spare`].
    pub fn want_spares(&self, count: u32, capacity: u32) {
        let mut state = self.lock();
        state.spares_wanted = count;
        if state.spare_capacity == 0 {
            state.spare_capacity = capacity;
        }
        self.demand.notify_one();
    }

    /// The size of the spare to make now, if one is wanted: fewer free buffers of the size
    /// last asked for than wanted, and room for one more within the pool's bounds (free
    /// buffers counted as if in use, so spares never let the pool outgrow them).
    pub fn spare_to_make(&self) -> Option<u32> {
        Self::spare_wanted(&self.lock(), self.buffers_max, self.bytes_max)
    }

    fn spare_wanted(state: &PoolState, buffers_max: u32, bytes_max: u64) -> Option<u32> {
        let capacity = state.spare_capacity;
        if state.spares_wanted == 0 || capacity == 0 {
            return None;
        }
        let ready = state.free.get(&capacity).map_or(0, Vec::len);
        let (free, free_bytes) = state.free_totals();
        let room = state.in_use.saturating_add(free) < buffers_max
            && state.in_use_bytes + free_bytes + u64::from(capacity) <= bytes_max;
        (ready < state.spares_wanted as usize && room).then_some(capacity)
    }

    /// The spare to make now; else waits (under the same lock, so a buffer taken meanwhile
    /// is never missed) until one is taken or given back, or `timeout`.
    pub fn next_spare(&self, timeout: Duration) -> NextSpare {
        let state = self.lock();
        if let Some(capacity) = Self::spare_wanted(&state, self.buffers_max, self.bytes_max) {
            return NextSpare::Make(capacity);
        }
        match self.demand.wait_timeout(state, timeout) {
            Ok((_, waited)) if waited.timed_out() => NextSpare::TimedOut,
            Err(poisoned) if poisoned.get_ref().1.timed_out() => NextSpare::TimedOut,
            _ => NextSpare::Woken,
        }
    }

    /// Makes one free buffer of `capacity` bytes (blocking: run off the async threads).
    pub fn make_spare(&self, capacity: u32) -> std::io::Result<()> {
        let buffer = self.create(capacity, true)?;
        metrics::counter!(crate::metrics::BACKUP_SPARE_BUFFERS_MADE).increment(1);
        self.lock().free.entry(capacity).or_default().push(buffer);
        Ok(())
    }

    /// Takes a buffer back: zeroes what was written, clears its claim, and puts it on the free
    /// list.
    pub fn release(&self, mut buffer: PoolBuffer) {
        buffer.rezero();
        if let Err(error) = buffer.claim(None) {
            tracing::warn!(%error, buffer = %buffer.file_name, "clearing a buffer claim failed");
        }
        let mut state = self.lock();
        state.in_use = state.in_use.saturating_sub(1);
        state.in_use_bytes = state
            .in_use_bytes
            .saturating_sub(u64::from(buffer.capacity()));
        state
            .free
            .entry(buffer.capacity())
            .or_default()
            .push(buffer);
        // Room freed: a spare held back by the bounds may be made now.
        self.demand.notify_one();
    }

    /// Counts `capacity` bytes of memory that is not a pool buffer (an rdma registered region)
    /// against the pool's bounds.
    pub fn reserve(&self, capacity: u32) -> Result<(), AcquireError> {
        let mut state = self.lock();
        if state.in_use >= self.buffers_max
            || state.in_use_bytes + u64::from(capacity) > self.bytes_max
        {
            return Err(AcquireError::Full {
                in_use: state.in_use,
                bytes: state.in_use_bytes,
            });
        }
        state.in_use += 1;
        state.in_use_bytes += u64::from(capacity);
        Ok(())
    }

    /// Undoes a `reserve`.
    pub fn unreserve(&self, capacity: u32) {
        let mut state = self.lock();
        state.in_use = state.in_use.saturating_sub(1);
        state.in_use_bytes = state.in_use_bytes.saturating_sub(u64::from(capacity));
    }

    /// (buffers in use, their bytes, free buffers).
    pub fn usage(&self) -> (u32, u64, usize) {
        let state = self.lock();
        (
            state.in_use,
            state.in_use_bytes,
            state.free.values().map(Vec::len).sum(),
        )
    }
}

fn open_claim_file(path: &Path) -> std::io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    if file.metadata()?.len() < CLAIM_BYTES as u64 {
        file.set_len(CLAIM_BYTES as u64)?;
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_zeroed_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let (pool, claimed) = BufferPool::load(dir.path(), 2, 1 << 20).unwrap();
        assert!(claimed.is_empty());
        let mut a = pool.acquire(4096).unwrap();
        let b = pool.acquire(4096).unwrap();
        assert!(matches!(
            pool.acquire(4096),
            Err(AcquireError::Full { in_use: 2, .. })
        ));
        a.map.bytes_mut()[..5].copy_from_slice(b"dirty");
        a.high_water = 5;
        let name = a.file_name.clone();
        pool.release(a);
        let again = pool.acquire(4096).unwrap();
        assert_eq!(again.file_name, name, "the free buffer is reused");
        assert!(
            again.map.bytes().iter().all(|byte| *byte == 0),
            "and zeroed"
        );
        pool.release(again);
        pool.release(b);
        assert_eq!(pool.usage(), (0, 0, 2));
        // A reloaded pool zeroes buffers no open replica claims.
        let dirty = dir.path().join(&name);
        std::fs::write(&dirty, vec![7u8; 4096]).unwrap();
        let (pool, _) = BufferPool::load(dir.path(), 2, 1 << 20).unwrap();
        let reused = pool.acquire(4096).unwrap();
        assert!(reused.map.bytes().iter().all(|byte| *byte == 0));
    }

    #[test]
    fn spares_follow_the_size_asked_for_and_stay_within_the_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let (pool, _) = BufferPool::load(dir.path(), 3, 1 << 20).unwrap();
        assert_eq!(pool.spare_to_make(), None, "none wanted");
        pool.want_spares(2, 4096);
        assert_eq!(pool.spare_to_make(), Some(4096));
        pool.make_spare(4096).unwrap();
        pool.make_spare(4096).unwrap();
        assert_eq!(pool.spare_to_make(), None, "two ready");
        // An open takes one ready (no buffer made on the open's time) and asks for another.
        let taken = pool.acquire(4096).unwrap();
        assert_eq!(pool.usage(), (1, 4096, 1));
        assert_eq!(pool.spare_to_make(), Some(4096));
        pool.make_spare(4096).unwrap();
        // Three buffers in all (one in use, two free): the count bound leaves no room.
        assert_eq!(
            pool.spare_to_make(),
            None,
            "spares never outgrow the pool's bound"
        );
        pool.release(taken);
        // Opens of another size move the spares to it, within the bound again.
        let other_dir = tempfile::tempdir().unwrap();
        let (pool, _) = BufferPool::load(other_dir.path(), 8, 24_000).unwrap();
        pool.want_spares(1, 4096);
        pool.make_spare(4096).unwrap();
        let other = pool.acquire(8192).unwrap();
        assert_eq!(pool.spare_to_make(), Some(8192));
        pool.make_spare(8192).unwrap();
        assert_eq!(
            pool.spare_to_make(),
            None,
            "8192 in use + 4096 + 8192 free: no room for another 8192 in 24000 bytes"
        );
        pool.release(other);
    }

    #[test]
    fn a_claim_is_trusted_only_whole() {
        use tailstream_wire::messages::ReplicaId;
        use tailstream_wire::{
            GroupId, LogId, ReplicaEpoch, SegmentId, ServerId, StreamId, StreamletId,
        };
        let meta = |capacity_bytes| ReplicaMeta {
            primary: ServerId::new(1, 1),
            replica: ReplicaId {
                stream: StreamId(1),
                streamlet: StreamletId(0),
                log: LogId(0),
                group: GroupId(0),
                segment: SegmentId(0),
            },
            epoch: ReplicaEpoch(1),
            filling: false,
            capacity_bytes,
            closed_bytes: None,
        };
        let dir = tempfile::tempdir().unwrap();
        let (pool, _) = BufferPool::load(dir.path(), 4, 1 << 20).unwrap();
        let mut buffers = Vec::new();
        for _ in 0..4 {
            buffers.push(pool.acquire(4096).unwrap());
        }
        // 0: a good claim; 1: a flipped byte; 2: a claim naming a larger buffer than exists;
        // 3: a length past the record.
        buffers[0].claim(Some(&meta(4096))).unwrap();
        buffers[1].claim(Some(&meta(4096))).unwrap();
        buffers[2].claim(Some(&meta(1 << 20))).unwrap();
        for buffer in &mut buffers {
            buffer.map.bytes_mut()[..4].copy_from_slice(b"data");
        }
        let claim = |i: usize| {
            dir.path()
                .join(&buffers[i].file_name)
                .with_extension("claim")
        };
        let mut raw = std::fs::read(claim(1)).unwrap();
        raw[20] ^= 0x01;
        std::fs::write(claim(1), raw).unwrap();
        let mut raw = std::fs::read(claim(3)).unwrap();
        raw[0..4].copy_from_slice(&(CLAIM_BYTES as u32).to_le_bytes());
        raw[4] = 1;
        std::fs::write(claim(3), raw).unwrap();
        let good = buffers[0].file_name.clone();
        drop(buffers);
        drop(pool);
        let (pool, claimed) = BufferPool::load(dir.path(), 4, 1 << 20).unwrap();
        let names: Vec<_> = claimed.iter().map(|(_, b)| b.file_name.clone()).collect();
        assert_eq!(names, vec![good], "only the intact claim comes back");
        // The others are free again, and zeroed.
        assert_eq!(pool.usage(), (1, 4096, 3));
        for _ in 0..3 {
            let free = pool.acquire(4096).unwrap();
            assert!(free.map.bytes().iter().all(|byte| *byte == 0));
        }
    }
}
