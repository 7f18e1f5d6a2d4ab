//! The `duckdb` and `duckdb-s3` modes: DuckDB's Python package running the
//! same queries, as an outside reference. `duckdb` reads the local copy of
//! the files (the engine's own speed); `duckdb-s3` reads the loopback object
//! store through the `httpfs` extension (from the `duckdb-ext-httpfs` wheel),
//! throttled like every other mode's store: DuckDB reading the lake directly,
//! the user's alternative to a cache.
//!
//! DuckDB cannot be given Silt's store wrapper, so `duckdb-s3`'s throttle is
//! applied at the transport: a [`LinkProxy`] in front of the object store
//! with the store's bandwidth and, as its round-trip time, the store's
//! per-request latency. A request and its answer then cost one latency plus
//! their bytes on a link all requests share, as `FaultyStore` charges the
//! other modes; unlike it, each new connection also pays one round trip
//! (DuckDB keeps its connections alive, so that is once per connection).
//! DuckDB's own in-memory cache of remote data (`enable_external_file_cache`,
//! on by default) is left on: each query's cold run is on a fresh database.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use silt_bench::link::{Link, LinkProxy, Shape};
use silt_bench::results::{CpuPhases, MemoryUse, QueryResult, QuerySpec, Spread, mean};
use silt_store::S3Settings;

use super::modes::{Mode, StoreSetup};
use super::suite::{Suite, TableSpec};

const RUNNER: &str = include_str!("duckdb_runner.py");

/// The Python to run DuckDB with: `$SILT_PYTHON`, else `python3`.
fn python() -> String {
    std::env::var("SILT_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Where DuckDB reads the suite's files.
enum Files {
    /// The local copy (`duckdb`).
    Local,
    /// The object store at `endpoint` (`host:port`, plain HTTP, path-style)
    /// through `httpfs`, signed with `s3`'s keys (`duckdb-s3`).
    Store { endpoint: String, s3: S3Settings },
}

impl Files {
    fn mode(&self) -> Mode {
        match self {
            Files::Local => Mode::Duckdb,
            Files::Store { .. } => Mode::DuckdbS3,
        }
    }

    /// Where `t`'s objects are: a folder (`/` at the end) or one file.
    fn location(&self, suite: &Suite, t: &TableSpec) -> String {
        match self {
            Files::Local => suite.local_path(t).display().to_string(),
            Files::Store { .. } => format!("s3://{}/{}", t.bucket, t.prefix),
        }
    }

    /// The statements that come before the tables: `httpfs` and the
    /// store's credentials (the runner loads the extension).
    fn preamble(&self) -> Vec<String> {
        let Files::Store { endpoint, s3 } = self else {
            return Vec::new();
        };
        // SQL string literals: quotes doubled.
        let text = |v: Option<&str>, default: &str| v.unwrap_or(default).replace('\'', "''");
        vec![format!(
            "CREATE SECRET silt_bench_store (TYPE s3, KEY_ID '{}', SECRET '{}', REGION '{}', \
             ENDPOINT '{}', URL_STYLE 'path', USE_SSL false)",
            text(s3.access_key_id.as_deref(), ""),
            text(s3.secret_access_key.as_deref(), ""),
            text(s3.region.as_deref(), "us-east-1"),
            text(Some(endpoint), ""),
        )]
    }
}

/// DuckDB statements that register the suite's tables and views.
fn setup_sql(suite: &Suite, files: &Files) -> Vec<String> {
    let mut stmts = files.preamble();
    for t in &suite.tables {
        let location = files.location(suite, t);
        let glob = if t.prefix.ends_with('/') {
            format!("{}/**/*.parquet", location.trim_end_matches('/'))
        } else {
            location
        };
        let select = format!(
            "SELECT * FROM read_parquet('{}', binary_as_string = {})",
            glob.replace('\'', "''"),
            t.binary_as_string
        );
        stmts.push(format!("CREATE VIEW \"{}\" AS {select}", t.name));
    }
    for (name, _) in &suite.views {
        if name == "hits" {
            // The DuckDB spelling of ClickBench's `hits` view (raw Int64 times and UInt16 dates).
            stmts.push(
                "CREATE VIEW hits AS SELECT * REPLACE (\
                 CAST(DATE '1970-01-01' + CAST(\"EventDate\" AS INTEGER) AS DATE) AS \"EventDate\", \
                 CAST(to_timestamp(\"EventTime\") AS TIMESTAMP) AS \"EventTime\", \
                 CAST(to_timestamp(\"ClientEventTime\") AS TIMESTAMP) AS \"ClientEventTime\", \
                 CAST(to_timestamp(\"LocalEventTime\") AS TIMESTAMP) AS \"LocalEventTime\") FROM hits_raw"
                    .into(),
            );
        }
    }
    stmts
}

/// Runs every query in DuckDB on the local files (`duckdb`); one result per
/// query (all `skipped` when DuckDB is unavailable).
pub fn run(suite: &Suite, queries: &[QuerySpec], warm_runs: usize) -> Vec<QueryResult> {
    run_on(suite, &Files::Local, queries, warm_runs)
}

/// Runs every query in DuckDB over the throttled object store of `setup`
/// through `httpfs` (`duckdb-s3`); one result per query (all `skipped` when
/// DuckDB or its `httpfs` wheel is unavailable).
pub fn run_over_store(suite: &Suite, setup: &StoreSetup, queries: &[QuerySpec], warm_runs: usize) -> Vec<QueryResult> {
    let throttle = Link::new(Shape {
        bits_per_second: if setup.mbps > 0.0 {
            setup.mbps * 8e6
        } else {
            f64::INFINITY
        },
        rtt: Duration::from_millis(setup.latency_ms),
    });
    let proxied = setup
        .s3
        .endpoint
        .as_deref()
        .context("the benchmark's object store has no endpoint")
        .and_then(|endpoint| LinkProxy::in_front_of(&throttle, endpoint).context("starting the store throttle"));
    match proxied {
        // The proxy lives until every query has run.
        Ok((_proxy, via)) => {
            let endpoint = via.split_once("://").map_or(via.as_str(), |(_, rest)| rest).to_string();
            let files = Files::Store {
                endpoint,
                s3: setup.s3.clone(),
            };
            run_on(suite, &files, queries, warm_runs)
        }
        Err(e) => skipped(Mode::DuckdbS3, queries, &e),
    }
}

fn run_on(suite: &Suite, files: &Files, queries: &[QuerySpec], warm_runs: usize) -> Vec<QueryResult> {
    match run_inner(suite, files, queries, warm_runs) {
        Ok(results) => results,
        Err(e) => skipped(files.mode(), queries, &e),
    }
}

/// One `skipped` result per query, saying why.
fn skipped(mode: Mode, queries: &[QuerySpec], why: &anyhow::Error) -> Vec<QueryResult> {
    queries
        .iter()
        .map(|q| QueryResult {
            mode: mode.name().into(),
            query: q.id.clone(),
            status: "skipped".into(),
            error: Some(super::runner::concise(why)),
            ..Default::default()
        })
        .collect()
}

fn run_inner(
    suite: &Suite,
    files: &Files,
    queries: &[QuerySpec],
    warm_runs: usize,
) -> anyhow::Result<Vec<QueryResult>> {
    let job = json!({
        "httpfs": matches!(files, Files::Store { .. }),
        "setup": setup_sql(suite, files),
        "queries": queries.iter().map(|q| json!({"id": q.id, "sql": q.sql})).collect::<Vec<_>>(),
        "warm_runs": warm_runs,
    });
    let py = python();
    let mut child = Command::new(&py)
        .args(["-c", RUNNER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {py} (set SILT_PYTHON to a Python with duckdb)"))?;
    child
        .stdin
        .take()
        .context("no stdin pipe")?
        .write_all(job.to_string().as_bytes())
        .context("sending the job to the DuckDB runner")?;
    let out = child.wait_with_output().context("waiting for the DuckDB runner")?;
    anyhow::ensure!(
        out.status.success(),
        "the DuckDB runner failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let answer: Value = serde_json::from_slice(&out.stdout).context("the DuckDB runner printed malformed JSON")?;
    if let Some(reason) = answer["skipped"].as_str() {
        anyhow::bail!("{reason} for {py}");
    }
    let rows = answer["results"]
        .as_array()
        .context("no results from the DuckDB runner")?;
    Ok(queries
        .iter()
        .map(|q| {
            let r = rows.iter().find(|r| r["id"] == q.id.as_str());
            parse_result(files.mode(), q, r)
        })
        .collect())
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

fn parse_result(mode: Mode, q: &QuerySpec, r: Option<&Value>) -> QueryResult {
    let mut result = QueryResult {
        mode: mode.name().into(),
        query: q.id.clone(),
        ..Default::default()
    };
    let Some(r) = r else {
        result.status = "error".into();
        result.error = Some("the DuckDB runner returned nothing for this query".into());
        return result;
    };
    if r["status"] != "ok" {
        result.status = "error".into();
        result.error = Some(r["error"].as_str().unwrap_or("unknown error").to_string());
        return result;
    }
    result.status = "ok".into();
    result.rows = r["rows"].as_u64();
    result.cold_ms = r["cold_ms"].as_f64();
    result.warm_ms = Spread::of(floats(&r["warm_ms"]));
    result.client_cpu_s = Some(CpuPhases {
        cold: r["cold_cpu_s"].as_f64().unwrap_or(0.0),
        warm_mean: mean(&floats(&r["warm_cpu_s"])).unwrap_or(0.0),
    });
    result.memory = Some(MemoryUse {
        rss_bytes: r["rss_bytes"].as_u64().unwrap_or(0),
        ..Default::default()
    });
    result
}
