//! A rebuild's reads driven by scripted backups through the backup stub, no processes:
//! holders that answer short, empty, refused, or in pieces. Bytes come from the first holder
//! that serves the whole valid length; when none does, the failure blames the replicas (the
//! coordinator plans again), naming every holder and why.

use super::{RecoveryError, read_segment};
use async_trait::async_trait;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Mutex;
use tailstream_stubs::{BackupApi, RebuildFault, StubError};
use tailstream_wire::messages::{
    ListReplicasRequest, ListReplicasResponse, ReadReplicaRequest, ReadReplicaResponse,
    ReplicaAdoptRequest, ReplicaHolder, ReplicaId, SegmentSource,
};
use tailstream_wire::{
    GroupId, LogId, ReplicaEpoch, SegmentId, ServerId, Status, StreamId, StreamletId,
};

/// How a scripted holder answers a read.
#[derive(Clone, Debug)]
enum Holds {
    /// These bytes as its valid prefix, at most `piece` bytes per answer.
    Bytes {
        bytes: Bytes,
        piece: usize,
    },
    /// Claims `valid_bytes` but sends nothing.
    Nothing {
        valid_bytes: u32,
    },
    Refuses(Status),
}

#[derive(Debug, Default)]
struct ScriptedBackups {
    holders: HashMap<String, Holds>,
    reads: Mutex<Vec<String>>,
}

#[async_trait]
impl BackupApi for ScriptedBackups {
    async fn list(
        &self,
        _: &str,
        _: &ListReplicasRequest,
    ) -> Result<ListReplicasResponse, StubError> {
        Err(StubError::Fatal("a rebuild never lists".into()))
    }

    async fn read(
        &self,
        addr: &str,
        request: &ReadReplicaRequest,
    ) -> Result<ReadReplicaResponse, StubError> {
        self.reads.lock().unwrap().push(addr.to_string());
        match self.holders.get(addr) {
            Some(Holds::Bytes { bytes, piece }) => {
                let from = (request.offset as usize).min(bytes.len());
                let to = (from + (*piece).min(request.max_bytes as usize)).min(bytes.len());
                Ok(ReadReplicaResponse {
                    valid_bytes: bytes.len() as u32,
                    bytes: bytes.slice(from..to),
                })
            }
            Some(Holds::Nothing { valid_bytes }) => Ok(ReadReplicaResponse {
                valid_bytes: *valid_bytes,
                bytes: Bytes::new(),
            }),
            Some(Holds::Refuses(status)) => Err(StubError::refused(*status, "scripted")),
            None => Err(StubError::Retry {
                addr: addr.into(),
                reason: "not scripted".into(),
            }),
        }
    }

    async fn adopt(&self, _: &str, _: &ReplicaAdoptRequest) -> Result<(), StubError> {
        Err(StubError::Fatal("not scripted".into()))
    }
}

fn id() -> ReplicaId {
    ReplicaId {
        stream: StreamId(1),
        streamlet: StreamletId(0),
        log: LogId(0),
        group: GroupId(0),
        segment: SegmentId(3),
    }
}

fn source(length: u32, holders: &[&str]) -> SegmentSource {
    SegmentSource {
        group: GroupId(0),
        segment: SegmentId(3),
        epoch: ReplicaEpoch(2),
        length,
        closed: true,
        holders: holders
            .iter()
            .enumerate()
            .map(|(i, addr)| ReplicaHolder {
                backup: ServerId::new(i as u32 + 1, 1),
                peer_addr: addr.to_string(),
                primary: ServerId::new(0, 1),
            })
            .collect(),
    }
}

fn backups(holders: &[(&str, Holds)]) -> ScriptedBackups {
    ScriptedBackups {
        holders: holders
            .iter()
            .map(|(addr, holds)| (addr.to_string(), holds.clone()))
            .collect(),
        reads: Mutex::default(),
    }
}

#[tokio::test]
async fn holders_that_answer_short_empty_or_refused_are_passed_over_for_a_whole_copy() {
    let whole = Bytes::from_static(b"0123456789abcdef");
    let scripted = backups(&[
        (
            "short",
            Holds::Bytes {
                bytes: whole.slice(..10),
                piece: 64,
            },
        ),
        ("empty", Holds::Nothing { valid_bytes: 16 }),
        ("gone", Holds::Refuses(Status::UnknownReplica)),
        (
            "good",
            Holds::Bytes {
                bytes: whole.clone(),
                piece: 5,
            },
        ),
    ]);
    let read = read_segment(
        &scripted,
        id(),
        &source(16, &["short", "empty", "gone", "good"]),
    )
    .await
    .unwrap();
    assert_eq!(read, whole, "reassembled from 5-byte answers");
    let reads = scripted.reads.lock().unwrap().clone();
    assert_eq!(reads.iter().filter(|a| *a == "good").count(), 4);
}

#[tokio::test]
async fn no_whole_copy_blames_the_replicas_when_every_holder_answered() {
    let scripted = backups(&[
        (
            "short",
            Holds::Bytes {
                bytes: Bytes::from_static(b"0123"),
                piece: 64,
            },
        ),
        ("corrupt", Holds::Refuses(Status::ReplicaCorrupt)),
    ]);
    let error = read_segment(&scripted, id(), &source(16, &["short", "corrupt"]))
        .await
        .unwrap_err();
    assert!(matches!(error, RecoveryError::Replicas(_)), "{error:?}");
    for named in ["holds 4 valid bytes, 16 are needed", "ReplicaCorrupt"] {
        assert!(error.to_string().contains(named), "{error}");
    }
    assert_eq!(error.fault(), RebuildFault::Replicas);
    // The coordinator reads the fault back from the status the peer listener answers with.
    assert_eq!(
        RebuildFault::of(&StubError::refused(error.status(), error.to_string())),
        RebuildFault::Replicas
    );
    assert_eq!(
        RebuildFault::of(&StubError::refused(
            RecoveryError::WrongTarget("x".into()).status(),
            "x"
        )),
        RebuildFault::Target
    );
}

/// A holder that does not answer may hold the segment whole, and the silence may be this
/// broker's own (cut off from the backups): the failure is this broker's, so the coordinator
/// moves the rebuild elsewhere instead of ordering it here again and again.
#[tokio::test]
async fn a_holder_that_never_answered_blames_this_broker_not_the_replicas() {
    let scripted = backups(&[("corrupt", Holds::Refuses(Status::ReplicaCorrupt))]);
    let error = read_segment(&scripted, id(), &source(16, &["corrupt", "silent"]))
        .await
        .unwrap_err();
    assert!(matches!(error, RecoveryError::Target(_)), "{error:?}");
    assert!(error.to_string().contains("not scripted"), "{error}");
    assert_eq!(
        RebuildFault::of(&StubError::refused(error.status(), error.to_string())),
        RebuildFault::Target
    );
}
