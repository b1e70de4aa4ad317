//! Recovering a crashed broker's streamlets.
//!
//! - [`planner`]: pure: the backups' replica listings in, per streamlet a plan (every segment
//!   each log must have, which epoch and length, who holds it) or what is missing.
//! - [`orchestrator`]: the async shell: fence and list, plan, hand over under new epochs
//!   (saved first), order the rebuilds, wait out the crashed brokers' leases, serve again.

pub mod orchestrator;
pub mod planner;
#[cfg(test)]
mod planner_tests;
