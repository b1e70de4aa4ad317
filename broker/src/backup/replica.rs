//! One replica on this backup: its identity and state ([`ReplicaMeta`]) and, while open, its
//! pool buffer.
//!
//! Nothing about a replica is kept in a file of its own while it is open: its metadata is the
//! claim of the pool buffer holding it (see `pool`). A closed replica is one segment file
//! whose name carries its metadata:
//! `<root>/<primary index>.<generation>/<stream>-<streamlet>-<log>-<group>-<segment>-e<epoch>[-filling].seg`
//! (its length is the closed length). Creating files is what a backup would otherwise spend
//! most of its time on, so a replica costs one file in its whole life.

use super::buffer::ReplicaBuffer;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use tailstream_wire::messages::ReplicaId;
use tailstream_wire::{GroupId, LogId, SegmentId, ServerId, StreamId, StreamletId};

/// Everything a backup knows about a replica besides its bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaMeta {
    pub primary: ServerId,
    pub replica: ReplicaId,
    pub epoch: u32,
    /// A replacement still being filled: never to be used for recovery.
    pub filling: bool,
    pub capacity_bytes: u32,
    /// Set when closed: the verified length of the segment file.
    pub closed_bytes: Option<u32>,
}

/// The directory of one primary incarnation's closed replicas.
pub fn primary_dir(root: &Path, primary: ServerId) -> PathBuf {
    root.join(format!("{}.{}", primary.index, primary.generation))
}

/// `<stream>-<streamlet>-<log>-<group>-<segment>-e<epoch>[-filling].seg`
pub fn segment_file_name(meta: &ReplicaMeta) -> String {
    let id = &meta.replica;
    let filling = if meta.filling { "-filling" } else { "" };
    format!(
        "{}-{}-{}-{}-{}-e{}{filling}.seg",
        id.stream.0, id.streamlet.0, id.log.0, id.group.0, id.segment.0, meta.epoch
    )
}

/// The inverse of `segment_file_name` (and of `primary_dir`'s name): `None` for anything else.
pub fn parse_segment_file(
    dir_name: &str,
    file_name: &str,
) -> Option<(ServerId, ReplicaId, u32, bool)> {
    let (index, generation) = dir_name.split_once('.')?;
    let primary = ServerId::new(index.parse().ok()?, generation.parse().ok()?);
    let stem = file_name.strip_suffix(".seg")?;
    let (stem, filling) = match stem.strip_suffix("-filling") {
        Some(stem) => (stem, true),
        None => (stem, false),
    };
    let mut fields = stem.split('-');
    let mut next = || fields.next()?.parse::<u64>().ok();
    let (stream, streamlet, log, group, segment) = (next()?, next()?, next()?, next()?, next()?);
    let epoch = fields.next()?.strip_prefix('e')?.parse().ok()?;
    if fields.next().is_some() {
        return None;
    }
    let replica = ReplicaId {
        stream: StreamId(stream),
        streamlet: StreamletId(u32::try_from(streamlet).ok()?),
        log: LogId(u32::try_from(log).ok()?),
        group: GroupId(group),
        segment: SegmentId(segment),
    };
    Some((primary, replica, epoch, filling))
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
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_file_names_round_trip() {
        for filling in [false, true] {
            let meta = ReplicaMeta {
                primary: ServerId::new(3, 7),
                replica: ReplicaId {
                    stream: StreamId(1),
                    streamlet: StreamletId(2),
                    log: LogId(3),
                    group: GroupId(4),
                    segment: SegmentId(5),
                },
                epoch: 6,
                filling,
                capacity_bytes: 100,
                closed_bytes: Some(100),
            };
            let name = segment_file_name(&meta);
            let parsed = parse_segment_file("3.7", &name).unwrap();
            assert_eq!(parsed, (meta.primary, meta.replica, 6, filling));
        }
        assert!(parse_segment_file("3.7", "1-2-3-4-5-e6.seg.tmp").is_none());
        assert!(parse_segment_file("x", "1-2-3-4-5-e6.seg").is_none());
        assert!(parse_segment_file("3.7", "1-2-3-4-e6.seg").is_none());
    }
}
