//! `CachedStore`: the one interface through which the server reads objects.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    Attributes, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, ObjectMeta, ObjectStore, Result,
};

use crate::freshness::Freshness;
use crate::inflight::{Claim, InFlight};
use crate::page_cache::PageKey;
use crate::tiers::{CacheTiers, Validation};
use crate::version::ObjectVersion;

/// Reads of one table, for its hit ratio in `silt stats`.
#[derive(Debug, Default)]
pub struct TableCounters {
    /// Pages found in the page buffer or on disk.
    pub hits: AtomicU64,
    /// Pages fetched from the object store (or from another query's fetch).
    pub misses: AtomicU64,
    /// Column batches found in the memory tier (counted by the scan).
    pub batch_hits: AtomicU64,
    /// Column batches decoded because the memory tier lacked them.
    pub batch_misses: AtomicU64,
}

/// A cached listing: when it was made and what it returned.
type Listing = (Instant, Arc<Vec<ObjectMeta>>);

/// Serves ranged reads from the shared tiers (memory, then disk), fetching
/// only missing pages from the wrapped store: adjacent missing pages, and
/// runs separated by small gaps, in one ranged GET; a page several queries
/// miss at once, once.
///
/// Paths are namespaced: the query engine sees every object of this store
/// under `namespace/`, so that paths are unique across the tables of a
/// server and DataFusion's per-path caches (footers, statistics) can never
/// confuse two buckets that hold the same key.
///
/// Versions come from the LIST/HEAD responses that pass through this
/// wrapper; a ranged read of an object never listed is preceded by a HEAD.
/// How long a validation is trusted is the table's [`Freshness`].
/// Cloning is cheap and clones share everything.
#[derive(Clone)]
pub struct CachedStore {
    inner: Arc<dyn ObjectStore>,
    tiers: Arc<CacheTiers>,
    store_id: Arc<str>,
    namespace: Path,
    freshness: Freshness,
    listings: Arc<Mutex<HashMap<Option<Path>, Listing>>>,
    counters: Arc<TableCounters>,
}

impl CachedStore {
    /// Wrap `inner`. `store_id` distinguishes stores that share `tiers`; it is
    /// also the namespace under which the query engine sees their objects.
    pub fn new(
        inner: Arc<dyn ObjectStore>,
        tiers: Arc<CacheTiers>,
        store_id: impl Into<Arc<str>>,
        freshness: Freshness,
    ) -> Self {
        let store_id: Arc<str> = store_id.into();
        CachedStore {
            inner,
            tiers,
            namespace: Path::from(store_id.as_ref()),
            store_id,
            freshness,
            listings: Arc::default(),
            counters: Arc::default(),
        }
    }

    /// Page hits and misses of reads through this store.
    pub fn counters(&self) -> &TableCounters {
        &self.counters
    }

    /// The id that keys this store's entries in the shared tiers.
    pub fn store_id(&self) -> &Arc<str> {
        &self.store_id
    }

    /// The path prefix under which this store's objects appear.
    pub fn namespace(&self) -> &Path {
        &self.namespace
    }

    /// The store's own path of a namespaced path.
    fn strip(&self, location: &Path) -> Result<Path> {
        match location.prefix_match(&self.namespace) {
            Some(parts) => Ok(Path::from_iter(parts)),
            None => Err(object_store::Error::NotFound {
                path: location.to_string(),
                source: format!("{location} is outside this store's namespace {}", self.namespace).into(),
            }),
        }
    }

    /// The namespaced path of one of the store's own paths (what the query
    /// engine sees for `location`).
    pub fn qualify(&self, location: &Path) -> Path {
        Path::from_iter(self.namespace.parts().chain(location.parts()))
    }

    /// The store id and the store's own path of a namespaced path: with a
    /// version, what keys the object's entries in every tier.
    pub fn object_id(&self, location: &Path) -> Result<(Arc<str>, Arc<str>)> {
        Ok((self.store_id.clone(), Arc::from(self.strip(location)?.to_string())))
    }

    fn qualify_meta(&self, mut meta: ObjectMeta) -> ObjectMeta {
        meta.location = self.qualify(&meta.location);
        meta
    }

    /// Records a validated version (by namespaced path); pages of any other
    /// version of the object are dropped from every tier.
    fn remember(&self, meta: &ObjectMeta) {
        let v = ObjectVersion::from_meta(meta);
        let seen = self.tiers.versions.record(&meta.location, v.clone());
        if seen != Validation::Unchanged {
            let path: Arc<str> = Arc::from(self.strip(&meta.location).map(|p| p.to_string()).unwrap_or_default());
            self.tiers.drop_other_versions(&self.store_id, &path, &v.tag, seen);
        }
    }

    /// The version to read `location` (namespaced) at: the last validated one
    /// while the table's freshness trusts it, else a HEAD.
    async fn version_of(&self, location: &Path) -> Result<ObjectVersion> {
        if let Some((v, at)) = self.tiers.versions.get(location)
            && (self.freshness.still_valid(at.elapsed()) || self.freshness == Freshness::Always)
        {
            // `always` validates once per query, by the LIST or HEAD the query
            // engine makes when it plans; reads within the query use that version.
            return Ok(v);
        }
        let meta = self.head_inner(location).await?;
        Ok(ObjectVersion::from_meta(&meta))
    }

    async fn head_inner(&self, location: &Path) -> Result<ObjectMeta> {
        let inner_path = self.strip(location)?;
        match self
            .inner
            .get_opts(&inner_path, GetOptions::new().with_head(true))
            .await
        {
            Ok(r) => {
                let meta = self.qualify_meta(r.meta);
                self.remember(&meta);
                Ok(meta)
            }
            Err(e) => {
                if matches!(e, object_store::Error::NotFound { .. }) {
                    self.tiers.versions.forget(location);
                }
                Err(e)
            }
        }
    }

    fn key(&self, inner_path: &Arc<str>, version: &ObjectVersion, page: u64) -> PageKey {
        PageKey {
            store: self.store_id.clone(),
            path: inner_path.clone(),
            version: version.tag.clone(),
            page,
        }
    }

    /// Looks pages up in memory, then on disk; `None` where both miss.
    async fn lookup(&self, keys: &[PageKey], admit_memory: bool) -> Vec<Option<Bytes>> {
        let memory = &self.tiers.pages;
        let mut found: Vec<Option<Bytes>> = keys.iter().map(|k| memory.get(k)).collect();
        for hit in &found {
            memory.metrics.record_lookup(hit.as_ref().map(Bytes::len));
        }
        let Some(disk) = self.tiers.disk.clone() else {
            return found;
        };
        let wanted: Vec<PageKey> = keys
            .iter()
            .zip(&found)
            .filter(|(_, f)| f.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        if wanted.is_empty() {
            return found;
        }
        let from_disk = tokio::task::spawn_blocking(move || {
            wanted
                .into_iter()
                .map(|k| {
                    let page = disk.get(&k);
                    (k, page)
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let mut from_disk = from_disk.into_iter();
        for (key, slot) in keys.iter().zip(found.iter_mut()) {
            if slot.is_none()
                && let Some((k, page)) = from_disk.next()
            {
                debug_assert_eq!(&k, key);
                if let Some(page) = page {
                    if admit_memory {
                        memory.insert(k, page.clone());
                    }
                    *slot = Some(page);
                }
            }
        }
        found
    }

    /// Admits fetched pages to memory (unless `memory` is false and there is
    /// a disk tier to hold them) and, on a blocking thread, to disk, each
    /// with its refetch cost in ns (for the disk tier's policy).
    async fn admit(&self, pages: Vec<(PageKey, Bytes, f64)>, memory: bool) {
        if memory || self.tiers.disk.is_none() {
            for (k, b, _) in &pages {
                self.tiers.pages.insert(k.clone(), b.clone());
            }
        }
        if let Some(disk) = self.tiers.disk.clone() {
            let _ = tokio::task::spawn_blocking(move || {
                for (k, b, cost) in pages {
                    disk.put(k, &b, cost);
                }
            })
            .await;
        }
    }

    /// One GET for pages `run` of the object, checked for length.
    async fn fetch_run(&self, inner_path: &Path, version: &ObjectVersion, run: Range<u64>) -> Result<Bytes> {
        let ps = self.tiers.page_size();
        let start = run.start * ps;
        let end = (run.end * ps).min(version.size);
        let opts = GetOptions {
            range: Some(GetRange::Bounded(start..end)),
            if_match: version.e_tag.clone(),
            ..Default::default()
        };
        let started = Instant::now();
        let body = self.inner.get_opts(inner_path, opts).await?.bytes().await?;
        if body.len() as u64 != end - start {
            return Err(object_store::Error::Generic {
                store: "silt-cache",
                source: format!(
                    "short read of {inner_path}: asked for {} bytes at offset {start}, got {}",
                    end - start,
                    body.len()
                )
                .into(),
            });
        }
        self.tiers.fetch_cost.observe(body.len() as u64, started.elapsed());
        self.tiers.pages.metrics.miss_bytes.increment(body.len() as u64);
        Ok(body)
    }

    /// Fetches the pages this request claimed, in merged runs, publishing
    /// each page to the requests waiting for it.
    async fn fetch_claimed(
        &self,
        inner_path: &Path,
        path: &Arc<str>,
        version: &ObjectVersion,
        mut claimed: Vec<(u64, tokio::sync::watch::Sender<Option<crate::inflight::Outcome>>)>,
        admit_memory: bool,
    ) -> Result<Vec<(u64, Bytes)>> {
        let ps = self.tiers.page_size();
        claimed.sort_by_key(|(p, _)| *p);
        let gap_pages = self.tiers.merge_gap / ps.max(1);
        // Runs of claimed pages; runs closer than the merge gap are joined.
        let mut runs: Vec<(Range<u64>, Vec<usize>)> = Vec::new();
        for (i, (page, _)) in claimed.iter().enumerate() {
            match runs.last_mut() {
                Some((r, members)) if *page <= r.end + gap_pages => {
                    r.end = page + 1;
                    members.push(i);
                }
                _ => runs.push((*page..page + 1, vec![i])),
            }
        }
        let fetches = runs
            .iter()
            .map(|(run, _)| self.fetch_run(inner_path, version, run.clone()));
        let results = futures::future::join_all(fetches).await;
        let mut slots: Vec<Option<_>> = claimed.into_iter().map(Some).collect();
        let mut out = Vec::new();
        let mut first_error = None;
        for ((run, members), result) in runs.iter().zip(results) {
            match result {
                Ok(body) => {
                    // Each page's share of this GET: what refetching it costs.
                    let model = self.tiers.fetch_cost.model();
                    let cost = |b: &Bytes| model.share_of_request(members.len(), b.len() as u64);
                    let mut admitted = Vec::with_capacity(members.len());
                    for &i in members {
                        let (page, tx) = slots[i].take().expect("each claimed page is in one run");
                        let lo = ((page - run.start) * ps) as usize;
                        let hi = (lo + ps as usize).min(body.len());
                        let bytes = body.slice(lo..hi);
                        admitted.push((self.key(path, version, page), bytes.clone(), tx));
                        out.push((page, bytes));
                    }
                    self.admit(
                        admitted
                            .iter()
                            .map(|(k, b, _)| (k.clone(), b.clone(), cost(b)))
                            .collect(),
                        admit_memory,
                    )
                    .await;
                    for (k, b, tx) in admitted {
                        self.tiers.inflight.finish(&k, tx, Ok(b));
                    }
                }
                Err(e) => {
                    let msg: Arc<str> = Arc::from(e.to_string());
                    for &i in members {
                        let (page, tx) = slots[i].take().expect("each claimed page is in one run");
                        self.tiers
                            .inflight
                            .finish(&self.key(path, version, page), tx, Err(msg.clone()));
                    }
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Read `ranges` of `location` (namespaced) at `version`, through the
    /// tiers. The pages of all ranges are loaded together, so ranges that
    /// share pages or lie close together cost one GET, not one each.
    async fn read_ranges(
        &self,
        location: &Path,
        version: &ObjectVersion,
        ranges: &[Range<u64>],
        admit_memory: bool,
    ) -> Result<Vec<Bytes>> {
        let ps = self.tiers.page_size();
        let mut wanted: Vec<u64> = ranges
            .iter()
            .filter(|r| r.start < r.end)
            .flat_map(|r| r.start / ps..=(r.end - 1) / ps)
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        let pages = self.load_pages(location, version, &wanted, admit_memory).await?;
        ranges
            .iter()
            .map(|range| {
                if range.start >= range.end {
                    return Ok(Bytes::new());
                }
                let mut out = BytesMut::with_capacity((range.end - range.start) as usize);
                for page in range.start / ps..=(range.end - 1) / ps {
                    let bytes = pages.get(&page).cloned().unwrap_or_default();
                    let page_start = page * ps;
                    let lo = range.start.saturating_sub(page_start) as usize;
                    let hi = ((range.end - page_start) as usize).min(bytes.len());
                    if lo > hi {
                        return Err(object_store::Error::Generic {
                            store: "silt-cache",
                            source: format!(
                                "range {range:?} is beyond the end of {location} ({} bytes)",
                                version.size
                            )
                            .into(),
                        });
                    }
                    out.extend_from_slice(&bytes[lo..hi]);
                }
                Ok(out.freeze())
            })
            .collect()
    }

    /// The bytes of pages `wanted` (sorted, distinct): from memory, disk, a
    /// fetch in flight, or the store.
    async fn load_pages(
        &self,
        location: &Path,
        version: &ObjectVersion,
        wanted: &[u64],
        admit_memory: bool,
    ) -> Result<HashMap<u64, Bytes>> {
        let inner_path = self.strip(location)?;
        let path: Arc<str> = Arc::from(inner_path.as_ref());
        let keys: Vec<PageKey> = wanted.iter().map(|p| self.key(&path, version, *p)).collect();
        let found = self.lookup(&keys, admit_memory).await;
        let hits = found.iter().filter(|p| p.is_some()).count() as u64;
        self.counters.hits.fetch_add(hits, Ordering::Relaxed);
        self.counters
            .misses
            .fetch_add(found.len() as u64 - hits, Ordering::Relaxed);

        // Claim the missing pages: fetch those nobody else is fetching, wait for the rest.
        let mut pages = HashMap::with_capacity(wanted.len());
        let mut claimed = Vec::new();
        let mut waiting = Vec::new();
        for ((page, key), hit) in wanted.iter().zip(&keys).zip(found) {
            match hit {
                Some(bytes) => {
                    pages.insert(*page, bytes);
                }
                None => match self.tiers.inflight.claim(key) {
                    Claim::Fetch(tx) => claimed.push((*page, tx)),
                    Claim::Wait(rx) => waiting.push((*page, rx)),
                },
            }
        }
        if !claimed.is_empty() {
            pages.extend(
                self.fetch_claimed(&inner_path, &path, version, claimed, admit_memory)
                    .await?,
            );
        }
        for (page, rx) in waiting {
            let bytes = match InFlight::wait(rx).await {
                Some(Ok(bytes)) => bytes,
                Some(Err(msg)) => {
                    return Err(object_store::Error::Generic {
                        store: "silt-cache",
                        source: msg.to_string().into(),
                    });
                }
                // The request fetching it went away: fetch it here.
                None => self.fetch_run(&inner_path, version, page..page + 1).await?,
            };
            pages.insert(page, bytes);
        }
        Ok(pages)
    }

    /// Reads `range` of `location` (namespaced) into the disk tier, and into
    /// memory when `memory` is set (or when there is no disk tier); for preload.
    pub async fn warm(&self, location: &Path, range: Range<u64>, memory: bool) -> Result<()> {
        let version = self.version_of(location).await?;
        let range = resolve(&GetRange::Bounded(range), version.size, location)?;
        self.read_ranges(location, &version, &[range], memory).await.map(|_| ())
    }

    /// The version a read of `location` (namespaced) uses now, as `get_opts`
    /// would: the last validated one while the table's freshness trusts it,
    /// else a HEAD. For byte serving, which must pin one version across the
    /// several reads of one response (see [`CachedStore::read_at`]).
    pub async fn read_version(&self, location: &Path) -> Result<ObjectVersion> {
        self.version_of(location).await
    }

    /// Asks the store for the current version of `location` (namespaced)
    /// whatever the freshness says, and records it: for a reader that found
    /// the version it held gone (a read at it failed its `If-Match`).
    pub async fn revalidate(&self, location: &Path) -> Result<ObjectVersion> {
        Ok(ObjectVersion::from_meta(&self.head_inner(location).await?))
    }

    /// Reads `range` of `location` (namespaced) at exactly `version`, through
    /// the tiers. Misses are fetched with `If-Match` on the version's ETag, so
    /// if the object changed since, the read fails (`Precondition`) rather
    /// than mixing bytes of two versions in one response.
    pub async fn read_at(&self, location: &Path, version: &ObjectVersion, range: Range<u64>) -> Result<Bytes> {
        let range = resolve(&GetRange::Bounded(range), version.size, location)?;
        let mut bytes = self
            .read_ranges(location, version, std::slice::from_ref(&range), true)
            .await?;
        Ok(bytes.pop().unwrap_or_default())
    }

    /// Lists through the store, or from a listing the table's freshness still trusts.
    async fn listing(&self, prefix: Option<&Path>) -> Result<Arc<Vec<ObjectMeta>>> {
        let key = prefix.cloned();
        if let Some((at, metas)) = self.listings.lock().unwrap_or_else(|e| e.into_inner()).get(&key)
            && self.freshness.still_valid(at.elapsed())
        {
            return Ok(metas.clone());
        }
        let inner_prefix = match prefix {
            Some(p) => Some(self.strip(p)?),
            None => None,
        };
        let metas: Vec<ObjectMeta> = futures::TryStreamExt::try_collect(self.inner.list(inner_prefix.as_ref())).await?;
        let metas: Vec<ObjectMeta> = metas.into_iter().map(|m| self.qualify_meta(m)).collect();
        for m in &metas {
            self.remember(m);
        }
        let metas = Arc::new(metas);
        if self.freshness != Freshness::Always {
            self.listings
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key, (Instant::now(), metas.clone()));
        }
        Ok(metas)
    }
}

fn resolve(range: &GetRange, size: u64, location: &Path) -> Result<Range<u64>> {
    let r = match range {
        GetRange::Bounded(r) => r.start..r.end.min(size),
        GetRange::Offset(o) => *o..size,
        GetRange::Suffix(n) => size.saturating_sub(*n)..size,
    };
    if r.start > size || r.start > r.end {
        return Err(object_store::Error::Generic {
            store: "silt-cache",
            source: format!("invalid range {range:?} for {location} of {size} bytes").into(),
        });
    }
    Ok(r)
}

silt_store::read_path_store!(CachedStore, "CachedStore", {
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        if options.head && options.if_match.is_none() && options.if_none_match.is_none() && options.version.is_none() {
            let meta = match self.tiers.versions.get(location) {
                Some((v, at)) if self.freshness.still_valid(at.elapsed()) => v.meta,
                _ => self.head_inner(location).await?,
            };
            return Ok(GetResult {
                payload: GetResultPayload::Stream(futures::stream::empty().boxed()),
                range: 0..0,
                meta,
                attributes: Attributes::default(),
            });
        }
        let plain_range = options.if_match.is_none()
            && options.if_none_match.is_none()
            && options.if_modified_since.is_none()
            && options.if_unmodified_since.is_none()
            && options.version.is_none()
            && !options.head;
        let Some(range) = options.range.clone().filter(|_| plain_range) else {
            let mut result = self.inner.get_opts(&self.strip(location)?, options).await?;
            result.meta = self.qualify_meta(result.meta);
            self.remember(&result.meta);
            return Ok(result);
        };
        let version = self.version_of(location).await?;
        let range = resolve(&range, version.size, location)?;
        let bytes = self
            .read_ranges(location, &version, std::slice::from_ref(&range), true)
            .await?
            .pop()
            .unwrap_or_default();
        Ok(silt_store::wrapper::buffered_result(
            version.meta,
            range,
            Attributes::default(),
            bytes,
        ))
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let version = self.version_of(location).await?;
        let ranges = ranges
            .iter()
            .map(|r| resolve(&GetRange::Bounded(r.clone()), version.size, location))
            .collect::<Result<Vec<_>>>()?;
        self.read_ranges(location, &version, &ranges, true).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        // Listings are small next to the data; collecting one lets a listing
        // be reused for as long as the table's freshness allows.
        let this = self.clone();
        let prefix = prefix.cloned();
        futures::stream::once(async move {
            match this.listing(prefix.as_ref()).await {
                Ok(metas) => futures::stream::iter((*metas).clone().into_iter().map(Ok)).boxed(),
                Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
            }
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let inner_prefix = match prefix {
            Some(p) => Some(self.strip(p)?),
            None => None,
        };
        let r = self.inner.list_with_delimiter(inner_prefix.as_ref()).await?;
        let objects: Vec<ObjectMeta> = r.objects.into_iter().map(|m| self.qualify_meta(m)).collect();
        for meta in &objects {
            self.remember(meta);
        }
        Ok(ListResult {
            common_prefixes: r.common_prefixes.iter().map(|p| self.qualify(p)).collect(),
            objects,
        })
    }
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BatchCache, CacheMetrics, PageCache, PageCacheConfig};
    use futures::TryStreamExt;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;
    use silt_store::{MeteredStore, StoreMetrics};

    fn tiers(page: u64, merge_gap: u64) -> Arc<CacheTiers> {
        let cache = PageCache::new(
            PageCacheConfig {
                page_size: page,
                capacity_bytes: 1 << 20,
            },
            CacheMetrics::noop(),
        );
        CacheTiers::new(BatchCache::new(1 << 20, CacheMetrics::noop()), cache, None, merge_gap)
    }

    fn setup(page: u64, freshness: Freshness) -> (Arc<InMemory>, CachedStore) {
        let mem = Arc::new(InMemory::new());
        (mem.clone(), CachedStore::new(mem, tiers(page, 0), "mem", freshness))
    }

    fn ns(p: &str) -> Path {
        Path::from(format!("mem/{p}"))
    }

    #[tokio::test]
    async fn ranges_match_the_object_across_pages() {
        let (mem, store) = setup(7, Freshness::Always);
        let data: Vec<u8> = (0..100u8).collect();
        mem.put(&Path::from("a/b.bin"), data.clone().into()).await.unwrap();
        let p = ns("a/b.bin");
        for (s, e) in [(0u64, 1u64), (3, 20), (6, 7), (7, 14), (90, 100), (0, 100), (50, 51)] {
            let got = store.get_range(&p, s..e).await.unwrap();
            assert_eq!(&got[..], &data[s as usize..e as usize], "range {s}..{e}");
        }
        let got = store.get_ranges(&p, &[1..2, 95..100]).await.unwrap();
        assert_eq!(&got[1][..], &data[95..100]);
        let listed: Vec<ObjectMeta> = store.list(Some(&ns("a"))).try_collect().await.unwrap();
        assert_eq!(listed[0].location, p, "listings are namespaced");
        assert!(store.get_range(&Path::from("a/b.bin"), 0..1).await.is_err());
    }

    #[tokio::test]
    async fn overwritten_object_is_not_served_stale() {
        let (mem, store) = setup(4, Freshness::Always);
        let p = ns("x");
        mem.put(&Path::from("x"), vec![1u8; 16].into()).await.unwrap();
        let _ = store.list(None).collect::<Vec<_>>().await;
        assert_eq!(&store.get_range(&p, 0..4).await.unwrap()[..], &[1, 1, 1, 1]);
        mem.put(&Path::from("x"), vec![2u8; 16].into()).await.unwrap();
        // A listing after the overwrite validates the new version.
        let _ = store.list(None).collect::<Vec<_>>().await;
        assert_eq!(&store.get_range(&p, 0..4).await.unwrap()[..], &[2, 2, 2, 2]);
    }

    #[tokio::test]
    async fn read_at_never_mixes_versions() {
        let (mem, store) = setup(4, Freshness::Always);
        let p = ns("v");
        mem.put(&Path::from("v"), vec![1u8; 16].into()).await.unwrap();
        let v1 = store.read_version(&p).await.unwrap();
        assert_eq!(&store.read_at(&p, &v1, 0..4).await.unwrap()[..], &[1; 4]);
        mem.put(&Path::from("v"), vec![2u8; 16].into()).await.unwrap();
        // Cached pages of the pinned version are served; a miss fails its
        // If-Match instead of bringing in bytes of the new version.
        assert_eq!(&store.read_at(&p, &v1, 0..4).await.unwrap()[..], &[1; 4]);
        let err = store.read_at(&p, &v1, 8..12).await.unwrap_err();
        assert!(matches!(err, object_store::Error::Precondition { .. }), "{err}");
        let v2 = store.revalidate(&p).await.unwrap();
        assert_ne!(v1.tag, v2.tag);
        assert_eq!(store.read_version(&p).await.unwrap().tag, v2.tag);
        assert_eq!(&store.read_at(&p, &v2, 0..16).await.unwrap()[..], &[2; 16]);
        assert!(store.read_at(&p, &v2, 17..18).await.is_err(), "past the end");
    }

    #[tokio::test]
    async fn ttl_and_immutable_reuse_listings() {
        for (freshness, sees_new) in [
            (Freshness::Always, true),
            (Freshness::Ttl(std::time::Duration::from_secs(3600)), false),
            (Freshness::Immutable, false),
        ] {
            let (mem, store) = setup(4, freshness);
            mem.put(&Path::from("a"), vec![1u8; 4].into()).await.unwrap();
            assert_eq!(store.list(None).collect::<Vec<_>>().await.len(), 1);
            mem.put(&Path::from("b"), vec![1u8; 4].into()).await.unwrap();
            let n = store.list(None).collect::<Vec<_>>().await.len();
            assert_eq!(n == 2, sees_new, "{freshness}");
        }
    }

    #[tokio::test]
    async fn concurrent_misses_fetch_each_page_once() {
        let mem = Arc::new(InMemory::new());
        let got_bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = StoreMetrics {
            get_bytes: metrics::Counter::from_arc(got_bytes.clone()),
            ..StoreMetrics::noop()
        };
        let metered: Arc<dyn ObjectStore> = Arc::new(MeteredStore::new(mem.clone(), counted));
        let store = CachedStore::new(metered, tiers(64, 0), "mem", Freshness::Always);
        let data: Vec<u8> = (0..=255u8).cycle().take(64 * 40).collect();
        mem.put(&Path::from("o"), data.clone().into()).await.unwrap();
        let p = ns("o");
        store.head(&p).await.unwrap();
        let reads = (0..32).map(|i| {
            let store = store.clone();
            let p = p.clone();
            tokio::spawn(async move {
                let start = (i * 37) % 1000;
                store.get_range(&p, start..start + 1500).await.unwrap()
            })
        });
        for (i, r) in futures::future::join_all(reads).await.into_iter().enumerate() {
            let start = (i * 37) % 1000;
            assert_eq!(&r.unwrap()[..], &data[start..start + 1500]);
        }
        let fetched = got_bytes.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            fetched <= data.len() as u64,
            "fetched {fetched} bytes of a {} byte object",
            data.len()
        );
    }

    #[tokio::test]
    async fn small_gaps_merge_into_one_get() {
        let mem = Arc::new(InMemory::new());
        let store = CachedStore::new(mem.clone(), tiers(10, 20), "mem", Freshness::Always);
        let data: Vec<u8> = (0..100u8).collect();
        mem.put(&Path::from("o"), data.clone().into()).await.unwrap();
        let p = ns("o");
        // Cache pages 2 and 3, then read 0..100: pages 0-1 and 4-9 are missing,
        // separated by a 20-byte gap, so they come back in one GET.
        store.get_range(&p, 20..40).await.unwrap();
        assert_eq!(&store.get_range(&p, 0..100).await.unwrap()[..], &data[..]);
    }
}
