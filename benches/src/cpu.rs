//! CPU seconds consumed by processes, from `/proc/<pid>/stat` (Linux).

/// Clock ticks per second of `/proc` times. USER_HZ is 100 on every Linux architecture we
/// run on; reading it properly needs `sysconf`, which is not worth unsafe code here.
const TICKS_PER_SECOND: f64 = 100.0;

/// User + system CPU seconds of `pid` so far, or `None` if unreadable.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after it are space-separated.
    let after_name = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_SECOND)
}

/// Total CPU seconds of all `pids` (unreadable ones count as zero).
pub fn total_cpu_seconds(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|pid| cpu_seconds(*pid)).sum()
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_used_some_cpu() {
        let pid = std::process::id();
        let mut spin = 0u64;
        for i in 0..20_000_000u64 {
            spin = spin.wrapping_add(i ^ (spin >> 3));
        }
        assert!(spin != 1);
        assert!(super::cpu_seconds(pid).is_some_and(|s| s >= 0.0));
    }
}
