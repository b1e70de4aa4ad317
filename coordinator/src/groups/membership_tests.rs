use super::*;
use tailstream_wire::messages::{GroupAssignment, GroupPhase, GroupProtocol};

const SECOND: Duration = Duration::from_secs(1);

fn limits() -> GroupLimits {
    GroupLimits {
        session_timeout_min: Duration::from_millis(100),
        session_timeout_max: Duration::from_secs(600),
        rebalance_timeout_max: Duration::from_secs(60),
        initial_rebalance_delay: Duration::from_millis(300),
        groups_max: 8,
        members_max: 8,
    }
}

fn join_request(member: &str, protocols: &[&str]) -> GroupJoinRequest {
    GroupJoinRequest {
        group: "g".into(),
        member_id: member.into(),
        client_id: "client".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 5_000,
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|name| GroupProtocol {
                name: (*name).into(),
                metadata: Bytes::from(format!("{member}:{name}")),
            })
            .collect(),
        owner: Default::default(),
    }
}

fn joined(deliveries: &[Delivery], waiter: Waiter) -> GroupJoinResponse {
    match deliveries.iter().find(|(w, _)| *w == waiter) {
        Some((_, Ok(Answer::Joined(response)))) => response.clone(),
        other => panic!("waiter {waiter}: {other:?} in {deliveries:?}"),
    }
}

fn synced(deliveries: &[Delivery], waiter: Waiter) -> Bytes {
    match deliveries.iter().find(|(w, _)| *w == waiter) {
        Some((_, Ok(Answer::Synced(response)))) => response.assignment.clone(),
        other => panic!("waiter {waiter}: {other:?}"),
    }
}

fn heartbeat(
    groups: &mut Groups,
    member: &str,
    generation: u32,
    now: Instant,
) -> Result<(), Status> {
    groups.heartbeat(
        &GroupHeartbeatRequest {
            group: "g".into(),
            generation,
            member_id: member.into(),
        },
        now,
    )
}

/// Two members join an empty group and complete a generation; returns their ids (leader
/// first).
fn two_members(groups: &mut Groups, now: Instant) -> (String, String) {
    assert!(
        groups
            .join(join_request("", &["range", "roundrobin"]), 1, now)
            .is_empty()
    );
    assert!(
        groups
            .join(join_request("", &["roundrobin"]), 2, now)
            .is_empty()
    );
    assert!(
        groups.tick(now + Duration::from_millis(100)).is_empty(),
        "initial delay"
    );
    let out = groups.tick(now + Duration::from_millis(300));
    let (a, b) = (joined(&out, 1), joined(&out, 2));
    assert_eq!((a.generation, b.generation), (1, 1));
    assert_eq!(a.protocol, "roundrobin", "the one both support");
    let (leader, follower) = if a.leader == a.member_id {
        (a, b)
    } else {
        (b, a)
    };
    assert_eq!(leader.members.len(), 2, "the leader sees every member");
    assert!(follower.members.is_empty());
    assert_eq!(follower.leader, leader.member_id);
    (leader.member_id, follower.member_id)
}

fn sync_request(member: &str, generation: u32, assignments: &[(&str, &str)]) -> GroupSyncRequest {
    GroupSyncRequest {
        group: "g".into(),
        generation,
        member_id: member.into(),
        assignments: assignments
            .iter()
            .map(|(m, a)| GroupAssignment {
                member_id: (*m).into(),
                assignment: Bytes::from(a.to_string()),
            })
            .collect(),
    }
}

#[test]
fn members_join_the_leader_assigns_and_each_member_gets_its_own_assignment() {
    let mut groups = Groups::new(limits(), 1);
    let now = Instant::now();
    let (leader, follower) = two_members(&mut groups, now);
    // The follower syncs first and waits for the leader's assignments.
    let t = now + SECOND;
    assert!(
        groups
            .sync(sync_request(&follower, 1, &[]), 10, t)
            .is_empty()
    );
    let out = groups.sync(
        sync_request(&leader, 1, &[(&leader, "p0,p1"), (&follower, "p2,p3")]),
        11,
        t,
    );
    assert_eq!(synced(&out, 10), Bytes::from("p2,p3"));
    assert_eq!(synced(&out, 11), Bytes::from("p0,p1"));
    assert_eq!(heartbeat(&mut groups, &follower, 1, t), Ok(()));
    // A sync in the stable group answers at once with the member's assignment.
    let out = groups.sync(sync_request(&follower, 1, &[]), 12, t);
    assert_eq!(synced(&out, 12), Bytes::from("p2,p3"));
    assert_eq!(
        groups.check_commit(
            "g",
            Some(&GroupMemberRef {
                member_id: leader,
                generation: 1
            })
        ),
        Ok(())
    );
}

#[test]
fn a_new_member_makes_the_others_rejoin_into_the_next_generation() {
    let mut groups = Groups::new(limits(), 1);
    let now = Instant::now();
    let (leader, follower) = two_members(&mut groups, now);
    let t = now + SECOND;
    groups.sync(sync_request(&leader, 1, &[]), 10, t);
    assert!(
        groups
            .join(join_request("", &["roundrobin"]), 3, t)
            .is_empty()
    );
    assert_eq!(
        heartbeat(&mut groups, &leader, 1, t),
        Err(Status::RebalanceInProgress)
    );
    // Members commit what they processed before they give up their partitions.
    let commit = |groups: &Groups, member: &str, generation| {
        groups.check_commit(
            "g",
            Some(&GroupMemberRef {
                member_id: member.into(),
                generation,
            }),
        )
    };
    assert_eq!(commit(&groups, &follower, 1), Ok(()));
    assert!(
        groups
            .join(join_request(&leader, &["roundrobin"]), 4, t)
            .is_empty()
    );
    let out = groups.join(join_request(&follower, &["roundrobin"]), 5, t);
    let answers: Vec<_> = [3, 4, 5].iter().map(|w| joined(&out, *w)).collect();
    assert!(answers.iter().all(|a| a.generation == 2));
    assert_eq!(answers[1].leader, leader, "the leader stays the leader");
    assert_eq!(answers[1].members.len(), 3);
    assert_eq!(
        heartbeat(&mut groups, &follower, 1, t),
        Err(Status::IllegalGeneration)
    );
    // Between the join and the leader's assignments: no commits; an old generation never.
    assert_eq!(
        commit(&groups, &follower, 2),
        Err(Status::RebalanceInProgress)
    );
    assert_eq!(
        commit(&groups, &follower, 1),
        Err(Status::IllegalGeneration)
    );
}

#[test]
fn a_member_that_leaves_or_falls_silent_is_dropped_and_the_rest_rebalance() {
    let mut groups = Groups::new(limits(), 1);
    let now = Instant::now();
    let (leader, follower) = two_members(&mut groups, now);
    let t = now + SECOND;
    groups.leave(
        &GroupLeaveRequest {
            group: "g".into(),
            member_ids: vec![follower.clone()],
        },
        t,
    );
    assert_eq!(
        heartbeat(&mut groups, &leader, 1, t),
        Err(Status::RebalanceInProgress)
    );
    let out = groups.join(join_request(&leader, &["roundrobin"]), 7, t);
    let alone = joined(&out, 7);
    assert_eq!((alone.generation, alone.members.len()), (2, 1));
    assert_eq!(
        heartbeat(&mut groups, &follower, 2, t),
        Err(Status::UnknownMember)
    );

    // A second member joins, then falls silent past its session timeout.
    let t = t + SECOND;
    groups.join(join_request("", &["roundrobin"]), 8, t);
    let out = groups.join(join_request(&leader, &["roundrobin"]), 9, t);
    let silent = joined(&out, 8).member_id;
    assert_eq!(joined(&out, 9).generation, 3);
    let late = t + Duration::from_secs(11);
    assert_eq!(
        heartbeat(&mut groups, &leader, 3, t + Duration::from_secs(9)),
        Ok(())
    );
    assert!(groups.next_deadline(t).is_some());
    let out = groups.tick(late);
    assert!(out.is_empty());
    assert_eq!(
        heartbeat(&mut groups, &silent, 3, late),
        Err(Status::UnknownMember)
    );
    assert_eq!(
        heartbeat(&mut groups, &leader, 3, late),
        Err(Status::RebalanceInProgress)
    );
}

#[test]
fn a_rebalance_completes_at_its_deadline_without_those_that_did_not_rejoin() {
    let mut groups = Groups::new(limits(), 1);
    let now = Instant::now();
    let (leader, follower) = two_members(&mut groups, now);
    let t = now + SECOND;
    // The leader rejoins (a rebalance); the follower does not come back in time.
    assert!(
        groups
            .join(join_request(&leader, &["roundrobin"]), 20, t)
            .is_empty()
    );
    assert!(groups.tick(t + Duration::from_secs(4)).is_empty());
    let out = groups.tick(t + Duration::from_secs(5));
    let answer = joined(&out, 20);
    assert_eq!((answer.generation, answer.members.len()), (2, 1));
    assert_eq!(
        heartbeat(&mut groups, &follower, 1, t),
        Err(Status::UnknownMember)
    );
}

#[test]
fn joins_that_do_not_fit_the_group_are_refused() {
    let mut groups = Groups::new(limits(), 1);
    let now = Instant::now();
    two_members(&mut groups, now);
    let out = groups.join(join_request("", &["sticky"]), 30, now);
    assert_eq!(out, vec![(30, Err(Status::InconsistentGroupProtocol))]);
    let mut other_type = join_request("", &["roundrobin"]);
    other_type.protocol_type = "connect".into();
    assert_eq!(
        groups.join(other_type, 31, now),
        vec![(31, Err(Status::InconsistentGroupProtocol))]
    );
    let mut quick = join_request("", &["roundrobin"]);
    quick.session_timeout_ms = 1;
    assert_eq!(
        groups.join(quick, 32, now),
        vec![(32, Err(Status::InvalidSessionTimeout))]
    );
    assert_eq!(
        groups.join(join_request("nobody", &["roundrobin"]), 33, now),
        vec![(33, Err(Status::UnknownMember))]
    );
    assert_eq!(
        groups.check_commit("g", None),
        Err(Status::UnknownMember),
        "the group has members"
    );
    assert_eq!(groups.check_commit("standalone", None), Ok(()));
}

#[test]
fn a_rejoin_while_waiting_replaces_the_earlier_join() {
    let mut groups = Groups::new(limits(), 1);
    let now = Instant::now();
    groups.join(join_request("", &["range"]), 1, now);
    let out = groups.tick(now + SECOND);
    let member = joined(&out, 1).member_id;
    let out = groups.join(join_request(&member, &["range"]), 2, now + SECOND);
    // Alone in the group: its rejoin completes the next generation at once.
    assert_eq!(joined(&out, 2).generation, 2);
    assert!(
        groups
            .join(join_request("", &["range"]), 3, now + SECOND)
            .is_empty()
    );
    let out = groups.join(join_request(&member, &["range"]), 4, now + SECOND);
    assert_eq!(joined(&out, 4).generation, 3);
    // A rebalance waits for the newcomer; a second join of the same member meanwhile
    // replaces its first, which is told to rejoin.
    assert!(
        groups
            .join(join_request(&member, &["range"]), 5, now + SECOND)
            .is_empty()
    );
    let out = groups.join(join_request(&member, &["range"]), 6, now + SECOND);
    assert_eq!(out, vec![(5, Err(Status::RebalanceInProgress))]);
}

#[test]
fn member_ids_of_a_later_term_never_repeat_an_earlier_terms() {
    // Membership is not kept across a coordinator failover: a member of the old leader's group
    // must be unknown to the new one, not mistaken for a newcomer that got the same id.
    let now = Instant::now();
    let mut old = Groups::new(limits(), 4);
    old.join(join_request("", &["range"]), 1, now);
    let old_member = joined(&old.tick(now + SECOND), 1).member_id;
    let mut new = Groups::new(limits(), 5);
    new.join(join_request("", &["range"]), 1, now);
    let new_member = joined(&new.tick(now + SECOND), 1).member_id;
    assert_ne!(old_member, new_member);
    let heartbeat = GroupHeartbeatRequest {
        group: "g".into(),
        generation: 1,
        member_id: old_member,
    };
    assert_eq!(
        new.heartbeat(&heartbeat, now + SECOND),
        Err(Status::UnknownMember)
    );
}

#[test]
fn a_described_group_shows_its_phase_protocol_and_each_members_metadata_and_assignment() {
    let mut groups = Groups::new(limits(), 1);
    let now = Instant::now();
    assert_eq!(groups.describe("g"), None, "unknown before anyone joins");
    let (leader, follower) = two_members(&mut groups, now);
    let forming = groups.describe("g").unwrap();
    assert_eq!(forming.phase, GroupPhase::CompletingRebalance);
    assert_eq!(
        (forming.protocol_type.as_str(), forming.protocol.as_str()),
        ("consumer", "roundrobin")
    );
    let t = now + SECOND;
    groups.sync(
        sync_request(&leader, 1, &[(&leader, "p0"), (&follower, "p1")]),
        10,
        t,
    );
    let stable = groups.describe("g").unwrap();
    assert_eq!(stable.phase, GroupPhase::Stable);
    let member = |id: &str| stable.members.iter().find(|m| m.member_id == id).unwrap();
    assert_eq!(member(&follower).assignment, Bytes::from("p1"));
    assert_eq!(member(&leader).client_id, "client");
    assert!(
        member(&leader).metadata.ends_with(b":roundrobin"),
        "the metadata for the chosen protocol"
    );
}
