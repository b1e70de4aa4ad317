//! Invariants where durability lives (recovery plans, metadata transitions): a broken one is a
//! bug. Debug builds stop on it; release builds count it
//! (`tailstream_coordinator_invariant_violations_total`), log it, and refuse the operation that
//! would have broken it, as `StorageError::invariant` does on brokers.

/// Records that invariant `what` is broken; returns the message to refuse with.
pub fn broken(what: &str) -> String {
    metrics::counter!(crate::metrics::INVARIANT_VIOLATIONS).increment(1);
    tracing::error!(invariant = what, "coordinator invariant broken");
    debug_assert!(false, "coordinator invariant broken: {what}");
    format!("invariant broken: {what}")
}
