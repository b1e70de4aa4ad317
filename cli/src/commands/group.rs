//! `tailstream group list|describe`: consumer groups (Kafka's and native) and their lag.

use clap::Subcommand;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tailstream_client::PartitionLagInfo;
use tailstream_config::Config;

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// Every consumer group: members, generation, and its lag over all partitions it committed.
    List {
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// One group: its members and, per stream and partition, its committed offset, the log's
    /// committed end and the lag.
    Describe {
        name: String,
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(config: Config, coordinator: &str, command: GroupCommand) -> Result<(), String> {
    let client = super::client(&config, coordinator);
    let groups = client.consumer_groups().await.map_err(|e| e.to_string())?;
    match command {
        GroupCommand::List { json } => {
            // Groups with members, and groups that only have committed offsets left.
            let mut names: BTreeMap<&str, GroupRows> = BTreeMap::new();
            for group in &groups.groups {
                names.entry(&group.group).or_default().0 = Some((group.members, group.generation));
            }
            for row in &groups.lag {
                names.entry(&row.group).or_default().1.push(row);
            }
            if json {
                let list: Vec<Value> = names
                    .iter()
                    .map(|(name, (members, rows))| {
                        json!({
                            "group": name,
                            "members": members.map_or(0, |m| m.0),
                            "generation": members.map(|m| m.1),
                            "partitions": rows.len(),
                            "lag_records": total_lag(rows),
                        })
                    })
                    .collect();
                println!("{}", json!({ "groups": list }));
                return Ok(());
            }
            if names.is_empty() {
                println!("no consumer groups");
            }
            for (name, (members, rows)) in &names {
                let (count, generation) = members.unwrap_or((0, 0));
                println!(
                    "{name}: {count} members (generation {generation}), {} partitions committed, \
                     lag {}",
                    rows.len(),
                    total_lag(rows).map_or("unknown".into(), tailstream_cli::human::human_count),
                );
            }
        }
        GroupCommand::Describe { name, json } => {
            let rows: Vec<PartitionLagInfo> =
                groups.lag.into_iter().filter(|r| r.group == name).collect();
            let summary = groups.groups.iter().find(|g| g.group == name);
            if summary.is_none() && rows.is_empty() {
                return Err(format!("no consumer group named {name:?}"));
            }
            if json {
                let mut value = lag_json(&rows);
                value["group"] = json!(name);
                value["members"] = json!(summary.map_or(0, |g| g.members));
                value["generation"] = json!(summary.map(|g| g.generation));
                println!("{value}");
                return Ok(());
            }
            match summary {
                Some(g) => println!("{name}: {} members, generation {}", g.members, g.generation),
                None => println!("{name}: no members"),
            }
            print_lag(&rows);
        }
    }
    Ok(())
}

/// A group's (members, generation), if it has members, and its committed partitions.
type GroupRows<'a> = (Option<(u32, u32)>, Vec<&'a PartitionLagInfo>);

/// Total lag over `rows`, or `None` when some partition's end is not known yet.
fn total_lag(rows: &[&PartitionLagInfo]) -> Option<u64> {
    rows.iter()
        .try_fold(0u64, |sum, row| Some(sum.saturating_add(row.lag_records?)))
}

/// Per group, its lag on each partition (as text, under a stream or a group).
pub fn print_lag(rows: &[PartitionLagInfo]) {
    let mut by_group: BTreeMap<&str, Vec<&PartitionLagInfo>> = BTreeMap::new();
    for row in rows {
        by_group.entry(&row.group).or_default().push(row);
    }
    for (group, rows) in by_group {
        println!(
            "  consumer group {group} on {}: lag {}",
            rows.first().map_or("", |r| r.stream.as_str()),
            total_lag(&rows).map_or("unknown".into(), tailstream_cli::human::human_count)
        );
        for row in rows {
            println!(
                "    partition {} (streamlet {} log {}) committed {} end {} lag {}",
                row.partition,
                row.streamlet,
                row.log,
                row.committed_offset,
                row.end_offset.map_or("unknown".into(), |e| e.to_string()),
                row.lag_records.map_or("unknown".into(), |l| l.to_string()),
            );
        }
    }
}

/// `{"groups": [{"group", "lag_records", "partitions": [...]}]}`.
pub fn lag_json(rows: &[PartitionLagInfo]) -> Value {
    let mut by_group: BTreeMap<&str, Vec<&PartitionLagInfo>> = BTreeMap::new();
    for row in rows {
        by_group.entry(&row.group).or_default().push(row);
    }
    let groups: Vec<Value> = by_group
        .into_iter()
        .map(|(group, rows)| {
            json!({
                "group": group,
                "lag_records": total_lag(&rows),
                "partitions": rows.iter().map(|r| json!({
                    "stream": r.stream,
                    "partition": r.partition,
                    "streamlet": r.streamlet,
                    "log": r.log,
                    "committed_offset": r.committed_offset,
                    "end_offset": r.end_offset,
                    "lag_records": r.lag_records,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "groups": groups })
}
