//! Where a consumer is in one log, and how that position moves. Pure: the consumer task turns
//! each step into a fetch or a group listing.

use serde::{Deserialize, Serialize};
use tailstream_wire::messages::{FetchResponse, LogGroups};
use tailstream_wire::{GroupId, LogId, RecordOffset, SegmentId, SegmentPosition, StreamletId};

/// A resumable position in one log: KerA's `[streamlet, group, segment, position]` plus the
/// offset of the next record, which also lets a consumer drop anything redelivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogPosition {
    /// The streamlet the log belongs to.
    pub streamlet: StreamletId,
    /// The log within its streamlet.
    pub log: LogId,
    /// The group being read.
    pub group: GroupId,
    /// The segment being read, within `group`.
    pub segment: SegmentId,
    /// The byte position of the next entry in `segment`.
    pub position: SegmentPosition,
    /// The offset of the next record to hand out.
    pub next_offset: RecordOffset,
}

/// Where a new consumer starts in logs it has no position for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartFrom {
    /// The oldest live group of each log.
    Beginning,
    /// What is appended after the consumer starts.
    End,
}

/// What the cursor needs next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Learn the log's groups (none known yet, or the next group's first segment).
    ListGroups,
    /// Learn where record `offset` is (a cursor resuming from a committed offset).
    Locate { offset: RecordOffset },
    /// Fetch from this position.
    Fetch {
        group: GroupId,
        segment: SegmentId,
        position: SegmentPosition,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Resuming at a record offset: its position is not known yet.
    Locate,
    /// No group to read yet: waiting for the log's first group, or for `after`'s successor.
    Discover {
        after: Option<GroupId>,
        start: StartFrom,
    },
    Reading {
        group: GroupId,
        segment: SegmentId,
        position: SegmentPosition,
    },
}

/// The position in one log and how it moves.
#[derive(Clone, Debug)]
pub(crate) struct Cursor {
    pub streamlet: StreamletId,
    pub log: LogId,
    next_offset: RecordOffset,
    state: State,
    /// The last position read from: what a resumed cursor restarts at while this one is
    /// between groups (the fetch there answers end-of-group and it moves on).
    last_read: Option<(GroupId, SegmentId, SegmentPosition)>,
    /// Records skipped because retention freed their group before they were read.
    pub records_lost_to_retention: u64,
}

impl Cursor {
    pub(crate) fn new(streamlet: StreamletId, log: LogId, start: StartFrom) -> Self {
        Self {
            streamlet,
            log,
            next_offset: RecordOffset(0),
            state: State::Discover { after: None, start },
            last_read: None,
            records_lost_to_retention: 0,
        }
    }

    /// A cursor that starts at record `offset` (a consumer group's committed offset), wherever
    /// it is stored; below the log's oldest live record it starts at that record.
    pub(crate) fn at_offset(streamlet: StreamletId, log: LogId, offset: RecordOffset) -> Self {
        Self {
            streamlet,
            log,
            next_offset: offset,
            state: State::Locate,
            last_read: None,
            records_lost_to_retention: 0,
        }
    }

    pub(crate) fn resume(position: LogPosition) -> Self {
        Self {
            streamlet: position.streamlet,
            log: position.log,
            next_offset: position.next_offset,
            state: State::Reading {
                group: position.group,
                segment: position.segment,
                position: position.position,
            },
            last_read: None,
            records_lost_to_retention: 0,
        }
    }

    pub(crate) fn next_offset(&self) -> RecordOffset {
        self.next_offset
    }

    pub(crate) fn step(&self) -> Step {
        match self.state {
            State::Locate => Step::Locate {
                offset: self.next_offset,
            },
            State::Discover { .. } => Step::ListGroups,
            State::Reading {
                group,
                segment,
                position,
            } => Step::Fetch {
                group,
                segment,
                position,
            },
        }
    }

    /// The resumable position, once the cursor has one.
    pub(crate) fn position(&self) -> Option<LogPosition> {
        let (group, segment, position) = match self.state {
            State::Reading {
                group,
                segment,
                position,
            } => (group, segment, position),
            State::Discover { .. } | State::Locate => self.last_read?,
        };
        Some(LogPosition {
            streamlet: self.streamlet,
            log: self.log,
            group,
            segment,
            position,
            next_offset: self.next_offset,
        })
    }

    /// Applies a group listing. Returns true when the cursor can now fetch.
    pub(crate) fn on_groups(&mut self, groups: &LogGroups) -> bool {
        let State::Discover { after, start } = self.state else {
            return true;
        };
        let candidate = match after {
            None => match start {
                StartFrom::Beginning => groups.groups.first(),
                StartFrom::End => groups.groups.last(),
            },
            Some(previous) => groups.groups.iter().find(|g| g.group > previous),
        };
        let Some(group) = candidate else {
            if after.is_none() {
                // An empty log: everything it will ever hold is new, so read it from the start.
                self.state = State::Discover {
                    after: None,
                    start: StartFrom::Beginning,
                };
            }
            return false;
        };
        let Some(first) = group.segments.first() else {
            return false;
        };
        let (segment, position) = match (after, start) {
            // Starting at the end: the committed end of the newest segment.
            (None, StartFrom::End) => {
                let last = group.segments.last().unwrap_or(first);
                self.next_offset = groups.committed_offset;
                (last.segment, SegmentPosition(last.committed_bytes))
            }
            _ => (first.segment, SegmentPosition(0)),
        };
        if after.is_none() && start == StartFrom::Beginning {
            self.next_offset = group.first_offset;
        }
        self.state = State::Reading {
            group: group.group,
            segment,
            position,
        };
        true
    }

    /// The broker located the offset this cursor starts at.
    pub(crate) fn on_located(
        &mut self,
        group: GroupId,
        segment: SegmentId,
        position: SegmentPosition,
    ) {
        if self.state == State::Locate {
            self.state = State::Reading {
                group,
                segment,
                position,
            };
        }
    }

    /// The offset this cursor starts at is not in the log (retention freed it, or the log is
    /// shorter): start at the oldest live record instead.
    pub(crate) fn on_locate_out_of_range(&mut self) {
        if self.state == State::Locate {
            self.state = State::Discover {
                after: None,
                start: StartFrom::Beginning,
            };
        }
    }

    /// Applies a fetch answer whose records up to `next_offset` were delivered.
    pub(crate) fn on_fetched(&mut self, response: &FetchResponse, next_offset: RecordOffset) {
        self.next_offset = self.next_offset.max(next_offset);
        let State::Reading { group, .. } = self.state else {
            return;
        };
        self.last_read = Some((group, response.next_segment, response.next_position));
        if response.end_of_group {
            self.state = State::Discover {
                after: Some(group),
                start: StartFrom::Beginning,
            };
        } else {
            self.state = State::Reading {
                group,
                segment: response.next_segment,
                position: response.next_position,
            };
        }
    }

    /// The group was freed by retention: start over at the oldest live group.
    pub(crate) fn on_group_retired(&mut self, groups: &LogGroups) {
        if let Some(oldest) = groups.groups.first() {
            let lost = oldest.first_offset.0.saturating_sub(self.next_offset.0);
            // A statistic, from the broker's answer: saturate rather than wrap.
            self.records_lost_to_retention = self.records_lost_to_retention.saturating_add(lost);
        }
        self.state = State::Discover {
            after: None,
            start: StartFrom::Beginning,
        };
        self.on_groups(groups);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_wire::messages::{GroupSummary, SegmentSummary};

    fn groups(ids: &[(u64, u64, u64)]) -> LogGroups {
        LogGroups {
            log: LogId(0),
            next_offset: RecordOffset(100),
            committed_offset: RecordOffset(100),
            groups: ids
                .iter()
                .map(|&(g, s, first)| GroupSummary {
                    group: GroupId(g),
                    sealed: false,
                    first_offset: RecordOffset(first),
                    segments: vec![SegmentSummary {
                        segment: SegmentId(s),
                        committed_bytes: 500,
                        sealed: false,
                    }],
                })
                .collect(),
            replicas: Vec::new(),
        }
    }

    fn fetched(end_of_group: bool, next_position: u32) -> FetchResponse {
        FetchResponse {
            segment: SegmentId(1),
            position: SegmentPosition(0),
            next_segment: SegmentId(1),
            next_position: SegmentPosition(next_position),
            end_of_group,
            next_group: None,
            entries: bytes::Bytes::new(),
        }
    }

    #[test]
    fn a_cursor_walks_groups_in_order_and_reports_a_resumable_position() {
        let mut cursor = Cursor::new(StreamletId(0), LogId(0), StartFrom::Beginning);
        assert_eq!(cursor.step(), Step::ListGroups);
        assert!(!cursor.on_groups(&groups(&[])));
        assert!(cursor.on_groups(&groups(&[(3, 1, 0), (7, 9, 50)])));
        assert_eq!(
            cursor.step(),
            Step::Fetch {
                group: GroupId(3),
                segment: SegmentId(1),
                position: SegmentPosition(0)
            }
        );
        cursor.on_fetched(&fetched(false, 400), RecordOffset(20));
        let position = cursor.position().unwrap();
        assert_eq!(
            (position.position, position.next_offset),
            (SegmentPosition(400), RecordOffset(20))
        );
        cursor.on_fetched(&fetched(true, 400), RecordOffset(50));
        assert_eq!(cursor.step(), Step::ListGroups);
        // Between groups, the saved position is the end of the group just finished.
        let between = cursor.position().unwrap();
        assert_eq!(
            (between.group, between.position, between.next_offset),
            (GroupId(3), SegmentPosition(400), RecordOffset(50))
        );
        assert!(cursor.on_groups(&groups(&[(3, 1, 0), (7, 9, 50)])));
        assert_eq!(
            cursor.step(),
            Step::Fetch {
                group: GroupId(7),
                segment: SegmentId(9),
                position: SegmentPosition(0)
            }
        );
        let resumed = Cursor::resume(cursor.position().unwrap());
        assert_eq!(resumed.step(), cursor.step());
    }

    #[test]
    fn retention_moves_a_slow_cursor_to_the_oldest_group_and_counts_the_loss() {
        let mut cursor = Cursor::new(StreamletId(0), LogId(0), StartFrom::Beginning);
        cursor.on_groups(&groups(&[(3, 1, 0)]));
        cursor.on_group_retired(&groups(&[(8, 20, 70)]));
        assert_eq!(cursor.records_lost_to_retention, 70);
        assert_eq!(
            cursor.step(),
            Step::Fetch {
                group: GroupId(8),
                segment: SegmentId(20),
                position: SegmentPosition(0)
            }
        );
    }

    #[test]
    fn starting_at_the_end_of_an_empty_log_reads_its_first_group_from_the_start() {
        let mut cursor = Cursor::new(StreamletId(0), LogId(0), StartFrom::End);
        assert!(!cursor.on_groups(&groups(&[])));
        assert!(cursor.on_groups(&groups(&[(3, 1, 0)])));
        assert_eq!(
            cursor.step(),
            Step::Fetch {
                group: GroupId(3),
                segment: SegmentId(1),
                position: SegmentPosition(0)
            }
        );
    }

    #[test]
    fn starting_at_the_end_skips_what_is_already_there() {
        let mut cursor = Cursor::new(StreamletId(0), LogId(0), StartFrom::End);
        cursor.on_groups(&groups(&[(3, 1, 0), (7, 9, 50)]));
        assert_eq!(
            cursor.step(),
            Step::Fetch {
                group: GroupId(7),
                segment: SegmentId(9),
                position: SegmentPosition(500)
            }
        );
        assert_eq!(cursor.next_offset(), RecordOffset(100));
    }

    #[test]
    fn a_cursor_at_an_offset_locates_it_then_reads_from_there_or_from_the_oldest_group() {
        let mut cursor = Cursor::at_offset(StreamletId(0), LogId(0), RecordOffset(42));
        assert_eq!(
            cursor.step(),
            Step::Locate {
                offset: RecordOffset(42)
            }
        );
        assert_eq!(cursor.position(), None);
        cursor.on_located(GroupId(3), SegmentId(7), SegmentPosition(96));
        assert_eq!(
            cursor.step(),
            Step::Fetch {
                group: GroupId(3),
                segment: SegmentId(7),
                position: SegmentPosition(96)
            }
        );
        assert_eq!(cursor.next_offset(), RecordOffset(42));

        let mut gone = Cursor::at_offset(StreamletId(0), LogId(0), RecordOffset(5));
        gone.on_locate_out_of_range();
        assert_eq!(gone.step(), Step::ListGroups);
        assert!(gone.on_groups(&groups(&[(4, 9, 60)])));
        assert_eq!(gone.next_offset(), RecordOffset(60));
    }
}
