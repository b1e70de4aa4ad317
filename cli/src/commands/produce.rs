//! `tailstream produce NAME`: one record per stdin line, then wait for every ack.

use clap::Args;
use std::collections::VecDeque;
use tailstream_client::AckFuture;
use tailstream_config::Config;
use tokio::io::{AsyncBufReadExt, BufReader};

#[derive(Args, Debug)]
pub struct ProduceArgs {
    name: String,
    /// Split each line at the first occurrence of this character into key and value.
    #[arg(long)]
    key_sep: Option<char>,
}

/// Unsettled acks kept before the oldest is awaited (bounds memory on endless input).
const PENDING_ACKS_MAX: usize = 1 << 20;

pub async fn run(config: Config, coordinator: &str, args: ProduceArgs) -> Result<(), String> {
    let producer = super::client(&config, coordinator)
        .producer(&args.name)
        .build()
        .await
        .map_err(|e| e.to_string())?;
    let mut lines = BufReader::with_capacity(1 << 16, tokio::io::stdin()).lines();
    let mut pending: VecDeque<AckFuture> = VecDeque::new();
    let (mut acked, mut failed) = (0u64, 0u64);
    let mut first_error = None;
    let mut settle = |result: Result<_, tailstream_client::ClientError>| match result {
        Ok(_) => acked += 1,
        Err(error) => {
            failed += 1;
            first_error.get_or_insert(error.to_string());
        }
    };
    let mut sep_buf = [0u8; 4];
    while let Some(line) = lines
        .next_line()
        .await
        .map_err(|e| format!("reading stdin: {e}"))?
    {
        let (key, value) = match args.key_sep {
            Some(sep) => match line.split_once(&*sep.encode_utf8(&mut sep_buf)) {
                Some((key, value)) => (Some(key.as_bytes()), value.as_bytes()),
                None => (None, line.as_bytes()),
            },
            None => (None, line.as_bytes()),
        };
        let ack = producer.send(key, value).await.map_err(|e| e.to_string())?;
        pending.push_back(ack);
        // Settle what is already done so memory stays proportional to what is in flight.
        while let Some(front) = pending.front() {
            match front.try_result() {
                Some(result) => {
                    settle(result);
                    pending.pop_front();
                }
                None if pending.len() > PENDING_ACKS_MAX => {
                    if let Some(front) = pending.pop_front() {
                        settle(front.await);
                    }
                }
                None => break,
            }
        }
    }
    producer.flush().await.map_err(|e| e.to_string())?;
    for ack in pending {
        settle(ack.await);
    }
    eprintln!("acked {acked} records");
    match first_error {
        None => Ok(()),
        Some(error) => Err(format!("{failed} records failed; first error: {error}")),
    }
}
