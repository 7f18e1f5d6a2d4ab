//! Per-table read counters, for the hit ratio `silt stats` shows per table.

use std::sync::atomic::AtomicU64;

/// Reads of one table.
#[derive(Debug, Default)]
pub struct TableCounters {
    /// Pages found in the page buffer or on disk.
    pub hits: AtomicU64,
    /// Pages fetched from the object store (or from another query's fetch).
    pub misses: AtomicU64,
    /// Column batches found in the memory tier (counted by the scan).
    pub batch_hits: AtomicU64,
    /// Column batches decoded because the memory tier lacked them.
    pub batch_misses: AtomicU64,
}
