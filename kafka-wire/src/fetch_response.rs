//! Fetch answers (v4–v12), encoded here rather than through `kafka-protocol`: a partition's
//! records are the stored record batches themselves, sent as slices of the segments they live
//! in (`parts`), never copied into one buffer or decoded.

use bytes::{BufMut, Bytes, BytesMut};

/// One partition's part of a fetch answer.
#[derive(Debug, Default)]
pub struct PartitionAnswer {
    pub partition: i32,
    pub error_code: i16,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// Whole record batches, in offset order.
    pub batches: Vec<Bytes>,
}

/// One topic's partitions.
#[derive(Debug, Default)]
pub struct TopicAnswer {
    pub topic: String,
    pub partitions: Vec<PartitionAnswer>,
}

/// A fetch answer's top-level fields.
#[derive(Clone, Copy, Debug, Default)]
pub struct FetchHeader {
    pub throttle_ms: i32,
    /// A fetch session's error (v7+), with no partitions.
    pub error_code: i16,
    /// The fetch session the answer belongs to (v7+; 0: none).
    pub session_id: i32,
}

/// The first flexible version (compact lengths, tagged fields).
const FLEXIBLE: i16 = 12;

/// Encodes a fetch answer of `version` (4..=12) as body parts: the encoded fields between the
/// batches, and the batches as they are.
pub fn encode_fetch_response(
    version: i16,
    header: &FetchHeader,
    topics: &[TopicAnswer],
) -> Vec<Bytes> {
    let flexible = version >= FLEXIBLE;
    let mut parts = Vec::new();
    let mut fields = BytesMut::with_capacity(256);
    fields.put_i32(header.throttle_ms);
    if version >= 7 {
        fields.put_i16(header.error_code);
        fields.put_i32(header.session_id);
    }
    put_count(&mut fields, flexible, topics.len());
    for topic in topics {
        put_string(&mut fields, flexible, &topic.topic);
        put_count(&mut fields, flexible, topic.partitions.len());
        for partition in &topic.partitions {
            fields.put_i32(partition.partition);
            fields.put_i16(partition.error_code);
            fields.put_i64(partition.high_watermark);
            // No transactions: everything committed is stable.
            fields.put_i64(partition.high_watermark);
            if version >= 5 {
                fields.put_i64(partition.log_start_offset);
            }
            // aborted_transactions: null.
            if flexible {
                fields.put_u8(0);
            } else {
                fields.put_i32(-1);
            }
            if version >= 11 {
                fields.put_i32(-1); // preferred_read_replica: none
            }
            let records: usize = partition.batches.iter().map(Bytes::len).sum();
            // A fetch answer is bounded far below 2 GiB (fetch_bytes_max).
            let records = u32::try_from(records).unwrap_or(i32::MAX as u32);
            if flexible {
                put_uvarint(&mut fields, records.saturating_add(1));
            } else {
                fields.put_u32(records.min(i32::MAX as u32));
            }
            if !partition.batches.is_empty() {
                parts.push(fields.split().freeze());
                parts.extend(partition.batches.iter().cloned());
            }
            put_no_tagged_fields(&mut fields, flexible); // the partition's
        }
        put_no_tagged_fields(&mut fields, flexible); // the topic's
    }
    put_no_tagged_fields(&mut fields, flexible); // the answer's
    parts.push(fields.freeze());
    parts
}

/// An array's count: i32 in a classic version, count + 1 as an unsigned varint in a flexible
/// one.
fn put_count(out: &mut BytesMut, flexible: bool, count: usize) {
    let count = u32::try_from(count).unwrap_or(i32::MAX as u32);
    if flexible {
        put_uvarint(out, count.saturating_add(1));
    } else {
        out.put_u32(count.min(i32::MAX as u32));
    }
}

fn put_string(out: &mut BytesMut, flexible: bool, value: &str) {
    // Topic names are validated to at most 249 bytes when streams are created.
    let len = value.len().min(i16::MAX as usize);
    if flexible {
        put_uvarint(out, len as u32 + 1);
    } else {
        out.put_i16(len as i16);
    }
    out.put_slice(&value.as_bytes()[..len]);
}

fn put_uvarint(out: &mut BytesMut, mut value: u32) {
    while value >= 0x80 {
        out.put_u8(value as u8 | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

/// A struct's tagged fields in a flexible version: none.
fn put_no_tagged_fields(out: &mut BytesMut, flexible: bool) {
    if flexible {
        out.put_u8(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::FetchResponse;
    use kafka_protocol::protocol::Decodable;

    #[test]
    fn the_crate_reads_what_is_encoded_here_at_every_version() {
        let batch_a = Bytes::from_static(b"first batch bytes");
        let batch_b = Bytes::from_static(b"second");
        let topics = vec![TopicAnswer {
            topic: "clicks".into(),
            partitions: vec![
                PartitionAnswer {
                    partition: 3,
                    error_code: 0,
                    high_watermark: 42,
                    log_start_offset: 7,
                    batches: vec![batch_a.clone(), batch_b.clone()],
                },
                PartitionAnswer {
                    partition: 4,
                    error_code: 6,
                    high_watermark: -1,
                    log_start_offset: -1,
                    batches: vec![],
                },
            ],
        }];
        let header = FetchHeader {
            throttle_ms: 5,
            error_code: 0,
            session_id: 77,
        };
        for version in 4..=12 {
            let parts = encode_fetch_response(version, &header, &topics);
            let mut whole: Bytes = parts.concat().into();
            let decoded = FetchResponse::decode(&mut whole, version).unwrap();
            assert!(whole.is_empty(), "v{version}: every byte read");
            assert_eq!(decoded.throttle_time_ms, 5);
            if version >= 7 {
                assert_eq!(decoded.session_id, 77);
            }
            let topic = &decoded.responses[0];
            assert_eq!(topic.topic.as_str(), "clicks");
            let first = &topic.partitions[0];
            assert_eq!((first.partition_index, first.high_watermark), (3, 42));
            let expected: Vec<u8> = [&batch_a[..], &batch_b[..]].concat();
            assert_eq!(first.records.as_deref(), Some(&expected[..]));
            if version >= 5 {
                assert_eq!(first.log_start_offset, 7);
            }
            assert_eq!(topic.partitions[1].error_code, 6);
            assert_eq!(topic.partitions[1].records.as_deref(), Some(&[][..]));
        }
    }
}
