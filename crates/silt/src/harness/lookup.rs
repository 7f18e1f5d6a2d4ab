//! `silt bench lookup`: point lookups (`SELECT id, data FROM lookup WHERE
//! id = ?`, random ids) in a closed loop with C concurrent clients, for each
//! mode: p50/p90/p99 latency, lookups per second and CPU per lookup. Every
//! answer is checked: exactly the row asked for, payload byte for byte.
//!
//! Pushdown modes send the whole statement to the server (Flight SQL: plan
//! and run there, metadata and data from its tiers); `direct` and
//! `file-server` plan and run in the client's DataFusion.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use datafusion::arrow::array::{Array, BinaryArray, Int64Array, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::prelude::SessionContext;
use silt_bench::link::LinkSpec;
use silt_bench::lookup as table;
use silt_bench::results::{DataSet, LookupConfig, LookupResult, LookupResults, SCHEMA_VERSION, quantile};
use silt_client::SiltClient;
use tokio::sync::Barrier;

use super::modes::{Mode, Session, StoreSetup};
use super::suite::{Suite, TableSpec};

#[derive(Args, Debug)]
pub struct LookupArgs {
    /// Rows of the lookup table (generated once; ~1 KiB each).
    #[arg(long, default_value_t = 1_000_000)]
    pub(super) rows: u64,
    /// Concurrent clients (closed loop: each waits for its answer).
    #[arg(long, default_value_t = 4)]
    pub(super) clients: usize,
    /// Keys per call (`WHERE id IN (...)` / one `LookupRequest` with that
    /// many keys); a call's latency is that of the whole batch.
    #[arg(long, default_value_t = 1)]
    pub(super) keys_per_call: usize,
    /// Seconds to measure each mode (after the warm-up).
    #[arg(long, default_value_t = 10.0)]
    pub(super) seconds: f64,
    /// Untimed lookups per client before measuring.
    #[arg(long, default_value_t = 20)]
    pub(super) warmup: usize,
    /// Modes, comma separated: direct, file-server, parquet-pushdown, arrow-pushdown, liquid, local.
    #[arg(long, value_delimiter = ',', default_value = "direct,liquid")]
    pub(super) modes: Vec<String>,
    /// Latency added to every object-store request, milliseconds.
    #[arg(long, default_value_t = 20)]
    pub(super) latency_ms: u64,
    /// The network between the clients and the cache server: BANDWIDTH/RTT
    /// (e.g. 1gbit/0.5ms, 100mbit/2ms; kbit, mbit, gbit; us, ms, s) or none (loopback).
    #[arg(long, default_value = "none")]
    pub(super) link: LinkSpec,
    /// Bandwidth of the link to the object store, MB/s.
    #[arg(long, default_value_t = 100.0)]
    pub(super) mbps: f64,
    /// Validation of the servers' table. Point-lookup tables are typically
    /// immutable files (feature stores, Iceberg data files): `always` would
    /// add one HEAD to the store per lookup.
    #[arg(long, default_value = "immutable")]
    pub(super) validation: String,
    /// How pushdown modes ask: `sql` (a Flight SQL statement, which the
    /// server answers on its lookup path) or `lookup` (Silt's one-call
    /// `LookupRequest`, `SiltClient::lookup`).
    #[arg(long, default_value = "lookup", value_parser = ["sql", "lookup"])]
    pub(super) api: String,
    /// Warm the server before measuring (`silt preload`): `disk` (footers and
    /// column chunks in the disk tier), `memory` (also decoded into the
    /// memory tier), or `none` (only the warm-up lookups warm it).
    #[arg(long, default_value = "none", value_parser = ["none", "disk", "memory"])]
    pub(super) preload: String,
    /// Where the data lives [default: data/lookup-<rows>].
    #[arg(long)]
    pub(super) data_dir: Option<PathBuf>,
    /// Folder of the results; the run writes into `<out>/<name>/`.
    #[arg(long, default_value = "bench-results")]
    pub(super) out: PathBuf,
    /// The run's name [default: lookup-<rows>].
    #[arg(long)]
    pub(super) name: Option<String>,
}

const SQL: &str = "SELECT id, data FROM lookup WHERE id = ?";

fn sql_for(ids: &[i64]) -> String {
    match ids {
        [id] => SQL.replace('?', &id.to_string()),
        _ => {
            let list: Vec<String> = ids.iter().map(i64::to_string).collect();
            SQL.replace("= ?", &format!("IN ({})", list.join(", ")))
        }
    }
}

/// How one client asks.
#[derive(Clone)]
enum Asker {
    /// Plan and run in a client-side DataFusion context.
    Local(SessionContext),
    /// The whole statement on the server.
    Remote(SiltClient),
    /// One `LookupRequest` per key.
    Lookup(SiltClient),
}

impl Asker {
    async fn ask(&self, ids: &[i64]) -> anyhow::Result<Vec<RecordBatch>> {
        let sql = sql_for(ids);
        match self {
            Asker::Local(ctx) => Ok(ctx.sql(&sql).await?.collect().await?),
            Asker::Remote(client) => Ok(client.sql(&sql).await?),
            Asker::Lookup(client) => {
                let keys = Arc::new(Int64Array::from(ids.to_vec()));
                let columns = Some(vec!["id".to_string(), "data".to_string()]);
                Ok(client.lookup("lookup", "id", keys, columns).await?)
            }
        }
    }
}

/// Exactly one row per distinct id asked for, each with its payload.
/// Engines may return the payload as Binary or BinaryView, so it is cast
/// before comparing.
fn is_right(batches: &[RecordBatch], ids: &[i64]) -> bool {
    let mut rows = Vec::new();
    for b in batches.iter().filter(|b| b.num_columns() == 2) {
        let (Ok(ids), Ok(data)) = (
            cast(b.column(0), &DataType::Int64),
            cast(b.column(1), &DataType::Binary),
        ) else {
            return false;
        };
        let (Some(ids), Some(data)) = (
            ids.as_any().downcast_ref::<Int64Array>(),
            data.as_any().downcast_ref::<BinaryArray>(),
        ) else {
            return false;
        };
        rows.extend((0..b.num_rows()).map(|i| (ids.value(i), (!data.is_null(i)).then(|| data.value(i).to_vec()))));
    }
    let mut wanted: Vec<i64> = ids.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    rows.sort_by_key(|r| r.0);
    rows.len() == wanted.len()
        && rows
            .iter()
            .zip(&wanted)
            .all(|((id, data), want)| id == want && data.as_deref() == Some(table::payload(*id).as_slice()))
}

/// A small deterministic generator per client (xorshift64*).
struct Ids(u64, u64);

impl Ids {
    /// `n` ids (the keys of one call).
    fn take(&mut self, n: usize) -> Vec<i64> {
        (0..n.max(1)).map(|_| self.next()).collect()
    }

    fn next(&mut self) -> i64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % self.1) as i64
    }
}

/// Latencies (ms) and wrong answers of one client's measured window.
struct ClientRun {
    latencies: Vec<f64>,
    wrong: u64,
}

async fn client_loop(
    asker: Asker,
    mut ids: Ids,
    keys_per_call: usize,
    warmup: usize,
    window: Duration,
    barrier: Arc<Barrier>,
) -> anyhow::Result<ClientRun> {
    for _ in 0..warmup {
        let keys = ids.take(keys_per_call);
        asker
            .ask(&keys)
            .await
            .with_context(|| format!("warm-up lookup of ids {keys:?}"))?;
    }
    barrier.wait().await;
    let deadline = Instant::now() + window;
    let mut run = ClientRun {
        latencies: Vec::new(),
        wrong: 0,
    };
    while Instant::now() < deadline {
        let keys = ids.take(keys_per_call);
        let start = Instant::now();
        let batches = asker
            .ask(&keys)
            .await
            .with_context(|| format!("lookup of ids {keys:?}"))?;
        run.latencies.push(start.elapsed().as_secs_f64() * 1e3);
        if !is_right(&batches, &keys) {
            run.wrong += 1;
        }
    }
    Ok(run)
}

async fn measure(
    mode: Mode,
    suite: &Suite,
    setup: &StoreSetup,
    args: &LookupArgs,
    work: &std::path::Path,
) -> anyhow::Result<LookupResult> {
    let mut session = Session::start(mode, suite, setup, work).await?;
    // The preload prepares the server: straight to it, not over the link.
    if let (Some(url), false) = (
        session.server_flight_url(),
        args.preload == "none" || matches!(mode, Mode::FileServer),
    ) {
        let client = SiltClient::connect(url).await?;
        client
            .preload("lookup", None, args.preload == "memory", |_| {})
            .await
            .context("preloading the lookup table")?;
        // Measure the steady state: the background transcoder's backlog
        // from the preload (it encodes at half a core) drained first.
        session.settle().await?;
    }
    let mut askers = Vec::new();
    for _ in 0..args.clients.max(1) {
        askers.push(match session.flight_url() {
            Some(url) if !matches!(mode, Mode::FileServer) => {
                let client = SiltClient::connect(url).await?;
                if args.api == "lookup" {
                    Asker::Lookup(client)
                } else {
                    Asker::Remote(client)
                }
            }
            _ => Asker::Local(session.ctx.clone()),
        });
    }
    let barrier = Arc::new(Barrier::new(askers.len() + 1));
    let window = Duration::from_secs_f64(args.seconds.max(0.1));
    let tasks: Vec<_> = askers
        .into_iter()
        .enumerate()
        .map(|(i, asker)| {
            let ids = Ids(
                0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03),
                args.rows.max(1),
            );
            tokio::spawn(client_loop(
                asker,
                ids,
                args.keys_per_call,
                args.warmup,
                window,
                barrier.clone(),
            ))
        })
        .collect();
    barrier.wait().await;
    let before = session.probe().await?;
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut wrong = 0;
    for t in tasks {
        let run = t.await.context("a lookup client panicked")??;
        latencies.extend(run.latencies);
        wrong += run.wrong;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cost = session.probe().await?.since(&before);
    latencies.sort_by(f64::total_cmp);
    let n = latencies.len().max(1) as f64;
    Ok(LookupResult {
        mode: mode.name().into(),
        status: "ok".into(),
        error: None,
        lookups: latencies.len() as u64,
        wrong_answers: wrong,
        p50_ms: quantile(&latencies, 0.50),
        p90_ms: quantile(&latencies, 0.90),
        p99_ms: quantile(&latencies, 0.99),
        max_ms: latencies.last().copied().unwrap_or(0.0),
        lookups_per_s: latencies.len() as f64 / elapsed,
        server_cpu_s_per_lookup: cost.server_cpu.map(|c| c / n),
        client_cpu_s_per_lookup: cost.client_cpu / n,
        link_bytes: cost.link.map(|(to_client, to_server)| to_client + to_server),
        link_bytes_to_client: cost.link.map(|(to_client, _)| to_client),
    })
}

/// The modes of a run that failed, answered nothing, or answered wrong.
pub fn problems(results: &LookupResults) -> Vec<String> {
    results
        .results
        .iter()
        .filter(|r| r.status != "ok" || r.lookups == 0 || r.wrong_answers > 0)
        .map(|r| {
            format!(
                "{}/{}: {} ({} lookups, {} wrong) {}",
                results.name,
                r.mode,
                r.status,
                r.lookups,
                r.wrong_answers,
                r.error.as_deref().unwrap_or("")
            )
        })
        .collect()
}

pub async fn lookup(args: LookupArgs) -> anyhow::Result<()> {
    run(args).await.map(|_| ())
}

impl LookupArgs {
    /// `bench smoke`'s run: 20,000 rows under `data_dir`, 2 clients for 1 s
    /// per mode, direct and liquid, no throttling; results into `out/smoke-lookup/`.
    pub fn smoke(out: PathBuf, data_dir: PathBuf) -> Self {
        LookupArgs {
            rows: 20_000,
            clients: 2,
            keys_per_call: 1,
            seconds: 1.0,
            warmup: 5,
            modes: vec!["direct".into(), "liquid".into()],
            latency_ms: 0,
            mbps: 10_000.0,
            link: LinkSpec::none(),
            validation: "immutable".into(),
            api: "lookup".into(),
            preload: "none".into(),
            data_dir: Some(data_dir),
            out,
            name: Some("smoke-lookup".into()),
        }
    }
}

/// Runs the lookup benchmark; its results and the folder they were written to.
pub async fn run(args: LookupArgs) -> anyhow::Result<(LookupResults, PathBuf)> {
    let modes = super::parse_modes(&args.modes)?;
    anyhow::ensure!(
        !modes.contains(&Mode::Duckdb) && !modes.contains(&Mode::DuckdbS3),
        "the lookup benchmark has no duckdb modes"
    );
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("data/lookup-{}", args.rows)));
    let src = data_dir.join("src");
    let file = src.join("lookup").join("lookup.parquet");
    if !file.exists() {
        println!(
            "Generating the {}-row lookup table into {} (once) ...",
            args.rows,
            file.display()
        );
        let (f, rows) = (file.clone(), args.rows);
        tokio::task::spawn_blocking(move || table::generate(&f, rows, silt_bench::tpch::ParquetLayout::default()))
            .await
            .context("generator task")?
            .context("generating the lookup table")?;
    }
    let parquet_bytes = std::fs::metadata(&file).map_or(0, |m| m.len());
    let suite = Suite {
        kind: "lookup".into(),
        tables: vec![TableSpec {
            name: "lookup".into(),
            bucket: "lookup".into(),
            prefix: "lookup.parquet".into(),
            binary_as_string: false,
        }],
        views: Vec::new(),
        queries: Vec::new(),
        src,
        data: DataSet {
            description: format!("lookup table, {} rows", args.rows),
            rows: args.rows,
            files: 1,
            parquet_bytes,
        },
    };
    let work = data_dir.join("work");
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let (_store, setup) = super::start_store(
        &suite,
        &data_dir,
        StoreSetup {
            s3: Default::default(),
            latency_ms: args.latency_ms,
            mbps: args.mbps,
            memory_budget: 8 << 30,
            squeeze_share: None,
            validation: args.validation.clone(),
            local_cache: 0,
            local_cache_form: Default::default(),
            link: args.link.link(),
        },
    )?;
    let started_unix = super::unix_now();
    let mut results = Vec::new();
    for mode in &modes {
        let r = match measure(*mode, &suite, &setup, &args, &work).await {
            Ok(r) => r,
            Err(e) => LookupResult {
                mode: mode.name().into(),
                status: "error".into(),
                error: Some(super::runner::concise(&e)),
                ..Default::default()
            },
        };
        match &r.error {
            None => println!(
                "  {:<17} p50 {:>8.3} ms  p99 {:>8.3} ms  {:>9.0} lookups/s  ({} lookups, {} wrong)",
                r.mode, r.p50_ms, r.p99_ms, r.lookups_per_s, r.lookups, r.wrong_answers
            ),
            Some(e) => println!("  {:<17} error: {e}", r.mode),
        }
        results.push(r);
    }
    let results = LookupResults {
        schema_version: SCHEMA_VERSION,
        name: args.name.clone().unwrap_or_else(|| format!("lookup-{}", args.rows)),
        suite: "lookup".into(),
        started_unix,
        machine: super::machine(),
        config: LookupConfig {
            modes: modes.iter().map(|m| m.name().to_string()).collect(),
            clients: args.clients,
            seconds: args.seconds,
            warmup_lookups: args.warmup,
            store_latency_ms: args.latency_ms,
            store_mbps: args.mbps,
            sql: format!(
                "{SQL} ({} key(s) per call; pushdown modes ask through the {} API; preload: {})",
                args.keys_per_call, args.api, args.preload
            ),
            link: Some(args.link.config()),
        },
        data: suite.data.clone(),
        results,
    };
    let dir = args.out.join(&results.name);
    super::write_outputs(
        &results,
        &dir,
        silt_bench::plots::write_lookup,
        silt_bench::report::render_lookup,
    )?;
    Ok((results, dir))
}
