//! Typed status codes carried in every response frame header.
//!
//! A status tells the caller what to do next: retry the same request (`is_retryable`), refresh
//! its cached metadata and re-route (`needs_metadata_refresh`), or give up with a clear error.

use std::fmt;

macro_rules! statuses {
    ($($(#[$doc:meta])* $name:ident = $value:literal),* $(,)?) => {
        /// Outcome of a request. Discriminants are the wire values and never change.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum Status {
            $($(#[$doc])* $name = $value,)*
        }

        impl Status {
            /// Every status, for exhaustive tests.
            pub const ALL: &'static [Status] = &[$(Status::$name,)*];

            pub fn from_u16(value: u16) -> Option<Status> {
                match value {
                    $($value => Some(Status::$name),)*
                    _ => None,
                }
            }
        }
    };
}

statuses! {
    Ok = 0,
    /// The body could not be decoded.
    Malformed = 1,
    /// The opcode is not one this server knows.
    UnknownOpcode = 2,
    /// The frame's declared body length exceeds this server's maximum.
    FrameTooLarge = 3,
    /// A header or body checksum did not match.
    ChecksumMismatch = 4,
    /// The frame's version is not one this server speaks.
    UnsupportedVersion = 5,
    /// A request argument is out of range (e.g. zero streamlets).
    InvalidArgument = 6,

    UnknownStream = 10,
    StreamExists = 11,
    /// This broker does not own the streamlet: refresh metadata and re-route.
    NotOwner = 12,
    UnknownLog = 13,
    UnknownGroup = 14,
    UnknownSegment = 15,
    /// The fetch position is not an entry boundary of the segment.
    PositionOutOfRange = 16,
    /// The group was freed by retention; resume from the log's oldest group.
    GroupRetired = 17,
    /// The request named an older ownership epoch than the broker holds: the streamlet moved
    /// (or was rebuilt); refresh metadata and re-route.
    StaleEpoch = 18,
    /// The streamlet is being rebuilt after its owner crashed: retry shortly.
    Recovering = 19,

    /// The broker's segment memory budget is full: retry later (backpressure).
    Backpressure = 20,
    /// The record batch failed validation (magic, length, CRC-32C, record count).
    InvalidBatch = 21,
    /// The record batch cannot fit in an empty segment.
    BatchTooLarge = 22,
    /// A batch sequence arrived after a gap: an earlier batch of this producer is missing.
    OutOfOrderSequence = 23,
    /// The compression or attribute bits of the batch are not supported.
    UnsupportedBatch = 24,
    /// A segment the streamlet needs is on no live backup: it is not served (never with a
    /// silent hole) until a backup that holds it comes back.
    StreamletLost = 26,
    /// The batch's producer, epoch and sequence name a place in the log that holds another
    /// batch (or one appended so long ago that it can no longer be compared): this batch is
    /// not in the log at that place and is not acknowledged. Two clients share a producer id,
    /// or a client resent different bytes under a sequence it had used. (25, which answered
    /// such a batch as a duplicate, is retired.)
    SequenceClash = 27,
    /// The batch's producer epoch is older than one the log has seen for its producer id: a
    /// newer session of that producer fenced this one.
    ProducerFenced = 28,
    /// Fewer complete backup copies than the stream's `min_insync_replicas` can be had right
    /// now (backups lost, none to replace them): nothing was acknowledged; retry later.
    NotEnoughReplicas = 29,
    /// The log keeps no state for the batch's producer (forgotten to make room for others,
    /// or never seen), and the batch does not start a sequence (0): it may retry a batch
    /// already stored, or follow one that was refused, and cannot be told apart, so it is
    /// not appended. The producer moves to a new epoch, which starts at 0 (Kafka's
    /// UNKNOWN_PRODUCER_ID).
    UnknownProducer = 33,

    NoBrokers = 30,
    UnknownServer = 31,
    /// The sender is an older generation of a server that has since re-registered.
    StaleGeneration = 32,

    /// The backup has no free buffer: open the replica on another backup.
    BackupPoolFull = 40,
    /// No such replica (or not with that key/epoch) on this backup.
    UnknownReplica = 41,
    /// The replica's bytes fail their checksums: it must never be served.
    ReplicaCorrupt = 42,
    /// The replica is not in a state that allows this (e.g. a write to a closed replica).
    ReplicaState = 43,

    Internal = 50,
    ShuttingDown = 51,
    /// Too many requests in flight on this connection or server: retry later.
    Busy = 52,
    /// The operation did not complete in time.
    Timeout = 53,
    /// This coordinator does not lead (or can no longer be sure it does): ask another of the
    /// coordinators.
    NotLeader = 54,
    /// An order from a coordinator term older than one this server has seen: its sender was
    /// deposed, and the order is void.
    StaleTerm = 55,
    /// A limit of the cluster or of this client was reached (streams per cluster, topic
    /// auto-creations per second): nothing was done. Retry later, or raise the limit.
    QuotaExceeded = 56,

    /// No user of that name.
    UnknownUser = 70,
    /// A user of that name already exists.
    UserExists = 71,
    /// The operation needs the cluster's admin token (`security.admin_token`), and the
    /// request did not carry it.
    Unauthorized = 72,
    /// The listener speaks TLS only, and the request came in plain text: connect with TLS
    /// (`--tls-dir`, `$TAILSTREAM_TLS_DIR`, or the `[tls]` section).
    TlsRequired = 73,
    /// This listener requires authentication (`security.client_authentication`) and the
    /// connection has not authenticated: give a user and password (`--user`,
    /// `$TAILSTREAM_USER` and `$TAILSTREAM_PASSWORD`).
    AuthenticationRequired = 74,
    /// The user does not exist or the password is wrong (the two are not told apart), or the
    /// exchange broke off: the connection closes.
    AuthenticationFailed = 75,
    /// The connection's user may not do this: no access control rule allows it
    /// (`tailstream acl add`).
    Forbidden = 76,

    /// The consumer group is rebalancing: rejoin it.
    RebalanceInProgress = 60,
    /// The member is not (or no longer) in the group: join again without a member id.
    UnknownMember = 61,
    /// The request names another generation than the group's: rejoin.
    IllegalGeneration = 62,
    /// The member's protocol type, or every protocol it offers, differs from the group's.
    InconsistentGroupProtocol = 63,
    /// The session timeout is outside the coordinator's bounds.
    InvalidSessionTimeout = 64,
    /// Too many groups, members, or committed partitions.
    GroupFull = 65,
}

impl Status {
    pub fn is_ok(self) -> bool {
        self == Status::Ok
    }

    /// The same request may succeed if sent again later, unchanged.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Status::Backpressure
                | Status::Busy
                | Status::ShuttingDown
                | Status::Timeout
                | Status::NotOwner
                | Status::OutOfOrderSequence
                | Status::NotEnoughReplicas
                | Status::NoBrokers
                | Status::BackupPoolFull
                | Status::StaleEpoch
                | Status::Recovering
                | Status::RebalanceInProgress
                | Status::NotLeader
        )
    }

    /// The caller's view of the cluster is stale: fetch metadata again before retrying.
    pub fn needs_metadata_refresh(self) -> bool {
        matches!(
            self,
            Status::NotOwner
                | Status::ShuttingDown
                | Status::UnknownStream
                | Status::StaleEpoch
                | Status::Recovering
                | Status::StreamletLost
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_round_trips_through_its_wire_value() {
        for status in Status::ALL {
            assert_eq!(Status::from_u16(*status as u16), Some(*status));
        }
        assert_eq!(Status::from_u16(9999), None);
    }
}
