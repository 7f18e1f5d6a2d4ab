//! `CachedStore`: one table's view of the shared tiers, as an `ObjectStore`.
//!
//! It does three things and delegates the rest:
//! - **namespacing**: the query engine sees every object of the table under
//!   `t<N>/`, so paths are unique across a server's tables and DataFusion's
//!   per-path caches never confuse two buckets that hold the same key;
//! - **validation**: versions come from the LIST and HEAD answers that pass
//!   through it, trusted for as long as the table's [`Freshness`] allows
//!   (LIST answers are kept that long too); a new version is handed to
//!   [`CacheTiers::invalidate`], which drops the others everywhere;
//! - **pinning**: [`CachedStore::pin`] turns a validated `ObjectMeta` into a
//!   [`PinnedObject`], and [`CachedStore::read_pinned`] reads exactly that
//!   version through the [`PageStore`](crate::PageStore). A scan pins each
//!   object once and never looks its version up again.
//!
//! Reads through the `ObjectStore` trait (DataFusion's own listing and
//! footer reads) pin the version validated last at the moment of the call.
//!
//! **Speculation** (`always` only): a clone made with [`CachedStore::gated`]
//! for one query answers a LIST or HEAD it has answered before from that last
//! validated answer at once, and registers on the query's
//! [`ValidationGate`] a confirmation by a validation sent after the query
//! started; the query runs meanwhile and releases nothing before the gate
//! confirms. Validations of a probe are shared by all queries ([`Probes`]).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    Attributes, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, ObjectMeta, ObjectStore, Result,
};
use parking_lot::Mutex;

use crate::counters::TableCounters;
use crate::error::{CacheError, CacheResult};
use crate::freshness::Freshness;
use crate::key::{ObjectKey, PinnedObject};
use crate::page_store::{Admit, Source};
use crate::probe::{Answer, Probe, Probes};
use crate::tiers::CacheTiers;
use crate::validation_gate::ValidationGate;
use crate::version::ObjectVersion;
use crate::versions::Validation;

/// A cached listing: when it was made and what it returned.
type Listing = (Instant, Arc<Vec<ObjectMeta>>);

/// One table's store over the shared tiers. Cloning is cheap and clones
/// share everything.
#[derive(Clone)]
pub struct CachedStore {
    inner: Arc<dyn ObjectStore>,
    tiers: Arc<CacheTiers>,
    store_id: Arc<str>,
    namespace: Path,
    freshness: Freshness,
    /// The last validated listing per prefix (under `always`: the base of
    /// speculative queries; otherwise reused while the freshness trusts it).
    listings: Arc<Mutex<HashMap<Option<Path>, Listing>>>,
    /// LISTs and HEADs in flight, shared by the table's queries.
    probes: Arc<Probes>,
    counters: Arc<TableCounters>,
    /// The query this clone lists for (see [`CachedStore::gated`]).
    gate: Option<Arc<ValidationGate>>,
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
            probes: Arc::default(),
            counters: Arc::default(),
            gate: None,
        }
    }

    /// This store, listing and HEADing for the query that owns `gate`: under
    /// `always`, a LIST or HEAD answered before is answered from the last
    /// validation at once, and the query's gate gets a confirmation to await
    /// before the query releases results. Other modes ignore the gate.
    pub fn gated(&self, gate: Arc<ValidationGate>) -> CachedStore {
        CachedStore {
            gate: Some(gate),
            ..self.clone()
        }
    }

    /// The query this store answers for, if speculation applies to it.
    fn speculating(&self) -> Option<&Arc<ValidationGate>> {
        self.gate.as_ref().filter(|_| self.freshness == Freshness::Always)
    }

    /// This store without a gate (for work that outlives the query).
    fn ungated(&self) -> CachedStore {
        CachedStore {
            gate: None,
            ..self.clone()
        }
    }

    /// The answer of a validation of `probe` sent at or after `since`
    /// (shared with every other query that may use it).
    async fn validated_after(&self, probe: &Probe, since: Instant) -> Answer {
        let this = self.ungated();
        self.probes
            .after(probe, since, || {
                let (this, probe) = (this.clone(), probe.clone());
                Box::pin(async move { this.send_probe(&probe).await })
            })
            .await
    }

    /// Asks the store: LISTs the prefix (recording every version and the
    /// listing) or HEADs the object (recording its version).
    async fn send_probe(&self, probe: &Probe) -> Answer {
        match probe {
            Probe::Head(location) => match self.head_inner(location).await {
                Ok(meta) => Ok(Arc::new(vec![meta])),
                Err(e) => Err(CacheError::from_store(location.as_ref(), e)),
            },
            Probe::List(prefix) => {
                let inner_prefix = match prefix {
                    Some(p) => Some(self.strip(p).map_err(|e| CacheError::from_store(p.as_ref(), e))?),
                    None => None,
                };
                let metas: Vec<ObjectMeta> = futures::TryStreamExt::try_collect(self.inner.list(inner_prefix.as_ref()))
                    .await
                    .map_err(|e| CacheError::from_store(&probe.path(), e))?;
                let metas: Vec<ObjectMeta> = metas.into_iter().map(|m| self.qualify_meta(m)).collect();
                for m in &metas {
                    self.remember(m);
                }
                let metas = Arc::new(metas);
                self.listings
                    .lock()
                    .insert(prefix.clone(), (Instant::now(), metas.clone()));
                Ok(metas)
            }
        }
    }

    /// Registers on `gate` the confirmation that `used` (the answer the query
    /// got for `probe` without waiting) is what a validation sent after the
    /// query started answers. Runs on its own task from now on.
    fn speculate(&self, gate: &ValidationGate, probe: Probe, used: Arc<Vec<ObjectMeta>>) {
        let this = self.ungated();
        let since = gate.started();
        let task = tokio::spawn(async move {
            match this.validated_after(&probe, since).await {
                Ok(now) => same_answer(&used, &now),
                // The object a HEAD confirmed is gone: a change, so the query
                // restarts (and then reports it not found).
                Err(e) if e.is_not_found() => Err(CacheError::changed(probe.path(), "deleted")),
                Err(e) => Err(e),
            }
        });
        gate.register(Box::pin(async move {
            task.await.unwrap_or_else(|e| {
                Err(CacheError::Store {
                    path: String::new(),
                    source: Arc::new(object_store::Error::Generic {
                        store: "CachedStore",
                        source: Box::new(e),
                    }),
                })
            })
        }));
    }

    /// The HEAD of `location` (namespaced) as a query sees it: the last
    /// validation while the freshness trusts it; under `always`, for a
    /// gated query, the last validated version speculatively; else a HEAD
    /// sent at or after the call (shared with concurrent callers).
    async fn head_meta(&self, location: &Path) -> Result<ObjectMeta> {
        let last = self.tiers.versions().get(location);
        if let Some((v, at)) = &last
            && self.freshness.still_valid(at.elapsed())
        {
            return Ok(v.meta.clone());
        }
        let probe = Probe::Head(location.clone());
        if let (Some(gate), Some((v, _))) = (self.speculating(), last) {
            self.speculate(gate, probe, Arc::new(vec![v.meta.clone()]));
            return Ok(v.meta);
        }
        let answer = self.validated_inline(&probe).await?;
        answer.first().cloned().ok_or_else(|| object_store::Error::NotFound {
            path: location.to_string(),
            source: "empty HEAD answer".into(),
        })
    }

    /// A validation answered after the query started (now, without one),
    /// waited for here: counted on the query's gate as inline wait.
    async fn validated_inline(&self, probe: &Probe) -> CacheResult<Arc<Vec<ObjectMeta>>> {
        let Some(gate) = &self.gate else {
            return self.validated_after(probe, Instant::now()).await;
        };
        let start = Instant::now();
        let answer = self.validated_after(probe, gate.started()).await;
        gate.waited_inline(start.elapsed());
        answer
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

    fn qualify_meta(&self, mut meta: ObjectMeta) -> ObjectMeta {
        meta.location = self.qualify(&meta.location);
        meta
    }

    /// Pins the version `meta` (namespaced, from a listing or HEAD through
    /// this store) describes: every read of the returned object is of
    /// exactly that version.
    pub fn pin(&self, meta: &ObjectMeta) -> Result<PinnedObject> {
        let path = self.strip(&meta.location)?;
        Ok(PinnedObject::new(
            self.store_id.clone(),
            Arc::from(path.as_ref()),
            ObjectVersion::from_meta(meta),
        ))
    }

    /// The namespaced path of a pinned object of this store.
    pub fn location_of(&self, object: &PinnedObject) -> Path {
        self.qualify(&Path::from(object.key.path.as_ref()))
    }

    /// Reads `ranges` of `object` at its pinned version, through the tiers.
    /// If that version is gone from the store (overwritten or deleted), the
    /// read fails with [`CacheError::Changed`] or [`CacheError::NotFound`]
    /// and the object is marked for revalidation, so the next query (or a
    /// restart of this one) pins the current version.
    pub async fn read_pinned(&self, object: &PinnedObject, ranges: &[Range<u64>]) -> CacheResult<Vec<Bytes>> {
        self.read_with(object, ranges, Admit::MemoryAndDisk).await
    }

    async fn read_with(&self, object: &PinnedObject, ranges: &[Range<u64>], admit: Admit) -> CacheResult<Vec<Bytes>> {
        let inner_path = Path::from(object.key.path.as_ref());
        let source = Source {
            store: self.inner.as_ref(),
            path: &inner_path,
        };
        let read = self
            .tiers
            .pages()
            .read(source, object, ranges, admit, &self.counters)
            .await;
        if let Err(e) = &read
            && (e.is_changed() || e.is_not_found())
        {
            self.forget(&self.location_of(object));
        }
        read
    }

    /// `range` of `object` (read at `location`) as an `ObjectStore` answer:
    /// the ObjectStore-facing form of [`CachedStore::read_pinned`].
    async fn get_pinned(&self, object: &PinnedObject, location: &Path, range: &GetRange) -> Result<GetResult> {
        let range = resolve(range, object.size(), location)?;
        let bytes = self.read_pinned(object, std::slice::from_ref(&range)).await?;
        let bytes = bytes.into_iter().next().unwrap_or_default();
        let mut meta = object.version.meta.clone();
        meta.location = location.clone();
        Ok(silt_store::wrapper::buffered_result(
            meta,
            range,
            Attributes::default(),
            bytes,
        ))
    }

    /// `ranges` of `object` (read at `location`), checked against its size.
    async fn get_pinned_ranges(
        &self,
        object: &PinnedObject,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> Result<Vec<Bytes>> {
        let ranges = ranges
            .iter()
            .map(|r| resolve(&GetRange::Bounded(r.clone()), object.size(), location))
            .collect::<Result<Vec<_>>>()?;
        Ok(self.read_pinned(object, &ranges).await?)
    }

    /// Forgets what was validated of `location`: its version and every
    /// cached listing of the table, so the next query asks the store.
    fn forget(&self, location: &Path) {
        self.tiers.versions().forget(location);
        self.listings.lock().clear();
    }

    /// An `ObjectStore` that serves exactly `object` at its pinned version
    /// (at its namespaced path), for readers that want a store, such as
    /// DataFusion's footer reader.
    pub fn pinned_store(&self, object: PinnedObject) -> Arc<dyn ObjectStore> {
        Arc::new(PinnedStore {
            location: self.location_of(&object),
            inner: Arc::new(self.clone()),
            object,
        })
    }

    /// Records a validated version (by namespaced path); pages, batches and
    /// footers of any other version of the object are dropped from every tier.
    fn remember(&self, meta: &ObjectMeta) {
        let v = ObjectVersion::from_meta(meta);
        let seen = self.tiers.versions().record(&meta.location, v.clone());
        if seen != Validation::Unchanged
            && let Ok(path) = self.strip(&meta.location)
        {
            let keep = ObjectKey::new(self.store_id.clone(), path.as_ref(), v.tag);
            self.tiers.invalidate(&keep, seen);
        }
    }

    /// The version to read `location` (namespaced) at: the last validated one
    /// while the table's freshness trusts it, else a HEAD.
    async fn version_of(&self, location: &Path) -> Result<ObjectVersion> {
        if let Some((v, at)) = self.tiers.versions().get(location)
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
                    self.forget(location);
                }
                Err(e)
            }
        }
    }

    /// Pins `location` (namespaced) at the version a read of it would use now.
    async fn pin_current(&self, location: &Path) -> Result<PinnedObject> {
        let version = self.version_of(location).await?;
        self.pin(&version.meta)
    }

    /// Reads `range` of pinned `object` into the disk tier, and into memory
    /// when `memory` is set (or when there is no disk tier); for preload.
    pub async fn warm(&self, object: &PinnedObject, range: Range<u64>, memory: bool) -> CacheResult<()> {
        let admit = if memory { Admit::MemoryAndDisk } else { Admit::DiskOnly };
        self.read_with(object, &[range], admit).await?;
        Ok(())
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
    /// the tiers. If the object changed since, the read fails
    /// (`Precondition`, carrying [`CacheError::Changed`]) rather than mixing
    /// bytes of two versions in one response.
    pub async fn read_at(&self, location: &Path, version: &ObjectVersion, range: Range<u64>) -> Result<Bytes> {
        let mut meta = version.meta.clone();
        meta.location = location.clone();
        let object = self.pin(&meta)?;
        let range = resolve(&GetRange::Bounded(range), version.size, location)?;
        let mut bytes = self.read_pinned(&object, std::slice::from_ref(&range)).await?;
        Ok(bytes.pop().unwrap_or_default())
    }

    /// Lists through the store, or from a listing the table's freshness
    /// still trusts; under `always`, for a gated query with a previous
    /// listing, that listing speculatively (confirmed through the gate).
    async fn listing(&self, prefix: Option<&Path>) -> Result<Arc<Vec<ObjectMeta>>> {
        let key = prefix.cloned();
        let last = self.listings.lock().get(&key).cloned();
        if let Some((at, metas)) = &last
            && self.freshness.still_valid(at.elapsed())
        {
            return Ok(metas.clone());
        }
        let probe = Probe::List(key);
        if let (Some(gate), Some((_, metas))) = (self.speculating(), last) {
            self.speculate(gate, probe, metas.clone());
            return Ok(metas);
        }
        Ok(self.validated_inline(&probe).await?)
    }
}

/// Whether a validation's answer `now` is what a query used (`used`): the
/// same objects, each at the same version ([`ObjectVersion::same`]). An
/// object added, deleted or overwritten is [`CacheError::Changed`].
fn same_answer(used: &[ObjectMeta], now: &[ObjectMeta]) -> CacheResult<()> {
    let now_by_path: HashMap<&Path, &ObjectMeta> = now.iter().map(|m| (&m.location, m)).collect();
    for u in used {
        match now_by_path.get(&u.location) {
            Some(n) if ObjectVersion::same(u, n) => {}
            Some(n) => return Err(CacheError::changed(&u.location, ObjectVersion::from_meta(n).tag)),
            None => return Err(CacheError::changed(&u.location, "deleted")),
        }
    }
    if now.len() != used.len() {
        let used_paths: std::collections::HashSet<&Path> = used.iter().map(|m| &m.location).collect();
        let added = now.iter().find(|m| !used_paths.contains(&m.location));
        let path = added.map_or_else(String::new, |m| m.location.to_string());
        return Err(CacheError::changed(path, "added"));
    }
    Ok(())
}

/// `range` of an object of `size` bytes. A bounded range past the end is an
/// error, not a shorter read: whoever asked planned with a bigger version of
/// the object (its footer's offsets must not be applied to this one), so it
/// is [`CacheError::Changed`], which restarts a query that has not answered yet.
fn resolve(range: &GetRange, size: u64, location: &Path) -> Result<Range<u64>> {
    let r = match range {
        GetRange::Bounded(r) if r.end > size && r.start < r.end => {
            return Err(
                CacheError::changed(location, format!("of at least {} bytes (it now has {size})", r.end)).into(),
            );
        }
        GetRange::Bounded(r) => r.clone(),
        GetRange::Offset(o) => *o..size,
        GetRange::Suffix(n) => size.saturating_sub(*n)..size,
    };
    if r.start > size || r.start > r.end {
        return Err(CacheError::InvalidRange {
            path: location.to_string(),
            range: format!("{range:?}"),
            size,
        }
        .into());
    }
    Ok(r)
}

/// Whether `options` ask for nothing but a range (no conditions, no head).
fn plain_range(options: &GetOptions) -> Option<&GetRange> {
    let plain = options.if_match.is_none()
        && options.if_none_match.is_none()
        && options.if_modified_since.is_none()
        && options.if_unmodified_since.is_none()
        && options.version.is_none()
        && !options.head;
    options.range.as_ref().filter(|_| plain)
}

silt_store::read_path_store!(CachedStore, "CachedStore", {
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        if options.head && options.if_match.is_none() && options.if_none_match.is_none() && options.version.is_none() {
            let meta = self.head_meta(location).await?;
            return Ok(GetResult {
                payload: GetResultPayload::Stream(futures::stream::empty().boxed()),
                range: 0..0,
                meta,
                attributes: Attributes::default(),
            });
        }
        let Some(range) = plain_range(&options).cloned() else {
            let mut result = self.inner.get_opts(&self.strip(location)?, options).await?;
            result.meta = self.qualify_meta(result.meta);
            self.remember(&result.meta);
            return Ok(result);
        };
        let object = self.pin_current(location).await?;
        self.get_pinned(&object, location, &range).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let object = self.pin_current(location).await?;
        self.get_pinned_ranges(&object, location, ranges).await
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

/// One object at one version, as an `ObjectStore` (see
/// [`CachedStore::pinned_store`]). Reads of any other path are not found;
/// listing is not supported.
struct PinnedStore {
    /// The table's store (named `inner` by the macro's convention).
    inner: Arc<CachedStore>,
    location: Path,
    object: PinnedObject,
}

impl PinnedStore {
    fn check(&self, location: &Path) -> Result<()> {
        if *location == self.location {
            return Ok(());
        }
        Err(object_store::Error::NotFound {
            path: location.to_string(),
            source: format!("this reader serves only {}", self.location).into(),
        })
    }
}

silt_store::read_path_store!(PinnedStore, "PinnedStore", {
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.check(location)?;
        if options.head {
            return self
                .inner
                .get_pinned(&self.object, location, &GetRange::Bounded(0..0))
                .await;
        }
        let range = options.range.clone().unwrap_or(GetRange::Offset(0));
        self.inner.get_pinned(&self.object, location, &range).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.check(location)?;
        self.inner.get_pinned_ranges(&self.object, location, ranges).await
    }

    fn list(&self, _prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        futures::stream::once(async {
            Err(object_store::Error::NotSupported {
                source: "a pinned object reader does not list".into(),
            })
        })
        .boxed()
    }

    async fn list_with_delimiter(&self, _prefix: Option<&Path>) -> Result<ListResult> {
        Err(object_store::Error::NotSupported {
            source: "a pinned object reader does not list".into(),
        })
    }
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CacheMetrics, ColumnCache, PageCache, PageCacheConfig, PageStore};
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
        CacheTiers::new(
            PageStore::builder(cache).merge_gap(merge_gap).build(),
            ColumnCache::new(1 << 20, CacheMetrics::noop()),
        )
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
        assert!(CacheError::find(&err).is_some_and(CacheError::is_changed), "{err}");
        let v2 = store.revalidate(&p).await.unwrap();
        assert_ne!(v1.tag, v2.tag);
        assert_eq!(store.read_version(&p).await.unwrap().tag, v2.tag);
        assert_eq!(&store.read_at(&p, &v2, 0..16).await.unwrap()[..], &[2; 16]);
        assert!(store.read_at(&p, &v2, 17..18).await.is_err(), "past the end");
        assert!(store.read_at(&p, &v2, 8..20).await.is_err(), "partly past the end");
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

    /// A store over `mem` whose requests take `latency`, counting LISTs.
    fn slow_counted(
        mem: Arc<InMemory>,
        latency: std::time::Duration,
    ) -> (CachedStore, Arc<std::sync::atomic::AtomicU64>) {
        let lists = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let slow: Arc<dyn ObjectStore> = Arc::new(silt_store::FaultyStore::new(
            mem,
            silt_store::FaultConfig {
                latency,
                ..Default::default()
            },
        ));
        let counted = StoreMetrics {
            list_requests: metrics::Counter::from_arc(lists.clone()),
            ..StoreMetrics::noop()
        };
        let metered: Arc<dyn ObjectStore> = Arc::new(MeteredStore::new(slow, counted));
        (CachedStore::new(metered, tiers(64, 0), "mem", Freshness::Always), lists)
    }

    #[tokio::test]
    async fn a_gated_warm_listing_is_speculative_and_confirmed_after_the_query_started() {
        let mem = Arc::new(InMemory::new());
        mem.put(&Path::from("o"), vec![1u8; 10].into()).await.unwrap();
        let (store, lists) = slow_counted(mem.clone(), std::time::Duration::ZERO);
        let cold: Vec<ObjectMeta> = store.list(None).try_collect().await.unwrap();
        assert_eq!(cold[0].size, 10);
        // Unchanged: the last listing, confirmed by a new LIST.
        let gate = ValidationGate::new();
        let warm: Vec<ObjectMeta> = store.gated(gate.clone()).list(None).try_collect().await.unwrap();
        assert_eq!(warm, cold);
        assert!(gate.is_speculative());
        gate.confirm().await.unwrap();
        assert_eq!(lists.load(std::sync::atomic::Ordering::Relaxed), 2);
        // Overwritten: the query starts on the old listing, the gate says changed.
        mem.put(&Path::from("o"), vec![2u8; 20].into()).await.unwrap();
        let gate = ValidationGate::new();
        let stale: Vec<ObjectMeta> = store.gated(gate.clone()).list(None).try_collect().await.unwrap();
        assert_eq!(stale[0].size, 10);
        assert!(gate.confirm().await.unwrap_err().is_changed());
        // The restart starts on the new listing, confirmed.
        let gate = ValidationGate::new();
        let fresh: Vec<ObjectMeta> = store.gated(gate.clone()).list(None).try_collect().await.unwrap();
        assert_eq!(fresh[0].size, 20);
        gate.confirm().await.unwrap();
        // Added or deleted objects are changes too.
        mem.put(&Path::from("p"), vec![3u8; 5].into()).await.unwrap();
        let gate = ValidationGate::new();
        let _: Vec<ObjectMeta> = store.gated(gate.clone()).list(None).try_collect().await.unwrap();
        assert!(gate.confirm().await.unwrap_err().is_changed(), "added");
        mem.delete(&Path::from("p")).await.unwrap();
        let gate = ValidationGate::new();
        let _: Vec<ObjectMeta> = store.gated(gate.clone()).list(None).try_collect().await.unwrap();
        assert!(gate.confirm().await.unwrap_err().is_changed(), "deleted");
    }

    #[tokio::test]
    async fn concurrent_queries_share_one_list_but_not_one_sent_before_they_started() {
        let mem = Arc::new(InMemory::new());
        mem.put(&Path::from("o"), vec![1u8; 10].into()).await.unwrap();
        let (store, lists) = slow_counted(mem, std::time::Duration::from_millis(50));
        let count = || lists.load(std::sync::atomic::Ordering::Relaxed);
        let _: Vec<ObjectMeta> = store.list(None).try_collect().await.unwrap();
        assert_eq!(count(), 1);
        // Queries that all started before any validation was sent share one.
        let gates: Vec<_> = (0..16).map(|_| ValidationGate::new()).collect();
        for gate in &gates {
            let _: Vec<ObjectMeta> = store.gated(gate.clone()).list(None).try_collect().await.unwrap();
        }
        for gate in &gates {
            gate.confirm().await.unwrap();
        }
        assert_eq!(count(), 2, "one LIST for 16 queries");
        // A LIST sent before a query started does not confirm it.
        let early = tokio::spawn({
            let store = store.clone();
            async move { store.list(None).try_collect::<Vec<_>>().await }
        });
        while count() < 3 {
            tokio::task::yield_now().await;
        }
        let gate = ValidationGate::new();
        let _: Vec<ObjectMeta> = store.gated(gate.clone()).list(None).try_collect().await.unwrap();
        gate.confirm().await.unwrap();
        early.await.unwrap().unwrap();
        assert_eq!(count(), 4, "the query waited for a LIST of its own");
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

    #[tokio::test]
    async fn a_deleted_object_is_not_found_for_the_fetcher_and_its_waiters() {
        let mem = Arc::new(InMemory::new());
        mem.put(&Path::from("o"), vec![7u8; 64].into()).await.unwrap();
        let slow: Arc<dyn ObjectStore> = Arc::new(silt_store::FaultyStore::new(
            mem.clone(),
            silt_store::FaultConfig {
                latency: std::time::Duration::from_millis(50),
                ..Default::default()
            },
        ));
        let store = CachedStore::new(slow, tiers(16, 0), "mem", Freshness::Always);
        let p = ns("o");
        let v = store.read_version(&p).await.unwrap();
        mem.delete(&Path::from("o")).await.unwrap();
        let reads = (0..8).map(|_| {
            let (store, p, v) = (store.clone(), p.clone(), v.clone());
            tokio::spawn(async move { store.read_at(&p, &v, 0..16).await })
        });
        for r in futures::future::join_all(reads).await {
            let e = r.unwrap().unwrap_err();
            assert!(matches!(e, object_store::Error::NotFound { .. }), "{e}");
            assert!(CacheError::find(&e).is_some_and(CacheError::is_not_found), "{e}");
        }
    }

    #[tokio::test]
    async fn writes_are_refused() {
        let (mem, store) = setup(4, Freshness::Always);
        let err = store.put(&ns("w"), vec![1u8].into()).await.unwrap_err();
        assert!(matches!(err, object_store::Error::NotSupported { .. }), "{err}");
        assert!(mem.head(&Path::from("w")).await.is_err(), "nothing reached the store");
        assert!(mem.head(&ns("w")).await.is_err());
    }
}
