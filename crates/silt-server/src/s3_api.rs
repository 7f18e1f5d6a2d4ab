//! An S3-compatible read API over the registered tables (DESIGN.md: Alluxio's
//! "unchanged byte readers"): any S3 client — object_store's `AmazonS3`,
//! boto3, DuckDB — reads a table's Parquet files through Silt's tiers instead
//! of from the object store, and decodes them itself.
//!
//! Served on the admin listener under `/s3`, path-style:
//!
//! | request | S3 operation |
//! |---|---|
//! | `GET /s3/{table}?list-type=2[&prefix=&delimiter=&start-after=&continuation-token=&max-keys=]` | ListObjectsV2 |
//! | `HEAD /s3/{table}` | HeadBucket |
//! | `GET /s3/{table}/{key}` (`Range: bytes=a-b`, `a-`, `-n`) | GetObject |
//! | `HEAD /s3/{table}/{key}` | HeadObject |
//!
//! **Keys.** The bucket is the table's name. A table registered with a prefix
//! URL (`s3://tpch/lineitem/`) holds every `*.parquet` object below it — the
//! files its queries read — keyed by the path relative to the prefix
//! (`part-0.parquet`, `year=2024/part-1.parquet`); other objects under the
//! prefix are not visible. A one-object table (`file:///x/f.parquet`) holds
//! one key, the object's file name (`f.parquet`).
//!
//! **Reads** go through the table's [`CachedStore`] (page buffer, disk tier,
//! then the object store), so a range read twice costs one upstream GET. A
//! GET reads the version a query would read ([`CachedStore::read_version`]):
//! the version last validated by a LIST or HEAD while the table's freshness
//! trusts it (under `always`, each LIST or HEAD an S3 client makes validates,
//! as a query's planning does), a fresh HEAD otherwise. One response is pinned
//! to one version; if the cache held a version the store no longer has (a
//! miss fails its `If-Match`), the object is revalidated and the read starts
//! again once. Bodies are read in chunks of [`BODY_CHUNK_PAGES`] cache pages
//! as the client takes them, so one response never holds more than that in
//! memory.
//!
//! **Not checked:** request signatures (any or no credentials are accepted).
//! On a server with an auth token every S3 request is refused (403
//! `AccessDenied`): S3 clients cannot send Silt's bearer token, so byte serving
//! needs an unauthenticated server (or, later, a mapping of S3 keys to tokens).

use std::collections::HashMap;
use std::future::Future;
use std::ops::Range;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use silt_cache::{CachedStore, ObjectVersion};
use silt_store::TableLocation;
use tracing::warn;

use crate::engine::{CatalogEntry, Engine, EntryKind};
use crate::metrics::ServerMetrics;

/// Cache pages read per step of a response body (8 MiB with the default
/// 1 MiB pages): bounds the memory one response holds, however large the
/// range asked for. Chunks are aligned to whole pages.
pub const BODY_CHUNK_PAGES: u64 = 8;
/// Most keys one ListObjectsV2 page returns (S3's own limit).
const MAX_KEYS: usize = 1000;
/// What makes an object under a prefix part of the table (as for queries).
const PARQUET: &str = ".parquet";

/// The `/s3` routes, merged into the admin router.
pub fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/s3/{table}", get(list_objects).head(head_bucket))
        .route("/s3/{table}/", get(list_objects).head(head_bucket))
        .route("/s3/{table}/{*key}", get(get_object).head(head_object))
}

/// Why an S3 request failed; each maps to S3's error code and status.
#[derive(Debug, thiserror::Error)]
pub enum S3Error {
    #[error(
        "the S3 API is disabled on a server with an auth token (S3 requests cannot carry it; signatures are not checked)"
    )]
    AccessDenied,
    #[error("no table {0:?}")]
    NoSuchBucket(String),
    #[error("table {table:?} is unavailable: {cause}")]
    Unavailable { table: String, cause: String },
    #[error("no object {key:?} in table {table:?}")]
    NoSuchKey { table: String, key: String },
    #[error("range {range:?} selects no byte of {key:?} ({size} bytes)")]
    InvalidRange { key: String, range: String, size: u64 },
    #[error("{0}")]
    InvalidArgument(String),
    #[error("reading {object}: {source}")]
    Internal {
        object: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl S3Error {
    fn status(&self) -> StatusCode {
        match self {
            S3Error::AccessDenied => StatusCode::FORBIDDEN,
            S3Error::NoSuchBucket(_) | S3Error::NoSuchKey { .. } => StatusCode::NOT_FOUND,
            S3Error::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            S3Error::InvalidRange { .. } => StatusCode::RANGE_NOT_SATISFIABLE,
            S3Error::InvalidArgument(_) => StatusCode::BAD_REQUEST,
            S3Error::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn code(&self) -> &'static str {
        match self {
            S3Error::AccessDenied => "AccessDenied",
            S3Error::NoSuchBucket(_) => "NoSuchBucket",
            S3Error::Unavailable { .. } => "ServiceUnavailable",
            S3Error::NoSuchKey { .. } => "NoSuchKey",
            S3Error::InvalidRange { .. } => "InvalidRange",
            S3Error::InvalidArgument(_) => "InvalidArgument",
            S3Error::Internal { .. } => "InternalError",
        }
    }

    /// S3's XML error document (headers only when answering a HEAD, which
    /// has no body).
    fn into_s3_response(self, metrics: &ServerMetrics, head: bool) -> Response {
        if matches!(self, S3Error::Internal { .. }) {
            warn!(error = %self, "S3 API request failed");
        }
        let mut headers = HeaderMap::new();
        if let S3Error::InvalidRange { size, .. } = &self {
            insert(&mut headers, header::CONTENT_RANGE, format!("bytes */{size}"));
        }
        if head {
            return (self.status(), headers).into_response();
        }
        let mut xml = String::from(r#"<?xml version="1.0" encoding="UTF-8"?><Error>"#);
        element(&mut xml, "Code", self.code());
        element(&mut xml, "Message", &self.to_string());
        xml.push_str("</Error>");
        (headers, xml_response(metrics, self.status(), xml)).into_response()
    }
}

/// Runs one S3 request: counts it, refuses it on a server with an auth
/// token, and turns an error into S3's error response.
async fn answer(engine: &Engine, head: bool, work: impl Future<Output = Result<Response, S3Error>>) -> Response {
    engine.metrics().s3_requests.increment(1);
    let result = match engine.config().auth_token.as_deref() {
        Some(token) if !token.is_empty() => Err(S3Error::AccessDenied),
        _ => work.await,
    };
    result.unwrap_or_else(|e| e.into_s3_response(engine.metrics(), head))
}

fn bad_path(e: PathRejection) -> S3Error {
    S3Error::InvalidArgument(format!("invalid request path: {e}"))
}

async fn list_objects(
    State(engine): State<Arc<Engine>>,
    table: Result<Path<String>, PathRejection>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    answer(&engine, false, async {
        let bucket = Bucket::open(&engine, &table.map_err(bad_path)?.0).await?;
        let query = query.map_err(|e| S3Error::InvalidArgument(format!("invalid query string: {e}")))?;
        let params = ListParams::from_query(&query.0)?;
        let entries = bucket.objects().await?;
        let xml = list_xml(&bucket.name, &params, &list_page(&entries, &params));
        Ok(xml_response(engine.metrics(), StatusCode::OK, xml))
    })
    .await
}

async fn head_bucket(State(engine): State<Arc<Engine>>, table: Result<Path<String>, PathRejection>) -> Response {
    answer(&engine, true, async {
        Bucket::open(&engine, &table.map_err(bad_path)?.0).await?;
        Ok(StatusCode::OK.into_response())
    })
    .await
}

async fn get_object(
    State(engine): State<Arc<Engine>>,
    key: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
) -> Response {
    answer(&engine, false, async {
        let (table, key) = key.map_err(bad_path)?.0;
        let bucket = Bucket::open(&engine, &table).await?;
        bucket.get(&key, requested_range(&headers)?, engine.metrics()).await
    })
    .await
}

async fn head_object(
    State(engine): State<Arc<Engine>>,
    key: Result<Path<(String, String)>, PathRejection>,
) -> Response {
    answer(&engine, true, async {
        let (table, key) = key.map_err(bad_path)?.0;
        Bucket::open(&engine, &table).await?.head(&key).await
    })
    .await
}

/// The `Range` header of a GET, parsed, with its text (for error messages).
fn requested_range(headers: &HeaderMap) -> Result<Option<(ByteRange, String)>, S3Error> {
    let Some(value) = headers.get(header::RANGE) else {
        return Ok(None);
    };
    let text = value.to_str().map_err(|_| bad_range(&format!("{value:?}")))?;
    Ok(Some((ByteRange::parse(text)?, text.to_string())))
}

/// One object of a bucket, as listed.
#[derive(Debug, Clone)]
struct Entry {
    key: String,
    version: ObjectVersion,
}

/// Where a bucket's objects are in its table's store (namespaced paths).
enum Layout {
    /// Every `*.parquet` below `root`, keyed by the path relative to it.
    Prefix { root: ObjectPath },
    /// The one object at `path`, keyed `key` (its file name).
    Single { key: String, path: ObjectPath },
}

/// A registered table seen as an S3 bucket.
struct Bucket {
    name: String,
    /// The table's URL, to name objects in errors.
    url: String,
    store: Arc<CachedStore>,
    layout: Layout,
    /// Bytes per step of a response body.
    chunk: u64,
}

impl Bucket {
    /// The bucket of table `name`: views and unknown names are no bucket; an
    /// unavailable table is retried (as a query would) before it is refused.
    async fn open(engine: &Engine, name: &str) -> Result<Bucket, S3Error> {
        let mut entry = engine.catalog().remove(name);
        if entry.as_ref().is_some_and(|e| e.unavailable.is_some()) {
            engine.retry_unavailable().await;
            entry = engine.catalog().remove(name);
        }
        let Some(CatalogEntry {
            kind: EntryKind::Table { config, .. },
            unavailable,
            ..
        }) = entry
        else {
            return Err(S3Error::NoSuchBucket(name.to_string()));
        };
        let store = match (unavailable, engine.table_store(name)) {
            (None, Some(store)) => store,
            (cause, _) => {
                return Err(S3Error::Unavailable {
                    table: name.to_string(),
                    cause: cause.unwrap_or_else(|| "not registered".into()),
                });
            }
        };
        let location = TableLocation::parse(&config.url).map_err(|e| S3Error::Internal {
            object: config.url.clone(),
            source: e.into(),
        })?;
        let path = store.qualify(&ObjectPath::from(location.path.as_str()));
        let layout = match (location.is_prefix, path.filename()) {
            (false, Some(file)) => Layout::Single {
                key: file.to_string(),
                path: path.clone(),
            },
            _ => Layout::Prefix { root: path },
        };
        Ok(Bucket {
            name: name.to_string(),
            url: config.url,
            store,
            layout,
            chunk: engine.tiers().page_size().max(1).saturating_mul(BODY_CHUNK_PAGES),
        })
    }

    /// The namespaced path of `key`, if `key` can name an object of this bucket.
    fn object_path(&self, key: &str) -> Result<ObjectPath, S3Error> {
        let relative = parse_key(key)?;
        match &self.layout {
            Layout::Prefix { root } if key.ends_with(PARQUET) => {
                Ok(ObjectPath::from_iter(root.parts().chain(relative.parts())))
            }
            Layout::Single { key: only, path } if key == only => Ok(path.clone()),
            _ => Err(self.no_such_key(key)),
        }
    }

    fn no_such_key(&self, key: &str) -> S3Error {
        S3Error::NoSuchKey {
            table: self.name.clone(),
            key: key.to_string(),
        }
    }

    /// The error of a failed store call on `key` ("" for the whole table).
    fn store_error(&self, key: &str, e: object_store::Error) -> S3Error {
        match e {
            object_store::Error::NotFound { .. } => self.no_such_key(key),
            other => {
                let object = match &self.layout {
                    Layout::Prefix { .. } => format!("object {key:?} of table {:?} ({}{key})", self.name, self.url),
                    Layout::Single { .. } => format!("object {key:?} of table {:?} ({})", self.name, self.url),
                };
                S3Error::Internal {
                    object,
                    source: other.into(),
                }
            }
        }
    }

    /// Every object of the bucket, sorted by key. A prefix is listed through
    /// the cache (a LIST or a listing the table's freshness trusts); a
    /// one-object table is HEADed, as its queries do.
    async fn objects(&self) -> Result<Vec<Entry>, S3Error> {
        let listed = match &self.layout {
            Layout::Single { key, path } => self.store.head(path).await.map(|meta| {
                vec![Entry {
                    key: key.clone(),
                    version: ObjectVersion::from_meta(&meta),
                }]
            }),
            Layout::Prefix { root } => self
                .store
                .list(Some(root))
                .try_collect::<Vec<_>>()
                .await
                .map(|metas| entries_below(root, metas)),
        };
        match listed {
            Ok(entries) => Ok(entries),
            Err(object_store::Error::NotFound { .. }) => Ok(Vec::new()),
            Err(e) => Err(self.store_error("", e)),
        }
    }

    /// HeadObject: the object's version through the cache (validated per the
    /// table's freshness, as for queries).
    async fn head(&self, key: &str) -> Result<Response, S3Error> {
        let path = self.object_path(key)?;
        let meta = self.store.head(&path).await.map_err(|e| self.store_error(key, e))?;
        let version = ObjectVersion::from_meta(&meta);
        Ok((StatusCode::OK, object_headers(&version, version.size)).into_response())
    }

    /// GetObject: the whole object (200) or one range of it (206).
    async fn get(
        &self,
        key: &str,
        range: Option<(ByteRange, String)>,
        metrics: &ServerMetrics,
    ) -> Result<Response, S3Error> {
        let path = self.object_path(key)?;
        let (version, span, first) = self.read_first(key, &path, range.as_ref()).await?;
        let mut headers = object_headers(&version, span.end - span.start);
        let status = if range.is_some() {
            let content_range = format!("bytes {}-{}/{}", span.start, span.end - 1, version.size);
            insert(&mut headers, header::CONTENT_RANGE, content_range);
            StatusCode::PARTIAL_CONTENT
        } else {
            StatusCode::OK
        };
        let rest = span.start + first.len() as u64..span.end;
        let reader = Arc::new(PinnedObject {
            store: self.store.clone(),
            path,
            version,
            chunk: self.chunk,
        });
        let body = object_body(reader, first, rest, metrics.s3_bytes_sent.clone());
        Ok((status, headers, body).into_response())
    }

    /// The version to serve, the span of it the request selects, and the
    /// first chunk of that span: read before any header is sent, so a failing
    /// store becomes an error status rather than a cut body. If the version
    /// the cache held is gone upstream (a miss failed its `If-Match`), the
    /// object is revalidated and the read starts again, once.
    async fn read_first(
        &self,
        key: &str,
        path: &ObjectPath,
        range: Option<&(ByteRange, String)>,
    ) -> Result<(ObjectVersion, Range<u64>, Bytes), S3Error> {
        let mut version = self
            .store
            .read_version(path)
            .await
            .map_err(|e| self.store_error(key, e))?;
        let mut revalidated = false;
        loop {
            let span = match range {
                None => 0..version.size,
                Some((r, text)) => r.resolve(version.size).ok_or_else(|| S3Error::InvalidRange {
                    key: key.to_string(),
                    range: text.clone(),
                    size: version.size,
                })?,
            };
            let first = span.start..chunk_end(span.start, span.end, self.chunk);
            match self.store.read_at(path, &version, first).await {
                Ok(bytes) => return Ok((version, span, bytes)),
                Err(object_store::Error::Precondition { .. }) if !revalidated => {
                    revalidated = true;
                    version = self
                        .store
                        .revalidate(path)
                        .await
                        .map_err(|e| self.store_error(key, e))?;
                }
                Err(e) => return Err(self.store_error(key, e)),
            }
        }
    }
}

/// `key` as an object path relative to the bucket. Keys must be plain
/// relative paths: no `.` or `..` segments, no empty segments, no leading or
/// trailing `/`, no control characters — nothing that could reach outside
/// the table's prefix or name one object two ways.
fn parse_key(key: &str) -> Result<ObjectPath, S3Error> {
    match ObjectPath::parse(key) {
        Ok(p) if !key.is_empty() && p.as_ref() == key => Ok(p),
        _ => Err(S3Error::InvalidArgument(format!("invalid object key {key:?}"))),
    }
}

/// The `*.parquet` objects of a listing below `root`, keyed relative to it.
fn entries_below(root: &ObjectPath, metas: Vec<object_store::ObjectMeta>) -> Vec<Entry> {
    let mut entries: Vec<Entry> = metas
        .into_iter()
        .filter_map(|meta| {
            let parts: Vec<String> = meta
                .location
                .prefix_match(root)?
                .map(|p| p.as_ref().to_string())
                .collect();
            let key = parts.join("/");
            key.ends_with(PARQUET).then(|| Entry {
                key,
                version: ObjectVersion::from_meta(&meta),
            })
        })
        .collect();
    entries.sort_by(|a, b| a.key.cmp(&b.key));
    entries
}

/// One object at one version: what every chunk of one response reads.
struct PinnedObject {
    store: Arc<CachedStore>,
    path: ObjectPath,
    version: ObjectVersion,
    chunk: u64,
}

/// Where the body chunk starting at `start` ends: at the next multiple of
/// `chunk` (so chunks cover whole pages), or at `end`.
fn chunk_end(start: u64, end: u64, chunk: u64) -> u64 {
    (start / chunk).saturating_add(1).saturating_mul(chunk).min(end)
}

/// A GET's body: `first` (already read), then the bytes of `rest` read a
/// chunk at a time as the client takes them, all at the pinned version. A failure after the headers went out can only cut the body
/// short, which the client sees against `Content-Length`.
fn object_body(object: Arc<PinnedObject>, first: Bytes, rest: Range<u64>, sent: metrics::Counter) -> Body {
    let tail = futures::stream::try_unfold(rest, move |rest| {
        let object = object.clone();
        async move {
            if rest.start >= rest.end {
                return Ok(None);
            }
            let chunk = rest.start..chunk_end(rest.start, rest.end, object.chunk);
            let bytes = object
                .store
                .read_at(&object.path, &object.version, chunk.clone())
                .await
                .inspect_err(|e| warn!(path = %object.path, error = %e, "S3 API: body cut short"))?;
            Ok::<_, object_store::Error>(Some((bytes, chunk.end..rest.end)))
        }
    });
    let stream = futures::stream::once(std::future::ready(Ok(first)))
        .chain(tail)
        .inspect_ok(move |b| sent.increment(b.len() as u64));
    Body::from_stream(stream)
}

/// The headers HEAD and GET share: size of the body, version, range support.
fn object_headers(version: &ObjectVersion, content_length: u64) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(content_length));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    insert(&mut headers, header::ETAG, entity_tag(version));
    let modified = version.meta.last_modified.format("%a, %d %b %Y %H:%M:%S GMT");
    insert(&mut headers, header::LAST_MODIFIED, modified.to_string());
    headers
}

/// Sets a header whose value Silt built (so always valid; skipped otherwise).
fn insert(headers: &mut HeaderMap, name: HeaderName, value: String) {
    if let Ok(v) = HeaderValue::try_from(value) {
        headers.insert(name, v);
    }
}

/// The ETag clients see: the upstream ETag (else Silt's size-mtime tag) as
/// one quoted entity tag. Characters an entity tag cannot hold become `_`,
/// the same way in listings, HEAD and GET, so clients can compare them.
fn entity_tag(version: &ObjectVersion) -> String {
    let raw = version.tag.trim_start_matches("W/").trim_matches('"');
    let inner: String = raw
        .chars()
        .map(|c| if c == '!' || ('#'..='~').contains(&c) { c } else { '_' })
        .collect();
    format!("\"{inner}\"")
}

/// A byte range as the client asked for it, before the object's size is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ByteRange {
    /// `bytes=a-b` (`last` inclusive) or `bytes=a-` (`last` = `None`).
    From { first: u64, last: Option<u64> },
    /// `bytes=-n`: the last `n` bytes.
    Suffix(u64),
}

fn bad_range(value: &str) -> S3Error {
    S3Error::InvalidArgument(format!(
        "invalid Range header {value:?}: expected one range, bytes=FIRST-LAST, bytes=FIRST- or bytes=-LENGTH"
    ))
}

impl ByteRange {
    /// Parses a `Range` header value. One range of bytes only: a malformed
    /// or multi-range header is refused (400) rather than answered with the
    /// whole object, which could be far larger than the client expects.
    fn parse(value: &str) -> Result<ByteRange, S3Error> {
        let (first, last) = value
            .trim()
            .strip_prefix("bytes=")
            .filter(|spec| !spec.contains(','))
            .and_then(|spec| spec.split_once('-'))
            .ok_or_else(|| bad_range(value))?;
        let (first, last) = (first.trim(), last.trim());
        let range = match (first.is_empty(), last.is_empty()) {
            (true, false) => number(last).map(ByteRange::Suffix),
            (false, true) => number(first).map(|first| ByteRange::From { first, last: None }),
            (false, false) => match (number(first), number(last)) {
                (Some(first), Some(last)) if first <= last => Some(ByteRange::From {
                    first,
                    last: Some(last),
                }),
                _ => None,
            },
            (true, true) => None,
        };
        range.ok_or_else(|| bad_range(value))
    }

    /// The bytes of an object of `size` bytes this range selects (a range
    /// running past the end is cut there), or `None` when it selects none
    /// (416): a start at or past the end, or a suffix of an empty object.
    fn resolve(self, size: u64) -> Option<Range<u64>> {
        match self {
            ByteRange::From { first, last } => {
                (first < size).then(|| first..last.map_or(size, |l| l.saturating_add(1).min(size)))
            }
            ByteRange::Suffix(n) => (n > 0 && size > 0).then(|| size - n.min(size)..size),
        }
    }
}

/// A decimal number of a Range header. Numbers past `u64` saturate: they lie
/// past the end of any object anyway.
fn number(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(
        digits
            .bytes()
            .fold(0u64, |n, d| n.saturating_mul(10).saturating_add(u64::from(d - b'0'))),
    )
}

/// The parameters of a ListObjectsV2 request.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ListParams {
    prefix: String,
    /// Empty: no delimiter (a flat listing).
    delimiter: String,
    start_after: Option<String>,
    /// The `NextContinuationToken` of the page before: the last key it covered.
    token: Option<String>,
    max_keys: usize,
}

impl ListParams {
    fn from_query(query: &HashMap<String, String>) -> Result<ListParams, S3Error> {
        if query.get("list-type").map(String::as_str) != Some("2") {
            return Err(S3Error::InvalidArgument(
                "only ListObjectsV2 (GET /s3/TABLE?list-type=2) is supported on a bucket".into(),
            ));
        }
        let max_keys = match query.get("max-keys") {
            None => MAX_KEYS,
            Some(v) => v
                .trim()
                .parse::<u64>()
                .map(|n| usize::try_from(n).unwrap_or(MAX_KEYS).min(MAX_KEYS))
                .map_err(|_| S3Error::InvalidArgument(format!("invalid max-keys {v:?}")))?,
        };
        let given = |name: &str| query.get(name).filter(|v| !v.is_empty()).cloned();
        Ok(ListParams {
            prefix: query.get("prefix").cloned().unwrap_or_default(),
            delimiter: query.get("delimiter").cloned().unwrap_or_default(),
            start_after: given("start-after"),
            token: given("continuation-token"),
            max_keys,
        })
    }
}

/// One item of a listing page: an object, or a common prefix standing for
/// every key below it.
#[derive(Debug)]
enum Listed<'a> {
    Object(&'a Entry),
    Prefix(String),
}

/// A page of a listing, and the token that resumes after it if more remain.
#[derive(Debug)]
struct ListPage<'a> {
    items: Vec<Listed<'a>>,
    next_token: Option<String>,
}

/// The page `params` selects from `entries` (sorted by key). The
/// continuation token is the last key the page covered (for a common prefix,
/// the last key below it), so the next page resumes with the keys after it.
fn list_page<'a>(entries: &'a [Entry], params: &ListParams) -> ListPage<'a> {
    let after = |key: &str| {
        [&params.start_after, &params.token]
            .iter()
            .all(|a| a.as_deref().is_none_or(|a| key > a))
    };
    let mut items: Vec<Listed<'a>> = Vec::new();
    let mut last_key: Option<&str> = None;
    for entry in entries
        .iter()
        .filter(|e| e.key.starts_with(&params.prefix) && after(&e.key))
    {
        let item = match common_prefix(&entry.key, &params.prefix, &params.delimiter) {
            Some(p) if matches!(items.last(), Some(Listed::Prefix(q)) if q == p) => {
                last_key = Some(&entry.key);
                continue;
            }
            Some(p) => Listed::Prefix(p.to_string()),
            None => Listed::Object(entry),
        };
        if items.len() == params.max_keys {
            return ListPage {
                items,
                next_token: last_key.map(str::to_string),
            };
        }
        items.push(item);
        last_key = Some(&entry.key);
    }
    ListPage {
        items,
        next_token: None,
    }
}

/// The common prefix `key` rolls up into: `prefix` and the rest of the key
/// up to and including the first `delimiter` after it.
fn common_prefix<'k>(key: &'k str, prefix: &str, delimiter: &str) -> Option<&'k str> {
    if delimiter.is_empty() {
        return None;
    }
    let rest = key.get(prefix.len()..)?;
    let at = rest.find(delimiter)?;
    key.get(..prefix.len() + at + delimiter.len())
}

/// ListObjectsV2's XML: every `Contents` before every `CommonPrefixes`
/// (object_store's parser wants each list in one run).
fn list_xml(bucket: &str, params: &ListParams, page: &ListPage) -> String {
    let mut x = String::from(r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    x.push_str(r#"<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">"#);
    element(&mut x, "Name", bucket);
    element(&mut x, "Prefix", &params.prefix);
    if !params.delimiter.is_empty() {
        element(&mut x, "Delimiter", &params.delimiter);
    }
    element(&mut x, "MaxKeys", &params.max_keys.to_string());
    element(&mut x, "KeyCount", &page.items.len().to_string());
    element(&mut x, "IsTruncated", &page.next_token.is_some().to_string());
    for (name, value) in [
        ("ContinuationToken", &params.token),
        ("StartAfter", &params.start_after),
        ("NextContinuationToken", &page.next_token),
    ] {
        if let Some(v) = value {
            element(&mut x, name, v);
        }
    }
    for item in &page.items {
        if let Listed::Object(e) = item {
            x.push_str("<Contents>");
            element(&mut x, "Key", &e.key);
            let modified = e.version.meta.last_modified.format("%Y-%m-%dT%H:%M:%S%.3fZ");
            element(&mut x, "LastModified", &modified.to_string());
            element(&mut x, "ETag", &entity_tag(&e.version));
            element(&mut x, "Size", &e.version.size.to_string());
            element(&mut x, "StorageClass", "STANDARD");
            x.push_str("</Contents>");
        }
    }
    for item in &page.items {
        if let Listed::Prefix(p) = item {
            x.push_str("<CommonPrefixes>");
            element(&mut x, "Prefix", p);
            x.push_str("</CommonPrefixes>");
        }
    }
    x.push_str("</ListBucketResult>");
    x
}

/// Appends `<name>text</name>`, with `text` escaped. Control characters,
/// which XML 1.0 cannot carry even escaped, become U+FFFD.
fn element(out: &mut String, name: &str, text: &str) {
    out.push('<');
    out.push_str(name);
    out.push('>');
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c.is_control() => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out.push_str("</");
    out.push_str(name);
    out.push('>');
}

/// An XML document as a response body, counted in `silt_s3_bytes_sent_total`.
fn xml_response(metrics: &ServerMetrics, status: StatusCode, xml: String) -> Response {
    metrics.s3_bytes_sent.increment(xml.len() as u64);
    (status, [(header::CONTENT_TYPE, "application/xml")], xml).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(first: u64, last: Option<u64>) -> ByteRange {
        ByteRange::From { first, last }
    }

    #[test]
    fn range_headers_parse() {
        assert_eq!(ByteRange::parse("bytes=0-99").unwrap(), from(0, Some(99)));
        assert_eq!(ByteRange::parse(" bytes=5- ").unwrap(), from(5, None));
        assert_eq!(ByteRange::parse("bytes=-10").unwrap(), ByteRange::Suffix(10));
        assert_eq!(ByteRange::parse("bytes=7-7").unwrap(), from(7, Some(7)));
        // Past u64: saturates instead of failing (it is past any object's end).
        assert_eq!(
            ByteRange::parse("bytes=0-99999999999999999999999").unwrap(),
            from(0, Some(u64::MAX))
        );
        for bad in [
            "",
            "bytes=",
            "bytes=-",
            "bytes=a-b",
            "bytes=5-2",
            "bytes=0-1,4-5",
            "items=0-1",
            "bytes=--1",
            "bytes=1-2-3",
            "bytes=+1-2",
            "bytes=0x10-",
        ] {
            let err = ByteRange::parse(bad).unwrap_err();
            assert_eq!(err.status(), StatusCode::BAD_REQUEST, "{bad:?}: {err}");
        }
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
        assert_eq!(from(0, Some(99)).resolve(1000), Some(0..100));
        assert_eq!(from(990, Some(2000)).resolve(1000), Some(990..1000), "cut at the end");
        assert_eq!(from(0, Some(u64::MAX)).resolve(1000), Some(0..1000), "no overflow");
        assert_eq!(from(999, None).resolve(1000), Some(999..1000));
        assert_eq!(from(1000, None).resolve(1000), None, "start at the end");
        assert_eq!(from(u64::MAX, None).resolve(1000), None);
        assert_eq!(ByteRange::Suffix(10).resolve(1000), Some(990..1000));
        assert_eq!(ByteRange::Suffix(5000).resolve(1000), Some(0..1000));
        assert_eq!(ByteRange::Suffix(0).resolve(1000), None);
        assert_eq!(ByteRange::Suffix(1).resolve(0), None, "empty object");
        assert_eq!(from(0, None).resolve(0), None);
    }

    fn entries(keys: &[&str]) -> Vec<Entry> {
        keys.iter()
            .map(|k| Entry {
                key: k.to_string(),
                version: ObjectVersion::from_meta(&object_store::ObjectMeta {
                    location: ObjectPath::from(*k),
                    last_modified: Default::default(),
                    size: 1,
                    e_tag: Some("\"e\"".into()),
                    version: None,
                }),
            })
            .collect()
    }

    fn params(prefix: &str, delimiter: &str, max_keys: usize, token: Option<&str>) -> ListParams {
        ListParams {
            prefix: prefix.into(),
            delimiter: delimiter.into(),
            start_after: None,
            token: token.map(str::to_string),
            max_keys,
        }
    }

    fn names(page: &ListPage) -> Vec<String> {
        page.items
            .iter()
            .map(|i| match i {
                Listed::Object(e) => e.key.clone(),
                Listed::Prefix(p) => format!("{p}*"),
            })
            .collect()
    }

    #[test]
    fn listing_pages_resume_after_their_token() {
        let all = entries(&["a.parquet", "b/1.parquet", "b/2.parquet", "c.parquet", "d/x/1.parquet"]);
        let flat = list_page(&all, &params("", "", 2, None));
        assert_eq!(names(&flat), ["a.parquet", "b/1.parquet"]);
        let next = list_page(&all, &params("", "", 2, flat.next_token.as_deref()));
        assert_eq!(names(&next), ["b/2.parquet", "c.parquet"]);
        let last = list_page(&all, &params("", "", 2, next.next_token.as_deref()));
        assert_eq!(names(&last), ["d/x/1.parquet"]);
        assert!(last.next_token.is_none());

        // A common prefix is one item; the next page starts after all its keys.
        let grouped = list_page(&all, &params("", "/", 2, None));
        assert_eq!(names(&grouped), ["a.parquet", "b/*"]);
        assert_eq!(grouped.next_token.as_deref(), Some("b/2.parquet"));
        let rest = list_page(&all, &params("", "/", 2, grouped.next_token.as_deref()));
        assert_eq!(names(&rest), ["c.parquet", "d/*"]);
        assert!(rest.next_token.is_none());

        assert_eq!(names(&list_page(&all, &params("d/", "/", 10, None))), ["d/x/*"]);
        assert_eq!(
            names(&list_page(&all, &params("b", "", 10, None))),
            ["b/1.parquet", "b/2.parquet"]
        );
        assert!(list_page(&all, &params("", "", 0, None)).items.is_empty());
    }

    #[test]
    fn keys_must_be_plain_relative_paths() {
        for bad in [
            "",
            "..",
            "../x.parquet",
            "a/../b.parquet",
            "./a.parquet",
            "a//b.parquet",
            "/a.parquet",
            "a/",
            "a\u{1}.parquet",
        ] {
            assert_eq!(parse_key(bad).unwrap_err().status(), StatusCode::BAD_REQUEST, "{bad:?}");
        }
        assert_eq!(
            parse_key("year=2024/part 0.parquet").unwrap().as_ref(),
            "year=2024/part 0.parquet"
        );
    }

    #[test]
    fn xml_text_is_escaped_and_tags_quoted() {
        let mut x = String::new();
        element(&mut x, "Key", "a<&>\"'\u{0}b");
        assert_eq!(x, "<Key>a&lt;&amp;&gt;&quot;&apos;\u{FFFD}b</Key>");
        let v = |tag: &str| {
            let mut v = entries(&["k"]).remove(0).version;
            v.tag = Arc::from(tag);
            entity_tag(&v)
        };
        assert_eq!(v("\"abc\""), "\"abc\"");
        assert_eq!(v("abc"), "\"abc\"");
        assert_eq!(v("W/\"abc\""), "\"abc\"");
        assert_eq!(v("a b\u{7f}"), "\"a_b_\"");
    }
}
