//! `silt bench ssb --theta T --cache-fraction F`: FlexPushdownDB's skewed SSB
//! workload ([`silt_bench::ssb_workload`]) in the modes of hybrid execution:
//!
//! | workload mode | harness mode | what runs |
//! |---|---|---|
//! | `pullup` | `direct` | DataFusion reads the throttled store itself |
//! | `caching-only` | `caching-only` | the client's cache; misses fetched whole, nothing pushed |
//! | `pushdown-only` | `liquid` | every scan pushed to the liquid server |
//! | `hybrid` | `hybrid` | per row group: local, fetch or pushdown (Weighted-LFU) |
//! | `hybrid-lfu` | `hybrid-lfu` | the same with LFU |
//!
//! Per (theta, cache fraction, mode): a fresh session (empty caches), the
//! batch's warm-up half untimed, then the execution half timed query by
//! query. The client cache is `fraction` x the data's uncompressed size
//! (the Parquet footers' row-group sizes: about what the columns take
//! decoded). Every execution answer is compared with plain DataFusion on
//! the local files. Sweeps: `--theta` and `--cache-fraction` take lists;
//! the store's bandwidth is `--mbps` (run again for another).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
use datafusion::prelude::SessionContext;
use serde::Serialize;
use silt_bench::compare::{check_same, is_ordered};
use silt_bench::results::QuerySpec;
use silt_bench::ssb_workload::{self, Params, Workload};
use silt_client::script::run_script_last_query;

use super::CommonArgs;
use super::modes::{Mode, Session, StoreSetup};
use super::suite::{Suite, with_ties_broken};

/// The workload's modes: (its name, the harness mode that runs it).
const MODES: [(&str, Mode); 5] = [
    ("pullup", Mode::Direct),
    ("caching-only", Mode::CachingOnly),
    ("pushdown-only", Mode::Liquid),
    ("hybrid", Mode::Hybrid),
    ("hybrid-lfu", Mode::HybridLfu),
];

/// The workload's options (flags of `silt bench ssb`).
#[derive(clap::Args, Debug, Clone)]
pub struct WorkloadArgs {
    /// Run the skewed workload with these Zipf parameters (comma separated)
    /// instead of the 13 queries.
    #[arg(long, value_delimiter = ',')]
    pub theta: Vec<f64>,
    /// Client cache sizes as fractions of the data's uncompressed size.
    #[arg(long, value_delimiter = ',', default_value = "0.3")]
    pub cache_fraction: Vec<f64>,
    /// `skewed` (FPDB's type 1) or `weighted` (type 2, for the policies).
    #[arg(long, default_value = "skewed")]
    pub workload: String,
    /// Queries per batch (half warm-up, half measured).
    #[arg(long, default_value_t = 50)]
    pub workload_size: usize,
    /// Selectivity of the skewed workload's extra lineorder filter.
    #[arg(long, default_value_t = 0.2)]
    pub row_selectivity: f64,
    /// Seed of the batch.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Workload modes, comma separated, or `all`: pullup, caching-only,
    /// pushdown-only, hybrid, hybrid-lfu.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub workload_modes: Vec<String>,
}

/// One measured (theta, fraction, mode).
#[derive(Debug, Serialize)]
struct WorkloadResult {
    theta: f64,
    cache_fraction: f64,
    cache_bytes: u64,
    mode: String,
    /// Seconds for the execution half (the measured one).
    execution_s: f64,
    warm_up_s: f64,
    per_query_ms: Vec<f64>,
    /// Every execution answer equals plain DataFusion's.
    matches_reference: bool,
    error: Option<String>,
    /// Bytes across the client-cache link during the execution half, both
    /// directions (`null` without a link or for `pullup`).
    link_bytes: Option<u64>,
}

#[derive(Debug, Serialize)]
struct WorkloadReport<'a> {
    name: &'a str,
    workload: &'a str,
    size: usize,
    row_selectivity: f64,
    seed: u64,
    store_latency_ms: u64,
    store_mbps: f64,
    /// The client-cache link (`--link`).
    link: silt_bench::results::LinkConfig,
    data_uncompressed_bytes: u64,
    results: Vec<WorkloadResult>,
}

/// The tables' uncompressed size by their footers.
fn uncompressed_bytes(suite: &Suite) -> anyhow::Result<u64> {
    let mut total = 0u64;
    for file in silt_bench::files::files_with_extension(&suite.src, "parquet") {
        let reader = SerializedFileReader::new(std::fs::File::open(&file)?)
            .with_context(|| format!("reading the footer of {}", file.display()))?;
        total += reader
            .metadata()
            .row_groups()
            .iter()
            .map(|rg| rg.total_byte_size().max(0) as u64)
            .sum::<u64>();
    }
    Ok(total)
}

fn selected_modes(names: &[String]) -> anyhow::Result<Vec<(&'static str, Mode)>> {
    if names.iter().any(|n| n == "all") {
        return Ok(MODES.to_vec());
    }
    names
        .iter()
        .map(|n| {
            MODES
                .iter()
                .find(|(name, _)| name == n)
                .copied()
                .ok_or_else(|| anyhow::anyhow!("unknown workload mode '{n}'"))
        })
        .collect()
}

/// Runs the workload and writes `workload.json`, `report.md` and
/// `workload.svg` into `<out>/<name>/`.
pub async fn run(
    suite: &Suite,
    common: &CommonArgs,
    args: &WorkloadArgs,
    name: &str,
    data_dir: &Path,
) -> anyhow::Result<PathBuf> {
    let workload = match args.workload.as_str() {
        "skewed" => Workload::Skewed,
        "weighted" => Workload::Weighted,
        other => anyhow::bail!("unknown workload '{other}' (skewed, weighted)"),
    };
    let modes = selected_modes(&args.workload_modes)?;
    let work = data_dir.join("work");
    std::fs::create_dir_all(&work)?;
    let (_store, mut setup) = super::start_store(suite, data_dir, common.store_setup())?;
    let reference = SessionContext::new();
    for stmt in suite.ddl(|t| suite.local_path(t).display().to_string()) {
        reference.sql(&stmt).await?.collect().await?;
    }
    let data_bytes = uncompressed_bytes(suite)?;
    let mut results = Vec::new();
    for &theta in &args.theta {
        let mut batch = ssb_workload::generate(&Params {
            workload,
            size: args.workload_size,
            theta,
            selectivity: args.row_selectivity,
            seed: args.seed,
        });
        // Ties in ORDER BY broken on every output column, so the order of
        // an answer is one (the harness's rule for every suite).
        let mut expected = Vec::new();
        for q in batch.execution.iter_mut() {
            let probe = run_script_last_query(&reference, q)
                .await
                .with_context(|| format!("plain DataFusion on {q}"))?;
            let columns = probe.first().map_or(0, |b| b.num_columns());
            let spec = QuerySpec {
                id: String::new(),
                sql: q.clone(),
            };
            *q = with_ties_broken(&spec, columns).sql;
            expected.push(
                run_script_last_query(&reference, q)
                    .await
                    .with_context(|| format!("plain DataFusion on {q}"))?,
            );
        }
        for (i, &fraction) in args.cache_fraction.iter().enumerate() {
            setup.local_cache = (fraction * data_bytes as f64) as u64;
            for &(mode_name, mode) in &modes {
                // Without a client cache a mode's result is the same at every fraction.
                if i > 0 && matches!(mode, Mode::Direct | Mode::Liquid) {
                    continue;
                }
                let r = run_one(suite, &setup, &work, mode, &batch, &expected).await;
                let r = WorkloadResult {
                    theta,
                    cache_fraction: fraction,
                    cache_bytes: setup.local_cache,
                    mode: mode_name.to_string(),
                    ..r
                };
                println!(
                    "  theta {theta:<4} cache {fraction:<5} {:<14} execution {:>9.2} s{}",
                    r.mode,
                    r.execution_s,
                    if r.matches_reference { "" } else { "  ANSWERS DIFFER" }
                );
                results.push(r);
            }
        }
    }
    let report = WorkloadReport {
        name,
        workload: &args.workload,
        size: args.workload_size,
        row_selectivity: args.row_selectivity,
        seed: args.seed,
        store_latency_ms: common.latency_ms,
        store_mbps: common.mbps,
        link: common.link.config(),
        data_uncompressed_bytes: data_bytes,
        results,
    };
    let dir = common.out.join(name);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("workload.json"), serde_json::to_string_pretty(&report)?)?;
    std::fs::write(dir.join("report.md"), render(&report))?;
    plot(&report, &dir.join("workload.svg")).map_err(|e| anyhow::anyhow!("plot: {e}"))?;
    let failed = report.results.iter().filter(|r| !r.matches_reference).count();
    println!("Wrote {}/{{workload.json, report.md, workload.svg}}", dir.display());
    anyhow::ensure!(
        failed == 0,
        "{failed} runs failed or gave answers that differ from plain DataFusion"
    );
    Ok(dir)
}

/// One mode over one batch: warm-up half untimed, execution half timed.
async fn run_one(
    suite: &Suite,
    setup: &StoreSetup,
    work: &Path,
    mode: Mode,
    batch: &ssb_workload::Batch,
    expected: &[Vec<datafusion::arrow::array::RecordBatch>],
) -> WorkloadResult {
    let mut result = WorkloadResult {
        theta: 0.0,
        cache_fraction: 0.0,
        cache_bytes: 0,
        mode: String::new(),
        execution_s: f64::NAN,
        warm_up_s: f64::NAN,
        per_query_ms: Vec::new(),
        matches_reference: false,
        error: None,
        link_bytes: None,
    };
    let outcome: anyhow::Result<()> = async {
        let session = Session::start(mode, suite, setup, work).await?;
        let start = Instant::now();
        for q in &batch.warm_up {
            session.run(q).await?;
        }
        session.settle().await?;
        result.warm_up_s = start.elapsed().as_secs_f64();
        let mut matches = true;
        let link_before = session.link_counters();
        let start = Instant::now();
        for (q, want) in batch.execution.iter().zip(expected) {
            let t = Instant::now();
            let got = session.run(q).await?;
            result.per_query_ms.push(t.elapsed().as_secs_f64() * 1e3);
            if let Err(diff) = check_same("workload", &got, want, is_ordered(q)) {
                matches = false;
                result.error.get_or_insert(format!("{q}: {diff}"));
            }
        }
        result.execution_s = start.elapsed().as_secs_f64();
        result.link_bytes = session
            .link_counters()
            .zip(link_before)
            .map(|(a, b)| a.to_client + a.to_server - b.to_client - b.to_server);
        result.matches_reference = matches;
        Ok(())
    }
    .await;
    if let Err(e) = outcome {
        result.error = Some(format!("{e:#}"));
    }
    result
}

/// The execution seconds of `mode` at (theta, fraction).
fn seconds(report: &WorkloadReport, theta: f64, fraction: f64, mode: &str) -> Option<f64> {
    report
        .results
        .iter()
        .filter(|r| r.theta == theta && r.mode == mode && r.error.is_none())
        .find(|r| r.cache_fraction == fraction || matches!(mode, "pullup" | "pushdown-only"))
        .map(|r| r.execution_s)
}

/// (theta, fraction) pairs measured, in order.
fn points(report: &WorkloadReport) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = Vec::new();
    for r in &report.results {
        if !points.contains(&(r.theta, r.cache_fraction)) && !matches!(r.mode.as_str(), "pullup" | "pushdown-only") {
            points.push((r.theta, r.cache_fraction));
        }
    }
    points
}

fn render(report: &WorkloadReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# SSB workload `{}`: {} queries (half measured), row selectivity {}, seed {}\n\n\
         Store: {} ms latency, {} MB/s. Client cache = fraction x {:.1} MiB (uncompressed data). \
         Seconds for the execution half; lower is better.\n",
        report.workload,
        report.size,
        report.row_selectivity,
        report.seed,
        report.store_latency_ms,
        report.store_mbps,
        report.data_uncompressed_bytes as f64 / (1 << 20) as f64
    );
    let _ = writeln!(out, "{}\n", silt_bench::report::link_sentence(Some(&report.link)));
    let modes: Vec<&str> = MODES.iter().map(|(n, _)| *n).collect();
    let _ = writeln!(
        out,
        "| theta | cache fraction | {} | hybrid speed-up over best(caching-only, pushdown-only) | hybrid (WLFU) speed-up over hybrid-lfu |",
        modes.join(" | ")
    );
    let _ = writeln!(out, "|---|---|{}---:|---:|", "---:|".repeat(modes.len()));
    for (theta, fraction) in points(report) {
        let cell = |m: &str| seconds(report, theta, fraction, m).map_or("-".to_string(), |s| format!("{s:.2}"));
        let cells: Vec<String> = modes.iter().map(|m| cell(m)).collect();
        let best = [
            seconds(report, theta, fraction, "caching-only"),
            seconds(report, theta, fraction, "pushdown-only"),
        ]
        .into_iter()
        .flatten()
        .fold(f64::INFINITY, f64::min);
        let hybrid = seconds(report, theta, fraction, "hybrid");
        let speedup = hybrid
            .filter(|_| best.is_finite())
            .map_or("-".into(), |h| format!("{:.2}x", best / h));
        let wlfu = hybrid
            .zip(seconds(report, theta, fraction, "hybrid-lfu"))
            .map_or("-".into(), |(h, l)| format!("{:.2}x", l / h));
        let _ = writeln!(
            out,
            "| {theta} | {fraction} | {} | {speedup} | {wlfu} |",
            cells.join(" | ")
        );
    }
    let failed: Vec<&WorkloadResult> = report.results.iter().filter(|r| !r.matches_reference).collect();
    let _ = writeln!(out, "\n## Correctness and failures\n");
    if failed.is_empty() {
        let _ = writeln!(
            out,
            "Every execution answer equals plain DataFusion's on the local files."
        );
    }
    for r in failed {
        let _ = writeln!(
            out,
            "- theta {} fraction {} {}: {}",
            r.theta,
            r.cache_fraction,
            r.mode,
            r.error.as_deref().unwrap_or("answers differ from plain DataFusion")
        );
    }
    if report.results.iter().any(|r| r.link_bytes.is_some()) {
        let _ = writeln!(
            out,
            "\n## Bytes across the client-cache link, execution half\n\n| theta | cache fraction | mode | link bytes |\n|---|---|---|---:|"
        );
        for r in report.results.iter().filter(|r| r.link_bytes.is_some()) {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                r.theta,
                r.cache_fraction,
                r.mode,
                silt_bench::report::human_bytes(r.link_bytes.unwrap_or(0))
            );
        }
    }
    let _ = writeln!(out, "\n![execution time](workload.svg)");
    out
}

fn plot(report: &WorkloadReport, path: &Path) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let points = points(report);
    let title = format!("SSB workload '{}': execution half", report.workload);
    let chart = silt_bench::plots::GroupedBars {
        title: &title,
        x_desc: "theta, cache fraction",
        y_desc: "seconds",
        groups: points.iter().map(|(t, f)| format!("θ={t}, {f}")).collect(),
        series: MODES
            .iter()
            .map(|(m, _)| {
                let values = points.iter().map(|(t, f)| seconds(report, *t, *f, m)).collect();
                (m.to_string(), values)
            })
            .collect(),
        log_y: false,
    };
    chart.write_svg(path)
}
