//! `silt bench fleet`: TPC-H through the fleet client ([`silt_client::fleet`])
//! with 1, 2, 3 ... liquid servers over the throttled store.
//!
//! Per fleet size: fresh servers (empty caches); one untimed pass of the
//! queries fills them (its time is reported as the cold pass); then
//! `--clients` clients run the queries `--rounds` times each in a closed
//! loop: throughput, latency percentiles and the servers' CPU seconds per
//! query. Then, at the largest size, the *kill test*: the same workload
//! while one server is killed (SIGKILL) a third of the way through, every
//! answer checked. And placement: the share of row groups (and of their
//! bytes) that change owner when the fleet grows by one server, computed
//! with the client's rendezvous hash over the data's real layout.
//!
//! With `--workers N`, one more run at the largest size sends the queries
//! through N `silt worker` processes (datafusion-distributed), worker `i`
//! beside server `i`.
//!
//! Every answer is compared with plain DataFusion on the local files.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use datafusion::arrow::array::RecordBatch;
use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
use datafusion::prelude::SessionContext;
use serde::Serialize;
use silt_bench::compare::{check_same, is_ordered};
use silt_bench::link::{Link, LinkSpec};
use silt_bench::results::{LinkConfig, quantile};
use silt_client::fleet::{Fleet, rendezvous_order, row_group_name};
use silt_client::script::run_script_last_query;

use super::child::{ChildGuard, spawn_and_wait};
use super::modes::{StoreSetup, through_link};
use super::server::{ServerProcess, ServerSpec};
use super::suite::{Suite, with_ties_broken};

#[derive(Args, Debug)]
pub struct FleetArgs {
    /// TPC-H scale factor.
    #[arg(long, default_value_t = 1.0)]
    sf: f64,
    /// Where the data lives [default: data/tpch-sf<sf>].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Fleet sizes to run, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    servers: Vec<usize>,
    /// Concurrent clients (closed loop).
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Passes over the queries per client.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// TPC-H queries by number [default: all 22].
    #[arg(long, value_delimiter = ',')]
    queries: Option<Vec<u32>>,
    /// Latency added to every object-store request, milliseconds.
    #[arg(long, default_value_t = 20)]
    latency_ms: u64,
    /// Bandwidth of the link to the object store, MB/s.
    #[arg(long, default_value_t = 100.0)]
    mbps: f64,
    /// The network between the clients (and workers) and the servers, one
    /// link shared by all: BANDWIDTH/RTT (e.g. 1gbit/0.5ms; kbit, mbit,
    /// gbit; us, ms, s) or none (loopback).
    #[arg(long, default_value = "none")]
    link: LinkSpec,
    /// Memory-tier budget of each server.
    #[arg(long, default_value = "8GiB", value_parser = silt_server::config::parse_bytes)]
    memory_budget: u64,
    /// Folder of the results; the run writes into `<out>/<name>/`.
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// The run's name [default: fleet-tpch-sf<sf>].
    #[arg(long)]
    name: Option<String>,
    /// The shared folder (the TPC-H query texts).
    #[arg(long, default_value = "../shared")]
    shared: PathBuf,
    /// Also run the workload distributed (datafusion-distributed) over this
    /// many `silt worker` processes beside the largest fleet's servers; 0:
    /// no distributed run.
    #[arg(long, default_value_t = 0)]
    workers: usize,
    /// The compute-side cache of the fleet client and of each `silt
    /// worker` (e.g. 4GiB): row groups then chosen per row group, each on
    /// its owner. 0 (the default here): every row group pushed to its
    /// owner, so the run measures the fleet's own scaling.
    #[arg(long, default_value = "0", value_parser = silt_server::config::parse_bytes)]
    local_cache: u64,
}

/// One fleet size's (or the kill test's) figures.
#[derive(Debug, Serialize)]
struct FleetRun {
    servers: usize,
    /// `silt worker`s the queries ran on (0: the fleet client alone).
    workers: usize,
    kill: bool,
    cold_pass_s: f64,
    queries: usize,
    failed: usize,
    wrong: usize,
    seconds: f64,
    queries_per_second: f64,
    p50_ms: f64,
    p95_ms: f64,
    /// CPU seconds of all servers per query of the timed workload.
    server_cpu_ms_per_query: f64,
    /// Each server's share of that CPU.
    cpu_share: Vec<f64>,
    /// CPU seconds of all workers per query (0 without workers).
    worker_cpu_ms_per_query: f64,
    /// Bytes across the client-server link during the timed workload, both
    /// directions (`null` without a link).
    link_bytes: Option<u64>,
    /// Per server, what one query of the timed workload cost it (the
    /// inputs of the scale model, `docs/fleet-scale-model.md`). Empty in the
    /// kill test (the killed server's counters die with it).
    per_member: Vec<MemberCost>,
}

/// One server's share of a query, averaged over the timed workload.
#[derive(Debug, Serialize, Default, Clone)]
struct MemberCost {
    cpu_ms_per_query: f64,
    /// Requests it answered (layouts, scoped scans, SQL) per query.
    requests_per_query: f64,
    /// Flight bytes it sent per query.
    bytes_sent_per_query: f64,
    /// Object-store GETs and their bytes per query (0 once warm).
    store_gets_per_query: f64,
    store_bytes_per_query: f64,
}

/// The counters [`MemberCost`] is made of, read from a server's statistics.
fn member_counters(stats: &serde_json::Value) -> [f64; 4] {
    use super::server::metric;
    [
        metric(stats, "silt_queries_total") as f64,
        metric(stats, "silt_flight_bytes_sent_total") as f64,
        metric(stats, "silt_object_store_get_requests_total") as f64,
        metric(stats, "silt_object_store_get_bytes_total") as f64,
    ]
}

/// How much moves when the fleet grows from `from` to `from + 1` servers.
#[derive(Debug, Serialize)]
struct Movement {
    from: usize,
    segments: usize,
    moved_segment_share: f64,
    moved_byte_share: f64,
}

#[derive(Debug, Serialize)]
struct FleetReport {
    name: String,
    data: String,
    clients: usize,
    rounds: usize,
    store_latency_ms: u64,
    store_mbps: f64,
    /// The link between clients and servers (`--link`).
    link: LinkConfig,
    runs: Vec<FleetRun>,
    movement: Vec<Movement>,
    /// Throughput and latency predicted for larger fleets from the runs
    /// ([`super::fleet_model`]); `null` with fewer than two fleet sizes.
    model: Option<Vec<super::fleet_model::Predicted>>,
}

pub async fn run(args: FleetArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !args.servers.is_empty() && args.servers.iter().all(|&n| n > 0),
        "--servers wants fleet sizes of at least 1"
    );
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("data/tpch-sf{}", args.sf)));
    let ids = args.queries.clone().unwrap_or_else(|| (1..=22).collect());
    let suite = super::suite::tpch(&args.shared, &data_dir, args.sf, &ids)?;
    let name = args.name.clone().unwrap_or_else(|| format!("fleet-tpch-sf{}", args.sf));
    let work = data_dir.join("work");
    std::fs::create_dir_all(&work)?;
    let setup = StoreSetup {
        s3: Default::default(),
        latency_ms: args.latency_ms,
        mbps: args.mbps,
        memory_budget: args.memory_budget,
        squeeze_share: None,
        validation: "always".into(),
        local_cache: 0,
        local_cache_form: Default::default(),
        link: args.link.link(),
    };
    let (_store, setup) = super::start_store(&suite, &data_dir, setup)?;
    let link = setup.link.as_ref();
    let spec = ServerSpec {
        memory_form: "liquid",
        memory_budget: args.memory_budget,
        squeeze_share: None,
        store_endpoint: setup.s3.endpoint.clone().unwrap_or_default(),
        store_latency_ms: setup.latency_ms,
        store_mbps: setup.mbps,
        validation: setup.validation.clone(),
    };
    let queries = Arc::new(reference_answers(&suite).await?);

    let mut runs = Vec::new();
    let largest = args.servers.iter().copied().max().unwrap_or(1);
    for &n in &args.servers {
        runs.push(run_fleet(&args, &suite, &spec, &work, link, n, 0, false, &queries).await?);
    }
    if args.workers > 0 {
        runs.push(
            run_fleet(
                &args,
                &suite,
                &spec,
                &work,
                link,
                largest,
                args.workers,
                false,
                &queries,
            )
            .await?,
        );
    }
    if largest > 1 {
        runs.push(run_fleet(&args, &suite, &spec, &work, link, largest, 0, true, &queries).await?);
    }
    let movement = (1..=largest)
        .map(|n| movement(&suite, n))
        .collect::<anyhow::Result<_>>()?;
    let measured: Vec<super::fleet_model::Measured> = runs
        .iter()
        .filter(|r| !r.kill && r.workers == 0 && r.failed == 0)
        .map(|r| super::fleet_model::Measured {
            servers: r.servers,
            cpu_ms_per_query: r.server_cpu_ms_per_query,
            p50_ms: r.p50_ms,
            requests_per_query: r.per_member.iter().map(|m| m.requests_per_query).sum(),
        })
        .collect();
    let model = super::fleet_model::predict(&measured, &row_groups(&suite)?);
    let report = FleetReport {
        name: name.clone(),
        data: suite.data.description.clone(),
        clients: args.clients,
        rounds: args.rounds,
        store_latency_ms: args.latency_ms,
        store_mbps: args.mbps,
        link: args.link.config(),
        runs,
        movement,
        model,
    };
    let dir = args.out.join(&name);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(&report)?)?;
    std::fs::write(dir.join("report.md"), render(&report))?;
    println!("Wrote {}/{{results.json, report.md}}", dir.display());
    let bad: usize = report.runs.iter().map(|r| r.failed + r.wrong).sum();
    anyhow::ensure!(
        bad == 0,
        "{bad} queries failed or gave answers that differ from plain DataFusion"
    );
    Ok(())
}

/// Each query (ties in ORDER BY broken) with plain DataFusion's answer on the local files.
async fn reference_answers(suite: &Suite) -> anyhow::Result<Vec<(String, String, Vec<RecordBatch>)>> {
    let reference = SessionContext::new();
    for stmt in suite.ddl(|t| suite.local_path(t).display().to_string()) {
        reference.sql(&stmt).await?.collect().await?;
    }
    let mut out = Vec::new();
    for q in &suite.queries {
        let probe = run_script_last_query(&reference, &q.sql)
            .await
            .with_context(|| format!("plain DataFusion on {}", q.id))?;
        let spec = with_ties_broken(q, probe.first().map_or(0, |b| b.num_columns()));
        let expected = run_script_last_query(&reference, &spec.sql).await?;
        out.push((q.id.clone(), spec.sql, expected));
    }
    Ok(out)
}

type Queries = Arc<Vec<(String, String, Vec<RecordBatch>)>>;

/// A query of the workload that went wrong.
enum Bad {
    Failed(String),
    Wrong(String),
}

/// A `silt worker` child process (killed when dropped) and its URL.
fn start_worker(local_cache: u64) -> anyhow::Result<(ChildGuard, String)> {
    let exe = std::env::current_exe().context("locating the silt executable")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args([
        "worker",
        "--listen",
        "127.0.0.1:0",
        "--local-cache",
        &local_cache.to_string(),
    ]);
    let (guard, found) = spawn_and_wait(cmd, "silt worker", &[crate::worker::READY], Duration::from_secs(60))?;
    Ok((guard, found[0].clone()))
}

/// One fleet of `n` fresh servers: the cold pass, then the timed workload
/// (with one server killed a third of the way through when `kill`). With
/// `workers`, the queries run distributed over that many `silt worker`s.
/// With a `link`, clients and workers reach every server through a proxy
/// on it (the harness's CPU readings use no connection).
#[allow(clippy::too_many_arguments)]
async fn run_fleet(
    args: &FleetArgs,
    suite: &Suite,
    spec: &ServerSpec,
    work: &Path,
    link: Option<&Link>,
    n: usize,
    workers: usize,
    kill: bool,
    queries: &Queries,
) -> anyhow::Result<FleetRun> {
    let mut servers = Vec::new();
    for _ in 0..n {
        servers.push(ServerProcess::start(spec, suite, work).await?);
    }
    let mut worker_processes = Vec::new();
    for _ in 0..workers {
        worker_processes.push(start_worker(args.local_cache)?);
    }
    let worker_urls: Vec<String> = worker_processes.iter().map(|(_, url)| url.clone()).collect();
    let mut proxies = Vec::new();
    let mut urls: Vec<String> = Vec::new();
    for s in &servers {
        match link {
            Some(link) => {
                let (proxy, url) = through_link(link, &s.flight_url)?;
                proxies.push(proxy);
                urls.push(url);
            }
            None => urls.push(s.flight_url.clone()),
        }
    }
    let link_bytes = || link.map(|l| l.counters()).map(|c| c.to_client + c.to_server);
    let connect = || async {
        let fleet = Arc::new(Fleet::connect(&urls, None)?);
        if !worker_urls.is_empty() {
            return Ok(silt_client::distributed::coordinator_context(fleet, &worker_urls, None).await?);
        }
        let ctx = SessionContext::new();
        // By default the fleet's own scaling: every row group pushed to its
        // owner, no compute-side cache answering warm runs in this process.
        let options = silt_client::SiltTableOptions {
            local_cache_bytes: args.local_cache,
            ..Default::default()
        };
        silt_client::register_fleet_tables_with_options(&ctx, fleet, &options).await?;
        anyhow::Ok(ctx)
    };
    let worker_cpu = |processes: &[(ChildGuard, String)]| -> anyhow::Result<f64> {
        let mut total = 0.0;
        for (guard, _) in processes {
            total += silt_bench::procfs::usage(guard.pid())?.cpu_seconds;
        }
        Ok(total)
    };
    let ctx = connect().await?;
    let started = Instant::now();
    for (id, sql, _) in queries.iter() {
        run_script_last_query(&ctx, sql)
            .await
            .with_context(|| format!("{id} on a fleet of {n}"))?;
    }
    let cold_pass_s = started.elapsed().as_secs_f64();
    let cpu_before: Vec<f64> = servers
        .iter_mut()
        .map(|s| s.usage().map(|u| u.cpu_seconds))
        .collect::<anyhow::Result<_>>()?;
    let worker_cpu_before = worker_cpu(&worker_processes)?;
    let link_before = link_bytes();
    let mut counters_before = Vec::new();
    for s in &servers {
        counters_before.push(member_counters(&s.stats().await?));
    }

    let total = args.clients * args.rounds * queries.len();
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut clients = Vec::new();
    for c in 0..args.clients {
        let (ctx, queries, done, rounds) = (connect().await?, queries.clone(), done.clone(), args.rounds);
        clients.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for i in 0..rounds * queries.len() {
                let (id, sql, expected) = &queries[(i + c) % queries.len()];
                let at = Instant::now();
                let outcome = match run_script_last_query(&ctx, sql).await {
                    Err(e) => Err(Bad::Failed(format!("{id}: {e}"))),
                    Ok(got) => check_same(id, &got, expected, is_ordered(sql)).map_err(Bad::Wrong),
                };
                outcomes.push((at.elapsed().as_secs_f64() * 1e3, outcome));
                done.fetch_add(1, Ordering::Relaxed);
            }
            outcomes
        }));
    }
    let mut victim = None;
    let mut killed_cpu = 0.0;
    if kill {
        while done.load(Ordering::Relaxed) < total / 3 && !clients.iter().all(|c| c.is_finished()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        victim = Some(servers.len() - 1);
        if let Some(mut server) = servers.pop() {
            // Its CPU up to the kill still counts.
            killed_cpu = server.usage()?.cpu_seconds - cpu_before[servers.len()];
            drop(server); // SIGKILL
        }
        println!("  fleet of {n}: killed one server after {} queries", total / 3);
    }
    let mut latencies = Vec::new();
    let (mut failed, mut wrong) = (0, 0);
    for c in clients {
        for (ms, outcome) in c.await? {
            match outcome {
                Ok(()) => latencies.push(ms),
                Err(Bad::Failed(e)) => {
                    eprintln!("  failed: {}", e.lines().next().unwrap_or_default());
                    failed += 1;
                }
                Err(Bad::Wrong(e)) => {
                    eprintln!("  wrong: {}", e.lines().next().unwrap_or_default());
                    wrong += 1;
                }
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let link_bytes = link_bytes().zip(link_before).map(|(after, before)| after - before);
    let mut cpu: Vec<f64> = servers
        .iter_mut()
        .zip(&cpu_before)
        .map(|(s, before)| s.usage().map(|u| u.cpu_seconds - before))
        .collect::<anyhow::Result<_>>()?;
    if victim.is_some() {
        cpu.push(killed_cpu);
    }
    let cpu_total: f64 = cpu.iter().sum();
    let mut per_member = Vec::new();
    if victim.is_none() {
        for ((s, before), cpu) in servers.iter().zip(&counters_before).zip(&cpu) {
            let after = member_counters(&s.stats().await?);
            let per_query = |i: usize| (after[i] - before[i]) / total as f64;
            per_member.push(MemberCost {
                cpu_ms_per_query: cpu * 1e3 / total as f64,
                requests_per_query: per_query(0),
                bytes_sent_per_query: per_query(1),
                store_gets_per_query: per_query(2),
                store_bytes_per_query: per_query(3),
            });
        }
    }
    let workers_cpu = worker_cpu(&worker_processes)? - worker_cpu_before;
    latencies.sort_by(f64::total_cmp);
    let run = FleetRun {
        servers: n,
        workers,
        kill,
        cold_pass_s,
        queries: total,
        failed,
        wrong,
        seconds,
        queries_per_second: total as f64 / seconds,
        p50_ms: quantile(&latencies, 0.5),
        p95_ms: quantile(&latencies, 0.95),
        server_cpu_ms_per_query: cpu_total * 1e3 / total as f64,
        cpu_share: cpu.iter().map(|c| c / cpu_total.max(1e-9)).collect(),
        worker_cpu_ms_per_query: workers_cpu * 1e3 / total as f64,
        link_bytes,
        per_member,
    };
    drop(proxies);
    println!(
        "  fleet of {n}{}{}: cold pass {:.1} s, {:.2} queries/s, p50 {:.0} ms, p95 {:.0} ms, {:.0} server CPU ms/query, {} failed, {} wrong{}",
        if kill { " (kill test)" } else { "" },
        if workers > 0 {
            format!(" on {workers} workers")
        } else {
            String::new()
        },
        run.cold_pass_s,
        run.queries_per_second,
        run.p50_ms,
        run.p95_ms,
        run.server_cpu_ms_per_query,
        run.failed,
        run.wrong,
        victim.map_or(String::new(), |v| format!(" (server {v} killed)"))
    );
    Ok(run)
}

/// The row groups of the suite's files (their bytes), as a fleet places
/// them. Objects are named `<prefix>/<file>` and servers by made-up URLs:
/// the shares depend on the hash's spread, not on the names' spelling.
fn movement(suite: &Suite, from: usize) -> anyhow::Result<Movement> {
    let servers = member_names(from + 1);
    let before: Vec<&str> = servers[..from].iter().map(String::as_str).collect();
    let after: Vec<&str> = servers.iter().map(String::as_str).collect();
    let (mut segments, mut moved, mut bytes, mut moved_bytes) = (0usize, 0usize, 0u64, 0u64);
    for (name, size) in row_groups(suite)? {
        segments += 1;
        bytes += size;
        if rendezvous_order(&before, &name)[0] != rendezvous_order(&after, &name)[0] {
            moved += 1;
            moved_bytes += size;
        }
    }
    Ok(Movement {
        from,
        segments,
        moved_segment_share: moved as f64 / segments.max(1) as f64,
        moved_byte_share: moved_bytes as f64 / bytes.max(1) as f64,
    })
}

/// `n` made-up member URLs: the shares depend on the hash's spread, not on
/// the names' spelling.
pub(super) fn member_names(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("http://10.0.{}.{}:50051", i / 250, i % 250 + 1))
        .collect()
}

/// Every row group of the suite's files as a fleet names it for placement,
/// with its compressed bytes.
pub(super) fn row_groups(suite: &Suite) -> anyhow::Result<Vec<(String, u64)>> {
    let mut groups = Vec::new();
    for t in &suite.tables {
        let path = suite.local_path(t);
        for file in silt_bench::files::files_with_extension(&path, "parquet") {
            let reader = SerializedFileReader::new(std::fs::File::open(&file)?)?;
            let object = format!(
                "{}/{}",
                t.prefix.trim_end_matches('/'),
                file.file_name().unwrap_or_default().to_string_lossy()
            );
            for (rg, meta) in reader.metadata().row_groups().iter().enumerate() {
                groups.push((row_group_name(&object, rg as u32), meta.compressed_size().max(0) as u64));
            }
        }
    }
    Ok(groups)
}

fn render(r: &FleetReport) -> String {
    let mut s = format!(
        "# {} — TPC-H through a fleet of liquid servers\n\nData: {}. Store: {} ms per request, {} MB/s. {} clients, {} passes each over the queries (closed loop); every answer checked against plain DataFusion. All servers and clients share this machine.\n\n",
        r.name, r.data, r.store_latency_ms, r.store_mbps, r.clients, r.rounds
    );
    s.push_str(&silt_bench::report::link_sentence(Some(&r.link)));
    s.push_str("\n\n");
    s.push_str("| servers | workers | kill test | cold pass (s) | queries | failed | wrong | queries/s | p50 (ms) | p95 (ms) | server CPU ms/query | worker CPU ms/query | CPU share per server | link bytes/query |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n");
    for run in &r.runs {
        let shares: Vec<String> = run.cpu_share.iter().map(|c| format!("{:.0}%", c * 100.0)).collect();
        s.push_str(&format!(
            "| {} | {} | {} | {:.1} | {} | {} | {} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} |\n",
            run.servers,
            run.workers,
            if run.kill { "yes" } else { "no" },
            run.cold_pass_s,
            run.queries,
            run.failed,
            run.wrong,
            run.queries_per_second,
            run.p50_ms,
            run.p95_ms,
            run.server_cpu_ms_per_query,
            run.worker_cpu_ms_per_query,
            shares.join(" / "),
            run.link_bytes.map_or("—".into(), |b| silt_bench::report::human_bytes(
                b / run.queries.max(1) as u64
            ))
        ));
    }
    s.push_str("\n## Per member, per query of the timed workload\n\n| servers | member | CPU ms | requests | bytes sent | store GETs | store bytes |\n|---:|---:|---:|---:|---:|---:|---:|\n");
    for run in r.runs.iter().filter(|r| !r.kill && r.workers == 0) {
        for (i, m) in run.per_member.iter().enumerate() {
            s.push_str(&format!(
                "| {} | {} | {:.1} | {:.1} | {} | {:.2} | {} |\n",
                run.servers,
                i,
                m.cpu_ms_per_query,
                m.requests_per_query,
                silt_bench::report::human_bytes(m.bytes_sent_per_query as u64),
                m.store_gets_per_query,
                silt_bench::report::human_bytes(m.store_bytes_per_query as u64),
            ));
        }
    }
    s.push_str("\n## Row groups that change owner when one server joins (rendezvous hashing over the data's layout)\n\nWhen that server leaves again, exactly the same row groups move back (the ones it owned), so the shares are those of a leave too.\n\n| from | to | row groups | moved (row groups) | moved (bytes) | ideal |\n|---:|---:|---:|---:|---:|---:|\n");
    for m in &r.movement {
        s.push_str(&format!(
            "| {} | {} | {} | {:.3} | {:.3} | {:.3} |\n",
            m.from,
            m.from + 1,
            m.segments,
            m.moved_segment_share,
            m.moved_byte_share,
            1.0 / (m.from + 1) as f64
        ));
    }
    if let Some(model) = &r.model {
        s.push_str(&super::fleet_model::render(model));
    }
    s
}
