//! Sizes and counts as people write them, for every command's text output.

/// `1.5 GiB`, `320.0 KiB`, `17 B`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `1.2 M records`, `5.3 k records`, `17 records`.
pub fn human_count(count: u64) -> String {
    match count {
        0..1_000 => format!("{count} records"),
        1_000..1_000_000 => format!("{:.1} k records", count as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} M records", count as f64 / 1e6),
        _ => format!("{:.1} G records", count as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_counts_read_as_people_write_them() {
        assert_eq!(human_bytes(17), "17 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(8 << 20), "8.0 MiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
        assert_eq!(human_count(999), "999 records");
        assert_eq!(human_count(1_234), "1.2 k records");
        assert_eq!(human_count(2_500_000), "2.5 M records");
    }
}
