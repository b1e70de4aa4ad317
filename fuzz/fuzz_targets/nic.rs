//! Fuzz target: `tailstream_wire::fuzzing::nic` must never panic, whatever the bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tailstream_wire::fuzzing::nic(data);
});
