//! Every decoder behind one function, so fuzz targets (`fuzz/`) and the property tests feed
//! the same arbitrary bytes through all of them. The only property checked is the one that
//! matters for untrusted input: no panic, no unbounded allocation, no read out of bounds.

use crate::batch::validate_batch;
use crate::codec::Decode;
use crate::entry::LogDigest;
use crate::frame::FrameDecoder;
use crate::messages::*;
use crate::records::RecordIter;
use crate::scan::{EntryIter, scan_segment, verify_closed};
use bytes::{Bytes, BytesMut};

/// Decodes `data` as a frame stream.
pub fn frames(data: &[u8]) {
    let decoder = FrameDecoder::new(1 << 16);
    let mut buf = BytesMut::from(data);
    while let Ok(Some(_)) = decoder.decode(&mut buf) {}
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
        AllocateProducerIdResponse,
        CreateStreamRequest,
        DescribeStreamRequest,
        ListStreamsResponse,
        ListBrokersResponse,
        ProduceRequest,
        ProduceResponse,
        FetchRequest,
        FetchResponse,
        ListGroupsRequest,
        ListGroupsResponse,
        LogDigest
    );
}

/// Decodes `data` as the one-sided protocol's fixed messages.
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
}

/// Validates `data` as a record batch and, if it passes, iterates its records.
pub fn record_batch(data: &[u8]) {
    if let Ok(info) = validate_batch(data) {
        for record in RecordIter::new(Bytes::copy_from_slice(data), &info) {
            if record.is_err() {
                break;
            }
        }
    }
}

/// Scans `data` as a segment buffer and iterates it as a run of entries.
pub fn segment(data: &[u8]) {
    let outcome = scan_segment(data);
    assert!(outcome.valid_len <= data.len());
    let _ = verify_closed(data, data.len());
    for entry in EntryIter::new(data, true) {
        if entry.is_err() {
            break;
        }
    }
}

/// All of the above.
pub fn all(data: &[u8]) {
    frames(data);
    messages(data);
    nic(data);
    record_batch(data);
    segment(data);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn no_decoder_panics_on_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            super::all(&data);
        }
    }
}
