//! What a hostile request can make the Kafka codec allocate: every count and length on the
//! wire is bounded by the bytes left before `kafka-protocol` (which allocates from the counts)
//! sees the request, so a request of n bytes costs at most a small multiple of n, never the
//! gigabytes its counts claim.

use bytes::{BufMut, Bytes, BytesMut};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use std::alloc::System;
use tailstream_kafka_wire::{Api, DecodeError, decode_request};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// A decoded request may take this many times its size (the largest element struct of a
/// served request over the fewest bytes it takes on the wire).
const AMPLIFICATION_MAX: usize = 64;

fn header(api: Api, version: i16) -> BytesMut {
    let mut out = BytesMut::new();
    out.put_i16(api as i16);
    out.put_i16(version);
    out.put_i32(1);
    out.put_i16(-1); // no client id
    out
}

/// The allocator's counters are process-wide: each test holds this for its whole run, so the
/// other test's allocations (tests run on parallel threads) never land in its regions.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    MEASURING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Bytes allocated while decoding `frame` (and whether it decoded).
fn allocated(frame: Bytes) -> (usize, bool) {
    let region = Region::new(GLOBAL);
    let decoded = decode_request(frame);
    let ok = decoded.is_ok();
    drop(decoded);
    (region.change().bytes_allocated, ok)
}

#[test]
fn counts_that_claim_gigabytes_cost_nothing_and_full_arrays_cost_a_multiple_of_the_frame() {
    let _alone = alone();
    // Metadata v8: a topics array claiming 2^31 - 1 names, in a 17-byte request.
    let mut lie = header(Api::Metadata, 8);
    lie.put_i32(i32::MAX);
    let (bytes, ok) = allocated(lie.freeze());
    assert!(!ok);
    assert!(bytes < 4096, "{bytes} bytes for a refused 17-byte request");

    // The same array, as full as 64 KiB allows: 2-byte empty names back to back.
    let names = 32 * 1024;
    let mut full = header(Api::Metadata, 8);
    full.put_i32(names);
    for _ in 0..names {
        full.put_i16(0);
    }
    full.put_slice(&[1, 0, 0]);
    let size = full.len();
    let (bytes, ok) = allocated(full.freeze());
    assert!(ok);
    assert!(
        bytes <= AMPLIFICATION_MAX * size,
        "{bytes} bytes for a {size}-byte request"
    );

    // Fetch v11: nested arrays, each as full as the bytes allow.
    let mut nested = header(Api::Fetch, 11);
    nested.put_slice(&[0; 17]); // replica, max wait, min and max bytes, isolation
    nested.put_i32(0); // session id
    nested.put_i32(0); // session epoch
    let topics = 512;
    nested.put_i32(topics);
    for _ in 0..topics {
        nested.put_i16(0);
        nested.put_i32(1);
        nested.put_slice(&[0; 4 + 4 + 8 + 8 + 4]);
    }
    nested.put_i32(0); // forgotten topics
    nested.put_i16(0); // rack: empty
    let size = nested.len();
    let (bytes, ok) = allocated(nested.freeze());
    assert!(ok);
    assert!(
        bytes <= AMPLIFICATION_MAX * size,
        "{bytes} bytes for {size}"
    );
}

#[test]
fn strings_and_byte_fields_longer_than_the_request_are_refused_before_allocating() {
    let _alone = alone();
    // JoinGroup v5 whose protocol metadata claims 2 GiB.
    let mut join = header(Api::JoinGroup, 5);
    join.put_i16(1);
    join.put_slice(b"g");
    join.put_i32(10_000);
    join.put_i32(10_000);
    join.put_i16(0);
    join.put_i16(-1);
    join.put_i16(8);
    join.put_slice(b"consumer");
    join.put_i32(1);
    join.put_i16(5);
    join.put_slice(b"range");
    join.put_i32(i32::MAX);
    let (bytes, ok) = allocated(join.freeze());
    assert!(!ok);
    assert!(bytes < 4096, "{bytes}");

    // A client id claiming more than the frame.
    let mut client = BytesMut::new();
    client.put_i16(Api::Metadata as i16);
    client.put_i16(1);
    client.put_i32(1);
    client.put_i16(i16::MAX);
    assert!(matches!(
        decode_request(client.freeze()),
        Err(DecodeError::Guard(_))
    ));
}
