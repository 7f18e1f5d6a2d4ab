//! `silt bench`: offline benchmarks that need no server.
//!
//! `silt bench replay` replays cache-access traces (Parquet, one row per
//! access) through each eviction policy at a given budget and prints hit
//! ratio, byte hit ratio and the share of estimated refetch time saved, with
//! Belady's offline optimum as the reference row. This is how policies are
//! chosen per tier: on recorded workloads, before they run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use serde_json::json;
use silt_bench::traces::read_trace;
use silt_cache::policy::replay::{self, ReplayStats, TraceSummary};
use silt_cache::policy::{CostModel, PolicyKind};
use silt_server::config::parse_bytes;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Replay cache-access traces through the eviction policies and Belady's optimum.
    Replay(ReplayArgs),
    /// TPC-H through Silt versus DataFusion reading a throttled object store directly.
    Cache(crate::bench_cache::CacheBenchArgs),
    /// Generate benchmark data: TPC-H, hits-like ClickBench data, the point-lookup table.
    Gen(crate::bench_gen::GenArgs),
    /// ClickBench queries on hits-like data in every mode: results.json, report.md, plots.
    Clickbench(crate::harness::ClickbenchArgs),
    /// TPC-H queries in every mode: results.json, report.md, plots.
    Tpch(crate::harness::TpchArgs),
    /// Point lookups (`WHERE id = ?`) with concurrent clients: p50/p99 latency, lookups/s.
    Lookup(crate::harness::LookupArgs),
    /// The whole harness on tiny data (run by the test suite so it never rots).
    Smoke(crate::harness::SmokeArgs),
    /// A loopback S3 server in its own process (started by the harness).
    #[command(hide = true)]
    ObjectStore(crate::harness::ObjectStoreArgs),
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("budget").required(true).args(["capacity", "capacity_fraction"])))]
struct ReplayArgs {
    /// Trace file (Parquet with u64 columns entry_id, entry_size; one row per access, in time order).
    /// Repeat for several traces.
    #[arg(long = "trace", value_name = "FILE", required = true)]
    traces: Vec<PathBuf>,
    /// Cache budget, e.g. 64MiB or 1GB.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    capacity: Option<u64>,
    /// Cache budget as a fraction of each trace's footprint (the bytes of its distinct entries), e.g. 0.1.
    #[arg(long, value_name = "F", value_parser = parse_fraction)]
    capacity_fraction: Option<f64>,
    /// Policy to replay (lru, lfu, sieve, weighted-lfu); repeat for several. Default: all.
    #[arg(long = "policy", value_name = "P")]
    policies: Vec<PolicyKind>,
    /// Also replay one mixed workload: all the traces back to back, the whole
    /// sequence repeated N times (a dashboard re-running its queries). Entry
    /// ids name cached data, so the same id in two traces is the same entry.
    #[arg(long, value_name = "N")]
    mixed: Option<u32>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ReplayFormat::Table)]
    format: ReplayFormat,
    /// Cost model: time to first byte of one request [default: 30ms].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    request_latency: Option<Duration>,
    /// Cost model: transfer rate of one request, bytes per second [default: 90MB].
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    bandwidth: Option<u64>,
    /// Cost model: decode time per byte, in nanoseconds [default: 1].
    #[arg(long, value_name = "NS")]
    decode_ns_per_byte: Option<f64>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ReplayFormat {
    Table,
    Json,
}

/// One trace's replay.
struct Report {
    trace: PathBuf,
    summary: TraceSummary,
    capacity: u64,
    rows: Vec<(&'static str, ReplayStats)>,
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Replay(a) => replay_traces(&a),
        BenchCommand::Cache(a) => crate::bench_cache::run(a).await,
        BenchCommand::Gen(a) => crate::bench_gen::run(a).await,
        BenchCommand::Clickbench(a) => crate::harness::clickbench(a).await,
        BenchCommand::Tpch(a) => crate::harness::tpch(a).await,
        BenchCommand::Lookup(a) => crate::harness::lookup(a).await,
        BenchCommand::Smoke(a) => crate::harness::smoke(a).await,
        BenchCommand::ObjectStore(a) => crate::harness::object_store(a).await,
    }
}

fn replay_traces(args: &ReplayArgs) -> anyhow::Result<()> {
    let policies = if args.policies.is_empty() {
        PolicyKind::ALL.to_vec()
    } else {
        args.policies.clone()
    };
    let defaults = CostModel::default();
    let cost = CostModel {
        request_latency: args.request_latency.unwrap_or(defaults.request_latency),
        bandwidth_bytes_per_sec: args.bandwidth.unwrap_or(defaults.bandwidth_bytes_per_sec),
        decode_ns_per_byte: args.decode_ns_per_byte.unwrap_or(defaults.decode_ns_per_byte),
    };
    anyhow::ensure!(cost.bandwidth_bytes_per_sec > 0, "--bandwidth must be positive");
    anyhow::ensure!(
        cost.decode_ns_per_byte.is_finite() && cost.decode_ns_per_byte >= 0.0,
        "--decode-ns-per-byte must be a non-negative number"
    );

    let mut workloads: Vec<(PathBuf, Vec<replay::Access>)> = Vec::new();
    for trace in &args.traces {
        workloads.push((trace.clone(), read_trace(trace)?));
    }
    if let Some(n) = args.mixed.filter(|n| *n > 0) {
        let once: Vec<replay::Access> = workloads.iter().flat_map(|(_, a)| a.iter().copied()).collect();
        let mixed = (0..n).flat_map(|_| once.iter().copied()).collect();
        workloads.push((
            PathBuf::from(format!("mixed: {} traces x {n}", args.traces.len())),
            mixed,
        ));
    }
    let mut reports = Vec::new();
    for (trace, accesses) in &workloads {
        let summary = replay::summarize(accesses);
        let capacity = match (args.capacity, args.capacity_fraction) {
            (Some(bytes), _) => bytes,
            (None, fraction) => (summary.footprint_bytes as f64 * fraction.unwrap_or(1.0)).round() as u64,
        };
        let report = Report {
            trace: trace.clone(),
            summary,
            capacity,
            rows: replay::compare(accesses, capacity, &policies, &cost),
        };
        match args.format {
            ReplayFormat::Table => print_table(&report),
            ReplayFormat::Json => reports.push(report_json(&report)),
        }
    }
    if let ReplayFormat::Json = args.format {
        println!("{}", serde_json::to_string_pretty(&reports).context("encoding JSON")?);
    } else {
        println!(
            "cost hit ratio = share of estimated refetch time saved ({} ms per request, {} B/s, {} ns/B decode).\n\
             belady = evict the farthest next use: optimal hit ratio for equal sizes, the standard reference otherwise.",
            cost.request_latency.as_secs_f64() * 1e3,
            cost.bandwidth_bytes_per_sec,
            cost.decode_ns_per_byte
        );
    }
    Ok(())
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if f.is_finite() && f >= 0.0 => Ok(f),
        _ => Err(format!("'{s}' is not a non-negative fraction (e.g. 0.1 for 10%)")),
    }
}

fn print_table(report: &Report) {
    let s = &report.summary;
    let share = ratio_or_zero(report.capacity, s.footprint_bytes);
    println!(
        "{}: {} accesses, {} distinct entries, footprint {} ({:.1} MiB); capacity {} ({:.1} MiB, {:.1}% of footprint)",
        display_name(&report.trace),
        s.accesses,
        s.distinct,
        s.footprint_bytes,
        mib(s.footprint_bytes),
        report.capacity,
        mib(report.capacity),
        share * 100.0
    );
    println!(
        "  {:<14} {:>10} {:>15} {:>15}",
        "policy", "hit ratio", "byte hit ratio", "cost hit ratio"
    );
    for (policy, stats) in &report.rows {
        println!(
            "  {:<14} {:>10.4} {:>15.4} {:>15.4}",
            policy,
            stats.hit_ratio(),
            stats.byte_hit_ratio(),
            stats.cost_hit_ratio()
        );
    }
    println!();
}

fn report_json(report: &Report) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = report
        .rows
        .iter()
        .map(|(policy, stats)| {
            json!({
                "policy": policy,
                "hits": stats.hits,
                "misses": stats.misses,
                "hit_bytes": stats.hit_bytes,
                "total_bytes": stats.total_bytes,
                "hit_ratio": stats.hit_ratio(),
                "byte_hit_ratio": stats.byte_hit_ratio(),
                "cost_hit_ratio": stats.cost_hit_ratio(),
            })
        })
        .collect();
    json!({
        "trace": report.trace.display().to_string(),
        "accesses": report.summary.accesses,
        "distinct": report.summary.distinct,
        "footprint_bytes": report.summary.footprint_bytes,
        "capacity_bytes": report.capacity,
        "rows": rows,
    })
}

/// The file name alone when there is one: trace paths are long and alike.
fn display_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or(path.as_os_str())
        .to_string_lossy()
        .into_owned()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

fn ratio_or_zero(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}
