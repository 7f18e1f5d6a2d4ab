//! `CachedStore`: one table's view of the shared tiers, as an `ObjectStore`.
//!
//! It does three things and delegates the rest:
//! - **namespacing**: the query engine sees every object of the table under
//!   `t<N>/`, so paths are unique across a server's tables and DataFusion's
//!   per-path caches never confuse two buckets that hold the same key;
//! - **validation**: versions come from the LIST and HEAD answers that pass
//!   through it, trusted for as long as the table's [`Freshness`] allows
//!   (LIST answers are kept that long too; under `notify`, until a change
//!   notice, see [`ChangeNotices`]); a new version is handed to
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
use silt_store::location::path_from_raw;

mod validation;

use crate::ObjectVersion;
use crate::change_notices::ChangeNotices;
use crate::counters::TableCounters;
use crate::error::{CacheError, CacheResult};
use crate::freshness::Freshness;
use crate::page_store::{Admit, Source};
use crate::probe::Probes;
use crate::tiers::CacheTiers;
use crate::validation_gate::ValidationGate;
use crate::versions::Validation;
use crate::{ObjectKey, PinnedObject};

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
    /// Under `notify`: the validations no change notice has voided.
    notices: Arc<ChangeNotices>,
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
            notices: Arc::default(),
            counters: Arc::default(),
            gate: None,
        }
    }

    /// This store, keeping its change notices in `notices` (e.g. one
    /// counting sweeps on the server's metrics).
    pub fn with_change_notices(mut self, notices: Arc<ChangeNotices>) -> Self {
        self.notices = notices;
        self
    }

    /// The table's change notices: [`ChangeNotices::changed`] makes the
    /// next query of a `notify` table validate (no effect on other modes).
    pub fn change_notices(&self) -> &Arc<ChangeNotices> {
        &self.notices
    }

    /// The table's validation mode.
    pub fn freshness(&self) -> Freshness {
        self.freshness
    }

    /// Page hits and misses of reads through this store.
    pub fn counters(&self) -> &TableCounters {
        &self.counters
    }

    /// The tiers this store reads through (shared by every table).
    pub fn tiers(&self) -> &Arc<CacheTiers> {
        &self.tiers
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

    /// The store underneath the tiers (paths without the namespace), for
    /// reads that are not of an object version: a table format's pointer to
    /// its current metadata, read once per query under `always`.
    pub fn inner(&self) -> &dyn ObjectStore {
        self.inner.as_ref()
    }

    /// The namespaced path of a pinned object of this store.
    pub fn location_of(&self, object: &PinnedObject) -> Path {
        self.qualify(&path_from_raw(&object.key.path))
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
        let inner_path = path_from_raw(&object.key.path);
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
    /// cached listing of the table, so the next query asks the store (under
    /// `notify`, as a change notice would: a validation in flight now may
    /// predate the change this read found).
    fn forget(&self, location: &Path) {
        self.tiers.versions().forget(location);
        self.listings.lock().clear();
        self.notices.changed();
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
            && (self.freshness.still_valid(at.elapsed())
                || matches!(self.freshness, Freshness::Always | Freshness::Notify { .. }))
        {
            // `always` and `notify` validate once per query, by the LIST or
            // HEAD the query engine makes when it plans; reads within the
            // query use that version (a notice landing mid-query must not
            // move them to another).
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
mod tests;
