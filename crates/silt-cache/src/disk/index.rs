//! The in-memory index of page files: budget and eviction order (a
//! [`BudgetedCache`]), plus a map object -> version -> page so that dropping
//! the old versions of one object does not scan every page.
//!
//! Every entry carries a generation number, so that a thread which looked at
//! an entry, released the lock and did file I/O can later change the entry
//! only if nobody replaced it meanwhile. File I/O never happens here: methods
//! return the keys whose files the caller must delete after unlocking.

use std::collections::HashMap;
use std::sync::Arc;

use crate::page_cache::PageKey;
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
    /// Bytes charged to the budget.
    pub size: u64,
    /// Reserved by a `put` whose file is not renamed into place yet.
    pub writing: bool,
}

/// What admitting a page did to the index.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    /// The new entry's generation; `None` when the page was not admitted.
    pub generation: Option<u64>,
    /// How many pages were evicted to make room.
    pub evicted: u64,
    /// How many of them registered scans still needed.
    pub reserved_evicted: u64,
    /// Pages whose files must be deleted (the evicted ones, and the page
    /// itself when it replaced an entry but was then refused).
    pub unlink: Vec<PageKey>,
}

/// What [`Index::adopt`] did with a page file found on disk.
#[derive(Debug)]
pub(crate) enum Adopted {
    /// Now in the index.
    Admitted(Admission),
    /// Already known (put, read or recovered meanwhile): nothing changed.
    Present,
    /// Not admitted (an old version dropped meanwhile, or no room): delete
    /// the file. Carries any evictions made trying.
    Rejected(Admission),
}

/// What [`Index::finish_write`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finished {
    /// The page's entry is up to date; nothing to do.
    Done,
    /// The entry was evicted or dropped while the file was written: the
    /// caller deletes the file it just renamed into place.
    Orphaned,
}

pub(crate) struct Index {
    budget: BudgetedCache<PageKey>,
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
    /// An empty index, in the recovering state.
    pub fn new(budget_bytes: u64, policy: PolicyKind, reservations: Option<Arc<dyn Reservations<PageKey>>>) -> Self {
        Index {
            budget: BudgetedCache::new(budget_bytes, policy.build()).with_reservations(reservations),
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

    /// Every page whose file is in place, with its size.
    pub fn pages(&self) -> Vec<(PageKey, u64)> {
        let mut out = Vec::new();
        for ((store, path), versions) in &self.objects {
            for (version, pages) in versions {
                let object = crate::key::ObjectKey::new(store.clone(), path.clone(), version.clone());
                out.extend(
                    pages
                        .iter()
                        .filter(|(_, e)| !e.writing)
                        .map(|(&page, e)| (PageKey::new(object.clone(), page), e.size)),
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

    fn forget(&mut self, key: &PageKey) -> Option<Entry> {
        self.budget.remove(key);
        self.unmap(key)
    }

    fn admit(&mut self, key: &PageKey, size: u64, cost: f64, writing: bool) -> Admission {
        let replaced = self.unmap(key).is_some();
        let insertion = self.budget.insert(key.clone(), size, cost);
        let mut admission = Admission {
            generation: None,
            evicted: insertion.evicted.len() as u64,
            reserved_evicted: insertion.reserved_evicted,
            unlink: insertion.evicted,
        };
        for victim in &admission.unlink {
            self.unmap(victim);
        }
        if insertion.admitted {
            self.next_generation += 1;
            let generation = self.next_generation;
            self.set(
                key,
                Entry {
                    generation,
                    size,
                    writing,
                },
            );
            admission.generation = Some(generation);
        } else if replaced {
            admission.unlink.push(key.clone());
        }
        admission
    }

    /// Reserves room for a page about to be written, whose refetch costs
    /// `cost` ns; `None` when the page is already being written or already
    /// stored with the same size (pages are immutable per key, so rewriting
    /// it would only cost I/O).
    pub fn reserve(&mut self, key: &PageKey, size: u64, cost: f64) -> Option<Admission> {
        match self.get(key) {
            Some(e) if e.writing || e.size == size => None,
            _ => Some(self.admit(key, size, cost, true)),
        }
    }

    /// A write reserved as `generation` ended (`ok`: the file is in place).
    pub fn finish_write(&mut self, key: &PageKey, generation: u64, ok: bool) -> Finished {
        match self.get(key) {
            Some(e) if e.generation == generation => {
                if ok {
                    self.set(key, Entry { writing: false, ..e });
                } else {
                    self.forget(key);
                }
                Finished::Done
            }
            // Replaced by a newer write or a read of the file: that entry
            // accounts for the file at this path.
            Some(_) => Finished::Done,
            None if ok => Finished::Orphaned,
            None => Finished::Done,
        }
    }

    /// Takes a valid page file found on disk (by recovery, or by a read while
    /// recovery runs) into the index, at the cost stored in its header; a
    /// page without one (format 1) is priced as one GET of its own bytes.
    pub fn adopt(&mut self, key: &PageKey, size: u64, cost: Option<f64>) -> Adopted {
        if self.get(key).is_some() {
            return Adopted::Present;
        }
        if self.superseded(key) {
            return Adopted::Rejected(Admission::default());
        }
        let cost = cost.unwrap_or_else(|| self.fallback_cost.cost(size));
        let admission = self.admit(key, size, cost, false);
        if admission.generation.is_some() {
            Adopted::Admitted(admission)
        } else {
            Adopted::Rejected(admission)
        }
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
    /// `keep_version` and returns their keys.
    pub fn drop_other_versions(&mut self, store: &str, path: &str, keep_version: &str) -> Vec<PageKey> {
        let id: ObjectId = (Arc::from(store), Arc::from(path));
        if let Some(keep) = &mut self.keep_versions {
            keep.insert(id.clone(), Arc::from(keep_version));
        }
        let Some(versions) = self.objects.get_mut(&id) else {
            return Vec::new();
        };
        let mut dropped = Vec::new();
        versions.retain(|version, pages| {
            if &**version == keep_version {
                return true;
            }
            dropped.extend(pages.keys().map(|&page| PageKey {
                object: crate::ObjectKey::new(id.0.clone(), id.1.clone(), version.clone()),
                page,
            }));
            false
        });
        if versions.is_empty() {
            self.objects.remove(&id);
        }
        for key in &dropped {
            self.budget.remove(key);
        }
        dropped
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

    #[test]
    fn writes_finish_or_are_orphaned() {
        let mut idx = Index::new(3 * 8192, PolicyKind::Lru, None);
        let g1 = idx.reserve(&key("a", 1), 8192, 1.0).unwrap().generation.unwrap();
        assert!(idx.reserve(&key("a", 1), 8192, 1.0).is_none(), "second writer skips");
        assert_eq!(idx.finish_write(&key("a", 1), g1, true), Finished::Done);
        assert!(!idx.get(&key("a", 1)).unwrap().writing);
        assert!(
            idx.reserve(&key("a", 1), 8192, 1.0).is_none(),
            "same size: already stored"
        );

        let g2 = idx.reserve(&key("a", 2), 8192, 1.0).unwrap().generation.unwrap();
        assert_eq!(idx.drop_other_versions("s", "p", "b").len(), 2);
        assert_eq!(idx.finish_write(&key("a", 2), g2, true), Finished::Orphaned);
        assert_eq!((idx.len(), idx.used_bytes(), idx.mapped_pages()), (0, 0, 0));

        let g3 = idx.reserve(&key("b", 1), 8192, 1.0).unwrap().generation.unwrap();
        assert_eq!(idx.finish_write(&key("b", 1), g3, false), Finished::Done);
        assert_eq!((idx.len(), idx.used_bytes()), (0, 0), "failed write releases its room");
    }

    #[test]
    fn evictions_are_reported_and_unmapped() {
        let mut idx = Index::new(2 * 8192, PolicyKind::Lru, None);
        for page in 0..5 {
            let a = idx.reserve(&key("a", page), 8192, 1.0).unwrap();
            idx.finish_write(&key("a", page), a.generation.unwrap(), true);
            assert!(idx.used_bytes() <= 2 * 8192);
            assert_eq!(idx.len(), idx.mapped_pages());
        }
        assert_eq!(idx.len(), 2);
    }

    #[test]
    fn adoption_respects_versions_dropped_during_recovery() {
        let mut idx = Index::new(1 << 20, PolicyKind::Sieve, None);
        idx.drop_other_versions("s", "p", "new");
        assert!(matches!(idx.adopt(&key("old", 0), 8192, None), Adopted::Rejected(_)));
        assert!(matches!(
            idx.adopt(&key("new", 0), 8192, Some(1.0)),
            Adopted::Admitted(_)
        ));
        assert!(matches!(idx.adopt(&key("new", 0), 8192, Some(1.0)), Adopted::Present));
        idx.recovery_finished();
        assert!(matches!(idx.adopt(&key("old", 0), 8192, None), Adopted::Admitted(_)));
    }

    #[test]
    fn weighted_lfu_evicts_the_page_cheapest_to_refetch() {
        let mut idx = Index::new(3 * 8192, PolicyKind::WeightedLfu, None);
        let put = |idx: &mut Index, page, cost| {
            let a = idx.reserve(&key("a", page), 8192, cost).unwrap();
            idx.finish_write(&key("a", page), a.generation.unwrap(), true);
            a
        };
        put(&mut idx, 0, 40e6);
        put(&mut idx, 1, 2e6);
        assert!(matches!(idx.adopt(&key("a", 2), 8192, None), Adopted::Admitted(_)));
        // Full: the next page evicts page 1, cheaper than page 0 and than the
        // model's price of the recovered page 2 (one whole GET).
        assert_eq!(put(&mut idx, 3, 1e6).unlink, [key("a", 1)]);
    }
}
