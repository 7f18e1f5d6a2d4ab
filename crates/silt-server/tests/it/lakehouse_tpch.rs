//! TPC-H's 22 queries on Iceberg and Delta Lake tables written by the
//! formats' own writers (`scripts/lakehouse_tpch_fixture.py`: pyiceberg,
//! deltalake), after each change a lake sees: appends, a partition
//! overwrite and a copy-on-write delete, merge-on-read deletes (Iceberg
//! position and equality delete files, Delta deletion vectors, about 5% of
//! `lineitem` and `orders`), a compaction, a schema change and a partition
//! change. The server runs throughout and finds each new snapshot itself;
//! every answer, through the default client (its own cache, the choice per
//! row group: each query twice, so row groups it cached are read locally)
//! and through a client that pushes every scan down, must equal
//! DataFusion's over the rows an independent reader returns for the same
//! snapshot (pyiceberg's scan, DuckDB's delta extension).

use std::path::Path;

use datafusion::prelude::{ParquetReadOptions, SessionContext};

use crate::common::{client, data_root, metric, pushdown_client};
use crate::iceberg::{repo, serve_tables};
use crate::tiers::tpch_differences;

/// The fixture's phases, in the order they change the tables.
const PHASES: [&str; 6] = ["create", "overwrite", "deletes", "compact", "evolve", "respec"];

/// Runs `phase` of the fixture for `format` in `root`; each table's name
/// and the URL to register it under.
fn run_phase(format: &str, root: &Path, phase: &str) -> Vec<(String, String)> {
    let tpch = data_root().join("tpch");
    let args = [format.as_ref(), root.as_os_str(), tpch.as_os_str(), phase.as_ref()];
    let out = silt_bench::files::run_python_script(&repo(), "lakehouse_tpch_fixture.py", &args);
    let described: serde_json::Value = serde_json::from_slice(&out).expect("the fixture's JSON");
    described["tables"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, url)| (name.clone(), url.as_str().unwrap().to_string()))
        .collect()
}

/// DataFusion over the independent reader's rows of every table after `phase`.
async fn expected_ctx(root: &Path, phase: &str, tables: &[(String, String)]) -> SessionContext {
    let ctx = SessionContext::new();
    for (name, _) in tables {
        let file = root.join(format!("expected/{phase}/{name}.parquet"));
        ctx.register_parquet(name, file.to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
    }
    ctx
}

async fn tpch_after_every_change(format: &str) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let tables = run_phase(format, &root, PHASES[0]);
    let named: Vec<(&str, String)> = tables.iter().map(|(n, u)| (n.as_str(), u.clone())).collect();
    let (server, _cache) = serve_tables(&named, |_| {}).await;
    // The default client runs each query twice: the second time its cache
    // holds row groups, which it then reads itself.
    let default = client(&server).await;
    let clients = [
        ("the default client", default.clone()),
        ("the default client, again", default),
        ("a pushdown client", pushdown_client(&server).await),
    ];
    let queries: Vec<u32> = (1..=22).collect();
    for (i, phase) in PHASES.iter().enumerate() {
        if i > 0 {
            run_phase(format, &root, phase);
        }
        let expected = expected_ctx(&root, phase, &tables).await;
        for (label, ctx) in &clients {
            let failures = tpch_differences(ctx, &expected, &queries).await;
            assert!(
                failures.is_empty(),
                "{format} after `{phase}`, through {label}: {} of 22 queries differ:\n{}",
                failures.len(),
                failures.join("\n")
            );
        }
    }
    let failed: Vec<String> = server
        .engine
        .metrics()
        .query_log
        .finished()
        .into_iter()
        .filter_map(|q| q.error.map(|e| format!("{} {}: {e}", q.kind, q.text)))
        .collect();
    assert!(failed.is_empty(), "the server failed queries:\n{}", failed.join("\n"));
    assert_eq!(metric(&server, "silt_query_errors_total"), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tpch_on_iceberg_tables_after_every_change() {
    tpch_after_every_change("iceberg").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tpch_on_delta_tables_after_every_change() {
    tpch_after_every_change("delta").await;
}
