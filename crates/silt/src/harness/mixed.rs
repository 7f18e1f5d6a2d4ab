//! `silt bench mixed`: N clients at once running a mix of TPC-H and
//! ClickBench queries against one server whose memory and disk tiers are
//! smaller than the working set, once per cache configuration:
//!
//! - `plan-aware`: the server's defaults (scan sets protect what planned
//!   and queued queries will read; `s3-fifo` orders the memory tier's
//!   unreserved batches, `weighted-lfu` the disk's), O_DIRECT disk I/O;
//! - `plan-aware-buffered`: the same with buffered disk I/O;
//! - one per policy (`lru`, `lfu`, `sieve`, `weighted-lfu`, `s3-fifo`):
//!   that policy alone in both tiers, no scan sets, O_DIRECT;
//! - `plan-aware:<policy>`: scan sets over that policy in both tiers;
//! - `plan-aware-running`, `plan-aware-running:<policy>`: the same with
//!   only running queries' scan sets reserving (`--plan-horizon running`).
//!
//! The working set is measured first: the mix once, sequentially, on
//! unbounded tiers; the budgets are then `--budget-fraction` of what each
//! tier held. Every configuration gets a fresh server (empty tiers) on the
//! same throttled loopback store; every client runs the mix `--rounds`
//! times in its own rotated order, `--max-concurrent-queries` executing at
//! once. Every answer is checked against plain DataFusion on the local
//! files. Reported per configuration: store GETs and bytes, bytes the
//! memory tier served and decoded, page-buffer misses, bytes the disk
//! tier served, the process's block-device reads (`/proc/self/io`; the
//! loopback store runs in this process too), memory and disk hit ratios,
//! reserved evictions, and query latency percentiles.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use datafusion::arrow::array::RecordBatch;
use datafusion::prelude::SessionContext;
use silt_bench::compare::{check_same, is_ordered};
use silt_bench::hits::HitsModel;
use silt_bench::local_s3::LocalS3;
use silt_bench::results::QuerySpec;
use silt_cache::policy::PolicyKind;
use silt_client::script::run_script_last_query;
use silt_server::ServerConfig;
use silt_server::config::TableConfig;

use super::modes::through_link;
use super::suite::{self, Suite, with_ties_broken};
use silt_bench::link::{Link, LinkSpec};

/// Options of `silt bench mixed`.
#[derive(clap::Args, Debug, Clone)]
pub struct MixedArgs {
    /// Clients running at once.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Times each client runs the whole mix.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// TPC-H scale factor.
    #[arg(long, default_value_t = 1.0)]
    sf: f64,
    /// Rows of the hits-like ClickBench table (realistic model).
    #[arg(long, default_value_t = 1_000_000)]
    hits_rows: u64,
    /// TPC-H queries of the mix.
    #[arg(long, value_delimiter = ',', default_value = "1,3,5,6,10,12,14,19")]
    tpch: Vec<u32>,
    /// ClickBench queries of the mix (0-based, as in the queries folder).
    #[arg(long, value_delimiter = ',', default_value = "2,7,10,19,20,21,30,31")]
    clickbench: Vec<u32>,
    /// Runs of every configuration, interleaved (all configurations once,
    /// then again): one run is one interleaving of the clients' queries, and
    /// runs of one configuration differ (docs/bench-results.md). The report
    /// shows each configuration's run with the median store GETs, and the
    /// GETs of every run.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeats: u32,
    /// Budgets as a fraction of the working set each tier held on the unbounded run.
    #[arg(long, default_value_t = 0.5)]
    budget_fraction: f64,
    /// Queries executing at once on the server (the rest queue).
    #[arg(long, default_value_t = 4)]
    max_concurrent_queries: usize,
    /// Configurations to run, comma separated (see the module doc).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "plan-aware,plan-aware-running,plan-aware-buffered,lru,lfu,sieve,weighted-lfu,s3-fifo"
    )]
    configs: Vec<String>,
    /// Latency added to every object-store request, milliseconds.
    #[arg(long, default_value_t = 20)]
    latency_ms: u64,
    /// Bandwidth of the link to the object store, MB/s.
    #[arg(long, default_value_t = 100.0)]
    mbps: f64,
    /// The network between the clients and the server, one link shared by
    /// all clients: BANDWIDTH/RTT (e.g. 1gbit/0.5ms; kbit, mbit, gbit; us,
    /// ms, s) or none (loopback).
    #[arg(long, default_value = "none")]
    link: LinkSpec,
    /// Folder of the results; the run writes `<out>/<name>/report.md`.
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// The run's name.
    #[arg(long, default_value = "mixed")]
    name: String,
    /// The shared folder (query texts, the nano_hits seed).
    #[arg(long, default_value = "../shared")]
    shared: PathBuf,
    /// Where the generated data sets are kept (reused between runs).
    #[arg(long, default_value = "data")]
    data_dir: PathBuf,
}

impl MixedArgs {
    /// A run on tiny data for `silt bench smoke`: both kinds of
    /// configuration (plan-aware and a policy alone), two clients, no
    /// throttling; it checks every answer like any run.
    pub fn smoke(out: PathBuf, shared: PathBuf, data_dir: PathBuf) -> Self {
        MixedArgs {
            clients: 2,
            rounds: 1,
            repeats: 2,
            sf: 0.01,
            hits_rows: 30_000,
            tpch: vec![1, 6],
            clickbench: vec![0, 10],
            budget_fraction: 0.5,
            max_concurrent_queries: 1,
            configs: vec!["plan-aware:sieve".into(), "sieve".into()],
            latency_ms: 0,
            mbps: 10_000.0,
            link: LinkSpec::none(),
            out,
            name: "smoke-mixed".into(),
            shared,
            data_dir,
        }
    }

    /// The folder the run writes its report (and keeps its store) in.
    pub fn run_dir(&self) -> PathBuf {
        self.out.join(&self.name)
    }
}

/// One cache configuration.
#[derive(Debug, Clone)]
struct CacheConfig {
    name: String,
    plan_aware: bool,
    horizon: silt_cache::PlanHorizon,
    direct_io: bool,
    /// `None`: the server's default policies.
    policy: Option<PolicyKind>,
}

fn parse_config(name: &str) -> anyhow::Result<CacheConfig> {
    let horizon = if name.starts_with("plan-aware-running") {
        silt_cache::PlanHorizon::Running
    } else {
        silt_cache::PlanHorizon::Queued
    };
    let (plan_aware, direct_io, policy) = match name {
        "plan-aware" | "plan-aware-running" => (true, true, None),
        "plan-aware-buffered" => (true, false, None),
        other => match other
            .strip_prefix("plan-aware:")
            .or_else(|| other.strip_prefix("plan-aware-running:"))
        {
            Some(policy) => (true, true, Some(policy.parse::<PolicyKind>()?)),
            None => (false, true, Some(other.parse::<PolicyKind>()?)),
        },
    };
    Ok(CacheConfig {
        name: name.to_string(),
        plan_aware,
        horizon,
        direct_io,
        policy,
    })
}

/// What one configuration measured.
#[derive(Debug, Default)]
struct Measured {
    name: String,
    store_gets: f64,
    /// Store GETs of every run of the configuration (`--repeats`), in run order.
    gets_of_runs: Vec<f64>,
    /// p99 latency (ms) of every run, in run order: the median-GET run's
    /// own p99 is one sample of a noisy tail.
    p99_of_runs: Vec<f64>,
    store_bytes: f64,
    /// Bytes of column batches the memory tier served.
    memory_served_bytes: f64,
    /// Bytes of column batches decoded and admitted (memory-tier misses).
    memory_admitted_bytes: f64,
    /// Pages the page buffer lacked (looked for on disk, then fetched).
    page_buffer_misses: f64,
    disk_served_bytes: f64,
    /// Read requests the disk tier made (one per run of neighbouring slots).
    disk_reads: f64,
    /// Pages the disk tier served.
    disk_hits: f64,
    device_read_bytes: u64,
    memory_hit_ratio: f64,
    disk_hit_ratio: f64,
    reserved_evictions: f64,
    evictions: f64,
    latencies: Vec<Duration>,
    wrong: Vec<String>,
    wall: Duration,
    /// Bytes across the client-server link, both directions (`None`
    /// without a link).
    link_bytes: Option<u64>,
}

/// Budgets of the bounded runs.
#[derive(Debug, Clone, Copy)]
struct Budgets {
    memory: u64,
    pages: u64,
    disk: u64,
}

pub async fn mixed(args: MixedArgs) -> anyhow::Result<()> {
    let configs: Vec<CacheConfig> = args
        .configs
        .iter()
        .map(|c| parse_config(c))
        .collect::<anyhow::Result<_>>()?;
    let data = &args.data_dir;
    let tpch = suite::tpch(
        &args.shared,
        &data.join(format!("tpch-sf{}", args.sf)),
        args.sf,
        &args.tpch,
    )?;
    let hits = suite::clickbench(
        &args.shared,
        &data.join(format!("hits-realistic-{}", args.hits_rows)),
        args.hits_rows,
        HitsModel::Realistic,
        &args.clickbench,
    )?;
    let root = std::env::current_dir()?.join(args.run_dir());
    std::fs::create_dir_all(&root)?;
    let store_root = root.join("store");
    let s3 = LocalS3::start(&store_root)
        .await
        .context("starting the loopback store")?;
    upload_buckets(&s3, &[&tpch, &hits]).await?;
    let (queries, references) = reference_answers(&[&tpch, &hits]).await?;
    // One link for the whole run, every configuration's clients on it.
    let link = args.link.link();
    println!(
        "{} queries in the mix, {} clients x {} rounds",
        queries.len(),
        args.clients,
        args.rounds
    );

    // The working set, and the floor of store traffic: the same mix (clients,
    // rounds) on unbounded tiers, where every miss is a first touch.
    let unbounded = Budgets {
        memory: 64 << 30,
        pages: 64 << 30,
        disk: 64 << 30,
    };
    let calibration = parse_config("plan-aware")?;
    let (mut floor, held) = run_config(
        &args,
        &s3,
        link.as_ref(),
        &[&tpch, &hits],
        &calibration,
        unbounded,
        &queries,
        &references,
        args.clients,
        args.rounds,
    )
    .await?;
    let fraction = |b: u64| ((b as f64 * args.budget_fraction) as u64).max(1 << 20);
    let budgets = Budgets {
        memory: fraction(held.memory),
        pages: fraction(held.pages),
        disk: fraction(held.disk),
    };
    println!(
        "working set: memory {} B, pages {} B, disk {} B; budgets {budgets:?}",
        held.memory, held.pages, held.disk
    );
    floor.name = "unbounded (floor)".into();
    println!("{}", row(&floor));

    let mut runs: Vec<Vec<Measured>> = configs.iter().map(|_| Vec::new()).collect();
    for _ in 0..args.repeats {
        for (config, runs) in configs.iter().zip(&mut runs) {
            let (measured, _) = run_config(
                &args,
                &s3,
                link.as_ref(),
                &[&tpch, &hits],
                config,
                budgets,
                &queries,
                &references,
                args.clients,
                args.rounds,
            )
            .await?;
            println!("{}", row(&measured));
            runs.push(measured);
        }
    }
    let results: Vec<Measured> = runs.into_iter().map(median_run).collect();
    let report = report(&args, held, budgets, &floor, &results);
    std::fs::write(root.join("report.md"), &report)?;
    println!("\n{report}\nwrote {}", root.join("report.md").display());
    let wrong: Vec<&String> = std::iter::once(&floor).chain(&results).flat_map(|r| &r.wrong).collect();
    anyhow::ensure!(wrong.is_empty(), "answers differ from DataFusion: {wrong:?}");
    Ok(())
}

/// Uploads the suites' bucket folders into the loopback store with S3 PUTs
/// (once: objects already there are kept). Not symlinks to the folders: the
/// S3 server recomputes the MD5 of a file placed in its folder directly on
/// every GET — of the whole object, for a ranged GET too — which took 60% of
/// this benchmark's CPU (`perf`), made every GET cost CPU in proportion to
/// its object's size, and so tied latency to the GET count and made runs
/// of one configuration differ up to 3x. Store roots of earlier runs whose
/// buckets are such symlinks get real folders.
async fn upload_buckets(s3: &LocalS3, suites: &[&Suite]) -> anyhow::Result<()> {
    for s in suites {
        for bucket in s.buckets() {
            let held = s3.root().join(&bucket);
            if held.is_symlink() {
                std::fs::remove_file(&held).with_context(|| format!("removing the link {}", held.display()))?;
            }
            s3.upload_dir(&s.src.join(&bucket), &bucket)
                .await
                .map_err(|e| anyhow::anyhow!("uploading {bucket}: {e}"))?;
        }
    }
    Ok(())
}

/// Every query of the suites with its ties broken, and plain DataFusion's
/// answer to it on the local files.
async fn reference_answers(suites: &[&Suite]) -> anyhow::Result<(Vec<QuerySpec>, Vec<Vec<RecordBatch>>)> {
    let ctx = SessionContext::new();
    for s in suites {
        for ddl in s.ddl(|t| s.local_path(t).display().to_string()) {
            ctx.sql(&ddl).await?.collect().await?;
        }
    }
    let (mut queries, mut answers) = (Vec::new(), Vec::new());
    for s in suites {
        for q in &s.queries {
            let probe = run_script_last_query(&ctx, &q.sql).await?;
            let q = with_ties_broken(q, probe.first().map_or(0, |b| b.num_columns()));
            answers.push(run_script_last_query(&ctx, &q.sql).await?);
            queries.push(QuerySpec {
                id: format!("{}-{}", s.kind, q.id),
                sql: q.sql,
            });
        }
    }
    Ok((queries, answers))
}

/// Bytes each tier held at the end of a run.
#[derive(Debug, Clone, Copy, Default)]
struct Held {
    memory: u64,
    pages: u64,
    disk: u64,
}

/// One fresh server with `config` and `budgets`; `clients` clients each
/// running the mix `rounds` times.
#[allow(clippy::too_many_arguments)]
async fn run_config(
    args: &MixedArgs,
    s3: &LocalS3,
    link: Option<&Link>,
    suites: &[&Suite],
    config: &CacheConfig,
    budgets: Budgets,
    queries: &[QuerySpec],
    references: &[Vec<RecordBatch>],
    clients: usize,
    rounds: usize,
) -> anyhow::Result<(Measured, Held)> {
    let cache_dir = tempfile::Builder::new()
        .prefix("silt-mixed-")
        .tempdir_in(args.run_dir())?;
    let mut cfg = ServerConfig {
        listen: "127.0.0.1:0".parse()?,
        cache_dir: cache_dir.path().to_path_buf(),
        memory_budget: budgets.memory,
        page_memory_budget: budgets.pages,
        disk_budget: budgets.disk,
        plan_aware: config.plan_aware,
        plan_horizon: config.horizon,
        direct_io: config.direct_io,
        max_concurrent_queries: args.max_concurrent_queries,
        // Budgets stay what the run set, whatever else the machine does.
        memory_pressure_floor: 0,
        ..Default::default()
    };
    if let Some(policy) = config.policy {
        cfg.memory_policy = policy;
        cfg.disk_policy = policy;
    }
    cfg.s3 = s3.s3_settings();
    cfg.store.latency = Duration::from_millis(args.latency_ms);
    cfg.store.mbps = Some(args.mbps);
    for s in suites {
        for t in &s.tables {
            cfg.tables.insert(
                t.name.clone(),
                TableConfig {
                    url: format!("s3://{}/{}", t.bucket, t.prefix),
                    binary_as_string: t.binary_as_string,
                    ..Default::default()
                },
            );
        }
        for (name, sql) in &s.views {
            cfg.views.insert(name.clone(), sql.clone());
        }
    }
    let server = silt_server::start(cfg).await.context("starting the server")?;
    let (_proxy, url) = match link {
        Some(link) => {
            let (proxy, url) = through_link(link, &server.flight_url())?;
            (Some(proxy), url)
        }
        None => (None, server.flight_url()),
    };
    let link_bytes = || link.map(|l| l.counters()).map(|c| c.to_client + c.to_server);
    let link_before = link_bytes();
    let device_before = device_read_bytes();
    let started = Instant::now();
    let runs = (0..clients).map(|c| {
        let url = url.clone();
        async move {
            let ctx = SessionContext::new();
            // The server's policies are measured: no compute-side cache in front of them.
            let client = silt_client::SiltClient::connect(&url).await?;
            silt_client::register_tables_with_options(&ctx, &client, &super::modes::pushdown_only()).await?;
            let mut out = Vec::new();
            for round in 0..rounds {
                for k in 0..queries.len() {
                    let i = (k + c * 3 + round) % queries.len();
                    let t = Instant::now();
                    let got = run_script_last_query(&ctx, &queries[i].sql).await;
                    let elapsed = t.elapsed();
                    let verdict = match got {
                        Err(e) => Err(format!("{}: {e}", queries[i].id)),
                        Ok(got) => check_same(&queries[i].id, &got, &references[i], is_ordered(&queries[i].sql)),
                    };
                    out.push((elapsed, verdict.err()));
                }
            }
            anyhow::Ok(out)
        }
    });
    let outcomes = futures::future::join_all(runs).await;
    let wall = started.elapsed();
    let link_bytes = link_bytes().zip(link_before).map(|(after, before)| after - before);
    let engine = &server.engine;
    let snapshot = engine.metrics().snapshot();
    let get = |k: &str| snapshot.get(k).copied().unwrap_or(0.0);
    let ratio = |tier: &str| {
        let hits = get(&format!("silt_cache_hits_total{{tier=\"{tier}\"}}"));
        let misses = get(&format!("silt_cache_misses_total{{tier=\"{tier}\"}}"));
        if hits + misses > 0.0 {
            hits / (hits + misses)
        } else {
            0.0
        }
    };
    let mut measured = Measured {
        name: config.name.clone(),
        store_gets: get("silt_object_store_get_requests_total"),
        store_bytes: get("silt_object_store_get_bytes_total"),
        memory_served_bytes: get("silt_cache_hit_bytes_total{tier=\"memory\"}"),
        memory_admitted_bytes: get("silt_cache_miss_bytes_total{tier=\"memory\"}"),
        page_buffer_misses: get("silt_cache_misses_total{tier=\"pages\"}"),
        disk_served_bytes: get("silt_cache_hit_bytes_total{tier=\"disk\"}"),
        disk_reads: get("silt_cache_disk_reads_total"),
        disk_hits: get("silt_cache_hits_total{tier=\"disk\"}"),
        device_read_bytes: device_read_bytes().saturating_sub(device_before),
        memory_hit_ratio: ratio("memory"),
        disk_hit_ratio: ratio("disk"),
        reserved_evictions: get("silt_cache_reserved_evictions_total{tier=\"memory\"}")
            + get("silt_cache_reserved_evictions_total{tier=\"disk\"}"),
        evictions: get("silt_cache_evictions_total{tier=\"memory\"}")
            + get("silt_cache_evictions_total{tier=\"disk\"}"),
        wall,
        link_bytes,
        ..Default::default()
    };
    for outcome in outcomes {
        for (elapsed, wrong) in outcome? {
            measured.latencies.push(elapsed);
            measured.wrong.extend(wrong);
        }
    }
    let tiers = engine.tiers();
    let held = Held {
        memory: tiers.batches().weighted_size(),
        pages: tiers.pages().memory().weighted_size(),
        disk: engine.disk_tier().map_or(0, |d| d.used_bytes()),
    };
    server.shutdown().await.ok();
    Ok((measured, held))
}

/// Bytes this process caused to be read from block devices (`/proc/self/io`).
fn device_read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("read_bytes:").and_then(|v| v.trim().parse().ok()))
        })
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

/// Of one configuration's runs, the one with the median store GETs (the
/// lower middle of an even count), carrying every run's GETs and every
/// wrong answer of any run.
fn median_run(mut runs: Vec<Measured>) -> Measured {
    let gets: Vec<f64> = runs.iter().map(|m| m.store_gets).collect();
    let p99s: Vec<f64> = runs.iter().map(|m| p99(&m.latencies)).collect();
    let wrong: Vec<String> = runs.iter().flat_map(|m| m.wrong.clone()).collect();
    runs.sort_by(|a, b| a.store_gets.total_cmp(&b.store_gets));
    let mut median = runs.swap_remove((runs.len() - 1) / 2);
    median.gets_of_runs = gets;
    median.p99_of_runs = p99s;
    median.wrong = wrong;
    median
}

/// The 99th percentile of `latencies`, in ms.
fn p99(latencies: &[Duration]) -> f64 {
    let mut l = latencies.to_vec();
    l.sort();
    percentile(&l, 0.99)
}

/// `values` of every run, or `own` for a configuration run once.
fn of_runs(values: &[f64], own: f64) -> String {
    if values.is_empty() {
        return format!("{own:.0}");
    }
    let shown: Vec<String> = values.iter().map(|v| format!("{v:.0}")).collect();
    shown.join(", ")
}

fn row(m: &Measured) -> String {
    let mut l = m.latencies.clone();
    l.sort();
    format!(
        "| {} | {:.0} | {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.1} | {:.0} | {:.2} | {:.1} | {:.3} | {:.3} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {:.1} | {} | {} |",
        m.name,
        m.store_gets,
        of_runs(&m.gets_of_runs, m.store_gets),
        m.store_bytes / 1e6,
        m.memory_served_bytes / 1e6,
        m.memory_admitted_bytes / 1e6,
        m.page_buffer_misses,
        m.disk_served_bytes / 1e6,
        m.disk_reads,
        if m.disk_reads > 0.0 {
            m.disk_hits / m.disk_reads
        } else {
            0.0
        },
        m.device_read_bytes as f64 / 1e6,
        m.memory_hit_ratio,
        m.disk_hit_ratio,
        m.evictions,
        m.reserved_evictions,
        percentile(&l, 0.5),
        percentile(&l, 0.95),
        percentile(&l, 0.99),
        of_runs(&m.p99_of_runs, percentile(&l, 0.99)),
        m.wall.as_secs_f64(),
        m.link_bytes.map_or("—".into(), |b| format!("{:.1}", b as f64 / 1e6)),
        m.wrong.len()
    )
}

fn report(args: &MixedArgs, held: Held, budgets: Budgets, floor: &Measured, results: &[Measured]) -> String {
    let mut out = format!(
        "# Mixed workload: {} clients x {} rounds, TPC-H SF {} ({:?}) + ClickBench {} rows ({:?})\n\n\
         Store: {} ms per request, {} MB/s. Queries executing at once: {}. Working set (unbounded run): \
         memory tier {:.1} MB, page buffer {:.1} MB, disk tier {:.1} MB; budgets x{}: {:.1} / {:.1} / {:.1} MB. \
         {} run(s) per configuration, interleaved; each row is the run with the median store GETs. \
         The first row is that unbounded run (same clients and rounds): its store GETs are the floor no \
         eviction policy goes below (first touches only).\n\n\
         {}\n\n\
         | config | store GETs | GETs of each run | store MB | memory MB served | memory MB decoded | page-buffer misses | disk-tier MB served | disk reads | pages per read | device MB read | memory hit ratio | disk hit ratio | evictions | reserved evictions | p50 ms | p95 ms | p99 ms | p99 ms of each run | wall s | link MB | wrong |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        args.clients,
        args.rounds,
        args.sf,
        args.tpch,
        args.hits_rows,
        args.clickbench,
        args.latency_ms,
        args.mbps,
        args.max_concurrent_queries,
        held.memory as f64 / 1e6,
        held.pages as f64 / 1e6,
        held.disk as f64 / 1e6,
        args.budget_fraction,
        budgets.memory as f64 / 1e6,
        budgets.pages as f64 / 1e6,
        budgets.disk as f64 / 1e6,
        args.repeats,
        silt_bench::report::link_sentence(Some(&args.link.config())),
    );
    for m in std::iter::once(floor).chain(results) {
        out.push_str(&row(m));
        out.push('\n');
    }
    out
}
