//! tailstream-bench: measuring Tailstream.
//!
//! - [`produce`]: `tailstream bench produce`: starts (or joins) a cluster of real processes,
//!   produces N records from P producers, and reports records/s, MiB/s, record latency
//!   percentiles and broker CPU per GiB.
//! - [`recovery`]: `tailstream bench recovery`: fills one streamlet, kills its owner, and
//!   reports detection, each recovery phase and kill-to-serving time.
//! - [`chaos`]: `tailstream bench chaos`: random crashes under a running load, and the
//!   exactly-once checker (`cli/tests/recovery.rs` runs five cycles of it in CI).
//! - [`harness`]: starting a local cluster and watching it (owners, serving, admin pages).
//! - [`cpu`]: CPU time of processes, read from `/proc`.
//! - `benches/micro.rs`: criterion micro-benchmarks of the hot functions (append, scan,
//!   batch validation), run with `cargo bench -p tailstream-bench`.
//!
//! Numbers are reported, never asserted: the one test that runs `chaos` checks its verdict
//! (nothing lost, duplicated or reordered), not its timings.

pub mod chaos;
pub mod consume;
pub mod cpu;
pub mod e2e;
pub mod floor;
pub mod harness;
pub mod latency;
pub mod plot;
pub mod produce;
pub mod progress;
pub mod recovery;
