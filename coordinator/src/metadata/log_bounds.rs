//! Each log's kept segments: its head (the newest segment that may hold an acknowledged
//! record) and its oldest kept segment (older ones retention freed). An owner makes its head
//! durable here before acknowledging any record in it, and its oldest before freeing the
//! replicas of older segments, so after any crash (of owners, backups or this coordinator)
//! recovery knows exactly which segments it must find: a log missing one is lost, never
//! served shorter.
//!
//! Both only grow. Only a streamlet's current owner moves them: a fenced owner cannot make
//! recovery take segments as freed.

use super::{Metadata, MetadataError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tailstream_wire::messages::LogBounds;
use tailstream_wire::{LogId, SegmentId, ServerId, StreamId, StreamletId};

/// One log's durable bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptSegments {
    pub oldest: SegmentId,
    pub head: SegmentId,
}

impl KeptSegments {
    fn covers(&self, bounds: &LogBounds) -> bool {
        self.head >= bounds.head && self.oldest >= bounds.oldest
    }
}

impl Metadata {
    /// The saved bounds of `bounds`' log, if it has any.
    fn kept(&self, bounds: &LogBounds) -> Option<KeptSegments> {
        self.stream_by_id(bounds.stream)?
            .placements
            .get(bounds.streamlet.0 as usize)?
            .log_bounds
            .get(&bounds.log.0)
            .copied()
    }

    /// Whether every one of `bounds` is already durable (nothing to save).
    pub fn log_bounds_covered(&self, bounds: &[LogBounds]) -> bool {
        bounds
            .iter()
            .all(|b| self.kept(b).is_some_and(|kept| kept.covers(b)))
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
        for reported in bounds {
            if reported.oldest > reported.head {
                continue;
            }
            let Some(stream) = self.streams.values_mut().find(|s| s.id == reported.stream) else {
                continue;
            };
            if reported.log.0 >= stream.config.logs_per_streamlet {
                continue;
            }
            let Some(placement) = stream.placements.get_mut(reported.streamlet.0 as usize) else {
                continue;
            };
            if placement.owner != server {
                continue;
            }
            let kept = placement
                .log_bounds
                .entry(reported.log.0)
                .or_insert(KeptSegments {
                    oldest: reported.oldest,
                    head: reported.head,
                });
            kept.oldest = kept.oldest.max(reported.oldest);
            kept.head = kept.head.max(reported.head);
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
            .and_then(|s| s.placements.get(streamlet.0 as usize))
            .map(|p| {
                p.log_bounds
                    .iter()
                    .map(|(log, kept)| (LogId(*log), *kept))
                    .collect()
            })
            .unwrap_or_default()
    }
}
