//! Differential tests: every TPC-H and ClickBench query through Silt (scans
//! pushed to the server over Flight, data from S3 on loopback) must equal
//! plain DataFusion reading the same files. Each query runs twice through
//! Silt: cold (columns decoded from Parquet, admitted as Arrow) and, once the
//! transcoder has drained, warm with the memory tier in the liquid form.

use std::time::Duration;

use silt_client::script::run_script_last_query;

use crate::common::{Fixture, baseline_ctx, break_ties, check_same, is_ordered, shared_dir};

async fn run_suite(dir: &str, files: Vec<String>) {
    let fx = Fixture::start().await;
    let silt = fx.client_ctx().await;
    let base = baseline_ctx().await;
    let mut failures = Vec::new();
    for file in &files {
        let original = std::fs::read_to_string(shared_dir().join(dir).join(file)).unwrap();
        let probe = run_script_last_query(&base, &original)
            .await
            .unwrap_or_else(|e| panic!("baseline failed on {file}: {e}"));
        let columns = probe.first().map_or(0, |b| b.num_columns());
        let sql = break_ties(&original, columns);
        let expected = run_script_last_query(&base, &sql)
            .await
            .unwrap_or_else(|e| panic!("baseline failed on {file} with ties broken: {e}"));
        for run in ["cold", "liquid"] {
            if run == "liquid" {
                let batches = fx.server.engine.tiers().batches().clone();
                let drained = tokio::task::spawn_blocking(move || batches.wait_transcoded(Duration::from_secs(120)))
                    .await
                    .unwrap();
                assert!(drained, "the transcoder did not drain within 2 minutes");
            }
            match run_script_last_query(&silt, &sql).await {
                Err(e) => failures.push(format!("{file} ({run}): Silt failed: {e}")),
                Ok(got) => {
                    if let Err(diff) = check_same(&format!("{file} ({run})"), &got, &expected, is_ordered(&sql)) {
                        failures.push(diff);
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} queries differ:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
    // The data really crossed the S3 protocol and the Flight connection.
    assert!(fx.metric("silt_object_store_get_requests_total") > 0.0);
    assert!(fx.metric("silt_flight_bytes_sent_total") > 0.0);
    assert_eq!(fx.metric("silt_query_errors_total"), 0.0);
    // The warm runs really read liquid columns.
    let usage = fx.server.engine.tiers().batches().usage_by_column();
    assert!(
        usage.iter().any(|u| u.form == "liquid" && u.bytes > 0),
        "no column batch was transcoded to liquid: {usage:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_22_queries_match_datafusion() {
    run_suite("bench/tpch/queries", (1..=22).map(|n| format!("q{n:02}.sql")).collect()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickbench_43_queries_match_datafusion() {
    run_suite(
        "bench/clickbench/queries",
        (0..=42).map(|n| format!("q{n:02}.sql")).collect(),
    )
    .await;
}

async fn collect(ctx: &datafusion::prelude::SessionContext, sql: &str) -> Vec<datafusion::arrow::array::RecordBatch> {
    ctx.sql(sql).await.unwrap().collect().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_what_is_pushed_down() {
    let fx = Fixture::start().await;
    let ctx = fx.client_ctx().await;
    let plan = collect(
        &ctx,
        "EXPLAIN SELECT l_returnflag, count(*) FROM lineitem WHERE l_quantity < 10 GROUP BY l_returnflag",
    )
    .await;
    let text = datafusion::arrow::util::pretty::pretty_format_batches(&plan)
        .unwrap()
        .to_string();
    assert!(text.contains("SiltScanExec: pushed down to"), "{text}");
    assert!(text.contains("table=lineitem projection=[l_returnflag]"), "{text}");
    assert!(text.contains("filters=[lineitem.l_quantity < "), "{text}");
    // The aggregate stays on the client.
    assert!(text.contains("AggregateExec"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_are_queried_like_tables_and_filters_reach_the_scan() {
    let fx = Fixture::start().await;
    let ctx = fx.client_ctx().await;
    let base = baseline_ctx().await;
    let sql = "SELECT count(*) AS c FROM hits WHERE \"EventDate\" >= '2013-07-15' AND \"SearchPhrase\" <> ''";
    let got = collect(&ctx, sql).await;
    check_same("view count", &got, &collect(&base, sql).await, false).unwrap();
    // Only the row markers of matching rows came back, not the table.
    let sent = fx.metric("silt_flight_rows_sent_total");
    let total = collect(&base, "SELECT count(*) FROM hits").await[0]
        .column(0)
        .as_any()
        .downcast_ref::<datafusion::arrow::array::Int64Array>()
        .unwrap()
        .value(0);
    assert!(sent < total as f64, "sent {sent} rows of {total}");
    assert!(fx.server.engine.metrics().snapshot()["silt_queries_total"] > 0.0);
}

#[test]
fn ties_are_broken_on_every_output_column() {
    assert_eq!(
        break_ties("SELECT a, b FROM t ORDER BY b DESC LIMIT 10;", 2),
        "SELECT a, b FROM t ORDER BY b DESC, 1, 2 LIMIT 10"
    );
    assert_eq!(
        break_ties("SELECT a FROM t LIMIT 5 OFFSET 7", 1),
        "SELECT a FROM t ORDER BY 1 LIMIT 5 OFFSET 7"
    );
    assert_eq!(
        break_ties("SELECT a FROM t ORDER BY a", 1),
        "SELECT a FROM t ORDER BY a"
    );
}

/// A function only the client has: `double_it(x) = 2x` on Int64.
fn client_udf() -> datafusion::logical_expr::ScalarUDF {
    use datafusion::arrow::array::{ArrayRef, Int64Array};
    use datafusion::arrow::datatypes::DataType;
    use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
    create_udf(
        "double_it",
        vec![DataType::Int64],
        DataType::Int64,
        Volatility::Immutable,
        std::sync::Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let x = arrays[0].as_any().downcast_ref::<Int64Array>().unwrap();
            let doubled: Int64Array = x.iter().map(|v| v.map(|v| v * 2)).collect();
            Ok(ColumnarValue::Array(std::sync::Arc::new(doubled) as ArrayRef))
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_with_a_client_udf_runs_on_the_client() {
    let fx = Fixture::start().await;
    let ctx = fx.client_ctx().await;
    let base = baseline_ctx().await;
    ctx.register_udf(client_udf());
    base.register_udf(client_udf());
    let sql = "SELECT count(*) AS c, sum(l_orderkey) AS s FROM lineitem \
               WHERE double_it(l_orderkey) > 20000 AND l_quantity < 10";
    check_same(
        "client udf",
        &collect(&ctx, sql).await,
        &collect(&base, sql).await,
        false,
    )
    .unwrap();
    // The server gets the filter it evaluates exactly; the UDF stays here.
    let plan = collect(&ctx, &format!("EXPLAIN {sql}")).await;
    let text = datafusion::arrow::util::pretty::pretty_format_batches(&plan)
        .unwrap()
        .to_string();
    assert!(text.contains("filters=[lineitem.l_quantity < "), "{text}");
    let pushed = text.lines().find(|l| l.contains("SiltScanExec")).unwrap_or_default();
    assert!(!pushed.contains("double_it"), "{text}");
    assert!(text.contains("double_it"), "the client evaluates it: {text}");
}
