//! Storage against a reference model: what was appended is what is read back, in order,
//! across segment and group boundaries, and the refusals are the documented ones.

use super::*;
use bytes::Bytes;
use std::time::{Duration, Instant};
use tailstream_wire::batch::{base_offset, validate_batch};
use tailstream_wire::entry::{EntryType, LogDigest};
use tailstream_wire::messages::{LogStart, StreamConfig};
use tailstream_wire::records::{RecordBatchBuilder, RecordIter};
use tailstream_wire::scan::EntryIter;
use tailstream_wire::{
    BatchSequence, Decode, GroupId, LogId, OwnershipEpoch, ProducerEpoch, ProducerId, RecordOffset,
    SegmentId, SegmentPosition, StreamId, StreamletId,
};

fn config(logs: u32, segment_size_bytes: u32, segments_per_group: u32) -> StreamConfig {
    StreamConfig {
        logs_per_streamlet: logs,
        replicas: 0,
        segment_size_bytes,
        segments_per_group,
        retention_bytes: 0,
        retention_ms: 0,
        min_insync_replicas: 0,
    }
}

fn streamlet(config: StreamConfig, memory_bytes: u64) -> Streamlet {
    Streamlet::new(
        StreamId(1),
        StreamletId(0),
        config,
        SegmentMemory::new(memory_bytes),
        64,
        64 << 20,
    )
}

fn batch(producer: u64, sequence: u32, values: &[&str]) -> Bytes {
    batch_at(producer, 0, sequence, values)
}

fn batch_at(producer: u64, epoch: i16, sequence: u32, values: &[&str]) -> Bytes {
    let mut builder = RecordBatchBuilder::new(256);
    for value in values {
        builder.push(0, None, Some(value.as_bytes()), &[]);
    }
    builder.finish(
        ProducerId(producer),
        ProducerEpoch(epoch),
        BatchSequence(sequence),
    )
}

fn append(s: &Streamlet, bytes: &Bytes) -> Result<Appended, StorageError> {
    let info = validate_batch(bytes).unwrap();
    let producer = info.producer.unwrap().producer_id;
    s.append(
        s.log_for(producer).id(),
        bytes,
        &info,
        ProducerOwner::ANYONE,
        Instant::now(),
    )
}

/// Reads a whole log the way a consumer does; returns (offset, value) of every record.
fn read_log(log: &Log) -> Vec<(u64, String)> {
    let groups = log.groups();
    let mut out = Vec::new();
    let Some(first) = groups.groups.first() else {
        return out;
    };
    let (mut group, mut segment, mut position) =
        (first.group, first.segments[0].segment, SegmentPosition(0));
    loop {
        let outcome = log.read(group, segment, position, 300).unwrap();
        for part in &outcome.parts {
            for entry in EntryIter::new(part, true) {
                let entry = entry.unwrap();
                if entry.header.entry_type != EntryType::Batch {
                    continue;
                }
                let info = validate_batch(entry.payload).unwrap();
                let base = base_offset(entry.payload).unwrap();
                let records = RecordIter::new(Bytes::copy_from_slice(entry.payload), &info);
                for record in records {
                    let record = record.unwrap();
                    let value = String::from_utf8(record.value.unwrap().to_vec()).unwrap();
                    out.push((base.0 + u64::from(record.offset_delta), value));
                }
            }
        }
        if outcome.end_of_group {
            match outcome.next_group {
                Some(next) => {
                    let summary = log.groups();
                    let g = summary.groups.iter().find(|g| g.group == next).unwrap();
                    (group, segment, position) = (next, g.segments[0].segment, SegmentPosition(0));
                    continue;
                }
                None => return out,
            }
        }
        if outcome.parts.is_empty() {
            return out;
        }
        (segment, position) = (outcome.next_segment, outcome.next_position);
    }
}

#[test]
fn records_read_back_in_order_across_segments_and_groups() {
    let s = streamlet(config(1, 4096, 3), 1 << 30);
    let mut expected = Vec::new();
    for i in 0..400u32 {
        let value = format!("record-{i:05}-{}", "x".repeat((i % 37) as usize));
        append(&s, &batch(1, i, &[&value])).unwrap();
        expected.push((u64::from(i), value));
    }
    let log = s.log(LogId(0)).unwrap();
    let groups = log.groups();
    assert!(
        groups.groups.len() > 2,
        "expected several groups, got {}",
        groups.groups.len()
    );
    assert!(
        groups
            .groups
            .iter()
            .rev()
            .skip(1)
            .all(|g| g.sealed && g.segments.len() == 3)
    );
    // Group and segment ids only increase.
    let ids: Vec<_> = groups
        .groups
        .iter()
        .flat_map(|g| g.segments.iter().map(|s| s.segment))
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(read_log(log), expected);
    assert_eq!(log.offsets(), (RecordOffset(400), RecordOffset(400)));
}

#[test]
fn producers_map_to_logs_and_each_log_counts_its_own_offsets() {
    let s = streamlet(config(4, 1 << 16, 4), 1 << 30);
    for producer in 0..8u64 {
        for seq in 0..5u32 {
            // Two records per batch: sequences advance by two.
            let a = append(&s, &batch(producer, 2 * seq, &["a", "b"])).unwrap();
            assert_eq!(a.location.log, LogId((producer % 4) as u32));
        }
    }
    for log in s.logs() {
        // Two producers per log, five batches each, two records per batch.
        assert_eq!(log.offsets().0, RecordOffset(20));
        let offsets: Vec<u64> = read_log(log).into_iter().map(|(o, _)| o).collect();
        assert_eq!(offsets, (0..20).collect::<Vec<_>>());
    }
}

#[test]
fn a_retried_batch_is_appended_once_and_a_gap_is_refused() {
    let s = streamlet(config(1, 1 << 16, 4), 1 << 30);
    let first = append(&s, &batch(3, 0, &["one"])).unwrap();
    let retry = append(&s, &batch(3, 0, &["one"])).unwrap();
    assert!(retry.duplicate && !first.duplicate);
    assert_eq!(retry.location, first.location);
    let gap = append(&s, &batch(3, 2, &["three"])).unwrap_err();
    assert_eq!(gap.status(), tailstream_wire::Status::OutOfOrderSequence);
    append(&s, &batch(3, 1, &["two"])).unwrap();
    append(&s, &batch(3, 2, &["three"])).unwrap();
    let values: Vec<_> = read_log(s.log(LogId(0)).unwrap())
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(values, ["one", "two", "three"]);
}

/// librdkafka's timeout path: the producer bumps its epoch and resends from sequence 0. The
/// new epoch's batches are appended (never answered as duplicates of the old epoch's), and a
/// late batch of the old epoch is fenced.
#[test]
fn a_newer_epoch_starts_afresh_and_fences_the_older_one() {
    let s = streamlet(config(1, 1 << 16, 4), 1 << 30);
    append(&s, &batch_at(5, 0, 0, &["a", "b"])).unwrap();
    let renewed = append(&s, &batch_at(5, 1, 0, &["c", "d"])).unwrap();
    assert!(
        !renewed.duplicate,
        "epoch 1 sequence 0 is not epoch 0's batch"
    );
    let fenced = append(&s, &batch_at(5, 0, 2, &["late"])).unwrap_err();
    assert_eq!(fenced.status(), tailstream_wire::Status::ProducerFenced);
    let skipped = append(&s, &batch_at(5, 2, 3, &["x"])).unwrap_err();
    assert_eq!(
        skipped.status(),
        tailstream_wire::Status::OutOfOrderSequence,
        "a newer epoch starts at sequence 0"
    );
    let retry = append(&s, &batch_at(5, 1, 0, &["c", "d"])).unwrap();
    assert!(retry.duplicate);
    assert_eq!(retry.location, renewed.location);
    let values: Vec<_> = read_log(s.log(LogId(0)).unwrap())
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(values, ["a", "b", "c", "d"]);
}

/// Case 5 of issue 20: another client sent sequence 0 under our producer id first. Our batch
/// is not theirs, so it must not be acknowledged as a duplicate of theirs.
#[test]
fn another_batch_under_the_same_producer_and_sequence_is_a_clash_not_a_duplicate() {
    let s = streamlet(config(1, 1 << 16, 4), 1 << 30);
    append(&s, &batch(9, 0, &["squatter"])).unwrap();
    let ours = append(&s, &batch(9, 0, &["mine"])).unwrap_err();
    assert_eq!(ours.status(), tailstream_wire::Status::SequenceClash);
    let values: Vec<_> = read_log(s.log(LogId(0)).unwrap())
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(values, ["squatter"]);
}

/// A rebuilt log's producer table keeps epochs: after recovery a retry of the newest epoch is
/// a duplicate, the old epoch stays fenced, and a clash stays a clash.
#[test]
fn a_rebuilt_log_keeps_producer_epochs_and_batch_identities() {
    let s = streamlet(config(1, 4096, 2), 1 << 30);
    append(&s, &batch_at(6, 0, 0, &["old"])).unwrap();
    for i in 0..40u32 {
        let value = format!("value-{i:03}-{}", "x".repeat(100));
        append(&s, &batch_at(6, 1, i, &[value.as_str()])).unwrap();
    }
    let log = s.log(LogId(0)).unwrap();
    let recovered: Vec<_> = log
        .groups()
        .groups
        .iter()
        .flat_map(|g| {
            g.segments.iter().map(|seg| RecoveredSegment {
                group: g.group,
                segment: seg.segment,
                bytes: Bytes::from(segment_image(log, g.group, seg.segment)),
            })
        })
        .collect();
    assert!(recovered.len() > 2, "several segments");
    let (rebuilt, _) = Streamlet::rebuilt(
        StreamId(1),
        StreamletId(0),
        config(1, 4096, 2),
        SegmentMemory::new(1 << 30),
        64,
        64 << 20,
        OwnershipEpoch(2),
        0,
        (GroupId(1000), SegmentId(1000)),
        &[(LogId(0), recovered)],
        Instant::now(),
    )
    .unwrap();
    let again = |b: &Bytes| {
        let info = validate_batch(b).unwrap();
        rebuilt.append(LogId(0), b, &info, ProducerOwner::ANYONE, Instant::now())
    };
    let last = format!("value-039-{}", "x".repeat(100));
    assert!(
        again(&batch_at(6, 1, 39, &[last.as_str()]))
            .unwrap()
            .duplicate
    );
    assert_eq!(
        again(&batch_at(6, 1, 39, &["other"])).unwrap_err().status(),
        tailstream_wire::Status::SequenceClash
    );
    assert_eq!(
        again(&batch_at(6, 0, 1, &["late"])).unwrap_err().status(),
        tailstream_wire::Status::ProducerFenced
    );
    assert!(!again(&batch_at(6, 1, 40, &["next"])).unwrap().duplicate);
}

#[test]
fn every_segment_starts_with_a_digest_of_the_live_segments() {
    let s = streamlet(config(1, 4096, 2), 1 << 30);
    for i in 0..100u32 {
        append(&s, &batch(1, i, &[&"y".repeat(100)])).unwrap();
    }
    let log = s.log(LogId(0)).unwrap();
    let groups = log.groups();
    let all: Vec<(GroupId, SegmentId)> = groups
        .groups
        .iter()
        .flat_map(|g| g.segments.iter().map(move |s| (g.group, s.segment)))
        .collect();
    let (last_group, last_segment) = *all.last().unwrap();
    let image = segment_image(log, last_group, last_segment);
    let entry = EntryIter::new(&image, true).next().unwrap().unwrap();
    assert_eq!(
        (entry.position, entry.header.entry_type),
        (0, EntryType::LogDigest)
    );
    let digest = LogDigest::decode_exact(Bytes::copy_from_slice(entry.payload)).unwrap();
    let listed: Vec<(GroupId, SegmentId)> = digest
        .segments
        .iter()
        .map(|d| (d.group, d.segment))
        .collect();
    assert_eq!(listed, all);
    assert_eq!((digest.group, digest.segment), (last_group, last_segment));
    // Position 0 in a fetch means the first entry after the digest.
    let outcome = log
        .read(last_group, last_segment, SegmentPosition(0), 1)
        .unwrap();
    let trailer = tailstream_wire::entry::TRAILER_BYTES;
    assert_eq!(outcome.position.0 as usize, entry.end() + trailer);
}

fn segment_image(log: &Log, group: GroupId, segment: SegmentId) -> Vec<u8> {
    log.with_segment(group, segment, |s| {
        s.written_chunks().flat_map(|c| c.to_vec()).collect()
    })
    .unwrap()
}

#[test]
fn a_full_memory_budget_answers_backpressure_until_retention_frees_groups() {
    let mut cfg = config(1, 4096, 1);
    cfg.retention_bytes = 3 * 4096;
    // Room for four segments.
    let s = streamlet(cfg, 4 * 4096);
    let value = "z".repeat(1000);
    let mut seq = 0;
    let refused = loop {
        match append(&s, &batch(1, seq, &[&value])) {
            Ok(_) => seq += 1,
            Err(error) => break error,
        }
        assert!(seq < 1000);
    };
    assert_eq!(refused.status(), tailstream_wire::Status::Backpressure);
    assert!(s.enforce_retention(Instant::now()) > 0);
    append(&s, &batch(1, seq, &[&value])).unwrap();
    // The oldest group is gone: reading it says so.
    let err = s
        .log(LogId(0))
        .unwrap()
        .read(GroupId(0), SegmentId(0), SegmentPosition(0), 100);
    assert!(matches!(err, Err(StorageError::GroupRetired(GroupId(0)))));
}

#[test]
fn retention_set_after_creation_frees_by_the_new_limits_and_unset_frees_nothing() {
    let s = streamlet(config(1, 4096, 1), 64 * 4096);
    let value = "q".repeat(1000);
    for seq in 0..20u32 {
        append(&s, &batch(1, seq, &[&value])).unwrap();
    }
    let written = |s: &Streamlet| -> u64 { s.logs().iter().map(Log::written_bytes).sum() };
    let before = written(&s);
    assert_eq!(s.enforce_retention(Instant::now()), 0, "no limits yet");
    assert!(s.set_retention(0, 3 * 4096));
    assert!(
        !s.set_retention(0, 3 * 4096),
        "the same limits again change nothing"
    );
    assert!(s.enforce_retention(Instant::now()) > 0);
    assert!(written(&s) <= 4 * 4096, "{} of {before}", written(&s));
    // Lifted again: what is left stays, and so does what comes next.
    assert!(s.set_retention(0, 0));
    let kept = written(&s);
    for seq in 20..30u32 {
        append(&s, &batch(1, seq, &[&value])).unwrap();
    }
    assert_eq!(s.enforce_retention(Instant::now()), 0);
    assert!(written(&s) > kept);
    assert_eq!(
        s.config().retention_bytes,
        0,
        "the creation's settings stay as they were"
    );
}

#[test]
fn a_log_start_hides_the_records_before_it_and_retention_frees_their_groups() {
    let s = streamlet(config(1, 4096, 1), 64 * 4096);
    let value = "q".repeat(1000);
    for seq in 0..20u32 {
        append(&s, &batch(1, seq, &[&value])).unwrap();
    }
    let log = &s.logs()[0];
    assert_eq!(log.bounds(), (RecordOffset(0), RecordOffset(20)));
    let written = log.written_bytes();
    let start = |offset| LogStart {
        log: LogId(0),
        offset: RecordOffset(offset),
    };
    assert!(s.set_log_starts(&[start(10)]));
    assert!(!s.set_log_starts(&[start(4)]), "a start never moves back");
    assert!(
        !s.set_log_starts(&[LogStart {
            log: LogId(9),
            ..start(15)
        }]),
        "no such log"
    );
    assert_eq!(log.bounds(), (RecordOffset(10), RecordOffset(20)));
    // No retention limits, yet the groups wholly before the start are freed, and no more.
    assert!(s.enforce_retention(Instant::now()) > 0);
    assert!(log.written_bytes() < written);
    assert_eq!(log.bounds(), (RecordOffset(10), RecordOffset(20)));
    assert_eq!(s.enforce_retention(Instant::now()), 0);
    // A timestamp lookup never answers a deleted record.
    assert_eq!(
        log.offset_for_timestamp(0).map(|(o, _)| o),
        Some(RecordOffset(10))
    );
    // A start past the commit point (the coordinator refuses one: only the owner, which
    // checked the offset against its log under the epoch the coordinator still has, sets a
    // start) serves nothing rather than a range ending before it.
    assert!(s.set_log_starts(&[start(1000)]));
    assert_eq!(log.bounds(), (RecordOffset(20), RecordOffset(20)));
}

#[test]
fn size_retention_runs_on_roll_and_freed_segments_lend_their_buffers_to_new_ones() {
    let mut cfg = config(1, 4096, 1);
    cfg.retention_bytes = 3 * 4096;
    let memory = SegmentMemory::new(64 * 4096);
    let s = Streamlet::new(
        StreamId(1),
        StreamletId(0),
        cfg,
        memory.clone(),
        64,
        64 << 20,
    );
    let value = "r".repeat(1000);
    for seq in 0..40u32 {
        append(&s, &batch(1, seq, &[&value])).unwrap();
        let written: u64 = s.logs().iter().map(Log::written_bytes).sum();
        assert!(
            written <= 4 * 4096,
            "within retention plus the head: {written}"
        );
    }
    assert!(
        memory.buffers_reused() > 5,
        "reused {} buffers",
        memory.buffers_reused()
    );
    // Reused memory holds only what was written into it again: the log reads back clean.
    let records = read_log(s.log(LogId(0)).unwrap());
    assert!(!records.is_empty());
    assert!(records.iter().all(|(_, v)| *v == value));
}

#[test]
fn the_largest_timestamp_is_found_at_its_first_record_across_segments() {
    // Small segments, so the batches spread over several.
    let s = streamlet(config(1, 512, 4), 1 << 30);
    let log = s.log(LogId(0)).unwrap();
    assert_eq!(log.offset_of_max_timestamp(), None, "nothing committed");
    let stamped = [vec![100, 300, 200], vec![300, 50], vec![250], vec![299]];
    for stamps in &stamped {
        let mut builder = RecordBatchBuilder::new(256);
        for stamp in stamps {
            builder.push(*stamp, None, Some(&[7; 100]), &[]);
        }
        let bytes = builder.finish_without_producer();
        let info = validate_batch(&bytes).unwrap();
        s.append(
            LogId(0),
            &bytes,
            &info,
            ProducerOwner::ANYONE,
            Instant::now(),
        )
        .unwrap();
    }
    assert!(
        log.groups().groups[0].segments.len() > 1,
        "several segments"
    );
    // 300 first at offset 1; the later 300 (offset 3) does not replace it.
    assert_eq!(log.offset_of_max_timestamp(), Some((RecordOffset(1), 300)));
    assert_eq!(log.offset_for_timestamp(250), Some((RecordOffset(1), 300)));
    assert_eq!(log.offset_for_timestamp(301), None);
}

#[test]
fn a_batch_without_a_producer_is_appended_each_time_it_comes() {
    let s = streamlet(config(2, 4096, 4), 1 << 30);
    let mut builder = RecordBatchBuilder::new(256);
    builder.push(0, None, Some(b"once"), &[]);
    let bytes = builder.finish_without_producer();
    let info = validate_batch(&bytes).unwrap();
    assert_eq!(info.producer, None);
    let first = s
        .append(
            LogId(1),
            &bytes,
            &info,
            ProducerOwner::ANYONE,
            Instant::now(),
        )
        .unwrap();
    let again = s
        .append(
            LogId(1),
            &bytes,
            &info,
            ProducerOwner::ANYONE,
            Instant::now(),
        )
        .unwrap();
    assert!(!first.duplicate && !again.duplicate);
    assert_eq!(again.location.base_offset, RecordOffset(1));
    assert_eq!(read_log(s.log(LogId(1)).unwrap()).len(), 2);
    assert!(read_log(s.log(LogId(0)).unwrap()).is_empty());
}

#[test]
fn another_user_s_batch_under_a_producer_id_is_refused_not_acknowledged() {
    let s = streamlet(config(2, 4096, 4), 1 << 30);
    let as_user = |bytes: &Bytes, user: &str| {
        let info = validate_batch(bytes).unwrap();
        let log = s.log_for(info.producer.unwrap().producer_id).id();
        s.append(log, bytes, &info, ProducerOwner::user(user), Instant::now())
    };
    let first = batch(9, 0, &["alice's"]);
    as_user(&first, "alice").unwrap();
    // Mallory resends alice's batch (read from the stream) and her next one: neither is
    // answered as a duplicate nor appended.
    for stolen in [first.clone(), batch(9, 1, &["mallory's"])] {
        let refused = as_user(&stolen, "mallory").unwrap_err();
        assert!(
            matches!(refused, StorageError::ForeignProducer { .. }),
            "{refused}"
        );
        assert_eq!(refused.status(), tailstream_wire::Status::Forbidden);
    }
    assert!(as_user(&first, "alice").unwrap().duplicate);
    as_user(&batch(9, 1, &["alice's next"]), "alice").unwrap();
    let log = s.log_for(ProducerId(9));
    let values: Vec<String> = read_log(log).into_iter().map(|(_, v)| v).collect();
    assert_eq!(values, ["alice's", "alice's next"]);
}

#[test]
fn age_retention_frees_only_sealed_groups_older_than_the_limit() {
    let mut cfg = config(1, 4096, 1);
    cfg.retention_ms = 1000;
    let s = streamlet(cfg, 1 << 30);
    for i in 0..20u32 {
        append(&s, &batch(1, i, &[&"q".repeat(1000)])).unwrap();
    }
    let now = Instant::now();
    assert_eq!(s.enforce_retention(now), 0);
    assert!(s.enforce_retention(now + Duration::from_secs(2)) > 0);
    let groups = s.log(LogId(0)).unwrap().groups();
    assert_eq!(groups.groups.len(), 1, "only the open group survives");
    assert!(!groups.groups[0].sealed);
}

#[test]
fn oversized_batches_and_bad_positions_are_refused() {
    let s = streamlet(config(1, 4096, 4), 1 << 30);
    let big = "b".repeat(5000);
    assert!(matches!(
        append(&s, &batch(1, 0, &[&big])),
        Err(StorageError::BatchTooLarge { .. })
    ));
    let a = append(&s, &batch(1, 0, &["ok"])).unwrap();
    let log = s.log(LogId(0)).unwrap();
    let bad = log.read(
        a.location.group,
        a.location.segment,
        SegmentPosition(a.location.position.0 + 1),
        100,
    );
    assert!(matches!(bad, Err(StorageError::PositionOutOfRange { .. })));
    assert!(matches!(
        log.read(GroupId(99), a.location.segment, SegmentPosition(0), 100),
        Err(StorageError::UnknownGroup(_))
    ));
    assert!(matches!(s.log(LogId(7)), Err(StorageError::UnknownLog(_))));
}

#[test]
fn a_log_whose_digest_leaves_no_room_says_so_rather_than_blaming_the_batch() {
    // 4 KiB segments, no retention: each new segment's digest names one more live segment,
    // until a batch that fits an empty log's segment no longer fits beside the digest.
    let s = streamlet(config(1, 4096, 4), 1 << 30);
    let value = "d".repeat(1500);
    let refused = (0..1000u32)
        .map(|i| append(&s, &batch(1, i, &[&value])))
        .find_map(Result::err);
    match refused {
        Some(StorageError::DigestTooLarge { live_segments }) => assert!(live_segments > 100),
        other => panic!("expected DigestTooLarge, got {other:?}"),
    }
}

#[test]
fn a_replicated_log_shows_appends_only_once_committed_in_order() {
    let mut cfg = config(1, 4096, 2);
    cfg.replicas = 2;
    let s = streamlet(cfg, 1 << 30);
    let log = s.log(LogId(0)).unwrap();
    let mut points = Vec::new();
    for i in 0..40u32 {
        let a = append(&s, &batch(1, i, &[&format!("r{i:03}-{}", "p".repeat(90))])).unwrap();
        points.push(a.location.commit_point());
    }
    assert!(read_log(log).is_empty(), "nothing is committed yet");
    assert_eq!(log.offsets(), (RecordOffset(40), RecordOffset(0)));
    // Commit halfway: exactly the first twenty records become visible, across segments.
    log.commit_through(points[19]);
    let visible = read_log(log);
    assert_eq!(visible.len(), 20);
    assert_eq!(visible.last().unwrap().0, 19);
    assert_eq!(log.offsets().1, RecordOffset(20));
    assert_eq!(log.commit_point(), points[19]);
    // Commits never move backwards.
    log.commit_through(points[3]);
    assert_eq!(log.commit_point(), points[19]);
    log.commit_through(*points.last().unwrap());
    assert_eq!(read_log(log).len(), 40);
    // The segment after the head has its ids reserved, beyond every existing one.
    let views = log.segments_since(None);
    let (_, upcoming) = log.upcoming().unwrap();
    assert!(views.iter().all(|v| v.segment < upcoming));
    assert!(views.iter().rev().skip(1).all(|v| v.sealed));
}

#[test]
fn a_replication_backlog_beyond_its_bound_is_refused_as_busy() {
    let mut cfg = config(1, 1 << 20, 4);
    cfg.replicas = 1;
    let s = Streamlet::new(
        StreamId(1),
        StreamletId(0),
        cfg,
        SegmentMemory::new(1 << 30),
        64,
        10_000,
    );
    let value = "b".repeat(1000);
    let mut seq = 0;
    let refused = loop {
        match append(&s, &batch(1, seq, &[&value])) {
            Ok(_) => seq += 1,
            Err(error) => break error,
        }
    };
    assert_eq!(refused.status(), tailstream_wire::Status::Busy);
    assert!((8..=10).contains(&seq), "{seq}");
}

mod model {
    //! Random appends from several producers (with retries) against a `Vec` per log.
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn storage_matches_a_vec_per_log(
            ops in proptest::collection::vec((0u64..5, 1usize..4, 0usize..200, any::<bool>()), 1..150),
            logs in 1u32..4,
        ) {
            let s = streamlet(config(logs, 4096, 2), 1 << 30);
            let mut model: Vec<Vec<String>> = vec![Vec::new(); logs as usize];
            let mut next_seq = [0u32; 5];
            for (i, (producer, records, len, retry)) in ops.into_iter().enumerate() {
                let values: Vec<String> =
                    (0..records).map(|r| format!("{producer}-{i}-{r}-{}", "v".repeat(len))).collect();
                let refs: Vec<&str> = values.iter().map(String::as_str).collect();
                let b = batch(producer, next_seq[producer as usize], &refs);
                let first = append(&s, &b).unwrap();
                prop_assert!(!first.duplicate);
                if retry {
                    let again = append(&s, &b).unwrap();
                    prop_assert!(again.duplicate);
                    prop_assert_eq!(again.location, first.location);
                }
                // Sequences count records.
                next_seq[producer as usize] += records as u32;
                model[(producer % u64::from(logs)) as usize].extend(values);
            }
            for (log, expected) in s.logs().iter().zip(model) {
                let got: Vec<String> = read_log(log).into_iter().map(|r| r.1).collect();
                prop_assert_eq!(got, expected);
            }
        }
    }
}

/// Heartbeats report heads and ends from the commit feed instead of scanning every log: each
/// linked log is queued once when linked and once per commit move between takes.
#[test]
fn the_commit_feed_names_each_log_whose_commit_point_moved() {
    let s = std::sync::Arc::new(streamlet(config(2, 4096, 4), 1 << 20));
    let feed = std::sync::Arc::new(crate::commit_feed::CommitFeed::default());
    s.link_commit_feed(&feed);
    let key = |log| (StreamId(1), StreamletId(0), LogId(log));
    assert_eq!(feed.take(), vec![key(0), key(1)]);
    assert!(feed.take().is_empty());
    let appended = append(&s, &batch(1, 0, &["a"])).unwrap();
    append(&s, &batch(1, 1, &["b"])).unwrap();
    let log = s.log_for(ProducerId(1)).id();
    assert_eq!(feed.take(), vec![key(log.0)]);
    assert_eq!(
        s.log(log).unwrap().committed_segment(),
        Some(appended.location.segment)
    );
    assert!(feed.take().is_empty());
}
