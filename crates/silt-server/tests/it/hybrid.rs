//! The hybrid client — Silt's DataFusion client with a compute-side cache
//! ([`silt_client::hybrid`]) — gives plain DataFusion's answers at three
//! cache sizes: none, small (row groups compete for it, some are evicted
//! or refused) and large (every row group ends up local). Each query runs
//! three times: the first pushes everything down, the second fetches the
//! row groups the cache admits, the third answers them locally and pushes
//! down the rest.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use datafusion::prelude::{ParquetReadOptions, SessionContext};
use silt_bench::tpch;
use silt_client::{SiltTable, SiltTableOptions};
use silt_server::config::TableConfig;

use crate::benchmarks::compare_suite;
use crate::common::{Fixture, client_with, data_root};
use crate::ssb::{ssb_fixture, ssb_queries};

/// The cache sizes every suite runs at.
const SIZES: [(&str, u64); 3] = [("none", 0), ("small", 512 << 10), ("large", 1 << 30)];
/// The runs of each query (see the module docs).
const RUNS: [&str; 3] = ["pushdown", "fetch", "local"];

/// TPC-H at the tests' scale factor in row groups of 8,192 rows (so a
/// scan has row groups on several paths at once), bucket `tpchrg`.
fn tpch_row_groups_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = data_root().join("tpchrg");
        let layout = tpch::ParquetLayout {
            row_group_rows: 8192,
            ..Default::default()
        };
        tpch::generate(&dir, crate::common::TPCH_SF, layout).expect("generate TPC-H");
        dir
    })
}

fn options(bytes: u64) -> SiltTableOptions {
    SiltTableOptions {
        local_cache_bytes: bytes,
        ..Default::default()
    }
}

/// Runs `files` at every size of [`SIZES`], three times each, and fails
/// with every difference. Returns the last (large) context.
async fn run_at_every_size(fx: &Fixture, base: &SessionContext, dir: &str, files: &[String]) -> SessionContext {
    let mut failures = Vec::new();
    let mut last = None;
    for (label, bytes) in SIZES {
        let ctx = client_with(&fx.server, &options(bytes)).await;
        let found = compare_suite(fx, base, &ctx, dir, files, &RUNS).await;
        failures.extend(found.into_iter().map(|f| format!("[{label} cache] {f}")));
        last = Some(ctx);
    }
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(fx.metric("silt_query_errors_total"), 0.0);
    last.expect("three sizes")
}

/// The compute-side cache of `ctx`'s table `name`.
async fn cache_of(ctx: &SessionContext, name: &str) -> Arc<silt_client::LocalCache> {
    let provider = ctx.table_provider(name).await.unwrap();
    let table = provider.downcast_ref::<SiltTable>().expect("a Silt table");
    table.local_cache().expect("a local cache").clone()
}

async fn explain_analyze(ctx: &SessionContext, sql: &str) -> String {
    let batches = ctx
        .sql(&format!("EXPLAIN ANALYZE {sql}"))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    datafusion::arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_22_queries_through_the_hybrid_client() {
    let dir = tpch_row_groups_dir();
    let fx = Fixture::start_with(|cfg| {
        cfg.tables.clear();
        cfg.views.clear();
        for t in tpch::TABLES {
            cfg.tables.insert(
                t.into(),
                TableConfig {
                    url: format!("s3://tpchrg/{t}/"),
                    ..Default::default()
                },
            );
        }
    })
    .await;
    let base = SessionContext::new();
    for t in tpch::TABLES {
        base.register_parquet(t, dir.join(t).to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
    }
    let files: Vec<String> = (1..=22).map(|n| format!("q{n:02}.sql")).collect();
    let ctx = run_at_every_size(&fx, &base, "bench/tpch/queries", &files).await;

    let cache = cache_of(&ctx, "lineitem").await;
    let stats = cache.stats();
    assert!(stats.hits > 0 && stats.admitted > 0, "{stats:?}");
    assert!(cache.used() <= cache.budget());
    // A scan that keeps most rows (pushdown would send them all): every
    // lineitem row group of it is local from its third run on.
    let wide = "SELECT l_orderkey, l_extendedprice FROM lineitem WHERE l_quantity < 40";
    for _ in 0..2 {
        ctx.sql(wide).await.unwrap().collect().await.unwrap();
    }
    let text = explain_analyze(&ctx, wide).await;
    assert!(text.contains("local_cache=[WeightedLfu"), "{text}");
    assert!(text.contains("row_groups_pushed=0"), "{text}");
    assert!(!text.contains("row_groups_local=0"), "{text}");

    // An aggregate sends a few states per scan: it stays pushed down even
    // when its row groups are local.
    let q6 = "SELECT sum(l_extendedprice * l_discount) AS revenue FROM lineitem \
              WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' \
              AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24";
    let text = explain_analyze(&ctx, q6).await;
    assert!(text.contains("scans_pushed_whole=1"), "{text}");
    assert!(text.contains("row_groups_local=0"), "{text}");

    // A small cache: never over budget, and some row groups stay pushed down.
    let small = client_with(&fx.server, &options(SIZES[1].1)).await;
    for _ in 0..3 {
        small.sql(wide).await.unwrap().collect().await.unwrap();
    }
    let text = explain_analyze(&small, wide).await;
    assert!(!text.contains("row_groups_pushed=0"), "{text}");
    let cache = cache_of(&small, "lineitem").await;
    assert!(cache.used() <= cache.budget(), "{} > {}", cache.used(), cache.budget());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickbench_43_queries_through_the_hybrid_client() {
    let fx = Fixture::start().await;
    let base = crate::common::baseline_ctx().await;
    let files: Vec<String> = (0..=42).map(|n| format!("q{n:02}.sql")).collect();
    run_at_every_size(&fx, &base, "bench/clickbench/queries", &files).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssb_13_queries_through_the_hybrid_client() {
    let (fx, base) = ssb_fixture().await;
    let ctx = run_at_every_size(&fx, &base, "bench/ssb/queries", &ssb_queries()).await;
    let stats = cache_of(&ctx, "lineorder").await.stats();
    assert!(stats.hits > 0, "{stats:?}");
}
