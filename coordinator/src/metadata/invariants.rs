//! What every metadata transition must keep true, checked on the result of each change before
//! it is saved (`Coordinator::change`): a change that would break one is refused as a bug
//! (`crate::invariant::broken`), never saved.
//!
//! - ownership epochs only grow, and a streamlet that changed owner has a newer epoch (one
//!   owner per epoch);
//! - a serving streamlet's owner is a current member (a crashed generation serves nothing);
//! - a log's kept segments only grow, and its oldest is never past its head;
//! - a log's start (records before it deleted) only moves forward;
//! - a stream never loses a streamlet (it only grows), and of its settings only retention
//!   changes;
//! - the metadata version never goes back.

use super::Metadata;
use std::sync::Arc;

/// Checks `next` (the result of one change) against `previous`.
pub fn check_transition(previous: &Metadata, next: &Metadata) -> Result<(), String> {
    if next.version < previous.version {
        return Err("the metadata version went back".into());
    }
    // A stream this change did not touch is still shared with the previous copy: it broke
    // nothing, unless the membership changed under it (a serving owner declared crashed).
    let members_unchanged = next.brokers == previous.brokers;
    for (name, stream) in &next.streams {
        let old_stream = previous.streams.get(name).filter(|s| s.id == stream.id);
        if members_unchanged && old_stream.is_some_and(|old| Arc::ptr_eq(old, stream)) {
            continue;
        }
        if let Some(old) = old_stream {
            if stream.placements.len() < old.placements.len() {
                return Err(format!(
                    "{name:?} went from {} streamlets to {}",
                    old.placements.len(),
                    stream.placements.len()
                ));
            }
            let retention_aside = |c: &tailstream_wire::messages::StreamConfig| {
                let mut c = c.clone();
                (c.retention_ms, c.retention_bytes) = (0, 0);
                c
            };
            if retention_aside(&stream.config) != retention_aside(&old.config) {
                return Err(format!("{name:?}'s settings changed beyond retention"));
            }
        }
        let before = old_stream
            .map(|s| s.placements.as_slice())
            .unwrap_or_default();
        for (index, placement) in stream.placements.iter().enumerate() {
            let streamlet = || format!("{name:?}/{index}");
            let old = before.get(index);
            let serving_elsewhere = |m: &Metadata, p: &super::Placement| {
                p.state == tailstream_wire::messages::PlacementState::Serving
                    && m.check_server(p.owner).is_err()
            };
            // Only what this change broke: a state saved by an older version is not held
            // against every later change.
            if serving_elsewhere(next, placement)
                && !old.is_some_and(|old| serving_elsewhere(previous, old))
            {
                return Err(format!(
                    "{} serves on {}, not a member",
                    streamlet(),
                    placement.owner
                ));
            }
            for (log, kept) in &placement.log_bounds {
                if kept.oldest > kept.head {
                    return Err(format!(
                        "{} log {log}: oldest kept past its head",
                        streamlet()
                    ));
                }
            }
            let Some(old) = old else {
                continue;
            };
            if placement.epoch < old.epoch {
                return Err(format!("{}: ownership epoch went back", streamlet()));
            }
            if placement.owner != old.owner && placement.epoch == old.epoch {
                return Err(format!("{}: two owners at {}", streamlet(), old.epoch));
            }
            for (log, old_kept) in &old.log_bounds {
                let shrunk = placement
                    .log_bounds
                    .get(log)
                    .is_none_or(|kept| kept.head < old_kept.head || kept.oldest < old_kept.oldest);
                if shrunk {
                    return Err(format!(
                        "{} log {log}: kept segments went back",
                        streamlet()
                    ));
                }
            }
            for (log, old_start) in &old.log_starts {
                if placement
                    .log_starts
                    .get(log)
                    .is_none_or(|start| start < old_start)
                {
                    return Err(format!("{} log {log}: its start went back", streamlet()));
                }
            }
        }
    }
    Ok(())
}
