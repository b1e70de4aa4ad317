//! [`BootInstant`]: the boot-time clock (Linux `CLOCK_BOOTTIME`), which keeps counting while
//! the machine is suspended. Leases are judged on it (a broker's from the coordinator, the
//! coordinator's leadership on etcd): a process whose host slept through its lease does not
//! wake believing it still holds it, as it would on the monotonic clock, which stops.

use std::time::Duration;

/// A reading of the boot-time clock, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct BootInstant(u64);

impl BootInstant {
    pub fn now() -> BootInstant {
        BootInstant(boot_clock_nanos())
    }

    pub fn from_nanos(nanos: u64) -> BootInstant {
        BootInstant(nanos)
    }

    pub fn nanos(self) -> u64 {
        self.0
    }

    pub fn plus(self, duration: Duration) -> BootInstant {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        BootInstant(self.0.saturating_add(nanos))
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn boot_clock_nanos() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    match clock_gettime(ClockId::CLOCK_BOOTTIME) {
        Ok(now) => {
            let seconds = u64::try_from(now.tv_sec()).unwrap_or(0);
            let nanos = u64::try_from(now.tv_nsec()).unwrap_or(0);
            seconds.saturating_mul(1_000_000_000).saturating_add(nanos)
        }
        // CLOCK_BOOTTIME exists on every kernel since 2.6.39; were it refused, no lease
        // could be judged: read as the end of time, so every lease counts as run out.
        Err(_) => u64::MAX,
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn boot_clock_nanos() -> u64 {
    // Elsewhere, the monotonic clock (which may stop in a suspend).
    use std::sync::OnceLock;
    use std::time::Instant;
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_clock_moves_forward() {
        let before = BootInstant::now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(BootInstant::now() > before);
        assert!(before.plus(Duration::from_secs(1)) > before);
    }
}
