//! Consumer group lag: how many records each group's committed offset trails its log's
//! committed end. Pure: committed offsets (from the offsets store), the streams' shapes (from
//! the metadata) and the log ends the owners report in their heartbeats go in; one row per
//! committed partition comes out. Native and Kafka groups alike: a partition is
//! `streamlet * Q + log` of the stream its topic names.

use std::collections::HashMap;
use tailstream_wire::messages::{CommittedOffset, PartitionLagInfo};
use tailstream_wire::{LogId, RecordOffset, StreamId, StreamletId};

/// A stream as lag needs it: its id, logs per streamlet, and streamlet count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamShape {
    pub id: StreamId,
    pub logs_per_streamlet: u32,
    pub streamlets: u32,
}

/// Lag of every committed partition of a known stream, sorted by group, stream and partition.
/// Partitions of topics that are no stream, or beyond the stream's partitions, are left out.
pub fn lag(
    committed: &[(String, Vec<CommittedOffset>)],
    streams: &HashMap<String, StreamShape>,
    ends: &HashMap<(StreamId, StreamletId, LogId), RecordOffset>,
) -> Vec<PartitionLagInfo> {
    let mut rows = Vec::new();
    for (group, offsets) in committed {
        for offset in offsets {
            let Some(shape) = streams.get(&offset.topic) else {
                continue;
            };
            let logs = shape.logs_per_streamlet.max(1);
            let (streamlet, log) = (offset.partition / logs, offset.partition % logs);
            if streamlet >= shape.streamlets {
                continue;
            }
            let end = ends
                .get(&(shape.id, StreamletId(streamlet), LogId(log)))
                .map(|end| end.0);
            rows.push(PartitionLagInfo {
                group: group.clone(),
                stream: offset.topic.clone(),
                partition: offset.partition,
                streamlet,
                log,
                committed_offset: offset.offset,
                end_offset: end,
                lag_records: end.map(|end| end.saturating_sub(offset.offset)),
            });
        }
    }
    rows.sort_by(|a, b| {
        (&a.group, &a.stream, a.partition).cmp(&(&b.group, &b.stream, b.partition))
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(topic: &str, partition: u32, offset: u64) -> CommittedOffset {
        CommittedOffset {
            topic: topic.into(),
            partition,
            offset,
            metadata: String::new(),
        }
    }

    #[test]
    fn lag_is_the_log_end_minus_the_committed_offset_per_partition() {
        let streams = HashMap::from([(
            "clicks".to_string(),
            StreamShape {
                id: StreamId(7),
                logs_per_streamlet: 4,
                streamlets: 2,
            },
        )]);
        let ends = HashMap::from([
            ((StreamId(7), StreamletId(1), LogId(2)), RecordOffset(100)),
            ((StreamId(7), StreamletId(0), LogId(0)), RecordOffset(5)),
        ]);
        let groups = vec![(
            "billing".to_string(),
            vec![
                committed("clicks", 6, 40), // streamlet 1, log 2
                committed("clicks", 0, 9),  // ahead of the reported end
                committed("clicks", 3, 1),  // end not reported yet
                committed("clicks", 8, 1),  // no such partition
                committed("other", 0, 1),   // no such stream
            ],
        )];
        let rows = lag(&groups, &streams, &ends);
        let summary: Vec<_> = rows
            .iter()
            .map(|r| (r.partition, r.streamlet, r.log, r.lag_records))
            .collect();
        assert_eq!(
            summary,
            vec![(0, 0, 0, Some(0)), (3, 0, 3, None), (6, 1, 2, Some(60))]
        );
    }
}
