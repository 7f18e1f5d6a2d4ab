//! Scan sets: what the plans admitted to the server are about to read, so
//! the tiers keep it (Column Cache's plan-aware buffer management).
//!
//! A query registers, when it is planned (before it waits for a slot, so
//! queued queries count too), one [`ScanSet`]: per object version, the row
//! groups and columns its scan will read after statistics pruning, and the
//! disk pages their column chunks occupy. The scan releases a row group
//! when it has passed it ([`ScanSet::passed`]); dropping the set (the plan
//! finished, failed or was cancelled) releases whatever is left, so no
//! reservation outlives its query.
//!
//! The tiers ask [`ScanSets`] how many registered scans still need a
//! segment (a memory-tier batch or a disk page) through the
//! [`Reservations`] trait, and evict by its [`SegmentState`]: `Cached`
//! before `Reserved`, among `Reserved` the fewest remaining scans first
//! (see [`crate::policy::BudgetedCache`]).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::column_cache::BatchKey;
use crate::key::ObjectKey;
use crate::page_cache::PageKey;
use crate::policy::Reservations;

/// The state of a segment (a memory-tier batch or a disk page) in the
/// plan-aware tiers. One enum so that every tier means the same thing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentState {
    /// Being fetched or decoded by one request; every other request for it
    /// waits for that one (`InFlight` for pages, [`crate::DecodeFlights`]
    /// for batches) instead of fetching or decoding it again.
    Loading,
    /// Held, and `remaining_scans` registered scans have yet to read it:
    /// evicted only when the budget cannot otherwise be kept, fewest
    /// remaining scans first (`silt_cache_reserved_evictions_total`).
    Reserved {
        /// Registered scans that have not passed the segment yet.
        remaining_scans: u32,
    },
    /// Held, and no registered scan needs it: evicted by the tier's policy.
    Cached,
}

impl SegmentState {
    /// The state of a held segment with `remaining_scans` registered readers.
    pub fn held(remaining_scans: u32) -> Self {
        if remaining_scans > 0 {
            SegmentState::Reserved { remaining_scans }
        } else {
            SegmentState::Cached
        }
    }
}

/// One column chunk a scan will read: the segment of the memory tier
/// (object version, row group, table column) and its bytes in the object.
#[derive(Debug, Clone)]
pub struct ReservedChunk {
    /// The pinned object version.
    pub object: ObjectKey,
    /// Row group in the object.
    pub row_group: u32,
    /// Table column index (as in [`BatchKey::column`]).
    pub column: u32,
    /// Byte ranges of the column chunk in the object (its leaves).
    pub bytes: Vec<Range<u64>>,
}

/// Reference counts of one object version's reserved segments.
#[derive(Default)]
struct ObjectScans {
    /// (row group, column) -> scans that will read it.
    chunks: HashMap<(u32, u32), u32>,
    /// page number -> scans that will read it.
    pages: HashMap<u64, u32>,
}

impl ObjectScans {
    fn is_empty(&self) -> bool {
        self.chunks.is_empty() && self.pages.is_empty()
    }
}

/// What one registered scan still holds of one row group.
struct HeldGroup {
    columns: Vec<u32>,
    pages: Vec<u64>,
}

/// The registry of every scan set of a server, shared by the tiers.
pub struct ScanSets {
    objects: Mutex<HashMap<ObjectKey, ObjectScans>>,
    /// Bumped on every release, so a tier knows when reserved entries it set
    /// aside may have become `Cached` ([`Reservations::epoch`]).
    epoch: AtomicU64,
    /// Scan sets registered and not yet dropped.
    active: AtomicU64,
}

impl Default for ScanSets {
    fn default() -> Self {
        ScanSets {
            objects: Mutex::new(HashMap::new()),
            epoch: AtomicU64::new(0),
            active: AtomicU64::new(0),
        }
    }
}

impl std::fmt::Debug for ScanSets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (chunks, pages) = self.reserved_segments();
        f.debug_struct("ScanSets")
            .field("active", &self.active_sets())
            .field("chunks", &chunks)
            .field("pages", &pages)
            .finish()
    }
}

impl ScanSets {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Registers a scan that will read `chunks`, whose pages are
    /// `page_size` bytes; each (object, row group, column) counts once
    /// however often it is listed. Released row group by row group with
    /// [`ScanSet::passed`], and wholly when the returned set is dropped.
    pub fn register(self: &Arc<Self>, chunks: Vec<ReservedChunk>, page_size: u64) -> ScanSet {
        let mut held: HashMap<(ObjectKey, u32), HeldGroup> = HashMap::new();
        for chunk in chunks {
            let group = held
                .entry((chunk.object, chunk.row_group))
                .or_insert_with(|| HeldGroup {
                    columns: Vec::new(),
                    pages: Vec::new(),
                });
            group.columns.push(chunk.column);
            for range in chunk.bytes.iter().filter(|r| r.end > r.start) {
                group
                    .pages
                    .extend(range.start / page_size.max(1)..=(range.end - 1) / page_size.max(1));
            }
        }
        {
            let mut objects = self.objects.lock();
            for ((object, rg), group) in held.iter_mut() {
                group.columns.sort_unstable();
                group.columns.dedup();
                group.pages.sort_unstable();
                group.pages.dedup();
                let scans = objects.entry(object.clone()).or_default();
                for &c in &group.columns {
                    *scans.chunks.entry((*rg, c)).or_default() += 1;
                }
                for &p in &group.pages {
                    *scans.pages.entry(p).or_default() += 1;
                }
            }
        }
        self.active.fetch_add(1, Ordering::Relaxed);
        ScanSet {
            sets: self.clone(),
            held: Mutex::new(held),
        }
    }

    fn release(&self, object: &ObjectKey, rg: u32, group: HeldGroup) {
        let mut objects = self.objects.lock();
        if let Some(scans) = objects.get_mut(object) {
            for c in group.columns {
                decrement(&mut scans.chunks, &(rg, c));
            }
            for p in group.pages {
                decrement(&mut scans.pages, &p);
            }
            if scans.is_empty() {
                objects.remove(object);
            }
        }
        drop(objects);
        self.epoch.fetch_add(1, Ordering::Release);
    }

    /// Registered scans that will still read column `column` of row group
    /// `row_group` of `object`.
    pub fn remaining_for_chunk(&self, object: &ObjectKey, row_group: u32, column: u32) -> u32 {
        self.objects
            .lock()
            .get(object)
            .and_then(|s| s.chunks.get(&(row_group, column)).copied())
            .unwrap_or(0)
    }

    /// Registered scans that will still read page `page` of `object`.
    pub fn remaining_for_page(&self, object: &ObjectKey, page: u64) -> u32 {
        self.objects
            .lock()
            .get(object)
            .and_then(|s| s.pages.get(&page).copied())
            .unwrap_or(0)
    }

    /// Scan sets registered and not yet dropped.
    pub fn active_sets(&self) -> u64 {
        self.active.load(Ordering::Relaxed)
    }

    /// Reserved (column chunks, pages) summed over objects: both 0 when no
    /// scan set is registered.
    pub fn reserved_segments(&self) -> (u64, u64) {
        let objects = self.objects.lock();
        objects.values().fold((0, 0), |(c, p), s| {
            (c + s.chunks.len() as u64, p + s.pages.len() as u64)
        })
    }
}

fn decrement<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, u32>, key: &K) {
    if let Some(n) = counts.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            counts.remove(key);
        }
    }
}

impl Reservations<BatchKey> for ScanSets {
    fn remaining_scans(&self, key: &BatchKey) -> u32 {
        self.remaining_for_chunk(&key.object, key.row_group, key.column)
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }
}

impl Reservations<PageKey> for ScanSets {
    fn remaining_scans(&self, key: &PageKey) -> u32 {
        self.remaining_for_page(&key.object, key.page)
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }
}

/// One scan's registration. Row groups are released as the scan passes
/// them; the rest when this is dropped (the query ended, failed or was
/// cancelled).
pub struct ScanSet {
    sets: Arc<ScanSets>,
    held: Mutex<HashMap<(ObjectKey, u32), HeldGroup>>,
}

impl std::fmt::Debug for ScanSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanSet")
            .field("row_groups", &self.held.lock().len())
            .finish()
    }
}

impl ScanSet {
    /// The scan has read (or skipped) row group `row_group` of `object`: its
    /// segments are no longer reserved by this scan. Idempotent.
    pub fn passed(&self, object: &ObjectKey, row_group: u32) {
        let group = self.held.lock().remove(&(object.clone(), row_group));
        if let Some(group) = group {
            self.sets.release(object, row_group, group);
        }
    }

    /// Row groups still reserved by this scan.
    pub fn row_groups_held(&self) -> usize {
        self.held.lock().len()
    }
}

impl Drop for ScanSet {
    fn drop(&mut self) {
        let held = std::mem::take(&mut *self.held.lock());
        for ((object, rg), group) in held {
            self.sets.release(&object, rg, group);
        }
        self.sets.active.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(version: &str, rg: u32, column: u32, bytes: Range<u64>) -> ReservedChunk {
        ReservedChunk {
            object: ObjectKey::new("t0", "a.parquet", version),
            row_group: rg,
            column,
            bytes: vec![bytes],
        }
    }

    #[test]
    fn counts_follow_registrations_passes_and_drops() {
        let sets = ScanSets::new();
        let object = ObjectKey::new("t0", "a.parquet", "v1");
        let a = sets.register(vec![chunk("v1", 0, 1, 0..100), chunk("v1", 1, 1, 100..250)], 100);
        let b = sets.register(vec![chunk("v1", 0, 1, 0..100), chunk("v1", 0, 1, 0..100)], 100);
        assert_eq!(sets.remaining_for_chunk(&object, 0, 1), 2);
        assert_eq!(sets.remaining_for_page(&object, 0), 2);
        assert_eq!(sets.remaining_for_page(&object, 2), 1);
        a.passed(&object, 0);
        a.passed(&object, 0);
        assert_eq!(sets.remaining_for_chunk(&object, 0, 1), 1);
        assert_eq!(sets.remaining_for_chunk(&object, 1, 1), 1);
        drop(b);
        assert_eq!(sets.remaining_for_chunk(&object, 0, 1), 0);
        assert_eq!(sets.active_sets(), 1);
        drop(a);
        assert_eq!((sets.active_sets(), sets.reserved_segments()), (0, (0, 0)));
        assert_eq!(SegmentState::held(0), SegmentState::Cached);
    }
}
