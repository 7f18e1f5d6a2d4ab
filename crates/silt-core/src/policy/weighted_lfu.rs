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
//! The cost of an entry comes from a [`CostModel`](super::CostModel): the disk
//! tier prices each page as its share of the GET that fetched it, under the
//! latency and bandwidth it measured ([`MeasuredCost`](super::MeasuredCost)),
//! and passes it to [`on_insert`](super::EvictionPolicy::on_insert).

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{CostModel, EvictionPolicy};

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
    fn a_page_fetched_alone_outranks_one_of_a_long_run() {
        // Equal sizes: only the GET share tells them apart. LFU would keep the
        // page read twice; refetching it means 1/16 of a round trip, while
        // the lone page costs a whole one.
        let model = CostModel::default();
        let page = 1 << 20;
        let mut wlfu: WeightedLfu<u32> = WeightedLfu::new();
        wlfu.on_insert(1, page, model.share_of_request(16, page));
        wlfu.on_insert(2, page, model.share_of_request(1, page));
        wlfu.on_access(&1);
        assert_eq!(wlfu.pop_victim(), Some(1));

        let mut lfu: crate::policy::Lfu<u32> = crate::policy::Lfu::new();
        lfu.on_insert(1, page, model.share_of_request(16, page));
        lfu.on_insert(2, page, model.share_of_request(1, page));
        lfu.on_access(&1);
        assert_eq!(lfu.pop_victim(), Some(2));
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
