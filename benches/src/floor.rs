//! The kernel's floor for replication on this machine: the same bytes pushed over raw
//! loopback TCP from one process to R receivers, with plain blocking writes and reads of the
//! producer's batch size, and nothing else. What a broker spends per GiB above this is its
//! own work (framing, copying, waking tasks), the target of optimisation.
//!
//! It is measured in this process after the brokers' load has stopped, from this process's
//! own CPU time (so the sender and every receiver count, as the primary and every backup do).

use crate::cpu::{CpuTime, own_cpu_time};
use serde::Serialize;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

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

#[cfg(test)]
mod tests {
    #[test]
    fn every_receiver_gets_every_byte() {
        let floor = super::measure(3, 4096, 1 << 20).expect("loopback works");
        assert_eq!(floor.receivers, 3);
        assert_eq!(floor.bytes_per_receiver, 1 << 20);
        assert!(floor.cpu.total_s() >= 0.0);
    }
}
