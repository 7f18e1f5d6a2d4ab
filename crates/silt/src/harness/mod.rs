//! `silt bench clickbench|tpch|smoke`: the benchmark harness.
//!
//! One run measures every query in every mode (the cache designs a user
//! could deploy, see [`modes::Mode`]) side by side on the same data and the
//! same throttled loopback object store, each cache server a separate
//! process, and writes `bench-results/<name>/results.json` (schema:
//! `docs/bench-results.md`), `report.md` and SVG plots. Correctness is
//! checked on every run: each mode's rows are compared with plain DataFusion
//! reading the local files.

mod child;
mod duckdb;
mod fleet;
mod fleet_model;
mod guard;
mod liquidcache;
mod lookup;
mod mixed;
mod modes;
mod runner;
mod server;
mod suite;
mod workload;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::Args;
use datafusion::arrow::array::RecordBatch;
use datafusion::prelude::SessionContext;
use silt_bench::link::LinkSpec;
use silt_bench::results::{BenchResults, Machine, QueryResult, QuerySpec, RunConfig, SCHEMA_VERSION};
use silt_server::config::parse_bytes;

pub use child::OBJECT_STORE_READY;
pub use fleet::{FleetArgs, run as fleet};
pub use guard::{GuardArgs, guard};
pub use lookup::{LookupArgs, lookup};
pub use mixed::{MixedArgs, mixed};
pub use modes::pushdown_only;
use modes::{Mode, StoreSetup};
use suite::Suite;

/// Options every suite shares.
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// Modes to run, comma separated, or `all`:
    /// direct, file-server, parquet-pushdown, arrow-pushdown, liquid, duckdb, duckdb-s3, local, hybrid, silt.
    /// Not in `all`: liquidcache (the published LiquidCache, built from bench/liquidcache).
    #[arg(long, value_delimiter = ',', default_value = "all")]
    modes: Vec<String>,
    /// Timed warm runs per query and mode (after one untimed warm-up); the median is reported.
    /// 0: only the cold run (no warm-up, no warm figures).
    #[arg(long, default_value_t = 5)]
    warm_runs: usize,
    /// Latency added to every object-store request, milliseconds.
    #[arg(long, default_value_t = 20)]
    latency_ms: u64,
    /// Bandwidth of the link to the object store, MB/s.
    #[arg(long, default_value_t = 100.0)]
    mbps: f64,
    /// The network between the client and each cache server, simulated by a
    /// proxy: BANDWIDTH/RTT (e.g. 1gbit/0.5ms, 10gbit/0.2ms, 100mbit/2ms;
    /// kbit, mbit, gbit; us, ms, s), shared by every connection of the run,
    /// or none (loopback). Modes without a cache server are not affected.
    #[arg(long, default_value = "none")]
    link: LinkSpec,
    /// Memory-tier budget of the arrow-pushdown and liquid servers.
    #[arg(long, default_value = "8GiB", value_parser = parse_bytes)]
    memory_budget: u64,
    /// Share of the servers' disk budget for squeezed liquid chunks (see
    /// `squeeze_share` in the server's config) [default: the server's, 0.25].
    #[arg(long)]
    squeeze_share: Option<f64>,
    /// After each (mode, query)'s warm runs, `kill -9` its cache server,
    /// start it again on the same cache dir, wait for its recovery, and
    /// time one more run with a new client: latency, store GETs, Parquet
    /// chunks decoded and squeezed chunks read back (`restart` in
    /// results.json). Modes without a cache server skip it.
    #[arg(long)]
    restart: bool,
    /// Validation of the servers' tables: always, ttl=DURATION or immutable.
    #[arg(long, default_value = "always")]
    validation: String,
    /// Compute-side cache of the `hybrid` mode's client.
    #[arg(long, default_value = "4GiB", value_parser = parse_bytes)]
    local_cache: u64,
    /// Form of the compute-side cache's column chunks: liquid or arrow.
    #[arg(long, default_value = "liquid")]
    local_cache_form: silt_client::MemoryForm,
    /// Folder of the results; the run writes into `<out>/<name>/`.
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// The run's name [default: the suite and its size, e.g. clickbench-5000000].
    #[arg(long)]
    name: Option<String>,
    /// The shared folder (ClickBench and TPC-H query texts, the nano_hits seed).
    #[arg(long, default_value = "../shared")]
    shared: PathBuf,
}

impl CommonArgs {
    /// A run built in code (`bench smoke`, `bench guard`): every mode, one
    /// warm run, an unthrottled store (no latency, 10 GB/s), 256 MiB
    /// budgets, default validation; results into `<out>/<name>/`.
    fn unthrottled(out: &Path, shared: &Path, name: &str) -> CommonArgs {
        CommonArgs {
            modes: vec!["all".into()],
            warm_runs: 1,
            latency_ms: 0,
            mbps: 10_000.0,
            link: LinkSpec::none(),
            memory_budget: 256 << 20,
            squeeze_share: None,
            restart: false,
            validation: "always".into(),
            local_cache: 256 << 20,
            local_cache_form: Default::default(),
            out: out.to_path_buf(),
            name: Some(name.into()),
            shared: shared.to_path_buf(),
        }
    }

    /// The store and cache setup these options describe (the store's
    /// address is filled in by [`start_store`]), with a fresh link: call
    /// once per run.
    fn store_setup(&self) -> StoreSetup {
        StoreSetup {
            s3: Default::default(),
            latency_ms: self.latency_ms,
            mbps: self.mbps,
            memory_budget: self.memory_budget,
            squeeze_share: self.squeeze_share,
            validation: self.validation.clone(),
            local_cache: self.local_cache,
            local_cache_form: self.local_cache_form,
            link: self.link.link(),
        }
    }
}

#[derive(Args, Debug)]
pub struct ClickbenchArgs {
    /// Rows of hits-like data (generated once from the nano_hits seed).
    #[arg(long, default_value_t = 5_000_000)]
    rows: u64,
    /// ClickBench queries by 0-based number [default: the filter queries 10,19,20,21,22,23,31].
    #[arg(long, value_delimiter = ',', default_value = "10,19,20,21,22,23,31")]
    queries: Vec<u32>,
    /// How the rows are grown (see `silt bench gen hits --model`).
    #[arg(long, value_enum, default_value_t = crate::bench_gen::HitsModelArg::Realistic)]
    hits_model: crate::bench_gen::HitsModelArg,
    /// Where the data lives [default: data/hits-realistic-<rows>, or
    /// data/hits-<rows> for resample].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Args, Debug)]
pub struct TpchArgs {
    /// TPC-H scale factor.
    #[arg(long, default_value_t = 1.0)]
    sf: f64,
    /// TPC-H queries by number [default: all 22].
    #[arg(long, value_delimiter = ',')]
    queries: Option<Vec<u32>>,
    /// Where the data lives [default: data/tpch-sf<sf>].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Args, Debug)]
pub struct SsbArgs {
    /// Scale factor (lineorder has ~6M rows per unit).
    #[arg(long, default_value_t = 1.0)]
    sf: f64,
    /// SSB queries by name [default: all 13].
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1.1,1.2,1.3,2.1,2.2,2.3,3.1,3.2,3.3,3.4,4.1,4.2,4.3"
    )]
    queries: Vec<String>,
    /// Where the data lives [default: data/ssb-sf<sf>].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    #[command(flatten)]
    workload: workload::WorkloadArgs,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Args, Debug)]
pub struct SmokeArgs {
    /// Folder of the results; the run writes into `<out>/smoke/`.
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// The shared folder.
    #[arg(long, default_value = "../shared")]
    shared: PathBuf,
}

/// `silt bench object-store` (hidden; the harness starts it): a loopback S3
/// server in its own process, so the client's CPU figures do not include it.
#[derive(Args, Debug)]
pub struct ObjectStoreArgs {
    /// Folder holding the buckets.
    #[arg(long)]
    root: PathBuf,
    /// Upload a local folder into a bucket first: DIR=BUCKET. Repeatable.
    #[arg(long = "upload", value_name = "DIR=BUCKET")]
    uploads: Vec<String>,
}

pub async fn clickbench(args: ClickbenchArgs) -> anyhow::Result<()> {
    let data_dir = args.data_dir.unwrap_or_else(|| match args.hits_model {
        // Round 1's folders hold resampled rows.
        crate::bench_gen::HitsModelArg::Resample => PathBuf::from(format!("data/hits-{}", args.rows)),
        other => PathBuf::from(format!("data/hits-{}-{}", other.name(), args.rows)),
    });
    let suite = suite::clickbench(
        &args.common.shared,
        &data_dir,
        args.rows,
        args.hits_model.model(),
        &args.queries,
    )?;
    let name = args
        .common
        .name
        .clone()
        .unwrap_or_else(|| format!("clickbench-{}", args.rows));
    run_and_report(&suite, &args.common, &name, &data_dir).await.map(|_| ())
}

pub async fn tpch(args: TpchArgs) -> anyhow::Result<()> {
    let data_dir = args
        .data_dir
        .unwrap_or_else(|| PathBuf::from(format!("data/tpch-sf{}", args.sf)));
    let ids = args.queries.unwrap_or_else(|| (1..=22).collect());
    let suite = suite::tpch(&args.common.shared, &data_dir, args.sf, &ids)?;
    let name = args
        .common
        .name
        .clone()
        .unwrap_or_else(|| format!("tpch-sf{}", args.sf));
    run_and_report(&suite, &args.common, &name, &data_dir).await.map(|_| ())
}

pub async fn ssb(args: SsbArgs) -> anyhow::Result<()> {
    let data_dir = args
        .data_dir
        .unwrap_or_else(|| PathBuf::from(format!("data/ssb-sf{}", args.sf)));
    let suite = suite::ssb(&args.common.shared, &data_dir, args.sf, &args.queries)?;
    if !args.workload.theta.is_empty() {
        let name = args
            .common
            .name
            .clone()
            .unwrap_or_else(|| format!("ssb-sf{}-workload", args.sf));
        return workload::run(&suite, &args.common, &args.workload, &name, &data_dir)
            .await
            .map(|_| ());
    }
    let name = args.common.name.clone().unwrap_or_else(|| format!("ssb-sf{}", args.sf));
    run_and_report(&suite, &args.common, &name, &data_dir).await.map(|_| ())
}

/// The whole pipeline on tiny data, every suite: ClickBench and TPC-H in
/// every mode, and the point-lookup benchmark; one warm run, no throttling;
/// then two TPC-H queries in [`SMOKE_LINK_MODE`] over the simulated link
/// [`SMOKE_LINK`]. Fails unless each results.json is complete, every answer
/// was compared with plain DataFusion and matches (DuckDB's are not
/// compared: it is an outside reference), every lookup was checked and
/// right, the linked run counted link bytes both ways, and every plot was
/// written; never on a timing.
pub async fn smoke(args: SmokeArgs) -> anyhow::Result<()> {
    let work = tempfile::tempdir().context("creating a scratch folder")?;
    let common = |name: &str| CommonArgs::unthrottled(&args.out, &args.shared, name);
    let mut problems = Vec::new();
    let mut written = Vec::new();

    let hits_dir = work.path().join("hits");
    let clickbench = suite::clickbench(
        &args.shared,
        &hits_dir,
        30_000,
        silt_bench::hits::HitsModel::Realistic,
        &[0, 10, 19, 22, 31],
    )?;
    let (results, dir) = run_and_report(&clickbench, &common("smoke"), "smoke", &hits_dir).await?;
    problems.extend(suite_problems(&results, &dir));
    written.push(dir);

    let tpch_dir = work.path().join("tpch");
    let tpch = suite::tpch(&args.shared, &tpch_dir, 0.01, &[1, 3, 6, 12, 14])?;
    let (results, dir) = run_and_report(&tpch, &common("smoke-tpch"), "smoke-tpch", &tpch_dir).await?;
    problems.extend(suite_problems(&results, &dir));
    written.push(dir);

    // The liquid server killed (-9) after the warm runs and restarted on its
    // cache dir: the first run's answers right, from disk alone.
    let restarted = CommonArgs {
        modes: vec![Mode::Liquid.name().into()],
        restart: true,
        ..common("smoke-restart")
    };
    let tpch_restart = suite::tpch(&args.shared, &tpch_dir, 0.01, &[1, 6])?;
    let (results, dir) = run_and_report(&tpch_restart, &restarted, "smoke-restart", &tpch_dir).await?;
    problems.extend(suite_problems(&results, &dir));
    problems.extend(restart_problems(&results));
    written.push(dir);

    // One mode over a simulated client-cache link: answers right and the
    // link's bytes counted both ways.
    let linked = CommonArgs {
        modes: vec![SMOKE_LINK_MODE.name().into()],
        link: SMOKE_LINK.parse()?,
        ..common("smoke-link")
    };
    let tpch_linked = suite::tpch(&args.shared, &tpch_dir, 0.01, &[1, 6])?;
    let (results, dir) = run_and_report(&tpch_linked, &linked, "smoke-link", &tpch_dir).await?;
    problems.extend(suite_problems(&results, &dir));
    problems.extend(link_problems(&results));
    written.push(dir);

    // The skewed SSB workload in its five modes, two cache sizes: runs, and
    // every answer equals plain DataFusion's (workload::run fails otherwise).
    let ssb_dir = work.path().join("ssb");
    let ssb = suite::ssb(&args.shared, &ssb_dir, 0.01, &[])?;
    let workload = workload::WorkloadArgs {
        theta: vec![2.0],
        cache_fraction: vec![0.05, 1.0],
        workload: "skewed".into(),
        workload_size: 8,
        row_selectivity: 0.2,
        seed: 1,
        workload_modes: vec!["all".into()],
    };
    match workload::run(
        &ssb,
        &common("smoke-ssb-workload"),
        &workload,
        "smoke-ssb-workload",
        &ssb_dir,
    )
    .await
    {
        Ok(dir) => {
            problems.extend(missing_files(&dir, &["workload.json", "report.md", "workload.svg"]));
            written.push(dir);
        }
        Err(e) => problems.push(format!("ssb workload: {e:#}")),
    }

    let lookups = lookup::LookupArgs::smoke(args.out.clone(), work.path().join("lookup"));
    let (results, dir) = lookup::run(lookups).await?;
    problems.extend(lookup::problems(&results));
    problems.extend(missing_files(&dir, &["results.json", "report.md"]));
    written.push(dir);

    // The mixed workload: the loopback S3 store with uploaded objects,
    // plan-aware and policy-only servers, answers checked (mixed fails otherwise).
    let mixed_args = MixedArgs::smoke(args.out.clone(), args.shared.clone(), work.path().join("mixed"));
    let dir = mixed_args.run_dir();
    match mixed(mixed_args).await {
        Ok(()) => {
            problems.extend(missing_files(&dir, &["report.md"]));
            written.push(dir);
        }
        Err(e) => problems.push(format!("mixed: {e:#}")),
    }

    anyhow::ensure!(problems.is_empty(), "bench smoke failed:\n  {}", problems.join("\n  "));
    let dirs: Vec<String> = written.iter().map(|d| d.display().to_string()).collect();
    println!(
        "bench smoke: ClickBench, TPC-H (also over a simulated link), the SSB workload, lookups and the mixed workload complete, every answer compared and right, plots written in {}",
        dirs.join(", ")
    );
    Ok(())
}

/// The mode `silt bench smoke` runs over a simulated link ([`SMOKE_LINK`]):
/// `silt`, what a user gets with no flags (the default client deciding per
/// row group).
const SMOKE_LINK_MODE: Mode = Mode::Silt;

/// The link of that run.
const SMOKE_LINK: &str = "1gbit/0.5ms";

/// The results of a linked run whose cold run sent no bytes across the link
/// in either direction (a mode with a server must send both ways).
fn link_problems(results: &BenchResults) -> Vec<String> {
    results
        .results
        .iter()
        .filter(|r| r.status == "ok" && r.crosses_link())
        .filter_map(|r| {
            let what = format!("{}/{}/{}", results.name, r.mode, r.query);
            match (r.link_bytes_to_client, r.link_bytes_to_server) {
                (Some(c), Some(s)) if c.cold > 0 && s.cold > 0 => None,
                (Some(c), Some(s)) => Some(format!(
                    "{what}: the cold run's link bytes were not counted ({} to the client, {} to the server)",
                    c.cold, s.cold
                )),
                _ => Some(format!("{what}: no link bytes")),
            }
        })
        .collect()
}

/// The results of a `--restart` run whose first run after the restart is
/// missing, fetched from the store, or decoded Parquet (the squeeze tier
/// and the disk tier should have brought back everything the warm server
/// held).
fn restart_problems(results: &BenchResults) -> Vec<String> {
    results
        .results
        .iter()
        .filter(|r| r.status == "ok")
        .filter_map(|r| {
            let what = format!("{}/{}/{}", results.name, r.mode, r.query);
            match r.restart {
                None => Some(format!("{what}: no run after the restart")),
                Some(x) if x.store_requests > 0 || x.parquet_decodes > 0 => Some(format!(
                    "{what}: after the restart, {} store GETs and {} Parquet chunk decodes (expected none)",
                    x.store_requests, x.parquet_decodes
                )),
                Some(_) => None,
            }
        })
        .collect()
}

/// What is wrong with a suite's run: missing figures, an answer not
/// compared or different from plain DataFusion's, an error, a file not
/// written.
fn suite_problems(results: &BenchResults, dir: &Path) -> Vec<String> {
    let mut problems = results.missing();
    problems.extend(answer_problems(results));
    let files: Vec<&str> = ["results.json", "report.md"].into_iter().chain(PLOTS).collect();
    problems.extend(missing_files(dir, &files));
    problems
}

/// The (mode, query) pairs of a run that failed or whose answer was not
/// compared with plain DataFusion's or differs from it (DuckDB's are not
/// compared: it is an outside reference).
fn answer_problems(results: &BenchResults) -> Vec<String> {
    let mut problems = Vec::new();
    for r in &results.results {
        let what = format!("{}/{}/{}", results.suite, r.mode, r.query);
        if r.status == "error" {
            problems.push(format!("{what}: {}", r.error.as_deref().unwrap_or("error")));
        } else if r.restart.is_some_and(|x| !x.matches_reference) {
            problems.push(format!("{what}: answer after a restart differs from plain DataFusion"));
        } else if !r.is_duckdb() && r.matches_reference != Some(true) {
            problems.push(format!(
                "{what}: answer {}",
                match r.matches_reference {
                    Some(false) => "differs from plain DataFusion",
                    _ => "not compared with plain DataFusion",
                }
            ));
        }
    }
    problems
}

/// The `files` of `dir` that are missing or empty.
fn missing_files(dir: &Path, files: &[&str]) -> Vec<String> {
    files
        .iter()
        .filter(|f| std::fs::metadata(dir.join(f)).map_or(true, |m| m.len() == 0))
        .map(|f| format!("{} was not written", dir.join(f).display()))
        .collect()
}

/// The plot files every run writes.
const PLOTS: [&str; 5] = [
    "latency_warm.svg",
    "latency_cold.svg",
    "server_cpu.svg",
    "bytes_to_client.svg",
    "memory.svg",
];

pub(crate) fn parse_modes(names: &[String]) -> anyhow::Result<Vec<Mode>> {
    use clap::ValueEnum;
    if names.iter().any(|n| n == "all") {
        return Ok(Mode::ALL.to_vec());
    }
    names
        .iter()
        .map(|n| Mode::from_str(n, true).map_err(|_| anyhow::anyhow!("unknown mode '{n}'; modes: {}", mode_names())))
        .collect()
}

fn mode_names() -> String {
    Mode::ALL.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")
}

/// Plain DataFusion on the local files, once per query: the text every mode
/// runs (LIMIT ties broken on every output column) and its expected rows.
async fn reference(suite: &Suite) -> anyhow::Result<Vec<(QuerySpec, Vec<RecordBatch>)>> {
    let ctx = SessionContext::new();
    for stmt in suite.ddl(|t| suite.local_path(t).display().to_string()) {
        ctx.sql(&stmt)
            .await?
            .collect()
            .await
            .with_context(|| format!("running `{stmt}`"))?;
    }
    let mut queries = Vec::new();
    for q in &suite.queries {
        let run = |sql: String| {
            let ctx = &ctx;
            async move {
                silt_client::script::run_script_last_query(ctx, &sql)
                    .await
                    .with_context(|| format!("plain DataFusion failed on {}", q.id))
            }
        };
        let probe = run(q.sql.clone()).await?;
        let spec = suite::with_ties_broken(q, probe.first().map_or(0, |b| b.num_columns()));
        let expected = run(spec.sql.clone()).await?;
        queries.push((spec, expected));
    }
    Ok(queries)
}

async fn run_and_report(
    suite: &Suite,
    common: &CommonArgs,
    name: &str,
    data_dir: &Path,
) -> anyhow::Result<(BenchResults, PathBuf)> {
    let modes = parse_modes(&common.modes)?;
    let started_unix = unix_now();
    let work = data_dir.join("work");
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let (_store, setup) = start_store(suite, data_dir, common.store_setup())?;
    let references = reference(suite).await?;
    let queries: Vec<QuerySpec> = references.iter().map(|(q, _)| q.clone()).collect();
    let parquet = modes::ParquetSizes::of(suite)?;
    let run = runner::RunContext {
        suite,
        setup: &setup,
        work: &work,
        warm_runs: common.warm_runs,
        restart: common.restart,
        parquet: &parquet,
    };
    let mut results: Vec<QueryResult> = Vec::new();
    for mode in modes
        .iter()
        .filter(|m| !matches!(m, Mode::Duckdb | Mode::DuckdbS3 | Mode::Liquidcache))
    {
        for (q, expected) in &references {
            let r = runner::run_query(&run, *mode, q, expected).await;
            print_progress(&r);
            results.push(r);
        }
    }
    if modes.contains(&Mode::Duckdb) {
        for r in duckdb::run(suite, &queries, common.warm_runs) {
            print_progress(&r);
            results.push(r);
        }
    }
    if modes.contains(&Mode::DuckdbS3) {
        for r in duckdb::run_over_store(suite, &setup, &queries, common.warm_runs) {
            print_progress(&r);
            results.push(r);
        }
    }
    if modes.contains(&Mode::Liquidcache) && setup.link.is_some() {
        // Its client and server run in the separate `silt-liquidcache`
        // process, where the harness cannot put the link proxy.
        for q in &queries {
            let r = QueryResult {
                mode: Mode::Liquidcache.name().into(),
                query: q.id.clone(),
                status: "skipped".into(),
                error: Some(format!(
                    "the simulated link ({}) is not applied to liquidcache (its client and server run in their own process)",
                    common.link
                )),
                ..Default::default()
            };
            print_progress(&r);
            results.push(r);
        }
    } else if modes.contains(&Mode::Liquidcache) {
        for r in liquidcache::run(suite, &setup, &work, &references, common.warm_runs) {
            print_progress(&r);
            results.push(r);
        }
    }
    let results = BenchResults {
        schema_version: SCHEMA_VERSION,
        name: name.to_string(),
        suite: suite.kind.clone(),
        started_unix,
        machine: machine(),
        config: RunConfig {
            modes: modes.iter().map(|m| m.name().to_string()).collect(),
            store_latency_ms: common.latency_ms,
            store_mbps: common.mbps,
            warm_runs: common.warm_runs,
            memory_budget: common.memory_budget,
            link: Some(common.link.config()),
        },
        data: suite.data.clone(),
        queries,
        results,
    };
    let dir = common.out.join(name);
    write_outputs(&results, &dir, silt_bench::plots::write_all, silt_bench::report::render)?;
    Ok((results, dir))
}

/// Starts the loopback object store with the suite's buckets uploaded, and
/// completes `setup` with its address.
pub(crate) fn start_store(
    suite: &Suite,
    data_dir: &Path,
    setup: StoreSetup,
) -> anyhow::Result<(child::ChildGuard, StoreSetup)> {
    let buckets: Vec<(PathBuf, String)> = suite.buckets().into_iter().map(|b| (suite.src.join(&b), b)).collect();
    let uploads: Vec<(&Path, &str)> = buckets.iter().map(|(p, b)| (p.as_path(), b.as_str())).collect();
    println!("Starting the loopback object store (uploading the data once) ...");
    let (store, endpoint) = child::object_store(&data_dir.join("lake"), &uploads)?;
    let s3 = silt_bench::local_s3::s3_settings_for(&endpoint);
    Ok((store, StoreSetup { s3, ..setup }))
}

fn print_progress(r: &QueryResult) {
    match (&r.status[..], &r.warm_ms, r.cold_ms) {
        ("ok", Some(w), Some(c)) => println!(
            "  {:<17} {:<5} cold {:>9.1} ms  warm {:>9.1} ms{}{}",
            r.mode,
            r.query,
            c,
            w.median,
            r.link_bytes.map_or(String::new(), |b| format!(
                "  link {} cold, {} warm",
                silt_bench::report::human_bytes(b.cold),
                silt_bench::report::human_bytes(b.warm_median)
            )),
            if r.matches_reference == Some(false) {
                "  ROWS DIFFER"
            } else {
                ""
            }
        ),
        _ => println!(
            "  {:<17} {:<5} {}: {}",
            r.mode,
            r.query,
            r.status,
            r.error.as_deref().unwrap_or("").lines().next().unwrap_or("")
        ),
    }
    if let Some(x) = r.restart {
        println!(
            "  {:<17} {:<5} after kill -9 {:>9.1} ms  {} GETs, {} Parquet decodes, {} restored{}",
            "",
            "",
            x.ms,
            x.store_requests,
            x.parquet_decodes,
            x.restored_chunks,
            if x.matches_reference { "" } else { "  ROWS DIFFER" }
        );
    }
}

/// results.json, the plots and report.md into `dir`.
pub(crate) fn write_outputs<R: serde::Serialize>(
    results: &R,
    dir: &Path,
    plot: impl FnOnce(&R, &Path) -> Result<Vec<PathBuf>, Box<dyn std::error::Error + Send + Sync>>,
    report: impl FnOnce(&R, &[String]) -> String,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let json = serde_json::to_string_pretty(results).context("encoding results")?;
    std::fs::write(dir.join("results.json"), json).with_context(|| format!("writing {}", dir.display()))?;
    let plots = plot(results, dir).map_err(|e| anyhow::anyhow!("plotting: {e}"))?;
    let names: Vec<String> = plots
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    std::fs::write(dir.join("report.md"), report(results, &names))
        .with_context(|| format!("writing {}", dir.display()))?;
    println!(
        "\nWrote {}/{{results.json, report.md, {}}}",
        dir.display(),
        names.join(", ")
    );
    Ok(())
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

pub(crate) fn machine() -> Machine {
    let memory_bytes = silt_bench::procfs::total_memory_bytes().unwrap_or(0);
    Machine {
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_bytes,
        build: if cfg!(debug_assertions) { "debug" } else { "release" }.into(),
    }
}

/// Serves `root` over S3 on loopback until killed (see [`ObjectStoreArgs`]).
pub async fn object_store(args: ObjectStoreArgs) -> anyhow::Result<()> {
    let s3 = silt_bench::local_s3::LocalS3::start(&args.root)
        .await
        .with_context(|| format!("serving {}", args.root.display()))?;
    for spec in &args.uploads {
        let (dir, bucket) = spec
            .rsplit_once('=')
            .with_context(|| format!("--upload wants DIR=BUCKET, got '{spec}'"))?;
        s3.upload_dir(Path::new(dir), bucket)
            .await
            .map_err(|e| anyhow::anyhow!("uploading {dir} into {bucket}: {e}"))?;
    }
    eprintln!("{OBJECT_STORE_READY}{}", s3.endpoint());
    tokio::signal::ctrl_c().await.context("waiting for a signal")?;
    Ok(())
}
