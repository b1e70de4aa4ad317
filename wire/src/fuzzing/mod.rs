//! Every decoder behind a few entry points, so the fuzz targets (`fuzz/`) and the stable
//! property tests feed the same inputs through them.
//!
//! Each target first decodes the input as it is (what an attacker sends raw). Raw bytes rarely
//! get past a checksum, so each target then also reads the input as a *recipe* (`Source`) for
//! a well-formed message whose checksums are computed: frames whose header and body CRCs match,
//! NIC headers with their CRC, record batches whose CRC-32C covers whatever records the recipe
//! made, segments built by the appender and then torn or bit-flipped. That is what reaches the
//! parsers behind the checksums.
//!
//! Beyond "no panic, no unbounded allocation, no read out of bounds", the targets assert the
//! properties the system relies on: a batch the broker accepts decodes completely in any
//! consumer; Algorithm 1 finds exactly the appends before a tear or a flipped bit; what was
//! encoded decodes to itself.

mod source;
mod structured;

pub use source::Source;
pub use structured::{
    frames_structured, nic_structured, produce, record_batch_structured, segment_structured,
};

use crate::batch::read_batch_header;
use crate::codec::Decode;
use crate::entry::LogDigest;
use crate::frame::FrameDecoder;
use crate::messages::*;
use crate::records::RecordIter;
use crate::scan::{EntryIter, scan_segment, verify_closed};
use bytes::{Bytes, BytesMut};

/// Decodes `data` as a frame stream, then builds checksummed frames from it.
pub fn frames(data: &[u8]) {
    let decoder = FrameDecoder::new(1 << 16);
    let mut buf = BytesMut::from(data);
    while let Ok(Some(_)) = decoder.decode(&mut buf) {}
    frames_structured(data);
}

/// Decodes `data` as the body of every message type.
pub fn messages(data: &[u8]) {
    let body = Bytes::copy_from_slice(data);
    macro_rules! all {
        ($($ty:ty),*) => { $(let _ = <$ty>::decode_exact(body.clone());)* };
    }
    all!(
        StreamMetadata,
        ErrorBody,
        RegisterBrokerRequest,
        RegisterBrokerResponse,
        AssignStreamletsRequest,
        BrokerHeartbeatRequest,
        BrokerHeartbeatResponse,
        AllocateProducerIdRequest,
        AllocateProducerIdResponse,
        ProducerIdBindingKeyResponse,
        AllocateProducerIdRequestBeforeOwner,
        CreateStreamRequest,
        AddStreamletsRequest,
        AlterRetentionRequest,
        DeleteRecordsRequest,
        DescribeStreamRequest,
        ListStreamsResponse,
        ListBrokersResponse,
        ProduceRequest,
        ProduceResponse,
        FetchRequest,
        FetchResponse,
        ListGroupsRequest,
        ListGroupsResponse,
        LocateOffsetRequest,
        LocateOffsetResponse,
        GroupJoinRequest,
        OffsetCommitRequest,
        ConsumerAssignment,
        ReplicaOpenRequest,
        BufferDescriptor,
        ReplicaCloseRequest,
        ReplicaFreeRequest,
        ReplicaSetEpochRequest,
        ListReplicasRequest,
        ListReplicasResponse,
        ReadReplicaRequest,
        ReadReplicaResponse,
        ReplicaWriteRequest,
        RdmaConnectRequest,
        RdmaConnectResponse,
        ReplicaAdoptRequest,
        ReportSuspectRequest,
        ReportLogBoundsRequest,
        ReportLogBoundsResponse,
        RecoverStreamletRequest,
        LogDigest
    );
    // The coordinator's metadata journal: whatever the header says, replay never panics and
    // never reports more than the input holds.
    let (_records, valid_bytes, _tail) = crate::metadata_journal::decode_records(data);
    assert!(valid_bytes <= data.len());
    let _ = crate::metadata_journal::decode_header(data);
    // A backup's on-disk formats: a claim record (padded or cut to its size), file names.
    let mut record = [0u8; crate::replica_files::CLAIM_BYTES];
    let n = data.len().min(record.len());
    record[..n].copy_from_slice(&data[..n]);
    let _ = crate::replica_files::decode_claim(&record);
    let text = String::from_utf8_lossy(data);
    let (dir, file) = text.split_once('/').unwrap_or(("1.1", &text));
    let _ = crate::replica_files::parse_segment_file(dir, file);
}

/// Decodes `data` as the one-sided protocol's fixed messages, then as sealed ones.
pub fn nic(data: &[u8]) {
    use crate::nic::{
        COMPLETION_BYTES, Completion, HELLO_BYTES, Hello, WRITE_HEADER_BYTES, WriteHeader,
    };
    if let Some(raw) = data.first_chunk::<HELLO_BYTES>() {
        let _ = Hello::decode(raw);
    }
    if let Some(raw) = data.first_chunk::<WRITE_HEADER_BYTES>()
        && let Ok(header) = WriteHeader::decode(raw)
    {
        let _ = header.end_within(u32::MAX);
    }
    if let Some(raw) = data.first_chunk::<COMPLETION_BYTES>() {
        let _ = Completion::decode(raw);
    }
    nic_structured(data);
}

/// Reads `data` as a record batch and iterates its records, then builds batches from it.
pub fn record_batch(data: &[u8]) {
    if let Ok(info) = read_batch_header(data) {
        for record in RecordIter::new(Bytes::copy_from_slice(data), &info) {
            if record.is_err() {
                break;
            }
        }
    }
    record_batch_structured(data);
}

/// Scans `data` as a segment buffer and iterates it as a run of entries, then builds,
/// damages and scans segments from it.
pub fn segment(data: &[u8]) {
    let outcome = scan_segment(data);
    assert!(outcome.valid_len <= data.len());
    let _ = verify_closed(data, data.len());
    for entry in EntryIter::new(data, true) {
        if entry.is_err() {
            break;
        }
    }
    segment_structured(data);
}

/// All of the above.
pub fn all(data: &[u8]) {
    frames(data);
    messages(data);
    nic(data);
    record_batch(data);
    segment(data);
    produce(data);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]
        #[test]
        fn no_decoder_panics_or_breaks_a_property_on_arbitrary_bytes(
            data in proptest::collection::vec(any::<u8>(), 0..768)
        ) {
            super::all(&data);
        }
    }
}
#[cfg(test)]
mod found {
    /// Inputs the fuzzers found that once broke a property, kept as regression tests.
    #[test]
    fn a_tear_over_bytes_that_were_already_zero_is_no_damage() {
        // A segment of one append whose trailer ends in a zero byte, "torn" from that byte.
        let data = [
            1u8, 0, 0, 0, 0, 0, 0, 47, 29, 29, 255, 255, 255, 253, 29, 29, 0, 0, 26, 26, 26, 26,
            23, 26, 29, 21, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13,
            13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 29, 29, 29,
            29, 227, 226, 33, 39, 50,
        ];
        super::segment(&data);
    }

    #[test]
    fn a_flipped_type_bit_that_makes_the_first_entry_a_trailer_is_damage() {
        // One append whose 4-byte payload happens to be the empty chain's trailer value; a bit
        // flip turns its header's type into Trailer, which matched: 13 bytes of a "valid"
        // prefix holding no entry.
        let data = [11u8, 0, 0, 91, 9, 64, 249, 0, 91, 9, 5, 1, 0, 0, 0, 254];
        super::segment(&data);
    }
}
