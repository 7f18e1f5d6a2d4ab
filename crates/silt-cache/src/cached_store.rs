//! `CachedStore`: the one interface through which the server reads objects.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    Result,
};

use crate::page_cache::{PageCache, PageKey};
use crate::version::ObjectVersion;

type Versions = Arc<RwLock<HashMap<Path, ObjectVersion>>>;

/// Serves ranged reads from the shared [`PageCache`], fetching only missing
/// pages (adjacent missing pages in one ranged GET) from the wrapped store.
///
/// Versions come from the LIST/HEAD responses that pass through this
/// wrapper; a ranged read of an object never listed is preceded by a HEAD.
pub struct CachedStore {
    inner: Arc<dyn ObjectStore>,
    cache: Arc<PageCache>,
    store_id: Arc<str>,
    versions: Versions,
}

impl CachedStore {
    /// Wrap `inner`. `store_id` distinguishes stores that share `cache`.
    pub fn new(inner: Arc<dyn ObjectStore>, cache: Arc<PageCache>, store_id: impl Into<Arc<str>>) -> Self {
        CachedStore {
            inner,
            cache,
            store_id: store_id.into(),
            versions: Arc::default(),
        }
    }

    fn remember(versions: &Versions, meta: &ObjectMeta) {
        let v = ObjectVersion::from_meta(meta);
        let mut map = versions.write().unwrap_or_else(|e| e.into_inner());
        match map.get(&meta.location) {
            Some(old) if old.tag == v.tag => {}
            _ => {
                map.insert(meta.location.clone(), v);
            }
        }
    }

    async fn version_of(&self, location: &Path) -> Result<ObjectVersion> {
        let known = self
            .versions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(location)
            .cloned();
        if let Some(v) = known {
            return Ok(v);
        }
        let meta = self.inner.head(location).await?;
        Self::remember(&self.versions, &meta);
        Ok(ObjectVersion::from_meta(&meta))
    }

    fn key(&self, location: &Path, version: &ObjectVersion, page: u64) -> PageKey {
        PageKey {
            store: self.store_id.clone(),
            path: Arc::from(location.as_ref()),
            version: version.tag.clone(),
            page,
        }
    }

    /// Read `range` of `location` at `version`, through the page cache.
    async fn read_range(&self, location: &Path, version: &ObjectVersion, range: Range<u64>) -> Result<Bytes> {
        if range.start >= range.end {
            return Ok(Bytes::new());
        }
        let ps = self.cache.page_size();
        let first = range.start / ps;
        let last = (range.end - 1) / ps;
        let mut pages: Vec<Option<Bytes>> = (first..=last)
            .map(|p| self.cache.get(&self.key(location, version, p)))
            .collect();

        // Group missing pages into runs fetched with one GET each.
        let mut runs: Vec<Range<u64>> = Vec::new();
        for (i, p) in pages.iter().enumerate() {
            let page = first + i as u64;
            if p.is_some() {
                self.cache.metrics.hits.increment(1);
                self.cache.metrics.hit_bytes.increment(ps);
                continue;
            }
            self.cache.metrics.misses.increment(1);
            match runs.last_mut() {
                Some(r) if r.end == page => r.end = page + 1,
                _ => runs.push(page..page + 1),
            }
        }
        let fetches = runs.iter().map(|run| {
            let start = run.start * ps;
            let end = (run.end * ps).min(version.size);
            let opts = GetOptions {
                range: Some(GetRange::Bounded(start..end)),
                if_match: version.e_tag.clone(),
                ..Default::default()
            };
            async move {
                let got = self.inner.get_opts(location, opts).await?;
                got.bytes().await
            }
        });
        let fetched = futures::future::try_join_all(fetches).await?;
        for (run, body) in runs.iter().zip(fetched) {
            let expected = (run.end * ps).min(version.size) - run.start * ps;
            if body.len() as u64 != expected {
                return Err(object_store::Error::Generic {
                    store: "silt-cache",
                    source: format!(
                        "short read of {location}: asked for {expected} bytes at offset {}, got {}",
                        run.start * ps,
                        body.len()
                    )
                    .into(),
                });
            }
            self.cache.metrics.miss_bytes.increment(body.len() as u64);
            for page in run.clone() {
                let lo = ((page - run.start) * ps) as usize;
                let hi = (lo + ps as usize).min(body.len());
                let bytes = body.slice(lo..hi);
                self.cache.insert(self.key(location, version, page), bytes.clone());
                pages[(page - first) as usize] = Some(bytes);
            }
        }

        // Assemble the requested range from the pages.
        let mut out = BytesMut::with_capacity((range.end - range.start) as usize);
        for (i, page) in pages.into_iter().enumerate() {
            let page = page.unwrap_or_default();
            let page_start = (first + i as u64) * ps;
            let lo = range.start.saturating_sub(page_start) as usize;
            let hi = ((range.end - page_start) as usize).min(page.len());
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
            out.extend_from_slice(&page[lo..hi]);
        }
        Ok(out.freeze())
    }
}

impl fmt::Debug for CachedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CachedStore({})", self.inner)
    }
}

impl fmt::Display for CachedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CachedStore({})", self.inner)
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

#[async_trait]
impl ObjectStore for CachedStore {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let plain_range = options.if_match.is_none()
            && options.if_none_match.is_none()
            && options.if_modified_since.is_none()
            && options.if_unmodified_since.is_none()
            && options.version.is_none()
            && !options.head;
        let Some(range) = options.range.clone().filter(|_| plain_range) else {
            let result = self.inner.get_opts(location, options).await?;
            Self::remember(&self.versions, &result.meta);
            return Ok(result);
        };
        let version = self.version_of(location).await?;
        let range = resolve(&range, version.size, location)?;
        let bytes = self.read_range(location, &version, range.clone()).await?;
        Ok(GetResult {
            payload: GetResultPayload::Stream(futures::stream::once(async move { Ok(bytes) }).boxed()),
            meta: version.meta.clone(),
            range,
            attributes: Attributes::default(),
        })
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let version = self.version_of(location).await?;
        let mut out = Vec::with_capacity(ranges.len());
        for r in ranges {
            let r = resolve(&GetRange::Bounded(r.clone()), version.size, location)?;
            out.push(self.read_range(location, &version, r).await?);
        }
        Ok(out)
    }

    fn delete_stream(&self, locations: BoxStream<'static, Result<Path>>) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let versions = self.versions.clone();
        self.inner
            .list(prefix)
            .inspect(move |r| {
                if let Ok(meta) = r {
                    Self::remember(&versions, meta);
                }
            })
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let r = self.inner.list_with_delimiter(prefix).await?;
        for meta in &r.objects {
            Self::remember(&self.versions, meta);
        }
        Ok(r)
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CacheMetrics, PageCacheConfig};
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    fn setup(page: u64) -> (Arc<InMemory>, CachedStore) {
        let mem = Arc::new(InMemory::new());
        let cache = PageCache::new(
            PageCacheConfig {
                page_size: page,
                capacity_bytes: 1 << 20,
            },
            CacheMetrics::noop(),
        );
        (mem.clone(), CachedStore::new(mem, cache, "mem"))
    }

    #[tokio::test]
    async fn ranges_match_the_object_across_pages() {
        let (mem, store) = setup(7);
        let data: Vec<u8> = (0..100u8).collect();
        let p = Path::from("a/b.bin");
        mem.put(&p, data.clone().into()).await.unwrap();
        for (s, e) in [(0u64, 1u64), (3, 20), (6, 7), (7, 14), (90, 100), (0, 100), (50, 51)] {
            let got = store.get_range(&p, s..e).await.unwrap();
            assert_eq!(&got[..], &data[s as usize..e as usize], "range {s}..{e}");
        }
        let got = store.get_ranges(&p, &[1..2, 95..100]).await.unwrap();
        assert_eq!(&got[1][..], &data[95..100]);
    }

    #[tokio::test]
    async fn overwritten_object_is_not_served_stale() {
        let (mem, store) = setup(4);
        let p = Path::from("x");
        mem.put(&p, vec![1u8; 16].into()).await.unwrap();
        let _ = store.list(None).collect::<Vec<_>>().await;
        assert_eq!(&store.get_range(&p, 0..4).await.unwrap()[..], &[1, 1, 1, 1]);
        mem.put(&p, vec![2u8; 16].into()).await.unwrap();
        // A listing after the overwrite validates the new version.
        let _ = store.list(None).collect::<Vec<_>>().await;
        assert_eq!(&store.get_range(&p, 0..4).await.unwrap()[..], &[2, 2, 2, 2]);
    }
}
