//! The `duckdb` mode: DuckDB's Python package running the same queries on
//! the local copy of the files (its S3 extension cannot be installed here),
//! as an outside reference for the engines' own speed.

use std::io::Write;
use std::process::{Command, Stdio};

use anyhow::Context;
use serde_json::{Value, json};
use silt_bench::results::{CpuPhases, MemoryUse, QueryResult, QuerySpec, Spread, mean};

use super::suite::Suite;

const RUNNER: &str = include_str!("duckdb_runner.py");

/// The Python to run DuckDB with: `$SILT_PYTHON`, else `python3`.
fn python() -> String {
    std::env::var("SILT_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// DuckDB statements that register the suite's tables and views.
fn setup_sql(suite: &Suite) -> Vec<String> {
    let mut stmts = Vec::new();
    for t in &suite.tables {
        let path = suite.local_path(t);
        let glob = if t.prefix.ends_with('/') {
            format!("{}/**/*.parquet", path.display())
        } else {
            path.display().to_string()
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

/// Runs every query in DuckDB; one result per query (all `skipped` when DuckDB is unavailable).
pub fn run(suite: &Suite, queries: &[QuerySpec], warm_runs: usize) -> Vec<QueryResult> {
    match run_inner(suite, queries, warm_runs) {
        Ok(results) => results,
        Err(e) => queries
            .iter()
            .map(|q| QueryResult {
                mode: "duckdb".into(),
                query: q.id.clone(),
                status: "skipped".into(),
                error: Some(super::runner::concise(&e)),
                ..Default::default()
            })
            .collect(),
    }
}

fn run_inner(suite: &Suite, queries: &[QuerySpec], warm_runs: usize) -> anyhow::Result<Vec<QueryResult>> {
    let job = json!({
        "setup": setup_sql(suite),
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
            parse_result(q, r)
        })
        .collect())
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

fn parse_result(q: &QuerySpec, r: Option<&Value>) -> QueryResult {
    let mut result = QueryResult {
        mode: "duckdb".into(),
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
