//! `silt bench guard`: the performance guard. A fixed small set, a few
//! minutes on 2 cores once its data exists, whose figures are **ratios to a
//! reference measured in the same run**, compared with the ratios committed
//! in `docs/results/guard/baseline.json`. A slower or busier machine slows
//! both sides of a ratio, so the figures move with the code, not the machine.
//!
//! Every ratio is oriented so that **bigger is worse**. The set and its
//! references:
//!
//! - **Lookups** (`silt bench lookup`, 200,000 rows, 3 s per mode, the store
//!   unthrottled, liquid preloaded into memory): `liquid` through Silt's
//!   one-call lookup path against `local`, DataFusion planning the same
//!   `WHERE id = ?` over the same file on local disk in this process. `local`
//!   is the reference because nothing of Silt runs in it (no store wrapper,
//!   no loopback S3, no server), it is pure CPU on the same machine, and it is
//!   steady from run to run (row-group statistics and the page index locate the
//!   id); `direct` would measure the loopback S3 server and Silt's own store
//!   wrappers too. With 1 client: p50 latency (`lookup.1-client.p50`) and the
//!   server's CPU per lookup against `local`'s CPU per lookup
//!   (`lookup.1-client.cpu`). With 8 clients: `local`'s lookups/s over
//!   `liquid`'s (`lookup.8-clients.throughput`, inverted so bigger is worse)
//!   and p99 (`lookup.8-clients.p99`).
//! - **TPC-H SF 0.1, warm** (22 queries, median of 3 warm runs, the store
//!   unthrottled, validation `always`): each query's and the geometric mean's
//!   warm latency of `liquid` and of `hybrid` over `local`'s
//!   (`tpch-warm.<mode>.q01`, ..., `tpch-warm.<mode>.geomean`). `liquid` is
//!   the pushdown-only client (`--local-cache 0`: every scan pushed down
//!   whole); `hybrid` is `silt query --local-cache` (the per-row-group
//!   choice of the compute-side cache), which with the default cache size is
//!   what `silt query` does with no flags (the harness's `silt` mode).
//! - **ClickBench on 1M rows, warm** (realistic model; the filter queries
//!   10, 19, 20, 21, 22, 23 and 31, the same as `silt bench clickbench` runs by
//!   default: each has a `WHERE`): the geometric mean of the warm latency of
//!   `liquid` and of `hybrid` over `local`'s (`clickbench-warm.<mode>.geomean`).
//! - **One cold run**: TPC-H SF 0.1 cold (fresh server, empty cache) through
//!   the harness's default store (20 ms per request, 100 MB/s), the
//!   geometric mean of `liquid`'s cold latency over `direct`'s (DataFusion
//!   reading the same throttled store with no cache): `tpch-cold.liquid.geomean`.
//!
//! Each figure may be worse than its baseline by [`DEFAULT_THRESHOLD`] or by
//! the threshold its baseline entry states (written by `--update-baseline
//! --runs N` from the spread of the N ratios); a worse figure, one the
//! baseline has and this run could not measure, an error or a wrong answer
//! fails the run, naming each. No test runs this: timings are never a
//! pass/fail of the test suite.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use serde::{Deserialize, Serialize};
use silt_bench::results::{BenchResults, LookupResults, Machine, QueryResult, geomean, median};

use super::CommonArgs;
use super::lookup::{self, LookupArgs};
use super::modes::Mode;
use super::suite;

#[derive(Args, Debug)]
pub struct GuardArgs {
    /// The committed ratios this run is compared with.
    #[arg(long, default_value = "docs/results/guard/baseline.json")]
    baseline: PathBuf,
    /// Write this run's ratios (and per-figure thresholds, from their spread
    /// when --runs is 2 or more) to --baseline instead of failing on a change.
    #[arg(long)]
    update_baseline: bool,
    /// Run the whole set this many times; each figure is the median of its ratios.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Folder of the results; the run writes into `<out>/guard/`.
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// The shared folder (ClickBench and TPC-H query texts, the nano_hits seed).
    #[arg(long, default_value = "../shared")]
    shared: PathBuf,
    /// Folder of the generated data sets, reused between runs (the harness's
    /// defaults): tpch-sf0.1, hits-realistic-1000000, lookup-200000.
    #[arg(long, default_value = "data")]
    data_dir: PathBuf,
}

/// Rows of the lookup table (~200 MiB of Parquet).
const LOOKUP_ROWS: u64 = 200_000;
/// Seconds each lookup mode is measured.
const LOOKUP_SECONDS: f64 = 3.0;
/// Untimed lookups per client before measuring.
const LOOKUP_WARMUP: usize = 20;
const TPCH_SF: f64 = 0.1;
const HITS_ROWS: u64 = 1_000_000;
/// ClickBench's filter queries (0-based), `silt bench clickbench`'s default set.
const CLICKBENCH_QUERIES: [u32; 7] = [10, 19, 20, 21, 22, 23, 31];
/// Timed warm runs per query; the median is the figure.
const WARM_RUNS: usize = 3;
/// Memory tier and compute-side cache: both data sets' working sets fit.
const BUDGET: u64 = 2 << 30;
/// The cold run's store: the harness's defaults.
const COLD_LATENCY_MS: u64 = 20;
const COLD_MBPS: f64 = 100.0;
/// The modes whose warm latency is guarded, each against `local`.
const WARM_MODES: [Mode; 2] = [Mode::Liquid, Mode::Hybrid];
/// How much worse than its baseline a figure may be when the baseline states no threshold.
const DEFAULT_THRESHOLD: f64 = 0.25;

/// `docs/results/guard/baseline.json`: the ratios a run is compared with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Baseline {
    pub schema_version: u32,
    /// When the baseline was measured, seconds since the epoch.
    pub created_unix: u64,
    pub machine: Machine,
    /// Passes of the set the ratios are the median of.
    pub runs: usize,
    /// Figure name -> its ratio and threshold.
    pub figures: BTreeMap<String, BaselineFigure>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BaselineFigure {
    /// The ratio (bigger is worse).
    pub ratio: f64,
    /// How much worse (0.25 = 25%) a run may be; absent: [`DEFAULT_THRESHOLD`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// The ratio of each pass it is the median of.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<f64>,
}

const SCHEMA_VERSION: u32 = 1;

/// How a figure compares with its baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Verdict {
    /// Within the threshold.
    Ok,
    /// Worse than the baseline by more than the threshold: fails the run.
    Regressed,
    /// Better by more than the threshold (the baseline may want updating).
    Improved,
    /// Measured, but the baseline has no such figure.
    NoBaseline,
    /// In the baseline, but this run could not measure it: fails the run.
    Missing,
}

impl Verdict {
    fn fails(self) -> bool {
        matches!(self, Verdict::Regressed | Verdict::Missing)
    }

    fn label(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Regressed => "REGRESSED",
            Verdict::Improved => "improved",
            Verdict::NoBaseline => "no baseline",
            Verdict::Missing => "MISSING",
        }
    }
}

/// One figure of this run against its baseline.
#[derive(Debug, Clone, Serialize)]
struct Figure {
    name: String,
    /// The median of the passes' ratios; `None`: not measured (see `problems`).
    value: Option<f64>,
    /// Each pass's ratio.
    runs: Vec<f64>,
    /// The baseline's ratio.
    baseline: Option<f64>,
    /// `value / baseline - 1`.
    change: Option<f64>,
    threshold: f64,
    verdict: Verdict,
}

impl Figure {
    /// The line naming a failed figure with both numbers.
    fn failure(&self) -> String {
        match (self.value, self.baseline, self.change) {
            (Some(v), Some(b), Some(c)) => format!(
                "{}: {v:.3} vs baseline {b:.3} ({:+.0}%, threshold {:.0}%)",
                self.name,
                c * 100.0,
                self.threshold * 100.0
            ),
            (_, b, _) => format!(
                "{}: not measured by this run (baseline {})",
                self.name,
                b.map_or("none".into(), |b| format!("{b:.3}"))
            ),
        }
    }
}

/// `<out>/guard/guard.json`.
#[derive(Debug, Serialize)]
struct GuardReport {
    schema_version: u32,
    started_unix: u64,
    /// Wall time of the whole run.
    seconds: f64,
    machine: Machine,
    runs: usize,
    /// The baseline file compared with; `None` when there was none.
    baseline: Option<PathBuf>,
    /// Wall time of each part of each pass.
    parts: Vec<PartTime>,
    figures: Vec<Figure>,
    /// Errors, wrong answers and figures that could not be computed.
    problems: Vec<String>,
}

#[derive(Debug, Serialize)]
struct PartTime {
    name: String,
    seconds: f64,
}

/// Judges one figure: the median of `runs` (this run's ratios, possibly
/// none) against its `baseline` entry (possibly none).
fn judge(name: &str, runs: &[f64], baseline: Option<&BaselineFigure>) -> Figure {
    let value = median(runs);
    let threshold = baseline.and_then(|b| b.threshold).unwrap_or(DEFAULT_THRESHOLD);
    let base = baseline.map(|b| b.ratio).filter(|r| r.is_finite() && *r > 0.0);
    let verdict = match (value, base) {
        (None, _) => Verdict::Missing,
        (Some(_), None) => Verdict::NoBaseline,
        (Some(v), Some(b)) if v > b * (1.0 + threshold) => Verdict::Regressed,
        (Some(v), Some(b)) if v * (1.0 + threshold) < b => Verdict::Improved,
        (Some(_), Some(_)) => Verdict::Ok,
    };
    Figure {
        name: name.to_string(),
        value,
        runs: runs.to_vec(),
        baseline: base,
        change: value.zip(base).map(|(v, b)| v / b - 1.0),
        threshold,
        verdict,
    }
}

/// Every figure this run measured or the baseline has, by name.
fn compare(measured: &BTreeMap<String, Vec<f64>>, baseline: Option<&Baseline>) -> Vec<Figure> {
    let mut names: BTreeSet<&String> = measured.keys().collect();
    if let Some(b) = baseline {
        names.extend(b.figures.keys());
    }
    names
        .into_iter()
        .map(|name| {
            judge(
                name,
                measured.get(name).map_or(&[][..], Vec::as_slice),
                baseline.and_then(|b| b.figures.get(name)),
            )
        })
        .collect()
}

/// The threshold the spread of a figure's ratios asks for: their range over
/// their median, rounded up to 5%, when at least two were measured and that
/// is wider than [`DEFAULT_THRESHOLD`].
fn spread_threshold(runs: &[f64]) -> Option<f64> {
    if runs.len() < 2 {
        return None;
    }
    let (min, max) = runs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| {
        (lo.min(*r), hi.max(*r))
    });
    let spread = (max - min) / median(runs)?;
    let threshold = (spread * 20.0).ceil() / 20.0;
    (threshold > DEFAULT_THRESHOLD).then_some(threshold)
}

/// This run's figures as a baseline. A figure's threshold comes from the
/// spread of its ratios when it was measured more than once, else it is
/// carried over from the `old` baseline.
fn new_baseline(figures: &[Figure], old: Option<&Baseline>, machine: Machine, runs: usize) -> Baseline {
    let figures = figures
        .iter()
        .filter_map(|f| {
            let ratio = f.value?;
            let threshold = if f.runs.len() >= 2 {
                spread_threshold(&f.runs)
            } else {
                old.and_then(|b| b.figures.get(&f.name)).and_then(|b| b.threshold)
            };
            Some((
                f.name.clone(),
                BaselineFigure {
                    ratio,
                    threshold,
                    runs: f.runs.clone(),
                },
            ))
        })
        .collect();
    Baseline {
        schema_version: SCHEMA_VERSION,
        created_unix: super::unix_now(),
        machine,
        runs,
        figures,
    }
}

/// The markdown table: figure | this run | baseline | change | threshold | verdict.
fn table(figures: &[Figure]) -> String {
    let mut out = String::from(
        "| figure | this run | baseline | change | threshold | verdict |\n|---|---:|---:|---:|---:|---|\n",
    );
    for f in figures {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0}% | {} |",
            f.name,
            f.value.map_or("—".into(), |v| format!("{v:.3}")),
            f.baseline.map_or("no baseline".into(), |b| format!("{b:.3}")),
            f.change.map_or("—".into(), |c| format!("{:+.0}%", c * 100.0)),
            f.threshold * 100.0,
            f.verdict.label()
        );
    }
    out
}

/// What the figures' names mean (printed under the table).
const LEGEND: &str = "Ratios, bigger is worse, each against a reference of the same run:
  lookup.1-client.p50 / .cpu     liquid (preloaded) p50 / local p50; server CPU per lookup / local CPU per lookup
  lookup.8-clients.throughput    local lookups/s / liquid lookups/s
  lookup.8-clients.p99           liquid p99 / local p99
  tpch-warm.<mode>.<query>       TPC-H SF 0.1 warm median latency / local's (geomean: over the 22 queries)
  clickbench-warm.<mode>.geomean ClickBench 1M filter queries, warm, geometric mean of the ratios to local
  tpch-cold.liquid.geomean       TPC-H SF 0.1 cold at 20 ms / 100 MB/s, geometric mean of liquid / direct";

/// What one pass of the set measured.
#[derive(Default)]
struct Pass {
    /// Figure name -> ratio.
    ratios: BTreeMap<String, f64>,
    /// Errors, wrong answers, figures that could not be computed.
    problems: Vec<String>,
    parts: Vec<PartTime>,
}

impl Pass {
    /// Records `value / reference` as figure `name`, or a problem when either is missing or not positive.
    fn ratio(&mut self, name: String, value: Option<f64>, reference: Option<f64>) {
        match ratio(value, reference) {
            Some(r) => {
                self.ratios.insert(name, r);
            }
            None => self
                .problems
                .push(format!("{name}: no ratio (value {value:?}, reference {reference:?})")),
        }
    }

    fn timed(&mut self, name: &str, started: Instant) {
        let seconds = started.elapsed().as_secs_f64();
        println!("  ({name}: {seconds:.0} s)");
        self.parts.push(PartTime {
            name: name.to_string(),
            seconds,
        });
    }

    /// The lookup figures of a run with `clients` clients (modes local and liquid).
    fn lookups(&mut self, results: &LookupResults, clients: usize) {
        self.problems.extend(lookup::problems(results));
        let ok = |mode: Mode| {
            results
                .results
                .iter()
                .find(|r| r.mode == mode.name() && r.status == "ok" && r.lookups > 0)
        };
        let (silt, local) = (ok(Mode::Liquid), ok(Mode::Local));
        if clients == 1 {
            self.ratio(
                "lookup.1-client.p50".into(),
                silt.map(|r| r.p50_ms),
                local.map(|r| r.p50_ms),
            );
            self.ratio(
                "lookup.1-client.cpu".into(),
                silt.and_then(|r| r.server_cpu_s_per_lookup),
                local.map(|r| r.client_cpu_s_per_lookup),
            );
        } else {
            let part = format!("lookup.{clients}-clients");
            self.ratio(
                format!("{part}.throughput"),
                local.map(|r| r.lookups_per_s),
                silt.map(|r| r.lookups_per_s),
            );
            self.ratio(format!("{part}.p99"), silt.map(|r| r.p99_ms), local.map(|r| r.p99_ms));
        }
    }

    /// `metric` of `mode` over `reference`'s, per query when `per_query`,
    /// and their geometric mean (only when every query has a ratio).
    fn suite(
        &mut self,
        results: &BenchResults,
        part: &str,
        (mode, reference): (Mode, Mode),
        metric: fn(&QueryResult) -> Option<f64>,
        per_query: bool,
    ) {
        let value = |m: Mode, q: &str| {
            results
                .results
                .iter()
                .find(|r| r.mode == m.name() && r.query == q && r.status == "ok")
                .and_then(metric)
        };
        let mut ratios = Vec::new();
        for q in &results.queries {
            let (v, r) = (value(mode, &q.id), value(reference, &q.id));
            ratios.extend(ratio(v, r));
            if per_query {
                self.ratio(format!("{part}.{}.{}", mode.name(), q.id), v, r);
            }
        }
        let name = format!("{part}.{}.geomean", mode.name());
        match geomean(&ratios) {
            Some(g) if ratios.len() == results.queries.len() => {
                self.ratios.insert(name, g);
            }
            _ => self.problems.push(format!(
                "{name}: {} of {} queries have a ratio",
                ratios.len(),
                results.queries.len()
            )),
        }
    }
}

/// `value / reference` when both are positive and finite.
fn ratio(value: Option<f64>, reference: Option<f64>) -> Option<f64> {
    let (v, r) = value.zip(reference)?;
    (v.is_finite() && r.is_finite() && v > 0.0 && r > 0.0).then(|| v / r)
}

fn warm(r: &QueryResult) -> Option<f64> {
    r.warm_ms.as_ref().map(|w| w.median)
}

fn cold(r: &QueryResult) -> Option<f64> {
    r.cold_ms
}

/// A suite run's settings: `modes`, `warm_runs`, the store unthrottled, results into `out/name/`.
fn common(args: &GuardArgs, out: &Path, name: &str, modes: &[Mode], warm_runs: usize) -> CommonArgs {
    CommonArgs {
        modes: modes.iter().map(|m| m.name().to_string()).collect(),
        warm_runs,
        memory_budget: BUDGET,
        local_cache: BUDGET,
        ..CommonArgs::unthrottled(out, &args.shared, name)
    }
}

/// One pass of the whole set; `suffix` tells the passes' result folders apart.
async fn run_pass(args: &GuardArgs, out: &Path, suffix: &str) -> anyhow::Result<Pass> {
    let mut pass = Pass::default();

    for clients in [1, 8] {
        let name = format!("lookup-{clients}c{suffix}");
        println!("\n== {name}: {LOOKUP_ROWS} rows, {clients} client(s), local vs liquid (preloaded)");
        let started = Instant::now();
        let lookup_args = LookupArgs {
            rows: LOOKUP_ROWS,
            clients,
            seconds: LOOKUP_SECONDS,
            warmup: LOOKUP_WARMUP,
            modes: vec![Mode::Local.name().into(), Mode::Liquid.name().into()],
            preload: "memory".into(),
            name: Some(name.clone()),
            ..LookupArgs::smoke(out.to_path_buf(), args.data_dir.join(format!("lookup-{LOOKUP_ROWS}")))
        };
        match lookup::run(lookup_args).await {
            Ok((results, _)) => pass.lookups(&results, clients),
            Err(e) => pass.problems.push(format!("{name}: {e:#}")),
        }
        pass.timed(&name, started);
    }

    let tpch_dir = args.data_dir.join(format!("tpch-sf{TPCH_SF}"));
    let tpch = suite::tpch(&args.shared, &tpch_dir, TPCH_SF, &(1..=22).collect::<Vec<u32>>())?;
    let hits_dir = args.data_dir.join(format!("hits-realistic-{HITS_ROWS}"));
    let hits = suite::clickbench(
        &args.shared,
        &hits_dir,
        HITS_ROWS,
        silt_bench::hits::HitsModel::Realistic,
        &CLICKBENCH_QUERIES,
    )?;
    let warm_modes: Vec<Mode> = std::iter::once(Mode::Local).chain(WARM_MODES).collect();
    let parts = [
        ("tpch-warm", &tpch, &tpch_dir, &warm_modes[..], WARM_RUNS),
        ("clickbench-warm", &hits, &hits_dir, &warm_modes[..], WARM_RUNS),
        ("tpch-cold", &tpch, &tpch_dir, &[Mode::Direct, Mode::Liquid][..], 0),
    ];
    for (part, suite, data_dir, modes, warm_runs) in parts {
        let name = format!("{part}{suffix}");
        let mut settings = common(args, out, &name, modes, warm_runs);
        if warm_runs == 0 {
            (settings.latency_ms, settings.mbps) = (COLD_LATENCY_MS, COLD_MBPS);
        }
        println!("\n== {name}: modes {}", settings.modes.join(", "));
        let started = Instant::now();
        match super::run_and_report(suite, &settings, &name, data_dir).await {
            Ok((results, _)) => {
                pass.problems.extend(
                    super::answer_problems(&results)
                        .into_iter()
                        .map(|p| format!("{name}: {p}")),
                );
                if part == "tpch-cold" {
                    pass.suite(&results, part, (Mode::Liquid, Mode::Direct), cold, false);
                } else {
                    for mode in WARM_MODES {
                        pass.suite(&results, part, (mode, Mode::Local), warm, part == "tpch-warm");
                    }
                }
            }
            Err(e) => pass.problems.push(format!("{name}: {e:#}")),
        }
        pass.timed(&name, started);
    }
    Ok(pass)
}

/// The baseline at `path`; `None` when there is no such file.
fn read_baseline(path: &Path) -> anyhow::Result<Option<Baseline>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let baseline: Baseline = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    anyhow::ensure!(
        baseline.schema_version == SCHEMA_VERSION,
        "{} has schema_version {}, this guard reads {SCHEMA_VERSION}",
        path.display(),
        baseline.schema_version
    );
    Ok(Some(baseline))
}

fn write_json(path: &Path, value: &impl Serialize) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let json = serde_json::to_string_pretty(value).context("encoding JSON")?;
    std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))
}

pub async fn guard(args: GuardArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.runs >= 1, "--runs must be at least 1");
    let started = Instant::now();
    let started_unix = super::unix_now();
    let machine = super::machine();
    if machine.build != "release" {
        println!(
            "warning: a {} build; its ratios are not comparable with a release baseline",
            machine.build
        );
    }
    let baseline = read_baseline(&args.baseline)?;
    if let Some(b) = &baseline
        && (b.machine.cores != machine.cores || b.machine.build != machine.build)
    {
        println!(
            "warning: the baseline was measured on {} cores ({}), this run has {} ({})",
            b.machine.cores, b.machine.build, machine.cores, machine.build
        );
    }
    let out = args.out.join("guard");
    let mut measured: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut parts = Vec::new();
    for i in 0..args.runs {
        let suffix = if args.runs > 1 {
            format!("-run{}", i + 1)
        } else {
            String::new()
        };
        println!("\n=== bench guard, pass {} of {}", i + 1, args.runs);
        let pass = run_pass(&args, &out, &suffix).await?;
        for (name, r) in pass.ratios {
            measured.entry(name).or_default().push(r);
        }
        problems.extend(pass.problems);
        parts.extend(pass.parts);
    }
    let figures = compare(&measured, baseline.as_ref());
    let report = GuardReport {
        schema_version: SCHEMA_VERSION,
        started_unix,
        seconds: started.elapsed().as_secs_f64(),
        machine: machine.clone(),
        runs: args.runs,
        baseline: baseline.as_ref().map(|_| args.baseline.clone()),
        parts,
        figures,
        problems,
    };
    let table = table(&report.figures);
    write_json(&out.join("guard.json"), &report)?;
    std::fs::write(out.join("guard.md"), &table).with_context(|| format!("writing {}", out.display()))?;

    println!("\n{table}\n{LEGEND}\n");
    let times: Vec<String> = report
        .parts
        .iter()
        .map(|p| format!("{} {:.0} s", p.name, p.seconds))
        .collect();
    println!("Took {:.0} s: {}.", report.seconds, times.join(", "));
    println!("Wrote {0}/guard.json and {0}/guard.md", out.display());
    for p in &report.problems {
        println!("problem: {p}");
    }

    if args.update_baseline {
        anyhow::ensure!(
            report.problems.is_empty(),
            "not writing a baseline from a run with problems:\n  {}",
            report.problems.join("\n  ")
        );
        let new = new_baseline(&report.figures, baseline.as_ref(), machine, args.runs);
        write_json(&args.baseline, &new)?;
        println!(
            "Wrote the baseline {} ({} figures); commit it and say in the commit why the figures moved.",
            args.baseline.display(),
            new.figures.len()
        );
        return Ok(());
    }
    if baseline.is_none() {
        println!(
            "No baseline at {}: nothing to compare with. Run `silt bench guard --update-baseline` (better with --runs 3) to write one.",
            args.baseline.display()
        );
    }
    let failed: Vec<String> = report
        .figures
        .iter()
        .filter(|f| f.verdict.fails())
        .map(Figure::failure)
        .chain(report.problems.iter().cloned())
        .collect();
    anyhow::ensure!(
        failed.is_empty(),
        "bench guard failed ({} of {} figures regressed or missing, {} problems):\n  {}",
        report.figures.iter().filter(|f| f.verdict.fails()).count(),
        report.figures.len(),
        report.problems.len(),
        failed.join("\n  ")
    );
    println!("bench guard: every figure within its threshold.");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(ratio: f64, threshold: Option<f64>) -> BaselineFigure {
        BaselineFigure {
            ratio,
            threshold,
            runs: Vec::new(),
        }
    }

    #[test]
    fn verdicts_against_the_threshold() {
        let b = base(2.0, None);
        assert_eq!(judge("f", &[2.4], Some(&b)).verdict, Verdict::Ok);
        assert_eq!(
            judge("f", &[2.5], Some(&b)).verdict,
            Verdict::Ok,
            "exactly 25% worse passes"
        );
        let worse = judge("f", &[2.6], Some(&b));
        assert_eq!(worse.verdict, Verdict::Regressed);
        assert!((worse.change.unwrap() - 0.3).abs() < 1e-9);
        let line = worse.failure();
        assert!(
            line.contains("2.600") && line.contains("2.000") && line.contains("+30%"),
            "{line}"
        );
        assert_eq!(judge("f", &[1.5], Some(&b)).verdict, Verdict::Improved);
        assert_eq!(judge("f", &[1.7], Some(&b)).verdict, Verdict::Ok);
    }

    #[test]
    fn a_stated_threshold_wins_over_the_default() {
        let wide = base(2.0, Some(0.5));
        let f = judge("f", &[2.9], Some(&wide));
        assert_eq!((f.verdict, f.threshold), (Verdict::Ok, 0.5));
        assert_eq!(judge("f", &[3.1], Some(&wide)).verdict, Verdict::Regressed);
    }

    #[test]
    fn the_median_of_the_passes_is_judged() {
        let f = judge("f", &[9.0, 2.1, 1.9], Some(&base(2.0, None)));
        assert_eq!((f.value, f.verdict), (Some(2.1), Verdict::Ok));
    }

    /// A one-pass baseline from a 2-core release machine with `figures`.
    fn baseline_of<const N: usize>(figures: [(String, BaselineFigure); N]) -> Baseline {
        Baseline {
            schema_version: SCHEMA_VERSION,
            created_unix: 0,
            machine: Machine {
                cores: 2,
                memory_bytes: 0,
                build: "release".into(),
            },
            runs: 1,
            figures: figures.into(),
        }
    }

    #[test]
    fn missing_figures_and_missing_baselines() {
        let baseline = baseline_of([
            ("gone".to_string(), base(1.0, None)),
            ("kept".to_string(), base(1.0, None)),
        ]);
        let measured: BTreeMap<String, Vec<f64>> =
            [("kept".to_string(), vec![1.1]), ("new".to_string(), vec![3.0])].into();
        let figures = compare(&measured, Some(&baseline));
        let verdicts: Vec<(&str, Verdict)> = figures.iter().map(|f| (f.name.as_str(), f.verdict)).collect();
        assert_eq!(
            verdicts,
            [
                ("gone", Verdict::Missing),
                ("kept", Verdict::Ok),
                ("new", Verdict::NoBaseline)
            ]
        );
        assert!(Verdict::Missing.fails() && !Verdict::NoBaseline.fails() && !Verdict::Improved.fails());
        assert!(
            figures[0].failure().contains("not measured"),
            "{}",
            figures[0].failure()
        );
        // No baseline file: nothing fails.
        assert!(
            compare(&measured, None)
                .iter()
                .all(|f| f.verdict == Verdict::NoBaseline)
        );
        // A baseline ratio that is not a usable number counts as none.
        assert_eq!(judge("f", &[1.0], Some(&base(0.0, None))).verdict, Verdict::NoBaseline);
    }

    #[test]
    fn new_baselines_take_thresholds_from_the_spread() {
        assert_eq!(spread_threshold(&[1.0]), None);
        assert_eq!(spread_threshold(&[1.0, 1.1, 1.2]), None, "within the default");
        // Range 0.62 over median 1.5: 41%, rounded up to 45%.
        assert_eq!(spread_threshold(&[1.2, 1.5, 1.82]), Some(0.45));
        let old = baseline_of([("one".to_string(), base(1.0, Some(0.4)))]);
        let figures = vec![
            judge("one", &[1.3], None),
            judge("three", &[1.2, 1.5, 1.82], None),
            judge("unmeasured", &[], None),
        ];
        let new = new_baseline(&figures, Some(&old), old.machine.clone(), 1);
        assert_eq!(new.figures.len(), 2, "an unmeasured figure is left out");
        assert_eq!(new.figures["one"].threshold, Some(0.4), "carried over from one pass");
        assert_eq!(new.figures["three"].ratio, 1.5);
        assert_eq!(new.figures["three"].threshold, Some(0.45));
    }

    #[test]
    fn ratios_need_two_positive_numbers() {
        assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(ratio(Some(3.0), Some(0.0)), None);
        assert_eq!(ratio(None, Some(1.0)), None);
        assert_eq!(ratio(Some(f64::NAN), Some(1.0)), None);
    }
}
