//! One replica on this backup: its identity and state ([`ReplicaMeta`]) and, while open, its
//! pool buffer.
//!
//! Nothing about a replica is kept in a file of its own while it is open: its metadata is the
//! claim of the pool buffer holding it (see `pool`). A closed replica is one segment file
//! whose name carries its metadata:
//! `<root>/<primary index>.<generation>/<stream>-<streamlet>-<log>-<group>-<segment>-e<epoch>[-filling].seg`
//! (its length is the closed length). Creating files is what a backup would otherwise spend
//! most of its time on, so a replica costs one file in its whole life. Both formats are
//! defined in `tailstream_wire::replica_files`.

use super::buffer::ReplicaBuffer;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use tailstream_wire::ServerId;
use tailstream_wire::messages::ReplicaId;
pub use tailstream_wire::replica_files::{
    ReplicaMeta, parse_segment_file, primary_dir_name, segment_file_name,
};

/// The directory of one primary incarnation's closed replicas.
pub fn primary_dir(root: &Path, primary: ServerId) -> PathBuf {
    root.join(primary_dir_name(primary))
}

#[derive(Debug)]
pub struct Replica {
    pub primary: ServerId,
    pub id: ReplicaId,
    /// Names the buffer in writes; fresh for every open, never reused in a backup's life.
    pub key: u64,
    pub capacity_bytes: u32,
    dir: PathBuf,
    meta: Mutex<ReplicaMeta>,
    /// The pool buffer while the replica is open; `None` once closed (closed replicas are read
    /// from their segment file when asked).
    pub buffer: tokio::sync::Mutex<Option<ReplicaBuffer>>,
    /// A closed replica's file as last verified whole: (valid length, log digest bytes).
    /// Closed files never change, so `ListReplicas` answers from this instead of reading every
    /// file again each time; reads still verify, and a read that finds corruption clears it.
    verified: Mutex<Option<(u32, bytes::Bytes)>>,
}

impl Replica {
    pub fn new(key: u64, root: &Path, meta: ReplicaMeta, buffer: Option<ReplicaBuffer>) -> Self {
        Self {
            primary: meta.primary,
            id: meta.replica,
            key,
            capacity_bytes: meta.capacity_bytes,
            dir: primary_dir(root, meta.primary),
            meta: Mutex::new(meta),
            buffer: tokio::sync::Mutex::new(buffer),
            verified: Mutex::new(None),
        }
    }

    /// What the closed file was last verified to hold, if it was.
    pub fn verified(&self) -> Option<(u32, bytes::Bytes)> {
        self.verified
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records (or, with `None`, forgets) what the closed file was verified to hold.
    pub fn set_verified(&self, verified: Option<(u32, bytes::Bytes)>) {
        *self.verified.lock().unwrap_or_else(|p| p.into_inner()) = verified;
    }

    pub fn meta(&self) -> MutexGuard<'_, ReplicaMeta> {
        self.meta.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_closed(&self) -> bool {
        self.meta().closed_bytes.is_some()
    }

    /// Where the replica's segment file is (once closed), named after its current metadata.
    pub fn segment_path(&self) -> PathBuf {
        self.dir.join(segment_file_name(&self.meta()))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
