//! Memory pressure from the rest of the machine shrinks the memory tier
//! before the OS has to (by swapping, dropping its page cache, or killing
//! the server).
//!
//! Every second the monitor reads the memory available to the server: the
//! smaller of its cgroup's headroom (`memory.max - memory.current` plus the
//! reclaimable `inactive_file` of `memory.stat`, as kubelet counts it;
//! cgroup v2) and the machine's `MemAvailable` (`/proc/meminfo`). Below
//! `memory_pressure_floor` it lowers the memory tier's budget to what the
//! tier holds minus the shortfall (never under an eighth of the configured
//! budget), so the tier
//! evicts — plan-aware: what queued and running scans will read goes last;
//! with room again it gives the budget back a half of the headroom at a
//! time. Counted in `silt_memory_pressure_shrinks_total`; the budget in
//! force is `silt stats`' memory tier budget.

use std::sync::Weak;
use std::time::Duration;

use crate::engine::Engine;

/// How often the monitor looks.
const INTERVAL: Duration = Duration::from_secs(1);

/// Bytes available to this process: cgroup headroom and the machine's
/// `MemAvailable`, whichever is smaller; `None` when neither is readable.
pub fn available_bytes() -> Option<u64> {
    let machine = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
    });
    let read = |name: &str| std::fs::read_to_string(format!("/sys/fs/cgroup/{name}")).ok();
    let reclaimable = read("memory.stat")
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("inactive_file "))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    let cgroup = match (read("memory.max"), read("memory.current")) {
        (Some(max), Some(current)) => match (max.trim().parse::<u64>(), current.trim().parse::<u64>()) {
            (Ok(max), Ok(current)) => Some(max.saturating_sub(current.saturating_sub(reclaimable))),
            _ => None, // "max": no cgroup limit
        },
        _ => None,
    };
    match (machine, cgroup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The memory tier's next budget, given the bytes `available`, the `floor`
/// to keep free, the tier's `configured` budget, the one in force and the
/// bytes it `held` (a shrink frees bytes the tier holds, not headroom it has).
pub fn next_budget(available: u64, floor: u64, configured: u64, current: u64, held: u64) -> u64 {
    let lowest = configured / 8;
    if available < floor {
        current
            .min(held)
            .saturating_sub(floor - available)
            .max(lowest)
            .min(current)
    } else {
        current.saturating_add((available - floor) / 2).min(configured)
    }
}

/// Starts the monitor; it stops when the engine is dropped. A floor of 0
/// disables it.
pub fn spawn(engine: Weak<Engine>, floor: u64) {
    if floor == 0 {
        return;
    }
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(INTERVAL);
        loop {
            tick.tick().await;
            let Some(engine) = engine.upgrade() else {
                return;
            };
            let Some(available) = available_bytes() else {
                continue;
            };
            let batches = engine.tiers().batches();
            let (configured, current) = (batches.capacity(), batches.budget());
            let next = next_budget(available, floor, configured, current, batches.weighted_size());
            if next < current {
                engine.metrics().memory_pressure_shrinks.increment(1);
                tracing::warn!(
                    available,
                    floor,
                    from = current,
                    to = next,
                    "memory pressure: shrinking the memory tier"
                );
            }
            if next != current {
                batches.set_budget(next);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinks_by_the_shortfall_and_grows_back_by_half_the_headroom() {
        let gib = 1u64 << 30;
        // 200 MiB short of a 1 GiB floor: 200 MiB less.
        assert_eq!(
            next_budget(gib - (200 << 20), gib, 4 * gib, 4 * gib, 4 * gib),
            4 * gib - (200 << 20)
        );
        // A tier holding 1 GiB of its 4 frees from what it holds.
        assert_eq!(
            next_budget(gib - (200 << 20), gib, 4 * gib, 4 * gib, gib),
            gib - (200 << 20)
        );
        // Never under an eighth of the configured budget.
        assert_eq!(next_budget(0, gib, 4 * gib, gib, gib), gib / 2);
        // Room again: half the headroom back, up to the configured budget.
        assert_eq!(
            next_budget(gib + (400 << 20), gib, 4 * gib, 2 * gib, gib),
            2 * gib + (200 << 20)
        );
        assert_eq!(next_budget(64 * gib, gib, 4 * gib, 2 * gib, 0), 4 * gib);
        assert!(available_bytes().is_some_and(|b| b > 0));
    }
}
