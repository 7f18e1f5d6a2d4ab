//! `kill -9` of a real `silt serve` process while its disk tier fills under
//! load: the server restarted on the same cache dir answers every TPC-H
//! query exactly like plain DataFusion.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use datafusion::prelude::{ParquetReadOptions, SessionContext};
use silt_bench::compare::{break_ties, check_same, is_ordered};
use silt_bench::files::files_with_extension;
use silt_bench::local_s3::{ACCESS_KEY, LocalS3, REGION, SECRET_KEY};
use silt_bench::tpch;
use silt_client::script::run_script_last_query;

fn shared_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared")
}

/// Starts `silt serve` on all TPC-H tables; returns the process and its Flight URL.
fn spawn_server(s3: &LocalS3, cache_dir: &Path) -> (Child, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_silt"));
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--page-size",
        "16KiB",
        "--cache-dir",
    ])
    .arg(cache_dir);
    for t in tpch::TABLES {
        cmd.arg("--table").arg(format!("{t}=s3://tpch/{t}/"));
    }
    let mut child = cmd
        .env("AWS_ENDPOINT_URL", s3.endpoint())
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("AWS_REGION", REGION)
        .env("AWS_ALLOW_HTTP", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn silt serve");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let url = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("silt serve exited before listening:\n{}", seen.join("\n")))
            .unwrap();
        if let Some(addr) = line.strip_prefix("silt: Flight SQL on grpc://") {
            break format!("http://{}", addr.trim());
        }
        seen.push(line);
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, url)
}

/// A client context with the server's tables. The server announces its
/// address once it is bound; on a loaded machine the first calls can still
/// fail, so registration is retried for a while before the test gives up.
async fn client(url: &str) -> SessionContext {
    let started = Instant::now();
    loop {
        let ctx = SessionContext::new();
        match silt_client::register_tables(&ctx, url).await {
            Ok(_) => return ctx,
            Err(e) if started.elapsed() > Duration::from_secs(30) => panic!("register tables: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn query(n: u32) -> String {
    std::fs::read_to_string(shared_dir().join(format!("bench/tpch/queries/q{n:02}.sql"))).unwrap()
}

fn page_count(dir: &Path) -> usize {
    files_with_extension(dir, "page").len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_the_disk_tier_fills_then_every_query_is_correct() {
    let data = tempfile::tempdir().unwrap();
    tpch::generate(&data.path().join("tpch"), 0.01, tpch::ParquetLayout::default()).unwrap();
    let s3 = LocalS3::start(data.path()).await.unwrap();
    let cache = tempfile::tempdir().unwrap();

    let (mut child, url) = spawn_server(&s3, cache.path());
    // Load: clients running queries in a loop while pages are written.
    let stop = Arc::new(AtomicBool::new(false));
    let load: Vec<_> = (0..4)
        .map(|i| {
            let (url, stop) = (url.clone(), stop.clone());
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
    while page_count(cache.path()) < 20 && started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().expect("kill -9");
    child.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    for l in load {
        let _ = l.await;
    }
    assert!(page_count(cache.path()) > 0, "the disk tier was never written");

    let (mut child, url) = spawn_server(&s3, cache.path());
    let silt = client(&url).await;
    let base = SessionContext::new();
    for t in tpch::TABLES {
        let dir = data.path().join("tpch").join(t);
        base.register_parquet(t, dir.to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
    }
    let mut failures = Vec::new();
    for n in 1..=22 {
        let original = query(n);
        let probe = run_script_last_query(&base, &original).await.unwrap();
        let sql = break_ties(&original, probe.first().map_or(0, |b| b.num_columns()));
        let expected = run_script_last_query(&base, &sql).await.unwrap();
        match run_script_last_query(&silt, &sql).await {
            Err(e) => failures.push(format!("q{n:02}: {e}")),
            Ok(got) => {
                if let Err(d) = check_same(&format!("q{n:02}"), &got, &expected, is_ordered(&sql)) {
                    failures.push(d);
                }
            }
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
