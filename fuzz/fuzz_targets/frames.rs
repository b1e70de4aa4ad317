//! Fuzz target: `tailstream_wire::fuzzing::frames`: the input as a raw frame stream, then as a
//! recipe for checksummed frames whose bodies reach every message decoder. Never a panic, an
//! over-allocation or a read out of bounds; intact frames decode to what was encoded.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tailstream_wire::fuzzing::frames(data);
});
