//! Silt's cache tiers.
//!
//! Every read of object bytes the server makes (Parquet footers and column
//! chunks alike) goes through [`CachedStore`], an `ObjectStore` wrapper, so
//! there is exactly one place where bytes enter the server. Today it holds
//! pages of object bytes in memory ([`PageCache`]); the disk tier and the
//! decoded-batch tier plug in behind the same interface.
//!
//! Freshness: pages are keyed by the object's *version* (ETag, else size and
//! last-modified) as last seen by a LIST or HEAD, and misses are fetched with
//! `If-Match` on that ETag, so a query never mixes bytes of two versions and
//! never reads a version older than the one its listing validated.

mod cached_store;
pub mod disk;
mod freshness;
mod inflight;
mod page_cache;
pub mod policy;
mod tiers;
mod version;

pub use cached_store::{CachedStore, TableCounters};
pub use disk::{DiskConfig, DiskMetrics, DiskStats, DiskTier};
pub use freshness::Freshness;
pub use page_cache::{CacheMetrics, PageCache, PageCacheConfig, PageKey};
pub use tiers::{CacheTiers, PageTier, VersionRegistry};
pub use version::ObjectVersion;
