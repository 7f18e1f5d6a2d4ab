//! Eviction policies for the byte-budgeted cache tiers, behind one trait.
//!
//! Each tier (memory, disk) picks its policy by name in its configuration, so
//! the policies share one small interface, [`EvictionPolicy`]: the tier tells
//! the policy what it admitted, what was read and what it dropped, and asks it
//! for a victim when bytes are needed. The policy only orders keys; the bytes
//! themselves and the budget live in [`BudgetedCache`], so every policy is
//! held to the same budget rule and tested against it once.
//!
//! One policy per file:
//! - [`Lru`] (`lru`): least recently used, the baseline everything is compared with.
//! - [`Lfu`] (`lfu`): frequency per byte with dynamic aging (GDSF with unit cost),
//!   so small, often-read entries stay and once-hot entries still age out.
//! - [`Sieve`] (`sieve`): SIEVE (NSDI '24), a FIFO with a visited bit and a moving
//!   hand; scan-resistant and cheaper on hits than LRU (a hit sets a bit, no
//!   list surgery).
//! - [`WeightedLfu`] (`weighted-lfu`): frequency x estimated refetch cost per
//!   byte with the same aging, where the cost comes from a [`CostModel`]
//!   (request latency, transfer, decode) fed with measured latency and
//!   bandwidth ([`MeasuredCost`]). This is the policy Silt is
//!   built around: a page fetched alone (a small column chunk) costs a whole
//!   object-store round trip, one of a long run a sliver of one, so bytes
//!   are not all worth the same.
//! - [`S3Fifo`] (`s3-fifo`): S3-FIFO (SOSP '23), a small probationary FIFO,
//!   a main FIFO with reinsertion and a ghost queue; one-hit wonders never
//!   reach main, so scans do not flush what is read again.
//!
//! - [`Ranked`]: keys by a score their owner computes (not configurable by
//!   name): the client's compute-side cache, which scores column chunks by
//!   uses times benefit per byte, evicts through it.
//!
//! [`replay`] runs any of them (and Belady's offline optimum) over an access
//! trace, which is how they are compared.
//!
//! Every operation is O(1) or O(log n) in the number of tracked entries:
//! recency lists are intrusive lists in a slab ([`list`]), priorities live in
//! ordered maps; no policy scans its entries to find a victim.

use std::fmt;
use std::hash::Hash;
use std::str::FromStr;

mod budget;
mod cost;
mod lfu;
mod list;
mod lru;
mod ranked;
pub mod replay;
mod s3_fifo;
mod sieve;
#[cfg(test)]
mod testing;
mod weighted_lfu;

pub use budget::{BudgetedCache, Insertion, Reservations};
pub use cost::{CostModel, MeasuredCost, Pushdown};
pub use lfu::{Lfu, Uniform, Weighting};
pub use lru::Lru;
pub use ranked::Ranked;
pub use s3_fifo::S3Fifo;
pub use sieve::Sieve;
pub use weighted_lfu::{ByCost, WeightedLfu};

/// What a cache key must support to be tracked by a policy: policies keep keys
/// in hash maps and hand clones back as victims, and tiers share their policy
/// across threads behind a lock.
pub trait CacheKey: Hash + Eq + Clone + Send + 'static {}

impl<K: Hash + Eq + Clone + Send + 'static> CacheKey for K {}

/// Decides which entry of a byte-budgeted cache to drop next.
///
/// The policy sees only keys, sizes and costs; the cache that owns the values
/// and the byte budget (see [`BudgetedCache`]) calls it:
/// - [`on_insert`](Self::on_insert) when an entry is admitted,
/// - [`on_access`](Self::on_access) on every hit,
/// - [`remove`](Self::remove) when an entry leaves for another reason
///   (invalidated by a new object version, or replaced),
/// - [`pop_victim`](Self::pop_victim) when bytes are needed.
///
/// Keeping the budget out of the policy means a policy never has to agree with
/// the cache about how many bytes are used, and the same policy can order a
/// memory tier and a disk tier.
pub trait EvictionPolicy<K>: Send {
    /// Starts tracking `key`, just admitted, of `size` bytes. `cost` is the
    /// estimated time in nanoseconds to get the entry back after a miss (see
    /// [`CostModel::share_of_request`]); policies that do not weigh cost ignore it. A key
    /// that is already tracked starts over, as if it had been removed first.
    fn on_insert(&mut self, key: K, size: u64, cost: f64);

    /// Records a hit on `key`. Unknown keys are ignored, so a racing removal
    /// cannot corrupt the policy.
    fn on_access(&mut self, key: &K);

    /// Stops tracking `key` without evicting it; returns whether it was tracked.
    fn remove(&mut self, key: &K) -> bool;

    /// Chooses the next entry to evict and stops tracking it; `None` when
    /// nothing is tracked.
    fn pop_victim(&mut self) -> Option<K>;

    /// `key`, just returned by [`pop_victim`](Self::pop_victim), was not
    /// evicted after all (plan-aware eviction set it aside because scans will
    /// read it): forget whatever evicting it recorded that would change how it
    /// is treated when it is inserted again (S3-FIFO's ghost, which would send
    /// it straight to main). Aging (LFU's `L`) is left as it moved: the
    /// entry's priority was the lowest, as if it had gone.
    fn kept(&mut self, _key: &K) {}

    /// How many keys are tracked.
    fn len(&self) -> usize;

    /// Whether no key is tracked.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The policy's name as configured (`lru`, `lfu`, ...), for reports.
    fn name(&self) -> &'static str;
}

/// The policies a tier can be configured with, by name.
///
/// An enum rather than free-form strings so that configuration errors are
/// caught when the configuration is parsed, with the list of valid names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    /// [`Lru`]
    Lru,
    /// [`Lfu`]
    Lfu,
    /// [`Sieve`]
    Sieve,
    /// [`WeightedLfu`]
    WeightedLfu,
    /// [`S3Fifo`]
    S3Fifo,
}

impl PolicyKind {
    /// Every policy, in the order reports list them.
    pub const ALL: [PolicyKind; 5] = [
        PolicyKind::Lru,
        PolicyKind::Lfu,
        PolicyKind::Sieve,
        PolicyKind::WeightedLfu,
        PolicyKind::S3Fifo,
    ];

    /// The configuration name; also what [`EvictionPolicy::name`] returns.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Lru => "lru",
            PolicyKind::Lfu => "lfu",
            PolicyKind::Sieve => "sieve",
            PolicyKind::WeightedLfu => "weighted-lfu",
            PolicyKind::S3Fifo => "s3-fifo",
        }
    }

    /// A new, empty policy of this kind. Boxed so that a tier can hold
    /// whichever policy its configuration names.
    pub fn build<K: CacheKey>(self) -> Box<dyn EvictionPolicy<K>> {
        match self {
            PolicyKind::Lru => Box::new(Lru::new()),
            PolicyKind::Lfu => Box::new(Lfu::<K, Uniform>::new()),
            PolicyKind::Sieve => Box::new(Sieve::new()),
            PolicyKind::WeightedLfu => Box::new(WeightedLfu::new()),
            PolicyKind::S3Fifo => Box::new(S3Fifo::new()),
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy name that is not one of [`PolicyKind::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPolicy(pub String);

impl fmt::Display for UnknownPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = PolicyKind::ALL.iter().map(|k| k.as_str()).collect();
        write!(
            f,
            "unknown eviction policy '{}' (expected one of: {})",
            self.0,
            names.join(", ")
        )
    }
}

impl std::error::Error for UnknownPolicy {}

impl FromStr for PolicyKind {
    type Err = UnknownPolicy;

    /// Parses a configuration name, case-insensitively; `_` is accepted for `-`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase().replace('_', "-");
        PolicyKind::ALL
            .into_iter()
            .find(|k| k.as_str() == wanted)
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in PolicyKind::ALL {
            assert_eq!(kind.to_string().parse::<PolicyKind>(), Ok(kind));
            assert_eq!(kind.build::<u64>().name(), kind.as_str());
        }
        assert_eq!("Weighted_LFU".parse::<PolicyKind>(), Ok(PolicyKind::WeightedLfu));
        assert_eq!("S3_FIFO".parse::<PolicyKind>(), Ok(PolicyKind::S3Fifo));
    }

    #[test]
    fn every_policy_tracks_exactly_what_it_was_given() {
        for kind in PolicyKind::ALL {
            crate::policy::testing::check_invariants(&mut *kind.build::<u32>(), 20_000);
        }
    }

    #[test]
    fn unknown_name_lists_the_valid_ones() {
        let err = "arc".parse::<PolicyKind>().unwrap_err().to_string();
        assert!(
            err.contains("'arc'") && err.contains("lru, lfu, sieve, weighted-lfu, s3-fifo"),
            "{err}"
        );
    }
}
