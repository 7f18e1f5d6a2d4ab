//! One object version per scan: overwrites during long scans never mix two
//! versions in one answer; an object changed between listing and read is
//! revalidated and read again; a deleted object is not-found; a cache dir
//! belongs to one server.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{Array, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::prelude::SessionContext;
use silt_bench::local_s3::LocalS3;
use silt_cache::Freshness;
use silt_server::config::TableConfig;
use silt_server::{ServerConfig, ServerHandle};

use silt_client::{SiltTable, SiltTableOptions};

use crate::common::{client, client_with, metric, s3_settings};

pub(crate) const PAGE: u64 = 16 << 10;
pub(crate) const ROWS: i64 = 120_000;

/// Writes version `k` of a two-column file: `v` = `k` on every row and `id`.
/// With `same_size`, every version has the same rows and byte size (plain,
/// uncompressed, no dictionary); otherwise version `k` has `k * 5000` more
/// rows. Written to a temporary file and renamed into place.
pub(crate) fn write_version(path: &Path, k: i64, same_size: bool) -> u64 {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let rows = if same_size { ROWS } else { ROWS + k * 5000 };
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..rows)),
            Arc::new(Int64Array::from_iter_values((0..rows).map(|_| k))),
        ],
    )
    .unwrap();
    let props = WriterProperties::builder()
        .set_compression(Compression::UNCOMPRESSED)
        .set_dictionary_enabled(false)
        .set_max_row_group_row_count(Some(8192))
        .build();
    let tmp = path.with_extension(format!("tmp{k}"));
    let mut w = ArrowWriter::try_new(std::fs::File::create(&tmp).unwrap(), schema, Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let size = std::fs::metadata(&tmp).unwrap().len();
    std::fs::rename(tmp, path).unwrap();
    size
}

fn rows_of(k: i64, same_size: bool) -> i64 {
    if same_size { ROWS } else { ROWS + k * 5000 }
}

/// A bucket `mix` holding `t/part.parquet` (version 1), served by a
/// loopback S3 server, and a cache dir for the Silt servers under test.
struct MixBucket {
    /// Holds the bucket folder for the fixture's lifetime.
    _root: tempfile::TempDir,
    file: PathBuf,
    s3: LocalS3,
    cache: tempfile::TempDir,
}

impl MixBucket {
    async fn new(same_size: bool) -> MixBucket {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("mix/t/part.parquet");
        write_version(&file, 1, same_size);
        let s3 = LocalS3::start(root.path()).await.unwrap();
        let cache = tempfile::tempdir().unwrap();
        MixBucket {
            _root: root,
            file,
            s3,
            cache,
        }
    }

    /// A config with one table `mix` at `url`, on this bucket's cache dir.
    fn config(&self, url: &str, validation: Freshness, page_size: u64) -> ServerConfig {
        let mut cfg = ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            cache_dir: self.cache.path().to_path_buf(),
            s3: s3_settings(&self.s3),
            page_size,
            ..Default::default()
        };
        cfg.tables.insert(
            "mix".into(),
            TableConfig {
                url: url.into(),
                validation,
                ..Default::default()
            },
        );
        cfg
    }

    /// A server with table `mix` at `url`, and a client of it.
    async fn server(&self, url: &str, validation: Freshness) -> (ServerHandle, SessionContext) {
        let server = silt_server::start(self.config(url, validation, PAGE))
            .await
            .expect("start server");
        let ctx = client(&server).await;
        (server, ctx)
    }
}

/// Reads the footer and `id` only (so `v`'s pages are not cached).
async fn read_ids(ctx: &SessionContext) {
    let batches = ctx
        .sql("SELECT count(id) FROM mix")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(batches[0].num_rows(), 1);
}

/// `(min(v), max(v), count(*))` of `table`, or the error's text.
pub(crate) async fn summary(ctx: &SessionContext, table: &str) -> Result<(i64, i64, i64), String> {
    let sql = format!("SELECT min(v), max(v), count(*) FROM {table}");
    let batches = ctx
        .sql(&sql)
        .await
        .map_err(|e| e.to_string())?
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    let b = &batches[0];
    let get = |c: usize| {
        let a = datafusion::arrow::compute::cast(b.column(c), &DataType::Int64).unwrap();
        let a = a.as_any().downcast_ref::<Int64Array>().unwrap().clone();
        assert!(!a.is_null(0));
        a.value(0)
    };
    Ok((get(0), get(1), get(2)))
}

/// `(min(v), max(v), count(*))` of `table`, computed here from its rows
/// (an aggregate would run its partial half on the server, so a client
/// cache would never answer it), or the error's text.
async fn summary_of_rows(ctx: &SessionContext, table: &str) -> Result<(i64, i64, i64), String> {
    let batches = ctx
        .sql(&format!("SELECT v FROM {table}"))
        .await
        .map_err(|e| e.to_string())?
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    let (mut lo, mut hi, mut n) = (i64::MAX, i64::MIN, 0);
    for b in &batches {
        let v = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        for x in v.values() {
            lo = lo.min(*x);
            hi = hi.max(*x);
        }
        n += b.num_rows() as i64;
    }
    Ok((lo, hi, n))
}

/// [`summary_of_rows`] through a client cache, else [`summary`].
async fn summarize(ctx: &SessionContext, hybrid: bool) -> Result<(i64, i64, i64), String> {
    if hybrid {
        summary_of_rows(ctx, "mix").await
    } else {
        summary(ctx, "mix").await
    }
}

/// An answer is of one version: every row's `v` is that version and the
/// row count is that version's. An error must be the typed "changed" one.
fn check_one_version(answer: &Result<(i64, i64, i64), String>, same_size: bool, what: &str) -> bool {
    match answer {
        Ok((lo, hi, n)) => {
            assert_eq!(lo, hi, "{what}: the answer mixes versions {lo} and {hi}");
            assert_eq!(*n, rows_of(*lo, same_size), "{what}: row count of another version");
            true
        }
        Err(e) => {
            assert!(e.contains("changed while it was read"), "{what}: unexpected error: {e}");
            false
        }
    }
}

/// Where the overwritten table lives.
#[derive(Clone, Copy, PartialEq)]
enum Store {
    /// The loopback S3 server.
    S3,
    /// A local folder (`file://`).
    Local,
}

async fn overwrite_during_scans(same_size: bool, store: Store) {
    overwrite_during_scans_through(same_size, store, 0).await;
}

/// Like [`overwrite_during_scans`], through a client with a compute-side
/// cache of `local_cache_bytes` (0: none).
async fn overwrite_during_scans_through(same_size: bool, store: Store, local_cache_bytes: u64) {
    let bucket = MixBucket::new(same_size).await;
    let file = bucket.file.clone();
    if same_size {
        let s1 = std::fs::metadata(&file).unwrap().len();
        let s2 = write_version(&file, 2, same_size);
        assert_eq!(s1, s2, "same-size versions must have equal sizes");
        write_version(&file, 1, same_size);
    }
    let url = match store {
        Store::S3 => "s3://mix/t/".to_string(),
        Store::Local => format!("file://{}/", file.parent().unwrap().display()),
    };
    let (server, ctx) = bucket.server(&url, Freshness::Always).await;
    let ctx = match local_cache_bytes {
        0 => ctx,
        bytes => client_with(&server, &hybrid(bytes)).await,
    };
    let mut answered = 0;
    // Round `i` overwrites the object with this version.
    let version_of_round = |i: i64| 1 + (i + 1) % 2;
    const ROUNDS: i64 = 100;
    for i in 0..ROUNDS {
        // Two concurrent scans (each one's LIST revalidates the object under
        // the other) while the object is overwritten part-way through.
        let writer = {
            let file = file.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros((i as u64 * 700) % 9000)).await;
                tokio::task::spawn_blocking(move || write_version(&file, version_of_round(i), same_size))
                    .await
                    .unwrap();
            })
        };
        let hybrid = local_cache_bytes > 0;
        let (a, b) = tokio::join!(summarize(&ctx, hybrid), summarize(&ctx, hybrid));
        writer.await.unwrap();
        answered += usize::from(check_one_version(&a, same_size, &format!("round {i} a")));
        answered += usize::from(check_one_version(&b, same_size, &format!("round {i} b")));
    }
    // Every round overwrites the object under its scans, so many of them
    // get the typed error; enough must answer for the check to mean something.
    assert!(answered >= 20, "only {answered} of 200 scans answered");
    // After the last overwrite, the current version is what a query sees.
    let last = version_of_round(ROUNDS - 1);
    assert_eq!(
        summary(&ctx, "mix").await.unwrap(),
        (last, last, rows_of(last, same_size))
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwrites_of_the_same_size_during_scans_never_mix_versions() {
    overwrite_during_scans(true, Store::S3).await;
}

/// Silt's client with a compute-side cache of `bytes`.
fn hybrid(bytes: u64) -> SiltTableOptions {
    SiltTableOptions {
        local_cache_bytes: bytes,
        ..Default::default()
    }
}

/// Through the hybrid client, overwrites during scans never mix versions
/// either: row groups answered locally are of the version the server's
/// layout validated, and a scoped scan of a version gone is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwrites_during_hybrid_scans_never_mix_versions() {
    overwrite_during_scans_through(true, Store::S3, 1 << 30).await;
}

/// Writes versions 2 and 3 of `bucket`'s file after version 1, and checks
/// that `ctx` (a client with a compute-side cache) answers each version's
/// rows three times (pushed down, fetched, then local), never an older
/// one, and that its cache admitted and served row groups.
async fn overwrite_three_times(bucket: &MixBucket, same_size: bool, ctx: &SessionContext) {
    for k in 1..=3 {
        if k > 1 {
            write_version(&bucket.file, k, same_size);
        }
        for run in 0..3 {
            let got = summary_of_rows(ctx, "mix").await.unwrap();
            assert_eq!(got, (k, k, rows_of(k, same_size)), "version {k}, run {run}");
        }
    }
    let provider = ctx.table_provider("mix").await.unwrap();
    let table = provider.downcast_ref::<SiltTable>().unwrap();
    let stats = table.local_cache().expect("the client keeps a cache").stats();
    assert!(stats.hits > 0 && stats.admitted > 0, "{stats:?}");
}

/// The compute-side cache keys row groups by the version the server
/// validated: after an overwrite (of the same size or not), the next query
/// answers the new version, never the cached old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cache_never_serves_an_overwritten_version() {
    for same_size in [true, false] {
        let bucket = MixBucket::new(same_size).await;
        let (server, _) = bucket.server("s3://mix/t/", Freshness::Always).await;
        let ctx = client_with(&server, &hybrid(1 << 30)).await;
        overwrite_three_times(&bucket, same_size, &ctx).await;
        server.shutdown().await.unwrap();
    }
}

/// The same through a fleet of two servers over the bucket, as a user's
/// fleet client gets it (the default cache): each row group cached here is
/// of the version its owner's layout validated, and an overwrite is seen
/// by the next query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_clients_cache_never_serves_an_overwritten_version() {
    for same_size in [true, false] {
        let bucket = MixBucket::new(same_size).await;
        let (a, _) = bucket.server("s3://mix/t/", Freshness::Always).await;
        // The second member on a cache dir of its own.
        let b_cache = tempfile::tempdir().unwrap();
        let mut cfg = bucket.config("s3://mix/t/", Freshness::Always, PAGE);
        cfg.cache_dir = b_cache.path().to_path_buf();
        let b = silt_server::start(cfg).await.expect("start the second member");
        let urls = vec![a.flight_url(), b.flight_url()];
        let ctx = crate::fleet::fleet_ctx(&urls, Duration::from_secs(5)).await;
        overwrite_three_times(&bucket, same_size, &ctx).await;
        a.shutdown().await.unwrap();
        b.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwrites_of_local_files_during_scans_never_mix_versions() {
    overwrite_during_scans(true, Store::Local).await;
    overwrite_during_scans(false, Store::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwrites_of_another_size_during_scans_never_mix_versions() {
    overwrite_during_scans(false, Store::S3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_between_listing_and_read_is_revalidated_not_an_error() {
    let bucket = MixBucket::new(true).await;
    // The listing is trusted for an hour: only a failed read can reveal the change.
    let ttl = Freshness::Ttl(Duration::from_secs(3600));
    let (server, ctx) = bucket.server("s3://mix/t/", ttl).await;
    read_ids(&ctx).await;
    write_version(&bucket.file, 2, true);
    assert_eq!(
        summary(&ctx, "mix").await.unwrap(),
        (2, 2, ROWS),
        "the new version, not an error"
    );
    assert!(metric(&server, "silt_query_restarts_total") >= 1.0);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_object_is_not_found() {
    let bucket = MixBucket::new(true).await;
    let ttl = Freshness::Ttl(Duration::from_secs(3600));
    // A one-object table: once deleted, it is gone, not an empty folder.
    let (server, ctx) = bucket.server("s3://mix/t/part.parquet", ttl).await;
    read_ids(&ctx).await;
    std::fs::remove_file(&bucket.file).unwrap();
    // Several scans at once: the one that fetches and those that wait on its
    // fetch all get not-found.
    let answers = futures::future::join_all((0..4).map(|_| summary(&ctx, "mix"))).await;
    for a in answers {
        let e = a.unwrap_err();
        assert!(e.contains("does not exist") || e.contains("NotFound"), "{e}");
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_the_same_cache_dir_is_refused_and_the_first_keeps_its_pages() {
    let bucket = MixBucket::new(true).await;
    let (first, ctx) = bucket.server("s3://mix/t/", Freshness::Always).await;
    assert_eq!(summary(&ctx, "mix").await.unwrap(), (1, 1, ROWS));
    let disk = first.engine.disk_tier().cloned().expect("disk tier on");
    // A read-ahead's disk write may land after the answer: count once the
    // page count has stopped moving.
    let mut pages = disk.page_count();
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = disk.page_count();
        if now == pages {
            break;
        }
        pages = now;
    }
    assert!(pages > 0);

    let cfg = bucket.config("s3://mix/t/", Freshness::Always, PAGE * 4);
    let err = silt_server::start(cfg)
        .await
        .err()
        .expect("a second server must be refused");
    assert!(err.to_string().contains("in use"), "{err}");
    assert_eq!(disk.page_count(), pages, "the first server keeps its pages");
    let page_dir = bucket.cache.path().join(format!("disk/p{PAGE}"));
    assert!(page_dir.exists(), "the first server's page folder is intact");
    assert_eq!(summary(&ctx, "mix").await.unwrap(), (1, 1, ROWS));
    first.shutdown().await.unwrap();
}

// Speculative validation under `always`: a warm query runs on the last
// validated listing (or version) while its LIST (HEAD) is in flight and
// releases its answer only once a validation sent after it started agrees.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_speculative_query_on_an_overwritten_object_restarts_on_the_new_version() {
    let bucket = MixBucket::new(false).await;
    let (server, ctx) = bucket.server("s3://mix/t/", Freshness::Always).await;
    // Registration listed the table, so even the first query starts on that
    // listing; unchanged, it is confirmed without a restart.
    assert_eq!(summary(&ctx, "mix").await.unwrap(), (1, 1, rows_of(1, false)));
    assert_eq!(summary(&ctx, "mix").await.unwrap(), (1, 1, rows_of(1, false)));
    assert_eq!(metric(&server, "silt_validations_speculative_total"), 2.0);
    assert_eq!(metric(&server, "silt_validation_mismatches_total"), 0.0);
    assert_eq!(metric(&server, "silt_query_restarts_total"), 0.0);

    write_version(&bucket.file, 2, false);
    // Starts on the listing of version 1; its LIST finds version 2.
    assert_eq!(
        summary(&ctx, "mix").await.unwrap(),
        (2, 2, rows_of(2, false)),
        "the new version, from a restart"
    );
    assert_eq!(metric(&server, "silt_validation_mismatches_total"), 1.0);
    assert_eq!(metric(&server, "silt_query_restarts_total"), 1.0);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overwrite_between_two_queries_is_seen_by_the_second() {
    for url in ["s3://mix/t/", "s3://mix/t/part.parquet"] {
        let bucket = MixBucket::new(true).await;
        let (server, ctx) = bucket.server(url, Freshness::Always).await;
        for k in 1..=4 {
            if k > 1 {
                write_version(&bucket.file, k, true);
            }
            assert_eq!(summary(&ctx, "mix").await.unwrap(), (k, k, ROWS), "{url}: version {k}");
            // Repeated without a change: speculative and confirmed.
            assert_eq!(
                summary(&ctx, "mix").await.unwrap(),
                (k, k, ROWS),
                "{url}: version {k} again"
            );
        }
        assert!(metric(&server, "silt_validations_speculative_total") >= 6.0, "{url}");
        assert!(metric(&server, "silt_validation_mismatches_total") >= 3.0, "{url}");
        server.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_queries_share_one_list() {
    const QUERIES: usize = 8;
    let bucket = MixBucket::new(true).await;
    let mut cfg = bucket.config("s3://mix/t/", Freshness::Always, PAGE);
    // Every store request is slow, so the queries overlap the LISTs.
    cfg.store.latency = Duration::from_millis(300);
    let server = silt_server::start(cfg).await.expect("start server");
    let ctx = client(&server).await;
    assert_eq!(summary(&ctx, "mix").await.unwrap(), (1, 1, ROWS));
    let lists = || metric(&server, "silt_object_store_list_requests_total");
    let before = lists();
    let speculative = metric(&server, "silt_validations_speculative_total");
    let answers = futures::future::join_all((0..QUERIES).map(|_| summary(&ctx, "mix"))).await;
    for a in answers {
        assert_eq!(a.unwrap(), (1, 1, ROWS));
    }
    let sent = lists() - before;
    // One LIST per query without sharing; shared, the queries that start
    // while a LIST is in flight join the next one.
    assert!(sent >= 1.0, "every query is confirmed by a LIST");
    assert!(sent < QUERIES as f64, "{sent} LISTs for {QUERIES} concurrent queries");
    assert_eq!(
        metric(&server, "silt_validations_speculative_total") - speculative,
        QUERIES as f64
    );
    assert_eq!(metric(&server, "silt_validation_mismatches_total"), 0.0);
    server.shutdown().await.unwrap();
}
