//! `silt-liquidcache run`: measures queries through LiquidCache the way
//! Silt's harness measures its own modes (`crates/silt/src/harness/runner.rs`):
//! per query a fresh server (empty cache) and client, one cold run, one
//! untimed warm-up, then `warm_runs` timed warm runs, each run bracketed by
//! readings of the server's `/proc` CPU, this process's CPU, and the
//! server's store and Flight counters.
//!
//! Reads a [`Job`] (JSON) on stdin, writes a [`Report`] (JSON) on stdout.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::DFParser;
use liquid_cache_client::LiquidCacheBuilder;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use url::Url;

use crate::procfs;
use crate::server::Stats;
use crate::store::{SlowStore, StoreCounters, Throttle, loopback_s3, s3_options};

/// What to run, from the harness.
#[derive(Debug, Clone, Deserialize)]
pub struct Job {
    /// The loopback S3 endpoint.
    pub s3_endpoint: String,
    pub latency_ms: u64,
    pub mbps: f64,
    /// LiquidCache's memory budget.
    pub max_cache_bytes: u64,
    /// Scratch folder: the servers' caches (removed after each query) and the answers.
    pub work_dir: PathBuf,
    /// Where each server listens [default: 127.0.0.1:0, any free port].
    #[serde(default = "default_listen")]
    pub listen: String,
    /// LiquidCache's disk I/O mode [default: LiquidCache's own, `uring`].
    #[serde(default = "default_io_mode")]
    pub io_mode: String,
    pub tables: Vec<TableJob>,
    /// Statements run after the tables are registered (`CREATE VIEW ...`).
    #[serde(default)]
    pub views: Vec<String>,
    pub queries: Vec<QueryJob>,
    pub warm_runs: usize,
}

fn default_listen() -> String {
    "127.0.0.1:0".into()
}

fn default_io_mode() -> String {
    "uring".into()
}

/// A table: Parquet at an `s3://bucket/...` URL (a file, or a folder ending in `/`).
#[derive(Debug, Clone, Deserialize)]
pub struct TableJob {
    pub name: String,
    pub url: String,
    #[serde(default)]
    pub binary_as_string: bool,
}

/// A query: a script whose last non-DDL statement's rows are the answer.
#[derive(Debug, Clone, Deserialize)]
pub struct QueryJob {
    pub id: String,
    pub sql: String,
}

/// The answer on stdout.
#[derive(Debug, Serialize)]
pub struct Report {
    pub liquid_cache_version: &'static str,
    pub datafusion_version: &'static str,
    pub results: Vec<QueryReport>,
}

/// One query's measurements: `cold` is the first run on an empty cache,
/// `warm` the timed warm runs.
#[derive(Debug, Serialize, Default)]
pub struct QueryReport {
    pub id: String,
    /// `ok` or `error`.
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub rows: u64,
    /// The cold run's rows as an Arrow IPC file.
    pub answer_ipc: Option<PathBuf>,
    pub cold: Option<RunCost>,
    pub warm: Vec<RunCost>,
    /// Server RSS after the warm runs.
    pub server_rss_bytes: u64,
    /// The server's counters after the warm runs.
    pub server_stats: Option<Stats>,
}

/// What one run cost.
#[derive(Debug, Serialize, Default, Clone, Copy)]
pub struct RunCost {
    pub ms: f64,
    pub server_cpu_s: f64,
    pub client_cpu_s: f64,
    /// GETs and bytes the server's store served.
    pub server_store_requests: u64,
    pub server_store_bytes: u64,
    /// GETs and bytes the client's own store served (planning: listing, footers).
    pub client_store_requests: u64,
    pub client_store_bytes: u64,
    /// Arrow IPC bytes the server sent to the client.
    pub bytes_to_client: u64,
}

/// Runs the job on stdin and prints the report.
pub async fn run() -> anyhow::Result<()> {
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).context("reading the job on stdin")?;
    let job: Job = serde_json::from_str(&text).context("the job on stdin is malformed")?;
    std::fs::create_dir_all(&job.work_dir).with_context(|| format!("creating {}", job.work_dir.display()))?;
    let job = Arc::new(job);
    let mut results = Vec::new();
    for q in job.queries.clone() {
        // Its own task: LiquidCache's client panics on a failed Flight stream.
        let handle = tokio::spawn(run_query(job.clone(), q.clone()));
        let report = handle.await.unwrap_or_else(|e| QueryReport {
            id: q.id.clone(),
            status: "error".into(),
            error: Some(format!("panicked: {}", panic_message(e))),
            ..Default::default()
        });
        eprintln!(
            "silt-liquidcache: {} {}{}",
            report.id,
            report.status,
            report.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default()
        );
        results.push(report);
    }
    let report = Report {
        liquid_cache_version: "0.1.10",
        datafusion_version: datafusion::DATAFUSION_VERSION,
        results,
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

fn panic_message(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a non-string panic".into()),
        Err(e) => e.to_string(),
    }
}

/// Measures one query; errors become an `error` report.
async fn run_query(job: Arc<Job>, q: QueryJob) -> QueryReport {
    let mut report = QueryReport {
        id: q.id.clone(),
        ..Default::default()
    };
    let scratch = job.work_dir.join(format!("server-{}", sanitize(&q.id)));
    match measure(&job, &q, &scratch, &mut report).await {
        Ok(()) => report.status = "ok".into(),
        Err(e) => {
            report.status = "error".into();
            report.error = Some(format!("{e:#}"));
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    report
}

fn sanitize(id: &str) -> String {
    id.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

async fn measure(job: &Job, q: &QueryJob, scratch: &Path, report: &mut QueryReport) -> anyhow::Result<()> {
    let _ = std::fs::remove_dir_all(scratch);
    let mut server = ServerChild::start(job, &scratch.join("cache")).await?;
    let client = Client::start(job, &server.addr).await?;

    let (cold, (schema, batches)) = measured_run(&mut server, &client, &q.sql).await?;
    report.rows = batches.iter().map(|b| b.num_rows() as u64).sum();
    let answer = job.work_dir.join("answers").join(format!("{}.arrow", sanitize(&q.id)));
    write_ipc(&answer, &schema, &batches)?;
    report.answer_ipc = Some(answer);
    report.cold = Some(cold);

    // Warm-up: admits what the cold run read past. LiquidCache has no
    // background transcoding to wait for (it transcodes when it squeezes).
    run_script(&client.ctx, &q.sql).await?;
    for _ in 0..job.warm_runs.max(1) {
        report.warm.push(measured_run(&mut server, &client, &q.sql).await?.0);
    }
    report.server_rss_bytes = procfs::usage(server.pid)?.rss_bytes;
    report.server_stats = Some(server.stats().await?);
    server.stop().await;
    Ok(())
}

/// Counters read before and after a run.
#[derive(Debug, Clone, Copy)]
struct Probe {
    server_cpu: f64,
    client_cpu: f64,
    server_store: (u64, u64),
    client_store: (u64, u64),
    to_client: u64,
}

async fn probe(server: &mut ServerChild, client: &Client) -> anyhow::Result<Probe> {
    let stats = server.stats().await?;
    Ok(Probe {
        server_cpu: procfs::usage(server.pid)?.cpu_seconds,
        client_cpu: procfs::own_usage()?.cpu_seconds,
        server_store: (stats.store_get_requests, stats.store_get_bytes),
        client_store: client.counters.read(),
        to_client: stats.flight_bytes_sent,
    })
}

/// One timed run: its cost and its rows.
async fn measured_run(
    server: &mut ServerChild,
    client: &Client,
    sql: &str,
) -> anyhow::Result<(RunCost, (SchemaRef, Vec<RecordBatch>))> {
    let before = probe(server, client).await?;
    let start = Instant::now();
    let answer = run_script(&client.ctx, sql).await?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let after = probe(server, client).await?;
    let cost = RunCost {
        ms,
        server_cpu_s: after.server_cpu - before.server_cpu,
        client_cpu_s: after.client_cpu - before.client_cpu,
        server_store_requests: after.server_store.0 - before.server_store.0,
        server_store_bytes: after.server_store.1 - before.server_store.1,
        client_store_requests: after.client_store.0 - before.client_store.0,
        client_store_bytes: after.client_store.1 - before.client_store.1,
        bytes_to_client: after.to_client - before.to_client,
    };
    Ok((cost, answer))
}

/// Runs each statement of `sql`; returns the rows of the last one that is not DDL.
async fn run_script(ctx: &SessionContext, sql: &str) -> anyhow::Result<(SchemaRef, Vec<RecordBatch>)> {
    let statements = DFParser::parse_sql(sql).context("parsing the query")?;
    let mut answer = None;
    for stmt in statements {
        let plan = ctx.state().statement_to_plan(stmt).await?;
        let ddl = matches!(
            plan,
            LogicalPlan::Ddl(_) | LogicalPlan::Dml(_) | LogicalPlan::Statement(_)
        );
        let df = ctx.execute_logical_plan(plan).await?;
        let schema: SchemaRef = df.schema().inner().clone();
        let batches = df.collect().await?;
        if !ddl {
            let schema = batches.first().map_or(schema, |b| b.schema());
            // An empty answer still carries its schema: one empty batch (as Silt's `run_script` does).
            let batches = if batches.is_empty() {
                vec![RecordBatch::new_empty(schema.clone())]
            } else {
                batches
            };
            answer = Some((schema, batches));
        }
    }
    answer.context("the query has no statement that returns rows")
}

/// Writes `batches` as an Arrow IPC file.
fn write_ipc(path: &Path, schema: &SchemaRef, batches: &[RecordBatch]) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut writer = arrow::ipc::writer::FileWriter::try_new(file, schema)?;
    for b in batches {
        writer.write(b)?;
    }
    writer.finish()?;
    Ok(())
}

/// The client: a DataFusion context with LiquidCache's pushdown rule and the tables registered.
struct Client {
    ctx: SessionContext,
    /// GETs of the client's own store (planning reads), throttled like the server's.
    counters: Arc<StoreCounters>,
}

impl Client {
    async fn start(job: &Job, server_addr: &str) -> anyhow::Result<Client> {
        let options: HashMap<String, String> = s3_options(&job.s3_endpoint).into_iter().collect();
        let buckets = buckets(&job.tables)?;
        let mut builder = LiquidCacheBuilder::new(format!("http://{server_addr}"));
        for bucket in &buckets {
            let url = ObjectStoreUrl::parse(format!("s3://{bucket}"))?;
            builder = builder.with_object_store(url, Some(options.clone()));
        }
        let ctx = builder
            .build(SessionConfig::from_env()?)
            .context("building LiquidCache's client context")?;
        // The builder registered plain S3 stores for planning; make them as slow as the server's, and counted.
        let counters = Arc::new(StoreCounters::default());
        for bucket in &buckets {
            let store = SlowStore::new(loopback_s3(&job.s3_endpoint, bucket)?, throttle(job), counters.clone());
            ctx.register_object_store(&Url::parse(&format!("s3://{bucket}"))?, Arc::new(store));
        }
        for t in &job.tables {
            let stmt = format!(
                "CREATE EXTERNAL TABLE \"{}\" STORED AS PARQUET LOCATION '{}' OPTIONS ('binary_as_string' '{}')",
                t.name, t.url, t.binary_as_string
            );
            run_ddl(&ctx, &stmt).await?;
        }
        for stmt in &job.views {
            run_ddl(&ctx, stmt).await?;
        }
        Ok(Client { ctx, counters })
    }
}

async fn run_ddl(ctx: &SessionContext, stmt: &str) -> anyhow::Result<()> {
    ctx.sql(stmt)
        .await
        .with_context(|| format!("running `{stmt}`"))?
        .collect()
        .await
        .with_context(|| format!("running `{stmt}`"))?;
    Ok(())
}

/// The buckets of the tables' `s3://` URLs, each once.
fn buckets(tables: &[TableJob]) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for t in tables {
        let url = Url::parse(&t.url).with_context(|| format!("table {}: bad URL {}", t.name, t.url))?;
        anyhow::ensure!(url.scheme() == "s3", "table {}: {} is not an s3:// URL", t.name, t.url);
        let bucket = url
            .host_str()
            .with_context(|| format!("table {}: no bucket in {}", t.name, t.url))?;
        if !out.iter().any(|b| b == bucket) {
            out.push(bucket.to_string());
        }
    }
    Ok(out)
}

fn throttle(job: &Job) -> Throttle {
    Throttle {
        latency: Duration::from_millis(job.latency_ms),
        bytes_per_second: (job.mbps * 1e6) as u64,
    }
}

/// A `silt-liquidcache server` child process (killed when dropped).
struct ServerChild {
    child: Child,
    pid: u32,
    addr: String,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl ServerChild {
    /// Starts a server with an empty cache in `cache_dir` and waits until it serves.
    async fn start(job: &Job, cache_dir: &Path) -> anyhow::Result<ServerChild> {
        let exe = std::env::current_exe().context("locating silt-liquidcache")?;
        let mut cmd = Command::new(exe);
        cmd.arg("server")
            .args(["--listen", &job.listen])
            .args(["--s3-endpoint", &job.s3_endpoint])
            .args(["--latency-ms", &job.latency_ms.to_string()])
            .args(["--mbps", &job.mbps.to_string()])
            .args(["--max-cache-bytes", &job.max_cache_bytes.to_string()])
            .args(["--io-mode", &job.io_mode])
            .arg("--cache-dir")
            .arg(cache_dir);
        for bucket in buckets(&job.tables)? {
            cmd.args(["--bucket", &bucket]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting the LiquidCache server")?;
        let pid = child.id().context("the LiquidCache server has no pid")?;
        let stdin = child.stdin.take().context("no stdin pipe")?;
        let mut stdout = BufReader::new(child.stdout.take().context("no stdout pipe")?).lines();
        let first = tokio::time::timeout(Duration::from_secs(60), stdout.next_line())
            .await
            .context("the LiquidCache server did not start within 60 s")??;
        let addr = first
            .as_deref()
            .and_then(|l| l.strip_prefix("ready "))
            .with_context(|| format!("the LiquidCache server failed to start (it said {first:?})"))?
            .to_string();
        Ok(ServerChild {
            child,
            pid,
            addr,
            stdin,
            stdout,
        })
    }

    /// The server's counters now.
    async fn stats(&mut self) -> anyhow::Result<Stats> {
        self.stdin
            .write_all(b"stats\n")
            .await
            .context("asking the server for stats")?;
        self.stdin.flush().await?;
        let line = self
            .stdout
            .next_line()
            .await?
            .context("the LiquidCache server exited")?;
        serde_json::from_str(&line).with_context(|| format!("the server's stats are malformed: {line}"))
    }

    /// Closes its stdin (it exits) and waits briefly, then kills it.
    async fn stop(mut self) {
        drop(self.stdin);
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}
