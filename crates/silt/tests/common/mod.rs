// Each test crate uses part of this module.
#![allow(dead_code)]

//! What the tests of real `silt serve` processes share: starting a server
//! on TPC-H in a loopback S3, a client for it, and checking all 22 TPC-H
//! queries against plain DataFusion.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use datafusion::prelude::{ParquetReadOptions, SessionContext};
use silt_bench::compare::{break_ties, check_same, is_ordered};
use silt_bench::local_s3::{ACCESS_KEY, LocalS3, REGION, SECRET_KEY};
use silt_bench::tpch;
use silt_client::script::run_script_last_query;

pub fn shared_dir() -> PathBuf {
    silt_bench::files::source_dir(env!("CARGO_MANIFEST_DIR")).join("../../../shared")
}

/// A running `silt serve`: the process, its Flight URL, and every line it
/// has written to stderr so far (its log).
pub struct Server {
    pub child: Child,
    pub url: String,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Lines of the log containing `needle`.
    pub fn log_lines_with(&self, needle: &str) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter().filter(|l| l.contains(needle)).cloned().collect()
    }

    /// Kills the server and waits for it ([`Drop`]).
    pub fn stop(self) {}
}

/// A test that fails leaves no server behind.
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `silt serve` on every TPC-H table of `s3`, with the cache in
/// `cache_dir` and `extra` arguments.
pub fn serve_command(s3: &LocalS3, cache_dir: &Path, extra: &[&str]) -> Command {
    serve_command_on("127.0.0.1:0", s3, cache_dir, extra)
}

/// [`serve_command`] listening on `listen`.
pub fn serve_command_on(listen: &str, s3: &LocalS3, cache_dir: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_silt"));
    cmd.args(["serve", "--listen", listen, "--page-size", "16KiB", "--cache-dir"])
        .arg(cache_dir)
        .args(extra);
    // `silt serve` listens on 127.0.0.1:9090 for its admin endpoints unless
    // told otherwise: servers of parallel tests would take each other's port.
    if !extra.contains(&"--admin") {
        cmd.args(["--admin", "off"]);
    }
    for t in tpch::TABLES {
        cmd.arg("--table").arg(format!("{t}=s3://tpch/{t}/"));
    }
    cmd.env("AWS_ENDPOINT_URL", s3.endpoint())
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("AWS_REGION", REGION)
        .env("AWS_ALLOW_HTTP", "true");
    cmd
}

/// Starts `cmd` (a `silt serve`, possibly wrapped) and waits until it
/// listens.
pub fn start(mut cmd: Command) -> Server {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn silt serve");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let log = Arc::new(Mutex::new(Vec::new()));
    let url = loop {
        let line = lines.next().map(|l| l.unwrap_or_default());
        let Some(line) = line else {
            panic!(
                "silt serve exited before listening:\n{}",
                log.lock().unwrap().join("\n")
            );
        };
        if let Some(addr) = line.strip_prefix("silt: Flight SQL on grpc://") {
            break format!("http://{}", addr.trim());
        }
        // TLS: the name test certificates are issued for.
        if let Some(addr) = line.strip_prefix("silt: Flight SQL on grpc+tls://") {
            let port = addr.trim().rsplit(':').next().unwrap_or_default();
            break format!("https://localhost:{port}");
        }
        log.lock().unwrap().push(line);
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    Server { child, url, log }
}

/// TPC-H SF 0.01 in row groups of `row_group_rows` rows, generated into a
/// fresh folder and served by a loopback S3 (the folder lives as long as
/// the returned guard).
pub async fn tpch_lake(row_group_rows: usize) -> (tempfile::TempDir, LocalS3) {
    let data = tempfile::tempdir().unwrap();
    let layout = tpch::ParquetLayout {
        row_group_rows,
        ..Default::default()
    };
    tpch::generate(&data.path().join("tpch"), 0.01, layout).unwrap();
    let s3 = LocalS3::start(data.path()).await.unwrap();
    (data, s3)
}

/// A fleet client of `urls` (failed members skipped for 500 ms), retrying
/// registration while the servers start. It keeps no compute-side cache:
/// these tests measure the servers (their tiers across restarts, their
/// failover), which a client answering row groups itself would hide.
pub async fn fleet_client(urls: &[String]) -> SessionContext {
    let started = Instant::now();
    loop {
        let fleet = silt_client::fleet::Fleet::connect(urls, None)
            .unwrap()
            .with_backoff(Duration::from_millis(500));
        let ctx = SessionContext::new();
        let options = silt_client::SiltTableOptions {
            local_cache_bytes: 0,
            ..Default::default()
        };
        match silt_client::register_fleet_tables_with_options(&ctx, Arc::new(fleet), &options).await {
            Ok(_) => return ctx,
            Err(e) if started.elapsed() > Duration::from_secs(30) => panic!("register the fleet's tables: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Plain DataFusion's answers to TPC-H's 22 queries over the files under
/// `tpch_dir`, in query order.
pub async fn tpch_answers(tpch_dir: &Path) -> Vec<Vec<datafusion::arrow::array::RecordBatch>> {
    let base = baseline(tpch_dir).await;
    let mut answers = Vec::new();
    for n in 1..=22 {
        answers.push(run_script_last_query(&base, &query(n)).await.unwrap());
    }
    answers
}

/// Runs TPC-H query `n` on `ctx` against `expected` (the 22 answers of
/// [`tpch_answers`]): what went wrong, if anything.
pub async fn tpch_problem(
    ctx: &SessionContext,
    n: usize,
    expected: &[Vec<datafusion::arrow::array::RecordBatch>],
) -> Option<String> {
    let sql = query(n as u32);
    match run_script_last_query(ctx, &sql).await {
        Err(e) => Some(format!("q{n:02}: failed: {e}")),
        Ok(got) => check_same(&format!("q{n:02}"), &got, &expected[n - 1], is_ordered(&sql)).err(),
    }
}

/// A client context with the server's tables. The server announces its
/// address once it is bound; on a loaded machine the first calls can still
/// fail, so registration is retried for a while before the test gives up.
pub async fn client(url: &str) -> SessionContext {
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

pub fn query(n: u32) -> String {
    std::fs::read_to_string(shared_dir().join(format!("bench/tpch/queries/q{n:02}.sql"))).unwrap()
}

/// Plain DataFusion on the generated TPC-H files under `tpch_dir`.
pub async fn baseline(tpch_dir: &Path) -> SessionContext {
    let base = SessionContext::new();
    for t in tpch::TABLES {
        let dir = tpch_dir.join(t);
        base.register_parquet(t, dir.to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
    }
    base
}

/// Runs the 22 TPC-H queries on `silt` and `base`; the differences and
/// failures, one line each.
pub async fn tpch_differences(silt: &SessionContext, base: &SessionContext) -> Vec<String> {
    let mut failures = Vec::new();
    for n in 1..=22 {
        let original = query(n);
        let probe = run_script_last_query(base, &original).await.unwrap();
        let sql = break_ties(&original, probe.first().map_or(0, |b| b.num_columns()));
        let expected = run_script_last_query(base, &sql).await.unwrap();
        match run_script_last_query(silt, &sql).await {
            Err(e) => failures.push(format!("q{n:02}: {e}")),
            Ok(got) => {
                if let Err(d) = check_same(&format!("q{n:02}"), &got, &expected, is_ordered(&sql)) {
                    failures.push(d);
                }
            }
        }
    }
    failures
}
