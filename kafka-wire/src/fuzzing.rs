//! The Kafka request decoder behind two entry points, for the fuzz target (`fuzz/`,
//! `kafka_request`) and the stable tests.
//!
//! Raw input rarely gets past the guard's exact walk, so the input is also read as a recipe
//! (`Source`): a served API and version, a header, then a body that follows that API's shape
//! with lengths, counts and contents from the recipe, sometimes with one byte damaged or cut
//! short. What the guard accepts then reaches `kafka-protocol`'s decoder, which must neither
//! panic nor allocate beyond a small multiple of the request (the guard's bound).

use crate::request::{DecodeError, Decoded, decode_request};
use crate::shapes::{Field, Kind, request_shape};
use crate::versions::Api;
use bytes::{BufMut, Bytes, BytesMut};
use tailstream_wire::fuzzing::Source;

/// Decodes `data` as one request frame (the bytes after the length prefix), then as a recipe.
pub fn request(data: &[u8]) {
    let _ = decode_request(Bytes::copy_from_slice(data));
    request_structured(data);
}

/// Builds a request from the recipe in `data` and decodes it: an undamaged request of a
/// served API decodes (or fails on content the walk does not check, such as UTF-8), never
/// panics.
pub fn request_structured(data: &[u8]) {
    let mut source = Source::new(data);
    let api = Api::ALL[source.below(Api::ALL.len())];
    let (min, max) = api.advertised();
    let version = min + source.below((max - min + 1) as usize) as i16;
    let mut frame = BytesMut::new();
    frame.put_i16(api as i16);
    frame.put_i16(version);
    frame.put_i32(source.u32() as i32);
    put_string(&mut frame, false, &mut source);
    if api.request_header_version(version) >= 2 {
        frame.put_u8(0); // no tagged fields
    }
    let flexible = api.flexible(version);
    build(
        request_shape(api),
        version,
        flexible,
        &mut frame,
        &mut source,
        0,
    );
    let damage = source.u8();
    let len = frame.len();
    match damage % 8 {
        // Cut short somewhere.
        0 if len > 0 => frame.truncate(source.below(len)),
        // One byte changed.
        1 if len > 0 => {
            let at = source.below(len);
            frame[at] ^= source.u8() | 1;
        }
        _ => {}
    }
    let undamaged = damage % 8 > 1;
    match decode_request(frame.freeze()) {
        // A changed byte may well make another valid request.
        Ok(Decoded::Request { api: got, .. }) => assert!(!undamaged || got == api),
        Ok(Decoded::ApiVersionsFallback { .. }) => {}
        // What the walk does not check (UTF-8, nulls where none are allowed) is the crate's
        // to refuse; a walk that fails on an undamaged request is a bug in a shape.
        Err(DecodeError::Guard(error) | DecodeError::Body { error, .. }) => {
            assert!(
                !undamaged || !accepted(api, version),
                "{api:?} v{version}: {error}"
            )
        }
        Err(_) => {}
    }
}

/// Whether the listener serves `api` at `version` (recipes only build those).
fn accepted(api: Api, version: i16) -> bool {
    api.accepts(version)
}

/// A length or count: i16 or i32 in a classic version, an unsigned varint of length + 1
/// (0: null) in a flexible one; `None` is null.
fn put_length(out: &mut BytesMut, flexible: bool, short: bool, length: Option<usize>) {
    match (flexible, length) {
        (true, None) => out.put_u8(0),
        (true, Some(n)) => put_uvarint(out, n as u32 + 1),
        (false, None) if short => out.put_i16(-1),
        (false, None) => out.put_i32(-1),
        (false, Some(n)) if short => out.put_i16(n as i16),
        (false, Some(n)) => out.put_i32(n as i32),
    }
}

fn put_uvarint(out: &mut BytesMut, mut value: u32) {
    while value >= 0x80 {
        out.put_u8(value as u8 | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

fn put_string(out: &mut BytesMut, flexible: bool, source: &mut Source<'_>) {
    match source.u8() % 8 {
        0 => put_length(out, flexible, true, None),
        _ => {
            let text = source.chunk(16);
            put_length(out, flexible, true, Some(text.len()));
            out.put_slice(text);
        }
    }
}

fn build(
    shape: &[Field],
    version: i16,
    flexible: bool,
    out: &mut BytesMut,
    source: &mut Source<'_>,
    depth: usize,
) {
    for field in shape.iter().filter(|f| f.present_in(version)) {
        match field.kind {
            Kind::I8 => out.put_u8(source.u8()),
            Kind::I16 => out.put_u16(source.u16()),
            Kind::I32 => out.put_u32(source.u32()),
            Kind::I64 => out.put_u64(source.u64()),
            Kind::Uuid => {
                out.put_u64(source.u64());
                out.put_u64(source.u64());
            }
            Kind::Str => put_string(out, flexible, source),
            Kind::Bytes => {
                let bytes = source.chunk(64);
                put_length(out, flexible, false, Some(bytes.len()));
                out.put_slice(bytes);
            }
            Kind::I32s => {
                let count = source.below(4);
                put_length(out, flexible, false, Some(count));
                for _ in 0..count {
                    out.put_u32(source.u32());
                }
            }
            Kind::Strs => {
                let count = source.below(4);
                put_length(out, flexible, false, Some(count));
                for _ in 0..count {
                    put_string(out, flexible, source);
                }
            }
            Kind::Array(element) => {
                let count = if depth < 3 { source.below(4) } else { 0 };
                put_length(out, flexible, false, Some(count));
                for _ in 0..count {
                    build(element, version, flexible, out, source, depth + 1);
                }
            }
        }
    }
    if flexible {
        // Sometimes one unknown tagged field, which the crate keeps as bytes.
        match source.u8() % 4 {
            0 => {
                let bytes = source.chunk(8);
                out.put_u8(1);
                put_uvarint(out, 1000);
                put_uvarint(out, bytes.len() as u32);
                out.put_slice(bytes);
            }
            _ => out.put_u8(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipes_and_raw_bytes_never_panic() {
        // A deterministic spread of inputs (the fuzz target explores far more).
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for len in 0..400usize {
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            request(&data);
        }
    }
}
