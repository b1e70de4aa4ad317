//! A backup's on-disk formats, which recovery reads: the claim record beside each pool buffer
//! (which open replica the buffer holds) and the names of closed replicas' segment files
//! (which carry the replica's metadata, so a closed replica costs one file in its life).
//!
//! ```text
//! claim record (CLAIM_BYTES, overwritten in place)
//!  0  4  body length (0 with a zero CRC: the buffer holds no replica)
//!  4  4  CRC32 of the body, checked before any field of it is read
//!  8  .. body: a `ReplicaMeta` in the wire codec, then zeroes
//!
//! closed replica: <primary index>.<generation>/<stream>-<streamlet>-<log>-<group>-<segment>-e<epoch>[-filling].seg
//! ```

use crate::codec::{Decode, DecodeError, Encode};
use crate::ids::{GroupId, LogId, ReplicaEpoch, SegmentId, ServerId, StreamId, StreamletId};
use crate::messages::ReplicaId;
use crate::wire_message;
use thiserror::Error;

/// Size of a claim record; an encoded `ReplicaMeta` is far below it.
pub const CLAIM_BYTES: usize = 1024;
const CLAIM_HEADER_BYTES: usize = 8;

wire_message! {
    /// Everything a backup knows about a replica besides its bytes.
    pub struct ReplicaMeta {
        pub primary: ServerId,
        pub replica: ReplicaId,
        pub epoch: ReplicaEpoch,
        /// A replacement still being filled: never to be used for recovery.
        pub filling: bool,
        pub capacity_bytes: u32,
        /// Set when closed: the verified length of the segment file.
        pub closed_bytes: Option<u32>,
    }
}

/// What a claim record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The buffer holds no replica.
    Free,
    Replica(ReplicaMeta),
}

/// Why a claim record is not to be trusted.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ClaimError {
    #[error("claim length {0} exceeds the record")]
    Length(usize),
    #[error("claim checksum mismatch")]
    Checksum,
    #[error("claim body: {0}")]
    Body(DecodeError),
}

/// The record for `meta` (`None`: the buffer holds no replica).
pub fn encode_claim(meta: Option<&ReplicaMeta>) -> [u8; CLAIM_BYTES] {
    let mut record = [0u8; CLAIM_BYTES];
    if let Some(meta) = meta {
        let body = meta.to_bytes();
        // A ReplicaMeta is a few dozen bytes; the record has room for far more.
        let len = body.len().min(CLAIM_BYTES - CLAIM_HEADER_BYTES);
        record[0..4].copy_from_slice(&(len as u32).to_le_bytes());
        record[4..8].copy_from_slice(&crc32fast::hash(&body[..len]).to_le_bytes());
        record[CLAIM_HEADER_BYTES..CLAIM_HEADER_BYTES + len].copy_from_slice(&body[..len]);
    }
    record
}

/// Reads a claim record, checksum first.
pub fn decode_claim(record: &[u8; CLAIM_BYTES]) -> Result<Claim, ClaimError> {
    let [l0, l1, l2, l3, c0, c1, c2, c3, ..] = *record;
    let len = u32::from_le_bytes([l0, l1, l2, l3]) as usize;
    let crc = u32::from_le_bytes([c0, c1, c2, c3]);
    if len == 0 && crc == 0 {
        return Ok(Claim::Free);
    }
    let body = record
        .get(CLAIM_HEADER_BYTES..)
        .and_then(|rest| rest.get(..len))
        .ok_or(ClaimError::Length(len))?;
    if crc32fast::hash(body) != crc {
        return Err(ClaimError::Checksum);
    }
    let meta =
        ReplicaMeta::decode_exact(bytes::Bytes::copy_from_slice(body)).map_err(ClaimError::Body)?;
    Ok(Claim::Replica(meta))
}

/// The directory name of one primary incarnation's closed replicas.
pub fn primary_dir_name(primary: ServerId) -> String {
    format!("{}.{}", primary.index, primary.generation)
}

/// `<stream>-<streamlet>-<log>-<group>-<segment>-e<epoch>[-filling].seg`
pub fn segment_file_name(meta: &ReplicaMeta) -> String {
    let id = &meta.replica;
    let filling = if meta.filling { "-filling" } else { "" };
    format!(
        "{}-{}-{}-{}-{}-e{}{filling}.seg",
        id.stream.0, id.streamlet.0, id.log.0, id.group.0, id.segment.0, meta.epoch.0
    )
}

/// What a closed replica's directory and file names say: (primary, replica, epoch, filling).
pub fn parse_segment_file(
    dir_name: &str,
    file_name: &str,
) -> Option<(ServerId, ReplicaId, ReplicaEpoch, bool)> {
    let (index, generation) = dir_name.split_once('.')?;
    let primary = ServerId::new(index.parse().ok()?, generation.parse().ok()?);
    let stem = file_name.strip_suffix(".seg")?;
    let (stem, filling) = match stem.strip_suffix("-filling") {
        Some(stem) => (stem, true),
        None => (stem, false),
    };
    let mut fields = stem.split('-');
    let mut next = || fields.next()?.parse::<u64>().ok();
    let (stream, streamlet, log, group, segment) = (next()?, next()?, next()?, next()?, next()?);
    let epoch = ReplicaEpoch(fields.next()?.strip_prefix('e')?.parse().ok()?);
    if fields.next().is_some() {
        return None;
    }
    let replica = ReplicaId {
        stream: StreamId(stream),
        streamlet: StreamletId(u32::try_from(streamlet).ok()?),
        log: LogId(u32::try_from(log).ok()?),
        group: GroupId(group),
        segment: SegmentId(segment),
    };
    Some((primary, replica, epoch, filling))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(filling: bool) -> ReplicaMeta {
        ReplicaMeta {
            primary: ServerId::new(3, 7),
            replica: ReplicaId {
                stream: StreamId(1),
                streamlet: StreamletId(2),
                log: LogId(3),
                group: GroupId(4),
                segment: SegmentId(5),
            },
            epoch: ReplicaEpoch(6),
            filling,
            capacity_bytes: 100,
            closed_bytes: Some(100),
        }
    }

    #[test]
    fn segment_file_names_round_trip() {
        for filling in [false, true] {
            let meta = meta(filling);
            let name = segment_file_name(&meta);
            let parsed = parse_segment_file(&primary_dir_name(meta.primary), &name).unwrap();
            assert_eq!(
                parsed,
                (meta.primary, meta.replica, ReplicaEpoch(6), filling)
            );
        }
        assert!(parse_segment_file("3.7", "1-2-3-4-5-e6.seg.tmp").is_none());
        assert!(parse_segment_file("x", "1-2-3-4-5-e6.seg").is_none());
        assert!(parse_segment_file("3.7", "1-2-3-4-e6.seg").is_none());
    }

    #[test]
    fn claims_round_trip_and_any_flipped_bit_is_refused() {
        let record = encode_claim(Some(&meta(false)));
        assert_eq!(decode_claim(&record), Ok(Claim::Replica(meta(false))));
        assert_eq!(decode_claim(&encode_claim(None)), Ok(Claim::Free));
        let used = 8 + meta(false).to_bytes().len();
        for bit in 0..used * 8 {
            let mut bad = record;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_claim(&bad).is_err(), "bit {bit}");
        }
    }
}
