//! Recovering a crashed broker's streamlets.
//!
//! - [`planner`]: pure: the backups' replica listings in, per streamlet a plan (every segment
//!   each log must have, which epoch and length, who holds it) or what is missing.
//! - [`placement`]: pure: which live member a rebuild goes to (room in its segment memory,
//!   load, copies it already holds).
//! - [`orchestrator`]: the async shell: fence and list, plan, hand over under new epochs
//!   (saved first), order the rebuilds, wait out the crashed brokers' leases, serve again.
//! - [`serve_again`]: the end of each rebuild, saved in batches (one metadata change and one
//!   assignment push per new owner for every rebuild that ended meanwhile).
//! - [`lease_wait`]: how long a hand-over waits for a crashed broker's lease, and the probes
//!   that prove a crashed broker's process gone (no wait at all).

mod lease_wait;
pub mod orchestrator;
#[cfg(test)]
mod orchestrator_tests;
pub mod placement;
pub mod planner;
#[cfg(test)]
mod planner_tests;
mod serve_again;
