//! The cluster tests: real coordinator and broker processes on 127.0.0.1, one module per
//! concern. They share one test binary on purpose: each binary links the whole broker and the
//! harness, and a dozen of them cost CI minutes of compiling and linking for no extra coverage.
//! Tests still run two at a time (cargo's default on CI's 2 cores), as they did within each file.
//!
//! Two suites keep binaries of their own because they must not share the machine with other
//! tests: `saturation.rs` (it saturates every core on purpose) and `coordinator_failover.rs`
//! (three etcd members and three coordinators per test).

#![allow(clippy::unwrap_used)] // tests may unwrap freely (see clippy.toml)

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod console;
mod decompression_pacing;
mod end_to_end;
mod hostile;
mod kafka_admin;
mod kafka_auth;
mod kafka_clients;
mod kafka_delete_records;
mod kafka_delivery;
mod kafka_fetch_sessions;
mod kafka_flexible;
mod kafka_hostile;
mod kafka_leader_epochs;
mod kafka_quotas;
mod memory_after_flood;
mod native_auth;
mod operations;
mod producer_binding;
mod producer_identity;
mod recovery;
mod replication;
mod user_limits;
