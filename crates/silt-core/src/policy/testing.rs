//! Helpers shared by the policies' tests: driving a policy, and synthetic
//! traces from a small deterministic generator (no `rand` dependency).

use std::collections::HashSet;

use super::EvictionPolicy;

/// Inserts `keys` in order, each one byte with no cost.
pub(crate) fn insert_all<P: EvictionPolicy<u32>>(policy: &mut P, keys: &[u32]) {
    for &k in keys {
        policy.on_insert(k, 1, 0.0);
    }
}

/// Pops victims until the policy is empty, in eviction order.
pub(crate) fn drain<K>(policy: &mut dyn EvictionPolicy<K>) -> Vec<K> {
    std::iter::from_fn(|| policy.pop_victim()).collect()
}

/// Drives `policy` through `steps` random inserts (random sizes and costs),
/// hits, removals and evictions over a few hundred keys, checking against a
/// plain set that it tracks exactly the keys it was given and not evicted:
/// victims were tracked, `remove` answers truthfully, `len` agrees, and
/// draining at the end yields every remaining key once. Empties the policy.
pub(crate) fn check_invariants(policy: &mut dyn EvictionPolicy<u32>, steps: usize) {
    let mut rng = XorShift::new(11);
    let mut tracked = HashSet::new();
    for step in 0..steps {
        let key = rng.below(300) as u32;
        match rng.below(8) {
            0 => assert_eq!(policy.remove(&key), tracked.remove(&key), "step {step}: remove {key}"),
            1..=3 => {
                policy.on_insert(key, 1 + rng.below(5_000), rng.below(1_000) as f64);
                tracked.insert(key);
            }
            4 | 5 => policy.on_access(&key),
            _ => match policy.pop_victim() {
                Some(victim) => assert!(tracked.remove(&victim), "step {step}: victim {victim} not tracked"),
                None => assert!(tracked.is_empty(), "step {step}: no victim among {}", tracked.len()),
            },
        }
        assert_eq!(policy.len(), tracked.len(), "step {step}: {} lost count", policy.name());
    }
    let mut rest = drain(policy);
    rest.sort_unstable();
    let mut expected: Vec<u32> = tracked.into_iter().collect();
    expected.sort_unstable();
    assert_eq!(rest, expected, "{} drained other keys than it held", policy.name());
}

/// xorshift64*: enough randomness for tests, reproducible from its seed.
pub(crate) struct XorShift(u64);

impl XorShift {
    pub(crate) fn new(seed: u64) -> Self {
        XorShift(seed.max(1))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0), close enough for tests.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Synthetic `(id, size)` traces with different reuse patterns; every entry
/// is `size(id)` bytes.
pub(crate) fn synthetic_traces(size: impl Fn(u64) -> u64) -> Vec<(&'static str, Vec<(u64, u64)>)> {
    let mut rng = XorShift::new(42);
    // Skewed: the square of a uniform draw favours small ids.
    let skewed: Vec<u64> = (0..5_000)
        .map(|_| {
            let u = rng.below(1_000);
            u * u / 1_000
        })
        .collect();
    // A loop over more entries than fit, which defeats LRU.
    let looping: Vec<u64> = (0..5_000).map(|i| i % 120).collect();
    // A hot set interleaved with a one-pass scan.
    let scan: Vec<u64> = (0..5_000)
        .map(|i| if i % 3 == 0 { rng.below(20) } else { 1_000 + i })
        .collect();
    [("skewed", skewed), ("loop", looping), ("hot+scan", scan)]
        .into_iter()
        .map(|(name, ids)| (name, ids.into_iter().map(|id| (id, size(id))).collect()))
        .collect()
}
