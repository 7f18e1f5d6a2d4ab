//! `PageStore`: the cache of object bytes. Memory pages in front of disk
//! pages in front of the object store, for pinned object versions.
//!
//! A read names one [`PinnedObject`] (an object at one version) and the
//! ranges it wants. The ranges are widened to pages; pages are looked up in
//! memory ([`PageCache`]), then on disk ([`PageTier`]); the missing ones are
//! claimed in [`InFlight`] (a page another request is fetching is awaited,
//! not fetched twice), grouped into runs (runs separated by at most
//! `merge_gap` bytes are joined), fetched with one ranged GET per run carrying
//! `If-Match` on the pinned ETag, checked (length, version of the answer),
//! admitted to memory, published to waiters as each run arrives, and then
//! written to disk (a waiter does not wait for the disk write; the request
//! that fetched does, so a read that returned has its pages on disk; reads
//! in between find the pages in the `writing` map).
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

use crate::counters::TableCounters;
use crate::error::{CacheError, CacheResult};
use crate::inflight::{Claim, FetchClaim, InFlight};
use crate::key::{ObjectKey, PinnedObject};
use crate::page_cache::{PageCache, PageKey};
use crate::policy::{CostModel, MeasuredCost};
use crate::version::ObjectVersion;

/// A tier below memory that keeps pages (the disk tier). A trait so the read
/// path does not depend on how pages are stored. Calls block on I/O; callers
/// run them on blocking threads.
pub trait PageTier: Send + Sync {
    /// The page's verified bytes, or `None` on a miss.
    fn get(&self, key: &PageKey) -> Option<Bytes>;
    /// Several pages at once (`None` where missed): a tier that can read
    /// neighbouring pages in one request does so.
    fn get_many(&self, keys: &[PageKey]) -> Vec<Option<Bytes>> {
        keys.iter().map(|k| self.get(k)).collect()
    }
    /// Keeps a page (best effort: a failed write is logged and counted).
    /// `cost` is the estimated time in ns to fetch it again, measured by the
    /// fetch that brought it (its share of that GET), for cost-aware eviction.
    fn put(&self, key: PageKey, data: &[u8], cost: f64);
    /// Drops the pages of `keep`'s object whose version is not `keep`'s.
    fn drop_other_versions(&self, keep: &ObjectKey) -> usize;
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
    writing: parking_lot::Mutex<HashMap<PageKey, Bytes>>,
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
        let mut wanted: Vec<u64> = ranges
            .iter()
            .filter(|r| r.start < r.end)
            .flat_map(|r| r.start / ps..=(r.end - 1) / ps)
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
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

    /// The bytes of pages `wanted` (sorted, distinct): from memory, disk, a
    /// fetch in flight, or the store.
    async fn load_pages(
        &self,
        source: &Source<'_>,
        object: &PinnedObject,
        wanted: &[u64],
        admit: Admit,
        counters: &TableCounters,
    ) -> CacheResult<HashMap<u64, Bytes>> {
        let keys: Vec<PageKey> = wanted.iter().map(|&p| PageKey::new(object.key.clone(), p)).collect();
        let found = self.lookup(&keys, admit).await;
        let hits = found.iter().filter(|p| p.is_some()).count() as u64;
        let span = tracing::Span::current();
        span.record("page_hits", hits);
        span.record("page_misses", found.len() as u64 - hits);
        counters.hits.fetch_add(hits, Ordering::Relaxed);
        counters.misses.fetch_add(found.len() as u64 - hits, Ordering::Relaxed);

        // Claim the missing pages: fetch those nobody else is fetching, wait for the rest.
        let mut pages = HashMap::with_capacity(wanted.len());
        let mut claimed = Vec::new();
        let mut waiting = Vec::new();
        for ((page, key), hit) in wanted.iter().zip(&keys).zip(found) {
            match hit {
                Some(bytes) => {
                    pages.insert(*page, bytes);
                }
                None => match self.inflight.claim(key) {
                    Claim::Fetch(tx) => claimed.push((*page, tx)),
                    Claim::Wait(rx) => waiting.push((*page, rx)),
                },
            }
        }
        if !claimed.is_empty() {
            pages.extend(self.fetch_claimed(source, object, claimed, admit).await?);
        }
        for (page, rx) in waiting {
            let bytes = match InFlight::wait(rx).await {
                Some(outcome) => outcome?,
                // The request fetching it went away: fetch it here.
                None => self.fetch_run(source, object, page..page + 1).await?,
            };
            pages.insert(page, bytes);
        }
        Ok(pages)
    }

    /// Looks pages up in memory (the memory pages, then those whose disk
    /// write is under way), then on disk; `None` where all miss.
    async fn lookup(&self, keys: &[PageKey], admit: Admit) -> Vec<Option<Bytes>> {
        let mut found: Vec<Option<Bytes>> = keys
            .iter()
            .map(|k| self.memory.get(k).or_else(|| self.writing.lock().get(k).cloned()))
            .collect();
        for hit in &found {
            self.memory.metrics.record_lookup(hit.as_ref().map(Bytes::len));
        }
        let Some(disk) = self.disk.clone() else {
            return found;
        };
        let wanted: Vec<(usize, PageKey)> = keys
            .iter()
            .zip(&found)
            .enumerate()
            .filter(|(_, (_, f))| f.is_none())
            .map(|(i, (k, _))| (i, k.clone()))
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
            if let Some(page) = page {
                if admit == Admit::MemoryAndDisk {
                    self.memory.insert(key, page.clone());
                }
                found[i] = Some(page);
            }
        }
        found
    }

    /// Writes fetched pages to the disk tier (if any) on a blocking thread.
    /// Each page comes with its refetch cost in ns (for the disk tier's policy).
    async fn write_to_disk(&self, pages: Vec<(PageKey, Bytes, f64)>) {
        if let Some(disk) = self.disk.clone() {
            let _ = tokio::task::spawn_blocking(move || {
                for (k, b, cost) in pages {
                    disk.put(k, &b, cost);
                }
            })
            .await;
        }
    }

    /// One GET for pages `run` of `object`, conditional on its version and
    /// checked for length and version.
    async fn fetch_run(&self, source: &Source<'_>, object: &PinnedObject, run: Range<u64>) -> CacheResult<Bytes> {
        let ps = self.page_size();
        let version = &object.version;
        let start = run.start * ps;
        let end = (run.end * ps).min(version.size);
        let expected = self.expected_etag(object);
        let opts = GetOptions {
            range: Some(GetRange::Bounded(start..end)),
            if_match: expected.clone(),
            ..Default::default()
        };
        let path = source.path;
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

    /// Fetches the pages this request claimed, in merged runs (one GET each,
    /// all at once), publishing each page (or the run's error) to the
    /// requests waiting for it as soon as its run arrives.
    async fn fetch_claimed(
        &self,
        source: &Source<'_>,
        object: &PinnedObject,
        mut claimed: Vec<(u64, FetchClaim)>,
        admit: Admit,
    ) -> CacheResult<Vec<(u64, Bytes)>> {
        let ps = self.page_size();
        claimed.sort_by_key(|(p, _)| *p);
        let runs = merge_runs(claimed, self.merge_gap / ps.max(1));
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

    /// One run of [`Self::fetch_claimed`]: fetches it, admits its pages to
    /// memory, wakes the requests waiting for them, and only then writes
    /// them to disk (waiters do not wait for the disk).
    async fn fetch_and_publish(
        &self,
        source: &Source<'_>,
        object: &PinnedObject,
        run: Range<u64>,
        members: Vec<(u64, FetchClaim)>,
        admit: Admit,
    ) -> CacheResult<Vec<(u64, Bytes)>> {
        let body = match self.fetch_run(source, object, run.clone()).await {
            Ok(body) => body,
            Err(e) => {
                for (_, claim) in members {
                    claim.finish(Err(e.clone()));
                }
                return Err(e);
            }
        };
        let ps = self.page_size();
        let pages: Vec<(u64, PageKey, Bytes)> = members
            .iter()
            .map(|(page, _)| {
                let lo = ((page - run.start) * ps) as usize;
                let hi = (lo + ps as usize).min(body.len());
                (*page, PageKey::new(object.key.clone(), *page), body.slice(lo..hi))
            })
            .collect();
        // Findable by later reads until the disk write lands.
        let pending = self
            .disk
            .is_some()
            .then(|| BeingWritten::new(&self.writing, pages.iter().map(|(_, k, b)| (k, b))));
        for ((_, key, bytes), (_, claim)) in pages.iter().zip(members) {
            if admit == Admit::MemoryAndDisk || self.disk.is_none() {
                self.memory.insert(key.clone(), bytes.clone());
            }
            claim.finish(Ok(bytes.clone()));
        }
        // Each page's share of this GET: what refetching it costs.
        let model = self.fetch_cost.model();
        let count = pages.len();
        self.write_to_disk(
            pages
                .iter()
                .map(|(_, k, b)| (k.clone(), b.clone(), model.share_of_request(count, b.len() as u64)))
                .collect(),
        )
        .await;
        drop(pending);
        Ok(pages.into_iter().map(|(page, _, bytes)| (page, bytes)).collect())
    }
}

/// Pages put in [`PageStore`]'s `writing` map while their disk write runs;
/// dropped (written, failed, or the request cancelled), it takes them out.
struct BeingWritten<'a> {
    map: &'a parking_lot::Mutex<HashMap<PageKey, Bytes>>,
    keys: Vec<PageKey>,
}

impl<'a> BeingWritten<'a> {
    fn new<'p>(
        map: &'a parking_lot::Mutex<HashMap<PageKey, Bytes>>,
        pages: impl Iterator<Item = (&'p PageKey, &'p Bytes)>,
    ) -> Self {
        let mut keys = Vec::new();
        let mut held = map.lock();
        for (k, b) in pages {
            held.insert(k.clone(), b.clone());
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
            held.remove(k);
        }
    }
}

/// Runs of claimed pages (sorted), joining runs at most `gap_pages` apart.
type Run<T> = (Range<u64>, Vec<(u64, T)>);

fn merge_runs<T>(claimed: Vec<(u64, T)>, gap_pages: u64) -> Vec<Run<T>> {
    let mut runs: Vec<Run<T>> = Vec::new();
    for (page, t) in claimed {
        match runs.last_mut() {
            Some((r, members)) if page <= r.end + gap_pages => {
                r.end = page + 1;
                members.push((page, t));
            }
            _ => runs.push((page..page + 1, vec![(page, t)])),
        }
    }
    runs
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
    pages: &HashMap<u64, Bytes>,
    path: &Path,
    size: u64,
) -> CacheResult<Bytes> {
    if range.start >= range.end {
        return Ok(Bytes::new());
    }
    let (first, last) = (range.start / page_size, (range.end - 1) / page_size);
    if first == last
        && let Some(page) = pages.get(&first)
    {
        // One page: a slice, no copy.
        let lo = (range.start - first * page_size) as usize;
        let hi = (range.end - first * page_size) as usize;
        return short_page(page, hi, path, size).map(|()| page.slice(lo..hi));
    }
    let mut out = BytesMut::with_capacity((range.end - range.start) as usize);
    for page in first..=last {
        let bytes = pages.get(&page).cloned().unwrap_or_default();
        let page_start = page * page_size;
        let lo = range.start.saturating_sub(page_start) as usize;
        let hi = ((range.end - page_start) as usize).min(page_size as usize);
        short_page(&bytes, hi, path, size)?;
        out.extend_from_slice(&bytes[lo..hi]);
    }
    Ok(out.freeze())
}

/// A page must hold the bytes asked of it (only an object's last page is short).
fn short_page(page: &Bytes, needed: usize, path: &Path, size: u64) -> CacheResult<()> {
    if page.len() < needed {
        return Err(CacheError::Corrupt {
            path: path.to_string(),
            detail: format!(
                "a cached page holds {} bytes where {needed} were expected (object of {size} bytes)",
                page.len()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_join_when_close() {
        let runs = merge_runs(vec![(1, ()), (2, ()), (4, ()), (9, ())], 1);
        let spans: Vec<Range<u64>> = runs.iter().map(|(r, _)| r.clone()).collect();
        assert_eq!(spans, vec![1..5, 9..10]);
        assert_eq!(runs[0].1.len(), 3);
        assert!(merge_runs::<()>(vec![], 4).is_empty());
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
