//! `PageStore`: the cache of object bytes. Memory pages in front of disk
//! pages in front of the object store, for pinned object versions.
//!
//! A read names one [`PinnedObject`] (an object at one version) and the
//! ranges it wants. Each page a range touches is looked up in memory
//! ([`PageCache`]), then on disk ([`PageTier`]); a page is a hit when the
//! tier holds the part of it the read needs (a tier may hold part of a
//! page: see [`Page`]). The missing ones are claimed in [`InFlight`] (a page
//! another request is fetching is awaited, not fetched twice), and their
//! needed bytes, exactly (pages are a storage unit, not a fetch unit; of a
//! page that holds part of what is needed, only the rest), are grouped into
//! runs (runs separated by at most `merge_gap` bytes are joined), fetched
//! with one ranged GET per run carrying `If-Match` on the pinned ETag,
//! checked (length, version of the answer), merged with the parts already
//! held, admitted to memory, published to waiters as each run arrives, and
//! then written to disk (a waiter does not wait for the disk write; the
//! request that fetched does, so a read that returned has its pages on
//! disk; reads in between find the pages in the `writing` map). A read that
//! needs another part of a page than the one being fetched claims and fetches
//! its own part alongside (only the rest, where the other part holds one end
//! of it, joining the two); claimed pages are looked up in memory once more
//! before they are fetched (a fetch may have ended since the lookup).
//!
//! Bytes of two versions never mix: every key carries the version, every
//! fetch is conditional on it, and an answer for another version (a store
//! that ignores `If-Match`) is refused as [`CacheError::Changed`].

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use std::sync::atomic::Ordering;
use tracing::Instrument;

use bytes::{Bytes, BytesMut};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};

use crate::ObjectVersion;
use crate::PageKey;
use crate::counters::TableCounters;
use crate::error::{CacheError, CacheResult};
use crate::inflight::{Claim, FetchClaim, InFlight};
use crate::page_cache::{Page, PageCache, fetch_joining, joined};
use crate::policy::{CostModel, MeasuredCost};
use crate::{ObjectKey, PinnedObject};

/// A tier below memory that keeps pages (the disk tier). A trait so the read
/// path does not depend on how pages are stored. Calls block on I/O; callers
/// run them on blocking threads.
pub trait PageTier: Send + Sync {
    /// The verified bytes held of several pages (a whole page or part of
    /// one; `None` where missed): a tier that can read neighbouring pages in
    /// one request does so.
    fn get_many(&self, keys: &[PageKey]) -> Vec<Option<Page>>;
    /// Keeps a page or part of one (best effort: a failed write is logged
    /// and counted), replacing a smaller part held before. `cost` is the
    /// estimated time in ns to fetch it again, measured by the fetch that
    /// brought it (its share of that GET), for cost-aware eviction.
    fn put(&self, key: PageKey, page: &Page, cost: f64);
    /// Drops the pages of `keep`'s object whose version is not `keep`'s.
    fn drop_other_versions(&self, keep: &ObjectKey) -> usize;
    /// Whether the tier holds (a part of) `key`, written. No I/O.
    fn holds(&self, key: &PageKey) -> bool;
}

/// Where a read's missing bytes come from: the store and the object's path
/// in it (the store's own path, not the namespaced one the engine sees).
pub struct Source<'a> {
    pub store: &'a dyn ObjectStore,
    pub path: &'a Path,
}

/// How a read treats the memory tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Pages read go to memory (and fetched ones to disk): a query's reads.
    MemoryAndDisk,
    /// Fetched pages go to disk only (memory too when there is no disk):
    /// preload, which must not flush the working set from memory.
    DiskOnly,
}

/// How many learned ETags a page store keeps (~100 bytes each): far more
/// object versions than live queries pin at once.
const LEARNED_ETAGS: u64 = 1 << 17;

/// Object bytes in pages: memory, disk, the store. Shared by every table
/// of a server. Build with [`PageStore::builder`].
pub struct PageStore {
    memory: Arc<PageCache>,
    disk: Option<Arc<dyn PageTier>>,
    inflight: InFlight,
    merge_gap: u64,
    /// ETags learned from the first answer for a version that was validated
    /// without one (stores whose listings carry no ETag): later fetches of
    /// that version must answer with the same ETag. Kept after the version
    /// stops being current (bounded, not cleared on invalidation): a query
    /// that started on that version before (speculative validation) may
    /// still fetch its pages, and must not learn another object's ETag for
    /// the same key when a same-size overwrite lands in the same second.
    etags: moka::sync::Cache<ObjectKey, String>,
    /// The object store's latency and bandwidth as measured on this store's
    /// GETs: what a fetched page is priced at for the disk tier's policy.
    fetch_cost: MeasuredCost,
    /// Fetched pages handed to their waiters whose disk write has not landed:
    /// a read in between finds them here instead of refetching them (the
    /// memory pages may not have admitted them, or hold only what memory
    /// reads asked for).
    writing: WritingMap,
}

/// Per page whose disk write is under way: the parts being written, joined
/// ([`Page::keep_with`]), and how many writes hold it (two requests may
/// write parts of one page at once; the entry goes with the last).
type WritingMap = parking_lot::Mutex<HashMap<PageKey, (Page, u32)>>;

/// How many times a read claims a page it still lacks after waiting for
/// another request's fetch of it (which may have brought another part of
/// the page); after that it fetches what it lacks without a claim.
const CLAIM_ROUNDS: usize = 3;

/// A page a read lacks (or lacks part of) and claimed: it fetches `fetch`
/// (page coordinates) and merges it with `held`.
struct Missing {
    page: u64,
    need: Range<u64>,
    fetch: Range<u64>,
    held: Option<Page>,
    claim: FetchClaim,
}

/// Builds a [`PageStore`].
pub struct PageStoreBuilder {
    memory: Arc<PageCache>,
    disk: Option<Arc<dyn PageTier>>,
    merge_gap: Option<u64>,
}

impl PageStoreBuilder {
    /// Puts `disk` behind the memory pages.
    pub fn disk(mut self, disk: Arc<dyn PageTier>) -> Self {
        self.disk = Some(disk);
        self
    }

    /// Missing runs separated by at most `bytes` of cached pages are fetched
    /// with one GET (re-reading the gap is cheaper than a request). Default:
    /// one page.
    pub fn merge_gap(mut self, bytes: u64) -> Self {
        self.merge_gap = Some(bytes);
        self
    }

    pub fn build(self) -> Arc<PageStore> {
        let merge_gap = self.merge_gap.unwrap_or_else(|| self.memory.page_size());
        Arc::new(PageStore {
            memory: self.memory,
            disk: self.disk,
            inflight: InFlight::default(),
            merge_gap,
            etags: moka::sync::Cache::new(LEARNED_ETAGS),
            writing: Default::default(),
            fetch_cost: MeasuredCost::new(CostModel {
                // The tiers below memory keep raw bytes: a hit decodes them
                // as a refetch would, so caching saves no decoding.
                decode_ns_per_byte: 0.0,
                ..CostModel::default()
            }),
        })
    }
}

impl crate::scan_sets::PageResidency for PageStore {
    fn holds_pages(&self, object: &ObjectKey, pages: &[u64]) -> bool {
        pages.iter().all(|&page| {
            let key = PageKey::new(object.clone(), page);
            self.memory.contains(&key) || self.disk.as_ref().is_some_and(|d| d.holds(&key))
        })
    }
}

impl PageStore {
    /// A page store whose memory pages are `memory` (which also fixes the page size).
    pub fn builder(memory: Arc<PageCache>) -> PageStoreBuilder {
        PageStoreBuilder {
            memory,
            disk: None,
            merge_gap: None,
        }
    }

    pub fn page_size(&self) -> u64 {
        self.memory.page_size()
    }

    /// Pages being fetched right now (claims not finished); 0 when idle:
    /// a cancelled fetch leaves none behind.
    pub fn pages_in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// The memory pages.
    pub fn memory(&self) -> &Arc<PageCache> {
        &self.memory
    }

    /// Drops every page of `keep`'s object that is not of `keep`'s version,
    /// from memory now and from disk on a blocking thread.
    pub(crate) fn drop_other_versions(&self, keep: &ObjectKey, memory_too: bool) {
        if memory_too {
            self.memory.drop_other_versions(keep);
        }
        if let Some(disk) = self.disk.clone() {
            let keep = keep.clone();
            let drop = move || {
                disk.drop_other_versions(&keep);
            };
            match tokio::runtime::Handle::try_current() {
                Ok(h) => {
                    h.spawn_blocking(drop);
                }
                Err(_) => drop(),
            }
        }
    }

    /// Reads `ranges` of `object` through the tiers, fetching what they miss
    /// from `source`. The pages of all ranges are loaded together, so ranges
    /// that share pages or lie close together cost one GET, not one each.
    /// `counters` gets the page hits and misses.
    pub async fn read(
        &self,
        source: Source<'_>,
        object: &PinnedObject,
        ranges: &[Range<u64>],
        admit: Admit,
        counters: &TableCounters,
    ) -> CacheResult<Vec<Bytes>> {
        let size = object.size();
        for r in ranges {
            if r.start > r.end || r.end > size {
                return Err(CacheError::InvalidRange {
                    path: source.path.to_string(),
                    range: format!("{r:?}"),
                    size,
                });
            }
        }
        let ps = self.page_size();
        let wanted = needed_parts(ranges, ps);
        let span = tracing::info_span!(
            "tier_read",
            object = source.path.as_ref(),
            pages = wanted.len(),
            page_hits = tracing::field::Empty,
            page_misses = tracing::field::Empty,
        );
        let pages = self
            .load_pages(&source, object, &wanted, admit, counters)
            .instrument(span)
            .await?;
        ranges
            .iter()
            .map(|range| assemble(range, ps, &pages, source.path, size))
            .collect()
    }

    /// The parts of pages `wanted` (page, bytes needed in it; sorted by page,
    /// distinct): from memory, disk, a fetch in flight, or the store. Each
    /// returned part covers what was needed of its page.
    async fn load_pages(
        &self,
        source: &Source<'_>,
        object: &PinnedObject,
        wanted: &[(u64, Range<u64>)],
        admit: Admit,
        counters: &TableCounters,
    ) -> CacheResult<HashMap<u64, Page>> {
        let mut pages = HashMap::with_capacity(wanted.len());
        let mut pending = wanted.to_vec();
        for round in 0..=CLAIM_ROUNDS {
            let keys: Vec<PageKey> = pending
                .iter()
                .map(|(p, _)| PageKey::new(object.key.clone(), *p))
                .collect();
            let needs: Vec<&Range<u64>> = pending.iter().map(|(_, need)| need).collect();
            let found = self.lookup(&keys, &needs, admit).await;
            if round == 0 {
                let hits = found.iter().zip(&needs).filter(|(f, n)| covers(f, n)).count() as u64;
                let span = tracing::Span::current();
                span.record("page_hits", hits);
                span.record("page_misses", found.len() as u64 - hits);
                counters.hits.fetch_add(hits, Ordering::Relaxed);
                counters.misses.fetch_add(found.len() as u64 - hits, Ordering::Relaxed);
            }

            // Claim what is missing: fetch what nobody else is fetching, wait for the rest.
            let mut claimed = Vec::new();
            let mut waiting = Vec::new();
            for (((page, need), key), held) in pending.iter().zip(keys).zip(found) {
                if covers(&held, need) {
                    pages.insert(*page, held.expect("covers"));
                    continue;
                }
                let fetch = fetch_joining(need, held.as_ref().map(Page::range));
                if round == CLAIM_ROUNDS {
                    // Parts keep changing under this read: fetch its own, uncached.
                    let start = page * self.page_size();
                    let bytes = self
                        .fetch_bytes(source, object, start + need.start..start + need.end)
                        .await?;
                    pages.insert(
                        *page,
                        Page {
                            offset: need.start,
                            bytes,
                        },
                    );
                    continue;
                }
                // The part this read will publish: what it fetches, joined
                // with what it holds when they touch.
                let part = held
                    .as_ref()
                    .and_then(|h| joined(&h.range(), &fetch))
                    .unwrap_or_else(|| fetch.clone());
                let missing = match self.inflight.claim(&key, part, need) {
                    Claim::Fetch(claim) => Missing {
                        page: *page,
                        need: need.clone(),
                        fetch,
                        held,
                        claim,
                    },
                    Claim::Wait(rx) => {
                        waiting.push((*page, need.clone(), rx));
                        continue;
                    }
                    Claim::Alongside { rest, rx, claim } => {
                        // Fetch the rest; the waiting below joins it to their part.
                        waiting.push((*page, need.clone(), rx));
                        Missing {
                            page: *page,
                            need: need.clone(),
                            fetch: rest,
                            held: None,
                            claim,
                        }
                    }
                };
                claimed.push(missing);
            }
            // A fetch that ended between the lookup above and these claims
            // published its pages to memory and the `writing` map before it
            // let go of its claims: look there again rather than fetch twice.
            let mut to_fetch = Vec::with_capacity(claimed.len());
            for m in claimed {
                let key = PageKey::new(object.key.clone(), m.page);
                match self.held_in_memory(&key, &m.need).filter(|p| p.covers(&m.need)) {
                    Some(part) => {
                        m.claim.finish(Ok(part.clone()));
                        pages.insert(m.page, part);
                    }
                    None => to_fetch.push(m),
                }
            }
            let claimed = to_fetch;
            if !claimed.is_empty() {
                pages.extend(self.fetch_claimed(source, object, claimed, admit).await?);
            }
            let mut again = Vec::new();
            for (page, need, rx) in waiting {
                // What this read fetched of the page alongside, if anything.
                let ours = pages.remove(&page);
                match InFlight::wait(rx).await {
                    Some(Ok(theirs)) => {
                        let part = match &ours {
                            Some(ours) => self.keep_joined(object, page, ours, &theirs, admit).await,
                            None => theirs,
                        };
                        if part.covers(&need) {
                            pages.insert(page, part);
                        } else {
                            // Another part of the page was fetched: claim what is still missing.
                            again.push((page, need));
                        }
                    }
                    Some(Err(e)) => return Err(e),
                    // The request fetching it went away: claim what is still missing.
                    None => again.push((page, need)),
                }
            }
            if again.is_empty() {
                break;
            }
            pending = again;
        }
        Ok(pages)
    }

    /// Looks pages up in memory (the memory pages, then those whose disk
    /// write is under way), then on disk where memory does not hold the part
    /// `needs` names. Per page: a part that covers the need, else the
    /// largest part found (what a fetch can merge with), else `None`.
    async fn lookup(&self, keys: &[PageKey], needs: &[&Range<u64>], admit: Admit) -> Vec<Option<Page>> {
        let mut found: Vec<Option<Page>> = keys
            .iter()
            .zip(needs)
            .map(|(k, need)| self.held_in_memory(k, need))
            .collect();
        for (hit, need) in found.iter().zip(needs) {
            self.memory
                .metrics
                .record_lookup(hit.as_ref().filter(|p| p.covers(need)).map(Page::len));
        }
        let Some(disk) = self.disk.clone() else {
            return found;
        };
        let wanted: Vec<(usize, PageKey)> = keys
            .iter()
            .zip(&found)
            .zip(needs)
            .enumerate()
            .filter(|(_, ((_, f), need))| !covers(f, need))
            .map(|(i, ((k, _), _))| (i, k.clone()))
            .collect();
        if wanted.is_empty() {
            return found;
        }
        let from_disk = tokio::task::spawn_blocking(move || {
            let keys: Vec<PageKey> = wanted.iter().map(|(_, k)| k.clone()).collect();
            let pages = disk.get_many(&keys);
            wanted
                .into_iter()
                .zip(pages)
                .map(|((i, k), page)| (i, k, page))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        for (i, key, page) in from_disk {
            if page.is_none() {
                continue;
            }
            let page = better(found[i].take(), page, needs[i]);
            if admit == Admit::MemoryAndDisk
                && let Some(page) = &page
                && page.covers(needs[i])
            {
                self.memory.insert(key, page.clone());
            }
            found[i] = page;
        }
        found
    }

    /// What memory holds of page `key`: the memory pages' part, or the one
    /// whose disk write is under way, whichever covers `need` (else the larger).
    fn held_in_memory(&self, key: &PageKey, need: &Range<u64>) -> Option<Page> {
        let memory = self.memory.get(key);
        if covers(&memory, need) {
            return memory;
        }
        better(memory, self.writing.lock().get(key).map(|(p, _)| p.clone()), need)
    }

    /// Two parts of a page fetched by two requests at once, joined, and kept
    /// by the tiers as one (each request published only its own); `ours`
    /// when they do not touch.
    async fn keep_joined(&self, object: &PinnedObject, page: u64, ours: &Page, theirs: &Page, admit: Admit) -> Page {
        let Some(joined) = ours.merge(theirs) else {
            return ours.clone();
        };
        let key = PageKey::new(object.key.clone(), page);
        let cost = self.fetch_cost.model().share_of_request(1, joined.len() as u64);
        self.keep(vec![(key, joined.clone(), cost)], admit, || ()).await;
        joined
    }

    /// Keeps parts of pages in the tiers: in memory (unless `admit` says
    /// disk only and there is a disk), findable in the `writing` map until
    /// their disk write lands, and on disk (on a blocking thread). Each
    /// comes with its refetch cost in ns (for the disk tier's policy).
    /// `findable` runs once later reads can find them (a fetch lets its
    /// waiters go then, before the disk write).
    async fn keep(&self, pages: Vec<(PageKey, Page, f64)>, admit: Admit, findable: impl FnOnce()) {
        let pending = self
            .disk
            .is_some()
            .then(|| BeingWritten::new(&self.writing, pages.iter().map(|(k, p, _)| (k, p))));
        if admit == Admit::MemoryAndDisk || self.disk.is_none() {
            for (key, page, _) in &pages {
                self.memory.insert(key.clone(), page.clone());
            }
        }
        findable();
        if let Some(disk) = self.disk.clone() {
            let _ = tokio::task::spawn_blocking(move || {
                for (k, page, cost) in pages {
                    disk.put(k, &page, cost);
                }
            })
            .await;
        }
        drop(pending);
    }

    /// One GET for bytes `range` of `object`, conditional on its version
    /// and checked for length and version.
    async fn fetch_bytes(&self, source: &Source<'_>, object: &PinnedObject, range: Range<u64>) -> CacheResult<Bytes> {
        let Range { start, end } = range;
        let expected = self.expected_etag(object);
        let opts = GetOptions {
            range: Some(GetRange::Bounded(start..end)),
            if_match: expected.clone(),
            ..Default::default()
        };
        let path = source.path;
        tracing::debug!(path = path.as_ref(), start, end, "page store fetch");
        let started = std::time::Instant::now();
        let result = match source.store.get_opts(path, opts).await {
            Ok(r) => r,
            Err(e) => return Err(self.explain_failure(source, object, e).await),
        };
        self.check_answer(object, expected.as_deref(), &result.meta, path)?;
        let body = match result.bytes().await {
            Ok(b) => b,
            Err(e) => return Err(self.explain_failure(source, object, e).await),
        };
        if body.len() as u64 != end - start {
            return Err(CacheError::Corrupt {
                path: path.to_string(),
                detail: format!("asked for {} bytes at offset {start}, got {}", end - start, body.len()),
            });
        }
        self.fetch_cost.observe(body.len() as u64, started.elapsed());
        self.memory.metrics.miss_bytes.increment(body.len() as u64);
        Ok(body)
    }

    /// The ETag a fetch of `object` must answer with: the pin's own
    /// (validated or learned), else one another pin of the same version
    /// learned earlier.
    fn expected_etag(&self, object: &PinnedObject) -> Option<String> {
        object
            .etag()
            .map(str::to_string)
            .or_else(|| self.etags.get(&object.key))
    }

    /// Refuses an answer of another version than `object`'s (a store that
    /// ignores `If-Match`), and learns the version's ETag from its first
    /// answer when validation gave none: into the pin (which its later reads
    /// hold to even if the tiers drop this version meanwhile) and into the
    /// store (which later pins of the same version start from).
    fn check_answer(
        &self,
        object: &PinnedObject,
        expected: Option<&str>,
        answered: &object_store::ObjectMeta,
        path: &Path,
    ) -> CacheResult<()> {
        let changed = || CacheError::changed(path, &object.version.tag);
        if !object.version.may_be(answered, expected) {
            return Err(changed());
        }
        if object.version.e_tag.is_none()
            && let Some(etag) = &answered.e_tag
        {
            let shared = self
                .etags
                .entry(object.key.clone())
                .or_insert_with(|| etag.clone())
                .into_value();
            if shared != *etag || !object.learn_etag(etag) {
                return Err(changed());
            }
        }
        Ok(())
    }

    /// The error of a failed fetch, by kind. A failure that is neither
    /// not-found nor a failed condition may still mean the version is gone
    /// (a range past the end of a shorter new version is a 416 from S3), so
    /// the object is looked up: gone is [`CacheError::NotFound`], another
    /// version [`CacheError::Changed`], else the error as it was.
    async fn explain_failure(&self, source: &Source<'_>, object: &PinnedObject, e: object_store::Error) -> CacheError {
        let path = source.path;
        let error = changed_version(CacheError::from_store(path.as_ref(), e), &object.version);
        if !matches!(error, CacheError::Store { .. }) {
            return error;
        }
        let expected = self.expected_etag(object);
        match source.store.head(path).await {
            Err(object_store::Error::NotFound { .. }) => CacheError::NotFound {
                path: path.to_string(),
                source: None,
            },
            Ok(meta) if !object.version.may_be(&meta, expected.as_deref()) => {
                CacheError::changed(path, &object.version.tag)
            }
            _ => error,
        }
    }

    /// Fetches what this request claimed, in merged runs (one GET each, all
    /// at once), publishing each page (or the run's error) to the requests
    /// waiting for it as soon as its run arrives.
    async fn fetch_claimed(
        &self,
        source: &Source<'_>,
        object: &PinnedObject,
        claimed: Vec<Missing>,
        admit: Admit,
    ) -> CacheResult<Vec<(u64, Page)>> {
        let ps = self.page_size();
        let mut parts: Vec<(Range<u64>, Missing)> = claimed
            .into_iter()
            .map(|m| (m.page * ps + m.fetch.start..m.page * ps + m.fetch.end, m))
            .collect();
        parts.sort_by_key(|(r, _)| r.start);
        let runs = merge_runs(parts, self.merge_gap);
        let fetches = runs
            .into_iter()
            .map(|(run, members)| self.fetch_and_publish(source, object, run, members, admit));
        let mut out = Vec::new();
        let mut first_error = None;
        for result in futures::future::join_all(fetches).await {
            match result {
                Ok(pages) => out.extend(pages),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// One run of [`Self::fetch_claimed`]: fetches it, merges each page's
    /// new bytes with the part it held, admits the pages to memory, wakes
    /// the requests waiting for them, and only then writes them to disk
    /// (waiters do not wait for the disk).
    async fn fetch_and_publish(
        &self,
        source: &Source<'_>,
        object: &PinnedObject,
        run: Range<u64>,
        members: Vec<(Range<u64>, Missing)>,
        admit: Admit,
    ) -> CacheResult<Vec<(u64, Page)>> {
        let body = match self.fetch_bytes(source, object, run.clone()).await {
            Ok(body) => body,
            Err(e) => {
                for (_, m) in members {
                    m.claim.finish(Err(e.clone()));
                }
                return Err(e);
            }
        };
        let mut pages = Vec::with_capacity(members.len());
        let mut claims = Vec::with_capacity(members.len());
        for (bytes, m) in members {
            let fetched = Page {
                offset: m.fetch.start,
                bytes: body.slice((bytes.start - run.start) as usize..(bytes.end - run.start) as usize),
            };
            let page = m.held.and_then(|held| held.merge(&fetched)).unwrap_or(fetched);
            pages.push((m.page, PageKey::new(object.key.clone(), m.page), page));
            claims.push(m.claim);
        }
        // Each page's share of this GET: what refetching it costs.
        let model = self.fetch_cost.model();
        let count = pages.len();
        let kept = pages
            .iter()
            .map(|(_, k, p)| (k.clone(), p.clone(), model.share_of_request(count, p.len() as u64)))
            .collect();
        let finish = || {
            for ((_, _, page), claim) in pages.iter().zip(claims) {
                claim.finish(Ok(page.clone()));
            }
        };
        self.keep(kept, admit, finish).await;
        Ok(pages.into_iter().map(|(page, _, part)| (page, part)).collect())
    }
}

/// Pages put in [`PageStore`]'s `writing` map while their disk write runs;
/// dropped (written, failed, or the request cancelled), it takes them out.
struct BeingWritten<'a> {
    map: &'a WritingMap,
    keys: Vec<PageKey>,
}

impl<'a> BeingWritten<'a> {
    fn new<'p>(map: &'a WritingMap, pages: impl Iterator<Item = (&'p PageKey, &'p Page)>) -> Self {
        let mut keys = Vec::new();
        let mut held = map.lock();
        for (k, page) in pages {
            held.entry(k.clone())
                .and_modify(|(kept, writers)| {
                    *kept = kept.keep_with(page.clone());
                    *writers += 1;
                })
                .or_insert_with(|| (page.clone(), 1));
            keys.push(k.clone());
        }
        drop(held);
        BeingWritten { map, keys }
    }
}

impl Drop for BeingWritten<'_> {
    fn drop(&mut self) {
        let mut held = self.map.lock();
        for k in &self.keys {
            if let Some((_, writers)) = held.get_mut(k) {
                *writers -= 1;
                if *writers == 0 {
                    held.remove(k);
                }
            }
        }
    }
}

/// Byte ranges to fetch (sorted by start, disjoint) joined into runs: one
/// run per group of ranges at most `gap` bytes apart.
type Run<T> = (Range<u64>, Vec<(Range<u64>, T)>);

fn merge_runs<T>(parts: Vec<(Range<u64>, T)>, gap: u64) -> Vec<Run<T>> {
    let mut runs: Vec<Run<T>> = Vec::new();
    for (range, t) in parts {
        match runs.last_mut() {
            Some((r, members)) if range.start <= r.end + gap => {
                r.end = r.end.max(range.end);
                members.push((range, t));
            }
            _ => runs.push((range.clone(), vec![(range, t)])),
        }
    }
    runs
}

/// The pages `ranges` touch, each with the bytes needed of it (page
/// coordinates; the span of every range's part in it), sorted by page.
fn needed_parts(ranges: &[Range<u64>], page_size: u64) -> Vec<(u64, Range<u64>)> {
    let mut needs: std::collections::BTreeMap<u64, Range<u64>> = Default::default();
    for r in ranges.iter().filter(|r| r.start < r.end) {
        for page in r.start / page_size..=(r.end - 1) / page_size {
            let start = page * page_size;
            let need = r.start.max(start) - start..r.end.min(start + page_size) - start;
            needs
                .entry(page)
                .and_modify(|n| *n = n.start.min(need.start)..n.end.max(need.end))
                .or_insert(need);
        }
    }
    needs.into_iter().collect()
}

/// Whether `part` holds all of `need`.
fn covers(part: &Option<Page>, need: &Range<u64>) -> bool {
    part.as_ref().is_some_and(|p| p.covers(need))
}

/// Of two parts of a page, the one that covers `need`, else the larger.
fn better(a: Option<Page>, b: Option<Page>, need: &Range<u64>) -> Option<Page> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if a.covers(need) || (!b.covers(need) && a.len() >= b.len()) {
            a
        } else {
            b
        }),
        (a, b) => a.or(b),
    }
}

/// A failed conditional read at `version` names that version.
fn changed_version(e: CacheError, version: &ObjectVersion) -> CacheError {
    match e {
        CacheError::Changed { path, source, .. } => CacheError::Changed {
            path,
            version: version.tag.to_string(),
            source,
        },
        other => other,
    }
}

/// `range` cut out of the loaded `pages` (of `page_size` bytes each).
fn assemble(
    range: &Range<u64>,
    page_size: u64,
    pages: &HashMap<u64, Page>,
    path: &Path,
    size: u64,
) -> CacheResult<Bytes> {
    if range.start >= range.end {
        return Ok(Bytes::new());
    }
    let part_of = |page: u64| {
        let start = page * page_size;
        let need = range.start.max(start) - start..range.end.min(start + page_size) - start;
        let held = pages.get(&page);
        held.and_then(|p| p.slice(&need)).ok_or_else(|| CacheError::Corrupt {
            path: path.to_string(),
            detail: format!(
                "page {page} holds bytes {:?} where {need:?} were expected (object of {size} bytes)",
                held.map(Page::range)
            ),
        })
    };
    let (first, last) = (range.start / page_size, (range.end - 1) / page_size);
    if first == last {
        // One page: a slice, no copy.
        return part_of(first);
    }
    let mut out = BytesMut::with_capacity((range.end - range.start) as usize);
    for page in first..=last {
        out.extend_from_slice(&part_of(page)?);
    }
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page_cache::still_needed;

    #[test]
    fn runs_join_when_close() {
        let runs = merge_runs(vec![(10..20, ()), (20..25, ()), (35..40, ()), (90..95, ())], 10);
        let spans: Vec<Range<u64>> = runs.iter().map(|(r, _)| r.clone()).collect();
        assert_eq!(spans, vec![10..40, 90..95]);
        assert_eq!(runs[0].1.len(), 3);
        assert!(merge_runs::<()>(vec![], 4).is_empty());
    }

    #[test]
    fn a_read_needs_the_span_of_its_ranges_in_each_page() {
        let parts = needed_parts(&[5..37, 40..41, 50..50, 60..64], 16);
        assert_eq!(parts, vec![(0, 5..16), (1, 0..16), (2, 0..9), (3, 12..16)]);
    }

    #[test]
    fn a_part_apart_from_the_held_one_is_fetched_with_the_gap_between() {
        assert_eq!(fetch_joining(&(40..50), Some(0..10)), 10..50);
        assert_eq!(fetch_joining(&(0..10), Some(40..50)), 0..40);
        // Otherwise what `still_needed` fetches.
        assert_eq!(fetch_joining(&(0..64), Some(0..10)), 10..64);
        assert_eq!(fetch_joining(&(10..64), Some(0..10)), 10..64, "touching");
        assert_eq!(fetch_joining(&(0..64), Some(20..30)), 0..64);
        assert_eq!(fetch_joining(&(30..40), None), 30..40);
    }

    #[test]
    fn only_what_a_held_part_lacks_is_fetched() {
        assert_eq!(still_needed(&(0..64), Some(0..10)), 10..64);
        assert_eq!(still_needed(&(0..64), Some(50..64)), 0..50);
        assert_eq!(still_needed(&(10..64), Some(0..10)), 10..64, "touching");
        assert_eq!(still_needed(&(0..64), Some(20..30)), 0..64, "inside: two gaps");
        assert_eq!(still_needed(&(30..40), None), 30..40);
        assert_eq!(
            still_needed(&(30..40), Some(0..64)),
            30..40,
            "covered: never an inverted range"
        );
    }

    /// Writes `fill` x 64 bytes to `file` (a new file renamed into place) with
    /// modification time `mtime`.
    fn write_object(file: &std::path::Path, fill: u8, mtime: std::time::SystemTime) {
        let tmp = file.with_extension("tmp");
        std::fs::write(&tmp, vec![fill; 64]).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&tmp)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        std::fs::rename(tmp, file).unwrap();
    }

    /// A listing without ETags cannot tell apart two same-size versions
    /// written in the same second: the ETag the first answer taught must
    /// hold for that version's key even after invalidation dropped the
    /// version, or a later pin of it (a query started speculatively on the
    /// old listing) caches the new bytes under the old key beside old ones.
    #[tokio::test]
    async fn a_learned_etag_outlives_the_invalidation_of_its_version() {
        use crate::{CacheMetrics, PageCacheConfig};
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("o.bin");
        let mtime = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        write_object(&file, 1, mtime);
        let store = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
        let path = Path::from("o.bin");
        let mut listed = object_store::ObjectStoreExt::head(&store, &path).await.unwrap();
        listed.e_tag = None; // as a listing without ETags reports it
        let pin = || PinnedObject::new("s".into(), "o.bin".into(), ObjectVersion::from_meta(&listed));
        let pages = PageStore::builder(PageCache::new(
            PageCacheConfig {
                page_size: 16,
                capacity_bytes: 1 << 20,
            },
            CacheMetrics::noop(),
        ))
        .build();
        let counters = TableCounters::default();
        let read = |object: PinnedObject, range: Range<u64>| {
            let (pages, store, path, counters) = (pages.clone(), &store, &path, &counters);
            async move {
                let source = Source { store, path };
                pages
                    .read(source, &object, &[range], Admit::MemoryAndDisk, counters)
                    .await
                    .map(|mut b| b.remove(0))
            }
        };
        assert_eq!(&read(pin(), 0..16).await.unwrap()[..], &[1; 16]);

        // Another version becomes current; then the object is overwritten
        // with bytes of the same size and modification time.
        pages.drop_other_versions(&ObjectKey::new("s", "o.bin", "another"), true);
        write_object(&file, 2, mtime);
        let err = read(pin(), 16..32).await.unwrap_err();
        assert!(err.is_changed(), "{err}");
    }
}
