//! Fuzz target: `tailstream_wire::fuzzing::produce`: a whole produce request from the input
//! (checksums computed), framed, decoded, validated, stored and read back as a consumer does;
//! whatever validation accepts must decode completely.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tailstream_wire::fuzzing::produce(data);
});
