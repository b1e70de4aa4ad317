//! Fuzz target: `tailstream_wire::fuzzing::nic`: the one-sided protocol's messages raw, then
//! sealed from the input; sealed ones decode to themselves, a flipped bit never decodes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tailstream_wire::fuzzing::nic(data);
});
