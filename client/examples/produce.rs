//! Produce records with the Rust client.
//!
//! ```sh
//! cargo run --release -p tailstream -- dev                       # in one terminal
//! cargo run -p tailstream-client --example produce -- 127.0.0.1:7400 example 1000
//! ```
//! Creates the stream if needed, sends N keyed records, waits for every ack and prints where
//! the last one landed.

use tailstream_client::{Client, ClientError, Status};

#[tokio::main]
async fn main() -> Result<(), ClientError> {
    let mut args = std::env::args().skip(1);
    let coordinator = args.next().unwrap_or_else(|| "127.0.0.1:7400".into());
    let stream = args.next().unwrap_or_else(|| "example".into());
    let count: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(1000);

    let client = Client::connect(&coordinator).await?;
    match client
        .create_stream(&stream, 4, client.stream_defaults())
        .await
    {
        Ok(_) => println!("created stream {stream}"),
        Err(error) if error.status() == Some(Status::StreamExists) => {}
        Err(error) => return Err(error),
    }

    let producer = client.producer(&stream).linger_ms(5).build().await?;
    let mut acks = Vec::new();
    for i in 0..count {
        let key = format!("user-{}", i % 10);
        let value = format!("event {i}");
        // `send` returns once the record is buffered; the future resolves when it is stored.
        acks.push(
            producer
                .send(Some(key.as_bytes()), value.as_bytes())
                .await?,
        );
    }
    let mut last = None;
    for ack in acks {
        last = Some(ack.await?);
    }
    println!("{count} records acknowledged; the last one: {last:?}");
    Ok(())
}
