//! The kernel's floor for replication on this machine: the same bytes pushed over raw
//! loopback TCP from one process to R receivers, with plain blocking writes and reads of the
//! producer's batch size, and nothing else. What a broker spends per GiB above this is its
//! own work (framing, copying, waking tasks), the target of optimisation.
//!
//! It is measured in this process after the brokers' load has stopped, from this process's
//! own CPU time (so the sender and every receiver count, as the primary and every backup do).
//!
//! For latency the floor is a round trip: one small message over loopback TCP to a thread
//! that echoes it, with the receiver idle in between (as it is between a producer's requests
//! at moderate load). On a virtual machine most of it is waking an idle vCPU. An ack at R > 0
//! needs at least two such trips in sequence (client to primary, primary to its backups).

use crate::cpu::{CpuTime, own_cpu_time};
use crate::latency::{self, LatencySummary};
use serde::Serialize;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// What pushing `bytes_per_receiver` to each of `receivers` cost.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Floor {
    pub receivers: u32,
    pub bytes_per_receiver: u64,
    pub chunk_bytes: usize,
    pub elapsed_s: f64,
    pub cpu: CpuTime,
}

impl Floor {
    /// CPU seconds per GiB delivered to every receiver (the unit brokers are measured in:
    /// per GiB acknowledged, which R backups each hold).
    pub fn cpu_seconds_per_gib(&self) -> Option<CpuTime> {
        self.cpu.per_gib(self.bytes_per_receiver as f64)
    }
}

/// Pushes `bytes_per_receiver` bytes to each of `receivers` loopback sockets in
/// `chunk_bytes` writes (each chunk to every receiver in turn, as a primary replicates).
pub fn measure(
    receivers: u32,
    chunk_bytes: usize,
    bytes_per_receiver: u64,
) -> std::io::Result<Floor> {
    let chunk_bytes = chunk_bytes.max(1);
    let mut readers = Vec::new();
    let mut writers = Vec::new();
    for _ in 0..receivers {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        readers.push(std::thread::spawn(move || -> std::io::Result<u64> {
            let (mut stream, _) = listener.accept()?;
            let mut buffer = vec![0u8; chunk_bytes];
            let mut total = 0u64;
            loop {
                match stream.read(&mut buffer)? {
                    0 => return Ok(total),
                    n => total += n as u64,
                }
            }
        }));
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        writers.push(stream);
    }
    let chunk = vec![0x5au8; chunk_bytes];
    let cpu_before = own_cpu_time();
    let started = Instant::now();
    let mut sent = 0u64;
    while sent < bytes_per_receiver {
        let n = chunk_bytes.min((bytes_per_receiver - sent) as usize);
        for writer in &mut writers {
            writer.write_all(&chunk[..n])?;
        }
        sent += n as u64;
    }
    drop(writers);
    for reader in readers {
        let received = reader
            .join()
            .map_err(|_| std::io::Error::other("a floor receiver panicked"))??;
        if received != bytes_per_receiver {
            return Err(std::io::Error::other(format!(
                "a floor receiver got {received} of {bytes_per_receiver} bytes"
            )));
        }
    }
    Ok(Floor {
        receivers,
        bytes_per_receiver,
        chunk_bytes,
        elapsed_s: started.elapsed().as_secs_f64(),
        cpu: own_cpu_time() - cpu_before,
    })
}

/// Idle time between two round trips: long enough for the echoing thread to park.
const ROUND_TRIP_GAP: Duration = Duration::from_micros(200);

/// A 64-byte message, as small as a latency-bound produce request.
const MESSAGE_BYTES: usize = 64;

/// Round-trip latency of `samples` 64-byte messages over loopback TCP, each after an idle
/// gap. With `replicas` = 0 it is a plain ping-pong with an echoing thread. Otherwise the
/// message goes to a relay thread (the primary) that forwards it to `replicas` echoing
/// threads (the backups) one after the other, waits for every echo and only then answers:
/// the fewest kernel trips a replicated ack can take, with nothing else done on the way.
pub fn round_trip(replicas: u32, samples: u32) -> std::io::Result<LatencySummary> {
    let mut threads = Vec::new();
    let mut backups = Vec::new();
    for _ in 0..replicas {
        let (addr, thread) = spawn_echo(|stream, message| stream.write_all(message))?;
        threads.push(thread);
        backups.push(TcpStream::connect(addr)?);
    }
    let (addr, relay) = spawn_echo(move |client, message| {
        for backup in &mut backups {
            backup.set_nodelay(true)?;
            backup.write_all(message)?;
        }
        let mut echo = [0u8; MESSAGE_BYTES];
        for backup in &mut backups {
            backup.read_exact(&mut echo)?;
        }
        client.write_all(message)
    })?;
    threads.push(relay);
    let mut stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    let mut histogram = latency::histogram();
    let mut message = [0x5au8; MESSAGE_BYTES];
    for _ in 0..samples {
        std::thread::sleep(ROUND_TRIP_GAP);
        let started = Instant::now();
        stream.write_all(&message)?;
        stream.read_exact(&mut message)?;
        latency::record(&mut histogram, started.elapsed().as_micros() as u64);
    }
    // Closing the client ends the relay, whose backup connections close in turn.
    drop(stream);
    for thread in threads.into_iter().rev() {
        thread
            .join()
            .map_err(|_| std::io::Error::other("an echo thread panicked"))??;
    }
    LatencySummary::of(&histogram).ok_or_else(|| std::io::Error::other("no round trip measured"))
}

type EchoThread = std::thread::JoinHandle<std::io::Result<()>>;

/// A thread that accepts one connection and calls `answer` for every message read from it
/// until the peer closes.
fn spawn_echo(
    mut answer: impl FnMut(&mut TcpStream, &[u8]) -> std::io::Result<()> + Send + 'static,
) -> std::io::Result<(std::net::SocketAddr, EchoThread)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let thread = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut stream, _) = listener.accept()?;
        stream.set_nodelay(true)?;
        let mut message = [0u8; MESSAGE_BYTES];
        loop {
            match stream.read_exact(&mut message) {
                Ok(()) => answer(&mut stream, &message)?,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    });
    Ok((addr, thread))
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_receiver_gets_every_byte() {
        let floor = super::measure(3, 4096, 1 << 20).expect("loopback works");
        assert_eq!(floor.receivers, 3);
        assert_eq!(floor.bytes_per_receiver, 1 << 20);
        assert!(floor.cpu.total_s() >= 0.0);
    }

    #[test]
    fn round_trips_are_measured() {
        for replicas in [0, 3] {
            let summary = super::round_trip(replicas, 20).expect("loopback works");
            assert_eq!(summary.samples, 20);
            assert!(summary.p50_us >= 1);
        }
    }
}
