//! Recovery planning, pure: what the backups hold (their `ListReplicas` answers) in, and per
//! streamlet either a plan (for each log, every segment it must have, the replica epoch and
//! length to recover, and who holds it) or a precise "lost" answer out.
//!
//! Per log, the newest log digest found names every segment the log must have (the digest of a
//! segment lists every live segment of its log up to itself). For each, the plan takes the
//! highest epoch among complete copies (never a `filling` replacement, never a corrupt one): a
//! closed copy gives the closed length; open copies give the longest valid prefix Algorithm 1
//! found (bytes past the acknowledged point may be in it; they were never acknowledged, and
//! the rebuilt producer tables make any retry land once). A segment no backup can supply makes
//! the streamlet lost, unless it is older than the log's oldest kept segment (retention freed
//! it). A log whose head (as its owner made it durable, or reported since) is newer than any
//! digest found is lost too: its newest segments are on no live backup. So is one whose saved
//! open segment (the one past the head records may be acknowledged in, up to a replica epoch)
//! is newer than every digest found, unless a current copy of it (at that epoch or above; an
//! older one may be a stale prefix and is never used) proves it empty. A plan never serves a
//! log shorter than its head. (Logs saved before kept
//! segments existed fall back to taking missing oldest segments of a stream with retention as
//! freed.) An unreplicated streamlet (R = 0) is always lost with its owner: no backup can say
//! whether it held anything.

use crate::metadata::KeptSegments;
use std::collections::BTreeMap;
use tailstream_wire::codec::Decode;
use tailstream_wire::entry::LogDigest;
use tailstream_wire::messages::{
    LogRecovery, ReplicaHolder, ReplicaInfo, ReplicaState, SegmentSource, StreamConfig,
};
use tailstream_wire::{GroupId, LogId, ReplicaEpoch, SegmentId, ServerId, StreamId, StreamletId};

/// Why an unreplicated streamlet whose owner crashed is lost.
pub const UNREPLICATED: &str =
    "unreplicated (replicas=0): its records lived only on its crashed owner";

/// One backup's answer to `ListReplicas`.
#[derive(Clone, Debug)]
pub struct Listing {
    pub backup: ServerId,
    pub peer_addr: String,
    pub replicas: Vec<ReplicaInfo>,
}

/// A streamlet to plan.
#[derive(Clone, Debug)]
pub struct Target<'a> {
    pub stream: StreamId,
    pub streamlet: StreamletId,
    pub config: &'a StreamConfig,
    /// The newest segment its owner reported per log, when known (memory only).
    pub reported_heads: &'a BTreeMap<LogId, SegmentId>,
    /// Per log, the segments its owners made durable as kept before acknowledging records.
    pub kept: &'a BTreeMap<LogId, KeptSegments>,
}

/// What to rebuild a streamlet from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub logs: Vec<LogRecovery>,
    pub next_group: GroupId,
    pub next_segment: SegmentId,
    /// Bytes the rebuild reads.
    pub bytes: u64,
    /// Logs whose saved open segment a current, empty copy proved empty (no longer needed once
    /// the rebuild is saved: its owner is fenced, so it stays empty).
    pub empty_open: Vec<LogId>,
    /// Segment memory the rebuilt streamlet takes on its new owner (a whole segment each).
    pub memory_bytes: u64,
}

/// A usable copy of one segment.
struct Copy<'a> {
    info: &'a ReplicaInfo,
    listing: &'a Listing,
}

fn is_usable(info: &ReplicaInfo) -> bool {
    !info.filling && info.state != ReplicaState::Corrupt && info.valid_bytes > 0
}

/// Whether `info` proves its segment empty, given records were acknowledged in it only at
/// replica epochs up to `epoch`: every copy at `epoch` or above that is not still filling
/// held every acknowledged byte of it (a copy that stops counting stops the commit until the
/// copies that count are at a higher epoch, by a replacement or, with none to be had, by a
/// raise of their epoch, and that epoch is saved), so an empty one means nothing was.
fn proves_empty(info: &ReplicaInfo, epoch: ReplicaEpoch) -> bool {
    !info.filling
        && info.state != ReplicaState::Corrupt
        && info.valid_bytes == 0
        && info.epoch >= epoch
}

/// Plans `target` from `listings`; `Err` says exactly what is missing.
pub fn plan(target: &Target, listings: &[Listing]) -> Result<Plan, String> {
    if target.config.replicas == 0 {
        // Nothing outlives an unreplicated owner, and whether it acknowledged anything since
        // its last heartbeat is unknowable: never serve it as if it were empty.
        return Err(UNREPLICATED.into());
    }
    let ours = |info: &ReplicaInfo| {
        info.replica.stream == target.stream && info.replica.streamlet == target.streamlet
    };
    let mut next_group = 0u64;
    let mut next_segment = 0u64;
    let mut by_log: BTreeMap<LogId, BTreeMap<SegmentId, Vec<Copy>>> = BTreeMap::new();
    for listing in listings {
        for info in listing.replicas.iter().filter(|i| ours(i)) {
            // Every id ever used, usable copy or not, stays used.
            next_group = next_group.max(info.replica.group.0 + 1);
            next_segment = next_segment.max(info.replica.segment.0 + 1);
            if is_usable(info) {
                by_log
                    .entry(info.replica.log)
                    .or_default()
                    .entry(info.replica.segment)
                    .or_default()
                    .push(Copy { info, listing });
            }
        }
    }
    let mut logs = Vec::new();
    let mut bytes = 0u64;
    let mut segments_planned = 0u64;
    let mut empty_open = Vec::new();
    for log in (0..target.config.logs_per_streamlet).map(LogId) {
        let mut segments = by_log.remove(&log).unwrap_or_default();
        let kept = target.kept.get(&log).copied();
        let open = kept.and_then(|k| k.open_past_head());
        let open_empty = match open {
            Some(open) => {
                if let Some(copies) = segments.get_mut(&open.segment) {
                    copies.retain(|c| c.info.epoch >= open.epoch);
                    if copies.is_empty() {
                        segments.remove(&open.segment);
                    }
                }
                !segments.contains_key(&open.segment)
                    && listings.iter().flat_map(|l| &l.replicas).any(|info| {
                        ours(info)
                            && info.replica.log == log
                            && info.replica.segment == open.segment
                            && proves_empty(info, open.epoch)
                    })
            }
            None => false,
        };
        if open_empty {
            empty_open.push(log);
        }
        let open = open.filter(|_| !open_empty);
        let reported = target.reported_heads.get(&log).copied();
        let head = reported.max(kept.map(|k| k.head));
        let Some(recovery) = plan_log(target, log, &segments, head, open, kept)? else {
            continue;
        };
        for source in &recovery.segments {
            next_group = next_group.max(source.group.0 + 1);
            next_segment = next_segment.max(source.segment.0 + 1);
            bytes += u64::from(source.length);
            segments_planned += 1;
        }
        logs.push(recovery);
    }
    let plan = Plan {
        logs,
        next_group: GroupId(next_group),
        next_segment: SegmentId(next_segment),
        bytes,
        empty_open,
        memory_bytes: segments_planned.saturating_mul(u64::from(target.config.segment_size_bytes)),
    };
    check(target, &plan).map_err(|what| crate::invariant::broken(&what))?;
    Ok(plan)
}

/// What every plan must be: per log, segments in increasing order, each with bytes and a
/// holder, the newest at least the log's known head (never a shorter log), and new ids above
/// every planned one.
pub(super) fn check(target: &Target, plan: &Plan) -> Result<(), String> {
    for log in &plan.logs {
        let ordered = log.segments.windows(2).all(|w| w[0].segment < w[1].segment);
        if !ordered {
            return Err(format!("{}: a plan's segments are out of order", log.log));
        }
        if let Some(empty) = log
            .segments
            .iter()
            .find(|s| s.length == 0 || s.holders.is_empty())
        {
            return Err(format!(
                "{}: {} is planned with nothing to read",
                log.log, empty.segment
            ));
        }
        let newest = log.segments.last().map(|s| s.segment);
        let head = target
            .reported_heads
            .get(&log.log)
            .copied()
            .max(target.kept.get(&log.log).map(|k| k.head));
        if head.is_some_and(|head| newest.is_none_or(|newest| newest < head)) {
            return Err(format!("{}: a plan ends before the log's head", log.log));
        }
        let open = target.kept.get(&log.log).and_then(|k| k.open_past_head());
        if open.is_some_and(|open| {
            !plan.empty_open.contains(&log.log) && newest.is_none_or(|n| n < open.segment)
        }) {
            return Err(format!(
                "{}: a plan ends before the log's open segment, not proven empty",
                log.log
            ));
        }
        if newest.is_some_and(|newest| newest >= plan.next_segment) {
            return Err(format!("{}: next segment id not above the plan", log.log));
        }
    }
    Ok(())
}

/// One log: `None` for a log that never had a segment.
fn plan_log(
    target: &Target,
    log: LogId,
    segments: &BTreeMap<SegmentId, Vec<Copy>>,
    reported_head: Option<SegmentId>,
    open: Option<tailstream_wire::messages::OpenSegment>,
    kept: Option<KeptSegments>,
) -> Result<Option<LogRecovery>, String> {
    // The newest segment with a readable digest: its digest names the whole log.
    let newest = segments.iter().rev().find_map(|(segment, copies)| {
        copies.iter().find_map(|copy| {
            let digest = LogDigest::decode_exact(copy.info.digest.clone()).ok()?;
            (digest.segment == *segment && digest.log == log).then_some(digest)
        })
    });
    let Some(digest) = newest else {
        return match reported_head {
            Some(head) => Err(format!(
                "{log}: no segment is on a live backup (its owner last reported {head})"
            )),
            None => Ok(None),
        };
    };
    if let Some(head) = reported_head.filter(|head| *head > digest.segment) {
        return Err(format!(
            "{log}: its owner reported {head}, the newest segment on a live backup is {}",
            digest.segment
        ));
    }
    if let Some(open) = open.filter(|open| open.segment > digest.segment) {
        return Err(format!(
            "{log}: {} may hold acknowledged records (at {} or below) and no \
             copy of it at that epoch is on a live backup (the newest segment there is {})",
            open.segment, open.epoch, digest.segment
        ));
    }
    let mut sources = Vec::new();
    let mut missing = Vec::new();
    for named in &digest.segments {
        if kept.is_some_and(|k| named.segment < k.oldest) {
            // Freed by retention (its owner said so before freeing any replica of it).
            continue;
        }
        let copies = segments
            .get(&named.segment)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        match choose(copies) {
            Some(mut source) => {
                source.group = named.group;
                sources.push(source);
            }
            None => {
                if !sources.is_empty() {
                    // A hole after a recovered segment: never served.
                    return Err(format!(
                        "{log}: {} ({}) is on no live backup",
                        named.segment, named.group
                    ));
                }
                missing.push(named);
            }
        }
    }
    if let Some(first) = missing.first() {
        let has_retention = target.config.retention_bytes > 0 || target.config.retention_ms > 0;
        // With kept segments known, every missing segment is one the log must have.
        if kept.is_some() || !has_retention || sources.is_empty() {
            return Err(format!(
                "{log}: {} ({}) is on no live backup",
                first.segment, first.group
            ));
        }
        // The oldest segments are gone, and retention frees the oldest first: they were freed
        // after the newest digest was written.
    }
    Ok(Some(LogRecovery {
        log,
        segments: sources,
    }))
}

/// The copies to recover one segment from: the highest epoch among usable copies. If any of
/// them is closed, the segment is complete: its closed copies are adopted as they are.
/// Otherwise (the open head, or a segment whose close was in flight) the longest valid prefix
/// is recovered from any copy that has it, and replicated afresh.
fn choose(copies: &[Copy]) -> Option<SegmentSource> {
    let epoch = copies.iter().map(|c| c.info.epoch).max()?;
    let current: Vec<&Copy> = copies.iter().filter(|c| c.info.epoch == epoch).collect();
    let closed_length = current
        .iter()
        .filter(|c| c.info.state == ReplicaState::Closed)
        .map(|c| c.info.valid_bytes)
        .max();
    let length = closed_length.or_else(|| current.iter().map(|c| c.info.valid_bytes).max())?;
    let holders = current
        .iter()
        .filter(|c| match closed_length {
            Some(_) => c.info.state == ReplicaState::Closed && c.info.valid_bytes == length,
            None => c.info.valid_bytes >= length,
        })
        .map(|c| ReplicaHolder {
            backup: c.listing.backup,
            peer_addr: c.listing.peer_addr.clone(),
            primary: c.info.primary,
        })
        .collect();
    Some(SegmentSource {
        group: GroupId(0),
        segment: current[0].info.replica.segment,
        epoch,
        length,
        closed: closed_length.is_some(),
        holders,
    })
}
