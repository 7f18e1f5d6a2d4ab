//! GetObject and HeadObject: one response pinned to one version of the
//! object, read through the table's [`CachedStore`] a bounded chunk at a time.

use std::ops::Range;
use std::sync::Arc;
use std::time::SystemTime;

use axum::http::{HeaderMap, HeaderValue, header};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use http_body::Frame;
use http_body_util::StreamBody;
use object_store::ObjectStoreExt;
use object_store::path::Path as ObjectPath;
use s3s::dto::{ETag, GetObjectOutput, HeadObjectOutput, Range as ByteRange, StreamingBlob, Timestamp};
use s3s::{S3Error, s3_error};
use silt_cache::{CachedStore, ObjectVersion};
use silt_core::restart::restart_once_on_change;
use tracing::warn;

use super::bucket::Bucket;
use super::peers::PeerRoute;

impl Bucket {
    /// HeadObject: the object's version through the cache (validated per the
    /// table's freshness, as for queries).
    pub async fn head(&self, key: &str) -> Result<HeadObjectOutput, S3Error> {
        let path = self.object_path(key)?;
        let meta = self.store.head(&path).await.map_err(|e| self.store_error(key, e))?;
        let version = ObjectVersion::from_meta(&meta);
        Ok(HeadObjectOutput {
            content_length: Some(length(version.size)),
            accept_ranges: Some("bytes".into()),
            content_type: Some(OCTET_STREAM.into()),
            e_tag: Some(entity_tag(&version)),
            last_modified: Some(timestamp(&version)),
            ..Default::default()
        })
    }

    /// GetObject: the whole object (200) or one range of it (206 with
    /// `Content-Range`). The first chunk is read before the answer is
    /// returned, so a failing store is an error status, not a cut body.
    /// With a `route`, each chunk is read from the fleet member that owns
    /// it when that is another one ([`super::peers`]).
    pub async fn get(
        &self,
        key: &str,
        range: Option<ByteRange>,
        route: Option<PeerRoute>,
    ) -> Result<GetObjectOutput, S3Error> {
        let path = self.object_path(key)?;
        let (version, span, first) = self.read_first(key, &path, range, route.as_ref()).await?;
        let content_range = range.map(|_| format!("bytes {}-{}/{}", span.start, span.end - 1, version.size));
        let output = GetObjectOutput {
            content_length: Some(length(span.end - span.start)),
            content_range,
            accept_ranges: Some("bytes".into()),
            content_type: Some(OCTET_STREAM.into()),
            e_tag: Some(entity_tag(&version)),
            last_modified: Some(timestamp(&version)),
            ..Default::default()
        };
        let rest = span.start + first.len() as u64..span.end;
        let object = Arc::new(ResponseObject {
            store: self.store.clone(),
            path,
            version,
            chunk: self.chunk,
            route,
        });
        Ok(GetObjectOutput {
            body: Some(object_body(object, first, rest)),
            ..output
        })
    }

    /// The version to serve, the span of it the request selects, and the
    /// first chunk of that span. If the version the cache held is gone
    /// upstream (a miss failed its `If-Match`), the object is revalidated
    /// and the read starts again, once ([`restart_once_on_change`]).
    async fn read_first(
        &self,
        key: &str,
        path: &ObjectPath,
        range: Option<ByteRange>,
        route: Option<&PeerRoute>,
    ) -> Result<(ObjectVersion, Range<u64>, Bytes), S3Error> {
        let held = self
            .store
            .read_version(path)
            .await
            .map_err(|e| self.store_error(key, e))?;
        // Outer error: the read's answer; inner: the store's, a gone
        // version restarting the read once.
        let read = restart_once_on_change(
            |revalidating| {
                let held = held.clone();
                async move {
                    let version = if revalidating {
                        self.store
                            .revalidate(path)
                            .await
                            .map_err(|e| self.store_error(key, e))?
                    } else {
                        held
                    };
                    let span = match range {
                        None => 0..version.size,
                        Some(r) => resolve(r, version.size).ok_or_else(|| invalid_range(key, r, version.size))?,
                    };
                    let first = span.start..chunk_end(span.start, span.end, self.chunk);
                    let read = read_span(&self.store, path, &version, first, self.chunk, route).await;
                    Ok::<_, S3Error>(read.map(|bytes| (version, span, bytes)))
                }
            },
            |read| matches!(read, Ok(Err(object_store::Error::Precondition { .. }))),
        )
        .await;
        read?.map_err(|e| self.store_error(key, e))
    }
}

/// The content type of every object (Parquet files have no registered one).
const OCTET_STREAM: &str = "application/octet-stream";

/// The bytes of an object of `size` bytes range `r` selects (a range running
/// past the end is cut there), or `None` when it selects none: a start at or
/// past the end, a suffix of 0 bytes or of an empty object.
fn resolve(r: ByteRange, size: u64) -> Option<Range<u64>> {
    r.check(size).ok().filter(|span| span.start < span.end)
}

/// 416 `InvalidRange`, with `Content-Range: bytes */size` as RFC 9110 asks.
fn invalid_range(key: &str, r: ByteRange, size: u64) -> S3Error {
    let mut err = s3_error!(
        InvalidRange,
        "range {:?} selects no byte of {key:?} ({size} bytes)",
        r.to_header_string()
    );
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::try_from(format!("bytes */{size}")) {
        headers.insert(header::CONTENT_RANGE, v);
    }
    err.set_headers(headers);
    err
}

/// A byte count as S3's signed length types hold it.
fn length(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The object's last-modified time as S3 reports it.
pub(super) fn timestamp(version: &ObjectVersion) -> Timestamp {
    Timestamp::from(SystemTime::from(version.meta.last_modified))
}

/// The ETag clients see: [`ObjectVersion::entity_tag`], strong.
pub(super) fn entity_tag(version: &ObjectVersion) -> ETag {
    ETag::Strong(version.entity_tag())
}

/// One object at one version (the S3 side of a `silt_cache::PinnedObject`):
/// what every chunk of one response reads.
struct ResponseObject {
    store: Arc<CachedStore>,
    path: ObjectPath,
    version: ObjectVersion,
    chunk: u64,
    route: Option<PeerRoute>,
}

/// `span` (within one chunk of `chunk` bytes) of `path` at `version`: from
/// the fleet member that owns the chunk when `route` names another one
/// that answers with this version, else through this server's tiers.
async fn read_span(
    store: &CachedStore,
    path: &ObjectPath,
    version: &ObjectVersion,
    span: Range<u64>,
    chunk: u64,
    route: Option<&PeerRoute>,
) -> object_store::Result<Bytes> {
    if let Some(route) = route
        && let Some(bytes) = route
            .read(span.start / chunk, span.clone(), entity_tag(version).value())
            .await
    {
        return Ok(bytes);
    }
    store.read_at(path, version, span).await
}

/// Where the body chunk starting at `start` ends: at the next multiple of
/// `chunk` (so chunks cover whole pages), or at `end`.
fn chunk_end(start: u64, end: u64, chunk: u64) -> u64 {
    (start / chunk).saturating_add(1).saturating_mul(chunk).min(end)
}

/// A GET's body: `first` (already read), then the bytes of `rest` read a
/// chunk at a time as the client takes them, all at the pinned version. A
/// failure after the headers went out can only cut the body short, which the
/// client sees against `Content-Length`.
fn object_body(object: Arc<ResponseObject>, first: Bytes, rest: Range<u64>) -> StreamingBlob {
    let tail = futures::stream::try_unfold(rest, move |rest| {
        let object = object.clone();
        async move {
            if rest.start >= rest.end {
                return Ok(None);
            }
            let chunk = rest.start..chunk_end(rest.start, rest.end, object.chunk);
            let bytes = read_span(
                &object.store,
                &object.path,
                &object.version,
                chunk.clone(),
                object.chunk,
                object.route.as_ref(),
            )
            .await
            .inspect_err(|e| warn!(path = %object.path, error = %e, "S3 API: body cut short"))?;
            Ok::<_, object_store::Error>(Some((bytes, chunk.end..rest.end)))
        }
    });
    let stream = futures::stream::once(std::future::ready(Ok(first)))
        .chain(tail)
        .map_ok(Frame::data);
    // The store's futures are not `Sync`; s3s keeps such a body behind a lock.
    StreamingBlob::from(s3s::Body::http_body_unsync(StreamBody::new(stream)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(first: u64, last: Option<u64>) -> ByteRange {
        ByteRange::Int { first, last }
    }

    fn suffix(length: u64) -> ByteRange {
        ByteRange::Suffix { length }
    }

    #[test]
    fn body_chunks_end_on_chunk_boundaries() {
        assert_eq!(chunk_end(0, 100, 16), 16);
        assert_eq!(chunk_end(5, 100, 16), 16);
        assert_eq!(chunk_end(16, 100, 16), 32);
        assert_eq!(chunk_end(96, 100, 16), 100);
        assert_eq!(chunk_end(u64::MAX - 1, u64::MAX, 16), u64::MAX);
    }

    #[test]
    fn ranges_resolve_against_the_size() {
        assert_eq!(resolve(from(0, Some(99)), 1000), Some(0..100));
        assert_eq!(resolve(from(990, Some(2000)), 1000), Some(990..1000), "cut at the end");
        assert_eq!(resolve(from(999, None), 1000), Some(999..1000));
        assert_eq!(resolve(from(1000, None), 1000), None, "start at the end");
        assert_eq!(resolve(suffix(10), 1000), Some(990..1000));
        assert_eq!(resolve(suffix(5000), 1000), Some(0..1000));
        assert_eq!(resolve(suffix(0), 1000), None);
        assert_eq!(resolve(suffix(1), 0), None, "empty object");
        assert_eq!(resolve(from(0, None), 0), None);
    }

    #[test]
    fn entity_tags_are_quoted_once_and_xml_safe() {
        let tag = |t: &str| {
            let mut v = ObjectVersion::from_meta(&object_store::ObjectMeta {
                location: ObjectPath::from("k"),
                last_modified: Default::default(),
                size: 1,
                e_tag: None,
                version: None,
            });
            v.tag = Arc::from(t);
            entity_tag(&v).value().to_string()
        };
        assert_eq!(tag("\"abc\""), "abc");
        assert_eq!(tag("abc"), "abc");
        assert_eq!(tag("W/\"abc\""), "abc");
        assert_eq!(tag("a b\u{7f}"), "a_b_");
        assert_eq!(tag("a<&>'b"), "a____b");
    }
}
