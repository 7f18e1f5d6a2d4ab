//! The S3-compatible read API (at the root of the S3 listener, and under
//! `/s3` on the admin listener): object_store's `AmazonS3` and DataFusion
//! read a table's Parquet files through Silt's tiers; a warm read reaches no
//! object store; errors are S3 XML documents with S3's status codes; a server
//! with keys (or an auth token) serves only requests signed with them (SigV4,
//! presigned URLs too); buckets named by the `Host` header (virtual-host
//! style) on the S3 listener; TLS there too.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use futures::TryStreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::signer::Signer;
use object_store::{GetOptions, GetRange, ObjectMeta, ObjectStore, ObjectStoreExt, RetryConfig};
use silt_bench::files::write_members;
use silt_bench::local_s3::LocalS3;
use silt_bench::ports::free_addrs;
use silt_server::config::{S3ApiConfig, TableConfig};
use silt_server::{ServerConfig, ServerHandle};

use crate::common::metric;

const PAGE: u64 = 16 << 10;
const BUCKET: &str = "lake";

/// Where a test reaches the S3 API.
#[derive(Clone, Copy, Debug)]
enum Api {
    /// At the root of the S3 listener (`[s3_api] listen`).
    Root,
    /// Under `/s3` on the admin listener.
    Mounted,
}

/// A loopback S3 server holding `lake/events/` (three Parquet files, one in
/// a partition folder, one in a plain sub-folder that is not the table's,
/// and a `_SUCCESS` marker), and a Silt server with the tables
/// `events` (the folder), `one` (`part-0.parquet` alone) and a view `v`.
/// Both listeners serve the API; a test reads through `api`.
struct Lake {
    s3: LocalS3,
    server: ServerHandle,
    api: Api,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl Lake {
    /// The lake, read through `/s3` on the admin listener.
    async fn start(tweak: impl FnOnce(&mut ServerConfig)) -> Lake {
        Lake::start_at(Api::Mounted, tweak).await
    }

    async fn start_at(api: Api, tweak: impl FnOnce(&mut ServerConfig)) -> Lake {
        let root = tempfile::tempdir().unwrap();
        // Files placed in the folder directly (not uploaded) get their ETag
        // recomputed on every request, so overwriting one is seen.
        let events = root.path().join(BUCKET).join("events");
        write_events(&events.join("part-0.parquet"), 0, 20_000);
        write_events(&events.join("part-1.parquet"), 20_000, 5_000);
        write_events(&events.join("day=2/part-2.parquet"), 25_000, 3_000);
        // Not the table's: DataFusion's listing skips sub-folders that are
        // not `key=value` partitions, and so does every surface of Silt.
        write_events(&events.join("archive/part-9.parquet"), 90_000, 1_000);
        std::fs::write(events.join("_SUCCESS"), b"").unwrap();
        let s3 = LocalS3::start(root.path()).await.unwrap();
        let cache = tempfile::tempdir().unwrap();
        let mut cfg = ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            admin: Some("127.0.0.1:0".parse().unwrap()),
            cache_dir: cache.path().to_path_buf(),
            s3: s3.s3_settings(),
            s3_api: S3ApiConfig {
                listen: Some("127.0.0.1:0".parse().unwrap()),
                ..Default::default()
            },
            page_size: PAGE,
            ..Default::default()
        };
        for (name, url) in [
            ("events", format!("s3://{BUCKET}/events/")),
            ("one", format!("s3://{BUCKET}/events/part-0.parquet")),
        ] {
            let table = TableConfig {
                url,
                ..Default::default()
            };
            cfg.tables.insert(name.into(), table);
        }
        cfg.views.insert("v".into(), "SELECT id FROM events".into());
        tweak(&mut cfg);
        let server = silt_server::start(cfg).await.unwrap();
        Lake {
            s3,
            server,
            api,
            _dirs: (root, cache),
        }
    }

    fn admin(&self) -> SocketAddr {
        self.server.admin_addr.unwrap()
    }

    /// The listener the test's API is on.
    fn addr(&self) -> SocketAddr {
        match self.api {
            Api::Root => self.server.s3_addr.unwrap(),
            Api::Mounted => self.admin(),
        }
    }

    /// The API's path on [`Lake::addr`]: `target` is a path-style request
    /// from the API's root (`/events/part-0.parquet`, `/` for ListBuckets).
    fn target(&self, target: &str) -> String {
        match (self.api, target) {
            (Api::Root, _) => target.to_string(),
            (Api::Mounted, "/") => "/s3".to_string(),
            (Api::Mounted, _) => format!("/s3{target}"),
        }
    }

    /// object_store's S3 client pointed at Silt, with `table` as the bucket,
    /// sending unsigned requests.
    fn client(&self, table: &str) -> AmazonS3 {
        self.builder(table).with_skip_signature(true).build().unwrap()
    }

    /// The same client signing its requests (SigV4) with a key pair.
    fn signed_client(&self, table: &str, key_id: &str, secret: &str) -> AmazonS3 {
        self.builder(table)
            .with_access_key_id(key_id)
            .with_secret_access_key(secret)
            .build()
            .unwrap()
    }

    fn builder(&self, table: &str) -> AmazonS3Builder {
        AmazonS3Builder::new()
            .with_endpoint(format!("http://{}{}", self.addr(), self.target("")))
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .with_region("us-east-1")
            .with_bucket_name(table)
            .with_retry(RetryConfig {
                max_retries: 0,
                ..Default::default()
            })
    }

    /// The local file behind `events/<key>`.
    fn file(&self, key: &str) -> PathBuf {
        self.s3.object_path(BUCKET, &format!("events/{key}"))
    }

    fn metric(&self, series: &str) -> f64 {
        metric(&self.server, series)
    }

    fn upstream_gets(&self) -> f64 {
        self.metric("silt_object_store_get_requests_total")
    }
}

/// A Parquet file of `rows` rows from id `first`, in row groups of 2,000.
fn write_events(path: &Path, first: i64, rows: i64) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("category", DataType::Utf8, false),
        Field::new("amount", DataType::Int64, false),
    ]));
    let ids: Vec<i64> = (first..first + rows).collect();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(ids.clone())),
            Arc::new(StringArray::from_iter_values(ids.iter().map(|i| format!("c{}", i % 7)))),
            Arc::new(Int64Array::from_iter_values(ids.iter().map(|i| i * 37 % 1000))),
        ],
    )
    .unwrap();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(2_000))
        .build();
    let mut writer = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema, Some(props)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

/// An HTTP answer read off the wire.
struct Reply {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One HTTP/1.1 request with `target` sent exactly as given (no URL
/// normalisation, so hostile paths reach the server as written).
async fn http(addr: SocketAddr, method: &str, target: &str, headers: &[(&str, &str)]) -> Reply {
    http_to_host(addr, &addr.to_string(), method, target, headers).await
}

/// [`http`] with `Host: host` (a virtual-host-style request when it names a bucket).
async fn http_to_host(addr: SocketAddr, host: &str, method: &str, target: &str, headers: &[(&str, &str)]) -> Reply {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut request = format!("{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status");
    Reply {
        status,
        head,
        body: raw[split + 4..].to_vec(),
    }
}

fn keys(metas: &[ObjectMeta]) -> Vec<String> {
    metas.iter().map(|m| m.location.to_string()).collect()
}

async fn sql(ctx: &SessionContext, query: &str) -> String {
    let batches = ctx.sql(query).await.unwrap().collect().await.unwrap();
    pretty_format_batches(&batches).unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_api_serves_tables_to_object_store_and_datafusion() {
    serves_tables_to_object_store_and_datafusion(Api::Mounted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_listener_serves_tables_to_object_store_and_datafusion() {
    serves_tables_to_object_store_and_datafusion(Api::Root).await;
}

async fn serves_tables_to_object_store_and_datafusion(api: Api) {
    let lake = Lake::start_at(api, |_| {}).await;
    let store = lake.client("events");

    let mut listed: Vec<ObjectMeta> = store.list(None).try_collect().await.unwrap();
    listed.sort_by(|a, b| a.location.cmp(&b.location));
    assert_eq!(
        keys(&listed),
        ["day=2/part-2.parquet", "part-0.parquet", "part-1.parquet"],
        "only the table's Parquet files"
    );
    for m in &listed {
        let local = std::fs::metadata(lake.file(m.location.as_ref())).unwrap().len();
        assert_eq!(m.size, local, "{}", m.location);
    }
    let grouped = store.list_with_delimiter(None).await.unwrap();
    assert_eq!(keys(&grouped.objects), ["part-0.parquet", "part-1.parquet"]);
    assert_eq!(grouped.common_prefixes, [ObjectPath::from("day=2")]);
    let outside = store
        .get(&ObjectPath::from("archive/part-9.parquet"))
        .await
        .unwrap_err();
    assert!(matches!(outside, object_store::Error::NotFound { .. }), "{outside}");

    let key = ObjectPath::from("part-0.parquet");
    let bytes = std::fs::read(lake.file("part-0.parquet")).unwrap();
    let len = bytes.len() as u64;
    let chunk = PAGE * silt_server::s3_api::BODY_CHUNK_PAGES;
    assert!(
        len > 2 * chunk,
        "a whole-object GET streams several body chunks ({len} bytes)"
    );
    let head = store.head(&key).await.unwrap();
    assert_eq!(head.size, len);
    assert!(head.e_tag.is_some());
    assert_eq!(
        store.get(&key).await.unwrap().meta.e_tag,
        head.e_tag,
        "GET and HEAD agree"
    );

    // Ranged and whole reads equal the file; the second round reaches no store.
    let ranges = [
        0..1,
        100..5_000,
        PAGE - 1..PAGE + 1,
        chunk - 10..2 * chunk + 10,
        len - 8..len,
        0..len,
    ];
    let mut cold_gets = 0.0;
    for round in 0..2 {
        for r in &ranges {
            let got = store.get_range(&key, r.clone()).await.unwrap();
            assert_eq!(&got[..], &bytes[r.start as usize..r.end as usize], "{r:?}");
        }
        assert_eq!(store.get(&key).await.unwrap().bytes().await.unwrap(), &bytes[..]);
        let suffix = GetOptions {
            range: Some(GetRange::Suffix(1_000)),
            ..Default::default()
        };
        let got = store.get_opts(&key, suffix).await.unwrap();
        assert_eq!(got.range, len - 1_000..len);
        assert_eq!(got.bytes().await.unwrap(), &bytes[bytes.len() - 1_000..]);
        if round == 0 {
            cold_gets = lake.upstream_gets();
        }
    }
    assert_eq!(lake.upstream_gets(), cold_gets, "a warm read makes no upstream GET");

    // DataFusion decodes the files it reads through Silt, with the same
    // result as reading them directly; the second run reaches no store.
    let query = "SELECT category, count(*) AS n, sum(amount) AS total, min(id), max(id) \
                 FROM events WHERE amount > 100 GROUP BY category ORDER BY category";
    let ctx = SessionContext::new();
    ctx.register_object_store(&url::Url::parse("s3://events").unwrap(), Arc::new(store));
    ctx.register_parquet("events", "s3://events/", ParquetReadOptions::default())
        .await
        .unwrap();
    let direct = SessionContext::new();
    let folder = format!("{}/", lake.s3.object_path(BUCKET, "events").display());
    direct
        .register_parquet("events", &folder, ParquetReadOptions::default())
        .await
        .unwrap();
    let expected = sql(&direct, query).await;
    assert_eq!(sql(&ctx, query).await, expected);
    let after_first = lake.upstream_gets();
    assert_eq!(sql(&ctx, query).await, expected);
    assert_eq!(lake.upstream_gets(), after_first, "a warm query makes no upstream GET");

    // A one-object table holds one key: the object's file name.
    let one = lake.client("one");
    let listed: Vec<ObjectMeta> = one.list(None).try_collect().await.unwrap();
    assert_eq!(keys(&listed), ["part-0.parquet"]);
    assert_eq!(one.get(&key).await.unwrap().bytes().await.unwrap(), &bytes[..]);
    let other = one.get(&ObjectPath::from("part-1.parquet")).await.unwrap_err();
    assert!(matches!(other, object_store::Error::NotFound { .. }), "{other}");

    assert!(lake.metric("silt_s3_requests_total") >= 20.0);
    assert!(lake.metric("silt_s3_bytes_sent_total") >= 4.0 * len as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_api_sees_an_overwrite_at_the_next_head() {
    let lake = Lake::start(|_| {}).await;
    let store = lake.client("events");
    let key = ObjectPath::from("part-1.parquet");
    let before = store.head(&key).await.unwrap();
    store.get(&key).await.unwrap().bytes().await.unwrap();

    write_events(&lake.file("part-1.parquet"), 90_000, 7_000);
    let after = store.head(&key).await.unwrap();
    assert_ne!(after.e_tag, before.e_tag, "validation `always`: a HEAD revalidates");
    let bytes = std::fs::read(lake.file("part-1.parquet")).unwrap();
    assert_eq!(after.size, bytes.len() as u64);
    assert_eq!(store.get(&key).await.unwrap().bytes().await.unwrap(), &bytes[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_api_errors_are_s3_documents() {
    errors_are_s3_documents(Api::Mounted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_listener_errors_are_s3_documents() {
    errors_are_s3_documents(Api::Root).await;
}

async fn errors_are_s3_documents(api: Api) {
    let lake = Lake::start_at(api, |c| c.store.retries = 1).await;
    let admin = lake.addr();
    let size = std::fs::metadata(lake.file("part-0.parquet")).unwrap().len();
    let lake_ref = &lake;
    let get = |target: &'static str, range: Option<&'static str>| async move {
        let headers: Vec<(&str, &str)> = range.map(|r| ("Range", r)).into_iter().collect();
        http(admin, "GET", &lake_ref.target(target), &headers).await
    };
    let code = |reply: &Reply| {
        let text = reply.text();
        let start = text.find("<Code>").map(|i| i + 6).unwrap_or(0);
        let end = text.find("</Code>").unwrap_or(0);
        text.get(start..end).unwrap_or_default().to_string()
    };

    for (target, status, expected) in [
        ("/nope/part-0.parquet", 404, "NoSuchBucket"),
        ("/nope?list-type=2", 404, "NoSuchBucket"),
        ("/v?list-type=2", 404, "NoSuchBucket"),
        ("/events/missing.parquet", 404, "NoSuchKey"),
        ("/events/_SUCCESS", 404, "NoSuchKey"),
        ("/one/part-1.parquet", 404, "NoSuchKey"),
        ("/events", 501, "NotImplemented"),
        ("/events?list-type=2&max-keys=many", 400, "InvalidArgument"),
        ("/events/../one/part-0.parquet", 400, "InvalidArgument"),
        ("/events/%2e%2e/events/part-0.parquet", 400, "InvalidArgument"),
        ("/events/a//part-0.parquet", 400, "InvalidArgument"),
        ("/events/%00.parquet", 400, "InvalidArgument"),
        ("/events/%ff.parquet", 400, "InvalidArgument"),
    ] {
        let reply = get(target, None).await;
        assert_eq!(
            (reply.status, code(&reply).as_str()),
            (status, expected),
            "{target}: {}",
            reply.text()
        );
        assert_eq!(reply.header("content-type"), Some("application/xml"), "{target}");
    }

    let part0 = "/events/part-0.parquet";
    for (range, status, expected) in [
        ("bytes=999999999-", 416, "InvalidRange"),
        ("bytes=abc", 400, "InvalidArgument"),
        ("bytes=5-2", 400, "InvalidArgument"),
        ("bytes=0-1,4-5", 400, "InvalidArgument"),
        ("bytes=-0", 416, "InvalidRange"),
    ] {
        let reply = get(part0, Some(range)).await;
        assert_eq!(
            (reply.status, code(&reply).as_str()),
            (status, expected),
            "{range}: {}",
            reply.text()
        );
    }
    let unsatisfiable = get(part0, Some("bytes=999999999-")).await;
    assert_eq!(
        unsatisfiable.header("content-range"),
        Some(format!("bytes */{size}").as_str())
    );

    // A range past the end is cut there; one past what S3 allows (i64) is refused.
    let past = get(part0, Some("bytes=10-99999999999999999999999")).await;
    assert_eq!((past.status, code(&past).as_str()), (400, "InvalidArgument"));
    let huge = get(part0, Some("bytes=10-999999999999999999")).await;
    assert_eq!(huge.status, 206);
    assert_eq!(huge.body.len() as u64, size - 10);
    let content_range = format!("bytes 10-{}/{size}", size - 1);
    assert_eq!(huge.header("content-range"), Some(content_range.as_str()));
    assert_eq!(huge.header("accept-ranges"), Some("bytes"));
    assert!(huge.header("etag").is_some_and(|e| e.starts_with('"')));
    assert!(huge.header("last-modified").is_some_and(|d| d.ends_with("GMT")));

    // HEAD answers carry the status and no body.
    let missing = http(admin, "HEAD", &lake.target("/events/missing.parquet"), &[]).await;
    assert_eq!((missing.status, missing.body.len()), (404, 0));
    let head = http(admin, "HEAD", &lake.target(part0), &[]).await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some(size.to_string().as_str()));
    assert_eq!(http(admin, "HEAD", &lake.target("/events"), &[]).await.status, 200);
    assert_eq!(http(admin, "HEAD", &lake.target("/nope"), &[]).await.status, 404);

    // ListBuckets: the tables, not the view; writes are never served.
    let buckets = get("/", None).await;
    assert_eq!(buckets.status, 200, "{}", buckets.text());
    let names = buckets.text();
    assert!(
        names.contains("<Name>events</Name>") && names.contains("<Name>one</Name>"),
        "{names}"
    );
    assert!(!names.contains("<Name>v</Name>"), "{names}");
    for (method, target) in [
        ("PUT", "/events/new.parquet"),
        ("DELETE", "/events/part-0.parquet"),
        ("PUT", "/fresh"),
    ] {
        let reply = http(admin, method, &lake.target(target), &[("Content-Length", "0")]).await;
        assert_eq!(
            (reply.status, code(&reply).as_str()),
            (501, "NotImplemented"),
            "{method} {target}: {}",
            reply.text()
        );
    }
    assert!(lake.file("part-0.parquet").exists());

    // Listing pages: max-keys and the continuation token.
    let page = get("/events?list-type=2&max-keys=2", None).await.text();
    assert!(page.contains("<KeyCount>2</KeyCount>") && page.contains("<IsTruncated>true</IsTruncated>"));
    let token = page
        .split("<NextContinuationToken>")
        .nth(1)
        .unwrap()
        .split('<')
        .next()
        .unwrap();
    let next = http(
        admin,
        "GET",
        &lake.target(&format!("/events?list-type=2&max-keys=2&continuation-token={token}")),
        &[],
    )
    .await
    .text();
    assert!(
        next.contains("<Key>part-1.parquet</Key>") && next.contains("<IsTruncated>false</IsTruncated>"),
        "{next}"
    );

    // The upstream failing is a 5xx naming the object.
    lake.s3.stop_and_wait().await;
    let down = get("/events/ghost.parquet", None).await;
    assert_eq!(
        (down.status, code(&down).as_str()),
        (500, "InternalError"),
        "{}",
        down.text()
    );
    assert!(down.text().contains("ghost.parquet"), "{}", down.text());
    assert!(lake.metric("silt_s3_requests_total") >= 27.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_listener_takes_the_bucket_from_the_host() {
    let lake = Lake::start_at(Api::Root, |_| {}).await;
    let (addr, port) = (lake.addr(), lake.addr().port());
    let bytes = std::fs::read(lake.file("part-0.parquet")).unwrap();
    let nested = std::fs::read(lake.file("day=2/part-2.parquet")).unwrap();
    for host in [
        format!("events.localhost:{port}"),
        format!("events.silt.example.com:{port}"),
    ] {
        let whole = http_to_host(addr, &host, "GET", "/part-0.parquet", &[]).await;
        assert_eq!((whole.status, &whole.body), (200, &bytes), "{host}: {}", whole.text());
        let ranged = http_to_host(
            addr,
            &host,
            "GET",
            "/day%3D2/part-2.parquet",
            &[("Range", "bytes=4-99")],
        )
        .await;
        assert_eq!((ranged.status, &ranged.body[..]), (206, &nested[4..100]), "{host}");
        let listed = http_to_host(addr, &host, "GET", "/?list-type=2", &[]).await.text();
        assert!(
            listed.contains("<Key>part-0.parquet</Key>") && listed.contains("<Name>events</Name>"),
            "{listed}"
        );
        assert_eq!(http_to_host(addr, &host, "HEAD", "/", &[]).await.status, 200, "{host}");
    }
    // A host whose first label is no table is path style; `*.localhost` never is.
    let path_style = http_to_host(
        addr,
        &format!("silt.example.com:{port}"),
        "GET",
        "/events/part-0.parquet",
        &[],
    )
    .await;
    assert_eq!((path_style.status, &path_style.body), (200, &bytes));
    for (host, target, status, code) in [
        (format!("nope.localhost:{port}"), "/part-0.parquet", 404, "NoSuchBucket"),
        (format!("nope.localhost:{port}"), "/?list-type=2", 404, "NoSuchBucket"),
        (format!("events.localhost:{port}"), "/missing.parquet", 404, "NoSuchKey"),
        (
            format!("events.localhost:{port}"),
            "/a//part-0.parquet",
            400,
            "InvalidArgument",
        ),
        (
            format!("events.localhost:{port}"),
            "/%2e%2e/one/part-0.parquet",
            400,
            "InvalidArgument",
        ),
    ] {
        let reply = http_to_host(addr, &host, "GET", target, &[]).await;
        assert_eq!(reply.status, status, "{host}{target}: {}", reply.text());
        assert!(
            reply.text().contains(&format!("<Code>{code}</Code>")),
            "{}",
            reply.text()
        );
    }
}

/// A certificate for `localhost` and `127.0.0.1` in `dir`: its PEM and the
/// paths of the certificate and key files.
fn test_certificate(dir: &Path) -> (String, PathBuf, PathBuf) {
    let key = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, key.cert.pem()).unwrap();
    std::fs::write(&key_path, key.signing_key.serialize_pem()).unwrap();
    (key.cert.pem(), cert_path, key_path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_listener_serves_tls() {
    let certs = tempfile::tempdir().unwrap();
    let (pem, cert, key) = test_certificate(certs.path());
    let lake = Lake::start_at(Api::Root, |c| {
        c.tls_cert = Some(cert);
        c.tls_key = Some(key);
    })
    .await;
    let options = object_store::ClientOptions::new()
        .with_root_certificate(object_store::Certificate::from_pem(pem.as_bytes()).unwrap());
    let store = lake
        .builder("events")
        .with_endpoint(format!("https://localhost:{}", lake.addr().port()))
        .with_client_options(options)
        .with_skip_signature(true)
        .build()
        .unwrap();
    read_events(&lake, &store).await;
    // Plaintext HTTP on the TLS listener gets no S3 answer.
    let plain = lake.client("events").head(&ObjectPath::from("part-0.parquet")).await;
    assert!(plain.is_err());
}

/// Reads `part-0.parquet` of `events` with `store` (ranged and whole) and
/// lists the table: what a signed client must be able to do.
async fn read_events(lake: &Lake, store: &AmazonS3) {
    let key = ObjectPath::from("part-0.parquet");
    let bytes = std::fs::read(lake.file("part-0.parquet")).unwrap();
    assert_eq!(store.get_range(&key, 10..5_000).await.unwrap(), &bytes[10..5_000]);
    assert_eq!(store.get(&key).await.unwrap().bytes().await.unwrap(), &bytes[..]);
    assert_eq!(store.head(&key).await.unwrap().size, bytes.len() as u64);
    let listed: Vec<ObjectMeta> = store.list(None).try_collect().await.unwrap();
    assert_eq!(listed.len(), 3);
}

/// Every way an unsigned or wrongly signed request is refused with 403.
async fn assert_refused(lake: &Lake, wrong: &[AmazonS3]) {
    for (method, target) in [
        ("GET", "/events?list-type=2"),
        ("GET", "/events/part-0.parquet"),
        ("GET", "/nope/x.parquet"),
        ("GET", "/"),
        ("HEAD", "/events/part-0.parquet"),
        ("HEAD", "/events"),
    ] {
        let target = &lake.target(target);
        // Silt's bearer token is no S3 credential.
        let reply = http(lake.addr(), method, target, &[("Authorization", "Bearer secret")]).await;
        assert_eq!(reply.status, 403, "{method} {target}: {}", reply.text());
        let reply = http(lake.addr(), method, target, &[]).await;
        assert_eq!(reply.status, 403, "{method} {target}");
        if method == "GET" {
            assert!(reply.text().contains("<Code>AccessDenied</Code>"), "{}", reply.text());
        }
    }
    let key = ObjectPath::from("part-0.parquet");
    let err = lake.client("events").head(&key).await.unwrap_err();
    assert!(matches!(err, object_store::Error::PermissionDenied { .. }), "{err}");
    for store in wrong {
        let err = store.get(&key).await.unwrap_err();
        assert!(matches!(err, object_store::Error::PermissionDenied { .. }), "{err}");
        // (object_store reports a refused listing as a generic error.)
        let err = store.list(None).try_collect::<Vec<_>>().await.unwrap_err();
        assert!(err.to_string().contains("403 Forbidden"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_api_with_an_auth_token_serves_requests_signed_with_it() {
    with_an_auth_token_serves_requests_signed_with_it(Api::Mounted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_listener_with_an_auth_token_serves_requests_signed_with_it() {
    with_an_auth_token_serves_requests_signed_with_it(Api::Root).await;
}

async fn with_an_auth_token_serves_requests_signed_with_it(api: Api) {
    let lake = Lake::start_at(api, |c| c.auth_token = Some("secret".into())).await;
    read_events(&lake, &lake.signed_client("events", "silt", "secret")).await;
    let wrong_secret = lake.signed_client("events", "silt", "guess");
    let wrong_key = lake.signed_client("events", "admin", "secret");
    assert_refused(&lake, &[wrong_secret, wrong_key]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_api_with_keys_serves_requests_signed_with_them() {
    with_keys_serves_requests_signed_with_them(Api::Mounted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_listener_with_keys_serves_requests_signed_with_them() {
    with_keys_serves_requests_signed_with_them(Api::Root).await;
}

async fn with_keys_serves_requests_signed_with_them(api: Api) {
    let lake = Lake::start_at(api, |c| {
        c.auth_token = Some("secret".into());
        c.s3_api.access_key_id = Some("reader".into());
        c.s3_api.secret_access_key = Some("s3cr3t/+key".into());
    })
    .await;
    let store = lake.signed_client("events", "reader", "s3cr3t/+key");
    read_events(&lake, &store).await;
    // Keys in sub-folders and listings with parameters are signed over the
    // full path and query too.
    let grouped = store.list_with_delimiter(None).await.unwrap();
    assert_eq!(grouped.common_prefixes, [ObjectPath::from("day=2")]);
    let nested = ObjectPath::from("day=2/part-2.parquet");
    let bytes = std::fs::read(lake.file("day=2/part-2.parquet")).unwrap();
    assert_eq!(store.get(&nested).await.unwrap().bytes().await.unwrap(), &bytes[..]);

    // A presigned URL works as it is, and not once altered.
    let url = store
        .signed_url(axum::http::Method::GET, &nested, std::time::Duration::from_secs(60))
        .await
        .unwrap();
    let target = format!("{}?{}", url.path(), url.query().unwrap());
    let reply = http(lake.addr(), "GET", &target, &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.body, bytes);
    let tampered = target.replace("part-2", "part-0");
    assert_eq!(http(lake.addr(), "GET", &tampered, &[]).await.status, 403);

    // The token's key pair is not accepted once keys are configured.
    let token_key = lake.signed_client("events", "silt", "secret");
    let wrong_secret = lake.signed_client("events", "reader", "s3cr3t");
    assert_refused(&lake, &[token_key, wrong_secret]).await;
}

/// Every member's copy of `config`, as member `me` of the fleet listening
/// on `flight` and `admin`.
fn member_config(
    config: &ServerConfig,
    me: usize,
    flight: &[SocketAddr],
    admin: &[SocketAddr],
    cache: &Path,
) -> ServerConfig {
    let mut cfg = config.clone();
    cfg.listen = flight[me];
    cfg.admin = Some(admin[me]);
    cfg.cache_dir = cache.to_path_buf();
    cfg.cluster.servers = flight.iter().map(|a| format!("http://{a}")).collect();
    cfg.cluster.admin = admin.iter().map(|a| format!("http://{a}")).collect();
    cfg.cluster.self_url = None; // found from `listen`
    cfg
}

/// Reads every key of `events` whole and in ranges through `store`,
/// comparing with the files.
async fn read_all_events(lake: &Lake, store: &AmazonS3) {
    for key in ["part-0.parquet", "part-1.parquet", "day=2/part-2.parquet"] {
        let bytes = std::fs::read(lake.file(key)).unwrap();
        let path = ObjectPath::from(key);
        assert_eq!(
            store.get(&path).await.unwrap().bytes().await.unwrap(),
            &bytes[..],
            "{key}"
        );
        let mid = bytes.len() / 3..bytes.len() * 2 / 3;
        assert_eq!(
            store.get_range(&path, mid.start as u64..mid.end as u64).await.unwrap(),
            &bytes[mid],
            "{key}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_api_across_a_fleet_reads_each_chunk_from_its_owner() {
    let flight = free_addrs(3);
    let admin = free_addrs(3);
    let small_pages = |c: &mut ServerConfig| {
        c.page_size = 1 << 10; // body chunks of 8 KiB: every file spans many
        c.auth_token = Some("secret".into()); // forwarded reads are signed too
    };
    let lake = Lake::start(|c| {
        small_pages(c);
        let cache = c.cache_dir.clone();
        *c = member_config(c, 0, &flight, &admin, &cache);
    })
    .await;
    let mut members = Vec::new();
    for me in 1..3 {
        let dir = tempfile::tempdir().unwrap();
        let cfg = member_config(lake.server.engine.config(), me, &flight, &admin, dir.path());
        members.push((silt_server::start(cfg).await.unwrap(), dir));
    }
    let store = lake.signed_client("events", "silt", "secret");
    read_all_events(&lake, &store).await;
    assert!(
        lake.metric("silt_s3_forwarded_total") > 0.0,
        "chunks owned by other members came from them"
    );
    assert_eq!(lake.metric("silt_s3_forward_failures_total"), 0.0);
    for (m, _) in &members {
        assert!(metric(m, "silt_s3_requests_total") > 0.0, "every member owns a share");
    }
    // DataFusion reading through one member gets the right answer.
    let ctx = SessionContext::new();
    let url = url::Url::parse("s3://events").unwrap();
    ctx.register_object_store(&url, Arc::new(store));
    ctx.register_parquet("events", "s3://events/", ParquetReadOptions::default())
        .await
        .unwrap();
    // ids 0..28,000 (the archive folder is not the table's).
    let expected: i64 = (0..28_000i64).map(|i| i * 37 % 1000).sum();
    assert!(
        sql(&ctx, "SELECT count(*) AS n, sum(amount) AS s FROM events")
            .await
            .contains(&format!("| 28000 | {expected} |")),
    );

    // A member that is gone: its chunks are read from the store instead.
    let (gone, _gone_dir) = members.pop().unwrap();
    gone.shutdown().await.unwrap();
    let fresh = lake.signed_client("events", "silt", "secret");
    read_all_events(&lake, &fresh).await;
    assert!(
        lake.metric("silt_s3_forward_failures_total") > 0.0,
        "the gone member's chunks were tried, then read locally"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_api_across_a_tls_fleet_forwards_over_https() {
    // One certificate for every member (localhost and 127.0.0.1): each trusts
    // the others by its own `tls_cert` (no `cluster.ca_cert` needed).
    let certs = tempfile::tempdir().unwrap();
    let (pem, cert_path, key_path) = test_certificate(certs.path());
    let flight = free_addrs(3);
    let admin = free_addrs(3);
    let tls_member = |c: &mut ServerConfig| {
        c.page_size = 1 << 10;
        c.auth_token = Some("secret".into());
        c.tls_cert = Some(cert_path.clone());
        c.tls_key = Some(key_path.clone());
    };
    let https = |cfg: &mut ServerConfig| {
        cfg.cluster.admin = admin.iter().map(|a| format!("https://{a}")).collect();
    };
    let lake = Lake::start(|c| {
        tls_member(c);
        let cache = c.cache_dir.clone();
        *c = member_config(c, 0, &flight, &admin, &cache);
        https(c);
    })
    .await;
    let mut members = Vec::new();
    for me in 1..3 {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = member_config(lake.server.engine.config(), me, &flight, &admin, dir.path());
        https(&mut cfg);
        members.push((silt_server::start(cfg).await.unwrap(), dir));
    }
    let options = object_store::ClientOptions::new()
        .with_root_certificate(object_store::Certificate::from_pem(pem.as_bytes()).unwrap());
    let store = lake
        .builder("events")
        .with_endpoint(format!("https://{}/s3", lake.admin()))
        .with_client_options(options)
        .with_access_key_id("silt")
        .with_secret_access_key("secret")
        .build()
        .unwrap();
    read_all_events(&lake, &store).await;
    assert!(
        lake.metric("silt_s3_forwarded_total") > 0.0,
        "chunks owned by other members came from them, over HTTPS"
    );
    assert_eq!(lake.metric("silt_s3_forward_failures_total"), 0.0);
    for (m, _) in &members {
        assert!(metric(m, "silt_s3_requests_total") > 0.0, "every member owns a share");
    }
}

/// A port free on each of `ips` (loopback addresses): what members named
/// by a membership file share as `cluster.admin_port`, each on its own host.
fn port_free_on(ips: &[&str]) -> u16 {
    for _ in 0..50 {
        let first = std::net::TcpListener::bind((ips[0], 0)).unwrap();
        let port = first.local_addr().unwrap().port();
        let rest: Vec<_> = ips[1..]
            .iter()
            .map(|ip| std::net::TcpListener::bind((*ip, port)))
            .collect();
        if rest.iter().all(Result::is_ok) {
            return port;
        }
    }
    panic!("no port free on all of {ips:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_api_follows_a_membership_file() {
    // Three members, each on its own loopback host, admin listeners on one
    // port; the file names two of them at first.
    let ips = ["127.0.0.1", "127.0.0.2", "127.0.0.3"];
    let admin_port = port_free_on(&ips);
    let flight: Vec<SocketAddr> = ips
        .iter()
        .map(|ip| std::net::TcpListener::bind((*ip, 0)).unwrap().local_addr().unwrap())
        .collect();
    let urls: Vec<String> = flight.iter().map(|a| format!("http://{a}")).collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("members");
    write_members(&file, &urls[..2]);
    let member = |c: &ServerConfig, me: usize, cache: &Path| {
        let mut cfg = c.clone();
        cfg.listen = flight[me];
        cfg.admin = Some(SocketAddr::new(flight[me].ip(), admin_port));
        cfg.cache_dir = cache.to_path_buf();
        cfg.cluster.servers = vec![format!("file://{}", file.display())];
        cfg.cluster.admin = Vec::new();
        cfg.cluster.admin_port = Some(admin_port);
        cfg.cluster.self_url = None;
        cfg
    };
    let lake = Lake::start(|c| {
        c.page_size = 1 << 10; // body chunks of 8 KiB: every file spans many
        let cache = c.cache_dir.clone();
        *c = member(c, 0, &cache);
    })
    .await;
    let mut others = Vec::new();
    for me in 1..3 {
        let cache = tempfile::tempdir().unwrap();
        let cfg = member(lake.server.engine.config(), me, cache.path());
        others.push((silt_server::start(cfg).await.unwrap(), cache));
    }
    let s3_requests = |i: usize| metric(&others[i - 1].0, "silt_s3_requests_total");

    read_all_events(&lake, &lake.client("events")).await;
    assert!(lake.metric("silt_s3_forwarded_total") > 0.0);
    assert!(s3_requests(1) > 0.0, "the second member owns a share");
    assert_eq!(s3_requests(2), 0.0, "not in the file: owns nothing");

    // The third joins: within a refresh it owns ~1/3 of the chunks.
    write_members(&file, &urls);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while s3_requests(2) == 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the joined member got no chunk within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
        read_all_events(&lake, &lake.client("events")).await;
    }

    // The second leaves: after a refresh it gets no more forwarded reads.
    write_members(&file, &[urls[0].clone(), urls[2].clone()]);
    tokio::time::sleep(silt_proto::membership::REFRESH_EVERY * 2).await;
    let before = s3_requests(1);
    read_all_events(&lake, &lake.client("events")).await;
    assert_eq!(s3_requests(1), before, "a member that left got work");
    assert!(s3_requests(2) > 0.0);
    assert_eq!(lake.metric("silt_s3_forward_failures_total"), 0.0);
}
