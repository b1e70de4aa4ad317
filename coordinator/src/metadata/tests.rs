//! The metadata state machine's tests.

use super::*;
use tailstream_wire::messages::StreamConfig;

fn config() -> StreamConfig {
    tailstream_config::Config::embedded().stream_defaults
}

fn broker(m: &mut Metadata, addr: &str) -> ServerId {
    m.register_broker(addr, &format!("peer-{addr}"), "admin", "")
        .unwrap()
        .server_id
}

fn owners(record: &StreamRecord) -> Vec<ServerId> {
    record.placements.iter().map(|p| p.owner).collect()
}

#[test]
fn streamlets_are_placed_round_robin_over_live_brokers() {
    let mut m = Metadata::default();
    let a = broker(&mut m, "127.0.0.1:1");
    let b = broker(&mut m, "127.0.0.1:2");
    let c = broker(&mut m, "127.0.0.1:3");
    let stream = m
        .create_stream("s", 6, config(), &[c, a, b])
        .unwrap()
        .clone();
    assert_eq!(owners(&stream), vec![a, b, c, a, b, c]);
    assert!(
        stream
            .placements
            .iter()
            .all(|p| p.epoch == OwnershipEpoch(1))
    );
    let second = m
        .create_stream("t", 1, config(), &[a, b, c])
        .unwrap()
        .clone();
    assert_eq!(
        owners(&second),
        vec![b],
        "each stream starts one broker further"
    );
    assert_eq!(m.assignments_for(a, Vec::new()).assignments.len(), 2);
    let described = m.stream_metadata("s").unwrap();
    assert_eq!(described.streamlets[1].owner_addr, "127.0.0.1:2");
    assert_eq!(described.streamlets[1].state, PlacementState::Serving);
}

#[test]
fn a_stream_grows_by_appending_placements_and_never_shrinks() {
    let mut m = Metadata::default();
    let a = broker(&mut m, "127.0.0.1:1");
    let b = broker(&mut m, "127.0.0.1:2");
    let c = broker(&mut m, "127.0.0.1:3");
    let created = m
        .create_stream("s", 2, config(), &[a, b, c])
        .unwrap()
        .clone();
    let before = owners(&created);
    let version = m.version;
    let (grown, old) = m.add_streamlets("s", 5, &[a, b, c]).unwrap();
    assert_eq!(old, 2);
    assert_eq!(
        owners(&grown)[..2],
        before[..],
        "existing streamlets stay put"
    );
    assert_eq!(grown.placements.len(), 5);
    // Round-robin continues where the creation left off: as if created with 5.
    let fresh = m
        .create_stream("t", 5, config(), &[a, b, c])
        .unwrap()
        .clone();
    let start = |r: &StreamRecord| r.id.0 as usize % 3;
    let expected: Vec<ServerId> = (0..5).map(|i| [a, b, c][(start(&grown) + i) % 3]).collect();
    assert_eq!(owners(&grown), expected);
    assert_eq!(fresh.placements.len(), 5);
    assert!(m.version > version);
    let added = grown.assignments_from(StreamletId(2));
    let sent: usize = added.values().map(Vec::len).sum();
    assert_eq!(sent, 3, "only the new streamlets are sent");

    // The same count again is a retry: nothing changes.
    let version = m.version;
    let (same, old) = m.add_streamlets("s", 5, &[a, b, c]).unwrap();
    assert_eq!((same.placements.len(), old, m.version), (5, 5, version));
    assert!(matches!(
        m.add_streamlets("s", 4, &[a, b, c]),
        Err(MetadataError::InvalidArgument(_))
    ));
    assert!(matches!(
        m.add_streamlets("missing", 4, &[a, b, c]),
        Err(MetadataError::UnknownStream(_))
    ));
    assert!(matches!(
        m.add_streamlets("s", tailstream_config::STREAMLETS_MAX + 1, &[a, b, c]),
        Err(MetadataError::InvalidArgument(_))
    ));
    assert!(matches!(
        m.add_streamlets("s", 6, &[]),
        Err(MetadataError::NoBrokers)
    ));
}

#[test]
fn retention_changes_alone_and_reaches_the_owners_assignments() {
    let mut m = Metadata::default();
    let a = broker(&mut m, "127.0.0.1:1");
    let b = broker(&mut m, "127.0.0.1:2");
    let created = m.create_stream("s", 2, config(), &[a, b]).unwrap().clone();
    let version = m.version;
    let altered = m.alter_retention("s", Some(60_000), None).unwrap();
    assert_eq!(altered.config.retention_ms, 60_000);
    assert_eq!(
        altered.config.retention_bytes,
        created.config.retention_bytes
    );
    let unchanged_but_retention = StreamConfig {
        retention_ms: created.config.retention_ms,
        ..altered.config.clone()
    };
    assert_eq!(unchanged_but_retention, created.config);
    assert_eq!(altered.placements, created.placements);
    assert_eq!(m.version, version + 1);
    let assigned = m.assignments_for(a, Vec::new());
    assert!(
        assigned
            .assignments
            .iter()
            .all(|s| s.config.retention_ms == 60_000),
        "owners learn it from their next assignment"
    );
    // The same again (a retry) is no change; `None` leaves a limit as it is.
    m.alter_retention("s", Some(60_000), None).unwrap();
    m.alter_retention("s", None, None).unwrap();
    assert_eq!(m.version, version + 1);
    let lifted = m.alter_retention("s", Some(0), Some(1 << 30)).unwrap();
    assert_eq!(
        (lifted.config.retention_ms, lifted.config.retention_bytes),
        (0, 1 << 30)
    );
    assert!(matches!(
        m.alter_retention("missing", Some(1), None),
        Err(MetadataError::UnknownStream(_))
    ));
}

#[test]
fn log_starts_only_move_forward_and_reach_the_owner_and_every_later_one() {
    use tailstream_wire::messages::LogStart;
    let mut m = Metadata::default();
    let a = broker(&mut m, "127.0.0.1:1");
    let b = broker(&mut m, "127.0.0.1:2");
    let id = m.create_stream("s", 2, config(), &[a, b]).unwrap().id;
    let epoch = m.streams["s"].placements[1].epoch;
    let start = |log, offset| LogStart {
        log: LogId(log),
        offset: RecordOffset(offset),
    };
    let version = m.version;
    let before = m.clone();
    let (owner, assignment) = m
        .delete_records("s", id, StreamletId(1), epoch, &[start(0, 10), start(1, 3)])
        .unwrap();
    assert_eq!(owner, m.streams["s"].placements[1].owner);
    assert_eq!(m.version, version + 1);
    assert_eq!(super::invariants::check_transition(&before, &m), Ok(()));
    // The owner is sent that streamlet's assignment, which carries the starts, and so does
    // every later assignment of it.
    let assignment = assignment.expect("changed");
    assert_eq!(assignment.log_starts, [start(0, 10), start(1, 3)]);
    let assigned = m.assignments_for(owner, Vec::new());
    let streamlet = assigned
        .assignments
        .iter()
        .find(|s| s.streamlet == StreamletId(1))
        .unwrap();
    assert_eq!(streamlet.log_starts, [start(0, 10), start(1, 3)]);
    // A retry, or a start at or before the kept one, changes nothing; a later one moves it.
    let (_, changed) = m
        .delete_records("s", id, StreamletId(1), epoch, &[start(0, 10), start(1, 2)])
        .unwrap();
    assert!(changed.is_none());
    assert_eq!(m.version, version + 1);
    m.delete_records("s", id, StreamletId(1), epoch, &[start(1, 7)])
        .unwrap();
    let kept = &m.streams["s"].placements[1].log_starts;
    assert_eq!((kept[&0], kept[&1]), (RecordOffset(10), RecordOffset(7)));
    // Refused: no such stream (or one recreated under the name), streamlet or log, or a
    // streamlet that moved since its offsets were checked.
    assert!(matches!(
        m.delete_records("missing", id, StreamletId(0), epoch, &[start(0, 1)]),
        Err(MetadataError::UnknownStream(_))
    ));
    assert!(matches!(
        m.delete_records(
            "s",
            StreamId(id.0 + 1),
            StreamletId(1),
            epoch,
            &[start(0, 11)]
        ),
        Err(MetadataError::UnknownStream(_))
    ));
    assert!(
        m.delete_records("s", id, StreamletId(2), epoch, &[start(0, 1)])
            .is_err()
    );
    let q = config().logs_per_streamlet;
    let first_epoch = m.streams["s"].placements[0].epoch;
    assert!(
        m.delete_records("s", id, StreamletId(0), first_epoch, &[start(q, 1)])
            .is_err()
    );
    let moved = OwnershipEpoch(epoch.0 + 1);
    assert!(matches!(
        m.delete_records("s", id, StreamletId(1), moved, &[start(0, 11)]),
        Err(MetadataError::InvalidArgument(_))
    ));
    // A transition that moves a start back is refused as a bug.
    let mut back = m.clone();
    std::sync::Arc::make_mut(back.streams.get_mut("s").unwrap()).placements[1]
        .log_starts
        .insert(0, RecordOffset(9));
    assert!(
        super::invariants::check_transition(&m, &back)
            .unwrap_err()
            .contains("start went back")
    );
}

#[test]
fn replicas_need_as_many_other_live_brokers() {
    let mut m = Metadata::default();
    let a = broker(&mut m, "x:1");
    let b = broker(&mut m, "x:2");
    let mut replicated = config();
    replicated.replicas = 2;
    assert!(matches!(
        m.create_stream("s", 1, replicated.clone(), &[a, b]),
        Err(MetadataError::InvalidArgument(_))
    ));
    let c = broker(&mut m, "x:3");
    assert!(m.create_stream("s", 1, replicated, &[a, b, c]).is_ok());
}

#[test]
fn bad_requests_are_refused_with_their_reason() {
    let mut m = Metadata::default();
    assert_eq!(
        m.create_stream("s", 1, config(), &[]),
        Err(MetadataError::NoBrokers)
    );
    let a = broker(&mut m, "x:1");
    assert!(matches!(
        m.create_stream("bad name", 1, config(), &[a]),
        Err(MetadataError::InvalidArgument(_))
    ));
    assert!(matches!(
        m.create_stream("s", 0, config(), &[a]),
        Err(MetadataError::InvalidArgument(_))
    ));
    m.create_stream("s", 1, config(), &[a]).unwrap();
    assert!(matches!(
        m.create_stream("s", 1, config(), &[a]),
        Err(MetadataError::StreamExists(_))
    ));
    assert!(matches!(
        m.stream_metadata("nope"),
        Err(MetadataError::UnknownStream(_))
    ));
}

#[test]
fn a_reregistered_broker_is_a_new_empty_generation_and_the_old_one_is_crashed() {
    let mut m = Metadata::default();
    let old = broker(&mut m, "x:1");
    m.create_stream("s", 2, config(), &[old]).unwrap();
    let registered = m.register_broker("x:1", "peer-x:1", "a2", "").unwrap();
    let new = registered.server_id;
    assert_eq!((new.index, new.generation), (old.index, old.generation + 1));
    assert_eq!(
        registered.declared,
        Some(old),
        "it lost its memory: crashed"
    );
    assert_eq!(registered.to_recover.len(), 2);
    assert_eq!(
        m.check_server(old),
        Err(MetadataError::StaleGeneration(old))
    );
    assert!(m.check_server(new).is_ok());
    assert!(
        m.assignments_for(new, Vec::new()).assignments.is_empty(),
        "new ones by placement only"
    );
    let described = m.stream_metadata("s").unwrap();
    assert!(
        described
            .streamlets
            .iter()
            .all(|p| p.state == PlacementState::Recovering)
    );
    assert!(matches!(
        m.check_server(ServerId::new(9, 1)),
        Err(MetadataError::UnknownServer(_))
    ));
}

#[test]
fn a_crashed_broker_s_streamlets_are_rebuilt_under_new_epochs_and_serve_again() {
    let mut m = Metadata::default();
    let a = broker(&mut m, "x:1");
    let b = broker(&mut m, "x:2");
    let stream = m.create_stream("s", 2, config(), &[a, b]).unwrap().id;
    let moved = m.declare_crashed(a).unwrap();
    assert_eq!(moved, vec![(stream, StreamletId(0))]);
    assert_eq!(m.declare_crashed(a).unwrap(), vec![], "declared once");
    assert_eq!(m.crashed(), vec![a]);
    assert!(m.retired().is_empty());
    let id = m.open_recovery(a, moved.clone(), 1_000, 120);
    assert_eq!(m.orphans(), moved);
    assert!(
        m.begin_rebuild(stream, StreamletId(0), a).is_err(),
        "not to the crashed one"
    );
    let assignment = m.begin_rebuild(stream, StreamletId(0), b).unwrap();
    assert_eq!(
        (assignment.epoch, assignment.recovering),
        (OwnershipEpoch(2), true)
    );
    assert!(m.orphans().is_empty(), "in progress on a member");
    assert_eq!(m.assignments_for(b, Vec::new()).assignments.len(), 2);
    // A rebuild that finishes under an older epoch changes nothing.
    assert!(
        !m.finish_rebuild(stream, StreamletId(0), OwnershipEpoch(1))
            .unwrap()
    );
    assert!(
        m.finish_rebuild(stream, StreamletId(0), OwnershipEpoch(2))
            .unwrap()
    );
    let placement = &m.stream_metadata("s").unwrap().streamlets[0];
    assert_eq!((placement.owner, placement.epoch), (b, OwnershipEpoch(2)));
    assert_eq!(placement.state, PlacementState::Serving);
    assert_eq!(
        m.retired(),
        vec![a],
        "recovered: backups may drop what is left"
    );
    assert!(m.recovery_mut(id).is_some());
}

#[test]
fn a_rebuild_whose_target_crashed_meanwhile_does_not_serve_and_is_an_orphan_again() {
    let mut m = Metadata::default();
    let a = broker(&mut m, "x:1");
    let b = broker(&mut m, "x:2");
    let c = broker(&mut m, "x:3");
    let stream = m.create_stream("s", 3, config(), &[a, b, c]).unwrap().id;
    let moved = m.declare_crashed(a).unwrap();
    m.begin_rebuild(stream, StreamletId(0), b).unwrap();
    // The target dies while the rebuild finishes (e.g. while the orchestrator waits out the
    // first crash's lease): it must not be handed a streamlet nobody would recover.
    m.declare_crashed(b).unwrap();
    assert!(
        !m.finish_rebuild(stream, StreamletId(0), OwnershipEpoch(2))
            .unwrap()
    );
    let placement = &m.stream_metadata("s").unwrap().streamlets[0];
    assert_eq!(placement.state, PlacementState::Recovering);
    assert!(m.orphans().contains(&moved[0]));
    m.begin_rebuild(stream, StreamletId(0), c).unwrap();
    assert!(
        m.finish_rebuild(stream, StreamletId(0), OwnershipEpoch(3))
            .unwrap()
    );
}

#[test]
fn a_lost_streamlet_is_nobody_s_and_keeps_its_crash_unretired() {
    let mut m = Metadata::default();
    let a = broker(&mut m, "x:1");
    let b = broker(&mut m, "x:2");
    let stream = m.create_stream("s", 1, config(), &[a]).unwrap().id;
    let moved = m.declare_crashed(a).unwrap();
    m.open_recovery(a, moved, 0, 0);
    m.mark_lost(
        stream,
        StreamletId(0),
        "log-0 segment-3 is on no live backup".into(),
    )
    .unwrap();
    let placement = &m.stream_metadata("s").unwrap().streamlets[0];
    assert_eq!(placement.state, PlacementState::Lost);
    assert!(placement.detail.contains("segment-3"));
    assert!(m.assignments_for(a, Vec::new()).assignments.is_empty());
    assert!(m.retired().is_empty());
    assert_eq!(m.orphans(), vec![(stream, StreamletId(0))], "retried later");
    // A backup came back with the missing copy: it can be rebuilt after all.
    assert!(
        m.retired().is_empty(),
        "nothing is dropped while anything is unsettled"
    );
    m.begin_rebuild(stream, StreamletId(0), b).unwrap();
    assert!(
        m.finish_rebuild(stream, StreamletId(0), OwnershipEpoch(2))
            .unwrap()
    );
    assert_eq!(m.retired(), vec![a]);
}

#[test]
fn producer_ids_are_never_reused_across_restarts() {
    let mut m = Metadata {
        decoy_secret: Some([5; 32]),
        ..Metadata::default()
    };
    let mut ids = ProducerIds::default();
    let keys = m.producer_id_keys().unwrap();
    let next = ids.take(m.producer_id_ceiling, &keys, None).unwrap_err();
    m.raise_producer_id_ceiling(next, 0xfeed);
    let keys = m.producer_id_keys().unwrap();
    assert_eq!(keys.cipher, 0xfeed);
    let first = ids
        .take(m.producer_id_ceiling, &keys, Some("alice"))
        .unwrap();
    let second = ids
        .take(m.producer_id_ceiling, &keys, Some("alice"))
        .unwrap();
    assert_ne!(second, first);
    // A restart loses everything not persisted: the ceiling and the keys are what count.
    let json = serde_json::to_string(&m).unwrap();
    let mut restarted: Metadata = serde_json::from_str(&json).unwrap();
    let mut ids = ProducerIds::default();
    let keys = restarted.producer_id_keys().unwrap();
    let next = ids
        .take(restarted.producer_id_ceiling, &keys, None)
        .unwrap_err();
    restarted.raise_producer_id_ceiling(next, 0xbad);
    let keys = restarted.producer_id_keys().unwrap();
    assert_eq!(keys.cipher, 0xfeed, "the key is kept");
    let third = ids
        .take(restarted.producer_id_ceiling, &keys, Some("alice"))
        .unwrap();
    assert!(third != first && third != second);
    let ceiling = restarted.producer_id_ceiling;
    assert!(producer_ids::issued(first, ceiling, &keys, Some("alice")));
    assert!(!producer_ids::issued(first, ceiling, &keys, Some("bob")));
    assert_eq!(
        Metadata::default().producer_id_keys().map(|k| k.cipher),
        None,
        "no ids before the cluster's secret exists"
    );
}

#[test]
fn counters_refuse_to_wrap_and_implausible_files_are_refused() {
    let mut m = Metadata::default();
    let id = broker(&mut m, "x:1");
    m.brokers[id.index as usize].server_id = ServerId::new(id.index, u32::MAX);
    assert_eq!(
        m.register_broker("x:1", "peer-x:1", "a", ""),
        Err(MetadataError::Exhausted("the broker's generation"))
    );
    assert_eq!(m.brokers[0].server_id.generation, u32::MAX, "unchanged");
    assert!(m.validate().is_ok());
    let mut bad = m.clone();
    bad.version = u64::MAX;
    assert!(bad.validate().unwrap_err().contains("version"));
    let mut bad = m.clone();
    bad.brokers[0].server_id = ServerId::new(5, 1);
    assert!(bad.validate().is_err());
    let mut bad = m.clone();
    m.create_stream("s", 1, config(), &[m.brokers[0].server_id])
        .unwrap();
    bad.streams = m.streams.clone();
    std::sync::Arc::make_mut(bad.streams.get_mut("s").unwrap())
        .config
        .logs_per_streamlet = u32::MAX;
    assert!(bad.validate().unwrap_err().contains("logs per streamlet"));
}

#[test]
fn a_deleted_stream_is_gone_from_assignments_remembered_for_backups_and_its_id_never_reused() {
    let mut m = Metadata::default();
    let a = broker(&mut m, "x:1");
    let b = broker(&mut m, "x:2");
    let id = m.create_stream("s", 2, config(), &[a, b]).unwrap().id;
    let version = m.version;
    let (deleted, owners) = m.delete_stream("s").unwrap();
    assert_eq!((deleted, owners), (id, vec![a, b]));
    assert!(m.version > version, "owners get a new assignment");
    assert!(m.assignments_for(a, Vec::new()).assignments.is_empty());
    assert_eq!(m.deleted_streams, vec![id]);
    assert!(matches!(
        m.delete_stream("s"),
        Err(MetadataError::UnknownStream(_))
    ));
    let again = m.create_stream("s", 1, config(), &[a, b]).unwrap().id;
    assert!(again > id, "a new stream of the same name has a new id");
    // Only the most recent deletions are kept.
    for i in 0..super::streams::DELETED_STREAMS_KEPT + 3 {
        let name = format!("t{i}");
        m.create_stream(&name, 1, config(), &[a, b]).unwrap();
        m.delete_stream(&name).unwrap();
    }
    assert_eq!(
        m.deleted_streams.len(),
        super::streams::DELETED_STREAMS_KEPT
    );
    assert!(
        !m.deleted_streams.contains(&id),
        "the oldest were forgotten"
    );
}

#[test]
fn a_stream_being_recovered_cannot_be_deleted() {
    let mut m = Metadata::default();
    let a = broker(&mut m, "x:1");
    let b = broker(&mut m, "x:2");
    let stream = m.create_stream("s", 2, config(), &[a, b]).unwrap().id;
    let moved = m.declare_crashed(a).unwrap();
    m.begin_rebuild(stream, StreamletId(0), b).unwrap();
    assert!(matches!(
        m.delete_stream("s"),
        Err(MetadataError::InvalidArgument(_))
    ));
    assert!(
        m.finish_rebuild(stream, StreamletId(0), OwnershipEpoch(2))
            .unwrap()
    );
    assert_eq!(moved.len(), 1);
    assert!(m.delete_stream("s").is_ok());
}

/// Issue 21, finding 2: kept segments are saved with the metadata, only grow, and only the
/// streamlet's current owner moves them.
#[test]
fn log_bounds_grow_only_from_the_owner_and_survive_a_reload() {
    use tailstream_wire::messages::LogBounds;
    use tailstream_wire::{LogId, SegmentId};
    let mut m = Metadata::default();
    let a = broker(&mut m, "x:1");
    let b = broker(&mut m, "x:2");
    let id = m.create_stream("s", 2, config(), &[a, b]).unwrap().id;
    let owner = m.stream_by_id(id).unwrap().placements[0].owner;
    let other = if owner == a { b } else { a };
    let bounds = |oldest, head| LogBounds {
        stream: id,
        streamlet: StreamletId(0),
        log: LogId(0),
        oldest: SegmentId(oldest),
        head: SegmentId(head),
        open: None,
    };
    assert!(!m.log_bounds_covered(&[bounds(0, 0)]));
    assert_eq!(
        m.record_log_bounds(owner, &[bounds(0, 3)]).unwrap().len(),
        1
    );
    assert!(m.log_bounds_covered(&[bounds(0, 3), bounds(0, 1)]));
    // Not the owner: refused, nothing moves (a fenced owner cannot make segments look freed).
    assert!(
        m.record_log_bounds(other, &[bounds(2, 9)])
            .unwrap()
            .is_empty()
    );
    // Malformed (oldest after head) and unknown logs are refused too.
    assert!(
        m.record_log_bounds(owner, &[bounds(5, 4)])
            .unwrap()
            .is_empty()
    );
    let mut no_such_log = bounds(0, 1);
    no_such_log.log = LogId(config().logs_per_streamlet);
    assert!(
        m.record_log_bounds(owner, &[no_such_log])
            .unwrap()
            .is_empty()
    );
    // Only grows.
    m.record_log_bounds(owner, &[bounds(1, 2)]).unwrap();
    let kept = m.kept_segments(id, StreamletId(0))[&LogId(0)];
    assert_eq!((kept.oldest, kept.head), (SegmentId(1), SegmentId(3)));
    // Saved and loaded as JSON, as the metadata file does.
    let reloaded: Metadata = serde_json::from_slice(&serde_json::to_vec(&m).unwrap()).unwrap();
    assert_eq!(
        reloaded.kept_segments(id, StreamletId(0)),
        m.kept_segments(id, StreamletId(0))
    );
    assert!(reloaded.kept_segments(id, StreamletId(1)).is_empty());
}

/// Issue 21, item 5: each change's result is checked against what it replaced.
#[test]
fn transitions_that_move_epochs_back_or_give_one_epoch_two_owners_are_refused() {
    use super::invariants::check_transition;
    use tailstream_wire::messages::LogBounds;
    use tailstream_wire::{LogId, SegmentId};
    let mut m = Metadata::default();
    let a = broker(&mut m, "x:1");
    let b = broker(&mut m, "x:2");
    let id = m.create_stream("s", 1, config(), &[a, b]).unwrap().id;
    let owner = m.stream_by_id(id).unwrap().placements[0].owner;
    let other = if owner == a { b } else { a };
    m.record_log_bounds(
        owner,
        &[LogBounds {
            stream: id,
            streamlet: StreamletId(0),
            log: LogId(0),
            oldest: SegmentId(1),
            head: SegmentId(4),
            open: None,
        }],
    )
    .unwrap();
    assert_eq!(check_transition(&m, &m.clone()), Ok(()));
    fn placement(m: &mut Metadata) -> &mut Placement {
        &mut std::sync::Arc::make_mut(m.streams.get_mut("s").unwrap()).placements[0]
    }
    let mut moved = m.clone();
    placement(&mut moved).owner = other;
    assert!(
        check_transition(&m, &moved)
            .unwrap_err()
            .contains("two owners")
    );
    placement(&mut moved).epoch.0 += 1;
    assert_eq!(check_transition(&m, &moved), Ok(()));
    let mut back = m.clone();
    placement(&mut back).epoch.0 -= 1;
    assert!(
        check_transition(&m, &back)
            .unwrap_err()
            .contains("went back")
    );
    let mut shrunk = m.clone();
    placement(&mut shrunk).log_bounds.get_mut(&0).unwrap().head = SegmentId(3);
    assert!(
        check_transition(&m, &shrunk)
            .unwrap_err()
            .contains("kept segments")
    );
    let mut crashed_owner = m.clone();
    crashed_owner.brokers[owner.index as usize].crashed = true;
    assert!(
        check_transition(&m, &crashed_owner)
            .unwrap_err()
            .contains("not a member")
    );
    let mut grown = m.clone();
    grown.add_streamlets("s", 2, &[a, b]).unwrap();
    assert_eq!(check_transition(&m, &grown), Ok(()));
    let mut shrunk_back = m.clone();
    shrunk_back.version = grown.version + 1;
    assert!(
        check_transition(&grown, &shrunk_back)
            .unwrap_err()
            .contains("from 2 streamlets to 1")
    );
    let mut retained = m.clone();
    retained.alter_retention("s", Some(1), Some(2)).unwrap();
    assert_eq!(check_transition(&m, &retained), Ok(()));
    let mut resized = m.clone();
    std::sync::Arc::make_mut(resized.streams.get_mut("s").unwrap())
        .config
        .segment_size_bytes *= 2;
    assert!(
        check_transition(&m, &resized)
            .unwrap_err()
            .contains("beyond retention")
    );
}

/// A state saved by an older version that already breaks an invariant is not held against a
/// change that does not touch it (else every later change would be refused).
#[test]
fn a_violation_already_saved_does_not_block_unrelated_changes() {
    use super::invariants::check_transition;
    let mut m = Metadata::default();
    let a = broker(&mut m, "x:1");
    let b = broker(&mut m, "x:2");
    m.create_stream("s", 1, config(), &[a, b]).unwrap();
    let owner = m.streams["s"].placements[0].owner;
    // Saved that way: serving on a crashed generation.
    m.brokers[owner.index as usize].crashed = true;
    let mut next = m.clone();
    next.create_stream("t", 1, config(), &[a, b]).ok();
    next.version += 1;
    assert_eq!(check_transition(&m, &next), Ok(()));
}
