//! The key column of a row group, decoded once per object version and kept
//! (within a byte budget), so a lookup that misses the memory tier finds
//! its rows by comparing keys in memory and then reads only those rows of
//! the other columns: the key's pages (and its dictionary page, often the
//! largest page of a unique key column) are read and decoded once, not on
//! every lookup.
//!
//! Entries are keyed by the pinned object version, so a replaced file's
//! keys are never used for its new version; they age out, least recently
//! used first. They are held apart from the memory tier (they are what
//! makes a lookup on the disk tier cheap, not a cached scan column) and
//! bounded by their own budget.

use std::ops::Range;

use datafusion::arrow::array::{Array, ArrayRef, UInt32Array};
use datafusion::arrow::compute::concat;
use datafusion::error::{DataFusionError, Result};
use silt_cache::ObjectKey;

use super::{KeyIndex, KeyMatcher, read_file_rows};
use crate::cached_table::CachedParquetTable;

/// Decoded key columns of row groups: (object version, table column, row
/// group) to the row group's keys in the file's type.
pub struct PinnedKeys {
    cache: moka::sync::Cache<(ObjectKey, usize, usize), ArrayRef>,
}

impl PinnedKeys {
    /// At most `budget` bytes of keys.
    pub fn new(budget: u64) -> Self {
        PinnedKeys {
            cache: moka::sync::Cache::builder()
                .max_capacity(budget)
                .weigher(|_, keys: &ArrayRef| u32::try_from(keys.get_array_memory_size()).unwrap_or(u32::MAX))
                .build(),
        }
    }

    /// The keys of row group `rg` of `index`'s file version, read and
    /// decoded on first use.
    pub(super) async fn get(&self, table: &CachedParquetTable, index: &KeyIndex, rg: usize) -> Result<ArrayRef> {
        let key = (index.file.object.key.clone(), index.column, rg);
        if let Some(keys) = self.cache.get(&key) {
            return Ok(keys);
        }
        let keys = read_keys(table, index, rg).await?;
        self.cache.insert(key, keys.clone());
        Ok(keys)
    }

    /// Row groups whose keys are held.
    pub fn len(&self) -> u64 {
        self.cache.entry_count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The whole key column chunk of row group `rg`, through the cache tiers.
async fn read_keys(table: &CachedParquetTable, index: &KeyIndex, rg: usize) -> Result<ArrayRef> {
    let file = &index.file;
    let root =
        file.file_columns[index.column].ok_or_else(|| DataFusionError::Internal("key column not in file".into()))?;
    let batches = read_file_rows(
        table,
        file,
        vec![root],
        vec![rg],
        None,
        file.rows(rg),
        "reading the keys of",
    )
    .await?;
    let columns: Vec<&dyn Array> = batches.iter().map(|b| b.column(0).as_ref()).collect();
    match columns.as_slice() {
        [] => Ok(datafusion::arrow::array::new_empty_array(index.field.data_type())),
        [one] => Ok(datafusion::arrow::array::make_array(one.to_data())),
        _ => Ok(concat(&columns)?),
    }
}

/// Positions (ascending) of the rows of `keys` within `ranges` that match.
pub(super) fn matching_rows(matcher: &KeyMatcher, keys: &ArrayRef, ranges: &[Range<usize>]) -> Result<UInt32Array> {
    let mut rows = Vec::new();
    for range in ranges {
        let end = range.end.min(keys.len());
        if range.start >= end {
            continue;
        }
        let mask = matcher.matches(keys.slice(range.start, end - range.start))?;
        rows.extend(mask.values().set_indices().map(|i| (range.start + i) as u32));
    }
    Ok(UInt32Array::from(rows))
}
