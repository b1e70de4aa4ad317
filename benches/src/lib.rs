//! tailstream-bench: measuring Tailstream.
//!
//! - [`produce`]: `tailstream bench produce`: starts (or joins) a cluster of real processes and
//!   drives P producers closed-loop (N records, saturated throughput) or open-loop (`--rate`,
//!   latency from each record's scheduled send); reports records/s, MiB/s, latency
//!   percentiles, CPU per GiB of each role (primary, backups, client; user and system) and,
//!   for R > 0, the kernel's floor for the same bytes. `--protocol kafka` drives the Kafka
//!   listener instead, with a lean Kafka producer per partition, reporting the same figures.
//! - [`kafka`]: `tailstream bench kafka`: the same closed-loop load through the native
//!   protocol and through the Kafka listener, side by side on one cluster, and their ratio.
//! - [`first_append`]: `tailstream bench first-append`: a fresh log's first acknowledged
//!   append beside the next one on the same log.
//! - [`e2e`]: `tailstream bench e2e`: produce-to-consume latency under an open-loop load.
//! - [`consume`]: `tailstream bench consume`: read throughput of a filled stream, C consumers.
//! - [`recovery`]: `tailstream bench recovery`: fills one streamlet, kills its owner, and
//!   reports detection, each recovery phase and kill-to-serving time.
//! - [`chaos`]: `tailstream bench chaos`: random crashes under a running load, and the
//!   exactly-once checker (`cli/tests/cluster/recovery.rs` runs five cycles of it in CI).
//! - [`plot`]: `tailstream bench plot`: bench JSON lines to SVG figures.
//! - [`floor`]: what the kernel alone costs: the same bytes over raw loopback TCP, and a round
//!   trip to an idle thread.
//! - [`harness`]: starting or joining a local cluster and watching it (owners, serving, admin
//!   pages).
//! - [`cpu`]: user and system CPU time of processes, read from `/proc`.
//! - [`latency`]: latency histograms, their summaries, and the send-time stamp records carry.
//! - [`progress`]: the live progress line of long runs (only on a terminal).
//! - `benches/micro.rs`: criterion micro-benchmarks of the hot functions (append, scan,
//!   batch validation); `benches/multilog.rs`: T threads appending to one streamlet of Q logs.
//!   Run with `cargo bench -p tailstream-bench`.
//!
//! Numbers are reported, never asserted: the one test that runs `chaos` checks its verdict
//! (nothing lost, duplicated or reordered), not its timings.

pub mod chaos;
pub mod consume;
pub mod cpu;
pub mod e2e;
pub mod failover;
pub mod first_append;
pub mod floor;
pub mod harness;
pub mod kafka;
pub mod latency;
pub mod plot;
pub mod produce;
pub mod progress;
pub mod recovery;
