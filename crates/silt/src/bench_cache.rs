//! `silt bench cache`: the tiered cache against plain DataFusion reading a
//! throttled object store directly.
//!
//! Both sides read the same TPC-H files from the same S3-compatible server on
//! loopback, through the same fault injector (latency per request, one link
//! of bounded bandwidth), so the store behaves like cloud storage. Reported
//! per query: cold and warm latency (median of the warm runs) and object-store
//! GETs, for DataFusion direct and for Silt (server in-process, client over
//! Flight, cold = empty memory and disk tiers).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use object_store::ObjectStore;
use object_store::memory::InMemory;
use silt_bench::local_s3::LocalS3;
use silt_bench::tpch;
use silt_client::script::run_script_last_query;
use silt_server::ServerConfig;
use silt_server::config::TableConfig;
use silt_store::{FaultConfig, FaultyStore, MeteredStore, StoreMetrics, TableLocation};
use url::Url;

#[derive(Args, Debug)]
pub struct CacheBenchArgs {
    /// TPC-H scale factor.
    #[arg(long, default_value_t = 1.0)]
    sf: f64,
    /// Where the generated files live (created if missing) [default: data/tpch-sf<SF>].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Latency added to every object-store request, in milliseconds.
    #[arg(long, default_value_t = 20)]
    latency_ms: u64,
    /// Bandwidth of the link to the object store, megabytes per second.
    #[arg(long, default_value_t = 100.0)]
    mbps: f64,
    /// TPC-H queries to run (numbers, comma separated).
    #[arg(long, value_delimiter = ',', default_value = "1,3,5,6,10,12,14,19")]
    queries: Vec<u32>,
    /// Warm runs per query; the median is reported.
    #[arg(long, default_value_t = 3)]
    warm_runs: usize,
    /// Folder with the TPC-H query texts.
    #[arg(long, default_value = "../shared/bench/tpch/queries")]
    query_dir: PathBuf,
}

/// One side's figures for one query.
#[derive(Debug, Clone, Copy, Default)]
struct Side {
    cold: Duration,
    warm: Duration,
    cold_gets: u64,
    warm_gets: u64,
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Runs `run` cold once and warm `runs` times, counting GETs with `gets`.
async fn measure<F, Fut>(run: F, runs: usize, gets: &dyn Fn() -> u64) -> anyhow::Result<Side>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let g0 = gets();
    let t = Instant::now();
    run().await?;
    let cold = t.elapsed();
    let g1 = gets();
    let mut warm = Vec::new();
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        run().await?;
        warm.push(t.elapsed());
    }
    Ok(Side {
        cold,
        warm: median(warm),
        cold_gets: g1 - g0,
        warm_gets: (gets() - g1) / runs.max(1) as u64,
    })
}

/// `sql` (a script; the last statement is the query) planned and run by `ctx`.
async fn in_context(ctx: &SessionContext, sql: &str) -> anyhow::Result<()> {
    run_script_last_query(ctx, sql).await?;
    Ok(())
}

/// A fresh DataFusion context reading the throttled store directly, and its GET counter.
async fn direct_context(s3: &LocalS3, faults: &FaultConfig) -> anyhow::Result<(SessionContext, Arc<AtomicU64>)> {
    let gets = Arc::new(AtomicU64::new(0));
    let ctx = SessionContext::new();
    let raw: Arc<dyn ObjectStore> = Arc::new(silt_store::RetryingStore::new(
        TableLocation::parse("s3://tpch/")?.open(&s3.s3_settings().into(), &Arc::new(InMemory::new()))?,
        silt_store::RetryPolicy::default(),
    ));
    let metrics = StoreMetrics {
        get_requests: metrics::Counter::from_arc(gets.clone()),
        ..StoreMetrics::noop()
    };
    let store: Arc<dyn ObjectStore> = Arc::new(MeteredStore::new(
        Arc::new(FaultyStore::new(raw, faults.clone())),
        metrics,
    ));
    ctx.register_object_store(&Url::parse("s3://tpch")?, store);
    for t in tpch::TABLES {
        ctx.register_parquet(t, &format!("s3://tpch/{t}/"), ParquetReadOptions::default())
            .await?;
    }
    Ok((ctx, gets))
}

/// A Silt server with an empty cache over the same throttled store, and a
/// client context with its tables.
async fn silt_server(
    s3: &LocalS3,
    faults: &FaultConfig,
    cache_dir: &std::path::Path,
) -> anyhow::Result<(silt_server::ServerHandle, SessionContext)> {
    let mut cfg = ServerConfig {
        listen: "127.0.0.1:0".parse()?,
        cache_dir: cache_dir.to_path_buf(),
        s3: s3.s3_settings(),
        ..Default::default()
    };
    cfg.store.latency = faults.latency;
    cfg.store.mbps = faults.bytes_per_second.map(|b| b as f64 / 1e6);
    for t in tpch::TABLES {
        cfg.tables.insert(
            t.into(),
            TableConfig {
                url: format!("s3://tpch/{t}/"),
                ..Default::default()
            },
        );
    }
    let server = silt_server::start(cfg).await?;
    let ctx = SessionContext::new();
    // The server's cache against no cache: nothing kept on the client.
    let client = silt_client::SiltClient::connect(&server.flight_url()).await?;
    silt_client::register_tables_with_options(&ctx, &client, &crate::harness::pushdown_only()).await?;
    Ok((server, ctx))
}

fn gets_of(server: &silt_server::ServerHandle) -> u64 {
    server
        .engine
        .metrics()
        .snapshot()
        .get("silt_object_store_get_requests_total")
        .copied()
        .unwrap_or(0.0) as u64
}

pub async fn run(args: CacheBenchArgs) -> anyhow::Result<()> {
    let dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("data/tpch-sf{}", args.sf)));
    let src = dir.join("src");
    crate::demo::ensure_data(&src, args.sf).await?;
    let root = dir.join("lake");
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let s3 = LocalS3::start(&root).await.context("starting the loopback S3 server")?;
    // Through S3 PUTs, so the server stores ETags instead of hashing objects per request.
    let uploaded = s3
        .upload_dir(&src, "tpch")
        .await
        .map_err(|e| anyhow::anyhow!("uploading the data set: {e}"))?;
    if uploaded > 0 {
        println!(
            "Uploaded {:.1} MiB to the loopback S3 server",
            uploaded as f64 / (1u64 << 20) as f64
        );
    }
    let faults = FaultConfig {
        latency: Duration::from_millis(args.latency_ms),
        bytes_per_second: Some((args.mbps * 1e6) as u64),
        ..Default::default()
    };
    let queries: Vec<(u32, String)> = args
        .queries
        .iter()
        .map(|n| {
            let path = args.query_dir.join(format!("q{n:02}.sql"));
            std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))
                .map(|sql| (*n, sql))
        })
        .collect::<anyhow::Result<_>>()?;

    println!(
        "TPC-H SF {} on loopback S3 throttled to {} ms per request and {} MB/s; warm = median of {} runs\n",
        args.sf, args.latency_ms, args.mbps, args.warm_runs
    );
    println!(
        "{:<5} {:>11} {:>11} {:>11} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7} {:>7}",
        "query",
        "direct cold",
        "direct warm",
        "silt cold",
        "silt warm",
        "cold ratio",
        "warm x",
        "GETs dir",
        "GETs silt",
        "GETs x",
        "warm GETs",
        "sql cold",
        "sql warm",
        "sql cold r",
        "sql x"
    );
    for (n, sql) in &queries {
        // Every query starts cold on both sides: a new context, a new server on an empty cache dir.
        let (direct, direct_gets) = direct_context(&s3, &faults).await?;
        let d = measure(|| in_context(&direct, sql), args.warm_runs, &|| {
            direct_gets.load(Ordering::Relaxed)
        })
        .await?;
        // Pushdown: the client plans, the server scans and filters.
        let cache_dir = tempfile::tempdir().context("creating a cache dir")?;
        let (server, silt) = silt_server(&s3, &faults, cache_dir.path()).await?;
        let s = measure(|| in_context(&silt, sql), args.warm_runs, &|| gets_of(&server)).await?;
        server.shutdown().await?;
        // Statement: the whole query runs on a (fresh, cold) server.
        let cache_dir = tempfile::tempdir().context("creating a cache dir")?;
        let (server, _) = silt_server(&s3, &faults, cache_dir.path()).await?;
        let client = silt_client::SiltClient::connect(&server.flight_url()).await?;
        let query = sql.trim().trim_end_matches(';');
        let statement = measure(
            || async {
                client.sql(query).await?;
                Ok(())
            },
            args.warm_runs,
            &|| gets_of(&server),
        )
        .await?;
        server.shutdown().await?;
        let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
        println!(
            "Q{:<4} {:>11} {:>11} {:>11} {:>11} {:>10.2} {:>10.1} {:>10} {:>10} {:>10.1} {:>10} {:>10} {:>10} {:>7.2} {:>7.1}",
            n,
            ms(d.cold),
            ms(d.warm),
            ms(s.cold),
            ms(s.warm),
            s.cold.as_secs_f64() / d.cold.as_secs_f64(),
            d.warm.as_secs_f64() / s.warm.as_secs_f64().max(1e-9),
            d.cold_gets,
            s.cold_gets,
            d.cold_gets as f64 / s.cold_gets.max(1) as f64,
            s.warm_gets,
            ms(statement.cold),
            ms(statement.warm),
            statement.cold.as_secs_f64() / d.cold.as_secs_f64(),
            d.warm.as_secs_f64() / statement.warm.as_secs_f64().max(1e-9),
        );
    }
    println!(
        "\ncold ratio = silt cold / direct cold (target <= 1.1); warm x = direct warm / silt warm (target >= 10 on Q1, Q6);\n\
         GETs x = direct cold GETs / silt cold GETs (target >= 5); warm GETs = Silt's GETs per warm run;\n\
         sql cold/warm = the whole query as one Flight SQL statement run on a fresh server (aggregation and joins there too);\n\
         sql cold r = sql cold / direct cold; sql x = direct warm / sql warm."
    );
    Ok(())
}
