//! Cost-aware weighted LFU: keep what is most expensive to get back, per byte.
//!
//! A miss in Silt is not priced by its bytes alone: every miss pays an
//! object-store round trip, then the transfer, then decoding. A 4 KiB
//! dictionary page and a 4 MiB column chunk each cost one request, so per byte
//! the small one is far dearer to lose. This policy ranks an entry by
//! `frequency x cost / size` (the refetch time its bytes save per byte held),
//! using the GreedyDual inflation value `L` of [`Lfu`] so that old counts age
//! out and no entry is starved: the priority is `L + frequency x cost / size`.
//!
//! The cost of an entry comes from a [`CostModel`]; the cache tier computes it
//! when the entry is admitted and passes it to
//! [`on_insert`](super::EvictionPolicy::on_insert).

use std::time::Duration;

use super::PolicyKind;
use super::lfu::{Lfu, Weighting};

/// Weight = estimated refetch cost, so the policy is `weighted-lfu`.
pub struct ByCost;

impl Weighting for ByCost {
    const KIND: PolicyKind = PolicyKind::WeightedLfu;

    /// The cost itself; NaN and negative costs (a broken estimate) count as
    /// free to refetch rather than poisoning the order.
    fn weight(cost: f64) -> f64 {
        if cost.is_nan() { 0.0 } else { cost.clamp(0.0, f64::MAX) }
    }
}

/// The cost-aware weighted LFU policy over keys `K`.
pub type WeightedLfu<K> = Lfu<K, ByCost>;

/// Estimated time to get an entry back after it is evicted:
/// `requests x request_latency + size / bandwidth + size x decode time`.
///
/// A model rather than measured per-entry timings, so that a cost is known at
/// admission (before the entry has ever been refetched) and is the same for
/// entries of the same size. The defaults are rough figures for an S3-class
/// store read over one connection and Parquet decoding on one core; a tier
/// should set them from what its store is measured to do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// Time to first byte of one ranged GET.
    pub request_latency: Duration,
    /// Transfer rate of one request, in bytes per second (0 is treated as 1).
    pub bandwidth_bytes_per_sec: u64,
    /// Time to decode one byte into the cached form, in nanoseconds
    /// (0 for a tier that keeps raw bytes).
    pub decode_ns_per_byte: f64,
}

impl Default for CostModel {
    /// 30 ms to first byte, 90 MB/s per request, 1 ns per byte to decode.
    fn default() -> Self {
        CostModel {
            request_latency: Duration::from_millis(30),
            bandwidth_bytes_per_sec: 90_000_000,
            decode_ns_per_byte: 1.0,
        }
    }
}

impl CostModel {
    /// Cost in nanoseconds of refetching `size` bytes with one request, the
    /// usual case for a cache entry (one page run, one column chunk).
    pub fn cost(&self, size: u64) -> f64 {
        self.cost_of(1, size)
    }

    /// Cost in nanoseconds of refetching `size` bytes with `requests` requests.
    pub fn cost_of(&self, requests: u32, size: u64) -> f64 {
        let bytes = size as f64;
        let latency = f64::from(requests) * self.request_latency.as_nanos() as f64;
        let transfer = bytes * 1e9 / self.bandwidth_bytes_per_sec.max(1) as f64;
        latency + transfer + bytes * self.decode_ns_per_byte
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::EvictionPolicy;

    #[test]
    fn cost_adds_latency_transfer_and_decode() {
        let model = CostModel {
            request_latency: Duration::from_millis(10),
            bandwidth_bytes_per_sec: 1_000_000,
            decode_ns_per_byte: 2.0,
        };
        // 10 ms + 1000 B at 1 MB/s (1 ms) + 2 us of decoding.
        assert_eq!(model.cost(1000), 10e6 + 1e6 + 2e3);
        assert_eq!(model.cost_of(3, 0), 30e6);
    }

    #[test]
    fn keeps_the_entry_more_expensive_per_byte() {
        let mut wlfu: WeightedLfu<u32> = WeightedLfu::new();
        // Same size, same reads: the cheaper one to refetch goes.
        wlfu.on_insert(1, 1000, 5e6);
        wlfu.on_insert(2, 1000, 1e6);
        assert_eq!(wlfu.pop_victim(), Some(2));

        // Under the cost model, a small entry costs a whole round trip for
        // few bytes, so it outranks a large one read as often.
        let model = CostModel::default();
        wlfu.on_insert(3, 64 << 20, model.cost(64 << 20));
        wlfu.on_insert(4, 4 << 10, model.cost(4 << 10));
        assert_eq!(wlfu.pop_victim(), Some(3));
        assert_eq!(wlfu.name(), "weighted-lfu");
    }

    #[test]
    fn frequency_still_counts() {
        let mut wlfu: WeightedLfu<u32> = WeightedLfu::new();
        wlfu.on_insert(1, 1000, 4e6);
        wlfu.on_insert(2, 1000, 1e6);
        for _ in 0..4 {
            wlfu.on_access(&2);
        }
        // 5 reads x 1 ms beat 1 read x 4 ms.
        assert_eq!(wlfu.pop_victim(), Some(1));
    }

    #[test]
    fn broken_costs_do_not_poison_the_order() {
        assert_eq!(ByCost::weight(f64::NAN), 0.0);
        assert_eq!(ByCost::weight(-1.0), 0.0);
        assert_eq!(ByCost::weight(f64::INFINITY), f64::MAX);
    }
}
