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
use silt_bench::local_s3::{ACCESS_KEY, LocalS3, REGION, SECRET_KEY};
use silt_bench::tpch;
use silt_client::script::run_script_last_query;
use silt_server::ServerConfig;
use silt_server::config::TableConfig;
use silt_store::{FaultConfig, FaultyStore, MeteredStore, S3Settings, StoreMetrics, TableLocation};
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

fn s3_settings(s3: &LocalS3) -> S3Settings {
    S3Settings {
        endpoint: Some(s3.endpoint()),
        access_key_id: Some(ACCESS_KEY.into()),
        secret_access_key: Some(SECRET_KEY.into()),
        region: Some(REGION.into()),
        allow_http: Some(true),
        session_token: None,
    }
}

/// Runs `sql` cold once and warm `runs` times, counting GETs with `gets`.
async fn measure(ctx: &SessionContext, sql: &str, runs: usize, gets: &dyn Fn() -> u64) -> anyhow::Result<Side> {
    let g0 = gets();
    let t = Instant::now();
    run_script_last_query(ctx, sql).await?;
    let cold = t.elapsed();
    let g1 = gets();
    let mut warm = Vec::new();
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        run_script_last_query(ctx, sql).await?;
        warm.push(t.elapsed());
    }
    Ok(Side {
        cold,
        warm: median(warm),
        cold_gets: g1 - g0,
        warm_gets: (gets() - g1) / runs.max(1) as u64,
    })
}

pub async fn run(args: CacheBenchArgs) -> anyhow::Result<()> {
    let dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("data/tpch-sf{}", args.sf)));
    let root = dir.join("lake");
    crate::demo::ensure_data(&root.join("tpch"), args.sf).await?;
    let s3 = LocalS3::start(&root).await.context("starting the loopback S3 server")?;
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

    // DataFusion reading the throttled store directly.
    let direct_gets = Arc::new(AtomicU64::new(0));
    let direct = SessionContext::new();
    let location = TableLocation::parse("s3://tpch/")?;
    let raw = location.open(&s3_settings(&s3), &Arc::new(InMemory::new()))?;
    let metrics = StoreMetrics {
        get_requests: metrics::Counter::from_arc(direct_gets.clone()),
        ..StoreMetrics::noop()
    };
    let store: Arc<dyn ObjectStore> = Arc::new(MeteredStore::new(
        Arc::new(FaultyStore::new(raw, faults.clone())),
        metrics,
    ));
    direct.register_object_store(&Url::parse("s3://tpch")?, store);
    for t in tpch::TABLES {
        direct
            .register_parquet(t, &format!("s3://tpch/{t}/"), ParquetReadOptions::default())
            .await?;
    }

    // Silt, same store, same throttling, empty cache.
    let cache_dir = tempfile::tempdir().context("creating a cache dir")?;
    let mut cfg = ServerConfig {
        listen: "127.0.0.1:0".parse()?,
        cache_dir: cache_dir.path().to_path_buf(),
        s3: s3_settings(&s3),
        ..Default::default()
    };
    cfg.store.latency = faults.latency;
    cfg.store.mbps = Some(args.mbps);
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
    let silt = SessionContext::new();
    silt_client::register_tables(&silt, &server.flight_url()).await?;
    let engine = server.engine.clone();
    let silt_gets = move || {
        engine
            .metrics()
            .snapshot()
            .get("silt_object_store_get_requests_total")
            .copied()
            .unwrap_or(0.0) as u64
    };
    let direct_count = || direct_gets.load(Ordering::Relaxed);

    println!(
        "TPC-H SF {} on loopback S3 throttled to {} ms per request and {} MB/s; warm = median of {} runs\n",
        args.sf, args.latency_ms, args.mbps, args.warm_runs
    );
    println!(
        "{:<5} {:>11} {:>11} {:>11} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
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
        "warm GETs"
    );
    for (n, sql) in &queries {
        let d = measure(&direct, sql, args.warm_runs, &direct_count).await?;
        let s = measure(&silt, sql, args.warm_runs, &silt_gets).await?;
        let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
        println!(
            "Q{:<4} {:>11} {:>11} {:>11} {:>11} {:>10.2} {:>10.1} {:>10} {:>10} {:>10.1} {:>10}",
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
        );
    }
    println!(
        "\ncold ratio = silt cold / direct cold (target <= 1.1); warm x = direct warm / silt warm (target >= 10 on Q1, Q6);\n\
         GETs x = direct cold GETs / silt cold GETs (target >= 5); warm GETs = Silt's GETs per warm run."
    );
    server.shutdown().await?;
    Ok(())
}
