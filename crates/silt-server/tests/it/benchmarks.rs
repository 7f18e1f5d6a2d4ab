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
    let base = baseline_ctx().await;
    run_suite_on(&fx, &base, dir, files).await;
}

/// Runs the queries `files` of `shared/{dir}` through `fx`'s server and
/// through `base` (plain DataFusion on the same files), cold and warm.
pub async fn run_suite_on(fx: &Fixture, base: &datafusion::prelude::SessionContext, dir: &str, files: Vec<String>) {
    assert_suite_matches(fx, base, dir, &files, &["cold", "liquid"]).await;
}

/// Runs `files` once per label of `runs` and asserts every answer equals
/// `base`'s, that the data crossed S3 and Flight, and that liquid columns
/// were read.
async fn assert_suite_matches(
    fx: &Fixture,
    base: &datafusion::prelude::SessionContext,
    dir: &str,
    files: &[String],
    runs: &[&str],
) {
    let silt = fx.client_ctx().await;
    let failures = compare_suite(fx, base, &silt, dir, files, runs).await;
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

fn tpch_files() -> Vec<String> {
    (1..=22).map(|n| format!("q{n:02}.sql")).collect()
}

fn clickbench_files() -> Vec<String> {
    (0..=42).map(|n| format!("q{n:02}.sql")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_22_queries_match_datafusion() {
    run_suite("bench/tpch/queries", tpch_files()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickbench_43_queries_match_datafusion() {
    run_suite("bench/clickbench/queries", clickbench_files()).await;
}

/// The inline path: with `transcode_inline_after = 0` every admitted batch
/// is encoded on the scan's thread (as a wide cold scan's are once the
/// worker falls behind), so even the cold runs read liquid columns.
async fn run_suite_inline(dir: &str, files: Vec<String>) {
    let fx = Fixture::start_with(|c| c.transcode_inline_after = 0).await;
    let base = baseline_ctx().await;
    assert_suite_matches(&fx, &base, dir, &files, &["inline cold", "inline warm"]).await;
    assert_eq!(
        fx.server.engine.tiers().batches().transcode_backlog(),
        0,
        "nothing was left to the worker"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_22_queries_match_datafusion_when_transcoded_inline() {
    run_suite_inline("bench/tpch/queries", tpch_files()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickbench_43_queries_match_datafusion_when_transcoded_inline() {
    run_suite_inline("bench/clickbench/queries", clickbench_files()).await;
}

/// Runs each query of `files` (in `shared/{dir}`) through `silt` once per
/// label of `runs` (before a run labelled `liquid`, the server's transcoder
/// drains) and through `base`; returns how the answers differ.
pub async fn compare_suite(
    fx: &Fixture,
    base: &datafusion::prelude::SessionContext,
    silt: &datafusion::prelude::SessionContext,
    dir: &str,
    files: &[String],
    runs: &[&str],
) -> Vec<String> {
    let mut failures = Vec::new();
    for file in files {
        let original = std::fs::read_to_string(shared_dir().join(dir).join(file)).unwrap();
        let probe = run_script_last_query(base, &original)
            .await
            .unwrap_or_else(|e| panic!("baseline failed on {file}: {e}"));
        let columns = probe.first().map_or(0, |b| b.num_columns());
        let sql = break_ties(&original, columns);
        let expected = run_script_last_query(base, &sql)
            .await
            .unwrap_or_else(|e| panic!("baseline failed on {file} with ties broken: {e}"));
        for &run in runs {
            if run == "liquid" {
                let batches = fx.server.engine.tiers().batches().clone();
                let drained = tokio::task::spawn_blocking(move || batches.wait_transcoded(Duration::from_secs(120)))
                    .await
                    .unwrap();
                assert!(drained, "the transcoder did not drain within 2 minutes");
            }
            match run_script_last_query(silt, &sql).await {
                Err(e) => failures.push(format!("{file} ({run}): Silt failed: {e}")),
                Ok(got) => {
                    if let Err(diff) = check_same(&format!("{file} ({run})"), &got, &expected, is_ordered(&sql)) {
                        failures.push(diff);
                    }
                }
            }
        }
    }
    failures
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
    // The partial aggregate runs on the server; the final one merges here.
    assert!(
        text.contains("partial_aggregate=[gby=[l_returnflag@0] aggr=[count(Int64(1))]]"),
        "{text}"
    );
    assert!(text.contains("AggregateExec: mode=Final"), "{text}");
    assert!(!text.contains("mode=Partial"), "{text}");
}

/// Partial aggregation on the server: TPC-H Q1's shape (a filter keeping
/// nearly every row, sums and averages of expressions per group) sends a
/// few state rows per group instead of the rows, and the answer is plain
/// DataFusion's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregates_run_their_partial_half_on_the_server() {
    let fx = Fixture::start().await;
    let ctx = fx.client_ctx().await;
    let base = baseline_ctx().await;
    let sql = "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS q, \
               sum(l_extendedprice * (1 - l_discount)) AS revenue, avg(l_discount) AS d, \
               min(l_shipdate) AS first, max(l_comment) AS c, count(*) AS n \
               FROM lineitem WHERE l_shipdate <= DATE '1998-09-02' \
               GROUP BY l_returnflag, l_linestatus ORDER BY 1, 2";
    let rows_before = fx.metric("silt_flight_rows_sent_total");
    check_same("q1 shape", &collect(&ctx, sql).await, &collect(&base, sql).await, true).unwrap();
    let sent = fx.metric("silt_flight_rows_sent_total") - rows_before;
    assert!(fx.metric("silt_partial_aggregates_total") >= 1.0);
    // Four groups, a state row per group and server partition.
    assert!(sent <= 4.0 * 64.0, "sent {sent} rows");
    // No GROUP BY, a filter, an aggregate FILTER clause: still one state row per partition.
    let sql = "SELECT count(*) AS n, sum(l_quantity) FILTER (WHERE l_discount > 0.05) AS s, avg(l_tax) AS t \
               FROM lineitem WHERE l_quantity < 30";
    check_same(
        "no group by",
        &collect(&ctx, sql).await,
        &collect(&base, sql).await,
        false,
    )
    .unwrap();
    // On a view, over a cast the view computes.
    let sql = "SELECT \"EventDate\", count(*) AS n, max(\"ResolutionWidth\") AS w FROM hits \
               GROUP BY \"EventDate\" ORDER BY 1";
    check_same("view", &collect(&ctx, sql).await, &collect(&base, sql).await, true).unwrap();
    // DISTINCT becomes a grouping on (key, value): that inner grouping runs on the server.
    let sql = "SELECT l_returnflag, count(DISTINCT l_suppkey) AS n FROM lineitem GROUP BY 1 ORDER BY 1";
    check_same("distinct", &collect(&ctx, sql).await, &collect(&base, sql).await, true).unwrap();
    assert_eq!(fx.metric("silt_query_errors_total"), 0.0);
}

/// A hash join's build side reaches the probe side's scan on the server:
/// the bounds and the few keys of the filtered `part` rows filter
/// `lineitem` there, so only rows that can join cross Flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joins_build_side_filters_the_probe_scan_on_the_server() {
    let fx = Fixture::start().await;
    let ctx = fx.client_ctx().await;
    let base = baseline_ctx().await;
    let sql = "SELECT count(*) AS n, sum(l_quantity) AS q, min(l_partkey) AS k FROM part JOIN lineitem \
               ON p_partkey = l_partkey WHERE p_brand = 'Brand#23'";
    let rows_before = fx.metric("silt_flight_rows_sent_total");
    check_same("join", &collect(&ctx, sql).await, &collect(&base, sql).await, false).unwrap();
    let sent = fx.metric("silt_flight_rows_sent_total") - rows_before;
    let lineitem = collect(&base, "SELECT count(*) FROM lineitem").await[0]
        .column(0)
        .as_any()
        .downcast_ref::<datafusion::arrow::array::Int64Array>()
        .unwrap()
        .value(0);
    let plan = collect(&ctx, &format!("EXPLAIN ANALYZE {sql}")).await;
    let text = datafusion::arrow::util::pretty::pretty_format_batches(&plan)
        .unwrap()
        .to_string();
    assert!(
        sent < lineitem as f64 / 10.0,
        "sent {sent} rows for a lineitem of {lineitem}: {text}"
    );
    let probe = text
        .lines()
        .find(|l| l.contains("SiltScanExec") && l.contains("table=lineitem"))
        .unwrap_or_default();
    assert!(probe.contains("join_filters=[DynamicFilter"), "{text}");
    assert!(!probe.contains("pushed_join_filters=0"), "{text}");
    // A join whose build side is everything still answers right (the
    // filter's bounds are the whole key range; nothing is lost).
    let sql = "SELECT count(*) AS n FROM orders JOIN lineitem ON o_orderkey = l_orderkey WHERE l_quantity < 5";
    check_same(
        "wide join",
        &collect(&ctx, sql).await,
        &collect(&base, sql).await,
        false,
    )
    .unwrap();
    // Anti and outer joins keep their rows.
    let sql = "SELECT count(*) AS n FROM part LEFT JOIN lineitem ON p_partkey = l_partkey AND l_quantity > 49 \
               WHERE l_orderkey IS NULL";
    check_same(
        "left join",
        &collect(&ctx, sql).await,
        &collect(&base, sql).await,
        false,
    )
    .unwrap();
    assert_eq!(fx.metric("silt_query_errors_total"), 0.0);
}

/// What the server would not compute exactly as the client does stays on
/// the client, with the same answers: aggregates not on the allow-list, a
/// client UDF inside an aggregate or a group key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregates_the_server_cannot_run_exactly_stay_on_the_client() {
    let fx = Fixture::start().await;
    let ctx = fx.client_ctx().await;
    let base = baseline_ctx().await;
    ctx.register_udf(client_udf());
    base.register_udf(client_udf());
    for sql in [
        "SELECT l_returnflag, median(l_quantity) AS m FROM lineitem GROUP BY 1 ORDER BY 1",
        "SELECT l_returnflag, sum(double_it(l_orderkey)) AS s FROM lineitem GROUP BY 1 ORDER BY 1",
        "SELECT double_it(l_linenumber) AS k, count(*) AS n FROM lineitem GROUP BY 1 ORDER BY 1",
    ] {
        check_same(sql, &collect(&ctx, sql).await, &collect(&base, sql).await, true).unwrap();
        let plan = collect(&ctx, &format!("EXPLAIN {sql}")).await;
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&plan)
            .unwrap()
            .to_string();
        assert!(!text.contains("partial_aggregate="), "{sql}: {text}");
    }
    assert_eq!(fx.metric("silt_partial_aggregates_total"), 0.0);
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
