//! Fuzz target: `tailstream_wire::fuzzing::segment`: the input as a raw segment buffer, then as
//! a recipe for appended segments that are torn or bit-flipped; Algorithm 1 must find exactly
//! the appends that end before the damage.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tailstream_wire::fuzzing::segment(data);
});
