//! CPU time consumed by processes, from `/proc/<pid>/stat` (Linux), split into user and
//! system (kernel) time: the kernel's share is what loopback copying costs.

use serde::Serialize;
use std::ops::{Add, Sub};

/// Clock ticks per second of `/proc` times. USER_HZ is 100 on every Linux architecture we
/// run on; reading it properly needs `sysconf`, which is not worth unsafe code here.
const TICKS_PER_SECOND: f64 = 100.0;

/// CPU seconds, user and system.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CpuTime {
    pub user_s: f64,
    pub system_s: f64,
}

impl CpuTime {
    pub fn total_s(self) -> f64 {
        self.user_s + self.system_s
    }

    /// Seconds per GiB of `bytes`, or `None` when no bytes were moved.
    pub fn per_gib(self, bytes: f64) -> Option<CpuTime> {
        let gib = bytes / f64::from(1u32 << 30);
        (gib > 0.0).then(|| CpuTime {
            user_s: self.user_s / gib,
            system_s: self.system_s / gib,
        })
    }

    /// This time divided over `n` processes (zero processes: zero).
    pub fn per_process(self, n: usize) -> CpuTime {
        if n == 0 {
            return CpuTime::default();
        }
        CpuTime {
            user_s: self.user_s / n as f64,
            system_s: self.system_s / n as f64,
        }
    }
}

impl Add for CpuTime {
    type Output = CpuTime;
    fn add(self, other: CpuTime) -> CpuTime {
        CpuTime {
            user_s: self.user_s + other.user_s,
            system_s: self.system_s + other.system_s,
        }
    }
}

impl Sub for CpuTime {
    type Output = CpuTime;
    fn sub(self, other: CpuTime) -> CpuTime {
        CpuTime {
            user_s: self.user_s - other.user_s,
            system_s: self.system_s - other.system_s,
        }
    }
}

/// User and system CPU time of `pid` so far, or `None` if unreadable.
pub fn cpu_time(pid: u32) -> Option<CpuTime> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// CPU time so far of the threads of `pid` named `name` (those alive now; unreadable ones
/// count as zero).
pub fn threads_cpu_time(pid: u32, name: &str) -> CpuTime {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return CpuTime::default();
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("stat")).ok())
        .filter(|stat| thread_name(stat) == Some(name))
        .filter_map(|stat| parse_stat(&stat))
        .fold(CpuTime::default(), Add::add)
}

/// The command name in a stat line (between the first '(' and the last ')').
fn thread_name(stat: &str) -> Option<&str> {
    stat.get(stat.find('(')? + 1..stat.rfind(')')?)
}

/// CPU time of this process so far (every thread), or zero if unreadable.
pub fn own_cpu_time() -> CpuTime {
    cpu_time(std::process::id()).unwrap_or_default()
}

fn parse_stat(stat: &str) -> Option<CpuTime> {
    // The command name (field 2) may contain spaces; fields after it are space-separated.
    let after_name = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some(CpuTime {
        user_s: utime / TICKS_PER_SECOND,
        system_s: stime / TICKS_PER_SECOND,
    })
}

/// User + system CPU seconds of `pid` so far, or `None` if unreadable.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    cpu_time(pid).map(CpuTime::total_s)
}

/// CPU time of all `pids` together (unreadable ones count as zero).
pub fn total_cpu_time(pids: &[u32]) -> CpuTime {
    pids.iter()
        .filter_map(|pid| cpu_time(*pid))
        .fold(CpuTime::default(), Add::add)
}

/// Total CPU seconds of all `pids` (unreadable ones count as zero).
pub fn total_cpu_seconds(pids: &[u32]) -> f64 {
    total_cpu_time(pids).total_s()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_used_some_cpu() {
        let pid = std::process::id();
        let mut spin = 0u64;
        for i in 0..20_000_000u64 {
            spin = spin.wrapping_add(i ^ (spin >> 3));
        }
        assert!(spin != 1);
        assert!(cpu_seconds(pid).is_some_and(|s| s >= 0.0));
    }

    #[test]
    fn stat_lines_with_spaces_in_the_name_parse() {
        let line = "42 (a (weird) name) S 1 2 3 4 5 6 7 8 9 10 250 75 0 0 20 0 1 0";
        let time = parse_stat(line).expect("parses");
        assert_eq!(time.user_s, 2.5);
        assert_eq!(time.system_s, 0.75);
        assert!(parse_stat("garbage").is_none());
        assert_eq!(thread_name(line), Some("a (weird) name"));
        assert!(parse_stat("1 (x)").is_none());
    }

    #[test]
    fn a_named_thread_of_this_process_is_found() {
        let (spun_tx, spun) = std::sync::mpsc::channel::<()>();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let spinner = std::thread::Builder::new()
            .name("cpu-test-spin".into())
            .spawn(move || {
                let started = std::time::Instant::now();
                let mut spin = 0u64;
                while started.elapsed() < std::time::Duration::from_millis(100) {
                    spin = std::hint::black_box(spin.wrapping_add(spin >> 3 ^ 7));
                }
                let _ = spun_tx.send(());
                let _ = released.recv();
                spin
            })
            .unwrap();
        spun.recv().unwrap();
        let pid = std::process::id();
        assert!(threads_cpu_time(pid, "cpu-test-spin").total_s() > 0.0);
        assert_eq!(threads_cpu_time(pid, "no-such-thread").total_s(), 0.0);
        release.send(()).unwrap();
        spinner.join().unwrap();
    }

    #[test]
    fn per_gib_needs_bytes() {
        let time = CpuTime {
            user_s: 1.0,
            system_s: 3.0,
        };
        assert!(time.per_gib(0.0).is_none());
        let per = time.per_gib(f64::from(1u32 << 31)).expect("some bytes");
        assert_eq!((per.user_s, per.system_s), (0.5, 1.5));
        assert_eq!(time.per_process(2).total_s(), 2.0);
    }
}
