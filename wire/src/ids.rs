//! Typed identifiers. No signature in Tailstream takes a bare integer for an identity.
//!
//! Ids that name storage (`GroupId`, `SegmentId`) only ever increase within their streamlet;
//! `ServerId` carries a generation so that a server that comes back after being declared dead
//! is a different identity and its old incarnation can be fenced.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($inner:ty), $prefix:literal) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        #[cfg_attr(test, derive(proptest_derive::Arbitrary))]
        pub struct $name(pub $inner);

        impl $name {
            pub const fn new(value: $inner) -> Self {
                Self(value)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// A stream, unique in the cluster for its whole life (never reused after deletion).
    StreamId(u64),
    "stream-"
);
id_type!(
    /// A streamlet of a stream (like a Kafka partition): `0..streamlets`.
    StreamletId(u32),
    "streamlet-"
);
id_type!(
    /// One log of a streamlet's MultiLog: `0..logs_per_streamlet`.
    LogId(u32),
    "log-"
);
id_type!(
    /// A group of segments. Unique within a streamlet; belongs to exactly one log.
    GroupId(u64),
    "group-"
);
id_type!(
    /// A fixed-size segment. Unique within a streamlet; increasing within each log.
    SegmentId(u64),
    "segment-"
);
id_type!(
    /// A producer, allocated by the coordinator. Stored in the record batch header.
    ProducerId(u64),
    "producer-"
);
id_type!(
    /// A producer's epoch (Kafka's producer epoch, `0..=i16::MAX`): together with the
    /// producer id it names one producer session. A higher epoch starts the producer's
    /// sequences afresh and fences every batch of a lower one.
    ProducerEpoch(i16),
    "epoch-"
);
id_type!(
    /// Which owner a streamlet is at: bumped at every hand-over (a rebuild on a new owner).
    /// Every request a client routes names it, and a broker holding another refuses, so a
    /// request never reaches a streamlet on an owner it was not routed to.
    OwnershipEpoch(u32),
    "ownership epoch "
);
id_type!(
    /// Which replica set a segment's copies belong to: bumped whenever a copy is replaced
    /// (and when a rebuild adopts the copies). Backups refuse writes below a replica's epoch;
    /// recovery takes the highest complete one.
    ReplicaEpoch(u32),
    "replica epoch "
);

id_type!(
    /// A coordinator's term of leadership: every order a coordinator gives (assignments,
    /// rebuilds, fences) names it, and a broker that has seen a newer term refuses an older
    /// one's orders, so a deposed leader that wakes up cannot move anything. Only increases:
    /// each leader takes the saved term plus one before it leads.
    CoordinatorTerm(u64),
    "term "
);

impl OwnershipEpoch {
    /// The epoch after this one, or `None` when they are used up.
    pub fn next(self) -> Option<Self> {
        self.0.checked_add(1).map(Self)
    }
}

impl ReplicaEpoch {
    /// The epoch after this one, or `None` when they are used up.
    pub fn next(self) -> Option<Self> {
        self.0.checked_add(1).map(Self)
    }

    /// The epoch after this one, or this one when they are used up (4 billion replacements
    /// of one segment's copies: never in practice; a caller that cannot be refused uses it).
    pub fn saturating_next(self) -> Self {
        Self(self.0.saturating_add(1))
    }
}

id_type!(
    /// Correlates a response with its request on one connection (clients pipeline).
    RequestId(u64),
    "req-"
);
id_type!(
    /// Per-log record offset: +1 per record, stamped as a batch's base offset at append.
    RecordOffset(u64),
    "offset-"
);
id_type!(
    /// Byte offset of an entry inside a segment. Position 0 means "the first entry after the
    /// segment's log digest" in a fetch.
    SegmentPosition(u32),
    "pos-"
);
id_type!(
    /// A producer's sequence number in one log, of a batch's first record (Kafka's base
    /// sequence): sequences count records, and wrap from `i32::MAX` to 0 as Kafka's do.
    BatchSequence(u32),
    "seq-"
);

impl ProducerEpoch {
    /// The epoch after this one; `None` once epochs are exhausted (a new producer id is due).
    pub fn next(self) -> Option<ProducerEpoch> {
        self.0.checked_add(1).map(ProducerEpoch)
    }
}

/// Sequence numbers live in `0..SEQUENCE_MODULUS` (Kafka's non-negative i32).
pub const SEQUENCE_MODULUS: u32 = 1 << 31;

impl BatchSequence {
    /// The sequence `records` records after this one (what follows a batch of that many).
    pub fn advance(self, records: u32) -> BatchSequence {
        BatchSequence(
            ((u64::from(self.0) + u64::from(records)) % u64::from(SEQUENCE_MODULUS)) as u32,
        )
    }

    /// Whether this sequence comes before `other`: less than half the sequence space behind
    /// it, wrapping included.
    pub fn precedes(self, other: BatchSequence) -> bool {
        let distance = other.0.wrapping_sub(self.0) & (SEQUENCE_MODULUS - 1);
        distance != 0 && distance < SEQUENCE_MODULUS / 2
    }
}

/// A server (broker) identity: a slot index that may be reused plus a generation that is not.
/// Backups and the coordinator reject requests from an older generation of the same index.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct ServerId {
    pub index: u32,
    pub generation: u32,
}

impl ServerId {
    pub const fn new(index: u32, generation: u32) -> Self {
        Self { index, generation }
    }

    /// True when `self` is the same slot as `other` but an older incarnation of it.
    pub fn is_fenced_by(&self, other: &ServerId) -> bool {
        self.index == other.index && self.generation < other.generation
    }
}

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "server-{}.{}", self.index, self.generation)
    }
}

impl RecordOffset {
    /// The offset `records` records after this one.
    /// Only for offsets the broker assigned itself (a log cannot hold 2^64 records); a value
    /// from the network goes through `checked_advance`.
    pub fn advance(self, records: u32) -> RecordOffset {
        RecordOffset(self.0 + u64::from(records))
    }

    /// The offset `records` records after this one, unless that passes `u64::MAX`.
    pub fn checked_advance(self, records: u32) -> Option<RecordOffset> {
        self.0.checked_add(u64::from(records)).map(RecordOffset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_generations_fence_older_incarnations_only() {
        let old = ServerId::new(3, 1);
        let new = ServerId::new(3, 2);
        assert!(old.is_fenced_by(&new));
        assert!(!new.is_fenced_by(&old));
        assert!(!old.is_fenced_by(&ServerId::new(4, 9)));
    }

    #[test]
    fn ids_display_with_their_kind() {
        assert_eq!(GroupId(7).to_string(), "group-7");
        assert_eq!(ServerId::new(1, 2).to_string(), "server-1.2");
    }
}

#[cfg(test)]
mod sequence_tests {
    use super::*;

    #[test]
    fn sequences_advance_by_records_and_wrap_like_kafkas() {
        assert_eq!(BatchSequence(10).advance(5), BatchSequence(15));
        let last = BatchSequence(SEQUENCE_MODULUS - 2);
        assert_eq!(last.advance(5), BatchSequence(3));
        assert!(last.precedes(BatchSequence(3)));
        assert!(!BatchSequence(3).precedes(last));
        assert!(BatchSequence(3).precedes(BatchSequence(4)));
        assert!(!BatchSequence(4).precedes(BatchSequence(4)));
    }
}
