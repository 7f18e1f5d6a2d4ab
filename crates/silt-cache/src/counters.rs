//! Per-table read counters, for the hit ratios `silt stats`, `/stats` and
//! `/metrics` show per table and per column.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

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
    /// Compressed bytes of the column chunks the scans read, from whichever
    /// tier: what a client reading the Parquet itself would have fetched.
    pub chunk_bytes: AtomicU64,
    /// Column chunks decoded from Parquet (whole, or the rows a filter
    /// kept), counted once per chunk read: what a warm or restored cache
    /// saves. 0 across a run means no Parquet page was decoded.
    pub parquet_decodes: AtomicU64,
    /// Memory-tier batch hits and misses per column name.
    columns: Mutex<HashMap<Arc<str>, ColumnCounts>>,
}

/// Memory-tier lookups of one column's batches.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ColumnCounts {
    pub hits: u64,
    pub misses: u64,
}

impl TableCounters {
    /// Counts `hits` and `misses` of `column`'s batches (the table-wide
    /// `batch_hits`/`batch_misses` too).
    pub fn record_column(&self, column: &str, hits: u64, misses: u64) {
        self.batch_hits.fetch_add(hits, Ordering::Relaxed);
        self.batch_misses.fetch_add(misses, Ordering::Relaxed);
        let mut columns = self.columns.lock();
        let counts = match columns.get_mut(column) {
            Some(c) => c,
            None => columns.entry(Arc::from(column)).or_default(),
        };
        counts.hits += hits;
        counts.misses += misses;
    }

    /// The table's hit ratio's two sides: lookups a tier answered (memory
    /// batches + pages from the page buffer or disk) and pages fetched from
    /// the object store (a memory miss is followed by page lookups, so it is
    /// not counted twice).
    pub fn lookups(&self) -> (u64, u64) {
        (
            self.batch_hits.load(Ordering::Relaxed) + self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// Per column name: its memory-tier lookups so far.
    pub fn columns(&self) -> Vec<(Arc<str>, ColumnCounts)> {
        self.columns.lock().iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}

/// `hits / (hits + misses)`, or `None` before any lookup.
pub fn hit_ratio(hits: u64, misses: u64) -> Option<f64> {
    match hits + misses {
        0 => None,
        n => Some(hits as f64 / n as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_counts_add_up_to_the_table_counts() {
        let c = TableCounters::default();
        c.record_column("a", 3, 1);
        c.record_column("b", 0, 2);
        c.record_column("a", 1, 0);
        let mut cols = c.columns();
        cols.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(cols[0], (Arc::from("a"), ColumnCounts { hits: 4, misses: 1 }));
        assert_eq!(cols[1], (Arc::from("b"), ColumnCounts { hits: 0, misses: 2 }));
        assert_eq!(c.batch_hits.load(Ordering::Relaxed), 4);
        assert_eq!(c.batch_misses.load(Ordering::Relaxed), 3);
    }
}
