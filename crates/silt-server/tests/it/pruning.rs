//! Pruning with everything a file offers: the page index narrows a selective
//! filter on a sorted column to a few pages, and only those are read cold;
//! bloom filters skip row groups whose statistics cannot exclude a key.
//! Every answer is compared with plain DataFusion on the same file.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use silt_server::ServerHandle;

use crate::common::answer;
use crate::common::{check_same, is_ordered, metric, pushdown_client};

const PAGE: u64 = 16 << 10;
const ROWS: i64 = 200_000;
const ROW_GROUP: usize = 50_000;
/// Rows per data page.
const PAGE_ROWS: usize = 1_000;

fn write(path: &Path, batch: &RecordBatch, props: WriterProperties) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut w = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), batch.schema(), Some(props)).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
}

/// `k` = 0, 1, 2, ... (sorted), `v` = a string per row; 4 row groups of
/// 50 pages each, with page statistics (the writer's default).
fn write_sorted(path: &Path) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Utf8, false),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(0..ROWS)),
            Arc::new(StringArray::from_iter_values(
                (0..ROWS).map(|k| format!("value-{k:012}")),
            )),
        ],
    )
    .unwrap();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(ROW_GROUP))
        .set_data_page_row_count_limit(PAGE_ROWS)
        .set_write_batch_size(PAGE_ROWS)
        .set_dictionary_enabled(false)
        .build();
    write(path, &batch, props);
}

/// `c` = even values scattered over [0, 2e9) (so every row group's min/max
/// spans nearly the whole range and statistics prune nothing; odd values are
/// absent), `id` = row number; bloom filters on.
fn write_scattered(path: &Path) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("c", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(0..ROWS)),
            Arc::new(Int64Array::from_iter_values((0..ROWS).map(scattered))),
        ],
    )
    .unwrap();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(ROW_GROUP))
        .set_bloom_filter_enabled(true)
        .set_bloom_filter_fpp(0.001)
        .build();
    write(path, &batch, props);
}

fn scattered(i: i64) -> i64 {
    2 * ((i * 2_654_435_761) % 1_000_000_007)
}

/// A server with one `file://` table `t` over `dir`, 16 KiB cache pages.
async fn server(dir: &Path, cache: &Path) -> ServerHandle {
    crate::common::file_table_server(dir, cache, PAGE).await
}

async fn plain(file: &Path) -> SessionContext {
    let ctx = SessionContext::new();
    ctx.register_parquet("t", file.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();
    ctx
}

/// Runs `sql` on both and checks the answers are equal.
async fn same(silt: &SessionContext, base: &SessionContext, sql: &str) -> Vec<RecordBatch> {
    let got = answer(silt, sql).await;
    let expected = answer(base, sql).await;
    check_same(sql, &got, &expected, is_ordered(sql)).unwrap();
    got
}

fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

fn get_bytes(server: &ServerHandle) -> f64 {
    metric(server, "silt_object_store_get_bytes_total")
}

fn gets(server: &ServerHandle) -> f64 {
    metric(server, "silt_object_store_get_requests_total")
}

/// Compressed bytes of row group `rg`'s column chunks.
fn row_group_bytes(file: &Path, rg: usize) -> u64 {
    let reader = SerializedFileReader::new(std::fs::File::open(file).unwrap()).unwrap();
    reader
        .metadata()
        .row_group(rg)
        .columns()
        .iter()
        .map(|c| c.compressed_size() as u64)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_index_reads_only_the_selected_pages_cold() {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let file = data.path().join("t/sorted.parquet");
    write_sorted(&file);
    let server = server(&data.path().join("t"), cache.path()).await;
    let silt = pushdown_client(&server).await;
    let base = plain(&file).await;

    // The footer only: statistics rule out every row group.
    same(&silt, &base, "SELECT count(*) FROM t WHERE k < 0").await;
    let footer_bytes = get_bytes(&server);
    let pages_before = metric(&server, "silt_scan_pages_pruned_total");

    // Three pages of row group 2 (rows 120,500 ..= 122,499 span pages 120..=122).
    let selective = "SELECT k, v FROM t WHERE k BETWEEN 120500 AND 122499 ORDER BY k";
    let got = same(&silt, &base, selective).await;
    assert_eq!(rows(&got), 2000);
    let read = get_bytes(&server) - footer_bytes;
    let chunk = row_group_bytes(&file, 2) as f64;
    assert!(read > 0.0, "the cold query read nothing");
    assert!(
        read * 4.0 < chunk,
        "a cold selective query read {read} bytes; row group 2's column chunks are {chunk}: not only the selected pages"
    );
    // 47 of the 50 pages of row group 2.
    let pruned = metric(&server, "silt_scan_pages_pruned_total") - pages_before;
    assert!(pruned >= 47.0, "pages pruned: {pruned}");
    assert!(metric(&server, "silt_scan_row_groups_pruned_total{by=\"statistics\"}") >= 3.0 + 4.0);

    // Again: its pages are in the page tier, so no object-store reads.
    let requests = gets(&server);
    same(&silt, &base, selective).await;
    assert_eq!(gets(&server), requests, "a repeated selective query fetched data");

    // A query of the whole column fills the memory tier; then selective
    // queries take it, skipping batches the page index rules out.
    same(&silt, &base, "SELECT count(*), min(v), max(k) FROM t WHERE k % 7 = 3").await;
    for (a, b) in [
        (120_500, 122_499),
        (49_990, 50_010),
        (0, 5),
        (199_000, 250_000),
        (8_191, 8_193),
    ] {
        let sql = format!("SELECT k, v FROM t WHERE k BETWEEN {a} AND {b} ORDER BY k");
        same(&silt, &base, &sql).await;
        let sql = format!("SELECT count(*) FROM t WHERE k >= {a} AND k < {b} AND v LIKE '%1%'");
        same(&silt, &base, &sql).await;
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_index_selects_correct_rows_at_page_and_batch_edges_cold() {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let file = data.path().join("t/sorted.parquet");
    write_sorted(&file);
    let server = server(&data.path().join("t"), cache.path()).await;
    let silt = pushdown_client(&server).await;
    let base = plain(&file).await;
    // Each query on a fresh range, so each reads selected pages cold.
    for (a, b) in [
        (999, 1000),
        (8_191, 8_192),
        (49_999, 50_000),
        (151_000, 175_000),
        (10_500, 10_500),
    ] {
        let sql = format!("SELECT k, v FROM t WHERE k BETWEEN {a} AND {b} ORDER BY k");
        same(&silt, &base, &sql).await;
    }
    same(&silt, &base, "SELECT v FROM t WHERE k IN (3, 77777, 199999) ORDER BY v").await;
    same(&silt, &base, "SELECT count(*) FROM t WHERE k > 180000 AND k < 180100").await;
    assert!(metric(&server, "silt_scan_pages_pruned_total") > 0.0);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bloom_filters_skip_row_groups_statistics_cannot() {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let file = data.path().join("t/scattered.parquet");
    write_scattered(&file);
    let server = server(&data.path().join("t"), cache.path()).await;
    let silt = pushdown_client(&server).await;
    let base = plain(&file).await;
    let bloom = |s: &ServerHandle| metric(s, "silt_scan_row_groups_pruned_total{by=\"bloom_filter\"}");
    let statistics = |s: &ServerHandle| metric(s, "silt_scan_row_groups_pruned_total{by=\"statistics\"}");
    let groups = ROWS as usize / ROW_GROUP;

    // An absent (odd) value inside every row group's min/max.
    let absent = "SELECT id, c FROM t WHERE c = 1000000001";
    let got = same(&silt, &base, absent).await;
    assert_eq!(rows(&got), 0);
    assert_eq!(statistics(&server), 0.0, "statistics should not be able to prune");
    assert_eq!(
        bloom(&server),
        groups as f64,
        "every row group skipped by its bloom filter"
    );

    // Warm: the filters come from the metadata tier, nothing is fetched.
    let requests = gets(&server);
    same(&silt, &base, absent).await;
    assert_eq!(gets(&server), requests, "a warm query read bloom filters again");
    assert_eq!(bloom(&server), 2.0 * groups as f64);

    // A present value lives in one row group: the other three are skipped.
    let present = format!("SELECT id, c FROM t WHERE c = {} ORDER BY id", scattered(123_456));
    let before = bloom(&server);
    let got = same(&silt, &base, &present).await;
    assert!(rows(&got) >= 1);
    assert_eq!(bloom(&server) - before, (groups - 1) as f64);

    // IN: the row groups of the present values are read, the others skipped
    // (values chosen without false positives: plain DataFusion skips the
    // same row groups).
    let before = bloom(&server);
    let sql = format!(
        "SELECT id FROM t WHERE c IN ({}, {}, 7, 1000000001) ORDER BY id",
        scattered(5),
        scattered(60_001)
    );
    let got = same(&silt, &base, &sql).await;
    assert!(rows(&got) >= 2);
    assert_eq!(bloom(&server) - before, (groups - 2) as f64);
    server.shutdown().await.unwrap();
}

/// The default client (a compute-side cache) asks for the layout with the
/// scan's filters: row groups their statistics rule out are left out, so a
/// selective query never fetches, runs or pushes them, and still gives
/// DataFusion's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_client_never_touches_row_groups_statistics_rule_out() {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let file = data.path().join("t/sorted.parquet");
    write_sorted(&file);
    let server = server(&data.path().join("t"), cache.path()).await;
    let silt = crate::common::client(&server).await;
    let base = plain(&file).await;
    // Row group 2 only (rows 100,000 ..= 149,999).
    let selective = "SELECT k, v FROM t WHERE k BETWEEN 120500 AND 122499 ORDER BY k";
    // The first run pushes row group 2 down (used once), the second
    // fetches and keeps it, the third answers it here (later runs may try
    // the scan pushed whole, once the runs here have paid for the try: it
    // keeps 4% of its rows).
    for _ in 0..2 {
        assert_eq!(rows(&same(&silt, &base, selective).await), 2000);
    }
    let plan = silt.sql(selective).await.unwrap().create_physical_plan().await.unwrap();
    let got = datafusion::physical_plan::collect(plan.clone(), silt.task_ctx())
        .await
        .unwrap();
    assert_eq!(rows(&got), 2000);
    let counter = |name: &str| crate::hybrid::plan_counter(&plan, name);
    let groups = counter("row_groups_local")
        + counter("row_groups_fetched")
        + counter("row_groups_hybrid")
        + counter("row_groups_pushed");
    assert_eq!(groups, 1, "only row group 2 may match");
    assert_eq!(counter("row_groups_local"), 1, "fetched by the second run, local now");
    // A filter no row group matches: nothing at all.
    assert_eq!(rows(&same(&silt, &base, "SELECT k FROM t WHERE k < 0").await), 0);
}
