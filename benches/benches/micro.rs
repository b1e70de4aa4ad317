//! Micro-benchmarks of the hot path's pure functions. `cargo bench -p tailstream-bench`.

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::Instant;
use tailstream_storage::{ProducerOwner, SegmentMemory, Streamlet};
use tailstream_wire::batch::{read_batch_header, validate_batch};
use tailstream_wire::entry::EntryType;
use tailstream_wire::messages::StreamConfig;
use tailstream_wire::records::RecordBatchBuilder;
use tailstream_wire::scan::scan_segment;
use tailstream_wire::segment::SegmentImage;
use tailstream_wire::{BatchSequence, LogId, ProducerEpoch, ProducerId, StreamId, StreamletId};

fn batch(records: usize, record_bytes: usize, sequence: u32) -> Bytes {
    let value = vec![b'v'; record_bytes];
    let mut builder = RecordBatchBuilder::new(records * (record_bytes + 16));
    for _ in 0..records {
        builder.push(0, None, Some(&value), &[]);
    }
    builder.finish(ProducerId(1), ProducerEpoch(0), BatchSequence(sequence))
}

fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("append");
    for records in [40usize, 600] {
        let one = batch(records, 100, 0);
        group.throughput(Throughput::Bytes(one.len() as u64));
        group.bench_function(format!("{} B batch", one.len()), |b| {
            let config = StreamConfig {
                logs_per_streamlet: 1,
                replicas: 0,
                segment_size_bytes: 8 << 20,
                segments_per_group: 4,
                retention_bytes: 64 << 20,
                retention_ms: 0,
                min_insync_replicas: 0,
            };
            let streamlet = Streamlet::new(
                StreamId(0),
                StreamletId(0),
                config,
                SegmentMemory::new(1 << 30),
                16,
                64 << 20,
            );
            let mut sequence = 0u32;
            b.iter(|| {
                let bytes = batch_with_sequence(&one, sequence);
                sequence += 1;
                let info = validate_batch(&bytes).expect("valid");
                let appended = streamlet
                    .append(
                        LogId(0),
                        &bytes,
                        &info,
                        ProducerOwner::ANYONE,
                        Instant::now(),
                    )
                    .expect("appended");
                if sequence.is_multiple_of(1024) {
                    streamlet.enforce_retention(Instant::now());
                }
                black_box(appended)
            });
        });
    }
    group.finish();
}

/// The same batch with another sequence (restamping costs a CRC pass, as a real batch would).
fn batch_with_sequence(batch: &Bytes, sequence: u32) -> Vec<u8> {
    let mut bytes = batch.to_vec();
    tailstream_wire::batch::restamp_sequence(&mut bytes, BatchSequence(sequence)).expect("header");
    bytes
}

fn scan(c: &mut Criterion) {
    let mut image = SegmentImage::new(8 << 20);
    let one = batch(600, 100, 0);
    while image.append(EntryType::Batch, &one).is_ok() {}
    let mut group = c.benchmark_group("scan");
    group.throughput(Throughput::Bytes(image.written() as u64));
    group.bench_function("8 MiB segment", |b| {
        b.iter(|| black_box(scan_segment(&image.bytes)))
    });
    group.finish();
}

/// What the broker checks per produced batch, side by side: the header and CRC-32C alone, and
/// the whole validation (header, CRC-32C and every record), so the cost of walking the records
/// reads as the difference between the two lines.
fn validate(c: &mut Criterion) {
    for (records, record_bytes) in [(600usize, 100usize), (6000, 10)] {
        let one = batch(records, record_bytes, 0);
        let mut group = c.benchmark_group(format!("validate {records} x {record_bytes} B"));
        group.throughput(Throughput::Bytes(one.len() as u64));
        group.bench_function("header and crc", |b| {
            b.iter(|| black_box(read_batch_header(&one)))
        });
        group.bench_function("header, crc and records", |b| {
            b.iter(|| black_box(validate_batch(&one)))
        });
        group.finish();
    }
}

/// What a producer pays per record to build a batch: encoding 100-byte records (no key, no
/// headers, the common case) into a 100 KiB batch, and sealing it (header and CRC-32C).
fn build(c: &mut Criterion) {
    let value = vec![b'v'; 100];
    let records = 900u64;
    let mut group = c.benchmark_group("build batch");
    group.throughput(Throughput::Elements(records));
    group.bench_function("900 x 100 B records, sealed", |b| {
        b.iter(|| {
            let mut builder = RecordBatchBuilder::new(102_400 + 200);
            for _ in 0..records {
                builder.push(black_box(7), None, Some(black_box(&value)), &[]);
            }
            black_box(builder.finish(ProducerId(1), ProducerEpoch(0), BatchSequence(0)))
        })
    });
    group.finish();
}

criterion_group!(benches, append, scan, validate, build);
criterion_main!(benches);
