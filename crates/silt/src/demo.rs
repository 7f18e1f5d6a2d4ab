//! `silt demo`: the whole path on one machine, with nothing to set up.
//!
//! Generates TPC-H SF 0.1 (if missing) into a local folder that plays the
//! object store, starts a real server in-process on it, registers the tables
//! in a client-side DataFusion context and runs a handful of TPC-H queries
//! cold (empty cache) and then warm, reporting latency, bytes read from the
//! store and bytes sent to the client.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use silt_bench::tpch;
use silt_client::script::run_script_last_query;
use silt_server::ServerConfig;
use silt_server::config::TableConfig;

/// The demo's queries (TPC-H, SQLBench-H text; see `demo_queries/`).
const QUERIES: [(&str, &str); 8] = [
    ("Q1", include_str!("demo_queries/q01.sql")),
    ("Q3", include_str!("demo_queries/q03.sql")),
    ("Q5", include_str!("demo_queries/q05.sql")),
    ("Q6", include_str!("demo_queries/q06.sql")),
    ("Q10", include_str!("demo_queries/q10.sql")),
    ("Q12", include_str!("demo_queries/q12.sql")),
    ("Q14", include_str!("demo_queries/q14.sql")),
    ("Q19", include_str!("demo_queries/q19.sql")),
];

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Where the generated TPC-H files live (created if missing).
    #[arg(long, default_value = "data/tpch-sf0.1")]
    data_dir: PathBuf,
    /// TPC-H scale factor to generate.
    #[arg(long, default_value_t = 0.1)]
    sf: f64,
    /// Warm runs per query (the median is reported).
    #[arg(long, default_value_t = 3)]
    warm_runs: usize,
}

struct Row {
    query: &'static str,
    rows: usize,
    cold: Duration,
    warm: Duration,
    store_cold: f64,
    store_warm: f64,
    sent: f64,
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir).with_context(|| format!("creating {}", args.data_dir.display()))?;
    let dir =
        std::fs::canonicalize(&args.data_dir).with_context(|| format!("resolving {}", args.data_dir.display()))?;
    ensure_data(&dir, args.sf).await?;

    let cache_dir = std::env::temp_dir().join(format!("silt-demo-{}", std::process::id()));
    let mut config = ServerConfig {
        listen: "127.0.0.1:0".parse()?,
        cache_dir: cache_dir.clone(),
        ..Default::default()
    };
    for t in tpch::TABLES {
        let url = format!("file://{}/", dir.join(t).display());
        config.tables.insert(
            t.to_string(),
            TableConfig {
                url,
                ..Default::default()
            },
        );
    }
    let server = silt_server::start(config)
        .await
        .context("starting the in-process server")?;
    println!(
        "Silt server (in-process) on grpc://{} serving {}",
        server.flight_addr,
        dir.display()
    );
    let ctx = crate::query::connect(&server.flight_url(), None).await?;
    let metrics = server.engine.metrics().clone();
    let get = |name: &str| metrics.snapshot().get(name).copied().unwrap_or(0.0);
    const STORE: &str = "silt_object_store_get_bytes_total";
    const SENT: &str = "silt_flight_bytes_sent_total";

    let mut rows = Vec::new();
    for (query, sql) in QUERIES {
        let (s0, b0) = (get(STORE), get(SENT));
        let start = Instant::now();
        let batches = run_script_last_query(&ctx, sql)
            .await
            .with_context(|| format!("running {query}"))?;
        let cold = start.elapsed();
        let (s1, b1) = (get(STORE), get(SENT));
        let mut warm = Vec::new();
        for _ in 0..args.warm_runs.max(1) {
            let start = Instant::now();
            run_script_last_query(&ctx, sql)
                .await
                .with_context(|| format!("running {query}"))?;
            warm.push(start.elapsed());
        }
        let s2 = get(STORE);
        warm.sort();
        rows.push(Row {
            query,
            rows: batches.iter().map(|b| b.num_rows()).sum(),
            cold,
            warm: warm[warm.len() / 2],
            store_cold: s1 - s0,
            store_warm: (s2 - s1) / warm.len() as f64,
            sent: b1 - b0,
        });
    }
    print_table(&rows);
    server.shutdown().await?;
    let _ = std::fs::remove_dir_all(&cache_dir);
    Ok(())
}

/// Generates TPC-H at `sf` into `dir` unless every table is already there.
pub(crate) async fn ensure_data(dir: &Path, sf: f64) -> anyhow::Result<()> {
    let missing = tpch::TABLES.iter().any(|t| !tpch::table_file(dir, t).exists());
    if !missing {
        return Ok(());
    }
    println!("Generating TPC-H SF {sf} into {} (once) ...", dir.display());
    let start = Instant::now();
    let d = dir.to_path_buf();
    tokio::task::spawn_blocking(move || tpch::generate(&d, sf, tpch::ParquetLayout::default()))
        .await
        .context("generator task")??;
    println!("Generated in {:.1}s", start.elapsed().as_secs_f64());
    Ok(())
}

fn print_table(rows: &[Row]) {
    let header = [
        "query",
        "rows",
        "cold ms",
        "warm ms",
        "store bytes (cold)",
        "store bytes (warm)",
        "bytes to client",
    ];
    let body: Vec<[String; 7]> = rows
        .iter()
        .map(|r| {
            [
                r.query.to_string(),
                r.rows.to_string(),
                format!("{:.1}", r.cold.as_secs_f64() * 1e3),
                format!("{:.1}", r.warm.as_secs_f64() * 1e3),
                human_bytes(r.store_cold),
                human_bytes(r.store_warm),
                human_bytes(r.sent),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..7)
        .map(|i| {
            body.iter()
                .map(|r| r[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let parts: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:>w$}")).collect();
        println!("| {} |", parts.join(" | "));
    };
    line(header.to_vec());
    println!(
        "|{}|",
        widths.iter().map(|w| "-".repeat(w + 2)).collect::<Vec<_>>().join("|")
    );
    for r in &body {
        line(r.iter().map(String::as_str).collect());
    }
    println!(
        "\nwarm = median of the warm runs; store bytes = object-store GET bytes; bytes to client = Arrow IPC sent by the server."
    );
}

fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} {}", UNITS[0])
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}
