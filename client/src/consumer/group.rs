//! A consumer group member: consumers that name the same group share a stream's logs. The
//! coordinator keeps the group (the same membership and offsets store Kafka clients use, with
//! protocol type `tailstream`); its leader member hands out the logs ([`assign`]), every member
//! reads its share from the group's committed offsets, heartbeats on a task of its own, and
//! rejoins when the coordinator says the group is rebalancing (a member joined, left, or went
//! silent past its session timeout).
//!
//! Delivery is at least once: the offsets of the records a `poll` returned are committed at a
//! later `poll` (at most every `member_commit_interval_ms`), before a rebalance, and at
//! `close`, so only records handed out since the last commit can be read again by another
//! member after a crash.

use super::cursor::{Cursor, StartFrom};
use super::decode::ConsumedRecord;
use super::logs::LogConsumer;
use crate::cluster::Cluster;
use crate::error::ClientError;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tailstream_config::{ClientConfig, ConsumerConfig};
use tailstream_stubs::CoordinatorClient;
use tailstream_wire::messages::{
    CommittedOffset, ConsumerAssignment, GroupAssignment, GroupHeartbeatRequest, GroupJoinRequest,
    GroupLeaveRequest, GroupMemberRef, GroupProtocol, GroupSyncRequest, OffsetCommitRequest,
    OffsetFetchRequest, StreamMetadata, TopicPartition,
};
use tailstream_wire::{Decode, Encode, LogId, RecordOffset, Status, StreamletId};
use tokio::sync::watch;

/// The group protocol type of native members (Kafka's clients use `consumer`).
pub(crate) const PROTOCOL_TYPE: &str = "tailstream";
/// The one assignment strategy native members offer.
const STRATEGY: &str = "round-robin";
/// Joining gives up after this many refusals in a row that a retry may fix.
const JOIN_ATTEMPTS_MAX: u32 = 20;

/// Which member reads which partition (`streamlet * Q + log`): partition p goes to the p-th
/// member (mod their count) in member id order, so every partition has exactly one reader and
/// shares differ by at most one.
pub(crate) fn assign(members: &[String], partitions: u32) -> BTreeMap<String, Vec<u32>> {
    let mut sorted: Vec<&String> = members.iter().collect();
    sorted.sort();
    sorted.dedup();
    let mut shares: BTreeMap<String, Vec<u32>> =
        sorted.iter().map(|m| ((*m).clone(), Vec::new())).collect();
    if sorted.is_empty() {
        return shares;
    }
    for partition in 0..partitions {
        let member = sorted[partition as usize % sorted.len()];
        shares.entry(member.clone()).or_default().push(partition);
    }
    shares
}

/// Who this member is in the group's current generation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Identity {
    member_id: String,
    generation: u32,
}

/// One member of a consumer group reading one stream.
pub(crate) struct GroupMember {
    cluster: Arc<Cluster>,
    /// Calls that may wait for a rebalance (longer deadline than `cluster`'s).
    groups: Arc<CoordinatorClient>,
    stream: String,
    group: String,
    config: ConsumerConfig,
    reset: StartFrom,
    identity: Identity,
    /// The current generation, for the heartbeat task (`None` while not a member).
    announced: watch::Sender<Option<Identity>>,
    /// Set by the heartbeat task when the coordinator says this member must rejoin.
    rejoin: Arc<AtomicBool>,
    heartbeats: tokio::task::JoinHandle<()>,
    metadata: Option<Arc<StreamMetadata>>,
    reader: Option<LogConsumer>,
    /// The partitions this member reads.
    partitions: Vec<u32>,
    /// The next offset of each partition, after the records polls returned.
    delivered: BTreeMap<u32, RecordOffset>,
    /// Of those, what is not committed yet.
    uncommitted: bool,
    last_commit: Instant,
}

impl std::fmt::Debug for GroupMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupMember")
            .field("stream", &self.stream)
            .field("group", &self.group)
            .field("member", &self.identity)
            .field("partitions", &self.partitions)
            .finish()
    }
}

impl Drop for GroupMember {
    fn drop(&mut self) {
        self.heartbeats.abort();
    }
}

impl GroupMember {
    /// A member of `group` reading `stream`; logs the group never committed an offset for are
    /// read from `reset`. Joins on the first `poll`.
    pub(crate) fn new(
        cluster: Arc<Cluster>,
        client: &ClientConfig,
        stream: &str,
        group: &str,
        config: ConsumerConfig,
        reset: StartFrom,
    ) -> Result<Self, ClientError> {
        if group.is_empty() {
            return Err(ClientError::Config("a consumer group needs a name".into()));
        }
        // A join is answered once the rebalance completes, which may take the whole
        // rebalance timeout.
        let groups = CoordinatorClient::new(
            &cluster.coordinator().addr(),
            tailstream_stubs::coordinator::client_rpc_config(
                client,
                u64::from(config.member_rebalance_timeout_ms) + 5_000,
            ),
        );
        let (announced, watched) = watch::channel(None);
        let rejoin = Arc::new(AtomicBool::new(false));
        let heartbeats = tokio::spawn(heartbeat(
            groups.clone(),
            group.to_owned(),
            Duration::from_millis(config.member_heartbeat_interval_ms.max(1)),
            watched,
            rejoin.clone(),
        ));
        Ok(Self {
            cluster,
            groups,
            stream: stream.to_owned(),
            group: group.to_owned(),
            config,
            reset,
            identity: Identity::default(),
            announced,
            rejoin,
            heartbeats,
            metadata: None,
            reader: None,
            partitions: Vec::new(),
            delivered: BTreeMap::new(),
            uncommitted: false,
            last_commit: Instant::now(),
        })
    }

    /// The partitions (`streamlet * Q + log`) this member reads in the current generation.
    pub(crate) fn partitions(&self) -> &[u32] {
        &self.partitions
    }

    /// The streamlets this member waits for (recovering, lost, or not answering) and why.
    pub(crate) fn unavailable(&self) -> Vec<(StreamletId, String)> {
        self.reader
            .as_ref()
            .map_or_else(Vec::new, LogConsumer::unavailable)
    }

    /// Records of this member's logs skipped because retention freed them before they were
    /// read (since the current generation began).
    pub(crate) fn records_lost_to_retention(&self) -> u64 {
        self.reader
            .as_ref()
            .map_or(0, LogConsumer::records_lost_to_retention)
    }

    /// The group generation this member is in (0 before it joined).
    pub(crate) fn generation(&self) -> u32 {
        self.identity.generation
    }

    /// Waits up to `timeout` for records of this member's logs. Commits what earlier polls
    /// returned first (they were handled, or this poll would not be called), and rejoins the
    /// group when it rebalances.
    pub(crate) async fn poll(
        &mut self,
        timeout: Duration,
    ) -> Result<Vec<ConsumedRecord>, ClientError> {
        if self.reader.is_none() || self.rejoin.load(Ordering::Relaxed) {
            self.rejoin_group().await?;
        } else if self.uncommitted
            && self.last_commit.elapsed()
                >= Duration::from_millis(self.config.member_commit_interval_ms)
        {
            self.commit_or_rejoin().await?;
        }
        let Some(reader) = self.reader.as_mut() else {
            return Ok(Vec::new());
        };
        let records = reader.poll(timeout).await?;
        let logs = self
            .metadata
            .as_ref()
            .map_or(1, |m| m.config.logs_per_streamlet);
        for record in &records {
            let partition = record.streamlet.0 * logs + record.log.0;
            self.delivered
                .insert(partition, RecordOffset(record.offset.0.saturating_add(1)));
            self.uncommitted = true;
        }
        Ok(records)
    }

    /// Takes back records a poll returned that were not handled (a caller that stops
    /// part-way through a poll's records): their offsets are not committed. For a caller about
    /// to `close`; a member that polls on reads on after them.
    pub(crate) fn release(&mut self, unhandled: &[ConsumedRecord]) {
        let logs = self
            .metadata
            .as_ref()
            .map_or(1, |m| m.config.logs_per_streamlet);
        for record in unhandled {
            let partition = record.streamlet.0 * logs + record.log.0;
            if let Some(next) = self.delivered.get_mut(&partition) {
                *next = (*next).min(record.offset);
            }
        }
    }

    /// Commits the offsets after every record the polls returned (answered once on the
    /// coordinator's disk).
    pub(crate) async fn commit(&mut self) -> Result<(), ClientError> {
        if !self.uncommitted || self.identity.member_id.is_empty() {
            return Ok(());
        }
        let request = OffsetCommitRequest {
            group: self.group.clone(),
            member: Some(GroupMemberRef {
                member_id: self.identity.member_id.clone(),
                generation: self.identity.generation,
            }),
            offsets: self
                .delivered
                .iter()
                .map(|(partition, offset)| CommittedOffset {
                    topic: self.stream.clone(),
                    partition: *partition,
                    offset: offset.0,
                    metadata: String::new(),
                })
                .collect(),
            owner: Default::default(),
        };
        self.groups.commit_offsets(&request).await?;
        self.uncommitted = false;
        self.last_commit = Instant::now();
        Ok(())
    }

    /// Commits what was handed out and leaves the group, so the others take over its logs at
    /// once instead of after a session timeout.
    pub(crate) async fn close(mut self) -> Result<(), ClientError> {
        let committed = self.commit().await;
        if !self.identity.member_id.is_empty() {
            let _ = self
                .groups
                .leave_group(&GroupLeaveRequest {
                    group: self.group.clone(),
                    member_ids: vec![self.identity.member_id.clone()],
                })
                .await;
        }
        committed
    }

    /// Commits; a refusal because the group moved on means a rebalance, not an error.
    async fn commit_or_rejoin(&mut self) -> Result<(), ClientError> {
        match self.commit().await {
            Ok(()) => Ok(()),
            Err(error) if must_rejoin(&error) => {
                self.rejoin.store(true, Ordering::Relaxed);
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    /// Commits what was handed out, joins the group's next generation and reads this
    /// member's share of it from the committed offsets.
    async fn rejoin_group(&mut self) -> Result<(), ClientError> {
        if self.reader.is_some() {
            // Best effort: a generation that is already over refuses it, and another member
            // reads those records again (the at-least-once window).
            let _ = self.commit().await;
        }
        self.reader = None;
        self.delivered.clear();
        self.uncommitted = false;
        let metadata = self.cluster.refresh_stream(&self.stream).await?;
        let logs = metadata.config.logs_per_streamlet.max(1);
        let partitions = u32::try_from(metadata.streamlets.len())
            .unwrap_or(u32::MAX)
            .saturating_mul(logs);
        let mut attempts = 0;
        let assignment = loop {
            self.rejoin.store(false, Ordering::Relaxed);
            match self.join_and_sync(partitions).await {
                Ok(assignment) => break assignment,
                Err(error) if attempts < JOIN_ATTEMPTS_MAX && retry_join(&error) => {
                    attempts += 1;
                    if error.status() == Some(Status::UnknownMember) {
                        self.identity = Identity::default();
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => return Err(error),
            }
        };
        self.partitions = assignment;
        let committed = self.committed_offsets().await?;
        let cursors = self
            .partitions
            .iter()
            .map(|&partition| {
                let (streamlet, log) = (StreamletId(partition / logs), LogId(partition % logs));
                match committed.get(&partition) {
                    Some(offset) => Cursor::at_offset(streamlet, log, *offset),
                    None => Cursor::new(streamlet, log, self.reset),
                }
            })
            .collect();
        self.reader = Some(LogConsumer::with_cursors(
            self.cluster.clone(),
            metadata.clone(),
            self.config.clone(),
            cursors,
        ));
        self.metadata = Some(metadata);
        self.last_commit = Instant::now();
        Ok(())
    }

    /// One join and sync: this member's partitions in the new generation.
    async fn join_and_sync(&mut self, partitions: u32) -> Result<Vec<u32>, ClientError> {
        let _ = self.announced.send(None);
        let joined = self
            .groups
            .join_group(&GroupJoinRequest {
                group: self.group.clone(),
                member_id: self.identity.member_id.clone(),
                client_id: "tailstream".into(),
                session_timeout_ms: self.config.member_session_timeout_ms,
                rebalance_timeout_ms: self.config.member_rebalance_timeout_ms,
                protocol_type: PROTOCOL_TYPE.into(),
                protocols: vec![GroupProtocol {
                    name: STRATEGY.into(),
                    metadata: self.stream.clone().into_bytes().into(),
                }],
                // The coordinator counts the group against this connection's user.
                owner: Default::default(),
            })
            .await?;
        self.identity = Identity {
            member_id: joined.member_id.clone(),
            generation: joined.generation,
        };
        let _ = self.announced.send(Some(self.identity.clone()));
        let assignments = if joined.leader == joined.member_id {
            let members: Vec<String> = joined.members.iter().map(|m| m.member_id.clone()).collect();
            assign(&members, partitions)
                .into_iter()
                .map(|(member_id, partitions)| {
                    let share = ConsumerAssignment {
                        stream: self.stream.clone(),
                        partitions,
                    };
                    GroupAssignment {
                        member_id,
                        assignment: share.to_bytes(),
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        let synced = self
            .groups
            .sync_group(&GroupSyncRequest {
                group: self.group.clone(),
                generation: joined.generation,
                member_id: joined.member_id.clone(),
                assignments,
            })
            .await?;
        if synced.assignment.is_empty() {
            return Ok(Vec::new());
        }
        let share = ConsumerAssignment::decode_exact(synced.assignment)
            .map_err(|e| ClientError::Config(format!("the group's assignment: {e}")))?;
        if share.stream != self.stream {
            return Err(ClientError::Config(format!(
                "group {} reads stream {}, not {}",
                self.group, share.stream, self.stream
            )));
        }
        Ok(share
            .partitions
            .into_iter()
            .filter(|p| *p < partitions)
            .collect())
    }

    /// The group's committed offsets of this member's partitions.
    // `&mut`: a shared borrow held across the await would need the member to be `Sync`.
    async fn committed_offsets(&mut self) -> Result<BTreeMap<u32, RecordOffset>, ClientError> {
        let response = self
            .groups
            .fetch_offsets(&OffsetFetchRequest {
                group: self.group.clone(),
                partitions: Some(
                    self.partitions
                        .iter()
                        .map(|&partition| TopicPartition {
                            topic: self.stream.clone(),
                            partition,
                        })
                        .collect(),
                ),
            })
            .await?;
        Ok(response
            .offsets
            .into_iter()
            .filter(|o| o.topic == self.stream)
            .map(|o| (o.partition, RecordOffset(o.offset)))
            .collect())
    }
}

/// The coordinator moved the group on without this member's generation.
fn must_rejoin(error: &ClientError) -> bool {
    matches!(
        error.status(),
        Some(Status::RebalanceInProgress | Status::IllegalGeneration | Status::UnknownMember)
    )
}

fn retry_join(error: &ClientError) -> bool {
    must_rejoin(error) || error.is_retryable()
}

/// Heartbeats every `every` while this member is in a generation; flags `rejoin` when the
/// coordinator answers that the group is rebalancing or has dropped the member.
async fn heartbeat(
    groups: Arc<CoordinatorClient>,
    group: String,
    every: Duration,
    mut identity: watch::Receiver<Option<Identity>>,
    rejoin: Arc<AtomicBool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(current) = identity.borrow_and_update().clone() else {
            continue;
        };
        let request = GroupHeartbeatRequest {
            group: group.clone(),
            generation: current.generation,
            member_id: current.member_id,
        };
        if let Err(error) = groups.heartbeat_group(&request).await
            && must_rejoin(&error.into())
        {
            rejoin.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::assign;

    #[test]
    fn every_partition_has_one_reader_and_shares_differ_by_at_most_one() {
        let members: Vec<String> = ["c", "a", "b"].iter().map(|s| s.to_string()).collect();
        let shares = assign(&members, 8);
        assert_eq!(shares["a"], vec![0, 3, 6]);
        assert_eq!(shares["b"], vec![1, 4, 7]);
        assert_eq!(shares["c"], vec![2, 5]);
        let one = assign(&["x".to_string()], 3);
        assert_eq!(one["x"], vec![0, 1, 2]);
        // More members than partitions: some read nothing, but are listed (they get an
        // empty assignment rather than none).
        let many = assign(&members, 2);
        assert_eq!(many["c"], Vec::<u32>::new());
        assert!(assign(&[], 4).is_empty());
    }
}
