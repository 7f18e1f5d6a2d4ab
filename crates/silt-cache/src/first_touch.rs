//! Column chunks a scan read without admitting them to the memory tier, so
//! that the next read of the same chunk admits it: admission on the second
//! touch (TinyLFU's doorkeeper) for the cases where the first read is much
//! cheaper without admission: a selective filter's projected columns
//! (below), and any chunk while the liquid transcoder is behind (admitting
//! would encode it on the query's thread; `crate::TranscodePolicy::behind`).
//!
//! A cold scan whose filter keeps few rows of a row group needs only those
//! rows of its projected columns. Decoding the whole column chunks to admit
//! them (and encoding them to liquid) costs several times what decoding the
//! selected rows costs: ClickBench's cold `SELECT * ... WHERE URL LIKE
//! '%google%'` spent ~17 s of CPU decoding and encoding 104 projected columns
//! of which it kept a fraction of a percent, where DataFusion reading the
//! store spent ~3 s. So the first read of such a chunk decodes only the
//! selected rows, admits nothing and is remembered here; a second read while
//! it is remembered decodes and admits the whole chunk as before. A repeated
//! query is therefore served from memory from its third run on (the second
//! run admits), and a one-off query leaves the memory tier alone.

use crate::ChunkKey;

/// How many chunks are remembered (least recently touched forgotten first):
/// a forgotten chunk counts as untouched again. About 100 bytes each.
const REMEMBERED: u64 = 1 << 17;

/// The column chunks read once without admission. Shared by every scan of a
/// server (held by the memory tier).
pub struct FirstTouches {
    seen: moka::sync::Cache<ChunkKey, ()>,
}

impl Default for FirstTouches {
    fn default() -> Self {
        FirstTouches {
            seen: moka::sync::Cache::new(REMEMBERED),
        }
    }
}

impl FirstTouches {
    /// Whether this is the first touch of `chunk` (since it was forgotten),
    /// recording the touch: `true` once, then `false` while remembered.
    pub fn first(&self, chunk: &ChunkKey) -> bool {
        self.seen.entry(chunk.clone()).or_insert(()).is_fresh()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ObjectKey;

    fn at(object: &ObjectKey, row_group: u32, column: u32) -> ChunkKey {
        ChunkKey::new(object.clone(), row_group, column)
    }

    #[test]
    fn a_chunk_is_first_once() {
        let touches = FirstTouches::default();
        let object = ObjectKey::new("s", "t/a.parquet", "v1");
        let chunk = at(&object, 0, 3);
        assert!(touches.first(&chunk));
        assert!(!touches.first(&chunk));
        assert!(touches.first(&at(&object, 0, 4)), "another column is its own chunk");
        assert!(touches.first(&at(&object, 1, 3)), "another row group is its own chunk");
        assert!(!touches.first(&chunk));
    }
}
