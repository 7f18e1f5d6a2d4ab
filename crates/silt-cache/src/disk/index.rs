//! The in-memory index of pages: budget and eviction order (a
//! [`BudgetedCache`]), the slot each page is in and the free slots, plus a
//! map object -> version -> page so that dropping the old versions of one
//! object does not scan every page.
//!
//! Every entry carries a generation number, so that a thread which looked at
//! an entry, released the lock and did file I/O can later change the entry
//! only if nobody replaced it meanwhile. File I/O never happens here. A slot
//! is free again when its page is evicted or dropped, except while the page
//! is being written: then the writer frees it when its write ends
//! ([`Index::finish_write`]), so two writes never share a slot.

use std::collections::HashMap;
use std::sync::Arc;

use super::slots::SlotAllocator;
use crate::PageKey;
use crate::policy::{BudgetedCache, CostModel, PolicyKind, Reservations};

/// (store, path): the unit whose versions are dropped together.
type ObjectId = (Arc<str>, Arc<str>);

fn object_id(key: &PageKey) -> ObjectId {
    (key.object.store.clone(), key.object.path.clone())
}

/// One page known to the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Changes whenever the entry is (re)created.
    pub generation: u64,
    /// The slot holding the page.
    pub slot: u32,
    /// Data bytes of the page.
    pub len: u64,
    /// Reserved by a `put` whose write has not ended yet.
    pub writing: bool,
}

/// What admitting a page did to the index.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    /// The new entry's generation and slot; `None` when the page was not
    /// admitted (no room, or no free slot while recovery runs).
    pub placed: Option<(u64, u32)>,
    /// How many pages were evicted to make room.
    pub evicted: u64,
    /// How many of them registered scans still needed.
    pub reserved_evicted: u64,
}

/// What [`Index::adopt`] did with a page recovery found in a slot.
#[derive(Debug)]
pub(crate) enum Adopted {
    /// Now in the index.
    Admitted(Admission),
    /// Already known (put, read or recovered meanwhile): nothing changed.
    Present,
    /// Not admitted (an old version dropped meanwhile, or no room): its
    /// slot is free. Carries any evictions made trying.
    Rejected(Admission),
}

/// Where a page being admitted goes.
#[derive(Debug, Clone, Copy)]
enum Placement {
    /// A free slot, preferably the one after the previous page's.
    Free,
    /// The slot recovery found it in.
    Found(u32),
}

pub(crate) struct Index {
    budget: BudgetedCache<PageKey>,
    /// Bytes charged per page: one slot.
    slot_bytes: u64,
    slots: SlotAllocator,
    objects: HashMap<ObjectId, HashMap<Arc<str>, HashMap<u64, Entry>>>,
    next_generation: u64,
    /// While recovery runs: the version to keep per object, as asked by
    /// `drop_other_versions`, so that recovery deletes older pages it has not
    /// reached yet instead of bringing them back.
    keep_versions: Option<HashMap<ObjectId, Arc<str>>>,
    /// Prices pages whose cost is unknown: format 1 pages found at recovery.
    fallback_cost: CostModel,
}

impl Index {
    /// An empty index of `slots` slots of `slot_bytes`, in the recovering
    /// state: slots below `scan_end` are not free until recovery has read
    /// them ([`Self::found_free`]).
    pub fn new(
        slots: u32,
        slot_bytes: u64,
        scan_end: u32,
        policy: PolicyKind,
        reservations: Option<Arc<dyn Reservations<PageKey>>>,
    ) -> Self {
        Index {
            budget: BudgetedCache::new(slots as u64 * slot_bytes, policy.build()).with_reservations(reservations),
            slot_bytes,
            slots: SlotAllocator::new(slots, scan_end),
            objects: HashMap::new(),
            next_generation: 0,
            keep_versions: Some(HashMap::new()),
            fallback_cost: CostModel::default(),
        }
    }

    pub fn used_bytes(&self) -> u64 {
        self.budget.used_bytes()
    }

    pub fn len(&self) -> usize {
        self.budget.len()
    }

    /// Every page written, with the bytes it is charged (its slot).
    pub fn pages(&self) -> Vec<(PageKey, u64)> {
        let mut out = Vec::new();
        for ((store, path), versions) in &self.objects {
            for (version, pages) in versions {
                let object = crate::ObjectKey::new(store.clone(), path.clone(), version.clone());
                out.extend(
                    pages
                        .iter()
                        .filter(|(_, e)| !e.writing)
                        .map(|(&page, _)| (PageKey::new(object.clone(), page), self.slot_bytes)),
                );
            }
        }
        out
    }

    pub fn get(&self, key: &PageKey) -> Option<Entry> {
        self.objects
            .get(&object_id(key))?
            .get(&key.object.version)?
            .get(&key.page)
            .copied()
    }

    /// A read of `key`: records the use with the policy.
    pub fn access(&mut self, key: &PageKey) -> Option<Entry> {
        let entry = self.get(key)?;
        self.budget.access(key);
        Some(entry)
    }

    fn set(&mut self, key: &PageKey, entry: Entry) {
        self.objects
            .entry(object_id(key))
            .or_default()
            .entry(key.object.version.clone())
            .or_default()
            .insert(key.page, entry);
    }

    /// Removes `key` from the object map only (the budget is handled by the caller).
    fn unmap(&mut self, key: &PageKey) -> Option<Entry> {
        let id = object_id(key);
        let versions = self.objects.get_mut(&id)?;
        let pages = versions.get_mut(&key.object.version)?;
        let entry = pages.remove(&key.page);
        if pages.is_empty() {
            versions.remove(&key.object.version);
            if versions.is_empty() {
                self.objects.remove(&id);
            }
        }
        entry
    }

    /// Removes `key` from the budget and the map, and frees its slot.
    fn forget(&mut self, key: &PageKey) -> Option<Entry> {
        self.budget.remove(key);
        let entry = self.unmap(key)?;
        self.vacate(entry);
        Some(entry)
    }

    /// Frees the slot of an entry just unmapped, unless a write into it is
    /// still running (the writer frees it when done).
    fn vacate(&mut self, entry: Entry) {
        if !entry.writing {
            self.slots.release(entry.slot);
        }
    }

    fn admit(&mut self, key: &PageKey, len: u64, cost: f64, placement: Placement, writing: bool) -> Admission {
        let insertion = self.budget.insert(key.clone(), self.slot_bytes, cost);
        let mut admission = Admission {
            placed: None,
            evicted: insertion.evicted.len() as u64,
            reserved_evicted: insertion.reserved_evicted,
        };
        for victim in &insertion.evicted {
            if let Some(entry) = self.unmap(victim) {
                self.vacate(entry);
            }
        }
        if !insertion.admitted {
            return admission;
        }
        let slot = match placement {
            Placement::Found(slot) => Some(slot),
            Placement::Free => {
                let previous = key.page.checked_sub(1).map(|p| PageKey::new(key.object.clone(), p));
                let prefer = previous.and_then(|p| self.get(&p)).map(|e| e.slot + 1);
                self.slots.take(prefer)
            }
        };
        let Some(slot) = slot else {
            // Recovery has not freed enough slots yet.
            self.budget.remove(key);
            return admission;
        };
        self.next_generation += 1;
        let generation = self.next_generation;
        self.set(
            key,
            Entry {
                generation,
                slot,
                len,
                writing,
            },
        );
        admission.placed = Some((generation, slot));
        admission
    }

    /// Reserves a slot for a page (or part of one) of `len` bytes about to
    /// be written, whose refetch costs `cost` ns; `None` when the page is
    /// being written, or stored with at least `len` bytes (a key's bytes never
    /// change, so rewriting them would only cost I/O). A shorter part stored
    /// before is replaced: its slot is freed, the new one written elsewhere.
    pub fn reserve(&mut self, key: &PageKey, len: u64, cost: f64) -> Option<Admission> {
        match self.get(key) {
            Some(stored) if stored.writing || stored.len >= len => return None,
            Some(_) => {
                self.forget(key);
            }
            None => {}
        }
        Some(self.admit(key, len, cost, Placement::Free, true))
    }

    /// The write into `slot` reserved as `generation` ended (`ok`: the page
    /// is in place). Frees the slot when the entry is gone or failed.
    pub fn finish_write(&mut self, key: &PageKey, generation: u64, slot: u32, ok: bool) {
        match self.get(key) {
            Some(e) if e.generation == generation => {
                if ok {
                    self.set(key, Entry { writing: false, ..e });
                } else {
                    // Still marked writing, so `forget` would keep the slot.
                    self.forget(key);
                    self.slots.release(slot);
                }
            }
            // Evicted or dropped while written (its slot was kept for us).
            _ => self.slots.release(slot),
        }
    }

    /// Takes a valid page found in `slot` by recovery into the index, at the
    /// cost stored in its header; a page without one (format 1) is priced as
    /// one GET of its own bytes. A page already known (a second copy after a
    /// crash) or not admitted frees the slot.
    pub fn adopt(&mut self, key: &PageKey, slot: u32, len: u64, cost: Option<f64>) -> Adopted {
        if let Some(known) = self.get(key) {
            // Two copies of one page: a part replaced by a longer one (see
            // `reserve`) leaves the shorter in its freed slot until the slot
            // is reused. Both are right for the key (keys carry the object
            // version); the longer is the later and serves more reads, so it
            // wins whichever slot recovery reads first.
            if known.writing || known.len >= len {
                self.slots.release(slot);
                return Adopted::Present;
            }
            self.forget(key);
        }
        if self.superseded(key) {
            self.slots.release(slot);
            return Adopted::Rejected(Admission::default());
        }
        let cost = cost.unwrap_or_else(|| self.fallback_cost.cost(len));
        let admission = self.admit(key, len, cost, Placement::Found(slot), false);
        if admission.placed.is_some() {
            Adopted::Admitted(admission)
        } else {
            self.slots.release(slot);
            Adopted::Rejected(admission)
        }
    }

    /// Recovery read `slot` and found no page in it (blank or damaged).
    pub fn found_free(&mut self, slot: u32) {
        self.slots.release(slot);
    }

    /// Removes `key` if its entry is still `generation`; returns whether it did.
    pub fn remove_if(&mut self, key: &PageKey, generation: u64) -> bool {
        match self.get(key) {
            Some(e) if e.generation == generation => {
                self.forget(key);
                true
            }
            _ => false,
        }
    }

    /// Removes every page of (`store`, `path`) whose version is not
    /// `keep_version`, frees their slots, and returns how many there were.
    pub fn drop_other_versions(&mut self, store: &str, path: &str, keep_version: &str) -> usize {
        let id: ObjectId = (Arc::from(store), Arc::from(path));
        if let Some(keep) = &mut self.keep_versions {
            keep.insert(id.clone(), Arc::from(keep_version));
        }
        let Some(versions) = self.objects.get_mut(&id) else {
            return 0;
        };
        let mut dropped = Vec::new();
        versions.retain(|version, pages| {
            if &**version == keep_version {
                return true;
            }
            dropped.extend(pages.iter().map(|(&page, &entry)| {
                let object = crate::ObjectKey::new(id.0.clone(), id.1.clone(), version.clone());
                (PageKey { object, page }, entry)
            }));
            false
        });
        if versions.is_empty() {
            self.objects.remove(&id);
        }
        for (key, entry) in &dropped {
            self.budget.remove(key);
            self.vacate(*entry);
        }
        dropped.len()
    }

    fn superseded(&self, key: &PageKey) -> bool {
        self.keep_versions
            .as_ref()
            .and_then(|keep| keep.get(&object_id(key)))
            .is_some_and(|v| *v != key.object.version)
    }

    /// Recovery is over: stop remembering dropped versions.
    pub fn recovery_finished(&mut self) {
        self.keep_versions = None;
    }

    /// Pages in the object map; equals [`len`](Self::len) (checked by tests).
    #[cfg(test)]
    pub fn mapped_pages(&self) -> usize {
        self.objects.values().flat_map(|v| v.values()).map(HashMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(version: &str, page: u64) -> PageKey {
        PageKey {
            object: crate::ObjectKey::new("s", "p", version),
            page,
        }
    }

    const SLOT: u64 = 8192;

    fn reserve(idx: &mut Index, key: &PageKey, cost: f64) -> (u64, u32) {
        idx.reserve(key, 100, cost).unwrap().placed.unwrap()
    }

    #[test]
    fn writes_finish_or_are_orphaned_and_slots_come_back() {
        let mut idx = Index::new(3, SLOT, 0, PolicyKind::Lru, None);
        let (g1, s1) = reserve(&mut idx, &key("a", 1), 1.0);
        assert!(idx.reserve(&key("a", 1), 100, 1.0).is_none(), "second writer skips");
        idx.finish_write(&key("a", 1), g1, s1, true);
        assert!(!idx.get(&key("a", 1)).unwrap().writing);
        assert!(idx.reserve(&key("a", 1), 100, 1.0).is_none(), "already stored");

        let (g2, s2) = reserve(&mut idx, &key("a", 2), 1.0);
        assert_eq!(s2, s1 + 1, "the next page goes to the next slot");
        assert_eq!(idx.drop_other_versions("s", "p", "b"), 2);
        // Page 2's slot stays taken until its writer is done.
        let (g3, s3) = reserve(&mut idx, &key("b", 1), 1.0);
        assert_ne!(s3, s2);
        idx.finish_write(&key("a", 2), g2, s2, true);
        assert_eq!((idx.len(), idx.used_bytes(), idx.mapped_pages()), (1, SLOT, 1));
        idx.finish_write(&key("b", 1), g3, s3, false);
        assert_eq!((idx.len(), idx.used_bytes()), (0, 0), "failed write releases its room");
        // Every slot is free again: three pages fit.
        for page in 0..3 {
            reserve(&mut idx, &key("c", page), 1.0);
        }
        assert_eq!(idx.len(), 3);
    }

    #[test]
    fn evictions_are_counted_and_unmapped() {
        let mut idx = Index::new(2, SLOT, 0, PolicyKind::Lru, None);
        let mut slots = std::collections::HashSet::new();
        for page in 0..5 {
            let (g, s) = reserve(&mut idx, &key("a", page), 1.0);
            idx.finish_write(&key("a", page), g, s, true);
            slots.insert(s);
            assert!(idx.used_bytes() <= 2 * SLOT);
            assert_eq!(idx.len(), idx.mapped_pages());
        }
        assert_eq!(idx.len(), 2);
        assert_eq!(slots.len(), 2, "evicted pages' slots are reused");
    }

    #[test]
    fn adoption_respects_versions_dropped_during_recovery() {
        let mut idx = Index::new(128, SLOT, 4, PolicyKind::Sieve, None);
        idx.drop_other_versions("s", "p", "new");
        assert!(matches!(idx.adopt(&key("old", 0), 0, 100, None), Adopted::Rejected(_)));
        assert!(matches!(
            idx.adopt(&key("new", 0), 1, 100, Some(1.0)),
            Adopted::Admitted(_)
        ));
        assert!(matches!(idx.adopt(&key("new", 0), 2, 100, Some(1.0)), Adopted::Present));
        idx.recovery_finished();
        assert!(matches!(idx.adopt(&key("old", 0), 3, 100, None), Adopted::Admitted(_)));
        // Slots 0 and 2 were freed by recovery; 1 and 3 hold pages.
        assert_eq!(reserve(&mut idx, &key("x", 5), 1.0).1, 0);
        assert_eq!(reserve(&mut idx, &key("x", 7), 1.0).1, 2);
        assert_eq!(reserve(&mut idx, &key("x", 9), 1.0).1, 4);
    }

    #[test]
    fn adoption_keeps_the_longer_copy_of_a_page_in_either_order() {
        let mut idx = Index::new(8, SLOT, 8, PolicyKind::Lru, None);
        assert!(matches!(idx.adopt(&key("a", 0), 0, 100, None), Adopted::Admitted(_)));
        assert!(matches!(idx.adopt(&key("a", 0), 1, 8192, None), Adopted::Admitted(_)));
        assert_eq!(idx.get(&key("a", 0)).map(|e| (e.slot, e.len)), Some((1, 8192)));
        assert!(matches!(idx.adopt(&key("a", 1), 2, 8192, None), Adopted::Admitted(_)));
        assert!(matches!(idx.adopt(&key("a", 1), 3, 100, None), Adopted::Present));
        assert_eq!(idx.get(&key("a", 1)).map(|e| (e.slot, e.len)), Some((2, 8192)));
        assert_eq!((idx.len(), idx.used_bytes()), (2, 2 * SLOT));
        idx.recovery_finished();
        // The shorter copies' slots (0 and 3) are free again.
        assert_eq!(reserve(&mut idx, &key("x", 5), 1.0).1, 0);
        assert_eq!(reserve(&mut idx, &key("x", 6), 1.0).1, 3);
    }

    #[test]
    fn no_free_slot_while_recovery_runs_refuses_the_page() {
        let mut idx = Index::new(2, SLOT, 2, PolicyKind::Lru, None);
        assert!(idx.reserve(&key("a", 0), 100, 1.0).unwrap().placed.is_none());
        assert_eq!((idx.len(), idx.used_bytes()), (0, 0));
        idx.found_free(1);
        assert_eq!(reserve(&mut idx, &key("a", 0), 1.0).1, 1);
    }

    #[test]
    fn weighted_lfu_evicts_the_page_cheapest_to_refetch() {
        let mut idx = Index::new(3, SLOT, 3, PolicyKind::WeightedLfu, None);
        idx.found_free(0);
        idx.found_free(1);
        let put = |idx: &mut Index, page, cost| {
            let (g, s) = reserve(idx, &key("a", page), cost);
            idx.finish_write(&key("a", page), g, s, true);
        };
        put(&mut idx, 0, 40e6);
        put(&mut idx, 1, 2e6);
        assert!(matches!(idx.adopt(&key("a", 2), 2, 8192, None), Adopted::Admitted(_)));
        // Full: the next page evicts page 1, cheaper than page 0 and than the
        // model's price of the recovered page 2 (one whole GET).
        put(&mut idx, 3, 1e6);
        assert!(idx.get(&key("a", 1)).is_none());
        assert_eq!(idx.len(), 3);
    }
}
