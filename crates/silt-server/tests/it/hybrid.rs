//! The default client — Silt's DataFusion client with its compute-side
//! cache ([`silt_client::scan::hybrid`]) — gives plain DataFusion's answers at
//! three cache sizes: none (every scan pushed down whole), small (row
//! groups compete for it, some are evicted or refused) and the default
//! (`SiltTableOptions::default()`, what `register_tables` keeps: every row
//! group ends up local). Each query runs three times: the first pushes
//! everything down, the second fetches the row groups the cache admits, the
//! third answers them locally and pushes down the rest.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{AsArray, BooleanArray, RecordBatch};
use datafusion::arrow::compute::{concat_batches, filter_record_batch};
use datafusion::arrow::datatypes::{UInt32Type, UInt64Type};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{ParquetReadOptions, SessionContext, col, lit};
use datafusion_proto::bytes::Serializeable;
use silt_bench::compare::check_same;
use silt_bench::tpch;
use silt_client::{MemoryForm, SiltTable, SiltTableOptions};
use silt_proto::{ObjectSegments, Projection, ScanRequest, SegmentScope, layout};
use silt_server::config::TableConfig;

use crate::benchmarks::compare_suite;
use crate::common::{Fixture, client_with, data_root};
use crate::ssb::{ssb_fixture, ssb_queries};

/// The cache sizes every suite runs at (`None`: the default client's).
pub(crate) const SIZES: [(&str, Option<u64>); 3] = [("none", Some(0)), ("small", Some(128 << 10)), ("default", None)];
/// The runs of each query (see the module docs).
pub(crate) const RUNS: [&str; 3] = ["pushdown", "fetch", "local"];

/// TPC-H at the tests' scale factor in row groups of 8,192 rows (so a
/// scan has row groups on several paths at once), bucket `tpchrg`.
pub fn tpch_row_groups_dir() -> &'static PathBuf {
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

/// Points `cfg`'s TPC-H tables at [`tpch_row_groups_dir`] (bucket `tpchrg`).
pub fn tpch_over_row_groups(cfg: &mut silt_server::config::ServerConfig) {
    tpch_row_groups_dir();
    for t in tpch::TABLES {
        cfg.tables.insert(
            t.into(),
            TableConfig {
                url: format!("s3://tpchrg/{t}/"),
                ..Default::default()
            },
        );
    }
}

/// The default client's options with a cache of `bytes` (`None`: the default size).
pub(crate) fn options(bytes: Option<u64>) -> SiltTableOptions {
    match bytes {
        Some(bytes) => SiltTableOptions {
            local_cache_bytes: bytes,
            ..Default::default()
        },
        None => SiltTableOptions::default(),
    }
}

/// The simulated link the suites also run over (`silt bench --link`'s proxy).
const LINK: &str = "1gbit/0.5ms";

/// A context like [`client_with`]'s whose client reaches `server` through
/// a throttling proxy on [`LINK`] (kept alive with the context's use).
async fn client_over_link(
    server: &silt_server::ServerHandle,
    options: &SiltTableOptions,
) -> (SessionContext, silt_bench::link::LinkProxy) {
    let link = LINK.parse::<silt_bench::link::LinkSpec>().unwrap().link().unwrap();
    let (proxy, url) = silt_bench::link::LinkProxy::in_front_of(&link, &server.flight_url()).unwrap();
    let ctx = crate::common::client_at(&url, options).await;
    (ctx, proxy)
}

/// Runs `files` at every size of [`SIZES`], on loopback and over [`LINK`],
/// three times each, and fails with every difference. Returns the last
/// (default, loopback) context.
async fn run_at_every_size(fx: &Fixture, base: &SessionContext, dir: &str, files: &[String]) -> SessionContext {
    let mut failures = Vec::new();
    let mut last = None;
    for (label, bytes) in SIZES {
        let (ctx, proxy) = client_over_link(&fx.server, &options(bytes)).await;
        let found = compare_suite(fx, base, &ctx, dir, files, &RUNS).await;
        failures.extend(found.into_iter().map(|f| format!("[{label} cache, {LINK}] {f}")));
        let crossed = proxy.link().counters();
        assert!(
            crossed.to_server > 0 && crossed.to_client > 0,
            "{label}: nothing crossed the link"
        );
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
async fn tpch_22_queries_through_the_default_client() {
    let dir = tpch_row_groups_dir();
    let fx = Fixture::start_with(|cfg| {
        cfg.tables.clear();
        cfg.views.clear();
        tpch_over_row_groups(cfg);
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

    // An aggregate sends a few states per scan: a new client pushes it
    // whole (at least three times: the first runs may find the server
    // cold, and a try here waits until the pushed runs have paid for its
    // fetch), then tries it here (fetching, then answered from its cache),
    // then takes the faster of the two measured placements, one or the
    // other whole. How many pushed runs pay for the fetch depends on their
    // times: the test waits for the try, up to a bound no machine needs.
    let q6 = "SELECT sum(l_extendedprice * l_discount) AS revenue FROM lineitem \
              WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' \
              AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24";
    let fresh = client_with(&fx.server, &options(None)).await;
    let mut pushed = 0;
    let tried = loop {
        let text = explain_analyze(&fresh, q6).await;
        if text.contains("scans_pushed_whole=0") {
            break text;
        }
        assert!(text.contains("row_groups_local=0"), "{text}");
        pushed += 1;
        assert!(pushed <= 200, "never tried here after {pushed} pushed runs: {text}");
    };
    assert!(pushed >= 3, "the first three runs are pushed whole, {pushed} were");
    assert!(!tried.contains("row_groups_fetched=0"), "{tried}");
    let here = explain_analyze(&fresh, q6).await;
    assert!(here.contains("row_groups_fetched=0"), "{here}");
    assert!(!here.contains("row_groups_local=0"), "{here}");
    let then = explain_analyze(&fresh, q6).await;
    let whole = then.contains("scans_pushed_whole=1");
    assert_eq!(whole, then.contains("row_groups_local=0"), "{then}");

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
async fn clickbench_43_queries_through_the_default_client() {
    let fx = Fixture::start().await;
    let base = crate::common::baseline_ctx().await;
    let files: Vec<String> = (0..=42).map(|n| format!("q{n:02}.sql")).collect();
    let ctx = run_at_every_size(&fx, &base, "bench/clickbench/queries", &files).await;
    // The server's `hits` view is planned here over `hits_raw`, so its
    // scans kept row groups in the cache and answered from it.
    let hits = ctx.table_provider("hits").await.unwrap();
    assert!(
        hits.downcast_ref::<SiltTable>().is_none(),
        "hits is planned on the client"
    );
    let stats = cache_of(&ctx, "hits_raw").await.stats();
    assert!(stats.hits > 0 && stats.admitted > 0, "{stats:?}");
    // Without a cache it stays one pushed table.
    let pushed = client_with(&fx.server, &options(Some(0))).await;
    let hits = pushed.table_provider("hits").await.unwrap();
    assert!(hits.downcast_ref::<SiltTable>().is_some(), "hits is pushed whole");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssb_13_queries_through_the_default_client() {
    let (fx, base) = ssb_fixture().await;
    let ctx = run_at_every_size(&fx, &base, "bench/ssb/queries", &ssb_queries()).await;
    let stats = cache_of(&ctx, "lineorder").await.stats();
    assert!(stats.hits > 0, "{stats:?}");
    // The default cache again with Arrow segments (the others are liquid).
    let arrow = SiltTableOptions {
        local_cache_form: MemoryForm::Arrow,
        ..options(SIZES[2].1)
    };
    let ctx = client_with(&fx.server, &arrow).await;
    let failures = compare_suite(&fx, &base, &ctx, "bench/ssb/queries", &ssb_queries(), &RUNS).await;
    assert!(failures.is_empty(), "[default arrow cache] {}", failures.join("\n"));
    assert!(cache_of(&ctx, "lineorder").await.stats().hits > 0);
}

/// Sum of counter `name` over the nodes of `plan` (after it ran).
pub fn plan_counter(plan: &Arc<dyn ExecutionPlan>, name: &str) -> usize {
    let mut sum = 0;
    plan.apply(|node| {
        if let Some(value) = node.metrics().and_then(|m| m.sum_by_name(name)) {
            sum += value.as_usize();
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    sum
}

/// Runs `sql` on `ctx`, returning its rows and its executed plan.
pub async fn run_with_plan(ctx: &SessionContext, sql: &str) -> (Vec<RecordBatch>, Arc<dyn ExecutionPlan>) {
    let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
    let rows = datafusion::physical_plan::collect(plan.clone(), ctx.task_ctx())
        .await
        .unwrap();
    (rows, plan)
}

/// Once a scan's filter columns and some projected ones are local, a scan
/// needing one more column filters here and fetches only that column's
/// surviving rows (a scoped scan with a row bitmap), with the same answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hybrid_path_filters_here_and_fetches_the_surviving_rows() {
    let fx = Fixture::start().await;
    let base = crate::common::baseline_ctx().await;
    for form in [MemoryForm::Liquid, MemoryForm::Arrow] {
        let client = silt_client::SiltClient::connect(&fx.server.flight_url()).await.unwrap();
        // The model's priors, not what this machine measures: the path
        // choices below are the fixed model's (hybrid beats pushdown).
        client.calibration().pin(Some(silt_client::path_cost::Estimates::priors(
            silt_client::path_cost::DEFAULT_LINK_BYTES_PER_SECOND,
        )));
        let ctx = SessionContext::new();
        let options = SiltTableOptions {
            local_cache_bytes: 1 << 30,
            local_cache_form: form,
            ..Default::default()
        };
        silt_client::register_tables_with_options(&ctx, &client, &options)
            .await
            .unwrap();
        let warm = "SELECT l_comment, l_orderkey FROM lineitem WHERE l_quantity < 40";
        for _ in 0..3 {
            ctx.sql(warm).await.unwrap().collect().await.unwrap();
        }
        let (_, plan) = run_with_plan(&ctx, warm).await;
        assert!(
            plan_counter(&plan, "row_groups_local") > 0,
            "{form:?}: the warm scan runs here"
        );
        assert_eq!(cache_of(&ctx, "lineitem").await.stats().rejected, 0);

        // l_shipinstruct is new (not yet worth fetching whole): hybrid.
        for (sql, keeps_rows) in [
            (
                "SELECT l_comment, l_shipinstruct, l_orderkey FROM lineitem WHERE l_quantity < 40",
                true,
            ),
            // A filter that keeps no row asks the server for nothing (one
            // statistics cannot rule out: quantities are whole numbers).
            (
                "SELECT l_comment, l_shipmode FROM lineitem WHERE l_quantity > 39.25 AND l_quantity < 39.75",
                false,
            ),
            // No filter: the missing column's every row, the rest local.
            ("SELECT l_comment, l_returnflag FROM lineitem", true),
        ] {
            let (got, plan) = run_with_plan(&ctx, sql).await;
            let expected = crate::common::answer(&base, sql).await;
            if got.is_empty() {
                assert!(expected.iter().all(|b| b.num_rows() == 0), "{sql}");
            } else {
                check_same(sql, &got, &expected, false).unwrap();
            }
            assert!(plan_counter(&plan, "row_groups_hybrid") > 0, "{form:?} {sql}");
            assert_eq!(plan_counter(&plan, "row_groups_pushed"), 0, "{form:?} {sql}");
            let rows: usize = got.iter().map(RecordBatch::num_rows).sum();
            assert_eq!(rows > 0, keeps_rows, "{sql}");
        }
        if form == MemoryForm::Liquid {
            let provider = ctx.table_provider("lineitem").await.unwrap();
            let table = provider.downcast_ref::<SiltTable>().unwrap();
            let cache = table.local_cache().unwrap();
            assert!(cache.used() > 0 && cache.used() <= cache.budget());
        }
    }
    assert_eq!(fx.metric("silt_query_errors_total"), 0.0);
}

/// The server returns exactly the rows a scope's bitmap selects, in
/// row-group order, and still applies a scan's filter to them; a bitmap of
/// the wrong length is refused and the server carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_bitmap_selects_rows_of_a_scoped_row_group() {
    let fx = Fixture::start().await;
    let client = silt_client::SiltClient::connect(&fx.server.flight_url()).await.unwrap();
    let layout = client
        .scan_all(&ScanRequest {
            table: "orders".into(),
            projection: Some(Projection {
                columns: vec!["o_orderkey".into()],
            }),
            layout_only: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let first = &layout[0];
    let text = |name: &str| {
        first
            .column_by_name(name)
            .unwrap()
            .as_string::<i32>()
            .value(0)
            .to_string()
    };
    let (object, version) = (text(layout::OBJECT), text(layout::VERSION));
    let rows = first
        .column_by_name(layout::ROWS)
        .unwrap()
        .as_primitive::<UInt64Type>()
        .value(0) as usize;
    let row_group = first
        .column_by_name(layout::ROW_GROUP)
        .unwrap()
        .as_primitive::<UInt32Type>()
        .value(0);
    // Every third row.
    let mask = BooleanArray::from_iter((0..rows).map(|i| Some(i % 3 == 0)));
    let bitmap = mask.values().sliced().as_slice()[..rows.div_ceil(8)].to_vec();
    let scan = |bitmap: Vec<u8>, filters: Vec<Vec<u8>>| ScanRequest {
        table: "orders".into(),
        projection: Some(Projection {
            columns: vec!["o_orderkey".into(), "o_custkey".into()],
        }),
        filters,
        scope: Some(SegmentScope {
            objects: vec![ObjectSegments {
                path: object.clone(),
                version: version.clone(),
                row_groups: vec![row_group],
                selections: vec![bitmap],
            }],
        }),
        ..Default::default()
    };
    let whole = client.scan_all(&scan(Vec::new(), Vec::new())).await.unwrap();
    let whole = concat_batches(&whole[0].schema(), &whole).unwrap();
    assert_eq!(whole.num_rows(), rows, "an empty bitmap returns every row");
    let picked = client.scan_all(&scan(bitmap.clone(), Vec::new())).await.unwrap();
    let picked = concat_batches(&whole.schema(), &picked).unwrap();
    assert_eq!(
        picked,
        filter_record_batch(&whole, &mask).unwrap(),
        "in row-group order"
    );

    // With a filter too: both apply.
    let filter = col("o_custkey").gt(lit(700i64));
    let filtered = client
        .scan_all(&scan(bitmap.clone(), vec![filter.to_bytes().unwrap().to_vec()]))
        .await
        .unwrap();
    let filtered: usize = filtered.iter().map(RecordBatch::num_rows).sum();
    let customers = picked
        .column(1)
        .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
    let expected = customers.iter().filter(|c| c.is_some_and(|c| c > 700)).count();
    assert!(expected > 0 && expected < picked.num_rows());
    assert_eq!(filtered, expected);

    let err = client.scan_all(&scan(vec![0xff], Vec::new())).await.unwrap_err();
    assert!(err.to_string().contains("row selection"), "{err}");
    assert!(!client.scan_all(&scan(bitmap, Vec::new())).await.unwrap().is_empty());
}

/// One scan whose row groups take all four paths at once — local (every
/// needed column cached), fetch (its columns become worth caching now),
/// hybrid (the filter's and a wide projected column cached, a narrow one
/// fetched for the surviving rows) and pushdown (nothing cached) — shown by
/// the scan's counters, and the answer is DataFusion's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_scan_takes_all_four_paths_and_equals_datafusion() {
    let data = FourPaths::write();
    let cache_dir = tempfile::tempdir().unwrap();
    let server = crate::common::file_table_server(&data.dir(), cache_dir.path(), 64 << 10).await;
    let silt = client_with(&server, &FourPaths::options()).await;
    data.check(&silt).await;
    assert_eq!(crate::common::metric(&server, "silt_query_errors_total"), 0.0);
}

/// Table `t` of four row groups whose scan, after [`FourPaths::check`]'s
/// warm-up, takes all four paths at once (one row group each).
pub(crate) struct FourPaths {
    data: tempfile::TempDir,
}

impl FourPaths {
    const RG: i64 = 20_000;

    /// Writes `t/four.parquet`: `k` sorted (so statistics tell row groups
    /// apart), `wide` ~200 bytes a row, `narrow` 8.
    pub(crate) fn write() -> Self {
        use datafusion::arrow::array::{Int64Array, StringArray};
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        use datafusion::parquet::arrow::ArrowWriter;
        use datafusion::parquet::file::properties::WriterProperties;

        let data = tempfile::tempdir().unwrap();
        let four = FourPaths { data };
        let file = four.file();
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("wide", DataType::Utf8, false),
            Field::new("narrow", DataType::Int64, false),
        ]));
        let rows = 4 * Self::RG;
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(0..rows)),
                Arc::new(StringArray::from_iter_values((0..rows).map(|k| format!("{k:0>200}")))),
                Arc::new(Int64Array::from_iter_values((0..rows).map(|k| k * 7 % 1000))),
            ],
        )
        .unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(Self::RG as usize))
            .build();
        let mut writer = ArrowWriter::try_new(std::fs::File::create(&file).unwrap(), schema, Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        four
    }

    /// The folder a server's table `t` reads.
    pub(crate) fn dir(&self) -> std::path::PathBuf {
        self.data.path().join("t")
    }

    fn file(&self) -> std::path::PathBuf {
        self.dir().join("four.parquet")
    }

    /// The client's options: a cache that holds everything, and a 1 Gbit/s
    /// prior, so the surviving rows of `wide` outweigh a round trip.
    pub(crate) fn options() -> SiltTableOptions {
        SiltTableOptions {
            local_cache_bytes: 1 << 30,
            link_bytes_per_second: Some(1.25e8),
            ..Default::default()
        }
    }

    /// Warms `silt` (a fresh client of table `t` with [`Self::options`])
    /// so that one scan then takes every path, runs it, and checks its
    /// answer against DataFusion's and its counters (one row group each).
    pub(crate) async fn check(&self, silt: &SessionContext) {
        let run = |sql: String| {
            let silt = silt.clone();
            async move {
                silt.sql(&sql).await.unwrap().collect().await.unwrap();
            }
        };
        let range = |g: i64| format!("k >= {} AND k < {}", g * Self::RG, (g + 1) * Self::RG);
        // Row group 0: every column used twice, so fetched and kept.
        for _ in 0..2 {
            run(format!(
                "SELECT k, wide, narrow FROM t WHERE {} AND k % 10 < 7",
                range(0)
            ))
            .await;
        }
        // Row group 1: `k` and `wide` kept, `narrow` never read.
        for _ in 0..2 {
            run(format!("SELECT k, wide FROM t WHERE {} AND k % 10 < 7", range(1))).await;
        }
        // Row group 2: every column used once (pushed down), so the next use admits it.
        run(format!(
            "SELECT k, wide, narrow FROM t WHERE {} AND k % 10 < 7",
            range(2)
        ))
        .await;
        // Row group 3: never seen.

        let sql = "SELECT k, wide, narrow FROM t WHERE k % 10 < 7";
        let (got, plan) = run_with_plan(silt, sql).await;
        let base = SessionContext::new();
        base.register_parquet("t", self.file().to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
        check_same(sql, &got, &crate::common::answer(&base, sql).await, false).unwrap();
        for (path, expected) in [
            ("row_groups_local", 1),
            ("row_groups_fetched", 1),
            ("row_groups_hybrid", 1),
            ("row_groups_pushed", 1),
        ] {
            assert_eq!(plan_counter(&plan, path), expected, "{path}");
        }
    }
}
