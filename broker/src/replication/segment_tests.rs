//! `ReplicatedSegment` against the scenarios of Tailwind's write path and failure handling.
use super::*;
use tailstream_wire::{GroupId, LogId, SegmentId, StreamId, StreamletId};

fn id() -> ReplicaId {
    ReplicaId {
        stream: StreamId(1),
        streamlet: StreamletId(0),
        log: LogId(0),
        group: GroupId(0),
        segment: SegmentId(3),
    }
}

fn server(index: u32) -> ServerId {
    ServerId::new(index, 1)
}

/// Assigns backups 1..=R and opens every slot.
fn opened(replicas: usize) -> ReplicatedSegment {
    let mut seg = ReplicatedSegment::new(id(), 1 << 20, replicas);
    for action in seg.next_actions(4) {
        let Action::NeedBackup { slot, .. } = action else {
            panic!("{action:?}")
        };
        let open = seg.assign(slot, server(slot as u32 + 1)).unwrap();
        assert!(matches!(
            open,
            Action::Open {
                epoch: ReplicaEpoch(1),
                filling: false,
                ..
            }
        ));
        open_answered(&mut seg, slot, 100 + slot as u64);
    }
    seg
}

/// The replica `slot` uses now: its backup and key.
fn current(seg: &ReplicatedSegment, slot: usize) -> (ServerId, u64) {
    let s = &seg.slots()[slot];
    (s.backup.expect("the slot has a backup"), s.key)
}

/// `slot`'s backup answers its open with `key`.
fn open_answered(seg: &mut ReplicatedSegment, slot: usize, key: u64) {
    let backup = seg.slots()[slot].backup.expect("the slot has a backup");
    seg.opened(slot, backup, key);
}

/// The write ending at `end` to `slot`'s current replica completed.
fn done(seg: &mut ReplicatedSegment, slot: usize, end: u32) {
    let (backup, key) = current(seg, slot);
    seg.write_done(slot, backup, key, end);
}

/// `slot`'s current replica was closed.
fn closed(seg: &mut ReplicatedSegment, slot: usize) {
    let (backup, key) = current(seg, slot);
    seg.closed_ok(slot, backup, key);
}

fn writes(actions: &[Action]) -> Vec<(usize, u32, u32)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Write { slot, from, to, .. } => Some((*slot, *from, *to)),
            _ => None,
        })
        .collect()
}

#[test]
fn appends_during_a_write_are_coalesced_and_commit_needs_every_replica() {
    let mut seg = opened(3);
    seg.appended(100);
    assert_eq!(
        writes(&seg.next_actions(1)),
        vec![(0, 0, 100), (1, 0, 100), (2, 0, 100)]
    );
    // Three appends while the first write is in flight: one write carries them all.
    seg.appended(150);
    seg.appended(220);
    seg.appended(300);
    assert!(
        writes(&seg.next_actions(1)).is_empty(),
        "one write in flight per replica"
    );
    done(&mut seg, 0, 100);
    done(&mut seg, 1, 100);
    assert_eq!(seg.committed(), 0, "the third replica has not acknowledged");
    done(&mut seg, 2, 100);
    assert_eq!(seg.committed(), 100);
    assert_eq!(
        writes(&seg.next_actions(1)),
        vec![(0, 100, 300), (1, 100, 300), (2, 100, 300)]
    );
}

#[test]
fn a_sealed_segment_closes_each_replica_once_it_has_everything() {
    let mut seg = opened(2);
    seg.appended(64);
    seg.next_actions(4);
    seg.seal(64);
    done(&mut seg, 0, 64);
    let actions = seg.next_actions(4);
    assert_eq!(
        actions,
        vec![Action::Close {
            slot: 0,
            backup: server(1),
            key: 100,
            length: 64
        }]
    );
    done(&mut seg, 1, 64);
    closed(&mut seg, 0);
    let actions = seg.next_actions(4);
    assert_eq!(
        actions,
        vec![Action::Close {
            slot: 1,
            backup: server(2),
            key: 101,
            length: 64
        }]
    );
    assert!(!seg.is_done());
    closed(&mut seg, 1);
    assert!(seg.is_done() && seg.next_actions(4).is_empty());
}

#[test]
fn a_lost_replica_freezes_the_commit_until_its_filled_replacement_is_current() {
    let mut seg = opened(3);
    seg.appended(100);
    seg.next_actions(4);
    for slot in 0..3 {
        done(&mut seg, slot, 100);
    }
    assert_eq!(seg.committed(), 100);
    seg.appended(200);
    seg.next_actions(4);
    done(&mut seg, 0, 200);
    done(&mut seg, 1, 200);
    // Backup 3 dies before acknowledging 200.
    assert!(seg.backup_lost(server(3)));
    // Its late answer is for a replica the slot no longer uses.
    seg.write_done(2, server(3), 102, 200);
    assert_eq!(seg.committed(), 100, "nothing commits without all R");
    let actions = seg.next_actions(4);
    let exclude = match &actions[..] {
        [Action::NeedBackup { slot: 2, exclude }] => exclude.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(exclude, vec![server(1), server(2)]);
    let open = seg.assign(2, server(4)).unwrap();
    assert_eq!(
        open,
        Action::Open {
            slot: 2,
            backup: server(4),
            epoch: ReplicaEpoch(2),
            filling: true
        }
    );
    open_answered(&mut seg, 2, 999);
    // The replacement is filled from byte 0.
    assert_eq!(writes(&seg.next_actions(4)), vec![(2, 0, 200)]);
    done(&mut seg, 2, 200);
    assert_eq!(seg.committed(), 100, "a filling replica does not count yet");
    let rounds: Vec<_> = seg
        .next_actions(4)
        .into_iter()
        .filter(|a| matches!(a, Action::SetEpoch { .. }))
        .collect();
    assert_eq!(rounds.len(), 3);
    assert!(rounds.iter().all(|a| matches!(
        a,
        Action::SetEpoch {
            epoch: ReplicaEpoch(2),
            ..
        }
    )));
    seg.epoch_set(ReplicaEpoch(2));
    seg.epoch_set(ReplicaEpoch(2));
    assert_eq!(seg.committed(), 100);
    seg.epoch_set(ReplicaEpoch(2));
    assert_eq!(
        seg.committed(),
        200,
        "current at epoch 2 on every replica: commits resume"
    );
    assert!(seg.next_actions(4).is_empty());
}

#[test]
fn a_closed_segment_on_a_lost_backup_is_copied_to_a_new_one_and_closed() {
    let mut seg = ReplicatedSegment::closed(
        id(),
        500,
        ReplicaEpoch(1),
        &[server(1), server(2), server(3)],
    );
    assert!(seg.is_done());
    seg.backup_lost(server(2));
    assert!(!seg.is_done());
    let actions = seg.next_actions(4);
    assert!(matches!(&actions[..], [Action::NeedBackup { slot: 1, .. }]));
    seg.assign(1, server(5));
    open_answered(&mut seg, 1, 7);
    assert_eq!(writes(&seg.next_actions(4)), vec![(1, 0, 500)]);
    done(&mut seg, 1, 500);
    let actions = seg.next_actions(4);
    assert!(actions.contains(&Action::Close {
        slot: 1,
        backup: server(5),
        key: 7,
        length: 500
    }));
    assert_eq!(
        actions
            .iter()
            .filter(|a| matches!(
                a,
                Action::SetEpoch {
                    epoch: ReplicaEpoch(2),
                    ..
                }
            ))
            .count(),
        3
    );
    closed(&mut seg, 1);
    for _ in 0..3 {
        seg.epoch_set(ReplicaEpoch(2));
    }
    assert!(seg.is_done());
}

#[test]
fn an_early_completion_acknowledges_nothing_until_the_earlier_write_completes() {
    let mut seg = opened(1);
    seg.appended(10);
    seg.next_actions(4);
    seg.appended(30);
    seg.next_actions(4);
    done(&mut seg, 0, 30);
    assert_eq!(seg.committed(), 0);
    done(&mut seg, 0, 10);
    assert_eq!(seg.committed(), 30);
}

#[test]
fn stale_completions_and_events_for_other_states_are_ignored() {
    let mut seg = opened(1);
    seg.appended(10);
    seg.next_actions(4);
    done(&mut seg, 0, 99);
    assert_eq!(seg.committed(), 0);
    closed(&mut seg, 0);
    seg.epoch_set(ReplicaEpoch(7));
    done(&mut seg, 0, 10);
    assert_eq!(seg.committed(), 10);
}

/// Opens the first `available` slots on backups 1..; the rest have no backup to be had.
fn short_of_backups(replicas: usize, min_insync: usize, available: usize) -> ReplicatedSegment {
    let mut seg = ReplicatedSegment::new(id(), 1 << 20, replicas).with_min_insync(min_insync);
    for action in seg.next_actions(4) {
        let Action::NeedBackup { slot, .. } = action else {
            panic!("{action:?}")
        };
        if slot < available {
            seg.assign(slot, server(slot as u32 + 1)).unwrap();
            open_answered(&mut seg, slot, 100 + slot as u64);
        } else {
            seg.unavailable(slot);
        }
    }
    seg
}

/// Issue 20, case 3: R = 3 on four brokers, one of them gone. The segment commits on the two
/// copies it can have, says so, and heals once a third backup appears: the newcomer fills as
/// a replacement at a higher epoch and counts only once every copy has that epoch.
#[test]
fn with_too_few_brokers_a_segment_commits_on_min_insync_copies_and_heals() {
    let mut seg = short_of_backups(3, 2, 2);
    assert!(seg.can_reach_min_insync());
    seg.appended(100);
    assert_eq!(writes(&seg.next_actions(4)), vec![(0, 0, 100), (1, 0, 100)]);
    done(&mut seg, 0, 100);
    assert_eq!(seg.committed(), 0, "both copies that count must have it");
    done(&mut seg, 1, 100);
    assert_eq!(seg.committed(), 100);
    assert_eq!(seg.in_sync(), 2);
    // A broker comes back: the slot is filled as a replacement; the commit waits for it.
    let open = seg.assign(2, server(3)).unwrap();
    assert!(matches!(
        open,
        Action::Open {
            epoch: ReplicaEpoch(2),
            filling: true,
            ..
        }
    ));
    open_answered(&mut seg, 2, 102);
    seg.appended(150);
    let actions = seg.next_actions(4);
    assert!(writes(&actions).contains(&(2, 0, 150)), "{actions:?}");
    done(&mut seg, 0, 150);
    done(&mut seg, 1, 150);
    assert_eq!(seg.committed(), 100, "a replacement is being made");
    done(&mut seg, 2, 150);
    let rounds: Vec<_> = seg
        .next_actions(4)
        .into_iter()
        .filter(|a| {
            matches!(
                a,
                Action::SetEpoch {
                    epoch: ReplicaEpoch(2),
                    ..
                }
            )
        })
        .collect();
    assert_eq!(rounds.len(), 3, "every copy gets the new epoch");
    for _ in 0..3 {
        seg.epoch_set(ReplicaEpoch(2));
    }
    assert_eq!((seg.committed(), seg.in_sync()), (150, 3));
}

#[test]
fn below_min_insync_nothing_commits() {
    let mut seg = short_of_backups(3, 2, 1);
    assert!(!seg.can_reach_min_insync());
    seg.appended(100);
    seg.next_actions(4);
    done(&mut seg, 0, 100);
    assert_eq!(seg.committed(), 0);
}

/// A backup is lost and no other broker can replace it: after a pause while the primary
/// looks for one, the survivors commit alone; the sealed segment closes on them and waits,
/// complete but short, for a backup to come back.
#[test]
fn a_lost_backup_with_none_to_replace_it_leaves_the_survivors_committing() {
    let mut seg = short_of_backups(2, 1, 2);
    seg.appended(100);
    seg.next_actions(4);
    done(&mut seg, 0, 100);
    done(&mut seg, 1, 100);
    assert_eq!(seg.committed(), 100);
    seg.appended(200);
    seg.next_actions(4);
    seg.failed(1);
    done(&mut seg, 0, 200);
    assert_eq!(seg.committed(), 100, "frozen while a backup is looked for");
    let wanted = seg.next_actions(4);
    assert!(matches!(wanted[..], [Action::NeedBackup { slot: 1, .. }]));
    seg.unavailable(1);
    assert_eq!(
        seg.committed(),
        100,
        "the lost copy may live on at epoch 1: the survivor moves past it first"
    );
    assert!(!seg.epoch_settled());
    let raise = seg.next_actions(4);
    assert!(
        raise.iter().any(|a| matches!(
            a,
            Action::SetEpoch {
                slot: 0,
                epoch: ReplicaEpoch(2),
                ..
            }
        )),
        "{raise:?}"
    );
    seg.epoch_set(ReplicaEpoch(2));
    assert_eq!(
        seg.committed(),
        200,
        "none to be had: the survivor suffices, at a higher epoch than the lost copy"
    );
    assert!(seg.epoch_settled());
    assert_eq!(seg.epoch(), ReplicaEpoch(2));
    seg.seal(200);
    let close = seg.next_actions(4);
    assert!(
        close
            .iter()
            .any(|a| matches!(a, Action::Close { slot: 0, .. })),
        "{close:?}"
    );
    closed(&mut seg, 0);
    assert!(!seg.is_done() && seg.is_closed_short());
}

/// A recovered head with fewer backups than R: the copies that can be made fill, get the new
/// epoch and count; the missing one does not hold the round up.
#[test]
fn a_recovered_segment_counts_the_copies_it_could_make() {
    let mut seg =
        ReplicatedSegment::recovered(id(), 500, ReplicaEpoch(3), &[], 2).with_min_insync(1);
    for action in seg.next_actions(4) {
        let Action::NeedBackup { slot, .. } = action else {
            panic!("{action:?}")
        };
        if slot == 0 {
            seg.assign(0, server(1)).unwrap();
            open_answered(&mut seg, 0, 7);
        } else {
            seg.unavailable(slot);
        }
    }
    let actions = seg.next_actions(4);
    assert_eq!(writes(&actions), vec![(0, 0, 500)]);
    done(&mut seg, 0, 500);
    let actions = seg.next_actions(4);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Close { slot: 0, .. }))
    );
    let round: Vec<_> = actions
        .into_iter()
        .filter(|a| matches!(a, Action::SetEpoch { .. }))
        .collect();
    assert_eq!(
        round.len(),
        1,
        "only the copy that exists is told the epoch"
    );
    closed(&mut seg, 0);
    seg.epoch_set(ReplicaEpoch(4));
    assert_eq!(seg.in_sync(), 1);
    assert!(seg.is_closed_short());
}

/// Issue 21, finding 4: completions were matched by their end only, so a late answer from a
/// lost replica counted for the replica that replaced it, at an end whose write to the
/// replacement was still in flight (or for its close). Here the replacement is even on the
/// same backup: only the key tells them apart.
#[test]
fn a_late_answer_from_a_replaced_replica_never_counts_for_its_replacement() {
    let mut seg = opened(2);
    seg.appended(100);
    assert_eq!(writes(&seg.next_actions(4)), vec![(0, 0, 100), (1, 0, 100)]);
    let (old_backup, old_key) = current(&seg, 1);
    done(&mut seg, 0, 100);
    // Slot 1's replica is lost (a write error), and reopened on the same backup.
    seg.failed(1);
    assert!(matches!(
        seg.next_actions(4)[..],
        [Action::NeedBackup { slot: 1, .. }]
    ));
    seg.assign(1, old_backup).unwrap();
    open_answered(&mut seg, 1, 600);
    assert_eq!(writes(&seg.next_actions(4)), vec![(1, 0, 100)]);
    // The lost replica's write of 0..100 answers late.
    seg.write_done(1, old_backup, old_key, 100);
    assert_eq!(seg.slots()[1].acked, 0, "the replacement holds nothing yet");
    assert_eq!(seg.committed(), 0);
    // Its own answer counts.
    done(&mut seg, 1, 100);
    assert_eq!(seg.slots()[1].acked, 100);

    // The same for a close: a late "closed" from the lost replica is not the replacement's.
    seg.seal(100);
    let _ = seg.next_actions(4);
    seg.closed_ok(1, old_backup, old_key);
    assert_ne!(seg.slots()[1].state, SlotState::Closed);
}

/// The epoch a log's open segment is saved with is offered only once it is settled: every
/// copy that is not excused open and counting, no epoch change under way.
#[test]
fn an_epoch_is_settled_only_once_every_copy_that_counts_is_open_at_it() {
    let mut seg = ReplicatedSegment::new(id(), 1 << 20, 2);
    assert!(!seg.epoch_settled(), "no replica open yet");
    let mut seg2 = opened(2);
    assert!(seg2.epoch_settled());
    seg2.appended(100);
    seg2.next_actions(4);
    seg2.failed(1);
    assert!(!seg2.epoch_settled(), "a copy was lost");
    let wanted = seg2.next_actions(4);
    assert!(matches!(wanted[..], [Action::NeedBackup { slot: 1, .. }]));
    seg2.assign(1, server(9));
    assert_eq!(seg2.epoch(), ReplicaEpoch(2));
    assert!(
        !seg2.epoch_settled(),
        "the replacement is not open and filled yet"
    );
    // Silence the unused warning for the fresh segment's actions.
    let _ = seg.next_actions(4);
}

/// What a segment may be committed under without saved bounds while no coordinator leads:
/// only while every copy recovery could find holds everything committed.
#[test]
fn only_a_segment_never_re_replicated_on_all_r_copies_is_found_whole_by_recovery() {
    let fresh = ReplicatedSegment::new(id(), 1 << 20, 2);
    assert!(
        !fresh.found_whole_by_recovery(),
        "no replica is open: no copy to find"
    );

    let mut seg = opened(2);
    assert!(seg.found_whole_by_recovery(), "both copies open at epoch 1");
    seg.appended(100);
    seg.next_actions(4);
    done(&mut seg, 0, 100);
    done(&mut seg, 1, 100);
    assert!(seg.found_whole_by_recovery());

    // A copy lost: until its replacement is current, the other is the only one that counts,
    // and after it the epoch is 2 (a stale copy at epoch 1 could come back): not found whole
    // without the coordinator's word on the epoch.
    seg.failed(1);
    assert!(!seg.found_whole_by_recovery(), "a copy was lost");
    seg.next_actions(4);
    seg.assign(1, server(9));
    open_answered(&mut seg, 1, 900);
    assert_eq!(writes(&seg.next_actions(4)), vec![(1, 0, 100)]);
    done(&mut seg, 1, 100);
    seg.next_actions(4);
    seg.epoch_set(ReplicaEpoch(2));
    seg.epoch_set(ReplicaEpoch(2));
    assert!(seg.epoch_settled(), "settled again, at epoch 2");
    assert!(
        !seg.found_whole_by_recovery(),
        "re-replicated: its first epoch's copies may be stale"
    );

    // Too few brokers: committing on min_insync copies is not all R.
    let short = short_of_backups(3, 2, 2);
    assert!(
        !short.found_whole_by_recovery(),
        "one copy of three excused"
    );
}
