//! Column chunks: one column of one row group of one object version, the
//! unit a scan reads, reserves, decodes and caches.
//!
//! Every place that names a column chunk (the memory tier's chunk index, a
//! scan set's reservations, decodes in flight, first touches, the
//! compute-side cache of a client) names it with a [`ChunkKey`]; the memory
//! tier splits a chunk into batches of [`BATCH_ROWS`] rows, each named by a
//! [`BatchKey`].

use std::fmt;

use crate::key::ObjectKey;

/// Rows per cached batch (the unit of the memory tier and of the scan).
pub const BATCH_ROWS: usize = 8192;

/// One column chunk: (object version, row group, table column).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkKey {
    /// The object version the chunk is of.
    pub object: ObjectKey,
    /// Row group in the object.
    pub row_group: u32,
    /// Root column index in the table's schema.
    pub column: u32,
}

impl ChunkKey {
    /// Column `column` of row group `row_group` of `object`.
    pub fn new(object: ObjectKey, row_group: u32, column: u32) -> Self {
        ChunkKey {
            object,
            row_group,
            column,
        }
    }

    /// Batch `batch` of this chunk.
    pub fn batch(&self, batch: u32) -> BatchKey {
        BatchKey {
            object: self.object.clone(),
            row_group: self.row_group,
            column: self.column,
            batch,
        }
    }
}

impl fmt::Display for ChunkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}.{}", self.object, self.row_group, self.column)
    }
}

/// Identifies one column of one batch of one row group of one object
/// version: one batch of a [`ChunkKey`], the memory tier's entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BatchKey {
    /// The object version the column was decoded from.
    pub object: ObjectKey,
    /// Row group in the object.
    pub row_group: u32,
    /// Root column index in the table's schema.
    pub column: u32,
    /// Batch index within the row group (rows `batch * BATCH_ROWS ..`).
    pub batch: u32,
}

impl BatchKey {
    /// The column chunk this batch is of.
    pub fn chunk(&self) -> ChunkKey {
        ChunkKey::new(self.object.clone(), self.row_group, self.column)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_of_its_chunk() {
        let chunk = ChunkKey::new(ObjectKey::new("s", "t/a.parquet", "v1"), 2, 5);
        assert_eq!(chunk.batch(3).chunk(), chunk);
        assert_eq!(chunk.batch(3).batch, 3);
        assert_eq!(chunk.to_string(), "s/t/a.parquet@v1#2.5");
    }
}
