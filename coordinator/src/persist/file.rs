//! [`MetadataFile`], the embedded default store: a snapshot and a journal on local disk.
//!
//! - `metadata.json`, the **snapshot**: the whole metadata, replaced atomically (written to a
//!   temporary file, fsynced, renamed over the old one, directory fsynced), so after a crash it
//!   is either the old or the new one, never a mix.
//! - `metadata.journal`: the writes of every change since that snapshot
//!   ([`tailstream_wire::metadata_journal`]),
//!   each appended and fsynced before the save returns. A change costs what it changes (one
//!   stream's objects for a create), not a rewrite of every stream: at 20,000 streams the
//!   snapshot is megabytes, a create's record a few hundred bytes.
//! - **Compaction**: once the journal outgrows the snapshot (and at least
//!   [`JOURNAL_BYTES_MIN`]), the next save writes a new snapshot and then a fresh journal
//!   naming it. A crash between the two leaves the old journal, which names the old snapshot
//!   and is therefore ignored: its changes are in the new one. Rewrites thus cost a constant
//!   amount per change, amortised.
//!
//! Loading replays the journal over the snapshot (through the same one-key-per-object layout
//! the etcd store uses) and cuts a torn last record; damage a crash cannot leave (a bad
//! header, a bad record with more after it, a journal without its snapshot) stops the load
//! instead of dropping acknowledged changes. An older Tailstream reads the snapshot alone: do
//! not downgrade a coordinator across this change without compacting first. Saves block; the service runs them on the
//! blocking pool, never on a connection's reader task.

use super::MetadataStore;
use super::layout;
use crate::metadata::Metadata;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tailstream_wire::metadata_journal::{self as journal, JournalOp, SnapshotId, Tail};

const FILE_NAME: &str = "metadata.json";
const JOURNAL_NAME: &str = "metadata.journal";
/// The journal is compacted into a new snapshot only past this size (and the snapshot's).
pub const JOURNAL_BYTES_MIN: u64 = 1 << 20;

#[derive(Debug)]
pub struct MetadataFile {
    dir: PathBuf,
    /// Loads only: opens nothing for writing, cuts nothing (`coordinator migrate` reads a
    /// store this way, possibly a copy, possibly one a coordinator still runs on).
    read_only: bool,
    journal: Mutex<JournalState>,
}

/// The journal as this process last left it.
#[derive(Debug, Default)]
struct JournalState {
    /// Open for appending, at its valid end, following the current snapshot; `None`: the next
    /// save writes a snapshot (nothing loaded yet, or an append failed part-way).
    file: Option<File>,
    journal_bytes: u64,
    snapshot_bytes: u64,
    /// What the files hold now: a save whose `previous` is anything else (a change whose
    /// caller went away after its save) writes a whole snapshot rather than a diff against
    /// state that is not on disk.
    last: Option<Metadata>,
}

impl MetadataFile {
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            read_only: false,
            journal: Mutex::new(JournalState::default()),
        }
    }

    /// A store that is only loaded (see `read_only`).
    pub fn read_only(dir: &Path) -> Self {
        Self {
            read_only: true,
            ..Self::new(dir)
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    pub fn journal_path(&self) -> PathBuf {
        self.dir.join(JOURNAL_NAME)
    }

    fn io(&self, what: &str, e: std::io::Error) -> String {
        format!("{what} in {}: {e}", self.dir.display())
    }

    /// Replaces `name` with `bytes` atomically and durably.
    fn replace(&self, name: &str, bytes: &[u8]) -> Result<(), String> {
        fs::create_dir_all(&self.dir).map_err(|e| self.io("creating data dir", e))?;
        let tmp = self.dir.join(format!("{name}.tmp"));
        let mut file = File::create(&tmp).map_err(|e| self.io("creating temp file", e))?;
        file.write_all(bytes)
            .map_err(|e| self.io("writing metadata", e))?;
        file.sync_all()
            .map_err(|e| self.io("syncing metadata", e))?;
        fs::rename(&tmp, self.dir.join(name)).map_err(|e| self.io("renaming metadata", e))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| self.io("syncing data dir", e))
    }

    /// Writes `metadata` as the new snapshot and starts an empty journal that follows it.
    fn compact(&self, state: &mut JournalState, metadata: &Metadata) -> Result<(), String> {
        *state = JournalState::default();
        let snapshot = serde_json::to_vec_pretty(metadata).map_err(|e| e.to_string())?;
        self.replace(FILE_NAME, &snapshot)?;
        self.replace(
            JOURNAL_NAME,
            &journal::encode_header(SnapshotId::of(&snapshot)),
        )?;
        self.open_journal(state, journal::HEADER_BYTES as u64, snapshot.len() as u64)?;
        state.last = Some(metadata.clone());
        Ok(())
    }

    /// Opens the journal for appending at `valid_bytes` (cutting anything after it).
    fn open_journal(
        &self,
        state: &mut JournalState,
        valid_bytes: u64,
        snapshot_bytes: u64,
    ) -> Result<(), String> {
        let file = OpenOptions::new()
            .write(true)
            .open(self.journal_path())
            .map_err(|e| self.io("opening the journal", e))?;
        file.set_len(valid_bytes)
            .map_err(|e| self.io("cutting the journal's torn tail", e))?;
        let mut file = file;
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(valid_bytes))
            .map_err(|e| self.io("seeking the journal", e))?;
        *state = JournalState {
            file: Some(file),
            journal_bytes: valid_bytes,
            snapshot_bytes,
            last: None,
        };
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, JournalState> {
        self.journal.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The snapshot's metadata with `records` applied, through the key layout.
fn replay(snapshot: &Metadata, records: Vec<Vec<JournalOp>>) -> Result<Metadata, String> {
    let mut listing = BTreeMap::new();
    layout::apply(
        &mut listing,
        &layout::changes(&Metadata::default(), snapshot)?,
    );
    for ops in records {
        let ops: Vec<layout::Op> = ops
            .into_iter()
            .map(|op| match op {
                JournalOp::Put { key, value } => layout::Op::Put { key, value },
                JournalOp::Delete { key } => layout::Op::Delete { key },
            })
            .collect();
        layout::apply(&mut listing, &ops);
    }
    layout::read(&listing)
}

/// A change's writes as the journal holds them.
fn journal_ops(ops: Vec<layout::Op>) -> Vec<JournalOp> {
    ops.into_iter()
        .map(|op| match op {
            layout::Op::Put { key, value } => JournalOp::Put { key, value },
            layout::Op::Delete { key } => JournalOp::Delete { key },
        })
        .collect()
}

impl MetadataStore for MetadataFile {
    fn describe(&self) -> String {
        self.path().display().to_string()
    }

    fn load(&self) -> Result<Metadata, String> {
        // Held throughout: a save on this instance never interleaves with reading the files.
        let mut state = self.lock();
        let path = self.path();
        let journal_path = self.journal_path();
        let invalid =
            |e: String| format!("{} is not valid coordinator metadata: {e}", path.display());
        let read = |path: &Path| match fs::read(path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("reading {}: {e}", path.display())),
        };
        let (snapshot_bytes, journal_bytes) = (read(&path)?, read(&journal_path)?);
        let Some(snapshot_bytes) = snapshot_bytes else {
            if journal_bytes.is_some() {
                // A journal is only ever made after its snapshot: this one's is gone.
                return Err(format!(
                    "{} exists but {} does not: refusing to start from an empty cluster",
                    journal_path.display(),
                    path.display()
                ));
            }
            *state = JournalState {
                last: Some(Metadata::default()),
                ..JournalState::default()
            };
            return Ok(Metadata::default());
        };
        let snapshot: Metadata =
            serde_json::from_slice(&snapshot_bytes).map_err(|e| invalid(e.to_string()))?;
        let mut metadata = snapshot;
        *state = JournalState::default();
        if let Some(journal_bytes) = journal_bytes {
            let Some(follows) = journal::decode_header(&journal_bytes) else {
                // Journals are created whole (written, fsynced, renamed): a bad header is
                // damage, and what follows it may hold acknowledged changes.
                return Err(format!(
                    "{} has a damaged header: refusing to start without its changes",
                    journal_path.display()
                ));
            };
            if follows == SnapshotId::of(&snapshot_bytes) {
                let (records, valid_bytes, tail) = journal::decode_records(&journal_bytes);
                match tail {
                    Tail::Clean => {}
                    Tail::Torn => tracing::warn!(
                        cut_bytes = journal_bytes.len() - valid_bytes,
                        "the metadata journal ends in a torn record (a crash during a save that was never acknowledged): cut"
                    ),
                    Tail::Damaged => {
                        return Err(format!(
                            "{} is damaged at byte {valid_bytes}, with more after it: refusing to \
                             drop the changes that follow (move it aside to start from {} alone)",
                            journal_path.display(),
                            path.display()
                        ));
                    }
                }
                if !records.is_empty() {
                    metadata = replay(&metadata, records).map_err(invalid)?;
                }
                if !self.read_only {
                    let snapshot_len = snapshot_bytes.len() as u64;
                    self.open_journal(&mut state, valid_bytes as u64, snapshot_len)?;
                }
            } else {
                // Left by a compaction that wrote its snapshot and died before replacing the
                // journal: the snapshot holds all of it. The next save starts a fresh one.
                tracing::warn!(
                    "the metadata journal follows an older snapshot (an interrupted compaction): ignored"
                );
            }
        }
        metadata.validate().map_err(invalid)?;
        metadata.upgrade_streams();
        state.last = Some(metadata.clone());
        Ok(metadata)
    }

    fn save(&self, previous: &Metadata, next: &Metadata) -> Result<(), String> {
        if self.read_only {
            return Err(format!("{} was opened to be read only", self.dir.display()));
        }
        let mut state = self.lock();
        let outgrown = state.journal_bytes > state.snapshot_bytes.max(JOURNAL_BYTES_MIN);
        let on_disk = state.last.as_ref() == Some(previous);
        if outgrown || !on_disk || state.file.is_none() {
            return self.compact(&mut state, next);
        }
        let ops = journal_ops(layout::changes(previous, next)?);
        if ops.is_empty() {
            state.last = Some(next.clone());
            return Ok(());
        }
        let record = journal::encode_record(&ops);
        if record.len() > journal::RECORD_BYTES_MAX {
            return self.compact(&mut state, next);
        }
        let valid_bytes = state.journal_bytes;
        let Some(file) = state.file.as_mut() else {
            return self.compact(&mut state, next);
        };
        match file.write_all(&record).and_then(|()| file.sync_data()) {
            Ok(()) => {
                state.journal_bytes += record.len() as u64;
                state.last = Some(next.clone());
                Ok(())
            }
            Err(e) => {
                // The change failed: take back whatever of it reached the file, so a restart
                // cannot bring it back; append nothing more either way (the next save writes a
                // whole snapshot).
                let _ = file.set_len(valid_bytes).and_then(|()| file.sync_data());
                *state = JournalState::default();
                Err(self.io("appending to the metadata journal", e))
            }
        }
    }
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
