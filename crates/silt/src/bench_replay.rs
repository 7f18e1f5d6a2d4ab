//! `silt bench replay`: cache-access traces through every eviction policy.
//!
//! Replays traces (Parquet, one row per access) through each policy at one or
//! more budgets and prints hit ratio, byte hit ratio and the share of
//! estimated refetch time saved, with Belady's offline optimum as the
//! reference row. This is how policies are chosen per tier: on recorded
//! workloads, before they run. Accesses are priced exactly as the disk tier
//! prices a fetched page ([`replay::price`]): each entry pays its share of the
//! GET that brings it, so `weighted-lfu` is replayed as it runs live.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{ArgGroup, Args, ValueEnum};
use serde_json::json;
use silt_bench::traces::{column_chunk, read_trace};
use silt_cache::policy::replay::{self, PricedAccess, ReplayStats, TraceSummary};
use silt_cache::policy::{CostModel, PolicyKind};
use silt_server::config::parse_bytes;

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("budget").required(true).args(["capacity", "capacity_fraction"])))]
pub struct ReplayArgs {
    /// Trace file (Parquet with u64 columns entry_id, entry_size; one row per access, in time order).
    /// Repeat for several traces.
    #[arg(long = "trace", value_name = "FILE", required = true)]
    traces: Vec<PathBuf>,
    /// Cache budget, e.g. 64MiB or 1GB.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    capacity: Option<u64>,
    /// Cache budget as a fraction of each trace's footprint (the bytes of its distinct entries), e.g. 0.1.
    /// Repeat to replay at several budgets.
    #[arg(long, value_name = "F", value_parser = parse_fraction)]
    capacity_fraction: Vec<f64>,
    /// Policy to replay (lru, lfu, sieve, weighted-lfu, s3-fifo); repeat for several. Default: all.
    #[arg(long = "policy", value_name = "P")]
    policies: Vec<PolicyKind>,
    /// Also replay one mixed workload: all the traces back to back, the whole
    /// sequence repeated N times (a dashboard re-running its queries). Entry
    /// ids name cached data, so the same id in two traces is the same entry.
    #[arg(long, value_name = "N")]
    mixed: Option<u32>,
    /// Which entries one GET brings back, for pricing: the batches of one column chunk
    /// (file, row group, column; as a Parquet reader fetches), or each entry alone.
    #[arg(long, value_enum, default_value_t = FetchUnit::ColumnChunk)]
    fetch_unit: FetchUnit,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FetchUnit {
    /// Batches of one (file, row group, column) share one GET.
    ColumnChunk,
    /// Every entry is fetched by its own GET.
    Entry,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ReplayFormat {
    Table,
    Json,
    /// Markdown tables, one per trace plus a mean over traces (docs/results/replay).
    Markdown,
}

/// One budget's replay of one workload.
struct Run {
    /// The fraction of the footprint asked for, if the budget was given so.
    fraction: Option<f64>,
    capacity: u64,
    rows: Vec<(&'static str, ReplayStats)>,
}

/// One workload's replays.
struct Report {
    trace: PathBuf,
    summary: TraceSummary,
    runs: Vec<Run>,
}

pub fn run(args: &ReplayArgs) -> anyhow::Result<()> {
    let policies = if args.policies.is_empty() {
        PolicyKind::ALL.to_vec()
    } else {
        args.policies.clone()
    };
    let cost = cost_model(args)?;
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
    let budgets: Vec<Option<f64>> = match args.capacity {
        Some(_) => vec![None],
        None => args.capacity_fraction.iter().copied().map(Some).collect(),
    };
    let reports: Vec<Report> = workloads
        .iter()
        .map(|(trace, accesses)| {
            let priced = price(accesses, &cost, args.fetch_unit);
            let summary = replay::summarize(&priced);
            let runs = budgets
                .iter()
                .map(|&fraction| {
                    let capacity = match fraction {
                        Some(f) => (summary.footprint_bytes as f64 * f).round() as u64,
                        None => args.capacity.unwrap_or(0),
                    };
                    let rows = replay::compare(&priced, capacity, &policies);
                    Run {
                        fraction,
                        capacity,
                        rows,
                    }
                })
                .collect();
            Report {
                trace: trace.clone(),
                summary,
                runs,
            }
        })
        .collect();
    match args.format {
        ReplayFormat::Table => {
            reports.iter().for_each(print_table);
            println!("{}", legend(&cost, args.fetch_unit));
        }
        ReplayFormat::Json => {
            let json: Vec<serde_json::Value> = reports.iter().map(report_json).collect();
            println!("{}", serde_json::to_string_pretty(&json).context("encoding JSON")?);
        }
        ReplayFormat::Markdown => print!("{}", markdown(&reports, &cost, args.fetch_unit)),
    }
    Ok(())
}

/// The cost model of the flags, on top of the defaults.
fn cost_model(args: &ReplayArgs) -> anyhow::Result<CostModel> {
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
    Ok(cost)
}

fn price(accesses: &[replay::Access], cost: &CostModel, unit: FetchUnit) -> Vec<PricedAccess> {
    match unit {
        FetchUnit::ColumnChunk => replay::price(accesses, cost, column_chunk),
        FetchUnit::Entry => replay::price(accesses, cost, |id| id),
    }
}

fn legend(cost: &CostModel, unit: FetchUnit) -> String {
    let unit = match unit {
        FetchUnit::ColumnChunk => "the entries of one column chunk share one GET",
        FetchUnit::Entry => "every entry is its own GET",
    };
    format!(
        "cost saved = share of estimated refetch time that hits saved; an entry costs latency / (entries in its GET) \
         + bytes / bandwidth + decode ({} ms per GET, {} B/s, {} ns/B decode; {unit}).\n\
         belady = evict the farthest next use: optimal hit ratio for equal sizes, the standard reference otherwise.",
        cost.request_latency.as_secs_f64() * 1e3,
        cost.bandwidth_bytes_per_sec,
        cost.decode_ns_per_byte
    )
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if f.is_finite() && f >= 0.0 => Ok(f),
        _ => Err(format!("'{s}' is not a non-negative fraction (e.g. 0.1 for 10%)")),
    }
}

fn print_table(report: &Report) {
    let s = &report.summary;
    println!(
        "{}: {} accesses, {} distinct entries, footprint {} ({:.1} MiB)",
        display_name(&report.trace),
        s.accesses,
        s.distinct,
        s.footprint_bytes,
        mib(s.footprint_bytes),
    );
    for run in &report.runs {
        println!(
            "  capacity {} ({:.1} MiB, {:.1}% of footprint)",
            run.capacity,
            mib(run.capacity),
            ratio_or_zero(run.capacity, s.footprint_bytes) * 100.0
        );
        println!(
            "  {:<14} {:>10} {:>15} {:>11} {:>15}",
            "policy", "hit ratio", "byte hit ratio", "cost saved", "cost saved (s)"
        );
        for (policy, stats) in &run.rows {
            println!(
                "  {:<14} {:>10.4} {:>15.4} {:>11.4} {:>15.2}",
                policy,
                stats.hit_ratio(),
                stats.byte_hit_ratio(),
                stats.cost_hit_ratio(),
                stats.hit_cost / 1e9
            );
        }
    }
    println!();
}

fn report_json(report: &Report) -> serde_json::Value {
    let runs: Vec<serde_json::Value> = report
        .runs
        .iter()
        .map(|run| {
            let rows: Vec<serde_json::Value> = run
                .rows
                .iter()
                .map(|(policy, stats)| {
                    json!({
                        "policy": policy,
                        "hits": stats.hits,
                        "misses": stats.misses,
                        "hit_bytes": stats.hit_bytes,
                        "total_bytes": stats.total_bytes,
                        "hit_cost_ns": stats.hit_cost,
                        "total_cost_ns": stats.total_cost,
                        "hit_ratio": stats.hit_ratio(),
                        "byte_hit_ratio": stats.byte_hit_ratio(),
                        "cost_hit_ratio": stats.cost_hit_ratio(),
                    })
                })
                .collect();
            json!({ "capacity_fraction": run.fraction, "capacity_bytes": run.capacity, "rows": rows })
        })
        .collect();
    json!({
        "trace": report.trace.display().to_string(),
        "accesses": report.summary.accesses,
        "distinct": report.summary.distinct,
        "footprint_bytes": report.summary.footprint_bytes,
        "runs": runs,
    })
}

/// Markdown: one table per workload (rows: policies; per budget, hit ratio,
/// byte hit ratio and cost saved), then the mean of each over the workloads.
fn markdown(reports: &[Report], cost: &CostModel, unit: FetchUnit) -> String {
    let mut out = String::new();
    let Some(first) = reports.first() else {
        return out;
    };
    let budgets: Vec<String> = first.runs.iter().map(budget_label).collect();
    let header = |out: &mut String| {
        out.push_str("| policy |");
        for b in &budgets {
            out.push_str(&format!(" hit @{b} | byte hit @{b} | cost saved @{b} |"));
        }
        out.push_str("\n|---|");
        out.push_str(&"---:|".repeat(3 * budgets.len()));
        out.push('\n');
    };
    for report in reports {
        let s = &report.summary;
        out.push_str(&format!(
            "### {}\n\n{} accesses, {} distinct entries, footprint {:.1} MiB\n\n",
            display_name(&report.trace),
            s.accesses,
            s.distinct,
            mib(s.footprint_bytes)
        ));
        header(&mut out);
        for (i, (policy, _)) in first.runs[0].rows.iter().enumerate() {
            out.push_str(&format!("| {policy} |"));
            for run in &report.runs {
                let stats = &run.rows[i].1;
                out.push_str(&format!(
                    " {:.3} | {:.3} | {:.3} |",
                    stats.hit_ratio(),
                    stats.byte_hit_ratio(),
                    stats.cost_hit_ratio()
                ));
            }
            out.push('\n');
        }
        out.push('\n');
    }
    out.push_str(&format!("### Mean over the {} workloads above\n\n", reports.len()));
    header(&mut out);
    for (i, (policy, _)) in first.runs[0].rows.iter().enumerate() {
        out.push_str(&format!("| {policy} |"));
        for b in 0..budgets.len() {
            let mean = |f: fn(&ReplayStats) -> f64| {
                reports.iter().map(|r| f(&r.runs[b].rows[i].1)).sum::<f64>() / reports.len() as f64
            };
            out.push_str(&format!(
                " {:.3} | {:.3} | {:.3} |",
                mean(ReplayStats::hit_ratio),
                mean(ReplayStats::byte_hit_ratio),
                mean(ReplayStats::cost_hit_ratio)
            ));
        }
        out.push('\n');
    }
    out.push_str(&format!("\n{}\n", legend(cost, unit)));
    out
}

fn budget_label(run: &Run) -> String {
    match run.fraction {
        Some(f) => format!("{}%", f * 100.0),
        None => format!("{:.1}MiB", mib(run.capacity)),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn report(name: &str, accesses: &[replay::Access], fractions: &[f64]) -> Report {
        let priced = price(accesses, &CostModel::default(), FetchUnit::ColumnChunk);
        let summary = replay::summarize(&priced);
        let runs = fractions
            .iter()
            .map(|&f| {
                let capacity = (summary.footprint_bytes as f64 * f) as u64;
                Run {
                    fraction: Some(f),
                    capacity,
                    rows: replay::compare(&priced, capacity, &PolicyKind::ALL),
                }
            })
            .collect();
        Report {
            trace: PathBuf::from(format!("/traces/{name}")),
            summary,
            runs,
        }
    }

    #[test]
    fn markdown_has_a_row_per_policy_and_columns_per_budget() {
        let trace: Vec<replay::Access> = (0..500u64).map(|i| (((i * 7) % 40) | (1 << 16), 1000)).collect();
        let reports = [
            report("a.parquet", &trace, &[0.1, 0.5]),
            report("b.parquet", &trace, &[0.1, 0.5]),
        ];
        let md = markdown(&reports, &CostModel::default(), FetchUnit::ColumnChunk);
        assert!(
            md.contains("### a.parquet") && md.contains("### Mean over the 2 workloads"),
            "{md}"
        );
        assert!(
            md.contains("| hit @10% | byte hit @10% | cost saved @10% | hit @50% |"),
            "{md}"
        );
        for kind in PolicyKind::ALL {
            assert_eq!(md.matches(&format!("| {kind} |")).count(), 3, "{kind}\n{md}");
        }
        assert_eq!(md.matches("| belady |").count(), 3);
        // Every data row has 1 + 3 x 2 cells.
        let row = md.lines().find(|l| l.starts_with("| s3-fifo |")).unwrap();
        assert_eq!(row.matches('|').count(), 8, "{row}");
    }

    #[test]
    fn fetch_unit_sets_how_latency_is_shared() {
        // Two batches of one column chunk, and one of another chunk.
        let trace = [(1 << 16, 100), ((1 << 16) | 1, 100), (2 << 16, 100)];
        let cost = CostModel::default();
        let chunked = price(&trace, &cost, FetchUnit::ColumnChunk);
        let alone = price(&trace, &cost, FetchUnit::Entry);
        assert_eq!(chunked[0].2, cost.share_of_request(2, 100));
        assert_eq!(chunked[2].2, cost.cost(100));
        assert!(alone.iter().all(|a| a.2 == cost.cost(100)));
    }

    #[test]
    fn fractions_are_checked() {
        assert_eq!(parse_fraction(" 0.25 "), Ok(0.25));
        assert!(parse_fraction("-1").is_err() && parse_fraction("NaN").is_err());
    }
}
