//! A live progress line on stderr for long benchmark runs, only when stderr is a terminal
//! (so logs and CI output stay clean).

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often the line is redrawn.
const REDRAW: Duration = Duration::from_secs(1);

/// Redraws "N records acked, R records/s" every second until dropped; does nothing when
/// stderr is not a terminal.
#[derive(Debug)]
pub struct ProgressLine {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ProgressLine {
    /// Watches `acked` (a running count of acknowledged records).
    pub fn start(what: &'static str, acked: Arc<AtomicU64>) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self { task: None };
        }
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let (mut last_count, mut last_at) = (0u64, started);
            loop {
                tokio::time::sleep(REDRAW).await;
                let (count, now) = (acked.load(Ordering::Relaxed), Instant::now());
                let rate = (count - last_count.min(count)) as f64
                    / now.duration_since(last_at).as_secs_f64().max(1e-9);
                eprint!(
                    "\r\x1b[2K{:>6.1} s  {count:>12} {what} acked  {rate:>12.0} /s",
                    now.duration_since(started).as_secs_f64()
                );
                let _ = std::io::stderr().flush();
                (last_count, last_at) = (count, now);
            }
        });
        Self { task: Some(task) }
    }
}

impl Drop for ProgressLine {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            // Clear the line so the report starts on a clean one.
            eprint!("\r\x1b[2K");
        }
    }
}
