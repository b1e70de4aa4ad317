//! Kafka's topic config changes as a stream's (pure): what IncrementalAlterConfigs and
//! AlterConfigs ask of a topic, as the retention change the coordinator makes, or a refusal
//! naming the setting.
//!
//! - Retention (`retention.ms`, `retention.bytes`) is the only thing that changes after
//!   creation. `retention.bytes` is per partition in Kafka, per streamlet here (Q times it),
//!   and Kafka's -1 ("unlimited") is the stream's 0, as at creation (`topic_configs`).
//! - The settings fixed at creation (`segment.bytes`, `min.insync.replicas`,
//!   `cleanup.policy`, `tailstream.logs.per.streamlet`, `tailstream.replicas`) may be set to
//!   the value they have, so a tool that writes a topic's whole config back succeeds; any
//!   other value is INVALID_CONFIG saying it is fixed.
//! - IncrementalAlterConfigs' DELETE puts a setting back to the broker's default; APPEND
//!   and SUBTRACT apply to list settings only, and the one list here, `cleanup.policy`,
//!   holds exactly `delete`.
//! - AlterConfigs replaces a topic's config: a retention limit it does not name goes back to
//!   the broker's default, as in Kafka.

use crate::topic_configs::{Refusal, described};
use kafka_protocol::ResponseError::{InvalidConfig, InvalidRequest};
use tailstream_wire::messages::StreamConfig;

/// IncrementalAlterConfigs' operations (Kafka's `AlterConfigOp.OpType`).
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

/// The retention a change asks for (`None`: as it is; 0: unlimited, per streamlet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RetentionChange {
    pub retention_ms: Option<u64>,
    pub retention_bytes: Option<u64>,
}

impl RetentionChange {
    pub fn is_empty(&self) -> bool {
        self.retention_ms.is_none() && self.retention_bytes.is_none()
    }
}

/// One change an IncrementalAlterConfigs asks of a topic: (name, operation, value).
pub(crate) type Incremental<'a> = (&'a str, i8, Option<&'a str>);

fn refused(code: kafka_protocol::ResponseError, message: String) -> Refusal {
    Refusal { code, message }
}

/// A Kafka "-1 is unlimited" value as a stream's "0 is unlimited" one.
fn unlimited_as_zero(name: &str, value: &str) -> Result<u64, Refusal> {
    let invalid = || {
        refused(
            InvalidConfig,
            format!("{name}={value:?} is not a valid value"),
        )
    };
    match value.trim().parse::<i64>().map_err(|_| invalid())? {
        -1 => Ok(0),
        v if v > 0 => Ok(v as u64),
        _ => Err(invalid()),
    }
}

/// Refuses a second change to the same setting in one resource (Kafka: INVALID_REQUEST).
fn no_duplicates<'a>(names: impl Iterator<Item = &'a str>) -> Result<(), Refusal> {
    let mut seen = std::collections::HashSet::new();
    for name in names {
        if !seen.insert(name) {
            return Err(refused(
                InvalidRequest,
                format!("{name} is changed twice in one request"),
            ));
        }
    }
    Ok(())
}

/// Sets `name` to `value` on `change`: a retention limit changes, a fixed setting must keep
/// the value it has.
fn set(
    change: &mut RetentionChange,
    current: &StreamConfig,
    name: &str,
    value: &str,
) -> Result<(), Refusal> {
    let q = u64::from(current.logs_per_streamlet.max(1));
    match name {
        "retention.ms" => change.retention_ms = Some(unlimited_as_zero(name, value)?),
        "retention.bytes" => {
            change.retention_bytes = Some(unlimited_as_zero(name, value)?.saturating_mul(q))
        }
        _ => keep_fixed(current, name, value)?,
    }
    Ok(())
}

/// A fixed setting "set" to `value`: accepted only when it is the value it has.
fn keep_fixed(current: &StreamConfig, name: &str, value: &str) -> Result<(), Refusal> {
    let Some((_, now, _)) = described(current).into_iter().find(|(n, ..)| *n == name) else {
        return Err(unknown(name));
    };
    if now == value.trim() {
        return Ok(());
    }
    Err(refused(
        InvalidConfig,
        format!(
            "{name} is fixed when a topic is created (it is {now}); only retention.ms and retention.bytes change"
        ),
    ))
}

fn unknown(name: &str) -> Refusal {
    refused(
        InvalidConfig,
        format!(
            "unknown or unsupported topic config {name:?} (changeable: retention.ms, retention.bytes)"
        ),
    )
}

/// What an IncrementalAlterConfigs asks of a topic whose stream has `current`, over the
/// broker's `defaults`.
pub(crate) fn incremental(
    current: &StreamConfig,
    defaults: &StreamConfig,
    changes: &[Incremental<'_>],
) -> Result<RetentionChange, Refusal> {
    no_duplicates(changes.iter().map(|(name, ..)| *name))?;
    let mut change = RetentionChange::default();
    for &(name, operation, value) in changes {
        match (operation, value) {
            (SET, Some(value)) => set(&mut change, current, name, value)?,
            (SET, None) => {
                return Err(refused(
                    InvalidRequest,
                    format!("{name}: SET needs a value (DELETE puts the default back)"),
                ));
            }
            (DELETE, _) => match name {
                "retention.ms" => change.retention_ms = Some(defaults.retention_ms),
                "retention.bytes" => change.retention_bytes = Some(defaults.retention_bytes),
                // Back to the default: fine where it already is the default.
                _ => keep_fixed(current, name, &default_of(defaults, name)?)?,
            },
            (APPEND, Some("delete")) if name == "cleanup.policy" => {}
            (APPEND | SUBTRACT, _) => {
                return Err(refused(
                    InvalidConfig,
                    match name {
                        "cleanup.policy" => {
                            "cleanup.policy is always [delete] (compaction is not supported)"
                                .to_owned()
                        }
                        _ => format!("{name} is not a list: APPEND and SUBTRACT apply to lists"),
                    },
                ));
            }
            (other, _) => {
                return Err(refused(
                    InvalidRequest,
                    format!("{name}: unknown config operation {other}"),
                ));
            }
        }
    }
    Ok(change)
}

/// What an AlterConfigs (the whole config, replaced) asks of a topic whose stream has
/// `current`: each named setting set, each retention limit not named back to `defaults`.
pub(crate) fn whole(
    current: &StreamConfig,
    defaults: &StreamConfig,
    configs: &[(&str, Option<&str>)],
) -> Result<RetentionChange, Refusal> {
    no_duplicates(configs.iter().map(|(name, _)| *name))?;
    let mut change = RetentionChange {
        retention_ms: Some(defaults.retention_ms),
        retention_bytes: Some(defaults.retention_bytes),
    };
    for &(name, value) in configs {
        // A null value leaves the setting at its default, as if not named.
        if let Some(value) = value {
            set(&mut change, current, name, value)?;
        } else if !matches!(name, "retention.ms" | "retention.bytes") {
            keep_fixed(current, name, &default_of(defaults, name)?)?;
        }
    }
    Ok(change)
}

fn default_of(defaults: &StreamConfig, name: &str) -> Result<String, Refusal> {
    described(defaults)
        .into_iter()
        .find(|(n, ..)| *n == name)
        .map(|(_, value, _)| value)
        .ok_or_else(|| unknown(name))
}

#[cfg(test)]
#[path = "topic_alter_tests.rs"]
mod tests;
