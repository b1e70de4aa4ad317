//! A group: a run of at most `segments_per_group` segments of one log, read by one consumer in
//! order. Groups are created open, sealed when their last segment is sealed, and freed whole by
//! retention (the open group never is).

use super::segment::Segment;
use std::time::Instant;
use tailstream_wire::messages::{GroupSummary, SegmentSummary};
use tailstream_wire::{GroupId, RecordOffset, SegmentId};

#[derive(Debug)]
pub struct Group {
    id: GroupId,
    first_offset: RecordOffset,
    segments: Vec<Segment>,
    sealed_at: Option<Instant>,
}

impl Group {
    pub fn new(id: GroupId, first_offset: RecordOffset) -> Self {
        Self {
            id,
            first_offset,
            segments: Vec::new(),
            sealed_at: None,
        }
    }

    pub fn id(&self) -> GroupId {
        self.id
    }

    pub fn is_sealed(&self) -> bool {
        self.sealed_at.is_some()
    }

    pub fn sealed_at(&self) -> Option<Instant> {
        self.sealed_at
    }

    /// Seals the group and its head segment.
    pub fn seal(&mut self, now: Instant) {
        if let Some(head) = self.segments.last_mut() {
            head.seal();
        }
        self.sealed_at.get_or_insert(now);
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    pub fn segments_mut(&mut self) -> &mut [Segment] {
        &mut self.segments
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub fn push_segment(&mut self, segment: Segment) {
        debug_assert!(!self.is_sealed(), "segment added to a sealed group");
        debug_assert!(self.segments.last().is_none_or(|s| s.id() < segment.id()));
        self.segments.push(segment);
    }

    pub fn head_mut(&mut self) -> Option<&mut Segment> {
        self.segments.last_mut()
    }

    pub fn head(&self) -> Option<&Segment> {
        self.segments.last()
    }

    pub fn segment_index(&self, id: SegmentId) -> Option<usize> {
        self.segments.binary_search_by_key(&id, Segment::id).ok()
    }

    pub fn written_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.written_bytes() as u64).sum()
    }

    /// Offset of the group's first record.
    pub fn first_offset(&self) -> RecordOffset {
        self.first_offset
    }

    pub fn summary(&self) -> GroupSummary {
        GroupSummary {
            group: self.id,
            sealed: self.is_sealed(),
            first_offset: self.first_offset,
            segments: self
                .segments
                .iter()
                .map(|s| SegmentSummary {
                    segment: s.id(),
                    committed_bytes: u32::try_from(s.committed_bytes()).unwrap_or(u32::MAX),
                    sealed: s.is_sealed(),
                })
                .collect(),
        }
    }
}
