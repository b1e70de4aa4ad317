//! Each log's kept segments: its head (a segment whose log digest is on its replicas), its
//! open segment (the one past the head that records may be acknowledged in, with the highest
//! replica epoch they may be acknowledged at) and its oldest kept segment (older ones retention
//! freed). An owner makes head and open segment durable here before acknowledging any record
//! in a segment they do not cover, and its oldest before freeing the replicas of older
//! segments, so after any crash (of owners, backups or this coordinator) recovery knows exactly
//! which segments it must find: a log missing one is lost, never served shorter.
//!
//! All three only grow, but for one case: a rebuild forgets an open segment it proved empty
//! (its owner is fenced, so it stays empty). Only a streamlet's current owner moves them: a fenced owner cannot make
//! recovery take segments as freed.

use super::{Metadata, MetadataError, StreamRecord};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tailstream_wire::messages::{LogBounds, OpenSegment};
use tailstream_wire::{LogId, SegmentId, ServerId, StreamId, StreamletId};

/// One log's durable bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptSegments {
    pub oldest: SegmentId,
    pub head: SegmentId,
    /// Absent in metadata saved before open segments existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open: Option<OpenSegment>,
}

impl KeptSegments {
    fn covers(&self, bounds: &LogBounds) -> bool {
        self.head >= bounds.head
            && self.oldest >= bounds.oldest
            && bounds
                .open
                .is_none_or(|o| o.segment < self.head || self.open >= Some(o))
    }

    /// The open segment, when it still binds (the head has not passed it).
    pub fn open_past_head(&self) -> Option<OpenSegment> {
        self.open.filter(|o| o.segment >= self.head)
    }
}

impl Metadata {
    /// The saved bounds of `bounds`' log, if it has any.
    fn kept(by_id: &HashMap<StreamId, &StreamRecord>, bounds: &LogBounds) -> Option<KeptSegments> {
        by_id
            .get(&bounds.stream)?
            .placements
            .get(bounds.streamlet.0 as usize)?
            .log_bounds
            .get(&bounds.log.0)
            .copied()
    }

    /// Whether every one of `bounds` is already durable (nothing to save).
    pub fn log_bounds_covered(&self, bounds: &[LogBounds]) -> bool {
        // One index per report, not a walk of every stream per bound (a report may carry
        // thousands).
        let by_id = self.streams_by_id();
        bounds
            .iter()
            .all(|b| Self::kept(&by_id, b).is_some_and(|kept| kept.covers(b)))
    }

    /// Raises the bounds of the logs `server` owns to `bounds`; returns those now covered
    /// (the others name a streamlet `server` does not own, or are malformed).
    pub fn record_log_bounds(
        &mut self,
        server: ServerId,
        bounds: &[LogBounds],
    ) -> Result<Vec<LogBounds>, MetadataError> {
        self.check_server(server)?;
        let mut covered = Vec::with_capacity(bounds.len());
        let mut by_id: HashMap<StreamId, &mut Arc<StreamRecord>> =
            self.streams.values_mut().map(|s| (s.id, s)).collect();
        for reported in bounds {
            if reported.oldest > reported.head {
                continue;
            }
            let Some(stream) = by_id.get_mut(&reported.stream) else {
                continue;
            };
            if reported.log.0 >= stream.config.logs_per_streamlet {
                continue;
            }
            let Some(placement) = stream.placements.get(reported.streamlet.0 as usize) else {
                continue;
            };
            if placement.owner != server {
                continue;
            }
            let known = placement.log_bounds.get(&reported.log.0);
            let raises_nothing = known.is_some_and(|kept| {
                kept.oldest >= reported.oldest
                    && kept.head >= reported.head
                    && kept.open >= reported.open
            });
            if raises_nothing {
                // Already saved: the stream is not copied.
                covered.push(reported.clone());
                continue;
            }
            let Some(placement) = Arc::make_mut(stream)
                .placements
                .get_mut(reported.streamlet.0 as usize)
            else {
                continue;
            };
            let kept = placement
                .log_bounds
                .entry(reported.log.0)
                .or_insert(KeptSegments {
                    oldest: reported.oldest,
                    head: reported.head,
                    open: reported.open,
                });
            kept.oldest = kept.oldest.max(reported.oldest);
            kept.head = kept.head.max(reported.head);
            kept.open = kept.open.max(reported.open);
            covered.push(reported.clone());
        }
        Ok(covered)
    }

    /// The saved bounds of one streamlet's logs.
    pub fn kept_segments(
        &self,
        stream: StreamId,
        streamlet: StreamletId,
    ) -> BTreeMap<LogId, KeptSegments> {
        self.stream_by_id(stream)
            .map(|s| s.kept_segments(streamlet))
            .unwrap_or_default()
    }
}

impl StreamRecord {
    /// The saved bounds of one of this stream's streamlets' logs.
    pub fn kept_segments(&self, streamlet: StreamletId) -> BTreeMap<LogId, KeptSegments> {
        self.placements
            .get(streamlet.0 as usize)
            .map(|p| {
                p.log_bounds
                    .iter()
                    .map(|(log, kept)| (LogId(*log), *kept))
                    .collect()
            })
            .unwrap_or_default()
    }
}
