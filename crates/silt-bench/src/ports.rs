//! Loopback addresses for tests that must know a server's address before it
//! starts (a fleet whose members list each other).
//!
//! Binding `127.0.0.1:0`, reading the port and closing the listener races
//! with every other socket in the machine: the kernel hands the freed port to
//! the next `bind(0)` (another test's server, a client's outgoing connection),
//! and the server started later finds it taken. So the ports come from below
//! the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`,
//! 32768.. by default), which `bind(0)` and outgoing connections never use,
//! each one handed out once per process from a start that differs between
//! processes, and checked free when handed out.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};

/// The stretch of ports handed out: below the kernel's ephemeral range
/// where there is room (20000..32768 by default), else above it, else (a
/// range that spans everything) 20000..32000 and the check at hand-out.
fn window() -> (u32, u32) {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok();
    let (lo, hi) = range
        .and_then(|r| {
            let mut it = r.split_whitespace().map(|p| p.parse::<u32>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32_768, 60_999));
    if lo >= 12_000 {
        (lo.saturating_sub(12_000).max(10_000), lo)
    } else if hi <= 60_000 {
        (hi + 1, 65_535)
    } else {
        (20_000, 32_000)
    }
}

/// `n` loopback addresses, free when returned, that no `bind(0)` in this
/// machine will take before the caller binds them.
pub fn free_addrs(n: usize) -> Vec<SocketAddr> {
    (0..n).map(|_| free_addr()).collect()
}

/// One loopback address as [`free_addrs`] hands them out.
pub fn free_addr() -> SocketAddr {
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let (low, high) = window();
    let span = high - low;
    // Start where this process's id points, so concurrent test processes
    // walk different stretches.
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7919) % span,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..span {
        let port = low + NEXT.fetch_add(1, Ordering::SeqCst) % span;
        let addr = SocketAddr::from(([127, 0, 0, 1], port as u16));
        if TcpListener::bind(addr).is_ok() {
            return addr;
        }
    }
    panic!("no free loopback port in {low}..{high}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_distinct_bindable_and_below_the_ephemeral_range() {
        let addrs = free_addrs(50);
        let mut ports: Vec<u16> = addrs.iter().map(|a| a.port()).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 50, "each address handed out once");
        let (low, high) = window();
        assert!(ports.iter().all(|&p| (low..high).contains(&u32::from(p))));
        let held: Vec<TcpListener> = addrs.iter().map(|a| TcpListener::bind(a).unwrap()).collect();
        // A port held by someone is skipped.
        let next = free_addr();
        assert!(!addrs.contains(&next));
        drop(held);
    }
}
