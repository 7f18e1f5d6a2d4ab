//! The cache tiers end to end: warm queries and restarts make no data GETs,
//! corrupt pages are detected and refetched, overwrites are seen per the
//! table's validation mode, budgets hold, concurrent misses are fetched
//! once, and transient store failures are retried.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::prelude::SessionContext;
use silt_bench::files::{allocated_bytes_with_extension, bytes_below, files_with_extension};
use silt_bench::local_s3::LocalS3;
use silt_cache::Freshness;
use silt_client::script::run_script_last_query;
use silt_server::config::TableConfig;
use silt_server::{ServerConfig, ServerHandle};

use crate::common::{
    answer, baseline_ctx, break_ties, check_same, client, data_root, full_config, is_ordered, metric, s3_settings,
    shared_dir,
};

const PAGE: u64 = 64 << 10;

fn gets(server: &ServerHandle) -> f64 {
    metric(server, "silt_object_store_get_requests_total")
}

async fn start(s3: &LocalS3, cache_dir: &Path, tweak: impl FnOnce(&mut ServerConfig)) -> ServerHandle {
    let mut cfg = full_config(s3, cache_dir);
    cfg.page_size = PAGE;
    tweak(&mut cfg);
    silt_server::start(cfg).await.expect("start server")
}

async fn wait_recovered(server: &ServerHandle) {
    if let Some(disk) = server.engine.disk_tier().cloned() {
        tokio::task::spawn_blocking(move || disk.wait_recovered())
            .await
            .unwrap();
    }
}

/// Runs TPC-H queries `numbers` through `silt` and checks them against plain DataFusion.
async fn check_tpch(silt: &SessionContext, base: &SessionContext, numbers: &[u32]) {
    let failures = tpch_differences(silt, base, numbers).await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// How the answers of TPC-H queries `numbers` through `silt` differ from
/// `base`'s (ties in ORDER BY broken on every column first).
pub(crate) async fn tpch_differences(silt: &SessionContext, base: &SessionContext, numbers: &[u32]) -> Vec<String> {
    let mut failures = Vec::new();
    for n in numbers {
        let file = format!("q{n:02}.sql");
        let original = std::fs::read_to_string(shared_dir().join("bench/tpch/queries").join(&file)).unwrap();
        let probe = run_script_last_query(base, &original).await.unwrap();
        let sql = break_ties(&original, probe.first().map_or(0, |b| b.num_columns()));
        let expected = run_script_last_query(base, &sql).await.unwrap();
        match run_script_last_query(silt, &sql).await {
            Err(e) => failures.push(format!("{file}: {e}")),
            Ok(got) => {
                if let Err(d) = check_same(&file, &got, &expected, is_ordered(&sql)) {
                    failures.push(d);
                }
            }
        }
    }
    failures
}

/// The disk tier's region files, each with its slot size (a 4 KiB header
/// plus the page size, in the name of the directory that holds it:
/// `regions-<page bytes>`, rounded up to 4 KiB).
fn region_files(dir: &Path) -> Vec<(PathBuf, u64)> {
    files_with_extension(dir, "region")
        .into_iter()
        .map(|f| {
            let parent = f.parent().unwrap().file_name().unwrap().to_str().unwrap();
            let page: u64 = parent.strip_prefix("regions-").unwrap().parse().unwrap();
            (f, 4096 + page.div_ceil(4096) * 4096)
        })
        .collect()
}

const QUERIES: [u32; 4] = [1, 3, 6, 14];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_queries_and_restarts_make_no_data_gets() {
    let s3 = LocalS3::start(data_root()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let base = baseline_ctx().await;

    let a = start(&s3, dir.path(), |_| {}).await;
    let ctx = client(&a).await;
    check_tpch(&ctx, &base, &QUERIES).await;
    let cold = gets(&a);
    assert!(cold > 0.0);
    assert!(
        metric(&a, "silt_cache_misses_total{tier=\"memory\"}") > 0.0,
        "the cold run decoded nothing"
    );
    check_tpch(&ctx, &base, &QUERIES).await;
    assert_eq!(gets(&a), cold, "a warm query fetched data");
    // The second run admitted the projected columns the first read only the
    // kept rows of (admission on the second touch): the third decodes nothing.
    let memory_misses = metric(&a, "silt_cache_misses_total{tier=\"memory\"}");
    check_tpch(&ctx, &base, &QUERIES).await;
    assert_eq!(gets(&a), cold, "a warm query fetched data");
    assert!(metric(&a, "silt_cache_hits_total{tier=\"metadata\"}") > 0.0);
    assert!(metric(&a, "silt_cache_hits_total{tier=\"memory\"}") > 0.0);
    assert_eq!(
        metric(&a, "silt_cache_misses_total{tier=\"memory\"}"),
        memory_misses,
        "a warm query decoded a column batch the memory tier should have held"
    );
    assert!(metric(&a, "silt_cache_bytes{tier=\"disk\"}") > 0.0);
    a.shutdown().await.unwrap();

    // A new server on the same cache dir: footers and pages come from disk.
    let b = start(&s3, dir.path(), |_| {}).await;
    wait_recovered(&b).await;
    let ctx = client(&b).await;
    check_tpch(&ctx, &base, &QUERIES).await;
    assert_eq!(gets(&b), 0.0, "a restarted server fetched data it had on disk");
    assert!(metric(&b, "silt_cache_recovered_pages_total") > 0.0);
    assert!(metric(&b, "silt_cache_hits_total{tier=\"disk\"}") > 0.0);
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_bytes_on_disk_are_detected_counted_and_refetched() {
    let s3 = LocalS3::start(data_root()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let base = baseline_ctx().await;
    let a = start(&s3, dir.path(), |_| {}).await;
    check_tpch(&client(&a).await, &base, &QUERIES).await;
    a.shutdown().await.unwrap();

    let files = region_files(dir.path());
    assert!(
        !files.is_empty(),
        "expected region files under {}",
        dir.path().display()
    );
    // One byte of data flipped in every slot (blank slots stay blank: their
    // headers are untouched).
    let mut flipped = 0;
    for (f, slot) in &files {
        let mut bytes = std::fs::read(f).unwrap();
        for start in (0..bytes.len()).step_by(*slot as usize) {
            if bytes[start..start + 8] == *b"SILTPAGE" {
                bytes[start + 4096] ^= 0xFF;
                flipped += 1;
            }
        }
        std::fs::write(f, bytes).unwrap();
    }
    assert!(flipped > 0);

    let b = start(&s3, dir.path(), |_| {}).await;
    wait_recovered(&b).await;
    check_tpch(&client(&b).await, &base, &QUERIES).await;
    assert!(metric(&b, "silt_cache_corrupt_pages_total") > 0.0);
    assert!(gets(&b) > 0.0, "corrupt pages must be refetched");
    let stats = silt_server::stats::stats_json(&b.engine);
    assert!(stats["tiers"]["disk"]["corrupt_pages"].as_u64().unwrap() > 0, "{stats}");
    b.shutdown().await.unwrap();
}

/// A one-column Parquet file: `id` 0..n and `tag`, all rows the same tag.
fn write_version(path: &Path, tag: &str, n: i64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("tag", DataType::Utf8, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..n)),
            Arc::new(StringArray::from_iter_values((0..n).map(|_| tag))),
        ],
    )
    .unwrap();
    let tmp = path.with_extension("tmp");
    let mut w = ArrowWriter::try_new(std::fs::File::create(&tmp).unwrap(), schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    std::fs::rename(tmp, path).unwrap();
}

async fn tags(ctx: &SessionContext, table: &str) -> Result<Vec<String>, String> {
    let batches = ctx
        .sql(&format!("SELECT DISTINCT tag FROM {table} ORDER BY tag"))
        .await
        .map_err(|e| e.to_string())?
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for b in batches {
        let a = datafusion::arrow::compute::cast(b.column(0), &DataType::Utf8).unwrap();
        let a = a.as_any().downcast_ref::<StringArray>().unwrap();
        out.extend(a.iter().flatten().map(str::to_string));
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwrites_are_seen_per_validation_mode() {
    let root = tempfile::tempdir().unwrap();
    let bucket = root.path().join("mut");
    // Same sizes in both versions: only the ETag tells them apart.
    write_version(&bucket.join("always/part.parquet"), "old", 1000);
    write_version(&bucket.join("ttl/part.parquet"), "old", 1000);
    write_version(&bucket.join("one.parquet"), "old", 1000);
    let s3 = LocalS3::start(root.path()).await.unwrap();
    let ttl = Duration::from_secs(3);
    let cache = tempfile::tempdir().unwrap();
    let mut cfg = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        cache_dir: cache.path().to_path_buf(),
        s3: s3_settings(&s3),
        page_size: PAGE,
        ..Default::default()
    };
    for (name, url, validation) in [
        ("always_t", "s3://mut/always/", Freshness::Always),
        ("ttl_t", "s3://mut/ttl/", Freshness::Ttl(ttl)),
        ("one_t", "s3://mut/one.parquet", Freshness::Always),
    ] {
        cfg.tables.insert(
            name.into(),
            TableConfig {
                url: url.into(),
                validation,
                ..Default::default()
            },
        );
    }
    let server = silt_server::start(cfg).await.unwrap();
    let ctx = client(&server).await;
    for t in ["always_t", "ttl_t", "one_t"] {
        assert_eq!(tags(&ctx, t).await.unwrap(), ["old"], "{t}");
    }
    let validated = Instant::now();
    for f in ["always/part.parquet", "ttl/part.parquet", "one.parquet"] {
        write_version(&bucket.join(f), "new", 1000);
    }
    assert_eq!(tags(&ctx, "always_t").await.unwrap(), ["new"]);
    assert_eq!(tags(&ctx, "one_t").await.unwrap(), ["new"]);
    let within_ttl = tags(&ctx, "ttl_t").await.unwrap();
    if validated.elapsed() < ttl {
        assert_eq!(within_ttl, ["old"], "ttl tables trust their last validation");
    }
    tokio::time::sleep(ttl.saturating_sub(validated.elapsed()) + Duration::from_millis(200)).await;
    assert_eq!(tags(&ctx, "ttl_t").await.unwrap(), ["new"], "after the TTL");

    std::fs::remove_file(bucket.join("one.parquet")).unwrap();
    let err = tags(&ctx, "one_t").await.unwrap_err();
    assert!(
        err.contains("s3://mut/one.parquet") && err.contains("does not exist"),
        "{err}"
    );
    // The others carry on.
    assert_eq!(tags(&ctx, "always_t").await.unwrap(), ["new"]);
    server.shutdown().await.unwrap();
}

fn dir_bytes(dir: &Path) -> u64 {
    allocated_bytes_with_extension(dir, "region")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_at_a_tenth_of_the_data_hold_and_queries_stay_correct() {
    let data = bytes_below(&data_root().join("tpch"));
    let budget = data / 10;
    let s3 = LocalS3::start(data_root()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = start(&s3, dir.path(), |c| {
        c.memory_budget = budget;
        c.page_memory_budget = budget;
        c.disk_budget = budget;
    })
    .await;
    let engine = server.engine.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        let disk_dir = dir.path().join("disk");
        tokio::task::spawn_blocking(move || {
            let (mut max_mem, mut max_pages, mut max_disk, mut max_files, mut samples) = (0, 0, 0, 0, 0u64);
            while !stop.load(Ordering::Relaxed) {
                max_mem = max_mem.max(engine.tiers().batches().weighted_size());
                max_pages = max_pages.max(engine.tiers().pages().memory().weighted_size());
                if let Some(d) = engine.disk_tier() {
                    max_disk = max_disk.max(d.used_bytes());
                }
                max_files = max_files.max(dir_bytes(&disk_dir));
                samples += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            (max_mem, max_pages, max_disk, max_files, samples)
        })
    };
    let base = baseline_ctx().await;
    check_tpch(&client(&server).await, &base, &(1..=22).collect::<Vec<_>>()).await;
    stop.store(true, Ordering::Relaxed);
    let (max_mem, max_pages, max_disk, max_files, samples) = sampler.await.unwrap();
    assert!(samples > 10);
    assert!(max_mem > 0, "the memory tier was never used");
    assert!(max_mem <= budget, "memory tier held {max_mem} bytes, budget {budget}");
    assert!(
        max_pages <= budget,
        "page buffer held {max_pages} bytes, budget {budget}"
    );
    assert!(
        max_disk <= budget,
        "disk tier accounted {max_disk} bytes, budget {budget}"
    );
    // Disk space the region files take: within the budget (slots are
    // counted from it), with room for pages being written.
    assert!(
        max_files <= budget + 2 * (PAGE + 4096),
        "region files took {max_files} bytes, budget {budget}"
    );
    assert!(metric(&server, "silt_cache_evictions_total{tier=\"disk\"}") > 0.0);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_on_a_cold_table_fetch_each_page_once() {
    let s3 = LocalS3::start(data_root()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = start(&s3, dir.path(), |_| {}).await;
    let lineitem_bytes = bytes_below(&data_root().join("tpch/lineitem"));
    // Registration read every footer; what follows is lineitem's data.
    let before = metric(&server, "silt_object_store_get_bytes_total") as u64;
    let sql = "SELECT l_returnflag, sum(l_quantity) AS q, count(*) AS n FROM lineitem \
               WHERE l_shipdate <= DATE '1998-09-02' GROUP BY l_returnflag ORDER BY l_returnflag";
    let url = server.flight_url();
    let runs = (0..32).map(|_| {
        let url = url.clone();
        tokio::spawn(async move {
            let ctx = SessionContext::new();
            silt_client::register_tables(&ctx, &url).await.unwrap();
            ctx.sql(sql).await.unwrap().collect().await.unwrap()
        })
    });
    let results = futures::future::join_all(runs).await;
    let base = baseline_ctx().await;
    let expected = base.sql(sql).await.unwrap().collect().await.unwrap();
    for r in results {
        check_same("concurrent", &r.unwrap(), &expected, true).unwrap();
    }
    let fetched = metric(&server, "silt_object_store_get_bytes_total") as u64 - before;
    assert!(fetched > 0);
    assert!(
        fetched <= lineitem_bytes,
        "32 clients fetched {fetched} bytes of a {lineitem_bytes}-byte table: some page was fetched twice"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_store_failures_are_retried_and_permanent_ones_named() {
    let s3 = LocalS3::start(data_root()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = start(&s3, dir.path(), |c| {
        // Small pages: many requests, so many faults.
        c.page_size = 8 << 10;
        c.store.fail_rate = 0.2;
        c.store.truncate_rate = 0.05;
        c.store.retries = 12;
    })
    .await;
    let base = baseline_ctx().await;
    check_tpch(&client(&server).await, &base, &(1..=22).collect::<Vec<_>>()).await;
    assert!(
        metric(&server, "silt_object_store_errors_total") > 0.0,
        "faults were injected"
    );
    assert!(metric(&server, "silt_object_store_retries_total") > 0.0, "and retried");
    server.shutdown().await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let server = start(&s3, dir.path(), |c| {
        c.store.fail_rate = 1.0;
        c.store.retries = 2;
    })
    .await;
    let err = silt_client::SiltClient::connect(&server.flight_url())
        .await
        .unwrap()
        .sql("SELECT count(*) FROM lineitem")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("s3://tpch/lineitem/") && err.contains("2 attempts"),
        "{err}"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preload_warms_the_tiers_so_the_first_query_fetches_nothing() {
    let s3 = LocalS3::start(data_root()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = start(&s3, dir.path(), |_| {}).await;
    let c = silt_client::SiltClient::connect(&server.flight_url()).await.unwrap();
    let mut reports = 0;
    let last = c
        .preload(
            "lineitem",
            Some(vec!["l_quantity".into(), "l_shipdate".into()]),
            true,
            |_| reports += 1,
        )
        .await
        .unwrap();
    assert!(reports >= 2 && last["done"] == true, "{last}");
    assert!(last["bytes_done"].as_u64().unwrap() > 0);
    assert_eq!(last["bytes_done"], last["bytes_total"]);
    let before = gets(&server);
    let decoded = metric(&server, "silt_cache_misses_total{tier=\"memory\"}");
    assert!(decoded > 0.0, "preload --memory decoded nothing");
    let ctx = client(&server).await;
    let sql = "SELECT sum(l_quantity) FROM lineitem WHERE l_shipdate < DATE '1995-01-01'";
    let got = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let base = baseline_ctx().await;
    check_same(
        "preloaded",
        &got,
        &base.sql(sql).await.unwrap().collect().await.unwrap(),
        false,
    )
    .unwrap();
    assert_eq!(gets(&server), before, "the preloaded query fetched data");
    assert_eq!(
        metric(&server, "silt_cache_misses_total{tier=\"memory\"}"),
        decoded,
        "the preloaded query decoded columns preload --memory should have decoded"
    );

    let err = c
        .preload("lineitem", Some(vec!["nope".into()]), false, |_| {})
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no column 'nope'"), "{err}");
    let err = c.preload("missing", None, false, |_| {}).await.unwrap_err();
    assert!(err.to_string().contains("unknown table 'missing'"), "{err}");

    let stats: serde_json::Value = serde_json::from_str(&c.stats_json().await.unwrap()).unwrap();
    for tier in ["metadata", "memory", "pages", "disk"] {
        assert!(stats["tiers"][tier]["bytes"].as_u64().unwrap() > 0, "{tier}: {stats}");
    }
    assert!(
        stats["tables"]["lineitem"]["hit_ratio"].as_f64().unwrap() > 0.0,
        "{stats}"
    );
    let text = server.engine.metrics().render();
    for series in [
        "silt_cache_hits_total{tier=\"disk\"}",
        "silt_cache_misses_total{tier=\"memory\"}",
        "silt_cache_bytes{tier=\"metadata\"}",
        "silt_cache_evictions_total{tier=\"disk\"}",
        "silt_cache_corrupt_pages_total",
        "silt_object_store_head_requests_total",
    ] {
        assert!(text.contains(series), "/metrics lacks {series}");
    }
    server.shutdown().await.unwrap();
}

/// Names of the columns of `table` the memory tier holds batches of.
fn columns_held(server: &ServerHandle, table: &str) -> Vec<String> {
    let mut names: Vec<String> = server
        .engine
        .tiers()
        .batches()
        .held_units()
        .into_iter()
        .filter(|s| s.object().path.contains(table))
        .filter_map(|s| s.column_name.map(|n| n.to_string()))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Runs `sql` three times on `server`, checking each answer against plain
/// DataFusion; per run, the columns of `table` the memory tier then holds and
/// the memory tier's misses so far. A fourth run must fetch nothing.
async fn three_runs(server: &ServerHandle, sql: &str, table: &str) -> Vec<(Vec<String>, f64)> {
    let base = baseline_ctx().await;
    let ctx = client(server).await;
    let expected = answer(&base, sql).await;
    let mut runs = Vec::new();
    for _ in 0..3 {
        let got = answer(&ctx, sql).await;
        check_same(sql, &got, &expected, is_ordered(sql)).unwrap();
        runs.push((
            columns_held(server, table),
            metric(server, "silt_cache_misses_total{tier=\"memory\"}"),
        ));
    }
    let cold_gets = gets(server);
    answer(&ctx, sql).await;
    assert_eq!(gets(server), cold_gets, "a warm run fetched data");
    runs
}

/// A cold query whose filter keeps few rows reads only those rows of its
/// projected columns and admits none of them (the filter's column is
/// admitted: it was decoded whole); the second run admits them, the third
/// decodes nothing and reads no bytes. Every answer is DataFusion's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selective_query_admits_its_projected_columns_on_the_second_read() {
    let s3 = LocalS3::start(data_root()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = start(&s3, dir.path(), |_| {}).await;
    let sql = "SELECT l_orderkey, l_linenumber, l_comment FROM lineitem WHERE l_quantity < 3 \
               ORDER BY l_orderkey, l_linenumber";
    let runs = three_runs(&server, sql, "lineitem").await;
    assert_eq!(runs[0].0, vec!["l_quantity"], "the cold run admitted projected columns");
    assert_eq!(runs[1].0, vec!["l_comment", "l_linenumber", "l_orderkey", "l_quantity"]);
    assert!(runs[1].1 > runs[0].1, "the second run decoded nothing");
    assert_eq!(runs[2].1, runs[1].1, "the third run decoded column batches");
}

/// While the transcoder is behind (here always: `transcode_inline_after =
/// 0`), a chunk read for the first time is not admitted, so a one-off scan
/// pays no encoding; its second read admits it (encoded inline, liquid), and
/// the third decodes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_transcoder_is_behind_a_first_read_admits_nothing() {
    let s3 = LocalS3::start(data_root()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = start(&s3, dir.path(), |c| c.transcode_inline_after = 0).await;
    let sql = "SELECT l_returnflag, sum(l_quantity) FROM lineitem GROUP BY l_returnflag ORDER BY l_returnflag";
    let runs = three_runs(&server, sql, "lineitem").await;
    assert!(runs[0].0.is_empty(), "the cold run admitted {:?}", runs[0].0);
    assert_eq!(runs[1].0, vec!["l_quantity", "l_returnflag"]);
    assert_eq!(runs[2].1, runs[1].1, "the third run decoded column batches");
    let usage = server.engine.tiers().batches().usage_by_column();
    assert!(
        usage.iter().any(|u| u.form == "liquid" && u.bytes > 0),
        "the second run's admissions were not encoded: {usage:?}"
    );
}
