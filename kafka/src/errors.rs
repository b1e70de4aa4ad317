//! What each refusal of the data plane or the cluster is called in Kafka, so that a Kafka
//! client's own retry logic does the right thing (refresh metadata, back off, or give up).

use kafka_protocol::ResponseError;
use tailstream_broker::data_plane::DataError;
use tailstream_identity::Access;
use tailstream_storage::StorageError;
use tailstream_stubs::StubError;
use tailstream_wire::Status;

/// What a request `access` did not allow on a topic is answered: TOPIC_AUTHORIZATION_FAILED
/// when the rules said no; when they could not be had (`Access::Nothing`: the coordinator out
/// of reach for longer than listed rules are trusted), a code clients retry, so an outage
/// delays them instead of failing them for good.
pub(crate) fn topic_denied(access: &Access) -> i16 {
    denied(
        access,
        ResponseError::TopicAuthorizationFailed,
        ResponseError::LeaderNotAvailable,
    )
}

/// As `topic_denied`, for a group (GROUP_AUTHORIZATION_FAILED, else COORDINATOR_NOT_AVAILABLE).
pub(crate) fn group_denied(access: &Access) -> i16 {
    denied(
        access,
        ResponseError::GroupAuthorizationFailed,
        ResponseError::CoordinatorNotAvailable,
    )
}

/// As `topic_denied`, for the cluster (InitProducerId): CLUSTER_AUTHORIZATION_FAILED, else
/// COORDINATOR_LOAD_IN_PROGRESS, which clients retry as it is (COORDINATOR_NOT_AVAILABLE would
/// send a Java producer to look up a transaction coordinator, which is refused for good).
pub(crate) fn cluster_denied(access: &Access) -> i16 {
    denied(
        access,
        ResponseError::ClusterAuthorizationFailed,
        ResponseError::CoordinatorLoadInProgress,
    )
}

fn denied(access: &Access, by_rules: ResponseError, rules_unknown: ResponseError) -> i16 {
    match access {
        Access::Nothing => rules_unknown.code(),
        Access::Everything | Access::Rules(_) => by_rules.code(),
    }
}

/// The Kafka error code for a data plane refusal.
pub(crate) fn data_error_code(error: &DataError) -> i16 {
    let kafka = match error {
        // The streamlet moved, or this broker cannot prove it still owns it: the client
        // refreshes its metadata and goes to the leader it learns.
        DataError::StaleEpoch { .. } | DataError::NewerEpoch { .. } | DataError::LeaseExpired => {
            ResponseError::NotLeaderOrFollower
        }
        // Being rebuilt after a crash: retriable, metadata says the leader is not available.
        DataError::Recovering => ResponseError::LeaderNotAvailable,
        DataError::InvalidBatch(_) => ResponseError::CorruptMessage,
        DataError::UnsupportedBatch(_) => ResponseError::UnsupportedForMessageFormat,
        // The batch is appended but not yet on every backup: a retry lands once.
        DataError::CommitTimeout(_) => ResponseError::RequestTimedOut,
        // Appended, and its copies cannot all be made now: Kafka's own case for it.
        DataError::NotEnoughReplicasAfterAppend => ResponseError::NotEnoughReplicasAfterAppend,
        DataError::LogGone => ResponseError::NotLeaderOrFollower,
        DataError::Storage(error) => return storage_error_code(error),
    };
    kafka.code()
}

fn storage_error_code(error: &StorageError) -> i16 {
    let kafka = match error {
        StorageError::NotOwner => ResponseError::NotLeaderOrFollower,
        StorageError::UnknownLog(_) => ResponseError::UnknownTopicOrPartition,
        StorageError::OffsetOutOfRange { .. }
        | StorageError::GroupRetired(_)
        | StorageError::PositionOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        // Segment memory full and retention cannot free any: retriable.
        StorageError::Backpressure { .. } => ResponseError::KafkaStorageError,
        // Too much appended and not yet replicated (a backup was lost): retriable.
        StorageError::ReplicationBacklog { .. } => ResponseError::NotEnoughReplicas,
        // Fewer backups than min_insync_replicas can be had: Kafka's own case for it.
        StorageError::NotEnoughReplicas { .. } => ResponseError::NotEnoughReplicas,
        StorageError::BatchTooLarge { .. } => ResponseError::MessageTooLarge,
        StorageError::OutOfOrderSequence { .. } => ResponseError::OutOfOrderSequenceNumber,
        // Never DUPLICATE_SEQUENCE_NUMBER, which clients count as delivered: the log does not
        // hold this batch where its sequence says.
        StorageError::SequenceClash { .. } => ResponseError::OutOfOrderSequenceNumber,
        StorageError::ProducerFenced { .. } => ResponseError::InvalidProducerEpoch,
        // librdkafka and Java bump their epoch and resend when nothing is outstanding, and
        // fail the batch (never resend it) when it may be stored.
        StorageError::UnknownProducer { .. } => ResponseError::UnknownProducerId,
        // Another user's producer id: an authorization failure, fatal to the producer (Kafka
        // answers a producer without idempotent-write rights the same).
        StorageError::ForeignProducer { .. } => ResponseError::ClusterAuthorizationFailed,
        StorageError::UnknownGroup(_)
        | StorageError::UnknownSegment(_)
        | StorageError::DigestTooLarge { .. }
        | StorageError::Invariant(_)
        | StorageError::Recovery(_) => ResponseError::UnknownServerError,
    };
    kafka.code()
}

/// The Kafka error code for a failed call to the coordinator.
pub(crate) fn cluster_error_code(error: &StubError) -> i16 {
    let kafka = match error.status() {
        Some(Status::UnknownStream) => ResponseError::UnknownTopicOrPartition,
        Some(Status::InvalidArgument) => ResponseError::InvalidTopicException,
        Some(Status::NoBrokers) => ResponseError::LeaderNotAvailable,
        _ => ResponseError::CoordinatorNotAvailable,
    };
    kafka.code()
}

pub(crate) const NONE: i16 = 0;

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_wire::BatchSequence;

    #[test]
    fn refusals_get_the_codes_kafka_clients_retry_on() {
        assert_eq!(data_error_code(&DataError::Recovering), 5);
        assert_eq!(data_error_code(&DataError::LeaseExpired), 6);
        assert_eq!(data_error_code(&DataError::CommitTimeout(8000)), 7);
        let out_of_order = StorageError::OutOfOrderSequence {
            expected: BatchSequence(1),
            got: BatchSequence(3),
        };
        assert_eq!(data_error_code(&DataError::Storage(out_of_order)), 45);
        assert_eq!(
            cluster_error_code(&StubError::refused(Status::UnknownStream, "x")),
            3
        );
    }

    #[test]
    fn a_refusal_is_final_only_when_the_rules_said_no() {
        let said_no = Access::Rules(std::sync::Arc::from(Vec::new()));
        assert_eq!(topic_denied(&said_no), 29);
        assert_eq!(group_denied(&said_no), 30);
        assert_eq!(cluster_denied(&said_no), 31);
        // The rules could not be had: retriable codes.
        assert_eq!(topic_denied(&Access::Nothing), 5);
        assert_eq!(group_denied(&Access::Nothing), 15);
        assert_eq!(cluster_denied(&Access::Nothing), 14);
    }
}
