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
//! tier entry (a memory-tier batch or a disk page) through the
//! [`Reservations`] trait, and evict by its [`EntryState`]: `Cached`
//! before `Reserved`, among `Reserved` the one whose next use is furthest
//! first: one no running scan needs (only queued queries, which run later)
//! before one a running scan needs ([`ScanSet::started`] marks a scan
//! running when it executes, after its query got a slot), then the fewest
//! remaining scans (see [`crate::policy::BudgetedCache`]).
//!
//! **One tier protects each reserved chunk.** The tiers are inclusive (a
//! chunk in memory was decoded from pages the page buffer and disk may
//! still hold), and protecting a chunk twice makes each tier evict, to make
//! room for a second copy, what only it holds.
//! - *Memory protects what only it would keep*: a memory-tier chunk counts
//!   as reserved only while the page tiers below (page buffer, disk) do not
//!   hold all its pages ([`PageResidency`], implemented by
//!   [`crate::PageStore`], attached by [`crate::CacheTiers::new`]): losing a
//!   chunk whose bytes are still below costs a decode, losing one whose
//!   bytes are gone costs a GET. Protecting both alike made the memory tier
//!   keep chunks the disk also held and evict chunks held nowhere else:
//!   under `silt bench mixed` plan-aware sieve made 2.3x the store GETs of
//!   sieve alone (`docs/results/mixed-sf1-hits1m-repeats3`).
//! - *The disk reserves the rest*: the pages of every chunk except those the
//!   memory tier holds whole (every batch) and protects (their pages are not
//!   all below), which the scan reads from memory. Which chunks memory holds
//!   is looked at when the scan registers and again when it starts running
//!   ([`MemoryResidency`]).
//!
//! The page tiers are asked without this registry's lock held (the disk's
//! eviction takes its index lock, then this registry's).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

use crate::policy::Reservations;
use crate::{BatchKey, ChunkKey, ObjectKey, PageKey};

/// The state of a tier entry (a memory-tier batch or a disk page) in the
/// plan-aware tiers. One enum so that every tier means the same thing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryState {
    /// Being fetched or decoded by one request; every other request for it
    /// waits for that one (`InFlight` for pages, [`crate::DecodeFlights`]
    /// for batches) instead of fetching or decoding it again.
    Loading,
    /// Held, and `remaining_scans` registered scans have yet to read it
    /// (for a memory-tier batch: and the page tiers do not hold its chunk's
    /// bytes, module doc): evicted only when the budget cannot otherwise be
    /// kept, fewest remaining scans first
    /// (`silt_cache_reserved_evictions_total`).
    Reserved {
        /// Registered scans that have not passed the entry yet.
        remaining_scans: u32,
    },
    /// Held, and no registered scan needs it (or, a memory-tier batch, its
    /// bytes are held below): evicted by the tier's policy.
    Cached,
}

impl EntryState {
    /// The state of a held entry with `remaining_scans` registered readers.
    pub fn held(remaining_scans: u32) -> Self {
        if remaining_scans > 0 {
            EntryState::Reserved { remaining_scans }
        } else {
            EntryState::Cached
        }
    }
}

/// One column chunk a scan will read and its bytes in the object.
#[derive(Debug, Clone)]
pub struct ReservedChunk {
    /// The chunk (of the pinned object version).
    pub chunk: ChunkKey,
    /// Byte ranges of the column chunk in the object (its leaves).
    pub bytes: Vec<Range<u64>>,
    /// Batches of [`crate::BATCH_ROWS`] rows in the row group: how many
    /// memory-tier entries hold the whole chunk.
    pub batches: u32,
}

/// Whether the memory tier holds a whole column chunk (every batch), so a
/// scan reads it from memory and not from its disk pages. Implemented by
/// [`crate::ColumnCache`].
pub trait MemoryResidency: Send + Sync {
    /// Whether batches `0..batches` of `chunk` are all held.
    fn holds_chunk(&self, chunk: &ChunkKey, batches: u32) -> bool;
}

/// Whether the tiers below memory (the page buffer, the disk) hold pages of
/// an object, so that a column chunk built from them is decoded again
/// without a fetch. Implemented by [`crate::PageStore`].
pub trait PageResidency: Send + Sync {
    /// Whether every page of `pages` of `object` is held (a part of one
    /// counts: the chunk's bytes are what was fetched before).
    fn holds_pages(&self, object: &ObjectKey, pages: &[u64]) -> bool;
}

/// How many registered scans will read an entry (a chunk or a page), and how many of them run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Uses {
    scans: u32,
    running: u32,
}

impl AsMut<Uses> for Uses {
    fn as_mut(&mut self) -> &mut Uses {
        self
    }
}

/// A reserved column chunk: the scans that will read it, and the pages it
/// occupies (what the memory tier asks the page tiers about).
struct ChunkUses {
    uses: Uses,
    pages: Arc<[u64]>,
}

impl AsMut<Uses> for ChunkUses {
    fn as_mut(&mut self) -> &mut Uses {
        &mut self.uses
    }
}

/// Reference counts of one object version's reserved entries.
#[derive(Default)]
struct ObjectScans {
    /// (row group, column) -> scans that will read it, and its pages.
    chunks: HashMap<(u32, u32), ChunkUses>,
    /// page number -> scans that will read it.
    pages: HashMap<u64, Uses>,
}

impl ObjectScans {
    fn is_empty(&self) -> bool {
        self.chunks.is_empty() && self.pages.is_empty()
    }
}

/// What one registered scan still holds of one row group.
struct HeldGroup {
    /// The group's column chunks (reserved in the memory tier), with the
    /// pages each occupies.
    chunks: Vec<HeldChunk>,
    /// The pages reserved on disk: those of the chunks the memory tier did
    /// not hold when last looked at (at registration, at the scan's start).
    pages: Vec<u64>,
}

/// One column chunk of a [`HeldGroup`].
struct HeldChunk {
    column: u32,
    batches: u32,
    pages: Arc<[u64]>,
}

/// Which registered scans reserve what they will read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PlanHorizon {
    /// Every registered scan, queued or running (Column Cache's rule: a
    /// queued plan's entries are Reserved too).
    #[default]
    Queued,
    /// Only running scans; what queued queries will read is registered
    /// (and shown) but evicted by the policy like any Cached entry.
    Running,
}

impl PlanHorizon {
    pub fn as_str(self) -> &'static str {
        match self {
            PlanHorizon::Queued => "queued",
            PlanHorizon::Running => "running",
        }
    }
}

impl std::fmt::Display for PlanHorizon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PlanHorizon {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "queued" => Ok(PlanHorizon::Queued),
            "running" => Ok(PlanHorizon::Running),
            other => Err(format!("unknown plan horizon {other:?}: expected queued or running")),
        }
    }
}

/// The registry of every scan set of a server, shared by the tiers.
pub struct ScanSets {
    horizon: PlanHorizon,
    objects: Mutex<HashMap<ObjectKey, ObjectScans>>,
    /// Bumped on every release and scan start, so a tier knows when reserved
    /// entries it set aside may have become `Cached` or changed order
    /// ([`Reservations::epoch`]).
    epoch: AtomicU64,
    /// Scan sets registered and not yet dropped.
    active: AtomicU64,
    /// The memory tier, once attached: chunks it holds reserve no pages.
    memory: OnceLock<Weak<dyn MemoryResidency>>,
    /// The page tiers, once attached: chunks whose pages they hold are not
    /// protected in memory.
    below: OnceLock<Weak<dyn PageResidency>>,
}

impl Default for ScanSets {
    fn default() -> Self {
        ScanSets {
            horizon: PlanHorizon::default(),
            objects: Mutex::new(HashMap::new()),
            epoch: AtomicU64::new(0),
            active: AtomicU64::new(0),
            memory: OnceLock::new(),
            below: OnceLock::new(),
        }
    }
}

impl std::fmt::Debug for ScanSets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (chunks, pages) = self.reserved_entries();
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

    /// A registry whose scans reserve per `horizon`.
    pub fn with_horizon(horizon: PlanHorizon) -> Arc<Self> {
        Arc::new(ScanSets {
            horizon,
            ..ScanSets::default()
        })
    }

    /// The scans that reserve: [`Reservations::remaining_scans`] counts these.
    fn reserving(&self, uses: Uses) -> u32 {
        match self.horizon {
            PlanHorizon::Queued => uses.scans,
            PlanHorizon::Running => uses.running,
        }
    }

    /// Attaches the memory tier whose whole chunks reserve no disk pages
    /// (module doc); the first attached stays. Without one, every chunk's
    /// pages are reserved.
    pub fn attach_memory(&self, memory: Weak<dyn MemoryResidency>) {
        let _ = self.memory.set(memory);
    }

    /// Attaches the page tiers: a memory-tier chunk whose pages they hold
    /// counts as `Cached` (losing it costs a decode, not a fetch); the first
    /// attached stays.
    pub fn attach_pages(&self, below: Weak<dyn PageResidency>) {
        let _ = self.below.set(below);
    }

    /// The pages of `chunks` (of row group `rg` of `object`) to reserve on
    /// disk: those of the chunks the memory tier does not protect (module
    /// doc: it holds them whole and the page tiers do not hold their pages).
    fn disk_pages(&self, object: &ObjectKey, rg: u32, chunks: &[HeldChunk]) -> Vec<u64> {
        let memory = self.memory.get().and_then(Weak::upgrade);
        let below = self.below.get().and_then(Weak::upgrade);
        let mut pages: Vec<u64> = chunks
            .iter()
            .filter(|c| {
                let in_memory = memory
                    .as_ref()
                    .is_some_and(|m| m.holds_chunk(&ChunkKey::new(object.clone(), rg, c.column), c.batches));
                !in_memory || below.as_ref().is_some_and(|b| b.holds_pages(object, &c.pages))
            })
            .flat_map(|c| c.pages.iter().copied())
            .collect();
        pages.sort_unstable();
        pages.dedup();
        pages
    }

    /// Registers a scan that will read `chunks`, whose pages are
    /// `page_size` bytes; each (object, row group, column) counts once
    /// however often it is listed, and so does each page. Released row group
    /// by row group with [`ScanSet::passed`], and wholly when the returned
    /// set is dropped.
    pub fn register(self: &Arc<Self>, chunks: Vec<ReservedChunk>, page_size: u64) -> ScanSet {
        let mut held: HashMap<(ObjectKey, u32), HeldGroup> = HashMap::new();
        for ReservedChunk { chunk, bytes, batches } in chunks {
            let group = held
                .entry((chunk.object, chunk.row_group))
                .or_insert_with(|| HeldGroup {
                    chunks: Vec::new(),
                    pages: Vec::new(),
                });
            if group.chunks.iter().any(|c| c.column == chunk.column) {
                continue;
            }
            let pages = bytes
                .iter()
                .filter(|r| r.end > r.start)
                .flat_map(|r| r.start / page_size.max(1)..=(r.end - 1) / page_size.max(1))
                .collect();
            group.chunks.push(HeldChunk {
                column: chunk.column,
                batches,
                pages,
            });
        }
        // Looked up before the registry's lock: the memory tier's lock is
        // taken before it (its eviction asks the registry), never after.
        for ((object, rg), group) in held.iter_mut() {
            group.pages = self.disk_pages(object, *rg, &group.chunks);
        }
        {
            let mut objects = self.objects.lock();
            for ((object, rg), group) in &held {
                let scans = objects.entry(object.clone()).or_default();
                for c in &group.chunks {
                    let chunk = scans.chunks.entry((*rg, c.column)).or_insert_with(|| ChunkUses {
                        uses: Uses::default(),
                        pages: c.pages.clone(),
                    });
                    chunk.uses.scans += 1;
                }
                for &p in &group.pages {
                    scans.pages.entry(p).or_default().scans += 1;
                }
            }
        }
        self.active.fetch_add(1, Ordering::Relaxed);
        ScanSet {
            sets: self.clone(),
            held: Mutex::new(Unpassed {
                groups: held,
                running: false,
            }),
        }
    }

    /// A scan holding `groups` started running: its disk pages are looked
    /// at again (memory may have gained or lost its chunks while it was
    /// queued), and it counts among the running scans of what it holds.
    fn started(&self, groups: &mut HashMap<(ObjectKey, u32), HeldGroup>) {
        let pages: Vec<Vec<u64>> = groups
            .iter()
            .map(|((object, rg), group)| self.disk_pages(object, *rg, &group.chunks))
            .collect();
        let mut objects = self.objects.lock();
        for (((object, rg), group), pages) in groups.iter_mut().zip(pages) {
            let Some(scans) = objects.get_mut(object) else {
                continue;
            };
            for p in group.pages.iter().filter(|p| pages.binary_search(p).is_err()) {
                decrement(&mut scans.pages, p, false);
            }
            for &p in pages.iter().filter(|p| group.pages.binary_search(p).is_err()) {
                scans.pages.entry(p).or_default().scans += 1;
            }
            group.pages = pages;
            for c in group.chunks.iter().map(|c| c.column) {
                if let Some(chunk) = scans.chunks.get_mut(&(*rg, c)) {
                    chunk.uses.running += 1;
                }
            }
            for p in &group.pages {
                if let Some(uses) = scans.pages.get_mut(p) {
                    uses.running += 1;
                }
            }
        }
    }

    /// Releases one scan's `group` of row group `rg` (`running`: the scan
    /// had started).
    fn release(&self, object: &ObjectKey, rg: u32, group: HeldGroup, running: bool) {
        let mut objects = self.objects.lock();
        if let Some(scans) = objects.get_mut(object) {
            for c in group.chunks.iter().map(|c| c.column) {
                decrement(&mut scans.chunks, &(rg, c), running);
            }
            for p in group.pages {
                decrement(&mut scans.pages, &p, running);
            }
            if scans.is_empty() {
                objects.remove(object);
            }
        }
        drop(objects);
        self.epoch.fetch_add(1, Ordering::Release);
    }

    /// Registered scans that will still read `chunk`.
    pub fn remaining_for_chunk(&self, chunk: &ChunkKey) -> u32 {
        self.chunk_uses(chunk).scans
    }

    fn chunk_uses(&self, chunk: &ChunkKey) -> Uses {
        self.objects
            .lock()
            .get(&chunk.object)
            .and_then(|s| s.chunks.get(&(chunk.row_group, chunk.column)).map(|c| c.uses))
            .unwrap_or_default()
    }

    fn page_uses(&self, object: &ObjectKey, page: u64) -> Uses {
        self.objects
            .lock()
            .get(object)
            .and_then(|s| s.pages.get(&page).copied())
            .unwrap_or_default()
    }

    /// Registered scans that will still read page `page` of `object`.
    pub fn remaining_for_page(&self, object: &ObjectKey, page: u64) -> u32 {
        self.page_uses(object, page).scans
    }

    /// Scan sets registered and not yet dropped.
    pub fn active_sets(&self) -> u64 {
        self.active.load(Ordering::Relaxed)
    }

    /// Reserved (column chunks, pages) summed over objects: both 0 when no
    /// scan set is registered.
    pub fn reserved_entries(&self) -> (u64, u64) {
        let objects = self.objects.lock();
        objects.values().fold((0, 0), |(c, p), s| {
            (c + s.chunks.len() as u64, p + s.pages.len() as u64)
        })
    }
}

/// One scan (running or not) no longer needs `key`.
fn decrement<K: std::hash::Hash + Eq, V: AsMut<Uses>>(counts: &mut HashMap<K, V>, key: &K, running: bool) {
    if let Some(uses) = counts.get_mut(key).map(AsMut::as_mut) {
        uses.scans -= 1;
        if running {
            uses.running = uses.running.saturating_sub(1);
        }
        if uses.scans == 0 {
            counts.remove(key);
        }
    }
}

impl ScanSets {
    /// The uses of `key`'s chunk that protect it in memory: none when the
    /// page tiers hold its pages (the registry's lock is not held while
    /// they are asked: the disk's eviction takes its index lock, then this
    /// registry's).
    fn protecting_uses(&self, key: &BatchKey) -> Uses {
        let (uses, pages) = {
            let objects = self.objects.lock();
            let Some(scans) = objects.get(&key.object) else {
                return Uses::default();
            };
            let at = (key.row_group, key.column);
            let Some(chunk) = scans.chunks.get(&at) else {
                return Uses::default();
            };
            (chunk.uses, chunk.pages.clone())
        };
        let below = self.below.get().and_then(Weak::upgrade);
        if self.reserving(uses) > 0 && below.is_some_and(|b| b.holds_pages(&key.object, &pages)) {
            return Uses::default();
        }
        uses
    }
}

impl Reservations<BatchKey> for ScanSets {
    fn remaining_scans(&self, key: &BatchKey) -> u32 {
        self.reserving(self.protecting_uses(key))
    }

    fn running_scans(&self, key: &BatchKey) -> u32 {
        self.protecting_uses(key).running
    }

    fn running_and_remaining(&self, key: &BatchKey) -> (u32, u32) {
        let uses = self.protecting_uses(key);
        (uses.running, self.reserving(uses))
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }
}

impl Reservations<PageKey> for ScanSets {
    fn remaining_scans(&self, key: &PageKey) -> u32 {
        self.reserving(self.page_uses(&key.object, key.page))
    }

    fn running_scans(&self, key: &PageKey) -> u32 {
        self.page_uses(&key.object, key.page).running
    }

    fn running_and_remaining(&self, key: &PageKey) -> (u32, u32) {
        let uses = self.page_uses(&key.object, key.page);
        (uses.running, self.reserving(uses))
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }
}

/// What a scan set still holds, and whether its scan has started.
struct Unpassed {
    groups: HashMap<(ObjectKey, u32), HeldGroup>,
    running: bool,
}

/// One scan's registration. Row groups are released as the scan passes
/// them; the rest when this is dropped (the query ended, failed or was
/// cancelled).
pub struct ScanSet {
    sets: Arc<ScanSets>,
    held: Mutex<Unpassed>,
}

impl std::fmt::Debug for ScanSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanSet")
            .field("row_groups", &self.held.lock().groups.len())
            .finish()
    }
}

impl ScanSet {
    /// The scan got its slot and executes: what it holds is needed sooner
    /// than what only queued scans hold (eviction's next-use order).
    /// Idempotent (every partition of the scan calls it).
    pub fn started(&self) {
        let mut held = self.held.lock();
        if !held.running {
            held.running = true;
            self.sets.started(&mut held.groups);
            // The tiers' order among reserved entries changes.
            self.sets.epoch.fetch_add(1, Ordering::Release);
        }
    }

    /// The scan has read (or skipped) row group `row_group` of `object`: its
    /// entries are no longer reserved by this scan. Idempotent.
    pub fn passed(&self, object: &ObjectKey, row_group: u32) {
        // Released under the scan's lock, so a concurrent `started` counts
        // each group as running exactly when its release uncounts it.
        let mut held = self.held.lock();
        if let Some(group) = held.groups.remove(&(object.clone(), row_group)) {
            self.sets.release(object, row_group, group, held.running);
        }
    }
}

impl Drop for ScanSet {
    fn drop(&mut self) {
        let held = self.held.get_mut();
        for ((object, rg), group) in std::mem::take(&mut held.groups) {
            self.sets.release(&object, rg, group, held.running);
        }
        self.sets.active.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(version: &str, rg: u32, column: u32, bytes: Range<u64>) -> ReservedChunk {
        ReservedChunk {
            chunk: ChunkKey::new(ObjectKey::new("t0", "a.parquet", version), rg, column),
            bytes: vec![bytes],
            batches: 1,
        }
    }

    #[test]
    fn counts_follow_registrations_passes_and_drops() {
        let sets = ScanSets::new();
        let object = ObjectKey::new("t0", "a.parquet", "v1");
        let a = sets.register(vec![chunk("v1", 0, 1, 0..100), chunk("v1", 1, 1, 100..250)], 100);
        let b = sets.register(vec![chunk("v1", 0, 1, 0..100), chunk("v1", 0, 1, 0..100)], 100);
        assert_eq!(sets.remaining_for_chunk(&ChunkKey::new(object.clone(), 0, 1)), 2);
        assert_eq!(sets.remaining_for_page(&object, 0), 2);
        let page = |p| PageKey::new(object.clone(), p);
        assert_eq!(Reservations::<PageKey>::running_scans(&*sets, &page(0)), 0);
        a.started();
        a.started();
        assert_eq!(Reservations::<PageKey>::running_scans(&*sets, &page(0)), 1);
        assert_eq!(Reservations::<PageKey>::running_scans(&*sets, &page(2)), 1);
        assert_eq!(sets.remaining_for_page(&object, 2), 1);
        a.passed(&object, 0);
        a.passed(&object, 0);
        assert_eq!(Reservations::<PageKey>::running_scans(&*sets, &page(0)), 0);
        assert_eq!(sets.remaining_for_chunk(&ChunkKey::new(object.clone(), 0, 1)), 1);
        assert_eq!(sets.remaining_for_chunk(&ChunkKey::new(object.clone(), 1, 1)), 1);
        drop(b);
        assert_eq!(sets.remaining_for_chunk(&ChunkKey::new(object.clone(), 0, 1)), 0);
        assert_eq!(sets.active_sets(), 1);
        drop(a);
        assert_eq!((sets.active_sets(), sets.reserved_entries()), (0, (0, 0)));
        assert_eq!(EntryState::held(0), EntryState::Cached);
    }

    #[test]
    fn a_running_horizon_reserves_only_what_running_scans_read() {
        let sets = ScanSets::with_horizon(PlanHorizon::Running);
        let object = ObjectKey::new("t0", "a.parquet", "v1");
        let key = PageKey::new(object.clone(), 0);
        let queued = sets.register(vec![chunk("v1", 0, 1, 0..100)], 100);
        assert_eq!(sets.remaining_for_page(&object, 0), 1, "registered");
        assert_eq!(
            Reservations::<PageKey>::remaining_scans(&*sets, &key),
            0,
            "not reserved"
        );
        queued.started();
        assert_eq!(Reservations::<PageKey>::remaining_scans(&*sets, &key), 1);
        drop(queued);
        assert_eq!(sets.reserved_entries(), (0, 0));
        assert_eq!("Running".parse::<PlanHorizon>(), Ok(PlanHorizon::Running));
        assert!("soon".parse::<PlanHorizon>().is_err());
    }
}
