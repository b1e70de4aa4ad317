//! Committed offsets, durable: every commit is appended to the offsets file and fsynced
//! before it is answered (and before it is visible), and the file is read back at start,
//! up to its first damaged record. When the file has grown well past what it holds, it is
//! rewritten with one record per group and renamed over the old one.
//!
//! A commit whose write or fsync fails is cut back off the file before the error is
//! answered: otherwise its torn record would stay, later commits would be acknowledged after
//! it, and the next start would cut them off with it. When even that cut fails, the store
//! refuses every further commit until the coordinator restarts (and reads back what is
//! valid). A failed compaction leaves the old file in use; only a rename that may not be
//! durable stops the store.
//!
//! Blocking (file I/O): commits are called from the blocking pool, one at a time. Readers
//! (fetches, lag, metrics) run on async threads, the coordinator's control thread among them
//! (which answers broker heartbeats): they take only the map's lock, held for moments, never
//! the file's, which a commit holds across its fsync and a compaction's rewrite.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tailstream_wire::Status;
use tailstream_wire::messages::{CommittedOffset, OffsetsRecord, TopicPartition};
use tailstream_wire::offsets_file::{Records, encode_record};

const FILE_NAME: &str = "offsets.log";
/// Longest metadata string a commit may carry (Kafka's default is 4096 too).
pub const METADATA_BYTES_MAX: usize = 4096;
/// The file is compacted once it is this many times larger than one record per group would
/// be (and at least `COMPACT_BYTES_MIN`).
const COMPACT_RATIO: u64 = 4;
const COMPACT_BYTES_MIN: u64 = 1 << 20;

#[derive(Clone, Copy, Debug)]
pub struct OffsetLimits {
    pub groups_max: usize,
    pub partitions_per_group_max: usize,
}

/// One group's committed offsets: (topic, partition) → (offset, metadata).
pub type Committed = BTreeMap<(String, u32), (u64, String)>;

#[derive(Debug)]
struct Inner {
    file: File,
    file_bytes: u64,
    /// The file size at which to look at compacting next (looking costs a pass over every
    /// committed offset, so not on every commit).
    compact_at: u64,
    /// Why the file can no longer be trusted to end where `file_bytes` says (a failed write
    /// that could not be cut off, a compaction's rename that may not be durable): commits are
    /// refused from then on.
    broken: Option<String>,
    /// Test-only fault injection: what the next write or fsync does.
    #[cfg(test)]
    fault: Option<Fault>,
}

/// An injected disk fault (tests).
#[cfg(test)]
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// The next record write stores this many bytes, then fails (a torn write: ENOSPC).
    TearWrite(usize),
    /// The next fsync fails after the whole record was written.
    FailSync,
    /// The next write fails after a partial write, and cutting it off fails too.
    TearAndFailCut(usize),
}

impl Inner {
    /// Appends `record` and fsyncs it; on failure, cuts the file back to where it ended.
    fn append_durably(&mut self, record: &[u8]) -> Result<(), std::io::Error> {
        let written = self.write_and_sync(record);
        if let Err(error) = written {
            if let Err(cut) = self.cut_back() {
                let why = format!(
                    "a failed offsets write ({error}) could not be cut off the file ({cut})"
                );
                tracing::error!(%why, "group offset commits are refused until the coordinator restarts");
                self.broken = Some(why);
            }
            return Err(error);
        }
        self.file_bytes += record.len() as u64;
        Ok(())
    }

    fn write_and_sync(&mut self, record: &[u8]) -> Result<(), std::io::Error> {
        #[cfg(test)]
        match self.fault {
            Some(Fault::TearWrite(n) | Fault::TearAndFailCut(n)) => {
                self.file.write_all(&record[..n.min(record.len())])?;
                return Err(std::io::Error::other("injected torn write"));
            }
            Some(Fault::FailSync) => {
                self.fault = None;
                self.file.write_all(record)?;
                return Err(std::io::Error::other("injected fsync failure"));
            }
            None => {}
        }
        self.file.write_all(record)?;
        self.file.sync_data()
    }

    /// Truncates the file to its last good end, and positions appends there.
    fn cut_back(&mut self) -> Result<(), std::io::Error> {
        #[cfg(test)]
        if let Some(fault) = self.fault.take()
            && matches!(fault, Fault::TearAndFailCut(_))
        {
            return Err(std::io::Error::other("injected truncate failure"));
        }
        self.file.set_len(self.file_bytes)?;
        self.file.seek(SeekFrom::Start(self.file_bytes))?;
        self.file.sync_all()
    }
}

#[derive(Debug)]
pub struct OffsetStore {
    dir: PathBuf,
    limits: OffsetLimits,
    /// The file, held by commits only (across their write and fsync).
    inner: Mutex<Inner>,
    /// What the file holds, as commits applied it: locked for moments only.
    groups: Mutex<HashMap<String, Committed>>,
}

#[derive(Debug, thiserror::Error)]
pub enum OffsetError {
    #[error("{0}")]
    Refused(String, Status),
    #[error("offsets file: {0}")]
    Io(#[from] std::io::Error),
}

impl OffsetError {
    pub fn status(&self) -> Status {
        match self {
            OffsetError::Refused(_, status) => *status,
            OffsetError::Io(_) => Status::Internal,
        }
    }
}

impl OffsetStore {
    /// Opens (or creates) the store in `dir`: reads every valid record, and cuts off a
    /// damaged tail (a crash mid-append) so that appends continue after the valid prefix.
    pub fn open(dir: &Path, limits: OffsetLimits) -> Result<Self, std::io::Error> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(FILE_NAME);
        let created = !path.exists();
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let total = bytes.len();
        let mut records = Records::new(bytes.into());
        let mut groups: HashMap<String, Committed> = HashMap::new();
        for record in records.by_ref() {
            apply(&mut groups, record);
        }
        let valid = records.valid_len() as u64;
        if valid < total as u64 {
            tracing::warn!(
                file = %path.display(),
                valid,
                total,
                "offsets file has a damaged tail (a crash mid-append): cut off"
            );
            file.set_len(valid)?;
            file.sync_all()?;
        }
        file.seek(SeekFrom::Start(valid))?;
        if created {
            // The file's directory entry must be durable before a commit in it is answered.
            file.sync_all()?;
            sync_dir(dir)?;
        }
        Ok(Self {
            dir: dir.to_owned(),
            limits,
            inner: Mutex::new(Inner {
                file,
                file_bytes: valid,
                compact_at: COMPACT_BYTES_MIN,
                broken: None,
                #[cfg(test)]
                fault: None,
            }),
            groups: Mutex::new(groups),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, HashMap<String, Committed>> {
        self.groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Commits `offsets` of `group`: on disk (fsynced) when this returns `Ok`.
    pub fn commit(&self, group: &str, offsets: Vec<CommittedOffset>) -> Result<(), OffsetError> {
        let mut inner = self.lock();
        if let Some(why) = &inner.broken {
            return Err(OffsetError::Io(std::io::Error::other(format!(
                "offset commits are refused until the coordinator restarts: {why}"
            ))));
        }
        // Commits are the only writers of the map, and they hold the file: what is checked
        // here still holds once the record is on disk.
        check_commit(&self.groups(), &self.limits, group, &offsets)?;
        let record = OffsetsRecord {
            group: group.to_owned(),
            offsets,
            removed: Default::default(),
        };
        let encoded = encode_record(&record);
        inner.append_durably(&encoded)?;
        apply(&mut self.groups(), record);
        // The commit is durable now: a compaction that fails does not fail it.
        if let Err(error) = self.compact_if_due(&mut inner) {
            tracing::warn!(%error, "offsets file compaction failed; the file stays as it was");
        }
        Ok(())
    }

    /// Removes `group`'s offsets of `partitions` (all when `None`): on disk (fsynced) when
    /// this returns. How many were removed (0: nothing to remove, nothing written).
    pub fn remove(
        &self,
        group: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<usize, OffsetError> {
        let mut inner = self.lock();
        if let Some(why) = &inner.broken {
            return Err(OffsetError::Io(std::io::Error::other(format!(
                "offset changes are refused until the coordinator restarts: {why}"
            ))));
        }
        let removed = removal_of(&self.groups(), group, partitions);
        if removed.is_empty() {
            return Ok(0);
        }
        let count = removed.len();
        let record = OffsetsRecord {
            group: group.to_owned(),
            offsets: Vec::new(),
            removed: tailstream_wire::Appended(Some(removed)),
        };
        inner.append_durably(&encode_record(&record))?;
        apply(&mut self.groups(), record);
        Ok(count)
    }

    /// The committed offsets of `group` for `partitions` (all when `None`); partitions never
    /// committed are left out.
    pub fn fetch(
        &self,
        group: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Vec<CommittedOffset> {
        fetch_from(&self.groups(), group, partitions)
    }

    /// Rewrites the file as one record per group once it is `COMPACT_RATIO` times that.
    fn compact_if_due(&self, inner: &mut Inner) -> Result<(), std::io::Error> {
        if inner.file_bytes < inner.compact_at {
            return Ok(());
        }
        let records: Vec<_> = self
            .groups()
            .iter()
            .map(|(group, committed)| {
                encode_record(&OffsetsRecord {
                    group: group.clone(),
                    offsets: as_committed_offsets(committed),
                    removed: Default::default(),
                })
            })
            .collect();
        let live: u64 = records.iter().map(|r| r.len() as u64).sum();
        inner.compact_at = COMPACT_BYTES_MIN.max(live.saturating_mul(COMPACT_RATIO));
        if inner.file_bytes < inner.compact_at {
            return Ok(());
        }
        let path = self.dir.join(FILE_NAME);
        let tmp = path.with_extension("log.tmp");
        let written = (|| {
            let mut fresh = File::create(&tmp)?;
            for record in &records {
                fresh.write_all(record)?;
            }
            fresh.sync_all()?;
            Ok::<_, std::io::Error>(fresh)
        })();
        let fresh = match written.and_then(|fresh| std::fs::rename(&tmp, &path).map(|()| fresh)) {
            Ok(fresh) => fresh,
            Err(error) => {
                // The old file is untouched and still the one appended to.
                let _ = std::fs::remove_file(&tmp);
                return Err(error);
            }
        };
        // The handle that wrote the compacted file is the file at `path` now: appends go on
        // through it, positioned at its end.
        inner.file = fresh;
        inner.file_bytes = live;
        if let Err(error) = sync_dir(&self.dir) {
            // The rename may not survive a crash, and appends now go to the new file: what
            // they add could vanish with it.
            inner.broken = Some(format!(
                "the compacted offsets file's rename could not be made durable ({error})"
            ));
            return Err(error);
        }
        tracing::info!(
            bytes = live,
            groups = records.len(),
            "offsets file compacted"
        );
        Ok(())
    }

    /// Every group's committed offsets, by group name.
    pub fn snapshot(&self) -> Vec<(String, Vec<CommittedOffset>)> {
        snapshot_of(&self.groups())
    }

    /// Groups with committed offsets.
    pub fn group_count(&self) -> usize {
        self.groups().len()
    }
}

/// Where committed offsets are kept: this file, or etcd ([`super::etcd_offsets`]). Blocking
/// (called from the blocking pool); a commit is durable when `commit` returns `Ok`.
pub trait CommittedOffsets: Send + Sync + std::fmt::Debug + 'static {
    fn commit(&self, group: &str, offsets: Vec<CommittedOffset>) -> Result<(), OffsetError>;
    /// The committed offsets of `group` for `partitions` (all when `None`); partitions never
    /// committed are left out.
    fn fetch(&self, group: &str, partitions: Option<&[TopicPartition]>) -> Vec<CommittedOffset>;
    /// Every group's committed offsets, by group name.
    fn snapshot(&self) -> Vec<(String, Vec<CommittedOffset>)>;
    fn group_count(&self) -> usize;
    /// Whether `group` has committed offsets.
    fn has_group(&self, group: &str) -> bool;
    /// The groups with committed offsets.
    fn group_names(&self) -> Vec<String>;
    /// Removes `group`'s offsets of `partitions` (all when `None`), durably; how many.
    fn remove(
        &self,
        group: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<usize, OffsetError>;
}

impl CommittedOffsets for OffsetStore {
    fn commit(&self, group: &str, offsets: Vec<CommittedOffset>) -> Result<(), OffsetError> {
        OffsetStore::commit(self, group, offsets)
    }
    fn fetch(&self, group: &str, partitions: Option<&[TopicPartition]>) -> Vec<CommittedOffset> {
        OffsetStore::fetch(self, group, partitions)
    }
    fn snapshot(&self) -> Vec<(String, Vec<CommittedOffset>)> {
        OffsetStore::snapshot(self)
    }
    fn group_count(&self) -> usize {
        OffsetStore::group_count(self)
    }
    fn has_group(&self, group: &str) -> bool {
        self.groups().contains_key(group)
    }
    fn group_names(&self) -> Vec<String> {
        self.groups().keys().cloned().collect()
    }
    fn remove(
        &self,
        group: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<usize, OffsetError> {
        OffsetStore::remove(self, group, partitions)
    }
}

/// The committed offsets of `group` in `groups` for `partitions` (all when `None`);
/// partitions never committed are left out. Both stores answer fetches with it.
pub fn fetch_from(
    groups: &HashMap<String, Committed>,
    group: &str,
    partitions: Option<&[TopicPartition]>,
) -> Vec<CommittedOffset> {
    let Some(committed) = groups.get(group) else {
        return Vec::new();
    };
    match partitions {
        None => as_committed_offsets(committed),
        Some(wanted) => wanted
            .iter()
            .filter_map(|p| {
                let key = (p.topic.clone(), p.partition);
                committed.get(&key).map(|v| committed_offset(&key, v))
            })
            .collect(),
    }
}

/// Every group's committed offsets in `groups`, by group name.
pub fn snapshot_of(groups: &HashMap<String, Committed>) -> Vec<(String, Vec<CommittedOffset>)> {
    let mut all: Vec<_> = groups
        .iter()
        .map(|(group, committed)| (group.clone(), as_committed_offsets(committed)))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

/// Refuses a commit that breaks the limits: metadata too long, too many groups, too many
/// partitions in the group.
pub fn check_commit(
    groups: &HashMap<String, Committed>,
    limits: &OffsetLimits,
    group: &str,
    offsets: &[CommittedOffset],
) -> Result<(), OffsetError> {
    if let Some(long) = offsets
        .iter()
        .find(|o| o.metadata.len() > METADATA_BYTES_MAX)
    {
        return Err(OffsetError::Refused(
            format!(
                "offset metadata of {} bytes (at most {METADATA_BYTES_MAX})",
                long.metadata.len()
            ),
            Status::InvalidArgument,
        ));
    }
    let known = groups.get(group);
    if known.is_none() && groups.len() >= limits.groups_max {
        return Err(OffsetError::Refused(
            format!("{} groups have committed offsets already", groups.len()),
            Status::GroupFull,
        ));
    }
    let new_partitions = offsets
        .iter()
        .filter(|o| known.is_none_or(|k| !k.contains_key(&(o.topic.clone(), o.partition))))
        .count();
    if known.map_or(0, BTreeMap::len) + new_partitions > limits.partitions_per_group_max {
        return Err(OffsetError::Refused(
            format!(
                "group {group:?} would commit more than {} partitions",
                limits.partitions_per_group_max
            ),
            Status::GroupFull,
        ));
    }
    Ok(())
}

/// One group's offsets as the wire and the offsets file carry them.
fn as_committed_offsets(committed: &Committed) -> Vec<CommittedOffset> {
    committed
        .iter()
        .map(|(key, value)| committed_offset(key, value))
        .collect()
}

/// One partition's committed offset from the store's (topic, partition) → (offset, metadata).
fn committed_offset(
    (topic, partition): &(String, u32),
    (offset, metadata): &(u64, String),
) -> CommittedOffset {
    CommittedOffset {
        topic: topic.clone(),
        partition: *partition,
        offset: *offset,
        metadata: metadata.clone(),
    }
}

/// Makes `dir`'s entries (a created or renamed file) durable.
fn sync_dir(dir: &Path) -> Result<(), std::io::Error> {
    File::open(dir)?.sync_all()
}

pub fn apply(groups: &mut HashMap<String, Committed>, record: OffsetsRecord) {
    let committed = groups.entry(record.group.clone()).or_default();
    for offset in record.offsets {
        committed.insert(
            (offset.topic, offset.partition),
            (offset.offset, offset.metadata),
        );
    }
    for gone in record.removed.0.into_iter().flatten() {
        committed.remove(&(gone.topic, gone.partition));
    }
    if committed.is_empty() {
        groups.remove(&record.group);
    }
}

/// The partitions of `group` that a removal of `partitions` (every one when `None`) takes
/// away: those it has offsets for.
pub fn removal_of(
    groups: &HashMap<String, Committed>,
    group: &str,
    partitions: Option<&[TopicPartition]>,
) -> Vec<TopicPartition> {
    let Some(committed) = groups.get(group) else {
        return Vec::new();
    };
    let mut removed: Vec<TopicPartition> = committed
        .keys()
        .filter(|(topic, partition)| {
            partitions.is_none_or(|wanted| {
                wanted
                    .iter()
                    .any(|w| &w.topic == topic && w.partition == *partition)
            })
        })
        .map(|(topic, partition)| TopicPartition {
            topic: topic.clone(),
            partition: *partition,
        })
        .collect();
    removed.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> OffsetLimits {
        OffsetLimits {
            groups_max: 4,
            partitions_per_group_max: 8,
        }
    }

    fn offset(topic: &str, partition: u32, offset: u64) -> CommittedOffset {
        CommittedOffset {
            topic: topic.into(),
            partition,
            offset,
            metadata: format!("m{offset}"),
        }
    }

    #[test]
    fn commits_survive_a_reopen_and_a_torn_tail_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let store = OffsetStore::open(dir.path(), limits()).unwrap();
        store
            .commit("g", vec![offset("t", 0, 5), offset("t", 1, 7)])
            .unwrap();
        store.commit("g", vec![offset("t", 0, 9)]).unwrap();
        store.commit("h", vec![offset("u", 3, 1)]).unwrap();
        drop(store);
        // A crash mid-append leaves half a record behind.
        let path = dir.path().join(FILE_NAME);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(
            &encode_record(&OffsetsRecord {
                group: "g".into(),
                offsets: vec![offset("t", 0, 99)],
                removed: Default::default(),
            })[..10],
        )
        .unwrap();
        drop(file);
        let store = OffsetStore::open(dir.path(), limits()).unwrap();
        assert_eq!(
            store.fetch("g", None),
            vec![offset("t", 0, 9), offset("t", 1, 7)]
        );
        let wanted = [
            TopicPartition {
                topic: "t".into(),
                partition: 1,
            },
            TopicPartition {
                topic: "t".into(),
                partition: 2,
            },
        ];
        assert_eq!(store.fetch("g", Some(&wanted)), vec![offset("t", 1, 7)]);
        // Appends continue after the valid prefix.
        store.commit("g", vec![offset("t", 2, 3)]).unwrap();
        drop(store);
        let store = OffsetStore::open(dir.path(), limits()).unwrap();
        assert_eq!(store.fetch("g", None).len(), 3);
        assert_eq!(store.fetch("nobody", None), vec![]);
    }

    #[test]
    fn removed_offsets_and_groups_stay_removed_after_a_reopen_and_free_their_place() {
        let dir = tempfile::tempdir().unwrap();
        let store = OffsetStore::open(dir.path(), limits()).unwrap();
        store
            .commit("g", vec![offset("t", 0, 5), offset("t", 1, 7)])
            .unwrap();
        store.commit("h", vec![offset("u", 3, 1)]).unwrap();
        let first = [TopicPartition {
            topic: "t".into(),
            partition: 0,
        }];
        assert_eq!(store.remove("g", Some(&first)).unwrap(), 1);
        assert_eq!(
            store.remove("g", Some(&first)).unwrap(),
            0,
            "nothing left to remove"
        );
        assert_eq!(store.remove("h", None).unwrap(), 1);
        assert_eq!(store.remove("nobody", None).unwrap(), 0);
        drop(store);
        let store = OffsetStore::open(dir.path(), limits()).unwrap();
        assert_eq!(store.fetch("g", None), vec![offset("t", 1, 7)]);
        assert!(store.fetch("h", None).is_empty());
        assert_eq!(
            store.group_count(),
            1,
            "a group left with no offsets is gone"
        );
        // Its place counts again towards groups_max (4).
        for group in ["a", "b", "c"] {
            store.commit(group, vec![offset("t", 0, 1)]).unwrap();
        }
    }

    #[test]
    fn groups_partitions_and_metadata_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let store = OffsetStore::open(dir.path(), limits()).unwrap();
        for g in 0..4 {
            store
                .commit(&format!("g{g}"), vec![offset("t", 0, 1)])
                .unwrap();
        }
        assert_eq!(
            store
                .commit("g9", vec![offset("t", 0, 1)])
                .unwrap_err()
                .status(),
            Status::GroupFull
        );
        let many: Vec<_> = (0..9).map(|p| offset("t", p, 1)).collect();
        assert_eq!(
            store.commit("g0", many).unwrap_err().status(),
            Status::GroupFull
        );
        let mut long = offset("t", 0, 1);
        long.metadata = "x".repeat(METADATA_BYTES_MAX + 1);
        assert_eq!(
            store.commit("g0", vec![long]).unwrap_err().status(),
            Status::InvalidArgument
        );
    }

    /// Issue 21, finding 6: a commit that failed mid-write used to leave its torn record in
    /// the file; the next commits were acknowledged after it and cut off with it at the next
    /// start.
    #[test]
    fn a_failed_commit_is_cut_off_so_later_acknowledged_commits_survive_a_restart() {
        for fault in [Fault::TearWrite(10), Fault::FailSync] {
            let dir = tempfile::tempdir().unwrap();
            let store = OffsetStore::open(dir.path(), limits()).unwrap();
            store.commit("g", vec![offset("t", 0, 1)]).unwrap();
            store.lock().fault = Some(fault);
            assert_eq!(
                store
                    .commit("g", vec![offset("t", 0, 2)])
                    .unwrap_err()
                    .status(),
                Status::Internal,
                "{fault:?}"
            );
            store.commit("g", vec![offset("t", 1, 3)]).unwrap();
            drop(store);
            let store = OffsetStore::open(dir.path(), limits()).unwrap();
            assert_eq!(
                store.fetch("g", None),
                vec![offset("t", 0, 1), offset("t", 1, 3)],
                "{fault:?}: the failed commit is gone, the acknowledged ones are not"
            );
        }
    }

    #[test]
    fn a_failed_commit_that_cannot_be_cut_off_stops_further_commits() {
        let dir = tempfile::tempdir().unwrap();
        let store = OffsetStore::open(dir.path(), limits()).unwrap();
        store.commit("g", vec![offset("t", 0, 1)]).unwrap();
        store.lock().fault = Some(Fault::TearAndFailCut(10));
        assert!(store.commit("g", vec![offset("t", 0, 2)]).is_err());
        let refused = store.commit("g", vec![offset("t", 0, 3)]).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("until the coordinator restarts"),
            "{refused}"
        );
        // Nothing acknowledged was lost: a restart reads back what is valid and goes on.
        drop(store);
        let store = OffsetStore::open(dir.path(), limits()).unwrap();
        assert_eq!(store.fetch("g", None), vec![offset("t", 0, 1)]);
        store.commit("g", vec![offset("t", 0, 4)]).unwrap();
    }

    #[test]
    fn a_file_grown_past_what_it_holds_is_compacted_and_reads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let store = OffsetStore::open(dir.path(), limits()).unwrap();
        let big = "m".repeat(4000);
        for i in 0..400u64 {
            let mut o = offset("t", (i % 4) as u32, i);
            o.metadata = big.clone();
            store.commit("g", vec![o]).unwrap();
        }
        let size = std::fs::metadata(dir.path().join(FILE_NAME)).unwrap().len();
        assert!(size < COMPACT_BYTES_MIN + 8192, "compacted: {size} bytes");
        let before = store.fetch("g", None);
        drop(store);
        let store = OffsetStore::open(dir.path(), limits()).unwrap();
        assert_eq!(store.fetch("g", None), before);
        assert_eq!(before[3].offset, 399);
    }
}
