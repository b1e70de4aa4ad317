//! The recovery planner: listings in, a plan or a precise "lost" out.

use super::planner::{Listing, Target, check, plan};
use crate::metadata::KeptSegments;
use std::collections::BTreeMap;
use tailstream_wire::codec::Encode;
use tailstream_wire::entry::{DigestSegment, LogDigest};
use tailstream_wire::messages::{ReplicaId, ReplicaInfo, ReplicaState, StreamConfig};
use tailstream_wire::{
    GroupId, LogId, RecordOffset, ReplicaEpoch, SegmentId, ServerId, StreamId, StreamletId,
};

const STREAM: StreamId = StreamId(7);
const STREAMLET: StreamletId = StreamletId(1);
const CRASHED: ServerId = ServerId::new(0, 1);

fn config(logs: u32, retention: bool) -> StreamConfig {
    let mut config = tailstream_config::Config::embedded().stream_defaults;
    config.logs_per_streamlet = logs;
    config.replicas = 2;
    config.retention_bytes = if retention { 1 << 20 } else { 0 };
    config
}

/// A replica of `segment` (in `group`) of `log`, whose digest names `named` (group, segment)
/// pairs up to itself.
fn replica(
    log: u32,
    group: u64,
    segment: u64,
    named: &[(u64, u64)],
    epoch: u32,
    state: ReplicaState,
    valid_bytes: u32,
) -> ReplicaInfo {
    let digest = LogDigest {
        stream: STREAM,
        streamlet: STREAMLET,
        log: LogId(log),
        group: GroupId(group),
        segment: SegmentId(segment),
        base_offset: RecordOffset(0),
        segments: named
            .iter()
            .map(|(g, s)| DigestSegment {
                group: GroupId(*g),
                segment: SegmentId(*s),
            })
            .collect(),
    };
    ReplicaInfo {
        primary: CRASHED,
        replica: ReplicaId {
            stream: STREAM,
            streamlet: STREAMLET,
            log: LogId(log),
            group: GroupId(group),
            segment: SegmentId(segment),
        },
        epoch: ReplicaEpoch(epoch),
        state,
        filling: false,
        valid_bytes,
        digest: digest.to_bytes(),
    }
}

fn listing(backup: u32, replicas: Vec<ReplicaInfo>) -> Listing {
    Listing {
        backup: ServerId::new(backup, 1),
        peer_addr: format!("127.0.0.1:{backup}"),
        replicas,
    }
}

/// No log has kept segments saved (a coordinator from before they existed).
static NOTHING_KEPT: BTreeMap<LogId, KeptSegments> = BTreeMap::new();

fn target<'a>(config: &'a StreamConfig, heads: &'a BTreeMap<LogId, SegmentId>) -> Target<'a> {
    Target {
        stream: STREAM,
        streamlet: STREAMLET,
        config,
        reported_heads: heads,
        kept: &NOTHING_KEPT,
    }
}

/// A target whose log 0 keeps `oldest..=head`, as saved by the coordinator (no head in
/// memory: the coordinator restarted since).
fn target_keeping<'a>(
    config: &'a StreamConfig,
    kept: &'a BTreeMap<LogId, KeptSegments>,
) -> Target<'a> {
    static NO_HEADS: BTreeMap<LogId, SegmentId> = BTreeMap::new();
    Target {
        stream: STREAM,
        streamlet: STREAMLET,
        config,
        reported_heads: &NO_HEADS,
        kept,
    }
}

fn kept(oldest: u64, head: u64) -> BTreeMap<LogId, KeptSegments> {
    BTreeMap::from([(
        LogId(0),
        KeptSegments {
            oldest: SegmentId(oldest),
            head: SegmentId(head),
            open: None,
        },
    )])
}

use ReplicaState::{Closed, Open};

#[test]
fn closed_segments_are_adopted_and_the_open_head_takes_its_longest_valid_prefix() {
    let config = config(1, false);
    let heads = BTreeMap::new();
    let named = [(0, 0), (0, 1)];
    let listings = vec![
        listing(
            1,
            vec![
                replica(0, 0, 0, &named[..1], 1, Closed, 5000),
                replica(0, 0, 1, &named, 1, Open, 700),
            ],
        ),
        listing(
            2,
            vec![
                replica(0, 0, 0, &named[..1], 1, Closed, 5000),
                // Two replicas of the head of different lengths: the longer one wins, and only
                // copies that have all of it can serve it.
                replica(0, 0, 1, &named, 1, Open, 900),
            ],
        ),
    ];
    let plan = plan(&target(&config, &heads), &listings).unwrap();
    let log = &plan.logs[0];
    assert_eq!(log.segments.len(), 2);
    let (closed, head) = (&log.segments[0], &log.segments[1]);
    assert!(closed.closed && closed.length == 5000 && closed.holders.len() == 2);
    assert!(!head.closed && head.length == 900);
    assert_eq!(head.holders.len(), 1);
    assert_eq!(head.holders[0].backup, ServerId::new(2, 1));
    assert_eq!(
        (plan.next_group, plan.next_segment),
        (GroupId(1), SegmentId(2))
    );
    assert_eq!(plan.bytes, 5900);
}

#[test]
fn a_segment_no_backup_holds_makes_the_streamlet_lost_and_says_which() {
    let config = config(1, false);
    let heads = BTreeMap::new();
    let named = [(0, 0), (0, 1), (1, 2)];
    let listings = vec![listing(
        1,
        vec![
            replica(0, 0, 0, &named[..1], 1, Closed, 100),
            replica(0, 1, 2, &named, 1, Open, 100),
        ],
    )];
    let error = plan(&target(&config, &heads), &listings).unwrap_err();
    assert!(
        error.contains("segment-1") && error.contains("group-0"),
        "{error}"
    );
}

#[test]
fn a_filling_replacement_never_counts_and_the_highest_complete_epoch_wins() {
    let config = config(1, false);
    let heads = BTreeMap::new();
    let named = [(0, 0)];
    let mut filling = replica(0, 0, 0, &named, 3, Open, 50);
    filling.filling = true;
    let listings = vec![
        listing(1, vec![replica(0, 0, 0, &named, 1, Closed, 400)]),
        listing(2, vec![replica(0, 0, 0, &named, 2, Closed, 400), filling]),
        listing(3, vec![replica(0, 0, 0, &named, 2, Closed, 400)]),
    ];
    let plan = plan(&target(&config, &heads), &listings).unwrap();
    let source = &plan.logs[0].segments[0];
    assert_eq!((source.epoch, source.length), (ReplicaEpoch(2), 400));
    let backups: Vec<u32> = source.holders.iter().map(|h| h.backup.index).collect();
    assert_eq!(backups, vec![2, 3], "the stale epoch is not a holder");
    assert_eq!(plan.next_segment, SegmentId(1));
}

#[test]
fn corrupt_copies_are_skipped_and_a_segment_with_only_corrupt_copies_is_lost() {
    let config = config(1, false);
    let heads = BTreeMap::new();
    let named = [(0, 0), (0, 1)];
    let listings = vec![
        listing(
            1,
            vec![
                replica(0, 0, 0, &named[..1], 1, ReplicaState::Corrupt, 0),
                replica(0, 0, 1, &named, 1, Open, 10),
            ],
        ),
        listing(2, vec![replica(0, 0, 0, &named[..1], 1, Closed, 300)]),
    ];
    let plan = plan(&target(&config, &heads), &listings).unwrap();
    assert_eq!(plan.logs[0].segments[0].holders.len(), 1);
    let only_corrupt = vec![listing(
        1,
        vec![
            replica(0, 0, 0, &named[..1], 1, ReplicaState::Corrupt, 0),
            replica(0, 0, 1, &named, 1, Open, 10),
        ],
    )];
    assert!(plan_err(&config, &heads, &only_corrupt).contains("segment-0"));
}

fn plan_err(config: &StreamConfig, heads: &BTreeMap<LogId, SegmentId>, l: &[Listing]) -> String {
    plan(&target(config, heads), l).unwrap_err()
}

#[test]
fn oldest_segments_missing_are_freed_only_when_the_stream_has_retention() {
    let named = [(0, 0), (0, 1), (1, 2)];
    let listings = vec![listing(
        1,
        vec![
            replica(0, 0, 1, &named[..2], 1, Closed, 100),
            replica(0, 1, 2, &named, 1, Open, 60),
        ],
    )];
    let heads = BTreeMap::new();
    let with = config(1, true);
    let plan = plan(&target(&with, &heads), &listings).unwrap();
    let recovered: Vec<u64> = plan.logs[0].segments.iter().map(|s| s.segment.0).collect();
    assert_eq!(recovered, vec![1, 2]);
    assert!(plan_err(&config(1, false), &heads, &listings).contains("segment-0"));
}

#[test]
fn a_head_newer_than_any_copy_is_lost_and_an_unwritten_log_is_empty() {
    let config = config(2, false);
    let named = [(0, 0)];
    let listings = vec![listing(1, vec![replica(0, 0, 0, &named, 1, Open, 80)])];
    let mut heads = BTreeMap::new();
    // Log 1 never had a segment: nothing to rebuild.
    let plan = plan(&target(&config, &heads), &listings).unwrap();
    assert_eq!(plan.logs.len(), 1);
    // The owner had rolled log 0 to segment 3: copies of segment 0 are not the whole log.
    heads.insert(LogId(0), SegmentId(3));
    assert!(plan_err(&config, &heads, &listings).contains("segment-3"));
    // Log 1 had segments, but none is on a live backup.
    heads.clear();
    heads.insert(LogId(1), SegmentId(4));
    assert!(plan_err(&config, &heads, &listings).contains("log-1"));
}

#[test]
fn ids_continue_above_everything_seen_even_unwritten_reserved_segments() {
    let config = config(1, false);
    let heads = BTreeMap::new();
    let named = [(0, 0)];
    // Segment 9 of group 4 was opened for the next roll but never written.
    let mut reserved = replica(0, 4, 9, &[], 1, Open, 0);
    reserved.digest = bytes::Bytes::new();
    let listings = vec![listing(
        1,
        vec![replica(0, 0, 0, &named, 1, Open, 80), reserved],
    )];
    let plan = plan(&target(&config, &heads), &listings).unwrap();
    assert_eq!(
        (plan.next_group, plan.next_segment),
        (GroupId(5), SegmentId(10))
    );
    assert_eq!(plan.logs[0].segments.len(), 1);
}

#[test]
fn replicas_of_other_streamlets_are_ignored() {
    let config = config(1, false);
    let heads = BTreeMap::new();
    let mut other = replica(0, 0, 0, &[(0, 0)], 1, Open, 80);
    other.replica.streamlet = StreamletId(9);
    let listings = vec![listing(1, vec![other])];
    let plan = plan(&target(&config, &heads), &listings).unwrap();
    assert!(plan.logs.is_empty());
    assert_eq!(plan.next_segment, SegmentId(0));
}

#[test]
fn an_unreplicated_streamlet_is_lost_with_its_owner_even_if_nothing_was_reported() {
    let mut config = config(2, false);
    config.replicas = 0;
    let heads = BTreeMap::new();
    let error = plan(&target(&config, &heads), &[listing(1, vec![])]).unwrap_err();
    assert!(error.contains("replicas=0"), "{error}");
}

/// Issue 21, finding 2: the head a log's owner made durable before acknowledging records in it
/// survives a coordinator restart (no head in memory); a plan whose newest segment is older
/// is refused, never served shorter.
#[test]
fn a_durable_head_newer_than_every_listed_segment_is_lost_not_served_short() {
    let config = config(1, false);
    let named = [(0, 0), (0, 1)];
    // Segment 2 (the head, with acknowledged records) was only on backups that are gone.
    let listings = vec![listing(
        1,
        vec![
            replica(0, 0, 0, &named[..1], 1, Closed, 5000),
            replica(0, 0, 1, &named, 1, Closed, 5000),
        ],
    )];
    let kept = kept(0, 2);
    let lost = plan(&target_keeping(&config, &kept), &listings).unwrap_err();
    assert!(lost.contains("seg2") || lost.contains('2'), "{lost}");
    // With nothing saved (the old coordinator), the same listings were planned short.
    assert!(plan(&target(&config, &BTreeMap::new()), &listings).is_ok());
    // And a log with a durable head but no segment on any live backup is lost, not empty.
    let lost = plan(&target_keeping(&config, &kept), &[listing(1, vec![])]).unwrap_err();
    assert!(lost.contains("no segment"), "{lost}");
}

/// Issue 21, finding 2: with retention, a missing oldest segment used to be taken as freed.
/// Now only segments older than the durable oldest kept one are; any other missing segment
/// makes the log lost.
#[test]
fn only_segments_older_than_the_durable_oldest_are_taken_as_freed() {
    let config = config(1, true);
    let named = [(0, 0), (0, 1), (0, 2), (0, 3)];
    let listings = vec![listing(
        1,
        vec![
            // Segment 0 is still on a backup (its free was late), 1 is gone, 2 and 3 are here.
            replica(0, 0, 0, &named[..1], 1, Closed, 5000),
            replica(0, 0, 2, &named[..3], 1, Closed, 5000),
            replica(0, 0, 3, &named, 1, Open, 300),
        ],
    )];
    // The owner made oldest = 2 durable before freeing 0 and 1: the plan is 2 and 3.
    let kept_from_2 = kept(2, 3);
    let planned = plan(&target_keeping(&config, &kept_from_2), &listings).unwrap();
    let segments: Vec<u64> = planned.logs[0]
        .segments
        .iter()
        .map(|s| s.segment.0)
        .collect();
    assert_eq!(segments, vec![2, 3]);
    // Oldest = 1: segment 1 must be there, and it is not.
    let kept_from_1 = kept(1, 3);
    let lost = plan(&target_keeping(&config, &kept_from_1), &listings).unwrap_err();
    assert!(lost.contains("on no live backup"), "{lost}");
    // Only 2 and 3 listed, oldest 0 saved: lost (the old rule took 0 and 1 as freed).
    let newest_only = vec![listing(
        1,
        vec![
            replica(0, 0, 2, &named[..3], 1, Closed, 5000),
            replica(0, 0, 3, &named, 1, Open, 300),
        ],
    )];
    let kept_from_0 = kept(0, 3);
    assert!(plan(&target_keeping(&config, &kept_from_0), &newest_only).is_err());
    assert!(plan(&target(&config, &BTreeMap::new()), &newest_only).is_ok());
}

/// Issue 21, item 5: every plan is checked before it is used; one that would serve a log
/// shorter than its known head (or reuse an id) is refused as a broken invariant.
#[test]
fn a_plan_ending_before_the_head_or_reusing_ids_breaks_the_check() {
    let config = config(1, false);
    let named = [(0, 0), (0, 1)];
    let listings = vec![listing(
        1,
        vec![
            replica(0, 0, 0, &named[..1], 1, Closed, 5000),
            replica(0, 0, 1, &named, 1, Open, 700),
        ],
    )];
    let kept = kept(0, 1);
    let target = target_keeping(&config, &kept);
    let good = plan(&target, &listings).unwrap();
    assert_eq!(check(&target, &good), Ok(()));
    let mut short = good.clone();
    short.logs[0].segments.pop();
    assert!(
        check(&target, &short)
            .unwrap_err()
            .contains("before the log's head")
    );
    let mut reused = good.clone();
    reused.next_segment = SegmentId(1);
    assert!(
        check(&target, &reused)
            .unwrap_err()
            .contains("next segment id")
    );
    let mut unordered = good;
    unordered.logs[0].segments.reverse();
    assert!(
        check(&target, &unordered)
            .unwrap_err()
            .contains("out of order")
    );
}

/// Log 0 keeps `0..=head` and may hold acknowledged records in `open` up to replica `epoch`.
fn kept_open(head: u64, open: u64, epoch: u32) -> BTreeMap<LogId, KeptSegments> {
    BTreeMap::from([(
        LogId(0),
        KeptSegments {
            oldest: SegmentId(0),
            head: SegmentId(head),
            open: Some(tailstream_wire::messages::OpenSegment {
                segment: SegmentId(open),
                epoch: ReplicaEpoch(epoch),
            }),
        },
    )])
}

/// An empty replica of `segment` (opened ahead of the log's roll into it: no digest yet).
fn empty(segment: u64, epoch: u32) -> ReplicaInfo {
    ReplicaInfo {
        valid_bytes: 0,
        digest: bytes::Bytes::new(),
        ..replica(0, 0, segment, &[], epoch, Open, 0)
    }
}

#[test]
fn an_open_segment_a_current_empty_copy_proves_empty_ends_the_log_at_its_head() {
    let config = config(1, false);
    let kept = kept_open(1, 2, 0);
    let named = [(0, 0), (0, 1)];
    let listings = vec![listing(
        1,
        vec![
            replica(0, 0, 0, &named[..1], 0, Closed, 5000),
            replica(0, 0, 1, &named, 0, Open, 700),
            empty(2, 0),
        ],
    )];
    let plan = plan(&target_keeping(&config, &kept), &listings).unwrap();
    let segments: Vec<u64> = plan.logs[0].segments.iter().map(|s| s.segment.0).collect();
    assert_eq!(segments, [0, 1]);
    assert_eq!(plan.empty_open, [LogId(0)]);
    // Its id stays used.
    assert_eq!(plan.next_segment, SegmentId(3));
}

#[test]
fn an_open_segment_no_current_copy_answers_for_is_lost_never_cut_off() {
    let config = config(1, false);
    let named = [(0, 0), (0, 1)];
    let head_only = vec![listing(
        1,
        vec![
            replica(0, 0, 0, &named[..1], 0, Closed, 5000),
            replica(0, 0, 1, &named, 0, Open, 700),
        ],
    )];
    // No copy of segment 2 answered: it may hold acknowledged records.
    let error = plan(&target_keeping(&config, &kept_open(1, 2, 0)), &head_only).unwrap_err();
    assert!(
        error.contains("SegmentId(2)") || error.contains("2 may hold"),
        "{error}"
    );
    // An empty copy older than the saved epoch is no proof: the segment lost a replica after
    // it was opened, and the copies at the higher epoch (that may hold records) are away.
    let mut stale = head_only.clone();
    stale[0].replicas.push(empty(2, 0));
    let error = plan(&target_keeping(&config, &kept_open(1, 2, 1)), &stale).unwrap_err();
    assert!(error.contains("epoch 1"), "{error}");
}

#[test]
fn a_stale_copy_of_the_open_segment_is_never_served_as_its_end() {
    let config = config(1, false);
    let named = [(0, 0), (0, 1)];
    // The copy at epoch 0 stopped counting with 300 bytes; records went on at epoch 1 (saved),
    // on copies that are away.
    let listings = vec![listing(
        1,
        vec![
            replica(0, 0, 0, &named[..1], 0, Closed, 5000),
            replica(0, 0, 1, &named, 0, Open, 300),
        ],
    )];
    let error = plan(&target_keeping(&config, &kept_open(0, 1, 1)), &listings).unwrap_err();
    assert!(error.contains("epoch 1"), "{error}");
    // Without the saved epoch (an older coordinator) the stale prefix would be served.
    assert!(plan(&target_keeping(&config, &kept(0, 0)), &listings).is_ok());
    // A copy at the saved epoch is used.
    let mut current = listings.clone();
    current.push(listing(2, vec![replica(0, 0, 1, &named, 1, Open, 900)]));
    let plan = plan(&target_keeping(&config, &kept_open(0, 1, 1)), &current).unwrap();
    let head = plan.logs[0].segments.last().unwrap();
    assert_eq!(
        (head.segment, head.epoch, head.length),
        (SegmentId(1), ReplicaEpoch(1), 900)
    );
    assert!(plan.empty_open.is_empty());
}

/// Backups send the digests of each log's newest segments only (a listing would otherwise be
/// quadratic in a log's length): older segments with no digest plan exactly as with theirs,
/// and a newest copy that cannot be used falls back to a spare digest.
#[test]
fn a_listing_with_only_the_newest_digests_plans_as_the_full_one() {
    let config = config(1, false);
    let named: Vec<(u64, u64)> = (0..8).map(|s| (0, s)).collect();
    let full = |backup: u32| {
        listing(
            backup,
            (0..8u64)
                .map(|s| replica(0, 0, s, &named[..=s as usize], 1, Closed, 1000))
                .collect(),
        )
    };
    let listings = vec![full(1), full(2)];
    let kept = kept(0, 7);
    let whole = plan(&target_keeping(&config, &kept), &listings).unwrap();
    let mut trimmed = listings.clone();
    for l in &mut trimmed {
        for info in &mut l.replicas {
            if info.replica.segment.0 < 4 {
                info.digest = bytes::Bytes::new();
            }
        }
    }
    assert_eq!(
        plan(&target_keeping(&config, &kept), &trimmed),
        Ok(whole.clone())
    );
    // The newest segment's copies are corrupt: the spare digest of segment 6 names segments
    // 0..=6, and the saved head (7) makes the log lost rather than served without it.
    for l in &mut trimmed {
        l.replicas[7].state = ReplicaState::Corrupt;
    }
    let error = plan(&target_keeping(&config, &kept), &trimmed).unwrap_err();
    assert!(error.contains(&SegmentId(7).to_string()), "{error}");
}

/// While no coordinator leads, an owner commits in segments past its saved bounds when they
/// are at their first replica epoch on every backup (`Replicator::commit_unsaved_leaderless`):
/// recovery plans them from any one copy, past the saved head and open segment, whole.
#[test]
fn segments_committed_past_the_saved_bounds_while_leaderless_are_recovered_whole() {
    let config = config(1, false);
    let named: Vec<(u64, u64)> = (0..4).map(|s| (0, s)).collect();
    // Saved: head 1, open 2 at epoch 1. Committed unsaved since: segment 3, of which only
    // one backup (of R = 2) is still there.
    let listings = vec![listing(
        1,
        vec![
            replica(0, 0, 0, &named[..1], 1, Closed, 5000),
            replica(0, 0, 1, &named[..2], 1, Closed, 5000),
            replica(0, 0, 2, &named[..3], 1, Closed, 5000),
            replica(0, 0, 3, &named[..4], 1, Open, 700),
        ],
    )];
    let planned = plan(&target_keeping(&config, &kept_open(1, 2, 1)), &listings).unwrap();
    let segments: Vec<(u64, u32)> = planned.logs[0]
        .segments
        .iter()
        .map(|s| (s.segment.0, s.length))
        .collect();
    assert_eq!(segments, [(0, 5000), (1, 5000), (2, 5000), (3, 700)]);
    assert!(planned.empty_open.is_empty());
    assert_eq!(planned.next_segment, SegmentId(4));

    // A log whose first segment was committed unsaved (nothing kept at all) is recovered too.
    let first = vec![listing(
        2,
        vec![replica(0, 0, 0, &named[..1], 1, Open, 300)],
    )];
    let planned = plan(&target_keeping(&config, &NOTHING_KEPT), &first).unwrap();
    assert_eq!(planned.logs[0].segments.len(), 1);
    assert_eq!(planned.logs[0].segments[0].length, 300);
}
