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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_the_disk_tier_fills_then_every_query_is_correct() {
    let data = tempfile::tempdir().unwrap();
    tpch::generate(&data.path().join("tpch"), 0.01, tpch::ParquetLayout::default()).unwrap();
    let s3 = LocalS3::start(data.path()).await.unwrap();
    let cache = tempfile::tempdir().unwrap();

    let mut server = start(serve_command(&s3, cache.path(), &[]));
    // Load: clients running queries in a loop while pages are written.
    let stop = Arc::new(AtomicBool::new(false));
    let load: Vec<_> = (0..4)
        .map(|i| {
            let (url, stop) = (server.url.clone(), stop.clone());
            tokio::spawn(async move {
                let ctx = client(&url).await;
                let mut n = 1 + i;
                while !stop.load(Ordering::Relaxed) {
                    // Errors are expected once the server is killed.
                    let _ = run_script_last_query(&ctx, &query(n)).await;
                    n = n % 22 + 1;
                }
            })
        })
        .collect();
    let started = Instant::now();
    // About 20 pages of 64 KiB written.
    while disk_tier_bytes(cache.path()) < 20 * 68 * 1024 && started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.child.kill().expect("kill -9");
    server.child.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    for l in load {
        let _ = l.await;
    }
    assert!(disk_tier_bytes(cache.path()) > 0, "the disk tier was never written");

    let server = start(serve_command(&s3, cache.path(), &[]));
    let silt = client(&server.url).await;
    let base = baseline(&data.path().join("tpch")).await;
    let failures = tpch_differences(&silt, &base).await;
    server.stop();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
