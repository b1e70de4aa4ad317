//! Fuzz target: `tailstream_wire::fuzzing::record_batch`: the input as a raw batch, then as a
//! recipe for batches whose CRC-32C is computed over whatever records it made; a batch the
//! broker's validation accepts must decode completely in a consumer.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tailstream_wire::fuzzing::record_batch(data);
});
