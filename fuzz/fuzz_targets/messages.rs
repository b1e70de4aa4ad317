//! Fuzz target: `tailstream_wire::fuzzing::messages` must never panic, over-allocate or read out of
//! bounds, whatever the bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tailstream_wire::fuzzing::messages(data);
});
