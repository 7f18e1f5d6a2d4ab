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
mod page_cache;
mod version;

pub use cached_store::CachedStore;
pub use page_cache::{CacheMetrics, PageCache, PageCacheConfig};
pub use version::ObjectVersion;
