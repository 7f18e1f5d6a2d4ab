//! What the machine a cache runs on has: its memory, for budgets that
//! default to a share of it (a client's compute-side cache; later the
//! server's tiers) instead of one fixed number whatever the machine.

/// The memory this process may use: the machine's `MemTotal`
/// (`/proc/meminfo`) or its cgroup's `memory.max` (cgroup v2), whichever is
/// smaller; `None` where neither is readable (not Linux).
pub fn memory_bytes() -> Option<u64> {
    let machine = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| meminfo_field(&s, "MemTotal:"));
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok()); // "max": no limit
    match (machine, cgroup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `field` (e.g. `MemTotal:`) of a `/proc/meminfo` text, in bytes.
fn meminfo_field(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

/// `1 / divisor` of [`memory_bytes`], at most `cap`; `fallback` where the
/// memory is unknown. The shape of every memory default: "a quarter of
/// the machine, at most 4 GiB".
pub fn share_of_memory(divisor: u64, cap: u64, fallback: u64) -> u64 {
    memory_bytes().map_or(fallback, |m| (m / divisor.max(1)).min(cap))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_meminfo_fields_in_bytes() {
        let text = "MemTotal:       24576000 kB\nMemFree:         1000 kB\n";
        assert_eq!(meminfo_field(text, "MemTotal:"), Some(24_576_000 * 1024));
        assert_eq!(meminfo_field(text, "MemFree:"), Some(1_024_000));
        assert_eq!(meminfo_field(text, "Cached:"), None);
    }

    #[test]
    fn a_share_is_capped_and_never_above_the_machine() {
        let cap = 4 << 30;
        let share = share_of_memory(4, cap, 123);
        assert!(share <= cap);
        match memory_bytes() {
            Some(m) => assert_eq!(share, (m / 4).min(cap)),
            None => assert_eq!(share, 123),
        }
    }
}
