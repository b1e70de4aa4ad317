//! Consumer groups: membership (`membership`, the pure state machine of Kafka's classic group
//! protocol) and committed offsets (`offsets`, durable), behind one async shell that holds the
//! joins and syncs waiting for a rebalance and ticks the state machine's timers.
//!
//! Every broker's Kafka listener forwards its clients' group requests here, so any broker can
//! answer FindCoordinator for any group; membership lives in memory (members rejoin after a
//! coordinator restart, as they do after a Kafka coordinator moves), offsets on disk.
//! `lag` (pure) turns committed offsets and the log ends brokers report into lag per group
//! and partition; `owners` (pure) holds each user to their share of groups and committed
//! partitions. Offsets live in the data directory (`offsets`), or on etcd with the metadata
//! (`etcd_offsets`). Admin calls describe groups (phase, protocol, members) and remove the
//! committed offsets of groups without members (Kafka's DeleteGroups and OffsetDelete), in the
//! commits' turn.

pub mod etcd_offsets;
pub mod lag;
pub mod membership;
pub mod offsets;
pub mod owners;

use bytes::Bytes;
use membership::{Answer, Delivery, GroupLimits, Groups, Waiter};
use offsets::CommittedOffsets;
use owners::{GroupOwners, OwnerLimits};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailstream_net::{Reply, Response};
use tailstream_wire::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    GroupDescription, GroupHeartbeatRequest, GroupJoinRequest, GroupLeaveRequest, GroupPhase,
    GroupRemoval, GroupSyncRequest, OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest,
    OffsetFetchResponse, OffsetsRemoval, TopicPartition,
};
use tailstream_wire::{Decode, Status};
use tokio::sync::{Notify, oneshot, watch};

/// The longest the ticker sleeps without looking (a bound, not a schedule: it is woken when
/// something changes).
const TICK_MAX: Duration = Duration::from_millis(500);

/// Groups one DescribeGroups request may name (each answer carries every member's metadata
/// and assignment).
const DESCRIBED_GROUPS_MAX: usize = 1000;

/// Whom a group call counts against.
#[derive(Clone, Debug)]
pub enum Caller {
    /// On the client listener: the connection's user (what the request names is ignored).
    Connection(Option<Arc<str>>),
    /// On the peer listener: the user a broker names for its Kafka client.
    Member,
}

impl Caller {
    fn user<'a>(&'a self, named: &'a tailstream_wire::Appended<String>) -> Option<&'a str> {
        match self {
            Caller::Connection(user) => user.as_deref(),
            Caller::Member => named.as_ref().map(String::as_str),
        }
    }
}

#[derive(Debug)]
pub struct GroupCoordinator {
    /// Taken before `membership` when both are (never the other way round).
    owners: Mutex<GroupOwners>,
    membership: Mutex<Groups>,
    waiters: Mutex<HashMap<Waiter, oneshot::Sender<Result<Answer, Status>>>>,
    next_waiter: AtomicU64,
    offsets: Arc<dyn CommittedOffsets>,
    /// Commits go to disk (or etcd) one at a time: the ones waiting their turn wait here, as
    /// parked tasks, not as blocking-pool threads (which metadata saves need too).
    commit_turn: Arc<tokio::sync::Mutex<()>>,
    changed: Notify,
}

fn decode<T: Decode>(body: Bytes) -> Result<T, Response> {
    T::decode_exact(body).map_err(|e| Response::error(Status::Malformed, e.to_string()))
}

fn refused(status: Status) -> Response {
    Response::error(status, format!("{status}"))
}

impl GroupCoordinator {
    /// Groups of coordinator term `term` (it makes member ids unique across leaders).
    pub fn new(
        limits: GroupLimits,
        owner_limits: OwnerLimits,
        term: u64,
        offsets: Arc<dyn CommittedOffsets>,
    ) -> Arc<Self> {
        Arc::new(Self {
            owners: Mutex::new(GroupOwners::new(owner_limits)),
            membership: Mutex::new(Groups::new(limits, term)),
            waiters: Mutex::new(HashMap::new()),
            next_waiter: AtomicU64::new(1),
            offsets,
            commit_turn: Arc::default(),
            changed: Notify::new(),
        })
    }

    fn membership(&self) -> std::sync::MutexGuard<'_, Groups> {
        self.membership.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, GroupOwners> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes `group` `user`'s if it is new and `user` may own one more.
    fn admit(&self, group: &str, user: Option<&str>) -> Result<(), Response> {
        let exists = |g: &str| self.membership().has_group(g) || self.offsets.has_group(g);
        self.owners()
            .admit(group, user, exists)
            .map_err(|why| Response::error(Status::GroupFull, why))
    }

    fn deliver(&self, deliveries: Vec<Delivery>) {
        if deliveries.is_empty() {
            return;
        }
        let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        for (waiter, answer) in deliveries {
            if let Some(sender) = waiters.remove(&waiter) {
                // The caller may be gone (its connection closed): nothing to tell it.
                let _ = sender.send(answer);
            }
        }
    }

    /// Registers a waiter, runs `step` on the state machine with it, and answers once the
    /// state machine releases it.
    fn waiting(
        self: &Arc<Self>,
        step: impl FnOnce(&mut Groups, Waiter, Instant) -> Vec<Delivery>,
    ) -> Reply {
        let waiter = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        let (sender, answer) = oneshot::channel();
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(waiter, sender);
        let deliveries = step(&mut self.membership(), waiter, Instant::now());
        self.deliver(deliveries);
        self.changed.notify_one();
        Reply::Later(Box::pin(async move {
            match answer.await {
                Ok(Ok(Answer::Joined(joined))) => Response::ok(&joined),
                Ok(Ok(Answer::Synced(synced))) => Response::ok(&synced),
                Ok(Err(status)) => refused(status),
                Err(_) => refused(Status::ShuttingDown),
            }
        }))
    }

    pub fn join(self: &Arc<Self>, body: Bytes, caller: &Caller) -> Reply {
        let request = match decode::<GroupJoinRequest>(body) {
            Ok(request) => request,
            Err(response) => return Reply::Ready(response),
        };
        if let Err(refused) = self.admit(&request.group, caller.user(&request.owner)) {
            return Reply::Ready(refused);
        }
        let group = request.group.clone();
        // The join takes effect on the state machine here, at once.
        let reply = self.waiting(|groups, waiter, now| groups.join(request, waiter, now));
        self.owners().settle(&group);
        reply
    }

    pub fn sync(self: &Arc<Self>, body: Bytes) -> Reply {
        match decode::<GroupSyncRequest>(body) {
            Ok(request) => self.waiting(|groups, waiter, now| groups.sync(request, waiter, now)),
            Err(response) => Reply::Ready(response),
        }
    }

    pub fn heartbeat(&self, body: Bytes) -> Response {
        let request: GroupHeartbeatRequest = match decode(body) {
            Ok(request) => request,
            Err(response) => return response,
        };
        match self.membership().heartbeat(&request, Instant::now()) {
            Ok(()) => Response::empty(),
            Err(status) => refused(status),
        }
    }

    pub fn leave(&self, body: Bytes) -> Response {
        let request: GroupLeaveRequest = match decode(body) {
            Ok(request) => request,
            Err(response) => return response,
        };
        let deliveries = self.membership().leave(&request, Instant::now());
        self.deliver(deliveries);
        self.changed.notify_one();
        Response::empty()
    }

    /// Commits `request`'s offsets on the blocking pool once the committer's membership
    /// allows it (the service checked that the partitions exist), answered once on disk.
    pub fn commit(self: &Arc<Self>, request: OffsetCommitRequest, caller: &Caller) -> Reply {
        if let Err(status) = self
            .membership()
            .check_commit(&request.group, request.member.as_ref())
        {
            return Reply::Ready(refused(status));
        }
        if let Err(refused) = self.admit(&request.group, caller.user(&request.owner)) {
            return Reply::Ready(refused);
        }
        let this = self.clone();
        Reply::Later(Box::pin(async move {
            let group = request.group.clone();
            let answer = this.commit_in_turn(request).await;
            // Written or failed: the group's existence is now the store's to tell.
            this.owners().settle(&group);
            answer
        }))
    }

    /// A commit's turn: its new partitions counted against the group's owner, then written.
    async fn commit_in_turn(&self, request: OffsetCommitRequest) -> Response {
        let _turn = self.commit_turn.lock().await;
        // Commits take turns: the partitions counted new here are still new when written.
        let added = self.new_partitions(&request);
        if let Err(why) = self.owners().add_partitions(&request.group, added) {
            return Response::error(Status::GroupFull, why);
        }
        let (offsets, group) = (self.offsets.clone(), request.group.clone());
        let committed =
            tokio::task::spawn_blocking(move || offsets.commit(&group, request.offsets)).await;
        let failed = match committed {
            Ok(Ok(())) => return Response::empty(),
            Ok(Err(error)) => Response::error(error.status(), error.to_string()),
            Err(join) => Response::error(Status::Internal, format!("commit failed: {join}")),
        };
        self.owners().remove_partitions(&request.group, added);
        failed
    }

    /// Removes the committed offsets of each named group without members (DeleteGroups).
    pub fn delete_groups(self: &Arc<Self>, body: Bytes) -> Reply {
        let request: DeleteGroupsRequest = match decode(body) {
            Ok(request) => request,
            Err(response) => return Reply::Ready(response),
        };
        if request.groups.len() > DESCRIBED_GROUPS_MAX {
            return Reply::Ready(Response::error(
                Status::InvalidArgument,
                format!("at most {DESCRIBED_GROUPS_MAX} groups per request"),
            ));
        }
        let this = self.clone();
        Reply::Later(Box::pin(async move {
            let mut groups = Vec::with_capacity(request.groups.len());
            for group in request.groups {
                let outcome = match this.remove_offsets(&group, None).await {
                    Ok(outcome) => outcome,
                    Err(failed) => return failed,
                };
                groups.push(GroupRemoval { group, outcome });
            }
            Response::ok(&DeleteGroupsResponse { groups })
        }))
    }

    /// Removes some committed offsets of a group without members (OffsetDelete).
    pub fn delete_offsets(self: &Arc<Self>, body: Bytes) -> Reply {
        let request: OffsetDeleteRequest = match decode(body) {
            Ok(request) => request,
            Err(response) => return Reply::Ready(response),
        };
        let this = self.clone();
        Reply::Later(Box::pin(async move {
            match this
                .remove_offsets(&request.group, Some(request.partitions))
                .await
            {
                Ok(outcome) => Response::ok(&GroupRemoval {
                    group: request.group,
                    outcome,
                }),
                Err(failed) => failed,
            }
        }))
    }

    /// Removes `group`'s offsets of `partitions` (all when `None`) in the commits' turn, so
    /// owner counts stay exact; refused while the group has members (their offsets are in
    /// use, as Kafka refuses).
    async fn remove_offsets(
        &self,
        group: &str,
        partitions: Option<Vec<TopicPartition>>,
    ) -> Result<OffsetsRemoval, Response> {
        let _turn = self.commit_turn.lock().await;
        if self.membership().has_members(group) {
            return Ok(OffsetsRemoval::GroupNotEmpty);
        }
        if !self.offsets.has_group(group) {
            return Ok(OffsetsRemoval::UnknownGroup);
        }
        let (offsets, name) = (self.offsets.clone(), group.to_owned());
        let removed =
            tokio::task::spawn_blocking(move || offsets.remove(&name, partitions.as_deref())).await;
        match removed {
            Ok(Ok(count)) => {
                self.owners().remove_partitions(group, count);
                tracing::info!(group, partitions = count, "committed offsets removed");
                Ok(OffsetsRemoval::Removed)
            }
            Ok(Err(error)) => Err(Response::error(error.status(), error.to_string())),
            Err(join) => Err(Response::error(
                Status::Internal,
                format!("removing offsets failed: {join}"),
            )),
        }
    }

    /// Partitions `request` commits that its group has no offset for yet.
    fn new_partitions(&self, request: &OffsetCommitRequest) -> usize {
        let asked: std::collections::BTreeSet<(&str, u32)> = request
            .offsets
            .iter()
            .map(|o| (o.topic.as_str(), o.partition))
            .collect();
        let wanted: Vec<TopicPartition> = asked
            .iter()
            .map(|(topic, partition)| TopicPartition {
                topic: (*topic).to_owned(),
                partition: *partition,
            })
            .collect();
        let known = self.offsets.fetch(&request.group, Some(&wanted)).len();
        asked.len().saturating_sub(known)
    }

    pub fn fetch(&self, body: Bytes) -> Response {
        let request: OffsetFetchRequest = match decode(body) {
            Ok(request) => request,
            Err(response) => return response,
        };
        let offsets = self
            .offsets
            .fetch(&request.group, request.partitions.as_deref());
        Response::ok(&OffsetFetchResponse { offsets })
    }

    /// Every group's committed offsets (for lag).
    pub fn committed(&self) -> Vec<(String, Vec<tailstream_wire::messages::CommittedOffset>)> {
        self.offsets.snapshot()
    }

    /// Groups with members now: (name, members, generation).
    pub fn members(&self) -> Vec<(String, usize, u32)> {
        let mut sizes = self.membership().sizes();
        sizes.sort();
        sizes
    }

    /// The named groups with their members (a group with only committed offsets is `Empty`,
    /// one the coordinator does not know is `Dead`), or, none named, every group without
    /// members.
    pub fn describe(&self, body: Bytes) -> Response {
        let request: DescribeGroupsRequest = match decode(body) {
            Ok(request) => request,
            Err(response) => return response,
        };
        if request.groups.len() > DESCRIBED_GROUPS_MAX {
            return Response::error(
                Status::InvalidArgument,
                format!(
                    "{} groups named; at most {DESCRIBED_GROUPS_MAX} per request",
                    request.groups.len()
                ),
            );
        }
        let only_offsets = |group: String, phase| GroupDescription {
            group,
            phase,
            protocol_type: String::new(),
            protocol: String::new(),
            members: Vec::new(),
        };
        // The offsets store is asked before membership is locked: a commit holds the store
        // while it writes, and membership must not wait on a disk.
        let groups = if request.groups.is_empty() {
            let mut names = self.offsets.group_names();
            let membership = self.membership();
            names.extend(membership.sizes().into_iter().map(|(name, ..)| name));
            names.sort();
            names.dedup();
            names
                .into_iter()
                .map(|name| match membership.describe(&name) {
                    Some(group) => GroupDescription {
                        members: Vec::new(),
                        ..group
                    },
                    None => only_offsets(name, GroupPhase::Empty),
                })
                .collect()
        } else {
            let committed: Vec<bool> = request
                .groups
                .iter()
                .map(|name| self.offsets.has_group(name))
                .collect();
            let membership = self.membership();
            request
                .groups
                .into_iter()
                .zip(committed)
                .map(|(name, committed)| match membership.describe(&name) {
                    Some(group) => group,
                    None if committed => only_offsets(name, GroupPhase::Empty),
                    None => only_offsets(name, GroupPhase::Dead),
                })
                .collect()
        };
        Response::ok(&DescribeGroupsResponse { groups })
    }

    /// Groups with members, and groups with committed offsets (for metrics).
    pub fn counts(&self) -> (usize, usize) {
        (self.membership().sizes().len(), self.offsets.group_count())
    }

    /// Expires sessions and completes overdue rebalances until `shutdown`.
    pub async fn run_ticker(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            let now = Instant::now();
            let next = self
                .membership()
                .next_deadline(now)
                .unwrap_or(now + TICK_MAX)
                .min(now + TICK_MAX);
            tokio::select! {
                _ = tokio::time::sleep_until(next.into()) => {}
                _ = self.changed.notified() => {}
                _ = tailstream_net::server::shutdown_signalled(&mut shutdown) => return,
            }
            let deliveries = self.membership().tick(Instant::now());
            self.deliver(deliveries);
        }
    }
}
