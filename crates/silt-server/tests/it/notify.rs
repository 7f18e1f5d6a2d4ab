//! `validation = "notify"`: the store tells Silt what changed, so warm
//! queries send no LIST or HEAD. A `file://` table is watched by the kernel
//! (inotify); an S3 table learns of changes from S3 event notifications
//! posted to the admin endpoint `/notify/s3`, which refuses posts without
//! the auth token and bodies that are not such a notification. A notice
//! landing while a query streams never makes it mix versions.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use futures::StreamExt;
use silt_bench::local_s3::LocalS3;
use silt_cache::Freshness;
use silt_server::config::TableConfig;
use silt_server::{ServerConfig, ServerHandle};

use crate::common::{answer, check_same, metric, s3_settings};
use crate::versions::{PAGE, ROWS, summary, write_version};

const TOKEN: &str = "n0tify";
/// The S3 table's object: a key with a space, which S3 event JSON sends
/// form-encoded (`t/my+part.parquet`).
const KEY: &str = "t/my part.parquet";
/// A query is started this long after a write (or an event) at the soonest.
const AFTER: Duration = Duration::from_millis(100);
/// Then it is retried at most this often, this far apart.
const TRIES: u32 = 50;
const BETWEEN: Duration = Duration::from_millis(50);

/// LIST and HEAD requests the server has sent to its stores.
fn lists_and_heads(server: &ServerHandle) -> (f64, f64) {
    (
        metric(server, "silt_object_store_list_requests_total"),
        metric(server, "silt_object_store_head_requests_total"),
    )
}

/// A folder with `mix/t/<file>` at version 1 (and what serves it).
struct Lake {
    root: tempfile::TempDir,
    cache: tempfile::TempDir,
}

impl Lake {
    fn new(file: &str) -> Lake {
        let lake = Lake {
            root: tempfile::tempdir().unwrap(),
            cache: tempfile::tempdir().unwrap(),
        };
        write_version(&lake.file(file), 1, true);
        lake
    }

    fn file(&self, name: &str) -> PathBuf {
        self.root.path().join("mix").join(name)
    }

    /// A server with table `mix` at `url` under `notify`, an admin listener
    /// and the auth token; `s3` for s3:// URLs.
    async fn server(&self, url: &str, s3: Option<&LocalS3>, tweak: impl FnOnce(&mut ServerConfig)) -> ServerHandle {
        let mut cfg = ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            admin: Some("127.0.0.1:0".parse().unwrap()),
            auth_token: Some(TOKEN.into()),
            cache_dir: self.cache.path().to_path_buf(),
            page_size: PAGE,
            ..Default::default()
        };
        if let Some(s3) = s3 {
            cfg.s3 = s3_settings(s3);
        }
        cfg.tables.insert(
            "mix".into(),
            TableConfig {
                url: url.into(),
                validation: Freshness::NOTIFY,
                ..Default::default()
            },
        );
        tweak(&mut cfg);
        silt_server::start(cfg).await.expect("start server")
    }
}

/// A client of `server` that carries its token.
async fn client_of(server: &ServerHandle) -> SessionContext {
    let ctx = SessionContext::new();
    let client = silt_client::SiltClient::connect(&server.flight_url())
        .await
        .expect("connect")
        .with_token(Some(TOKEN.into()));
    silt_client::register_tables_with(&ctx, &client)
        .await
        .expect("register tables");
    ctx
}

/// Status and body of `POST path` with `headers` and `body`.
async fn http_post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let request = format!(
        "POST {path} HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, body.to_string())
}

/// An S3 event notification as S3 (and MinIO, Ceph) posts it: the key
/// form-encoded.
fn s3_event(bucket: &str, key: &str) -> String {
    let key: String = url::form_urlencoded::byte_serialize(key.as_bytes()).collect();
    // S3 leaves the folder separators alone.
    let key = key.replace("%2F", "/");
    format!(
        r#"{{"Records":[{{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"us-east-1",
        "eventTime":"2024-01-01T00:00:00.000Z","eventName":"ObjectCreated:Put",
        "userIdentity":{{"principalId":"AWS:X"}},"requestParameters":{{"sourceIPAddress":"127.0.0.1"}},
        "responseElements":{{"x-amz-request-id":"R","x-amz-id-2":"I"}},
        "s3":{{"s3SchemaVersion":"1.0","configurationId":"silt","bucket":{{"name":"{bucket}",
        "ownerIdentity":{{"principalId":"X"}},"arn":"arn:aws:s3:::{bucket}"}},
        "object":{{"key":"{key}","size":1,"eTag":"e","sequencer":"0055AED6DCD90281E5"}}}}}}]}}"#
    )
}

/// Posts `body` to `/notify/s3` with the token; the status and body.
async fn post_event(server: &ServerHandle, body: &str) -> (u16, String) {
    let auth = format!("Bearer {TOKEN}");
    http_post(
        server.admin_addr.unwrap(),
        "/notify/s3",
        &[("Authorization", auth.as_str())],
        body,
    )
    .await
}

/// Runs `summary` a few times; none may send a LIST or HEAD.
async fn warm_queries_send_no_validation(server: &ServerHandle, ctx: &SessionContext, version: i64, what: &str) {
    let before = lists_and_heads(server);
    for run in 0..3 {
        assert_eq!(
            summary(ctx, "mix").await.unwrap(),
            (version, version, ROWS),
            "{what}: warm run {run}"
        );
    }
    assert_eq!(
        lists_and_heads(server),
        before,
        "{what}: LISTs and HEADs on the warm path"
    );
}

/// Queries from `since + AFTER` until one answers `version`: how long
/// after `since` that query started, and how many queries it took.
async fn until_seen(ctx: &SessionContext, version: i64, since: Instant, what: &str) -> (Duration, u32) {
    tokio::time::sleep_until((since + AFTER).into()).await;
    for tries in 1..=TRIES {
        let started = since.elapsed();
        let (lo, hi, n) = summary(ctx, "mix").await.unwrap();
        assert_eq!((lo, n), (hi, ROWS), "{what}: one whole version");
        if lo == version {
            return (started, tries);
        }
        tokio::time::sleep(BETWEEN).await;
    }
    panic!("{what}: version {version} not seen after {TRIES} queries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_table_under_notify_sees_an_overwrite_without_validating_warm_queries() {
    for (name, folder) in [("t/part.parquet", true), ("one.parquet", false)] {
        let lake = Lake::new(name);
        let file = lake.file(name);
        let url = match folder {
            true => format!("file://{}/", file.parent().unwrap().display()),
            false => format!("file://{}", file.display()),
        };
        let server = lake.server(&url, None, |_| {}).await;
        let ctx = client_of(&server).await;
        assert_eq!(summary(&ctx, "mix").await.unwrap(), (1, 1, ROWS));
        warm_queries_send_no_validation(&server, &ctx, 1, &url).await;

        let inotify = || metric(&server, "silt_validation_notices_total{source=\"inotify\"}");
        let notices = inotify();
        write_version(&file, 2, true);
        let written = Instant::now();
        // How soon the kernel's event is a notice (the file is renamed into
        // place; a folder table may be marked already by the temporary file).
        let noticed = loop {
            if inotify() > notices || written.elapsed() > Duration::from_secs(5) {
                break written.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        assert!(inotify() > notices, "{url}: no inotify notice");
        let (took, tries) = until_seen(&ctx, 2, written, &url).await;
        eprintln!(
            "notify, {url}: notice {noticed:?} after the write; overwrite seen by a query started {took:?} after \
             the write ({tries} queries)"
        );

        // The answer is the file as plain DataFusion reads it now.
        let fresh = SessionContext::new();
        let read_path = if folder { file.parent().unwrap() } else { file.as_path() };
        fresh
            .register_parquet("mix", read_path.to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
        let sql = "SELECT id, v FROM mix ORDER BY id";
        check_same(&url, &answer(&ctx, sql).await, &answer(&fresh, sql).await, true).unwrap();
        warm_queries_send_no_validation(&server, &ctx, 2, &url).await;
        assert_eq!(metric(&server, "silt_query_errors_total"), 0.0);
        server.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_table_under_notify_trusts_its_listing_until_an_event_arrives() {
    for url in ["s3://mix/t/", "s3://mix/t/my part.parquet"] {
        let lake = Lake::new(KEY);
        let s3 = LocalS3::start(lake.root.path()).await.unwrap();
        let server = lake.server(url, Some(&s3), |_| {}).await;
        let ctx = client_of(&server).await;
        assert_eq!(summary(&ctx, "mix").await.unwrap(), (1, 1, ROWS));
        warm_queries_send_no_validation(&server, &ctx, 1, url).await;

        // Overwritten, but nobody said so: the validation is trusted.
        write_version(&lake.file(KEY), 2, true);
        warm_queries_send_no_validation(&server, &ctx, 1, url).await;

        let (status, body) = post_event(&server, &s3_event("mix", KEY)).await;
        let posted = Instant::now();
        assert_eq!(status, 200, "{body}");
        let reply: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(reply["tables"], serde_json::json!(["mix"]), "{body}");
        let (took, tries) = until_seen(&ctx, 2, posted, url).await;
        eprintln!("notify, {url}: overwrite seen by a query started {took:?} after its event ({tries} queries)");
        assert_eq!(tries, 1, "{url}: the first query after the event sees the new version");
        assert_eq!(
            metric(&server, "silt_validation_notices_total{source=\"s3_event\"}"),
            1.0
        );
        warm_queries_send_no_validation(&server, &ctx, 2, url).await;

        // Events for other keys and buckets, and the test event, mark nothing.
        for other in [s3_event("mix", "u/part.parquet"), s3_event("other", KEY)] {
            let (status, body) = post_event(&server, &other).await;
            assert_eq!((status, body.contains("\"tables\":[]")), (200, true), "{body}");
        }
        let test_event = r#"{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2024-01-01T00:00:00.000Z",
            "Bucket":"mix","RequestId":"R","HostId":"H"}"#;
        assert_eq!(post_event(&server, test_event).await.0, 200);
        warm_queries_send_no_validation(&server, &ctx, 2, url).await;
        assert_eq!(metric(&server, "silt_query_errors_total"), 0.0);
        server.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_or_malformed_events_are_refused_and_mark_nothing() {
    let lake = Lake::new(KEY);
    let s3 = LocalS3::start(lake.root.path()).await.unwrap();
    let server = lake.server("s3://mix/t/", Some(&s3), |_| {}).await;
    let ctx = client_of(&server).await;
    assert_eq!(summary(&ctx, "mix").await.unwrap(), (1, 1, ROWS));
    write_version(&lake.file(KEY), 2, true);
    let event = s3_event("mix", KEY);
    let admin = server.admin_addr.unwrap();

    for headers in [
        vec![],
        vec![("Authorization", "Bearer wrong")],
        vec![("Authorization", TOKEN)],
    ] {
        let (status, body) = http_post(admin, "/notify/s3", &headers, &event).await;
        assert_eq!(status, 401, "{headers:?}: {body}");
    }
    for (bad, says) in [
        ("not json", "not an S3 event notification"),
        ("{}", "expected {\"Records\""),
        (
            r#"{"Records":[{"s3":{"bucket":{"name":"mix"}}}]}"#,
            "missing field `object`",
        ),
        (
            r#"{"Records":[{"s3":{"bucket":{"name":"mix"},"object":{"key":"t%FF"}}}]}"#,
            "not URL-encoded UTF-8",
        ),
    ] {
        let (status, body) = post_event(&server, bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body.contains(says), "{bad}: {body}");
    }
    // Nothing was marked: the old version is still trusted, unvalidated.
    warm_queries_send_no_validation(&server, &ctx, 1, "after refused posts").await;
    assert_eq!(
        metric(&server, "silt_validation_notices_total{source=\"s3_event\"}"),
        0.0
    );
    server.shutdown().await.unwrap();
}

/// Appends `v` of every row of `stream` to `into`; the error's text if it fails.
async fn drain(
    mut stream: impl futures::Stream<Item = datafusion::error::Result<RecordBatch>> + Unpin,
    into: &mut Vec<i64>,
) -> Result<(), String> {
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(|e| e.to_string())?;
        let v = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        into.extend(v.values().iter().copied());
    }
    Ok(())
}

/// `(min(v), max(v))` of the first rows only: one row group, so a probe
/// of the current version that leaves the rest of it uncached.
async fn first_rows(ctx: &SessionContext) -> (i64, i64) {
    let batches = answer(ctx, "SELECT min(v), max(v) FROM mix WHERE id < 100").await;
    let col = |c: usize| {
        let a = batches[0].column(c).as_any().downcast_ref::<Int64Array>().unwrap();
        a.value(0)
    };
    (col(0), col(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_landing_mid_scan_never_mixes_versions() {
    let lake = Lake::new(KEY);
    let s3 = LocalS3::start(lake.root.path()).await.unwrap();
    // Slow store requests: a scan of a version not cached yet takes many
    // round trips, so the event lands while it streams.
    let server = lake
        .server("s3://mix/t/", Some(&s3), |c| {
            c.store.latency = Duration::from_millis(20)
        })
        .await;
    let ctx = client_of(&server).await;
    let (mut completed, mut refused) = (0, 0);
    const ROUNDS: i64 = 6;
    for version in 1..=ROUNDS {
        // A scan of `version` (only its first row group cached, by the
        // previous round's probe) has sent its first batch when the next
        // version is written and its event posted; a probe query then
        // validates the next version, which drops `version`'s pages.
        let stream = ctx
            .sql("SELECT v FROM mix")
            .await
            .unwrap()
            .execute_stream()
            .await
            .unwrap();
        let mut stream = stream.peekable();
        assert!(
            std::pin::Pin::new(&mut stream).peek().await.is_some(),
            "version {version}: a first batch"
        );
        write_version(&lake.file(KEY), version + 1, true);
        assert_eq!(post_event(&server, &s3_event("mix", KEY)).await.0, 200);
        assert_eq!(
            first_rows(&ctx).await,
            (version + 1, version + 1),
            "the probe after the event"
        );
        let mut rows = Vec::new();
        let drained = drain(stream, &mut rows).await;
        assert!(rows.iter().all(|v| *v == version), "version {version}: versions mixed");
        match drained {
            Ok(()) => {
                assert_eq!(rows.len() as i64, ROWS, "version {version}");
                completed += 1;
            }
            Err(e) => {
                assert!(e.contains("changed while it was read"), "version {version}: {e}");
                refused += 1;
            }
        }
    }
    eprintln!("notify, events mid-scan: {completed} scans completed on their version, {refused} refused (typed)");
    assert_eq!(
        metric(&server, "silt_validation_notices_total{source=\"s3_event\"}"),
        ROUNDS as f64
    );
    assert_eq!(summary(&ctx, "mix").await.unwrap(), (ROUNDS + 1, ROUNDS + 1, ROWS));
    server.shutdown().await.unwrap();
}
