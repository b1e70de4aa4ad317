//! tailstream-bench: measuring Tailstream.
//!
//! - [`produce`]: `tailstream bench produce`: starts (or joins) a cluster of real processes,
//!   produces N records from P producers, and reports records/s, MiB/s, record latency
//!   percentiles and broker CPU per GiB.
//! - [`cpu`]: CPU time of processes, read from `/proc`.
//! - `benches/micro.rs`: criterion micro-benchmarks of the hot functions (append, scan,
//!   batch validation), run with `cargo bench -p tailstream-bench`.
//!
//! Nothing here is part of the test suite: numbers are reported, never asserted.

pub mod cpu;
pub mod produce;
