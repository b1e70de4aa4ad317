//! Offset commits as the service takes them: a committed offset must name a partition that
//! exists (a stream, and an index below its streamlets times its logs), so no client can fill
//! a group's offsets with partitions of its own invention; then the group coordinator checks
//! the committer's membership and writes them.

use super::CoordinatorService;
use crate::groups::Caller;
use crate::metadata::Metadata;
use bytes::Bytes;
use tailstream_net::{Reply, Response};
use tailstream_wire::messages::{CommittedOffset, OffsetCommitRequest};
use tailstream_wire::{Decode, Status};

/// The first committed offset whose partition does not exist, said as a refusal.
fn unknown_partition(metadata: &Metadata, offsets: &[CommittedOffset]) -> Option<String> {
    offsets.iter().find_map(|offset| {
        let partitions = metadata.streams.get(offset.topic.as_str()).map(|stream| {
            stream.placements.len() as u64 * u64::from(stream.config.logs_per_streamlet)
        });
        match partitions {
            None => Some(format!("no stream named {:?}", offset.topic)),
            Some(count) if u64::from(offset.partition) >= count => Some(format!(
                "stream {:?} has {count} partitions, not {}",
                offset.topic,
                u64::from(offset.partition) + 1
            )),
            Some(_) => None,
        }
    })
}

impl CoordinatorService {
    pub(super) fn commit_offsets(&self, body: Bytes, caller: &Caller) -> Reply {
        let request = match OffsetCommitRequest::decode_exact(body) {
            Ok(request) => request,
            Err(error) => {
                return Reply::Ready(Response::error(Status::Malformed, error.to_string()));
            }
        };
        let unknown = unknown_partition(&self.core.lock().metadata, &request.offsets);
        if let Some(why) = unknown {
            return Reply::Ready(Response::error(Status::UnknownStream, why));
        }
        self.groups.commit(request, caller)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_wire::messages::StreamConfig;

    fn offset(topic: &str, partition: u32) -> CommittedOffset {
        CommittedOffset {
            topic: topic.into(),
            partition,
            offset: 1,
            metadata: String::new(),
        }
    }

    #[test]
    fn only_partitions_that_exist_take_offsets() {
        let mut m = Metadata::default();
        let broker = m
            .register_broker("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "")
            .unwrap()
            .server_id;
        let config = StreamConfig {
            logs_per_streamlet: 4,
            ..tailstream_config::Config::embedded().stream_defaults
        };
        m.create_stream("clicks", 2, config, &[broker]).unwrap();
        assert_eq!(
            unknown_partition(&m, &[offset("clicks", 0), offset("clicks", 7)]),
            None
        );
        assert!(unknown_partition(&m, &[offset("clicks", 8)]).is_some());
        assert!(unknown_partition(&m, &[offset("clicks", 1), offset("invented", 0)]).is_some());
    }
}
