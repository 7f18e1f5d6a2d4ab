//! Runs every (mode, query) pair and measures it: a fresh cache per query,
//! one cold run, one untimed warm-up, background work drained, then the
//! timed warm runs (none, and no warm-up, when `warm_runs` is 0: a cold-only
//! run, whose warm figures are absent and whose warm CPU means are 0).

use std::path::Path;
use std::time::Instant;

use datafusion::arrow::array::RecordBatch;
use silt_bench::compare::{check_same, is_ordered};
use silt_bench::results::{
    CpuPhases, PhasesU64, QueryResult, QuerySpec, RestartRun, ServerStages, Spread, StoreTraffic, mean, median,
};

use super::modes::{Mode, ParquetSizes, Probe, Session, StoreSetup};
use super::suite::Suite;

/// One timed run: wall time and what it cost.
struct Measured {
    ms: f64,
    cost: Probe,
    batches: Vec<RecordBatch>,
}

async fn measured_run(session: &mut Session, sql: &str) -> anyhow::Result<Measured> {
    let before = session.probe().await?;
    let start = Instant::now();
    tracing::debug!(target: "silt::bench::run", "run started");
    let batches = session.run(sql).await?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    tracing::debug!(target: "silt::bench::run", ms, "run finished");
    let cost = session.probe().await?.since(&before);
    Ok(Measured { ms, cost, batches })
}

fn row_count(batches: &[RecordBatch]) -> u64 {
    batches.iter().map(|b| b.num_rows() as u64).sum()
}

/// What every (mode, query) measurement of one run shares.
pub struct RunContext<'a> {
    pub suite: &'a Suite,
    pub setup: &'a StoreSetup,
    /// Where the servers' cache dirs go.
    pub work: &'a Path,
    /// Timed warm runs per query; 0: the cold run only.
    pub warm_runs: usize,
    /// After the warm runs, `kill -9` and restart the server and time one
    /// more run (modes with a cache server).
    pub restart: bool,
    pub parquet: &'a ParquetSizes,
}

/// Measures `query` in `mode` on a fresh server, comparing its rows with
/// `reference`; errors become an `error` result.
pub async fn run_query(run: &RunContext<'_>, mode: Mode, query: &QuerySpec, reference: &[RecordBatch]) -> QueryResult {
    let mut result = QueryResult {
        mode: mode.name().into(),
        query: query.id.clone(),
        ..Default::default()
    };
    match measure(run, mode, query, reference, &mut result).await {
        Ok(()) => result.status = "ok".into(),
        Err(e) => {
            result.status = "error".into();
            result.error = Some(concise(&e));
        }
    }
    result
}

async fn measure(
    run: &RunContext<'_>,
    mode: Mode,
    query: &QuerySpec,
    reference: &[RecordBatch],
    result: &mut QueryResult,
) -> anyhow::Result<()> {
    let mut session = Session::start(mode, run.suite, run.setup, run.work).await?;
    let cold = measured_run(&mut session, &query.sql).await?;
    result.rows = Some(row_count(&cold.batches));
    result.matches_reference = Some(
        check_same(&query.id, &cold.batches, reference, is_ordered(&query.sql))
            .map_err(|diff| tracing::warn!(mode = mode.name(), "{diff}"))
            .is_ok(),
    );
    result.cold_ms = Some(cold.ms);
    let mut warm = Vec::new();
    if run.warm_runs > 0 {
        // Warm-up (admits what the cold run read past), then let the transcoder finish.
        session.run(&query.sql).await?;
        session.settle().await?;
        for _ in 0..run.warm_runs {
            warm.push(measured_run(&mut session, &query.sql).await?);
        }
    }
    let med = |f: &dyn Fn(&Measured) -> f64| median(&warm.iter().map(f).collect::<Vec<_>>()).unwrap_or(0.0);
    result.warm_ms = Spread::of(warm.iter().map(|m| m.ms).collect());
    let avg = |f: &dyn Fn(&Measured) -> f64| mean(&warm.iter().map(f).collect::<Vec<_>>()).unwrap_or(0.0);
    result.client_cpu_s = Some(CpuPhases {
        cold: cold.cost.client_cpu,
        warm_mean: avg(&|m| m.cost.client_cpu),
    });
    result.server_cpu_s = cold.cost.server_cpu.map(|c| CpuPhases {
        cold: c,
        warm_mean: avg(&|m| m.cost.server_cpu.unwrap_or(0.0)),
    });
    result.bytes_to_client = Some(PhasesU64 {
        cold: cold.cost.to_client,
        warm_median: med(&|m| m.cost.to_client as f64) as u64,
    });
    if cold.cost.link.is_some() {
        let link = |f: &dyn Fn((u64, u64)) -> u64| PhasesU64 {
            cold: cold.cost.link.map_or(0, f),
            warm_median: med(&|m| m.cost.link.map_or(0, f) as f64) as u64,
        };
        result.link_bytes = Some(link(&|(to_client, to_server)| to_client + to_server));
        result.link_bytes_to_client = Some(link(&|(to_client, _)| to_client));
        result.link_bytes_to_server = Some(link(&|(_, to_server)| to_server));
    }
    result.object_store = Some(StoreTraffic {
        cold_requests: cold.cost.store_requests,
        cold_bytes: cold.cost.store_bytes,
        warm_requests: med(&|m| m.cost.store_requests as f64) as u64,
        warm_bytes: med(&|m| m.cost.store_bytes as f64) as u64,
    });
    result.server_stages_ms = warm.first().and_then(|w| w.cost.stages).map(|_| {
        ServerStages::from_array(std::array::from_fn(|i| {
            avg(&|m| m.cost.stages.map_or(0.0, |s| s[i])) * 1e3
        }))
    });
    result.memory = session.memory(run.parquet).await?;
    if run.restart && session.server_flight_url().is_some() {
        let mut session = session.restart(run.suite, run.setup).await?;
        let first = measured_run(&mut session, &query.sql).await?;
        result.restart = Some(RestartRun {
            ms: first.ms,
            matches_reference: check_same(&query.id, &first.batches, reference, is_ordered(&query.sql))
                .map_err(|diff| tracing::warn!(mode = mode.name(), "after a restart: {diff}"))
                .is_ok(),
            store_requests: first.cost.store_requests,
            store_bytes: first.cost.store_bytes,
            parquet_decodes: first.cost.parquet_decodes,
            restored_chunks: first.cost.restored_chunks,
            server_cpu_s: first.cost.server_cpu.unwrap_or(0.0),
        });
    }
    Ok(())
}

/// The error's chain without the repetitions object_store's nested errors
/// produce (each level often quotes the one below it in full).
pub fn concise(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain().map(|c| c.to_string()) {
        if !out.contains(cause.as_str()) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&cause);
        }
    }
    out
}
