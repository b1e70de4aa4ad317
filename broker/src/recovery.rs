//! The new owner's side of recovery: rebuild a crashed broker's streamlet from its backups.
//!
//! For a `RecoverStreamlet` order it reads every segment the plan names from the backups that
//! hold it, many at once (each from one holder, the next holder if that one fails or serves
//! bytes that do not verify), rebuilds each log with every id, position and offset it had (and
//! its producer table), adopts the closed copies where they are (ownership moves to this broker
//! under a new epoch), replicates afresh only what lost a copy and the recovered head, and
//! answers once every segment again has `min_insync_replicas` copies on other brokers (its own
//! disk never counts: a primary is never its own backup). The streamlet then waits, not serving,
//! until the coordinator's assignment hands it over.

use crate::cluster::ClusterState;
use crate::replication::{
    ClosedRecord, RecoveredReplicas, ReplicatedSegment, ReplicationContext, spawn_recovered,
};
use crate::storage::{RecoveredSegment, Store, Streamlet};
use bytes::{Bytes, BytesMut};
use futures::stream::{self, StreamExt};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_storage::StorageError;
use tailstream_stubs::{BackupApi, RebuildFault, StubError};
use tailstream_wire::messages::{
    ReadReplicaRequest, RecoverStreamletRequest, RecoverStreamletResponse, ReplicaAdoptRequest,
    ReplicaId, SegmentSource, StreamletAssignment,
};
use tailstream_wire::{LogId, OwnershipEpoch, ServerId, Status, StreamId, StreamletId};

/// Why a rebuild failed, by whom it blames: the coordinator plans again on fresh listings when
/// the replicas failed, and chooses another target when this broker did.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecoveryError {
    /// The order is for another incarnation, or this broker is not registered.
    #[error("{0}")]
    WrongTarget(String),
    /// A segment the plan named was served whole and verified by none of its holders.
    #[error("{0}")]
    Replicas(String),
    /// A newer rebuild of the streamlet is here already.
    #[error("{0}")]
    Superseded(String),
    /// This broker could not carry it out (its rebuilt segments got no copies in time, a task
    /// ended).
    #[error("{0}")]
    Target(String),
}

impl RecoveryError {
    /// Whom it blames, as the coordinator will read it from the answer's status.
    pub fn fault(&self) -> RebuildFault {
        match self {
            RecoveryError::Replicas(_) => RebuildFault::Replicas,
            RecoveryError::Superseded(_) => RebuildFault::Superseded,
            RecoveryError::WrongTarget(_) | RecoveryError::Target(_) => RebuildFault::Target,
        }
    }

    /// The status the peer listener answers with.
    pub fn status(&self) -> Status {
        match self {
            RecoveryError::WrongTarget(_) => Status::StaleGeneration,
            other => other.fault().status(),
        }
    }
}

/// One segment's `length` valid bytes, from the first holder that serves them whole. When
/// none does, the error blames the replicas only if every holder answered (refused, or served
/// too little): a holder that did not answer at all may hold it whole, and the silence may be
/// this broker's own (cut off from the backups), so then it blames this broker.
async fn read_segment(
    backups: &dyn BackupApi,
    id: ReplicaId,
    source: &SegmentSource,
) -> Result<Bytes, RecoveryError> {
    let mut errors = Vec::new();
    let mut every_holder_answered = true;
    for holder in &source.holders {
        match read_from(backups, id, source, holder.primary, &holder.peer_addr).await {
            Ok(bytes) => return Ok(bytes),
            Err(ReadFailure { why, answered }) => {
                every_holder_answered &= answered;
                errors.push(format!("{}: {why}", holder.backup));
            }
        }
    }
    let why = format!(
        "{} of {}: no holder served it ({})",
        source.segment,
        id.log,
        errors.join("; ")
    );
    Err(if every_holder_answered {
        RecoveryError::Replicas(why)
    } else {
        RecoveryError::Target(why)
    })
}

/// Why one holder did not serve a segment, and whether it answered at all.
struct ReadFailure {
    why: String,
    answered: bool,
}

async fn read_from(
    backups: &dyn BackupApi,
    id: ReplicaId,
    source: &SegmentSource,
    primary: ServerId,
    addr: &str,
) -> Result<Bytes, ReadFailure> {
    let served_too_little = |why: String| ReadFailure {
        why,
        answered: true,
    };
    let length = source.length;
    let mut bytes = BytesMut::with_capacity(length as usize);
    while (bytes.len() as u32) < length {
        let request = ReadReplicaRequest {
            primary,
            replica: id,
            epoch: source.epoch,
            offset: bytes.len() as u32,
            max_bytes: READ_BYTES.min(length - bytes.len() as u32),
        };
        let answer = backups
            .read(addr, &request)
            .await
            .map_err(|error| ReadFailure {
                why: error.to_string(),
                // A refusal is the backup's verdict on its copy; silence or a garbled answer
                // is none.
                answered: matches!(error, StubError::Refused { .. }),
            })?;
        if answer.valid_bytes < length {
            return Err(served_too_little(format!(
                "holds {} valid bytes, {length} are needed",
                answer.valid_bytes
            )));
        }
        if answer.bytes.is_empty() {
            return Err(served_too_little("returned no bytes".into()));
        }
        if bytes.is_empty() && answer.bytes.len() >= length as usize {
            // The whole segment in one answer (the common case): keep its memory as it is.
            return Ok(answer.bytes.slice(..length as usize));
        }
        let take = answer.bytes.len().min(length as usize - bytes.len());
        bytes.extend_from_slice(&answer.bytes[..take]);
    }
    // The rebuild checks these bytes again (every entry and trailer) before using them.
    Ok(bytes.freeze())
}

/// Segments read at once during a rebuild.
const READS_IN_FLIGHT_MAX: usize = 8;
/// Segments whose copies are being adopted at once (each a small control RPC per holder).
const ADOPTIONS_IN_FLIGHT_MAX: usize = 64;
/// Bytes asked for per read (the backup caps it too).
const READ_BYTES: u32 = 8 << 20;

/// Per streamlet: its rebuilds run one at a time, and the epoch of the last one that finished.
pub type RebuildLocks =
    HashMap<(StreamId, StreamletId), Arc<tokio::sync::Mutex<Option<OwnershipEpoch>>>>;

#[derive(Debug)]
pub struct Recovery {
    pub ctx: Arc<ReplicationContext>,
    /// Reads and adoptions go through it (scripted backups in tests).
    pub backups: Arc<dyn BackupApi>,
    pub store: Arc<Store>,
    pub cluster: Arc<ClusterState>,
    /// How long the rebuilt streamlet may take to have every copy again.
    pub durable_timeout: Duration,
    /// One rebuild of a streamlet at a time: a coordinator restarted mid-recovery orders the
    /// same rebuild again under the next epoch, often to the same broker, while the first one
    /// still runs. Each lock holds the epoch of the last rebuild of that streamlet that
    /// finished here (durable). Entries are per streamlet this broker was ever ordered to
    /// rebuild.
    pub rebuilding: std::sync::Mutex<RebuildLocks>,
}

fn replica_id(assignment: &StreamletAssignment, log: LogId, source: &SegmentSource) -> ReplicaId {
    source.replica_id(assignment, log)
}

impl Recovery {
    /// Carries out one order; the error says why the streamlet could not be rebuilt here.
    pub async fn recover(
        &self,
        request: RecoverStreamletRequest,
    ) -> Result<RecoverStreamletResponse, RecoveryError> {
        let me = self
            .cluster
            .server_id()
            .ok_or_else(|| RecoveryError::WrongTarget("not registered".into()))?;
        if me != request.target {
            return Err(RecoveryError::WrongTarget(format!(
                "recovery order for {} reached {me}",
                request.target
            )));
        }
        let assignment = &request.assignment;
        let serial = self
            .rebuilding
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((assignment.stream, assignment.streamlet))
            .or_default()
            .clone();
        let mut finished_here = serial.lock().await;
        let nothing_to_do = RecoverStreamletResponse {
            bytes: 0,
            segments_adopted: 0,
            segments_copied: 0,
            read_ms: 0,
            rereplicate_ms: 0,
        };
        if let Ok(existing) = self.store.get(assignment.stream, assignment.streamlet) {
            if existing.epoch() >= assignment.epoch {
                // A retried order: the first rebuild is here already.
                return Ok(nothing_to_do);
            }
            if existing.epoch().next() == Some(assignment.epoch)
                && *finished_here == Some(existing.epoch())
            {
                // The same rebuild ordered again under the next epoch (the coordinator
                // restarted meanwhile). No other owner came in between (every hand-over takes
                // an epoch), so what is here is the crashed owner's data, rebuilt and durable:
                // it takes the new epoch. Rebuilding again would put a second streamlet with
                // the same replica ids beside the first one's replicators.
                existing.set_ownership(assignment.epoch, false);
                *finished_here = Some(assignment.epoch);
                tracing::info!(
                    stream = %assignment.stream_name,
                    streamlet = assignment.streamlet.0,
                    epoch = %assignment.epoch,
                    "rebuild ordered again under the next epoch: the rebuilt streamlet takes it"
                );
                return Ok(nothing_to_do);
            }
        }
        let started = Instant::now();
        let logs = self.read_all(&request).await?;
        let read_ms = started.elapsed().as_millis() as u32;
        let bytes: u64 = logs
            .iter()
            .flat_map(|(_, segments)| segments.iter().map(|s| s.bytes.len() as u64))
            .sum();
        let streamlet = self.rebuild(&request, logs).await?;
        // Records deleted before a log's start stay deleted under the new owner.
        streamlet.set_log_starts(&assignment.log_starts);
        let (streamlet, fresh) = self.store.insert_recovered(streamlet);
        if !fresh {
            return Err(RecoveryError::Superseded(
                "a newer rebuild of this streamlet is here already".into(),
            ));
        }
        tracing::info!(
            stream = %assignment.stream_name,
            streamlet = assignment.streamlet.0,
            epoch = %assignment.epoch,
            bytes,
            read_ms,
            "streamlet rebuilt from its backups"
        );
        let replicating = Instant::now();
        let (adopted, copied) = self.make_durable(&request, &streamlet, me).await?;
        *finished_here = Some(assignment.epoch);
        Ok(RecoverStreamletResponse {
            bytes,
            segments_adopted: adopted,
            segments_copied: copied,
            read_ms,
            rereplicate_ms: replicating.elapsed().as_millis() as u32,
        })
    }

    /// Every segment of every log, read from its holders, in log order.
    async fn read_all(
        &self,
        request: &RecoverStreamletRequest,
    ) -> Result<Vec<(LogId, Vec<RecoveredSegment>)>, RecoveryError> {
        // Owned jobs: the reads run concurrently in a stream that must not borrow the request.
        let jobs: Vec<(usize, usize, ReplicaId, SegmentSource)> = request
            .logs
            .iter()
            .enumerate()
            .flat_map(|(l, log)| {
                log.segments.iter().enumerate().map(move |(i, source)| {
                    let id = replica_id(&request.assignment, log.log, source);
                    (l, i, id, source.clone())
                })
            })
            .collect();
        let backups = self.backups.clone();
        let results: Vec<(usize, usize, Result<Bytes, RecoveryError>)> = stream::iter(jobs)
            .map(|(l, i, id, source)| {
                let backups = backups.clone();
                async move { (l, i, read_segment(backups.as_ref(), id, &source).await) }
            })
            .buffer_unordered(READS_IN_FLIGHT_MAX)
            .collect()
            .await;
        let mut logs: Vec<(LogId, Vec<Option<RecoveredSegment>>)> = request
            .logs
            .iter()
            .map(|log| (log.log, vec![None; log.segments.len()]))
            .collect();
        for (l, i, result) in results {
            let source = &request.logs[l].segments[i];
            let bytes = result?;
            logs[l].1[i] = Some(RecoveredSegment {
                group: source.group,
                segment: source.segment,
                bytes,
            });
        }
        Ok(logs
            .into_iter()
            .map(|(log, segments)| (log, segments.into_iter().flatten().collect()))
            .collect())
    }

    /// The streamlet, rebuilt off the async workers (it copies every byte once).
    async fn rebuild(
        &self,
        request: &RecoverStreamletRequest,
        logs: Vec<(LogId, Vec<RecoveredSegment>)>,
    ) -> Result<Arc<Streamlet>, RecoveryError> {
        let assignment = request.assignment.clone();
        let (memory, producers_max, backlog_max) = self.store.rebuild_limits();
        let next_ids = (request.next_group, request.next_segment);
        let version = request.version;
        let rebuilt = tokio::task::spawn_blocking(move || {
            Streamlet::rebuilt(
                assignment.stream,
                assignment.streamlet,
                assignment.config,
                memory,
                producers_max,
                backlog_max,
                assignment.epoch,
                version,
                next_ids,
                &logs,
                Instant::now(),
            )
        })
        .await
        .map_err(|e| RecoveryError::Target(format!("rebuild task: {e}")))?
        .map_err(|e| match e {
            // The bytes read do not rebuild into a valid log.
            StorageError::Recovery(_) => RecoveryError::Replicas(e.to_string()),
            other => RecoveryError::Target(other.to_string()),
        })?;
        Ok(Arc::new(rebuilt.0))
    }

    /// Adopts the closed copies, starts replicating what is missing, and waits (bounded) until
    /// every segment has `min_insync_replicas` complete copies (the others are made as
    /// brokers allow, in the background: a cluster short of brokers for R still gets its
    /// streamlet back). Returns (segments adopted, segments copied).
    async fn make_durable(
        &self,
        request: &RecoverStreamletRequest,
        streamlet: &Arc<Streamlet>,
        me: ServerId,
    ) -> Result<(u32, u32), RecoveryError> {
        let assignment = &request.assignment;
        let replicas = assignment.config.replicas as usize;
        let min_insync = assignment.config.min_insync() as usize;
        let floor = Some(request.next_segment);
        let mut adopted_segments = 0u32;
        let mut copied_segments = 0u32;
        let mut adopted = self.adopt_all(request, me).await.into_iter();
        let mut durable = Vec::new();
        for log in &request.logs {
            let mut recovered = RecoveredReplicas {
                floor,
                ..RecoveredReplicas::default()
            };
            for source in &log.segments {
                let id = replica_id(assignment, log.log, source);
                let new_epoch = source.epoch.saturating_next();
                // `adopt_all` answers one entry per segment, in the order walked here.
                let adopted = adopted.next().unwrap_or_default();
                if adopted.len() >= replicas {
                    adopted_segments += 1;
                    recovered.complete.push(ClosedRecord {
                        id,
                        length: source.length,
                        epoch: new_epoch,
                        backups: adopted,
                    });
                } else {
                    copied_segments += 1;
                    recovered.incomplete.push(
                        ReplicatedSegment::recovered(
                            id,
                            source.length,
                            new_epoch,
                            &adopted,
                            replicas,
                        )
                        .with_min_insync(min_insync),
                    );
                }
            }
            durable.push(spawn_recovered(
                self.ctx.clone(),
                streamlet.clone(),
                log.log,
                recovered,
            ));
        }
        // Logs with nothing to recover still need their replicator.
        for log in streamlet.logs() {
            if replicas > 0 && !request.logs.iter().any(|l| l.log == log.id()) {
                spawn_recovered(
                    self.ctx.clone(),
                    streamlet.clone(),
                    log.id(),
                    RecoveredReplicas {
                        floor,
                        ..RecoveredReplicas::default()
                    },
                );
            }
        }
        let all_durable = async {
            for mut watch in durable {
                if watch.wait_for(|d| *d).await.is_err() {
                    return Err(RecoveryError::Target("a replicator stopped".into()));
                }
            }
            Ok(())
        };
        tokio::time::timeout(self.durable_timeout, all_durable)
            .await
            .map_err(|_| {
                RecoveryError::Target(
                    "the rebuilt segments did not get min_insync_replicas copies in time".into(),
                )
            })??;
        Ok((adopted_segments, copied_segments))
    }

    /// Adopts the closed copies of every segment the plan names, many at once (each adoption
    /// is a rename and a directory sync on its backup, so one at a time a log of thousands of
    /// small segments took seconds). One entry per segment, in plan order (log by log): the
    /// backups that now hold that segment for this broker.
    async fn adopt_all(
        &self,
        request: &RecoverStreamletRequest,
        me: ServerId,
    ) -> Vec<Vec<ServerId>> {
        // Owned jobs: the adoptions run concurrently in a stream that must not borrow.
        let jobs: Vec<(ReplicaId, SegmentSource)> = request
            .logs
            .iter()
            .flat_map(|log| {
                log.segments.iter().map(move |source| {
                    (
                        replica_id(&request.assignment, log.log, source),
                        source.clone(),
                    )
                })
            })
            .collect();
        let backups = self.backups.clone();
        stream::iter(jobs)
            .map(|(id, source)| {
                let backups = backups.clone();
                async move { adopt(backups.as_ref(), id, &source, me).await }
            })
            .buffered(ADOPTIONS_IN_FLIGHT_MAX)
            .collect()
            .await
    }
}

/// Adopts `source`'s closed copies (not one this broker holds itself: a primary is never its
/// own backup) under the next epoch; returns the backups that now hold a copy for this broker.
/// A segment not closed is copied, never adopted.
async fn adopt(
    backups: &dyn BackupApi,
    id: ReplicaId,
    source: &SegmentSource,
    me: ServerId,
) -> Vec<ServerId> {
    if !source.closed {
        return Vec::new();
    }
    let new_epoch = source.epoch.saturating_next();
    let adoptions = source
        .holders
        .iter()
        .filter(|h| h.backup.index != me.index)
        .map(|holder| async move {
            let request = ReplicaAdoptRequest {
                from: holder.primary,
                new_primary: me,
                replica: id,
                epoch: source.epoch,
                new_epoch,
            };
            match backups.adopt(&holder.peer_addr, &request).await {
                Ok(()) => Some(holder.backup),
                Err(error) => {
                    tracing::warn!(backup = %holder.backup, %error, ?id, "adopting a replica failed; it will be copied instead");
                    None
                }
            }
        });
    futures::future::join_all(adoptions)
        .await
        .into_iter()
        .flatten()
        .collect()
}

#[cfg(test)]
#[path = "recovery_tests.rs"]
mod tests;
