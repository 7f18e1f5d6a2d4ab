//! Squeezing ahead of eviction: a liquid column chunk is written to the
//! squeeze tier once its last batch is liquid, not only when the memory
//! tier evicts it (issue 43).
//!
//! Why: a chunk squeezed only at eviction is lost with the process. After a
//! kill -9 (or any restart) the chunks the memory tier held were decoded
//! from Parquet and transcoded again, which on 2 cores is most of a cold
//! query's CPU; written ahead, they come back from disk in their encoded
//! form. Eviction then costs nothing for such a chunk: its record is on
//! disk already ([`crate::Squeezed::offer`] skips a chunk it holds).
//!
//! How: the scan that decoded and admitted a chunk whole marks it with its
//! batch count ([`crate::ColumnCache::admitted_whole`]); each transcode of
//! one of its batches checks whether all of them are now liquid and, if
//! so, offers the chunk to the squeeze tier's writer and forgets the mark.
//! Some batches stay Arrow for good (the transcoder keeps a batch whose
//! liquid form is not smaller, and skips those its queue had no room for):
//! whenever the transcoder's queue empties, every marked chunk held whole
//! is offered as it is, and the writer encodes its Arrow batches. A chunk
//! the writer was too far behind to take keeps its mark and is offered
//! again when the writer's queue empties ([`crate::Squeezed::on_idle`]). A chunk
//! that lost a batch (evicted) is forgotten: the eviction offers it, whole,
//! if it still is. Marks are bounded ([`MAX_MARKS`]); beyond the bound
//! chunks are not marked (they are still squeezed at eviction).

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::ChunkKey;

/// Marked chunks at most.
pub const MAX_MARKS: usize = 1 << 16;

/// Chunks admitted whole whose batches are not all liquid yet: chunk →
/// its batch count.
#[derive(Default)]
pub(crate) struct AheadMarks {
    marks: Mutex<HashMap<ChunkKey, u32>>,
}

impl AheadMarks {
    /// Marks `chunk` as admitted whole with `batches` batches; false when
    /// the marks are full (not marked).
    pub fn mark(&self, chunk: ChunkKey, batches: u32) -> bool {
        let mut marks = self.marks.lock();
        if marks.len() >= MAX_MARKS && !marks.contains_key(&chunk) {
            return false;
        }
        marks.insert(chunk, batches);
        true
    }

    /// The batch count `chunk` was marked with, if it is marked.
    pub fn batches(&self, chunk: &ChunkKey) -> Option<u32> {
        self.marks.lock().get(chunk).copied()
    }

    /// Every marked chunk.
    pub fn chunks(&self) -> Vec<ChunkKey> {
        self.marks.lock().keys().cloned().collect()
    }

    /// Forgets `chunk`'s mark.
    pub fn unmark(&self, chunk: &ChunkKey) {
        self.marks.lock().remove(chunk);
    }

    /// Chunks marked now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.marks.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ObjectKey;

    #[test]
    fn marks_are_bounded_and_a_marked_chunk_can_be_marked_again() {
        let marks = AheadMarks::default();
        let chunk = |rg| ChunkKey::new(ObjectKey::new("t", "a.parquet", "v1"), rg, 0);
        let bound = MAX_MARKS as u32;
        for rg in 0..bound {
            assert!(marks.mark(chunk(rg), 2));
        }
        assert!(!marks.mark(chunk(bound), 2), "beyond the bound");
        assert!(marks.mark(chunk(0), 3), "already marked: updated");
        assert_eq!(marks.batches(&chunk(0)), Some(3));
        marks.unmark(&chunk(0));
        assert_eq!((marks.batches(&chunk(0)), marks.len()), (None, MAX_MARKS - 1));
    }
}
