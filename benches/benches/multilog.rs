//! What MultiLog buys, in-process (no network): T threads append 100-byte-record batches to
//! one streamlet with Q logs, each thread as its own producer (producer t maps to log t mod Q).
//! With Q = 1 the threads take turns on one append lock; with Q = T each has a log of its own.
//! `cargo bench -p tailstream-bench --bench multilog`; compare "T=2 Q=2" with "T=2 Q=1".

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use tailstream_storage::{ProducerOwner, SegmentMemory, Streamlet};
use tailstream_wire::batch::{ProducerSequence, validate_batch};
use tailstream_wire::messages::StreamConfig;
use tailstream_wire::records::RecordBatchBuilder;
use tailstream_wire::{BatchSequence, ProducerEpoch, ProducerId, StreamId, StreamletId};

fn batch(records: usize, record_bytes: usize) -> Bytes {
    let value = vec![b'v'; record_bytes];
    let mut builder = RecordBatchBuilder::new(records * (record_bytes + 16));
    for _ in 0..records {
        builder.push(0, None, Some(&value), &[]);
    }
    builder.finish(ProducerId(0), ProducerEpoch(0), BatchSequence(0))
}

fn streamlet(logs: u32) -> Streamlet {
    let config = StreamConfig {
        logs_per_streamlet: logs,
        replicas: 0,
        segment_size_bytes: 8 << 20,
        segments_per_group: 4,
        retention_bytes: 64 << 20,
        retention_ms: 0,
        min_insync_replicas: 0,
    };
    Streamlet::new(
        StreamId(0),
        StreamletId(0),
        config,
        SegmentMemory::new(1 << 30),
        16,
        64 << 20,
    )
}

/// `threads` threads append `iters` batches each; returns the wall time of the slowest.
fn run(threads: u64, logs: u32, one: &Bytes, iters: u64) -> Duration {
    let streamlet = Arc::new(streamlet(logs));
    let start = Arc::new(Barrier::new(threads as usize + 1));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (streamlet, start, one) = (streamlet.clone(), start.clone(), one.clone());
            std::thread::spawn(move || {
                // Storage trusts the validated header it is given, so one batch's bytes serve
                // for every sequence: the loop measures appending, not re-checksumming.
                let mut info = validate_batch(&one).expect("a valid batch");
                let producer_id = ProducerId(t);
                let log = streamlet.log_for(producer_id).id();
                start.wait();
                for i in 0..iters {
                    info.producer = Some(ProducerSequence {
                        producer_id,
                        producer_epoch: ProducerEpoch(0),
                        base_sequence: BatchSequence(i as u32),
                    });
                    let appended =
                        streamlet.append(log, &one, &info, ProducerOwner::ANYONE, Instant::now());
                    assert!(appended.is_ok_and(|a| !a.duplicate), "append failed");
                    if i % 256 == 255 {
                        streamlet.enforce_retention(Instant::now());
                    }
                }
            })
        })
        .collect();
    start.wait();
    let started = Instant::now();
    for worker in workers {
        worker.join().expect("an append thread panicked");
    }
    started.elapsed()
}

fn multilog(c: &mut Criterion) {
    for records in [40usize, 600] {
        let one = batch(records, 100);
        let mut group = c.benchmark_group(format!("multilog {} B batches", one.len()));
        group
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3));
        for threads in [1u64, 2] {
            for logs in [1u32, 2] {
                // One iteration: every thread appends one batch.
                group.throughput(Throughput::Bytes(one.len() as u64 * threads));
                group.bench_function(format!("T={threads} Q={logs}"), |b| {
                    b.iter_custom(|iters| run(threads, logs, &one, iters))
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, multilog);
criterion_main!(benches);
