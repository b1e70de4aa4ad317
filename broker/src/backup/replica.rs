//! One replica on this backup: identity, metadata (persisted in a JSON sidecar next to the
//! data file), and the buffer while it is open.

use super::mapped::MappedBuffer;
use serde::{Deserialize, Serialize};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use tailstream_wire::ServerId;
use tailstream_wire::messages::ReplicaId;

/// What survives a backup restart about a replica, beside its bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sidecar {
    pub primary: ServerId,
    pub replica: ReplicaId,
    pub epoch: u32,
    pub filling: bool,
    pub capacity_bytes: u32,
    /// Set when closed: the verified length of the segment file.
    pub closed_bytes: Option<u32>,
}

impl Sidecar {
    /// Replaces the sidecar file atomically (write, fsync, rename).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension("json.tmp");
        let mut file = File::create(&tmp)?;
        file.write_all(&serde_json::to_vec(self).map_err(std::io::Error::other)?)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    pub fn load(path: &Path) -> std::io::Result<Self> {
        serde_json::from_slice(&fs::read(path)?).map_err(std::io::Error::other)
    }
}

/// Where a replica's files live:
/// `<root>/<primary index>.<generation>/<stream>-<streamlet>-<log>-<group>-<segment>-e<epoch>`
/// with `.seg` (the bytes) and `.json` (the sidecar). The epoch is the one it was opened with.
pub fn replica_paths(
    root: &Path,
    primary: ServerId,
    id: &ReplicaId,
    epoch: u32,
) -> (PathBuf, PathBuf) {
    let dir = root.join(format!("{}.{}", primary.index, primary.generation));
    let stem = format!(
        "{}-{}-{}-{}-{}-e{epoch}",
        id.stream.0, id.streamlet.0, id.log.0, id.group.0, id.segment.0
    );
    (
        dir.join(format!("{stem}.seg")),
        dir.join(format!("{stem}.json")),
    )
}

#[derive(Debug)]
pub struct Replica {
    pub primary: ServerId,
    pub id: ReplicaId,
    /// Names the buffer in writes; fresh for every open, never reused in a backup's life.
    pub key: u64,
    pub capacity_bytes: u32,
    pub data_path: PathBuf,
    pub sidecar_path: PathBuf,
    sidecar: Mutex<Sidecar>,
    /// The mapping while the replica is open; `None` once closed (closed replicas are read
    /// from their file when asked).
    pub buffer: tokio::sync::Mutex<Option<MappedBuffer>>,
}

impl Replica {
    pub fn new(
        key: u64,
        sidecar: Sidecar,
        data_path: PathBuf,
        sidecar_path: PathBuf,
        buffer: Option<MappedBuffer>,
    ) -> Self {
        Self {
            primary: sidecar.primary,
            id: sidecar.replica,
            key,
            capacity_bytes: sidecar.capacity_bytes,
            data_path,
            sidecar_path,
            sidecar: Mutex::new(sidecar),
            buffer: tokio::sync::Mutex::new(buffer),
        }
    }

    pub fn sidecar(&self) -> MutexGuard<'_, Sidecar> {
        self.sidecar.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_closed(&self) -> bool {
        self.sidecar().closed_bytes.is_some()
    }

    /// Applies `change` to the metadata and persists it.
    pub fn update(&self, change: impl FnOnce(&mut Sidecar)) -> std::io::Result<()> {
        let snapshot = {
            let mut sidecar = self.sidecar();
            change(&mut sidecar);
            sidecar.clone()
        };
        snapshot.save(&self.sidecar_path)
    }
}
