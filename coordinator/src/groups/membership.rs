//! Consumer group membership as a pure state machine: Kafka's classic group protocol.
//!
//! A group is `Empty`, `PreparingRebalance` (members (re)join; a join waits), then
//! `CompletingRebalance` (the new generation is out; the leader brings assignments) and
//! `Stable`. Joins and syncs that must wait are held as waiters (ids the async shell maps to its
//! pending answers); every call returns the answers it releases. Time only enters through
//! `now`: sessions expire and overdue rebalances complete in `tick`. Nothing here does I/O.

use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use tailstream_wire::Status;
use tailstream_wire::messages::{
    GroupHeartbeatRequest, GroupJoinRequest, GroupJoinResponse, GroupLeaveRequest, GroupMember,
    GroupMemberRef, GroupSyncRequest, GroupSyncResponse,
};

/// A pending join or sync, as the shell numbers them.
pub type Waiter = u64;

/// An answer released to a waiter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    Joined(GroupJoinResponse),
    Synced(GroupSyncResponse),
}

pub type Delivery = (Waiter, Result<Answer, Status>);

#[derive(Clone, Copy, Debug)]
pub struct GroupLimits {
    pub session_timeout_min: Duration,
    pub session_timeout_max: Duration,
    pub rebalance_timeout_max: Duration,
    /// A rebalance of a group that had no members waits at least this long for more to join.
    pub initial_rebalance_delay: Duration,
    pub groups_max: usize,
    pub members_max: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

#[derive(Debug)]
struct Member {
    client_id: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocols: Vec<(String, Bytes)>,
    last_heard: Instant,
    join_waiter: Option<Waiter>,
    sync_waiter: Option<Waiter>,
    assignment: Bytes,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, metadata)| metadata.clone())
            .unwrap_or_default()
    }
}

#[derive(Debug)]
struct Group {
    state: State,
    generation: u32,
    protocol_type: String,
    protocol: String,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// PreparingRebalance: completes when every member rejoined (not before `eligible_at`),
    /// or at `deadline` without those that did not.
    eligible_at: Instant,
    deadline: Instant,
}

impl Group {
    fn new(protocol_type: String, now: Instant) -> Self {
        Group {
            state: State::Empty,
            generation: 0,
            protocol_type,
            protocol: String::new(),
            leader: None,
            members: BTreeMap::new(),
            eligible_at: now,
            deadline: now,
        }
    }

    /// Protocols every member supports.
    fn common_protocols(&self) -> Vec<String> {
        let mut members = self.members.values();
        let Some(first) = members.next() else {
            return Vec::new();
        };
        let rest: Vec<&Member> = members.collect();
        first
            .protocols
            .iter()
            .map(|(name, _)| name.clone())
            .filter(|name| {
                rest.iter()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
            .collect()
    }

    /// Starts (or restarts) a rebalance: every member must rejoin by the deadline.
    fn prepare_rebalance(&mut self, now: Instant, limits: &GroupLimits, out: &mut Vec<Delivery>) {
        let initial = self.state == State::Empty;
        // Members waiting for assignments of a generation that is being replaced.
        for member in self.members.values_mut() {
            if let Some(waiter) = member.sync_waiter.take() {
                out.push((waiter, Err(Status::RebalanceInProgress)));
            }
        }
        if self.state != State::PreparingRebalance {
            let timeout = self
                .members
                .values()
                .map(|m| m.rebalance_timeout)
                .max()
                .unwrap_or(limits.initial_rebalance_delay)
                .min(limits.rebalance_timeout_max);
            self.deadline = now + timeout;
            self.eligible_at = if initial {
                now + limits.initial_rebalance_delay.min(timeout)
            } else {
                now
            };
            self.state = State::PreparingRebalance;
        }
    }

    /// Completes the rebalance if every member rejoined (and the initial delay is over), or
    /// the deadline passed (dropping the members that did not rejoin).
    fn try_complete(&mut self, now: Instant, out: &mut Vec<Delivery>) {
        if self.state != State::PreparingRebalance {
            return;
        }
        let all_joined = self.members.values().all(|m| m.join_waiter.is_some());
        if !(now >= self.deadline || (all_joined && now >= self.eligible_at)) {
            return;
        }
        self.members.retain(|_, m| m.join_waiter.is_some());
        self.generation = self.generation.wrapping_add(1);
        if self.members.is_empty() {
            self.state = State::Empty;
            self.leader = None;
            return;
        }
        self.protocol = self.vote();
        if !self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        let leader = self.leader.clone().unwrap_or_default();
        let everyone: Vec<GroupMember> = self
            .members
            .iter()
            .map(|(id, m)| GroupMember {
                member_id: id.clone(),
                metadata: m.metadata_for(&self.protocol),
            })
            .collect();
        for (id, member) in &mut self.members {
            member.assignment = Bytes::new();
            member.last_heard = now;
            if let Some(waiter) = member.join_waiter.take() {
                let response = GroupJoinResponse {
                    generation: self.generation,
                    protocol: self.protocol.clone(),
                    leader: leader.clone(),
                    member_id: id.clone(),
                    members: if *id == leader {
                        everyone.clone()
                    } else {
                        Vec::new()
                    },
                };
                out.push((waiter, Ok(Answer::Joined(response))));
            }
        }
        self.state = State::CompletingRebalance;
    }

    /// The protocol most members prefer among those all support (ties: the leader's order).
    fn vote(&self) -> String {
        let common = self.common_protocols();
        let mut votes: HashMap<&str, usize> = HashMap::new();
        for member in self.members.values() {
            if let Some((name, _)) = member.protocols.iter().find(|(n, _)| common.contains(n)) {
                *votes.entry(name.as_str()).or_default() += 1;
            }
        }
        common
            .iter()
            .max_by_key(|name| {
                let order = common.len() - common.iter().position(|c| c == *name).unwrap_or(0);
                (votes.get(name.as_str()).copied().unwrap_or(0), order)
            })
            .cloned()
            .unwrap_or_default()
    }

    fn remove(&mut self, member_id: &str, out: &mut Vec<Delivery>) -> bool {
        let Some(member) = self.members.remove(member_id) else {
            return false;
        };
        for waiter in [member.join_waiter, member.sync_waiter]
            .into_iter()
            .flatten()
        {
            out.push((waiter, Err(Status::UnknownMember)));
        }
        true
    }

    /// After members left or expired: the others must rebalance (or the group is empty).
    fn after_removal(&mut self, now: Instant, limits: &GroupLimits, out: &mut Vec<Delivery>) {
        if self.members.is_empty() {
            if self.state != State::Empty {
                self.generation = self.generation.wrapping_add(1);
            }
            self.state = State::Empty;
            self.leader = None;
            return;
        }
        self.prepare_rebalance(now, limits, out);
        self.try_complete(now, out);
    }
}

/// Every group's membership.
#[derive(Debug)]
pub struct Groups {
    groups: HashMap<String, Group>,
    limits: GroupLimits,
    /// The coordinator term these groups live in, part of every member id: membership is not
    /// kept across a failover, and a member of an earlier leader's group must find its id
    /// unknown to the next one, never taken by another client (its heartbeats and commits
    /// would pass for that client's).
    term: u64,
    next_member: u64,
}

impl Groups {
    pub fn new(limits: GroupLimits, term: u64) -> Self {
        Self {
            groups: HashMap::new(),
            limits,
            term,
            next_member: 0,
        }
    }

    pub fn join(
        &mut self,
        request: GroupJoinRequest,
        waiter: Waiter,
        now: Instant,
    ) -> Vec<Delivery> {
        let mut out = Vec::new();
        let session = Duration::from_millis(u64::from(request.session_timeout_ms));
        let refuse = |status| vec![(waiter, Err(status))];
        if request.group.is_empty() || request.protocols.is_empty() {
            return refuse(Status::InvalidArgument);
        }
        if session < self.limits.session_timeout_min || session > self.limits.session_timeout_max {
            return refuse(Status::InvalidSessionTimeout);
        }
        if !self.groups.contains_key(&request.group) && self.groups.len() >= self.limits.groups_max
        {
            return refuse(Status::GroupFull);
        }
        let limits = self.limits;
        let group = self
            .groups
            .entry(request.group.clone())
            .or_insert_with(|| Group::new(request.protocol_type.clone(), now));
        if group.members.is_empty() {
            group.protocol_type = request.protocol_type.clone();
        } else {
            let shares_one = group
                .common_protocols()
                .iter()
                .any(|p| request.protocols.iter().any(|offered| offered.name == *p));
            if group.protocol_type != request.protocol_type || !shares_one {
                return refuse(Status::InconsistentGroupProtocol);
            }
        }
        let member_id = if request.member_id.is_empty() {
            if group.members.len() >= limits.members_max {
                return refuse(Status::GroupFull);
            }
            self.next_member += 1;
            format!(
                "{}-{}.{}",
                sanitize(&request.client_id),
                self.term,
                self.next_member
            )
        } else if group.members.contains_key(&request.member_id) {
            request.member_id.clone()
        } else {
            return refuse(Status::UnknownMember);
        };
        let member = group.members.entry(member_id).or_insert_with(|| Member {
            client_id: request.client_id.clone(),
            session_timeout: session,
            rebalance_timeout: session,
            protocols: Vec::new(),
            last_heard: now,
            join_waiter: None,
            sync_waiter: None,
            assignment: Bytes::new(),
        });
        member.client_id = request.client_id;
        member.session_timeout = session;
        // No rebalance timeout (a Kafka JoinGroup v0): the session timeout stands in.
        member.rebalance_timeout = match request.rebalance_timeout_ms {
            0 => session,
            ms => Duration::from_millis(u64::from(ms)),
        }
        .min(limits.rebalance_timeout_max);
        member.protocols = request
            .protocols
            .into_iter()
            .map(|p| (p.name, p.metadata))
            .collect();
        member.last_heard = now;
        if let Some(earlier) = member.join_waiter.replace(waiter) {
            out.push((earlier, Err(Status::RebalanceInProgress)));
        }
        group.prepare_rebalance(now, &limits, &mut out);
        group.try_complete(now, &mut out);
        out
    }

    pub fn sync(
        &mut self,
        request: GroupSyncRequest,
        waiter: Waiter,
        now: Instant,
    ) -> Vec<Delivery> {
        let mut out = Vec::new();
        let Some(group) = self.groups.get_mut(&request.group) else {
            return vec![(waiter, Err(Status::UnknownMember))];
        };
        let Some(member) = group.members.get_mut(&request.member_id) else {
            return vec![(waiter, Err(Status::UnknownMember))];
        };
        member.last_heard = now;
        if request.generation != group.generation {
            return vec![(waiter, Err(Status::IllegalGeneration))];
        }
        match group.state {
            State::Empty => return vec![(waiter, Err(Status::UnknownMember))],
            State::PreparingRebalance => {
                return vec![(waiter, Err(Status::RebalanceInProgress))];
            }
            State::Stable => {
                let assignment = member.assignment.clone();
                return vec![(waiter, Ok(Answer::Synced(GroupSyncResponse { assignment })))];
            }
            State::CompletingRebalance => {}
        }
        if let Some(earlier) = member.sync_waiter.replace(waiter) {
            out.push((earlier, Err(Status::RebalanceInProgress)));
        }
        if group.leader.as_deref() != Some(request.member_id.as_str()) {
            return out;
        }
        for assignment in request.assignments {
            if let Some(member) = group.members.get_mut(&assignment.member_id) {
                member.assignment = assignment.assignment;
            }
        }
        group.state = State::Stable;
        for member in group.members.values_mut() {
            if let Some(waiter) = member.sync_waiter.take() {
                let assignment = member.assignment.clone();
                out.push((waiter, Ok(Answer::Synced(GroupSyncResponse { assignment }))));
            }
        }
        out
    }

    pub fn heartbeat(
        &mut self,
        request: &GroupHeartbeatRequest,
        now: Instant,
    ) -> Result<(), Status> {
        let group = self
            .groups
            .get_mut(&request.group)
            .ok_or(Status::UnknownMember)?;
        let member = group
            .members
            .get_mut(&request.member_id)
            .ok_or(Status::UnknownMember)?;
        member.last_heard = now;
        if request.generation != group.generation {
            return Err(Status::IllegalGeneration);
        }
        match group.state {
            State::PreparingRebalance => Err(Status::RebalanceInProgress),
            State::Empty => Err(Status::UnknownMember),
            State::CompletingRebalance | State::Stable => Ok(()),
        }
    }

    pub fn leave(&mut self, request: &GroupLeaveRequest, now: Instant) -> Vec<Delivery> {
        let mut out = Vec::new();
        let limits = self.limits;
        if let Some(group) = self.groups.get_mut(&request.group) {
            let mut removed = false;
            for member in &request.member_ids {
                removed |= group.remove(member, &mut out);
            }
            if removed {
                group.after_removal(now, &limits, &mut out);
            }
        }
        out
    }

    /// Whether `member` may commit offsets for `group` now: a member at the group's
    /// generation, or anyone (`None`) while the group has no members. As in Kafka, members
    /// commit while a rebalance is prepared (what they processed before giving up their
    /// partitions) but not between a generation's join and its assignments.
    pub fn check_commit(&self, group: &str, member: Option<&GroupMemberRef>) -> Result<(), Status> {
        let current = self.groups.get(group);
        match (current, member) {
            (None, None) => Ok(()),
            (Some(g), None) if g.members.is_empty() => Ok(()),
            (Some(_), None) => Err(Status::UnknownMember),
            (None, Some(_)) => Err(Status::UnknownMember),
            (Some(g), Some(m)) => {
                if !g.members.contains_key(&m.member_id) {
                    Err(Status::UnknownMember)
                } else if m.generation != g.generation {
                    Err(Status::IllegalGeneration)
                } else if g.state == State::CompletingRebalance {
                    Err(Status::RebalanceInProgress)
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Expires members whose session ran out and completes overdue rebalances; forgets
    /// groups left empty.
    pub fn tick(&mut self, now: Instant) -> Vec<Delivery> {
        let mut out = Vec::new();
        let limits = self.limits;
        for group in self.groups.values_mut() {
            // A member waiting in a join is heard from by that join.
            let expired: Vec<String> = group
                .members
                .iter()
                .filter(|(_, m)| m.join_waiter.is_none() && now >= m.last_heard + m.session_timeout)
                .map(|(id, _)| id.clone())
                .collect();
            for member in &expired {
                tracing::info!(member, "group member's session expired");
                group.remove(member, &mut out);
            }
            if !expired.is_empty() {
                group.after_removal(now, &limits, &mut out);
            }
            group.try_complete(now, &mut out);
        }
        self.groups
            .retain(|_, g| !(g.state == State::Empty && g.members.is_empty()));
        out
    }

    /// The next instant after `now` at which `tick` has something to do.
    pub fn next_deadline(&self, now: Instant) -> Option<Instant> {
        self.groups
            .values()
            .flat_map(|g| {
                let rebalance = (g.state == State::PreparingRebalance)
                    .then_some([g.eligible_at, g.deadline])
                    .into_iter()
                    .flatten();
                let sessions = g
                    .members
                    .values()
                    .filter(|m| m.join_waiter.is_none())
                    .map(|m| m.last_heard + m.session_timeout);
                rebalance.chain(sessions)
            })
            .filter(|at| *at > now)
            .min()
    }

    /// Whether `group` has members (or is forming).
    pub fn has_group(&self, group: &str) -> bool {
        self.groups.contains_key(group)
    }

    /// Whether `group` has members now (a group left empty is forgotten at the next tick).
    pub fn has_members(&self, group: &str) -> bool {
        self.groups
            .get(group)
            .is_some_and(|g| !g.members.is_empty())
    }

    /// Member counts by group (for metrics and the admin page).
    pub fn sizes(&self) -> Vec<(String, usize, u32)> {
        self.groups
            .iter()
            .map(|(name, g)| (name.clone(), g.members.len(), g.generation))
            .collect()
    }
}

/// A member id built from a client id: printable and bounded.
fn sanitize(client_id: &str) -> String {
    let cleaned: String = client_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(64)
        .collect();
    if cleaned.is_empty() {
        "member".into()
    } else {
        cleaned
    }
}

#[path = "membership_describe.rs"]
mod describe;

#[cfg(test)]
#[path = "membership_tests.rs"]
mod tests;
