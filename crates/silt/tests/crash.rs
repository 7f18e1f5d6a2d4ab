//! `kill -9` of a real `silt serve` process while its disk tier fills under
//! load: the server restarted on the same cache dir answers every TPC-H
//! query exactly like plain DataFusion.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use silt_bench::files::allocated_bytes_with_extension;
use silt_bench::local_s3::LocalS3;
use silt_bench::tpch;
use silt_client::script::run_script_last_query;

use common::{baseline, client, query, serve_command, start, tpch_differences};

/// Disk space the disk tier's region files take (they are sparse: it grows
/// with the pages written).
fn disk_tier_bytes(dir: &Path) -> u64 {
    allocated_bytes_with_extension(dir, "region")
}

/// The load a server is killed under: its extra `silt serve` arguments, and
/// clients running TPC-H queries in a loop (pushed down whole or through
/// the default client).
struct Load<'a> {
    args: &'a [&'a str],
    clients: usize,
    pushdown: bool,
}

/// Starts `silt serve` on `cache` under `load`, and `kill -9`s it once
/// `written()` holds (or after `limit`); returns when the clients stopped.
async fn kill_9_under_load(s3: &LocalS3, cache: &Path, load: Load<'_>, written: impl Fn() -> bool, limit: Duration) {
    let mut server = start(serve_command(s3, cache, load.args));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..load.clients)
        .map(|i| {
            let (url, stop, pushdown) = (server.url.clone(), stop.clone(), load.pushdown);
            let first = 1 + i * 22 / load.clients;
            tokio::spawn(async move {
                let ctx = if pushdown {
                    pushdown_client(&url).await
                } else {
                    client(&url).await
                };
                let mut n = first;
                while !stop.load(Ordering::Relaxed) {
                    // Errors are expected once the server is killed.
                    let _ = run_script_last_query(&ctx, &query(n as u32)).await;
                    n = n % 22 + 1;
                }
            })
        })
        .collect();
    let started = Instant::now();
    while !written() && started.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.child.kill().expect("kill -9");
    server.child.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        let _ = c.await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_the_disk_tier_fills_then_every_query_is_correct() {
    let data = tempfile::tempdir().unwrap();
    tpch::generate(&data.path().join("tpch"), 0.01, tpch::ParquetLayout::default()).unwrap();
    let s3 = LocalS3::start(data.path()).await.unwrap();
    let cache = tempfile::tempdir().unwrap();

    // About 20 pages of 64 KiB written.
    let written = || disk_tier_bytes(cache.path()) >= 20 * 68 * 1024;
    let load = Load {
        args: &[],
        clients: 4,
        pushdown: false,
    };
    kill_9_under_load(&s3, cache.path(), load, written, Duration::from_secs(60)).await;
    assert!(disk_tier_bytes(cache.path()) > 0, "the disk tier was never written");

    let server = start(serve_command(&s3, cache.path(), &[]));
    let silt = client(&server.url).await;
    let base = baseline(&data.path().join("tpch")).await;
    let failures = tpch_differences(&silt, &base).await;
    server.stop();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `kill -9` while the memory tier squeezes evicted liquid chunks to disk
/// (a memory tier of 2 MiB under queries pushed down whole): the restarted
/// server recovers what was squeezed whole, drops what was torn, and
/// answers every TPC-H query exactly like plain DataFusion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_squeezing_then_every_query_is_correct() {
    let data = tempfile::tempdir().unwrap();
    tpch::generate(&data.path().join("tpch"), 0.01, tpch::ParquetLayout::default()).unwrap();
    let s3 = LocalS3::start(data.path()).await.unwrap();
    let cache = tempfile::tempdir().unwrap();
    let squeezed = cache.path().join("squeezed");
    let tight = ["--memory-budget", "2MiB"];

    // A few chunks squeezed (slots of 128 KiB and a header).
    let written = || disk_tier_bytes(&squeezed) >= 6 * 132 * 1024;
    let load = Load {
        args: &tight,
        clients: 3,
        pushdown: true,
    };
    kill_9_under_load(&s3, cache.path(), load, written, Duration::from_secs(90)).await;
    assert!(disk_tier_bytes(&squeezed) > 0, "nothing was ever squeezed");

    let server = start(serve_command(&s3, cache.path(), &tight));
    let silt = pushdown_client(&server.url).await;
    let base = baseline(&data.path().join("tpch")).await;
    // Twice: the second run reads back chunks the first squeezed.
    let mut failures = tpch_differences(&silt, &base).await;
    failures.extend(tpch_differences(&silt, &base).await);
    server.stop();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `kill -9` of a warm server that evicted nothing: with squeezing ahead
/// (the default), each chunk was written to the squeeze tier once its
/// batches were liquid, so the restarted server's first run of every TPC-H
/// query reads no byte from the object store, decodes no Parquet, and
/// answers exactly like plain DataFusion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_a_warm_server_then_the_first_queries_read_no_store_byte_and_decode_nothing() {
    let data = tempfile::tempdir().unwrap();
    tpch::generate(&data.path().join("tpch"), 0.01, tpch::ParquetLayout::default()).unwrap();
    let s3 = LocalS3::start(data.path()).await.unwrap();
    let cache = tempfile::tempdir().unwrap();
    let base = baseline(&data.path().join("tpch")).await;

    let mut server = start(serve_command(&s3, cache.path(), &[]));
    let silt = pushdown_client(&server.url).await;
    // Twice: a chunk read for the first time while the transcoder is
    // behind is not admitted; the second run admits it.
    for _ in 0..2 {
        let failures = tpch_differences(&silt, &base).await;
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
    let warm = settled_stats(&server.url, |s| {
        s["tiers"]["memory"]["transcode_backlog"] == 0 && s["tiers"]["memory"]["squeezed"]["pending_bytes"] == 0
    })
    .await;
    let squeezed = &warm["tiers"]["memory"]["squeezed"];
    assert!(squeezed["squeezed_chunks"].as_u64() > Some(20), "{squeezed}");
    assert_eq!(squeezed["restored_chunks"], 0, "nothing was evicted: {squeezed}");
    server.child.kill().expect("kill -9");
    server.child.wait().unwrap();

    let server = start(serve_command(&s3, cache.path(), &[]));
    let silt = pushdown_client(&server.url).await;
    let recovered = |s: &serde_json::Value| {
        s["tiers"]["disk"]["recovering"] == false && s["tiers"]["memory"]["squeezed"]["recovering"] == false
    };
    let before = settled_stats(&server.url, recovered).await;
    let failures = tpch_differences(&silt, &base).await;
    let after = settled_stats(&server.url, |_| true).await;
    server.stop();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let gets = |s: &serde_json::Value| {
        s["metrics"]["silt_object_store_get_requests_total"]
            .as_f64()
            .unwrap_or(0.0)
    };
    assert_eq!(
        gets(&after),
        gets(&before),
        "the restarted server fetched from the store"
    );
    assert_eq!(parquet_decodes(&after), 0, "the restarted server decoded Parquet");
    let restored = &after["tiers"]["memory"]["squeezed"];
    assert!(restored["restored_chunks"].as_u64() > Some(20), "{restored}");
    assert_eq!(restored["unreadable_chunks"], 0, "{restored}");
}

/// Column chunks every table of a server decoded from Parquet.
fn parquet_decodes(stats: &serde_json::Value) -> u64 {
    let tables = stats["tables"].as_object().expect("tables in the statistics");
    tables
        .values()
        .map(|t| t["parquet_decodes"].as_u64().unwrap_or(0))
        .sum()
}

/// The statistics of the server at `url` once `ready` holds of them
/// (polled; panics after two minutes).
async fn settled_stats(url: &str, ready: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let client = silt_client::SiltClient::connect(url).await.expect("connect");
    let started = Instant::now();
    loop {
        let text = client.stats_json().await.expect("statistics");
        let stats: serde_json::Value = serde_json::from_str(&text).expect("statistics are JSON");
        if ready(&stats) {
            return stats;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "not settled: {stats}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client that pushes every scan down whole (no compute-side cache), so
/// the server's memory tier does the work.
async fn pushdown_client(url: &str) -> datafusion::prelude::SessionContext {
    let started = Instant::now();
    let options = silt_client::SiltTableOptions {
        local_cache_bytes: 0,
        ..Default::default()
    };
    loop {
        let ctx = datafusion::prelude::SessionContext::new();
        let connected = match silt_client::SiltClient::connect(url).await {
            Ok(c) => silt_client::register_tables_with_options(&ctx, &c, &options)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match connected {
            Ok(()) => return ctx,
            Err(e) if started.elapsed() > Duration::from_secs(30) => panic!("register tables: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
