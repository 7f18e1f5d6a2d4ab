//! The `liquidcache` mode: the published LiquidCache (crates.io
//! `liquid-cache-server` / `liquid-cache-client` 0.1.10) on the same files,
//! over the same throttled loopback S3 store, with the same queries.
//!
//! LiquidCache is built on an older DataFusion than ours, so it runs from a
//! separate Cargo project, `bench/liquidcache` (its own workspace and lock
//! file), built only when this mode is asked for. Its `run` command does
//! what [`super::runner`] does for our modes — a fresh server per query, a
//! cold run, one untimed warm-up, the timed warm runs, CPU from `/proc`,
//! store and Flight bytes from the server's counters — and writes each cold
//! answer as an Arrow IPC file, which is compared here with our reference.
//!
//! `SILT_LIQUIDCACHE_BIN` names a built `silt-liquidcache` (no build);
//! otherwise it is built with `cargo build --release` into
//! `SILT_LIQUIDCACHE_TARGET_DIR` (default `~/.cache/silt-lc-target`).
//! `SILT_LIQUIDCACHE_IO_MODE` picks LiquidCache's disk I/O (default its own,
//! `uring`); `SILT_LIQUIDCACHE_MAX_CACHE_BYTES` (e.g. `512MiB`) overrides its
//! memory budget, which is otherwise `--memory-budget`. LiquidCache 0.1.10
//! admits batches as Arrow and transcodes them to its liquid form only when
//! the budget is exceeded, so a budget above the data's Arrow size measures
//! it holding Arrow.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;
use datafusion::arrow::array::RecordBatch;
use serde::Deserialize;
use serde_json::json;
use silt_bench::compare::{check_same, is_ordered};
use silt_bench::results::{
    CpuPhases, MemoryUse, PhasesU64, QueryResult, QuerySpec, Spread, StoreTraffic, mean, median,
};

use super::modes::StoreSetup;
use super::suite::Suite;

const MODE: &str = "liquidcache";

/// Runs every query through LiquidCache; one result per query, all `skipped`
/// (with the reason) when the runner cannot be built or started.
pub fn run(
    suite: &Suite,
    setup: &StoreSetup,
    work: &Path,
    references: &[(QuerySpec, Vec<RecordBatch>)],
    warm_runs: usize,
) -> Vec<QueryResult> {
    match run_inner(suite, setup, work, references, warm_runs) {
        Ok(results) => results,
        Err(e) => references
            .iter()
            .map(|(q, _)| QueryResult {
                mode: MODE.into(),
                query: q.id.clone(),
                status: "skipped".into(),
                error: Some(super::runner::concise(&e)),
                ..Default::default()
            })
            .collect(),
    }
}

fn run_inner(
    suite: &Suite,
    setup: &StoreSetup,
    work: &Path,
    references: &[(QuerySpec, Vec<RecordBatch>)],
    warm_runs: usize,
) -> anyhow::Result<Vec<QueryResult>> {
    let bin = runner_binary()?;
    let job = job(suite, setup, &work.join("liquidcache"), references, warm_runs)?;
    let report = run_runner(&bin, &job)?;
    Ok(references
        .iter()
        .map(|(q, expected)| {
            let r = report.results.iter().find(|r| r.id == q.id);
            to_result(q, r, expected)
        })
        .collect())
}

/// The `bench/liquidcache` project of this repository.
fn project_manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/liquidcache/Cargo.toml")
}

/// `$SILT_LIQUIDCACHE_BIN`, or the runner built (incrementally) from `bench/liquidcache`.
fn runner_binary() -> anyhow::Result<PathBuf> {
    if let Some(bin) = std::env::var_os("SILT_LIQUIDCACHE_BIN") {
        let bin = PathBuf::from(bin);
        anyhow::ensure!(bin.is_file(), "SILT_LIQUIDCACHE_BIN={} is not a file", bin.display());
        return Ok(bin);
    }
    let target = match std::env::var_os("SILT_LIQUIDCACHE_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?).join(".cache/silt-lc-target"),
    };
    let manifest = project_manifest();
    println!(
        "Building LiquidCache's runner ({}; the first build compiles its DataFusion, 20+ minutes) ...",
        manifest.display()
    );
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "--manifest-path"])
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", &target)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("running cargo to build bench/liquidcache")?;
    anyhow::ensure!(
        out.status.success(),
        "building bench/liquidcache failed ({}): {}",
        out.status,
        last_lines(&String::from_utf8_lossy(&out.stderr), 15)
    );
    Ok(target.join("release/silt-liquidcache"))
}

/// The job the runner reads on stdin (see `bench/liquidcache/src/run.rs`).
fn job(
    suite: &Suite,
    setup: &StoreSetup,
    work_dir: &Path,
    references: &[(QuerySpec, Vec<RecordBatch>)],
    warm_runs: usize,
) -> anyhow::Result<serde_json::Value> {
    let endpoint = setup
        .s3
        .endpoint
        .clone()
        .context("the loopback object store has no endpoint")?;
    let tables: Vec<_> = suite
        .tables
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "url": format!("s3://{}/{}", t.bucket, t.prefix),
                "binary_as_string": t.binary_as_string,
            })
        })
        .collect();
    let views: Vec<String> = suite
        .views
        .iter()
        .map(|(name, select)| format!("CREATE VIEW \"{name}\" AS {select}"))
        .collect();
    let mut job = json!({
        "s3_endpoint": endpoint,
        "latency_ms": setup.latency_ms,
        "mbps": setup.mbps,
        "max_cache_bytes": setup.memory_budget,
        "work_dir": work_dir,
        "tables": tables,
        "views": views,
        "queries": references.iter().map(|(q, _)| json!({"id": q.id, "sql": q.sql})).collect::<Vec<_>>(),
        "warm_runs": warm_runs,
    });
    if let Ok(mode) = std::env::var("SILT_LIQUIDCACHE_IO_MODE") {
        job["io_mode"] = mode.into();
    }
    if let Ok(bytes) = std::env::var("SILT_LIQUIDCACHE_MAX_CACHE_BYTES") {
        let bytes = silt_server::config::parse_bytes(&bytes)
            .map_err(|e| anyhow::anyhow!("SILT_LIQUIDCACHE_MAX_CACHE_BYTES: {e}"))?;
        job["max_cache_bytes"] = bytes.into();
    }
    Ok(job)
}

/// Runs `bin run` on `job`. Its stderr is echoed under `SILT_BENCH_VERBOSE`
/// and its tail quoted if it fails.
fn run_runner(bin: &Path, job: &serde_json::Value) -> anyhow::Result<Report> {
    let mut child = Command::new(bin)
        .arg("run")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let stderr = child.stderr.take().context("no stderr pipe")?;
    let verbose = std::env::var_os("SILT_BENCH_VERBOSE").is_some();
    let tail = std::thread::spawn(move || {
        let mut tail = VecDeque::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if verbose {
                eprintln!("    | {line}");
            }
            if tail.len() == 20 {
                tail.pop_front();
            }
            tail.push_back(line);
        }
        Vec::from(tail).join("\n")
    });
    child
        .stdin
        .take()
        .context("no stdin pipe")?
        .write_all(job.to_string().as_bytes())
        .context("sending the job to the LiquidCache runner")?;
    let out = child.wait_with_output().context("waiting for the LiquidCache runner")?;
    let tail = tail.join().unwrap_or_default();
    anyhow::ensure!(
        out.status.success(),
        "the LiquidCache runner failed ({}): {}",
        out.status,
        tail.trim()
    );
    serde_json::from_slice(&out.stdout).context("the LiquidCache runner printed malformed JSON")
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim().lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The runner's answer (the fields used here).
#[derive(Debug, Deserialize)]
struct Report {
    results: Vec<RunnerResult>,
}

#[derive(Debug, Deserialize)]
struct RunnerResult {
    id: String,
    status: String,
    error: Option<String>,
    rows: u64,
    answer_ipc: Option<PathBuf>,
    cold: Option<RunCost>,
    warm: Vec<RunCost>,
    server_rss_bytes: u64,
    server_stats: Option<ServerStats>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
struct RunCost {
    ms: f64,
    server_cpu_s: f64,
    client_cpu_s: f64,
    server_store_requests: u64,
    server_store_bytes: u64,
    client_store_requests: u64,
    client_store_bytes: u64,
    bytes_to_client: u64,
}

impl RunCost {
    /// GETs of the run: the server's and the client's own (LiquidCache's client plans over the store).
    fn store_requests(&self) -> u64 {
        self.server_store_requests + self.client_store_requests
    }

    fn store_bytes(&self) -> u64 {
        self.server_store_bytes + self.client_store_bytes
    }
}

#[derive(Debug, Deserialize)]
struct ServerStats {
    cache_memory_bytes: u64,
    cache_disk_bytes: u64,
    byte_cache_bytes: u64,
}

/// The harness's result for `q` from the runner's `r`.
fn to_result(q: &QuerySpec, r: Option<&RunnerResult>, expected: &[RecordBatch]) -> QueryResult {
    let mut result = QueryResult {
        mode: MODE.into(),
        query: q.id.clone(),
        ..Default::default()
    };
    let Some(r) = r else {
        result.status = "error".into();
        result.error = Some("the LiquidCache runner returned nothing for this query".into());
        return result;
    };
    let Some(cold) = r.cold.filter(|_| r.status == "ok" && !r.warm.is_empty()) else {
        result.status = "error".into();
        result.error = Some(r.error.clone().unwrap_or_else(|| "no measurements".into()));
        return result;
    };
    result.status = "ok".into();
    result.rows = Some(r.rows);
    result.matches_reference = Some(matches_reference(q, r.answer_ipc.as_deref(), expected));
    result.cold_ms = Some(cold.ms);
    result.warm_ms = Spread::of(r.warm.iter().map(|w| w.ms).collect());
    let avg = |f: fn(&RunCost) -> f64| mean(&r.warm.iter().map(f).collect::<Vec<_>>()).unwrap_or(0.0);
    let med =
        |f: fn(&RunCost) -> u64| median(&r.warm.iter().map(|w| f(w) as f64).collect::<Vec<_>>()).unwrap_or(0.0) as u64;
    result.server_cpu_s = Some(CpuPhases {
        cold: cold.server_cpu_s,
        warm_mean: avg(|w| w.server_cpu_s),
    });
    result.client_cpu_s = Some(CpuPhases {
        cold: cold.client_cpu_s,
        warm_mean: avg(|w| w.client_cpu_s),
    });
    result.bytes_to_client = Some(PhasesU64 {
        cold: cold.bytes_to_client,
        warm_median: med(|w| w.bytes_to_client),
    });
    result.object_store = Some(StoreTraffic {
        cold_requests: cold.store_requests(),
        cold_bytes: cold.store_bytes(),
        warm_requests: med(RunCost::store_requests),
        warm_bytes: med(RunCost::store_bytes),
    });
    result.memory = Some(MemoryUse {
        memory_tier_bytes: r.server_stats.as_ref().map_or(0, |s| s.cache_memory_bytes),
        disk_tier_bytes: r
            .server_stats
            .as_ref()
            .map_or(0, |s| s.cache_disk_bytes + s.byte_cache_bytes),
        rss_bytes: r.server_rss_bytes,
        ..Default::default()
    });
    result
}

/// Whether the runner's cold answer (an Arrow IPC file) equals the reference rows.
fn matches_reference(q: &QuerySpec, ipc: Option<&Path>, expected: &[RecordBatch]) -> bool {
    let batches = match ipc.context("no answer file").and_then(read_ipc) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(mode = MODE, query = %q.id, "cannot read the answer: {e:#}");
            return false;
        }
    };
    let batches = match align(batches, expected) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(mode = MODE, query = %q.id, "cannot align the answer's types: {e:#}");
            return false;
        }
    };
    check_same(&q.id, &batches, expected, is_ordered(&q.sql))
        .map_err(|diff| tracing::warn!(mode = MODE, "{diff}"))
        .is_ok()
}

/// LiquidCache's DataFusion returns strings as `Utf8` where ours returns
/// `Utf8View` (its client turns view types off), and may name unaliased
/// expressions differently. Gives `batches` the reference's column names and
/// casts string (and binary) columns to the reference's type, values
/// unchanged, so [`check_same`] compares values; any other difference of
/// type or column count is left for it to report.
fn align(batches: Vec<RecordBatch>, expected: &[RecordBatch]) -> anyhow::Result<Vec<RecordBatch>> {
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    let Some(target) = expected.first().map(|b| b.schema()) else {
        return Ok(batches);
    };
    let family = |t: &DataType| match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => 1,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => 2,
        _ => 0,
    };
    batches
        .into_iter()
        .map(|b| -> anyhow::Result<RecordBatch> {
            if b.num_columns() != target.fields().len() {
                return Ok(b);
            }
            let mut fields = Vec::with_capacity(b.num_columns());
            let mut columns = Vec::with_capacity(b.num_columns());
            for (column, want) in b.columns().iter().zip(target.fields()) {
                let (have, to) = (column.data_type(), want.data_type());
                let column = if have != to && family(have) != 0 && family(have) == family(to) {
                    datafusion::arrow::compute::cast(column, to)?
                } else {
                    column.clone()
                };
                fields.push(Field::new(want.name(), column.data_type().clone(), true));
                columns.push(column);
            }
            Ok(RecordBatch::try_new(std::sync::Arc::new(Schema::new(fields)), columns)?)
        })
        .collect()
}

fn read_ipc(path: &Path) -> anyhow::Result<Vec<RecordBatch>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let reader = datafusion::arrow::ipc::reader::FileReader::try_new(file, None)
        .with_context(|| format!("reading {}", path.display()))?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("reading {}", path.display()))
}
