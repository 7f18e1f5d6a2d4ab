//! An S3-compatible read API over the registered tables (DESIGN.md: Alluxio's
//! "unchanged byte readers"): any S3 client — object_store's `AmazonS3`,
//! boto3, pyarrow, DuckDB — reads a table's Parquet files through Silt's
//! tiers instead of from the object store, and decodes them itself.
//!
//! Served by the `s3s` crate (request parsing, SigV4 checks, XML) in two
//! places: at the root of its own listener (`--s3-listen`, `[s3_api]
//! listen`), for clients that take an endpoint host and no path (Spark's
//! S3A, Trino), path style or virtual-host style ([`hosts`]: `Host:
//! TABLE.localhost:PORT`); and under `/s3` on the admin listener, path style
//! only (kept for the clients configured with it). At the root:
//!
//! | request | S3 operation |
//! |---|---|
//! | `GET /` | ListBuckets (the tables) |
//! | `GET /{table}?list-type=2[&prefix=&delimiter=&start-after=&continuation-token=&max-keys=]` | ListObjectsV2 |
//! | `HEAD /{table}` | HeadBucket |
//! | `GET /{table}/{key}` (`Range: bytes=a-b`, `a-`, `-n`) | GetObject |
//! | `HEAD /{table}/{key}` | HeadObject |
//!
//! (virtual-host style: the same without `/{table}`; under `/s3`: the same
//! with `/s3` in front).
//!
//! Everything else (writes, ListObjects v1, ...) is `NotImplemented`.
//!
//! **Keys** ([`bucket`]): the bucket is the table's name. A table registered
//! with a prefix URL (`s3://tpch/lineitem/`) holds every `*.parquet` object
//! below it, keyed by the path relative to the prefix; a one-object table
//! holds one key, the object's file name.
//!
//! **Reads** ([`read`]) go through the table's [`silt_cache::CachedStore`]:
//! one response is pinned to one version, the first chunk is read before the
//! headers go out, the rest streams in chunks of [`BODY_CHUNK_PAGES`] pages.
//!
//! **Errors** ([`errors`]): every failure of a table or of a read becomes
//! an S3 error in one function, by its kind.
//!
//! **Across a fleet** ([`peers`]): with `[cluster]` `servers` and `admin` (or `admin_port`),
//! each body chunk is read from the member that owns it (rendezvous
//! hashing), so any member answers for the whole fleet.
//!
//! **Auth.** With a key pair (`[s3_api]`, else `silt` + the auth token; see
//! [`crate::config::ServerConfig::s3_api_key`]) every request must be signed
//! with it (SigV4, or a presigned URL); unsigned ones get 403 `AccessDenied`.
//! At the root one s3s service checks the signature and serves the
//! operations. Under `/s3` clients sign the full path, `/s3` included, so
//! the signature is checked by a first s3s service that sees the request as sent (its bucket is `s3`) and
//! hands every request to one route, [`Forward`]; that route strips `/s3` and
//! the signature and passes the request to the second s3s service, which
//! routes it to the operations of [`service::TableBuckets`]. Without a key
//! pair the first service is skipped and signatures are ignored.

mod bucket;
mod errors;
mod hosts;
mod listing;
pub mod peers;
mod read;
mod service;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::uri::PathAndQuery;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use http_body_util::BodyExt;
use s3s::auth::SimpleAuth;
use s3s::route::S3Route;
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::validation::NameValidation;
use s3s::{HttpRequest, S3, S3Error, S3Request, S3Response, S3Result, s3_error};

use crate::engine::Engine;
use crate::metrics::ServerMetrics;

/// Cache pages read per step of a response body (512 KiB with the default
/// 64 KiB pages): bounds the memory one response holds, however large the
/// range asked for. Chunks are aligned to whole pages.
pub const BODY_CHUNK_PAGES: u64 = 8;

/// Where the API is mounted on the admin listener.
const MOUNT: &str = "/s3";

/// Query parameters that carry a signature (SigV4 and SigV2 presigned URLs).
const SIGNATURE_PARAMS: [&str; 10] = [
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
    "X-Amz-Security-Token",
    "AWSAccessKeyId",
    "Signature",
    "Expires",
];

/// The `/s3` routes, merged into the admin router.
pub fn routes(engine: Arc<Engine>) -> Router<Arc<Engine>> {
    let serve = handler(S3Api::mounted(engine));
    Router::new()
        .route(MOUNT, any(serve.clone()))
        .route("/s3/", any(serve.clone()))
        .route("/s3/{*rest}", any(serve))
}

/// The router of the S3 listener: the API at the root, every path.
pub fn root_router(engine: Arc<Engine>) -> Router {
    Router::new().fallback(handler(S3Api::root(engine)))
}

/// An axum handler answering with `api`.
fn handler(api: S3Api) -> impl Fn(Request) -> std::pin::Pin<Box<dyn Future<Output = Response> + Send>> + Clone {
    let api = Arc::new(api);
    move |req: Request| {
        let api = api.clone();
        Box::pin(async move { api.serve(req).await })
    }
}

/// The S3 API of one server, as one listener serves it.
struct S3Api {
    entry: Entry,
    metrics: Arc<ServerMetrics>,
    /// Refuses requests while the server drains; counts running ones.
    drain: Arc<crate::drain::Drain>,
}

/// Where the API is served, and the s3s services that answer there.
enum Entry {
    /// At the root of the S3 listener: one service checks signatures (when
    /// a key pair is set) and serves the operations, buckets by path or by
    /// host.
    Root {
        service: S3Service,
        hosts: hosts::TableHosts,
    },
    /// Under `/s3` on the admin listener.
    Mounted {
        /// Checks signatures on the full path, then [`Forward`]s; `None`
        /// when no key pair is configured (requests go straight to `tables`).
        gate: Option<S3Service>,
        /// Serves the operations, on paths without `/s3`.
        tables: S3Service,
    },
}

impl S3Api {
    /// The API under `/s3` (see the module's doc for its two services).
    fn mounted(engine: Arc<Engine>) -> S3Api {
        let metrics = engine.metrics().clone();
        let drain = engine.drain().clone();
        let key = engine.config().s3_api_key();
        let tables = operations(engine).build();
        let gate = key.map(|(id, secret)| {
            let mut gate = S3ServiceBuilder::new(NoOperations);
            gate.set_validation(AnyTableName); // its bucket, `s3`, is too short for S3's rules
            gate.set_auth(SimpleAuth::from_single(id, secret));
            gate.set_route(Forward { tables: tables.clone() });
            gate.build()
        });
        S3Api {
            entry: Entry::Mounted { gate, tables },
            metrics,
            drain,
        }
    }

    /// The API at the root of its own listener. With a key pair, s3s's
    /// default access check refuses requests that carry no valid signature.
    fn root(engine: Arc<Engine>) -> S3Api {
        let metrics = engine.metrics().clone();
        let drain = engine.drain().clone();
        let key = engine.config().s3_api_key();
        let hosts = hosts::TableHosts { engine: engine.clone() };
        let mut service = operations(engine);
        service.set_host(hosts.clone());
        if let Some((id, secret)) = key {
            service.set_auth(SimpleAuth::from_single(id, secret));
        }
        S3Api {
            entry: Entry::Root {
                service: service.build(),
                hosts,
            },
            metrics,
            drain,
        }
    }

    /// Answers one request: counts it, refuses a key that is no plain object
    /// path, checks its signature (when keys are set), serves it, and counts
    /// the body bytes as they are handed to HTTP.
    async fn serve(&self, req: Request) -> Response {
        self.metrics.s3_requests.increment(1);
        let head = req.method() == Method::HEAD;
        let (mut parts, body) = req.into_parts();
        let body = s3s::Body::http_body_unsync(body);
        // Another scheme (Silt's `Bearer` token) is no S3 signature: such a
        // request is unsigned, so 403 `AccessDenied` rather than malformed.
        let aws = |v: &HeaderValue| v.as_bytes().starts_with(b"AWS4-") || v.as_bytes().starts_with(b"AWS ");
        if parts.headers.get(header::AUTHORIZATION).is_some_and(|v| !aws(v)) {
            parts.headers.remove(header::AUTHORIZATION);
        }
        // A draining server takes no new reads: 503, which S3 clients retry
        // (and a fleet's forwarding sends to the next owner).
        let running = self.drain.admit(None, false);
        let answer = match (&running, self.check_path(&parts), &self.entry) {
            (Err(e), _, _) => s3_error!(ServiceUnavailable, "{e}")
                .to_http_response()
                .map_err(|e| format!("{e:?}")),
            (Ok(_), Err(e), _) => e.to_http_response().map_err(|e| format!("{e:?}")),
            (Ok(_), Ok(()), Entry::Root { service, .. }) => service
                .call(HttpRequest::from_parts(parts, body))
                .await
                .map_err(|e| format!("{e:?}")),
            (Ok(_), Ok(()), Entry::Mounted { gate: Some(gate), .. }) => gate
                .call(HttpRequest::from_parts(parts, body))
                .await
                .map_err(|e| format!("{e:?}")),
            (Ok(_), Ok(()), Entry::Mounted { gate: None, tables }) => {
                match forwarded(parts.method, &parts.uri, parts.headers, body) {
                    Ok(req) => tables.call(req).await.map_err(|e| format!("{e:?}")),
                    Err(e) => e.to_http_response().map_err(|e| format!("{e:?}")),
                }
            }
        };
        let response = match answer {
            Ok(response) => response,
            Err(e) => {
                tracing::warn!(error = %e, "S3 API: no answer");
                return StatusCode::INTERNAL_SERVER_ERROR.into_response();
            }
        };
        if head {
            return response.map(|_| Body::empty());
        }
        let sent = self.metrics.s3_bytes_sent.clone();
        response.map(|body| {
            Body::new(body.map_frame(move |frame| {
                // The request runs until its body is sent (or dropped).
                let _running = &running;
                if let Some(data) = frame.data_ref() {
                    sent.increment(data.len() as u64);
                }
                frame
            }))
        })
    }
}

impl S3Api {
    /// [`check_path`] where this API is served: the path below `/s3`, or
    /// at the root with the bucket in the path or in the `Host` header.
    fn check_path(&self, parts: &axum::http::request::Parts) -> Result<(), S3Error> {
        let path = parts.uri.path();
        match &self.entry {
            Entry::Mounted { .. } => match path.strip_prefix(MOUNT).and_then(|p| p.strip_prefix('/')) {
                Some(rest) => check_path(path, rest, false),
                None => Ok(()),
            },
            Entry::Root { hosts, .. } => {
                // HTTP/2 carries the host as the URI's authority.
                let host = (parts.headers.get(header::HOST).and_then(|h| h.to_str().ok()))
                    .or_else(|| parts.uri.authority().map(|a| a.as_str()));
                let bucket_in_host = host.and_then(|h| hosts.bucket(h)).is_some();
                check_path(path, path.strip_prefix('/').unwrap_or(path), bucket_in_host)
            }
        }
    }
}

/// Refuses (400 `InvalidArgument`) a request whose object key — `rest` (the
/// request path `path` below the API's root), past the bucket unless the
/// bucket is in the host — is no plain object key (see
/// [`bucket::parse_key`]) or is not UTF-8 once percent-decoded — before s3s,
/// which would answer `InvalidURI`.
fn check_path(path: &str, rest: &str, bucket_in_host: bool) -> Result<(), S3Error> {
    let decoded = percent_encoding::percent_decode_str(rest)
        .decode_utf8()
        .map_err(|_| s3_error!(InvalidArgument, "the request path {path:?} is not UTF-8"))?;
    let key = if bucket_in_host {
        Some(decoded.as_ref())
    } else {
        decoded.split_once('/').map(|(_, key)| key)
    };
    match key {
        Some(key) if !key.is_empty() => bucket::parse_key(key).map(|_| ()),
        _ => Ok(()),
    }
}

/// The builder of the service that serves the operations over `engine`'s
/// tables (any table name is a valid bucket).
fn operations(engine: Arc<Engine>) -> S3ServiceBuilder {
    let peers = peers::Peers::new(engine.cluster(), engine.config(), engine.metrics()).map(Arc::new);
    let mut tables = S3ServiceBuilder::new(service::TableBuckets { engine, peers });
    tables.set_validation(AnyTableName);
    tables
}

/// The request the operations see: the path without `/s3` (so s3s parses
/// the table as the bucket), and no signature (checked already, or ignored
/// when no key is set).
fn forwarded(method: Method, uri: &Uri, mut headers: HeaderMap, body: s3s::Body) -> S3Result<HttpRequest> {
    let path = match uri.path().strip_prefix(MOUNT) {
        Some("") => "/",
        Some(p) if p.starts_with('/') => p,
        _ => return Err(s3_error!(InternalError, "{:?} is not under {MOUNT}", uri.path())),
    };
    let query: Vec<&str> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|pair| {
            let name = pair.split_once('=').map_or(*pair, |(name, _)| name);
            !pair.is_empty() && !SIGNATURE_PARAMS.contains(&name)
        })
        .collect();
    let target = if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", query.join("&"))
    };
    let uri = PathAndQuery::try_from(target)
        .map(Uri::from)
        .map_err(|e| s3_error!(InvalidURI, "{e}"))?;
    headers.remove(header::AUTHORIZATION);
    let mut req = HttpRequest::new(body);
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    Ok(req)
}

/// The route of the signature-checking service: every request, once its
/// signature checked out, goes to the operations.
struct Forward {
    tables: S3Service,
}

#[async_trait::async_trait]
impl S3Route for Forward {
    fn is_match(&self, _: &Method, _: &Uri, _: &HeaderMap, _: &mut axum::http::Extensions) -> bool {
        true
    }

    /// Only signed requests pass (s3s has verified the signature against the
    /// key pair before this is asked).
    async fn check_access(&self, req: &mut S3Request<s3s::Body>) -> S3Result<()> {
        match req.credentials {
            Some(_) => Ok(()),
            None => Err(s3_error!(
                AccessDenied,
                "this server's S3 API needs requests signed (AWS SigV4) with its access key"
            )),
        }
    }

    async fn call(&self, req: S3Request<s3s::Body>) -> S3Result<S3Response<s3s::Body>> {
        let req = forwarded(req.method, &req.uri, req.headers, req.input)?;
        let answer = self
            .tables
            .call(req)
            .await
            .map_err(|e| s3_error!(InternalError, "{e:?}"))?;
        let (parts, body) = answer.into_parts();
        let mut response = S3Response::with_status(body, parts.status);
        response.headers = parts.headers;
        Ok(response)
    }
}

/// The signature-checking service's own operations: none (its one route
/// takes every request).
struct NoOperations;

impl S3 for NoOperations {}

/// Any non-empty bucket name reaches the operations, which answer
/// `NoSuchBucket` for names that are no table (not S3's naming rules, which
/// would refuse table names like `hits_raw`).
struct AnyTableName;

impl NameValidation for AnyTableName {
    fn validate_bucket_name(&self, name: &str) -> bool {
        !name.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_before_s3s_sees_them() {
        let check = |rest: &str, bucket_in_host| check_path(rest, rest, bucket_in_host);
        for (rest, bucket_in_host) in [
            ("", false),
            ("events", false),
            ("events/", false),
            ("events/day%3D2/part%200.parquet", false),
            ("", true),
            ("day%3D2/part%200.parquet", true),
        ] {
            assert!(check(rest, bucket_in_host).is_ok(), "{rest}");
        }
        // Not UTF-8, a control character, `..` once decoded (the rest: `parse_key`'s test).
        for (bad, bucket_in_host) in [
            ("events/%ff.parquet", false),
            ("events/%00.parquet", false),
            ("events/%2e%2e/x.parquet", false),
            ("%2e%2e/x.parquet", true),
            ("a//x.parquet", true),
        ] {
            let code = check(bad, bucket_in_host).unwrap_err().code().clone();
            assert_eq!(code, s3s::S3ErrorCode::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn forwarded_requests_lose_the_mount_and_the_signature() {
        let uri: Uri = "/s3/events?list-type=2&X-Amz-Signature=ab&prefix=a%2Fb&X-Amz-Credential=x"
            .parse()
            .unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, "AWS4-HMAC-SHA256 ...".parse().unwrap());
        let req = forwarded(Method::GET, &uri, headers, s3s::Body::empty()).unwrap();
        assert_eq!(req.uri().to_string(), "/events?list-type=2&prefix=a%2Fb");
        assert!(req.headers().get(header::AUTHORIZATION).is_none());
        let root = forwarded(
            Method::GET,
            &"/s3".parse().unwrap(),
            HeaderMap::new(),
            s3s::Body::empty(),
        );
        assert_eq!(root.unwrap().uri().to_string(), "/");
        let outside = forwarded(
            Method::GET,
            &"/s3x".parse().unwrap(),
            HeaderMap::new(),
            s3s::Body::empty(),
        );
        assert!(outside.is_err());
    }
}
