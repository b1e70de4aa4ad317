//! Consume a stream with the Rust client, then resume from the saved positions.
//!
//! ```sh
//! cargo run -p tailstream-client --example consume -- 127.0.0.1:7400 example
//! ```
//! Reads everything from the beginning until the stream has been idle for a second, prints a
//! summary per log, and shows that a consumer resumed from those positions finds nothing new.
//! (To share a stream among processes and resume from committed offsets instead, name a
//! consumer group: `client.consumer(&stream).group("my-group")`; see the `group` example.)

use std::collections::BTreeMap;
use std::time::Duration;
use tailstream_client::{Client, ClientError};

#[tokio::main]
async fn main() -> Result<(), ClientError> {
    let mut args = std::env::args().skip(1);
    let coordinator = args.next().unwrap_or_else(|| "127.0.0.1:7400".into());
    let stream = args.next().unwrap_or_else(|| "example".into());

    let client = Client::connect(&coordinator).await?;
    let mut consumer = client.consumer(&stream).from_beginning().build().await?;

    let mut per_log: BTreeMap<(u32, u32), (u64, u64)> = BTreeMap::new();
    loop {
        let records = consumer.poll(Duration::from_secs(1)).await?;
        if records.is_empty() && consumer.unavailable().is_empty() {
            break;
        }
        for record in records {
            let entry = per_log
                .entry((record.streamlet.0, record.log.0))
                .or_default();
            entry.0 += 1;
            entry.1 = record.offset.0;
        }
    }
    for ((streamlet, log), (count, last)) in &per_log {
        println!("streamlet {streamlet} log {log}: {count} records, last offset {last}");
    }

    // Positions are plain data (serde): store them anywhere and resume later.
    let positions = consumer.positions();
    let mut resumed = client
        .consumer(&stream)
        .resume_from(&positions)
        .build()
        .await?;
    let again = resumed.poll(Duration::from_millis(500)).await?;
    println!(
        "after resuming from {} saved positions: {} new records",
        positions.len(),
        again.len()
    );
    Ok(())
}
