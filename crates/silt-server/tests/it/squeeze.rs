//! Squeezed chunks end to end (issue 43): liquid column chunks the memory
//! tier evicts go to disk in their encoded form and come back without
//! Parquet decoding, in the same run and after a restart, with answers equal
//! to DataFusion's.

use std::path::Path;
use std::time::Duration;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;
use silt_bench::local_s3::LocalS3;
use silt_cache::SqueezeStats;
use silt_client::SiltClient;
use silt_proto::{Projection, ScanRequest};
use silt_server::{ServerConfig, ServerHandle};

use crate::benchmarks::compare_suite;
use crate::common::{Fixture, answer, baseline_ctx, data_root, full_config, metric, pushdown_client};

async fn start(s3: &LocalS3, cache_dir: &Path, tweak: impl FnOnce(&mut ServerConfig)) -> ServerHandle {
    let mut cfg = full_config(s3, cache_dir);
    cfg.disk_budget = 256 << 20;
    tweak(&mut cfg);
    silt_server::start(cfg).await.expect("start server")
}

fn stats(server: &ServerHandle) -> SqueezeStats {
    server
        .engine
        .tiers()
        .batches()
        .squeezed()
        .expect("the liquid form squeezes")
        .stats()
}

/// Chunk decodes since the server started.
fn decodes(server: &ServerHandle) -> u64 {
    server.engine.tiers().batches().decodes().counts().0
}

fn gets(server: &ServerHandle) -> f64 {
    metric(server, "silt_object_store_get_requests_total")
}

async fn wait_recovered(server: &ServerHandle) {
    let disk = server.engine.disk_tier().cloned();
    let squeezed = server.engine.tiers().batches().squeezed().cloned();
    tokio::task::spawn_blocking(move || {
        if let Some(d) = disk {
            d.wait_recovered();
        }
        if let Some(s) = squeezed {
            s.wait_recovered();
        }
    })
    .await
    .unwrap();
}

/// Evicts the whole memory tier (every chunk whole and liquid is offered to
/// the squeeze tier), waits for the writer, and gives the budget back.
async fn squeeze_everything(server: &ServerHandle) {
    let batches = server.engine.tiers().batches().clone();
    tokio::task::spawn_blocking(move || {
        assert!(batches.wait_transcoded(Duration::from_secs(60)));
        batches.set_budget(0);
        let squeezed = batches.squeezed().expect("squeezing on");
        assert!(squeezed.wait_written(Duration::from_secs(60)));
        batches.set_budget(batches.capacity());
    })
    .await
    .unwrap();
}

const FILTER: &str = "l_shipmode = 'AIR' AND l_comment LIKE '%fur%'";

fn filter_scan() -> ScanRequest {
    ScanRequest {
        table: "lineitem".into(),
        projection: Some(Projection {
            columns: ["l_orderkey", "l_comment", "l_shipmode", "l_quantity"]
                .iter()
                .map(|c| c.to_string())
                .collect(),
        }),
        filter_sql: Some(FILTER.into()),
        ..Default::default()
    }
}

/// (rows, sum of l_orderkey, sum of the comments' lengths) of the filter
/// scan through `server`.
async fn scan_summary(server: &ServerHandle) -> (i64, i64, i64) {
    let client = SiltClient::connect(&server.flight_url()).await.unwrap();
    let batches: Vec<RecordBatch> = client.scan_all(&filter_scan()).await.unwrap();
    let (mut rows, mut keys, mut lengths) = (0i64, 0i64, 0i64);
    for b in &batches {
        rows += b.num_rows() as i64;
        keys += b.column(0).as_primitive::<Int64Type>().values().iter().sum::<i64>();
        let comments =
            datafusion::arrow::compute::cast(b.column(1), &datafusion::arrow::datatypes::DataType::Utf8).unwrap();
        lengths += comments
            .as_string::<i32>()
            .iter()
            .map(|c| c.map_or(0, |c| c.len() as i64))
            .sum::<i64>();
    }
    (rows, keys, lengths)
}

/// The same summary from plain DataFusion over the same files.
async fn expected_summary() -> (i64, i64, i64) {
    let base = baseline_ctx().await;
    let sql = format!("SELECT count(*), sum(l_orderkey), sum(length(l_comment)) FROM lineitem WHERE {FILTER}");
    let got = answer(&base, &sql).await;
    let value = |c: usize| got[0].column(c).as_primitive::<Int64Type>().value(0);
    (value(0), value(1), value(2))
}

/// A filter query's chunks, squeezed, come back from disk with no decode;
/// after a restart the same query makes no store GET and decodes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn squeezed_chunks_serve_a_filter_query_without_decoding_also_after_a_restart() {
    let s3 = LocalS3::start(data_root()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let expected = expected_summary().await;
    assert!(expected.0 > 0, "the filter keeps rows");

    let a = start(&s3, dir.path(), |_| {}).await;
    // Twice: a first read admits nothing while the transcoder is behind.
    assert_eq!(scan_summary(&a).await, expected);
    assert_eq!(scan_summary(&a).await, expected);
    squeeze_everything(&a).await;
    let squeezed = stats(&a);
    assert!(squeezed.squeezed_chunks >= 4, "{squeezed:?}");
    assert_eq!(a.engine.tiers().batches().entry_count(), 0);
    // silt_system.cache_segments lists them (tier `squeezed`), named.
    let listed: Vec<String> = a
        .engine
        .tiers()
        .batches()
        .held_units()
        .into_iter()
        .filter(|u| u.tier == "squeezed")
        .filter_map(|u| u.column_name.map(|n| n.to_string()))
        .collect();
    assert!(listed.len() >= 4, "{listed:?}");
    assert!(listed.iter().any(|n| n == "l_shipmode"), "{listed:?}");

    let decoded = decodes(&a);
    assert_eq!(scan_summary(&a).await, expected);
    assert_eq!(decodes(&a), decoded, "a squeezed chunk was decoded again");
    assert!(stats(&a).restored_chunks >= 4, "{:?}", stats(&a));
    a.shutdown().await.unwrap();

    // A new server on the same cache dir: the memory tier is empty, the
    // squeezed chunks are on disk.
    // (Registering tables at start may read a footer before recovery
    // reaches its page: the query is what must not fetch.)
    let b = start(&s3, dir.path(), |_| {}).await;
    wait_recovered(&b).await;
    let before = gets(&b);
    assert_eq!(scan_summary(&b).await, expected);
    assert_eq!(
        gets(&b),
        before,
        "a restarted server's first query fetched from the store"
    );
    assert_eq!(decodes(&b), 0, "a restarted server decoded Parquet");
    assert!(stats(&b).restored_chunks >= 4, "{:?}", stats(&b));
    assert_eq!(stats(&b).unreadable_chunks, 0);
    b.shutdown().await.unwrap();
}

/// The queries `files` of `shared/{dir}` with a memory tier far smaller than
/// the data (most chunks squeezed as they are evicted), cold and warm, then
/// again after a restart on the same cache dir: every answer equals
/// DataFusion's, the memory tier stays within its budget, and no squeezed
/// chunk is unreadable.
async fn squeezed_suite_matches_before_and_after_a_restart(dir: &str, files: &[String]) {
    let base = baseline_ctx().await;
    fn tight(c: &mut ServerConfig) {
        c.disk_budget = 256 << 20;
        c.memory_budget = 2 << 20;
    }

    let fx = Fixture::start_with(tight).await;
    let ctx = pushdown_client(&fx.server).await;
    let failures = compare_suite(&fx, &base, &ctx, dir, files, &["cold", "liquid"]).await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let batches = fx.server.engine.tiers().batches();
    assert!(batches.weighted_size() <= batches.capacity());
    let squeezed = stats(&fx.server);
    assert!(squeezed.squeezed_chunks > 0, "{squeezed:?}");
    assert!(squeezed.restored_chunks > 0, "{squeezed:?}");
    assert_eq!(squeezed.unreadable_chunks, 0, "{squeezed:?}");

    let fx = fx.restart(tight).await;
    wait_recovered(&fx.server).await;
    let ctx = pushdown_client(&fx.server).await;
    let failures = compare_suite(&fx, &base, &ctx, dir, files, &["restarted"]).await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(stats(&fx.server).restored_chunks > 0, "{:?}", stats(&fx.server));
    assert_eq!(stats(&fx.server).unreadable_chunks, 0, "{:?}", stats(&fx.server));
    fx.server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_with_most_chunks_squeezed_matches_datafusion_before_and_after_a_restart() {
    let files: Vec<String> = (1..=22).map(|n| format!("q{n:02}.sql")).collect();
    squeezed_suite_matches_before_and_after_a_restart("bench/tpch/queries", &files).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickbench_with_most_chunks_squeezed_matches_datafusion_before_and_after_a_restart() {
    let files: Vec<String> = (0..=42).map(|n| format!("q{n:02}.sql")).collect();
    squeezed_suite_matches_before_and_after_a_restart("bench/clickbench/queries", &files).await;
}
