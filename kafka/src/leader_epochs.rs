//! Kafka's leader epochs (KIP-320) as Tailstream's ownership epochs (pure).
//!
//! A partition's leader epoch is its streamlet's ownership epoch, which moves on every change
//! of owner (a recovery after a crash gives the rebuilt streamlet a newer one). Metadata
//! answers it, and a Fetch, ListOffsets or OffsetForLeaderEpoch naming a
//! `current_leader_epoch` is checked against the owner's, as Kafka does: an older one is
//! FENCED_LEADER_EPOCH (the client refreshes its metadata), a newer one UNKNOWN_LEADER_EPOCH
//! (this broker has not learnt it yet: the client retries).
//!
//! Tailstream never truncates an acknowledged record: a new owner rebuilds every committed
//! record from the backups. So OffsetForLeaderEpoch answers a past epoch with the log's
//! committed end, which no consumer's position exceeds: clients validating their position after
//! a leader change find nothing to truncate, which is the truth. (Kafka would answer the
//! epoch's own end offset; the log does not record where each epoch began.)

use kafka_protocol::ResponseError;
use tailstream_wire::OwnershipEpoch;

/// A streamlet's ownership epoch as a Kafka leader epoch (i32; never negative).
pub(crate) fn leader_epoch(epoch: OwnershipEpoch) -> i32 {
    i32::try_from(epoch.0).unwrap_or(i32::MAX)
}

/// The error a request's `current_leader_epoch` gets against the owner's `current`; `None`
/// when it passes (or names none: -1).
pub(crate) fn check(requested: i32, current: i32) -> Option<i16> {
    if requested < 0 || requested == current {
        None
    } else if requested < current {
        Some(ResponseError::FencedLeaderEpoch.code())
    } else {
        Some(ResponseError::UnknownLeaderEpoch.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_epoch_is_fenced_a_newer_one_unknown_none_passes() {
        assert_eq!(check(-1, 4), None);
        assert_eq!(check(4, 4), None);
        assert_eq!(check(3, 4), Some(74));
        assert_eq!(check(5, 4), Some(75));
        assert_eq!(leader_epoch(OwnershipEpoch(7)), 7);
        assert_eq!(leader_epoch(OwnershipEpoch(u32::MAX)), i32::MAX);
    }
}
