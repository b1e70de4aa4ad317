//! A consumer group member: run it in several terminals and they share the stream.
//!
//! ```sh
//! cargo run -p tailstream-client --example group -- 127.0.0.1:7400 example billing
//! ```
//! Each member reads the logs the group assigns it, from the group's committed offsets; stop
//! one (Ctrl-C, or kill it) and the others take its logs over. Offsets are committed after the
//! records are handled (at least once): a member that dies re-delivers at most what it read
//! since its last commit.

use std::time::Duration;
use tailstream_client::{Client, ClientError};

#[tokio::main]
async fn main() -> Result<(), ClientError> {
    let mut args = std::env::args().skip(1);
    let coordinator = args.next().unwrap_or_else(|| "127.0.0.1:7400".into());
    let stream = args.next().unwrap_or_else(|| "example".into());
    let group = args.next().unwrap_or_else(|| "example-group".into());

    let client = Client::connect(&coordinator).await?;
    let mut member = client
        .consumer(&stream)
        .group(&group)
        .from_beginning()
        .build()
        .await?;
    let mut handled = 0u64;
    // Ends after ten idle seconds, so the example terminates on its own.
    let mut idle_polls = 0;
    while idle_polls < 10 {
        let records = member.poll(Duration::from_secs(1)).await?;
        idle_polls = if records.is_empty() {
            idle_polls + 1
        } else {
            0
        };
        handled += records.len() as u64;
        if !records.is_empty() {
            println!(
                "generation {:?}, partitions {:?}: {handled} records handled",
                member.group_generation(),
                member.assigned_partitions()
            );
        }
    }
    // Commits what was handled and leaves, so the others take over at once.
    member.close().await
}
