//! Silt's cache tiers.
//!
//! The words the tiers use for what they hold (object keys and versions,
//! chunk, batch and page keys, column forms, eviction policies) live in the
//! leaf crate `silt-core`, shared with the client's compute-side cache; they
//! are re-exported here.
//!
//! Every read of object bytes the server makes (Parquet footers and column
//! chunks alike) goes through [`CachedStore`], an `ObjectStore` wrapper, so
//! there is exactly one place where bytes enter the server. It keeps pages
//! of object bytes in a memory buffer ([`PageCache`]) and on disk
//! ([`DiskTier`]). Decoded column batches, the memory tier proper, are kept
//! in [`ColumnCache`], filled by the scan (`silt-scan`).
//!
//! Freshness: pages are keyed by the object's *version* (ETag, else size and
//! last-modified) as last seen by a LIST or HEAD, and misses are fetched with
//! `If-Match` on that ETag, so a query never mixes bytes of two versions and
//! never reads a version older than the one its listing validated.

mod cached_store;
mod change_notices;
mod column_cache;
pub mod column_uses;
mod counters;
mod decode_flights;
pub mod disk;
mod error;
mod first_touch;
mod freshness;
mod held;
mod inflight;
mod page_cache;
mod page_store;
mod probe;
mod scan_sets;
pub mod squeeze;
mod squeeze_ahead;
mod tiers;
pub mod transcoder;
mod validation_gate;
mod versions;

/// The eviction policies, from the vocabulary crate (`silt-core`).
pub use silt_core::policy;
/// The words for cached things, from the vocabulary crate (`silt-core`).
pub use silt_core::{
    BATCH_ROWS, BatchKey, CachedColumn, ChunkKey, MemoryForm, ObjectKey, ObjectVersion, PageKey, PinnedObject,
};

pub use cached_store::CachedStore;
pub use change_notices::ChangeNotices;
pub use column_cache::{ColumnCache, ColumnCacheBuilder, ColumnUsage, TranscodePolicy, TranscodePolicyFactory};
pub use counters::{ColumnCounts, TableCounters, hit_ratio};
pub use decode_flights::{DecodeClaim, DecodeFlights, DecodeGuard};
pub use disk::{DiskConfig, DiskMetrics, DiskStats, DiskTier};
pub use error::{CacheError, CacheResult};
pub use first_touch::FirstTouches;
pub use freshness::{DEFAULT_SWEEP, Freshness};
pub use held::{Held, HeldUnit};
pub use page_cache::{CacheMetrics, Page, PageCache, PageCacheConfig};
pub use page_store::{Admit, PageStore, PageStoreBuilder, PageTier, Source};
pub use scan_sets::{EntryState, PlanHorizon, ReservedChunk, ScanSet, ScanSets};
pub use squeeze::{SqueezeConfig, SqueezeStats, Squeezed};
pub use tiers::{CacheTiers, VersionedTier};
pub use validation_gate::ValidationGate;
pub use versions::VersionRegistry;
