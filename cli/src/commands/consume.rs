//! `tailstream consume NAME`: one record value per line on stdout.

use clap::Args;
use std::io::Write;
use std::time::{Duration, Instant};
use tailstream_config::Config;

#[derive(Args, Debug)]
pub struct ConsumeArgs {
    name: String,
    /// Start at the oldest record of every log (default: only records produced from now on).
    #[arg(long)]
    from_beginning: bool,
    /// Exit after this many records.
    #[arg(long)]
    max_records: Option<u64>,
    /// Exit when no record arrived for this long while every streamlet was reachable (time a
    /// streamlet spends recovering after a crash does not count).
    #[arg(long)]
    idle_timeout_ms: Option<u64>,
    /// Print `key<TAB>value` instead of the value alone.
    #[arg(long)]
    print_keys: bool,
    /// Share the stream with the other consumers of this group: the coordinator hands each
    /// member some of the logs, rebalances when members come and go, and a member resumes
    /// from the group's committed offsets (committed after the records are printed).
    #[arg(long, conflicts_with_all = ["member", "members"])]
    group: Option<String>,
    /// This consumer's share of the stream's logs: member `member` of `members`.
    #[arg(long, default_value_t = 0)]
    member: u32,
    #[arg(long, default_value_t = 1)]
    members: u32,
}

pub async fn run(config: Config, coordinator: &str, args: ConsumeArgs) -> Result<(), String> {
    let consumer = super::client(&config, coordinator).consumer(&args.name);
    let consumer = if args.from_beginning {
        consumer.from_beginning()
    } else {
        consumer.from_end()
    };
    let mut reader = match &args.group {
        Some(group) => consumer.group(group),
        None => consumer.member(args.member, args.members),
    }
    .build()
    .await
    .map_err(|e| e.to_string())?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let max = args.max_records.unwrap_or(u64::MAX);
    let idle = args.idle_timeout_ms.map(Duration::from_millis);
    let poll = idle.map_or(Duration::from_millis(500), |idle| {
        idle.min(Duration::from_millis(500))
    });
    let mut count = 0u64;
    // Idle time counts only while every streamlet is reachable: waiting for a recovering (or
    // lost) streamlet is never the end of the stream.
    let mut idle_since = Instant::now();
    let mut waiting_for = Vec::new();
    // A reader that went away (`| head`) ends the command quietly.
    let write_error = |e: std::io::Error| -> String { crate::output::exit_on(&e) };
    while count < max {
        let mut records = reader.poll(poll).await.map_err(|e| e.to_string())?;
        let unavailable = reader.unavailable();
        if unavailable != waiting_for {
            for (streamlet, why) in &unavailable {
                if !waiting_for.iter().any(|(s, _)| s == streamlet) {
                    eprintln!("tailstream consume: waiting for {streamlet}: {why}");
                }
            }
            for (streamlet, _) in &waiting_for {
                if !unavailable.iter().any(|(s, _)| s == streamlet) {
                    eprintln!("tailstream consume: {streamlet} is reachable again");
                }
            }
            waiting_for = unavailable;
        }
        if !waiting_for.is_empty() {
            idle_since = Instant::now();
        }
        if records.is_empty() {
            out.flush().map_err(write_error)?;
            if idle.is_some_and(|idle| idle_since.elapsed() >= idle) {
                break;
            }
            continue;
        }
        idle_since = Instant::now();
        let unhandled = records.split_off(records.len().min((max - count) as usize));
        reader.release(&unhandled);
        for record in records {
            if args.print_keys {
                if let Some(key) = &record.key {
                    out.write_all(key).map_err(write_error)?;
                }
                out.write_all(b"\t").map_err(write_error)?;
            }
            if let Some(value) = &record.value {
                out.write_all(value).map_err(write_error)?;
            }
            out.write_all(b"\n").map_err(write_error)?;
            count += 1;
        }
        if args.group.is_some() {
            // The next poll commits these records: they must be out of this process first.
            out.flush().map_err(write_error)?;
        }
    }
    out.flush().map_err(write_error)?;
    let lost = reader.records_lost_to_retention();
    if lost > 0 {
        eprintln!("warning: {lost} records were freed by retention before they were read");
    }
    // Printed and flushed: now a group member may commit them.
    reader.close().await.map_err(|e| e.to_string())
}
