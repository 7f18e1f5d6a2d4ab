//! The Star Schema Benchmark's 13 queries through Silt equal plain
//! DataFusion on the same files (SSB SF 0.01, derived from TPC-H by
//! `silt_bench::ssb`), cold and warm. Every query joins `lineorder` with
//! filtered dimensions, so the hash joins' dynamic filters reach the
//! `lineorder` scan on the server; the answers must not change.

use std::path::PathBuf;
use std::sync::OnceLock;

use datafusion::prelude::{ParquetReadOptions, SessionContext};
use silt_bench::ssb;
use silt_server::config::TableConfig;

use crate::benchmarks::run_suite_on;
use crate::common::{Fixture, data_root};

const NAMES: [&str; 13] = [
    "1.1", "1.2", "1.3", "2.1", "2.2", "2.3", "3.1", "3.2", "3.3", "3.4", "4.1", "4.2", "4.3",
];

/// The SSB tables, generated once per test process as bucket `ssb` of the
/// loopback S3's root.
fn ssb_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = data_root().join("ssb");
        ssb::generate(&dir, 0.01, silt_bench::tpch::ParquetLayout::default()).expect("generate SSB");
        dir
    })
}

/// A server with the SSB tables, and plain DataFusion over the same files.
pub async fn ssb_fixture() -> (Fixture, SessionContext) {
    let dir = ssb_dir();
    let fx = Fixture::start_with(|cfg| {
        cfg.tables.clear();
        cfg.views.clear();
        for t in ssb::TABLES {
            cfg.tables.insert(
                t.into(),
                TableConfig {
                    url: format!("s3://ssb/{t}/"),
                    ..Default::default()
                },
            );
        }
    })
    .await;
    let base = SessionContext::new();
    for t in ssb::TABLES {
        base.register_parquet(t, dir.join(t).to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
    }
    (fx, base)
}

/// The 13 query files.
pub fn ssb_queries() -> Vec<String> {
    NAMES.iter().map(|n| format!("q{n}.sql")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssb_13_queries_match_datafusion() {
    let (fx, base) = ssb_fixture().await;
    run_suite_on(&fx, &base, "bench/ssb/queries", ssb_queries()).await;
    // The dimensions' keys and bounds filtered lineorder on the server:
    // fewer rows crossed Flight than the 13 scans of lineorder hold.
    let lineorder = base
        .sql("SELECT count(*) FROM lineorder")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap()[0]
        .column(0)
        .as_any()
        .downcast_ref::<datafusion::arrow::array::Int64Array>()
        .unwrap()
        .value(0);
    let (sent, scans) = (fx.metric("silt_flight_rows_sent_total"), 2 * NAMES.len() as i64);
    assert!(
        sent < (scans * lineorder) as f64 / 2.0,
        "sent {sent} rows; lineorder has {lineorder}"
    );
}
