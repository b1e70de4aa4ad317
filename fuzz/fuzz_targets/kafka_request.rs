//! Fuzz target: `tailstream_kafka_wire::fuzzing::request`: the input as one raw Kafka request
//! frame, then as a recipe for a request of a served API whose body follows that API's shape
//! (sometimes cut short or with a byte changed). The guard walks it before `kafka-protocol`
//! decodes it: never a panic, never an allocation beyond a small multiple of the request.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tailstream_kafka_wire::fuzzing::request(data);
});
