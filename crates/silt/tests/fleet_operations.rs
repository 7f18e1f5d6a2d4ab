//! A fleet operated as in production, with real `silt serve` processes.
//!
//! Draining with SIGTERM: a running query
//! finishes with the right answer while new ones are refused (UNAVAILABLE,
//! `/health` 503 "draining"), the process exits on its own, and the server
//! restarted on the same cache directory answers warm from its disk tier.
//! Then a rolling restart (SIGTERM, wait, start) of each of three fleet
//! members under a four-client workload fails no query, and the fleet's
//! byte hit ratio after the restarts is back within 10 points of before
//! within one pass of the queries.
//!
//! Membership from a file: a member added to a running client's file gets
//! work within 10 seconds and takes ~1/3 of the row groups, only from the
//! others; a member removed from it gets no more work.
//!
//! Distributed queries: 200 TPC-H queries, each a `silt query --distributed`
//! process, over two `silt worker` processes, one killed mid-query and
//! restarted: none fails or differs from DataFusion's answer.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use datafusion::arrow::array::RecordBatch;
use datafusion::prelude::SessionContext;
use silt_bench::compare::{check_same, is_ordered};
use silt_bench::files::write_members;
use silt_bench::local_s3::LocalS3;
use silt_bench::tpch;
use silt_client::fleet::Fleet;
use silt_client::script::run_script_last_query;

use common::{
    Server, baseline, client, fleet_client, query, serve_command_on, start, tpch_answers, tpch_lake, tpch_problem,
};

fn free_addr() -> String {
    silt_bench::ports::free_addr().to_string()
}

/// `GET path` on the admin listener at `addr`: (status, body).
fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
    (status, body)
}

/// The sum of every sample of `name` (all label sets) in `/metrics` of `admin`.
fn metric(admin: &str, name: &str) -> f64 {
    let (status, body) = http_get(admin, "/metrics");
    assert_eq!(status, 200, "/metrics of {admin}: {body}");
    body.lines()
        .filter(|l| l.split([' ', '{']).next() == Some(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Sends SIGTERM to `server` and waits (up to `limit`) for it to exit; its exit status.
fn terminate(server: &mut Server, limit: Duration) -> std::process::ExitStatus {
    let pid = server.child.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(sent.success(), "kill -TERM {pid}");
    let started = Instant::now();
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            return status;
        }
        assert!(
            started.elapsed() < limit,
            "silt serve did not exit within {limit:?} of SIGTERM:\n{}",
            server.log.lock().unwrap().join("\n")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls until `check` holds, for at most `limit`.
async fn eventually(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_running_query_refuses_new_ones_and_the_restart_is_warm() {
    let data = tempfile::tempdir().unwrap();
    tpch::generate(&data.path().join("tpch"), 0.01, tpch::ParquetLayout::default()).unwrap();
    let s3 = LocalS3::start(data.path()).await.unwrap();
    let cache = tempfile::tempdir().unwrap();
    let (listen, admin) = (free_addr(), free_addr());
    // 300 ms per store request: the cold query runs for seconds, long
    // enough to be in flight when the signal comes.
    let args = ["--admin", &admin, "--store-latency-ms", "300", "--drain-timeout", "60s"];
    let mut server = start(serve_command_on(&listen, &s3, cache.path(), &args));
    let base = baseline(&data.path().join("tpch")).await;
    let sql = query(1);
    let expected = run_script_last_query(&base, &sql).await.unwrap();

    let running = {
        let ctx = client(&server.url).await;
        let sql = sql.clone();
        tokio::spawn(async move { run_script_last_query(&ctx, &sql).await })
    };
    let health = |admin: &str| http_get(admin, "/health");
    let running_now = |admin: &str| {
        let body: serde_json::Value = serde_json::from_str(&health(admin).1).unwrap_or_default();
        body["running"].as_u64().unwrap_or(0)
    };
    eventually("the query reaches the server", Duration::from_secs(60), || {
        running_now(&admin) >= 1
    })
    .await;

    let pid = server.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    eventually("/health says draining", Duration::from_secs(10), || {
        health(&admin).0 == 503
    })
    .await;
    let (_, body) = health(&admin);
    assert!(body.contains("\"status\":\"draining\""), "{body}");
    // A new query is refused with the code clients fail over on.
    let late = SessionContext::new();
    let registered = silt_client::register_tables(&late, &server.url).await;
    let refused = match registered {
        Err(e) => e.to_string(),
        Ok(_) => run_script_last_query(&late, &query(6))
            .await
            .expect_err("a query sent while draining is refused")
            .to_string(),
    };
    assert!(refused.contains("draining"), "refused with: {refused}");

    let got = running.await.unwrap().expect("the running query finishes");
    check_same("q01 during the drain", &got, &expected, is_ordered(&sql)).unwrap();
    let started = Instant::now();
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no exit after the drain");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.log_lines_with("silt: drained; stopped").len(), 1);
    assert!(server.log_lines_with("panicked").is_empty());

    // The same cache directory: the pages come back from the disk tier.
    let restarted = start(serve_command_on(&listen, &s3, cache.path(), &args));
    let ctx = client(&restarted.url).await;
    let again = run_script_last_query(&ctx, &sql).await.unwrap();
    check_same("q01 after the restart", &again, &expected, true).unwrap();
    let lineitem: u64 = std::fs::read_dir(data.path().join("tpch/lineitem"))
        .unwrap()
        .map(|f| f.unwrap().metadata().unwrap().len())
        .sum();
    let fetched = metric(&admin, "silt_object_store_get_bytes_total");
    eprintln!("after the restart: {fetched} bytes fetched of a {lineitem}-byte table");
    assert!(
        fetched < lineitem as f64 * 0.05,
        "the restarted server fetched {fetched} bytes of a {lineitem}-byte table: not warm"
    );
    assert!(metric(&admin, "silt_cache_recovered_pages_total") > 0.0);
    restarted.stop();
}

/// Queries each of the four clients runs during the rolling restart.
const PER_CLIENT: usize = 45;

/// Runs the 22 queries once on `ctx`, checking each; the problems.
async fn one_pass(ctx: &SessionContext, expected: &[Vec<datafusion::arrow::array::RecordBatch>]) -> Vec<String> {
    let mut problems = Vec::new();
    for n in 1..=22 {
        problems.extend(tpch_problem(ctx, n, expected).await);
    }
    problems
}

/// Object-store GET bytes of every member so far.
fn fetched(admins: &[String]) -> f64 {
    admins
        .iter()
        .map(|a| metric(a, "silt_object_store_get_bytes_total"))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_a_three_member_fleet_under_load_fails_no_query() {
    // Row groups of 8,192 rows, so every table's row groups spread over the fleet.
    let (data, s3) = tpch_lake(8192).await;
    let caches: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let listens: Vec<String> = (0..3).map(|_| free_addr()).collect();
    let admins: Vec<String> = (0..3).map(|_| free_addr()).collect();
    let command = |i: usize| {
        let args = ["--admin", &admins[i], "--drain-timeout", "60s"];
        serve_command_on(&listens[i], &s3, caches[i].path(), &args)
    };
    let mut servers: Vec<Server> = (0..3).map(|i| start(command(i))).collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    let expected = Arc::new(tpch_answers(&data.path().join("tpch")).await);

    // The byte hit ratio of a pass: 1 - its GET bytes / the cold pass's.
    let probe = fleet_client(&urls).await;
    let before_cold = fetched(&admins);
    assert_eq!(one_pass(&probe, &expected).await, Vec::<String>::new());
    let cold = fetched(&admins) - before_cold;
    let before_warm = fetched(&admins);
    assert_eq!(one_pass(&probe, &expected).await, Vec::<String>::new());
    let warm_ratio = 1.0 - (fetched(&admins) - before_warm) / cold;

    let done = Arc::new(AtomicUsize::new(0));
    let restarting = Arc::new(AtomicBool::new(true));
    let mut clients = Vec::new();
    for c in 0..4 {
        let ctx = fleet_client(&urls).await;
        let (expected, done, restarting) = (expected.clone(), done.clone(), restarting.clone());
        clients.push(tokio::spawn(async move {
            let mut problems = Vec::new();
            let mut i = 0;
            // At least PER_CLIENT queries, and on until every member is back.
            while i < PER_CLIENT || restarting.load(Ordering::Relaxed) {
                let n = (i * 4 + c) % 22 + 1;
                if let Some(p) = tpch_problem(&ctx, n, &expected).await {
                    problems.push(format!("client {c}: {p}"));
                }
                i += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
            (i, problems)
        }));
    }

    for i in 0..3 {
        let at = done.load(Ordering::Relaxed);
        eventually("the workload runs", Duration::from_secs(600), || {
            done.load(Ordering::Relaxed) >= at + 8
        })
        .await;
        let status = terminate(&mut servers[i], Duration::from_secs(90));
        assert!(status.success(), "member {i} exited with {status}");
        assert_eq!(servers[i].log_lines_with("panicked").len(), 0);
        let restarted = start(command(i));
        assert_eq!(restarted.url, urls[i], "back on its port");
        servers[i] = restarted;
    }
    // The workload goes on until the last member restarted has served
    // some of it again (the clients skip it for their back-off first).
    let at = done.load(Ordering::Relaxed);
    eventually(
        "the workload runs on the restarted fleet",
        Duration::from_secs(600),
        || done.load(Ordering::Relaxed) >= at + 8 && metric(&admins[2], "silt_queries_total") > 0.0,
    )
    .await;
    restarting.store(false, Ordering::Relaxed);
    let mut problems = Vec::new();
    let mut ran = 0;
    for c in clients {
        let (n, p) = c.await.unwrap();
        ran += n;
        problems.extend(p);
    }
    assert!(
        problems.is_empty(),
        "{} of {ran} queries went wrong during the rolling restart:\n{}",
        problems.len(),
        problems.join("\n")
    );

    // One pass after the restarts: its byte hit ratio is back within 10
    // points of a warm pass's.
    let before_pass = fetched(&admins);
    assert_eq!(one_pass(&probe, &expected).await, Vec::<String>::new());
    let after_ratio = 1.0 - (fetched(&admins) - before_pass) / cold;
    // The workload between the restarts and that pass would have refetched
    // a member's row groups had its disk tier come back empty: the last
    // member restarted (no failover landed on it since; its counters start
    // at its restart) served again and fetched next to nothing, against a
    // third of the cold pass had it come back cold.
    let last = metric(&admins[2], "silt_object_store_get_bytes_total");
    eprintln!("the last member restarted fetched {last} bytes since (cold pass: {cold} bytes over three)");
    assert!(
        last <= cold * 0.10,
        "the last member restarted fetched {last} bytes: its disk tier came back cold"
    );
    eprintln!("byte hit ratio: {warm_ratio:.3} warm before, {after_ratio:.3} after the restarts; {ran} queries");
    assert!(
        after_ratio >= warm_ratio - 0.10,
        "byte hit ratio {after_ratio:.3} after the restarts, {warm_ratio:.3} before (cold pass: {cold} bytes)"
    );
    for s in servers {
        assert_eq!(s.log_lines_with("panicked").len(), 0);
        s.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_membership_file_adds_and_removes_members_of_a_running_client() {
    // Small row groups: ~90 of them, enough to see the 1/N a joining member takes.
    let (data, s3) = tpch_lake(1024).await;
    let caches: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let admins: Vec<String> = (0..3).map(|_| free_addr()).collect();
    let servers: Vec<Server> = (0..3)
        .map(|i| {
            start(serve_command_on(
                &free_addr(),
                &s3,
                caches[i].path(),
                &["--admin", &admins[i]],
            ))
        })
        .collect();
    let urls: Vec<&str> = servers.iter().map(|s| s.url.as_str()).collect();
    let base = baseline(&data.path().join("tpch")).await;
    let queries = [1u32, 3, 6, 10, 14];
    let mut expected = Vec::new();
    for n in queries {
        expected.push(run_script_last_query(&base, &query(n)).await.unwrap());
    }
    let check = |i: usize, got: &[datafusion::arrow::array::RecordBatch]| {
        let n = queries[i];
        check_same(&format!("q{n:02}"), got, &expected[i], is_ordered(&query(n))).unwrap();
    };

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("members");
    write_members(&file, &urls[..2]);
    let fleet = Arc::new(
        Fleet::connect(&[format!("file://{}", file.display())], None)
            .unwrap()
            .with_backoff(Duration::from_millis(500)),
    );
    assert!(fleet.is_dynamic());
    let ctx = SessionContext::new();
    // No compute-side cache: the members' work is what this counts.
    let options = silt_client::SiltTableOptions {
        local_cache_bytes: 0,
        ..Default::default()
    };
    silt_client::register_fleet_tables_with_options(&ctx, fleet.clone(), &options)
        .await
        .unwrap();
    for (i, n) in queries.iter().enumerate() {
        check(i, &run_script_last_query(&ctx, &query(*n)).await.unwrap());
    }
    let before = fleet.owned_row_groups().await.unwrap();
    assert_eq!(before.len(), 2);
    let total: usize = before.iter().sum();

    // A member joins: the running client uses it within 10 seconds.
    let joined = metric(&admins[2], "silt_queries_total");
    write_members(&file, &urls);
    let changed = Instant::now();
    let mut round = 0;
    while metric(&admins[2], "silt_queries_total") == joined {
        assert!(
            changed.elapsed() < Duration::from_secs(10),
            "the new member got no work within 10 s"
        );
        let i = round % queries.len();
        check(i, &run_script_last_query(&ctx, &query(queries[i])).await.unwrap());
        round += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "a joining member got work {:?} after the file changed",
        changed.elapsed()
    );
    let after = fleet.owned_row_groups().await.unwrap();
    assert_eq!(after.len(), 3);
    assert_eq!(after.iter().sum::<usize>(), total);
    // Only the newcomer's share moved, and from the others only.
    assert!(
        after[0] <= before[0] && after[1] <= before[1],
        "{before:?} -> {after:?}"
    );
    let share = after[2] as f64 / total as f64;
    eprintln!("row groups {before:?} -> {after:?}: {share:.2} moved");
    assert!(
        (share - 1.0 / 3.0).abs() < 0.15,
        "the newcomer took {share:.2} of {total} row groups"
    );
    for (i, n) in queries.iter().enumerate() {
        check(i, &run_script_last_query(&ctx, &query(*n)).await.unwrap());
    }

    // A member leaves: once the client has read the file, it sends it nothing.
    write_members(&file, &[urls[0], urls[2]]);
    let changed = Instant::now();
    while fleet.clients().iter().any(|c| c.url() == urls[1]) {
        assert!(
            changed.elapsed() < Duration::from_secs(10),
            "the member was not dropped within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let left = metric(&admins[1], "silt_queries_total");
    for (i, n) in queries.iter().enumerate() {
        check(i, &run_script_last_query(&ctx, &query(*n)).await.unwrap());
    }
    assert_eq!(
        metric(&admins[1], "silt_queries_total"),
        left,
        "a removed member got work"
    );
    for s in servers {
        s.stop();
    }
}

/// A running `silt worker` process.
struct WorkerProcess {
    child: std::process::Child,
    log: Arc<std::sync::Mutex<Vec<String>>>,
}

impl WorkerProcess {
    /// `silt worker --listen listen --servers servers`, once it listens.
    fn start(listen: &str, servers: &[String]) -> WorkerProcess {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_silt"))
            .args(["worker", "--listen", listen, "--servers", &servers.join(",")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn silt worker");
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        loop {
            let Some(line) = lines.next().map(|l| l.unwrap_or_default()) else {
                panic!(
                    "silt worker exited before listening:\n{}",
                    log.lock().unwrap().join("\n")
                );
            };
            let ready = line.starts_with("silt worker listening on ");
            log.lock().unwrap().push(line);
            if ready {
                break;
            }
        }
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        WorkerProcess { child, log }
    }

    /// Kills the worker and waits for it ([`Drop`]).
    fn kill(self) {}
}

/// A test that fails leaves no worker behind.
impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Distributed queries run while a worker dies and returns.
const DISTRIBUTED_QUERIES: usize = 200;

/// `silt query --distributed` of `sql` over `urls` and `workers`, printing `format`.
fn silt_query_distributed(urls: &[String], workers: &[String], format: &str, sql: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_silt"));
    cmd.args(["query", "--server", &urls.join(","), "--distributed"]).args([
        "--workers",
        &workers.join(","),
        "--format",
        format,
        "--",
        sql,
    ]);
    cmd
}

/// One `silt query --distributed` process's answer: its rows (JSON lines,
/// read back into `expected`'s schema) and whether it ran a statement again.
fn distributed_query(
    urls: &[String],
    workers: &[String],
    sql: &str,
    expected: &[RecordBatch],
) -> Result<(Vec<RecordBatch>, bool), String> {
    let out = silt_query_distributed(urls, workers, "json", sql)
        .output()
        .map_err(|e| format!("spawning silt query: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("exit {}: {}", out.status, stderr.trim()));
    }
    let schema = expected.first().ok_or("no expected answer")?.schema();
    let mut rows = datafusion::arrow::json::ReaderBuilder::new(schema.clone())
        .build(std::io::Cursor::new(out.stdout))
        .and_then(|reader| reader.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("reading its JSON lines: {e}"))?;
    if rows.is_empty() {
        rows.push(RecordBatch::new_empty(schema)); // no rows: no line printed
    }
    Ok((rows, stderr.contains("repeated after a worker failed")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distributed_queries_survive_a_worker_killed_and_restarted() {
    let (data, s3) = tpch_lake(8192).await;
    let caches: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let servers: Vec<Server> = caches
        .iter()
        .map(|c| start(serve_command_on(&free_addr(), &s3, c.path(), &[])))
        .collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    let listens: Vec<String> = (0..2).map(|_| free_addr()).collect();
    let mut workers: Vec<Option<WorkerProcess>> =
        listens.iter().map(|l| Some(WorkerProcess::start(l, &urls))).collect();
    let worker_urls: Vec<String> = listens.iter().map(|l| format!("http://{l}")).collect();
    let expected = Arc::new(tpch_answers(&data.path().join("tpch")).await);

    // Two coordinators at a time, each query its own `silt query` process.
    let mut problems = Vec::new();
    let mut retried = 0;
    let mut took = Vec::new();
    for pair in (0..DISTRIBUTED_QUERIES).step_by(2) {
        if pair == 50 {
            // Killed while these queries run: half the median query's time in.
            took.sort();
            let victim = workers[1].take().unwrap();
            let after = took[took.len() / 2] / 2;
            std::thread::spawn(move || {
                std::thread::sleep(after);
                victim.kill();
            });
        }
        if pair == 120 {
            workers[1] = Some(WorkerProcess::start(&listens[1], &urls));
        }
        let runs: Vec<_> = (pair..pair + 2)
            .map(|i| {
                let (urls, workers, expected) = (urls.clone(), worker_urls.clone(), expected.clone());
                std::thread::spawn(move || {
                    let n = i % 22 + 1;
                    let sql = query(n as u32);
                    let began = Instant::now();
                    let answer = distributed_query(&urls, &workers, &sql, &expected[n - 1]);
                    let outcome = answer.and_then(|(got, again)| {
                        check_same(&format!("q{n:02}"), &got, &expected[n - 1], is_ordered(&sql)).map(|()| again)
                    });
                    (
                        i,
                        n,
                        outcome.map_err(|e| format!("query {i} (q{n:02}): {e}")),
                        began.elapsed(),
                    )
                })
            })
            .collect();
        for run in runs {
            let (_, _, outcome, elapsed) = run.join().unwrap();
            took.push(elapsed);
            match outcome {
                Ok(again) => retried += usize::from(again),
                Err(e) => problems.push(e),
            }
        }
    }
    took.sort();
    eprintln!(
        "{DISTRIBUTED_QUERIES} distributed queries (silt query processes, two at a time), a worker killed at 50 and \
         back at 120: {} failed or wrong, {retried} ran a statement again; median {:?} per process",
        problems.len(),
        took[took.len() / 2]
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The restarted worker gets tasks again: EXPLAIN ANALYZE through both
    // workers runs, reporting its retries.
    let analyze = silt_query_distributed(&urls, &worker_urls, "csv", &format!("EXPLAIN ANALYZE {}", query(1)))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&analyze.stdout);
    assert!(analyze.status.success(), "{}", String::from_utf8_lossy(&analyze.stderr));
    assert!(text.contains("Worker retries,0"), "{text}");
    // The restarted worker runs tasks: with the other one gone, a query
    // planned on the workers that answer runs on it alone, and is right.
    workers[0].take().unwrap().kill();
    let n = 3;
    let (got, again) = distributed_query(&urls, &worker_urls, &query(n), &expected[n as usize - 1]).unwrap();
    check_same(
        "q03 on the restarted worker",
        &got,
        &expected[n as usize - 1],
        is_ordered(&query(n)),
    )
    .unwrap();
    assert!(!again, "planned on the live worker only, nothing to retry");
    for w in workers.into_iter().flatten() {
        assert!(w.log.lock().unwrap().iter().all(|l| !l.contains("panicked")));
        w.kill();
    }
    for s in servers {
        s.stop();
    }
}
