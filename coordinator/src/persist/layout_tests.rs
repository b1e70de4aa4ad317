use super::*;
use tailstream_wire::messages::LogBounds;
use tailstream_wire::{LogId, SegmentId, ServerId, StreamletId};

fn config() -> StreamConfig {
    StreamConfig {
        logs_per_streamlet: 2,
        replicas: 1,
        segment_size_bytes: 1 << 20,
        segments_per_group: 4,
        retention_bytes: 0,
        retention_ms: 0,
        min_insync_replicas: 1,
    }
}

/// Three brokers, two streams, a crash with its recovery.
fn cluster() -> (Metadata, Vec<ServerId>) {
    let mut m = Metadata::default();
    let brokers: Vec<ServerId> = (0..3)
        .map(|i| {
            let addr = format!("b{i}:1");
            m.register_broker(&addr, &addr, &addr, "")
                .unwrap()
                .server_id
        })
        .collect();
    m.create_stream("a", 3, config(), &brokers).unwrap();
    m.create_stream("b", 2, config(), &brokers).unwrap();
    m.raise_producer_id_ceiling(0, 42);
    m.term = tailstream_wire::CoordinatorTerm(5);
    (m, brokers)
}

/// What a store holding `m` lists.
fn stored(m: &Metadata) -> BTreeMap<String, Vec<u8>> {
    let mut listing = BTreeMap::new();
    apply(&mut listing, &changes(&Metadata::default(), m).unwrap());
    listing
}

#[test]
fn every_object_written_from_empty_reads_back_whole() {
    let (mut m, brokers) = cluster();
    let moved = m.declare_crashed(brokers[1]).unwrap();
    m.open_recovery(brokers[1], moved, 7, 3);
    let listing = stored(&m);
    assert!(listing.contains_key(&keys::placement(m.streams["a"].id, 2)));
    assert_eq!(read(&listing).unwrap(), m);
    assert_eq!(read(&BTreeMap::new()).unwrap(), Metadata::default());
}

#[test]
fn a_head_report_rewrites_one_placement_and_nothing_else() {
    let (m, _) = cluster();
    let mut next = m.clone();
    let stream = &m.streams["b"];
    let owner = stream.placements[1].owner;
    let bounds = LogBounds {
        stream: stream.id,
        streamlet: StreamletId(1),
        log: LogId(1),
        oldest: SegmentId(0),
        head: SegmentId(5),
        open: None,
    };
    assert_eq!(next.record_log_bounds(owner, &[bounds]).unwrap().len(), 1);
    let ops = changes(&m, &next).unwrap();
    let written: Vec<&str> = ops.iter().map(Op::key).collect();
    assert_eq!(written, vec![keys::placement(stream.id, 1).as_str()]);
    let mut listing = stored(&m);
    apply(&mut listing, &ops);
    assert_eq!(read(&listing).unwrap(), next);
}

#[test]
fn deleting_a_stream_deletes_its_header_and_every_placement() {
    let (m, _) = cluster();
    let mut next = m.clone();
    let id = m.streams["a"].id;
    next.delete_stream("a").unwrap();
    let ops = changes(&m, &next).unwrap();
    for key in [
        keys::stream(id),
        keys::placement(id, 0),
        keys::placement(id, 2),
    ] {
        assert!(ops.contains(&Op::Delete { key: key.clone() }), "{key}");
    }
    let mut listing = stored(&m);
    apply(&mut listing, &ops);
    assert!(!listing.keys().any(|k| k.contains(&format!("{:020}", id.0))));
    assert_eq!(read(&listing).unwrap(), next);
}

#[test]
fn a_name_deleted_and_created_again_is_a_new_stream_with_new_keys() {
    let (m, brokers) = cluster();
    let mut next = m.clone();
    next.delete_stream("a").unwrap();
    next.create_stream("a", 1, config(), &brokers).unwrap();
    let mut listing = stored(&m);
    apply(&mut listing, &changes(&m, &next).unwrap());
    assert_eq!(read(&listing).unwrap(), next);
}

#[test]
fn crashes_recoveries_and_registrations_round_trip_through_changes() {
    let (m, brokers) = cluster();
    let mut steps = vec![m];
    let mut next = steps[0].clone();
    let moved = next.declare_crashed(brokers[0]).unwrap();
    next.open_recovery(brokers[0], moved, 10, 2);
    steps.push(next.clone());
    next.register_broker("b0:1", "b0:1", "b0:1", "").unwrap();
    next.register_broker("b9:1", "b9:1", "b9:1", "").unwrap();
    steps.push(next.clone());
    let mut listing = stored(&steps[0]);
    for pair in steps.windows(2) {
        apply(&mut listing, &changes(&pair[0], &pair[1]).unwrap());
        assert_eq!(read(&listing).unwrap(), pair[1]);
    }
}

#[test]
fn a_listing_with_a_missing_placement_or_a_stray_key_is_refused() {
    let (m, _) = cluster();
    let id = m.streams["a"].id;
    let mut listing = stored(&m);
    listing.remove(&keys::placement(id, 1));
    let error = read(&listing).unwrap_err();
    assert!(error.contains("3 streamlets but 2 placements"), "{error}");

    let mut listing = stored(&m);
    listing.insert(format!("{METADATA_DIR}surprise"), b"{}".to_vec());
    assert!(read(&listing).unwrap_err().contains("not a metadata key"));

    let mut listing = stored(&m);
    listing.insert(keys::stream(id), b"{ not json".to_vec());
    assert!(read(&listing).unwrap_err().contains("not valid"));
}

#[test]
fn streams_gone_and_new_on_either_side_of_untouched_ones_write_only_their_keys() {
    // "a" and "b" exist; "a" goes, "0" (sorted before both) and "c" (after both) come.
    let (m, brokers) = cluster();
    let mut next = m.clone();
    let gone = m.streams["a"].id;
    next.delete_stream("a").unwrap();
    next.create_stream("0", 1, config(), &brokers).unwrap();
    next.create_stream("c", 2, config(), &brokers).unwrap();
    let ops = changes(&m, &next).unwrap();
    let untouched = format!("{:020}", m.streams["b"].id.0);
    assert!(
        !ops.iter().any(|op| op.key().contains(&untouched)),
        "the untouched stream is not rewritten: {ops:?}"
    );
    assert!(ops.contains(&Op::Delete {
        key: keys::stream(gone)
    }));
    for name in ["0", "c"] {
        let id = next.streams[name].id;
        assert!(ops.iter().any(|op| op.key() == keys::stream(id)), "{name}");
    }
    let mut listing = stored(&m);
    apply(&mut listing, &ops);
    assert_eq!(read(&listing).unwrap(), next);
}

#[test]
fn a_user_is_one_key_written_on_create_and_deleted_with_it() {
    use tailstream_auth::scram::{ITERATIONS_MIN, new_credential};
    use tailstream_wire::messages::ScramMechanism;
    let (m, _) = cluster();
    let mut next = m.clone();
    let credential = new_credential(ScramMechanism::Sha256, "pw", ITERATIONS_MIN).unwrap();
    next.create_user("alice", &[credential], 10).unwrap();
    let ops = changes(&m, &next).unwrap();
    let written: Vec<&str> = ops.iter().map(Op::key).collect();
    assert_eq!(written, vec![keys::user("alice").as_str()]);
    let mut listing = stored(&m);
    apply(&mut listing, &ops);
    assert_eq!(read(&listing).unwrap(), next);
    let mut gone = next.clone();
    gone.delete_user("alice").unwrap();
    let ops = changes(&next, &gone).unwrap();
    assert_eq!(
        ops,
        vec![Op::Delete {
            key: keys::user("alice")
        }]
    );
    apply(&mut listing, &ops);
    assert_eq!(read(&listing).unwrap(), gone);
}
