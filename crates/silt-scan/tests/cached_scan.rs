//! The cached scan against DataFusion's own Parquet scan of the same file,
//! and what it admits to the memory tier.

use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use silt_cache::{
    BATCH_ROWS, CacheMetrics, CacheTiers, CachedStore, ColumnCache, Freshness, PageCache, PageCacheConfig, PageStore,
};
use silt_scan::{ParquetTable, ScanMetrics, ScanShared, TableOptions, register_parquet_table};
use silt_store::TableLocation;

const ROWS: i64 = 100_000;
const ROW_GROUP: usize = 20_000;

/// `id` ascending (so row groups have disjoint ranges), `tag` cycling over 7
/// strings with nulls, `payload` a wide string.
fn parquet_bytes() -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("tag", DataType::Utf8, true),
        Field::new("payload", DataType::Utf8, false),
    ]));
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(ROW_GROUP))
        .build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema.clone(), Some(props)).unwrap();
    for start in (0..ROWS).step_by(10_000) {
        let ids: Vec<i64> = (start..start + 10_000).collect();
        let tags: Vec<Option<String>> = ids
            .iter()
            .map(|i| (i % 11 != 0).then(|| format!("tag{}", i % 7)))
            .collect();
        let payload: Vec<String> = ids.iter().map(|i| format!("payload-{i:032}")).collect();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(StringArray::from(tags)),
                Arc::new(StringArray::from(payload)),
            ],
        )
        .unwrap();
        writer.write(&batch).unwrap();
    }
    writer.close().unwrap();
    out
}

struct Setup {
    silt: SessionContext,
    plain: SessionContext,
    batches: Arc<ColumnCache>,
    _dir: tempfile::TempDir,
}

async fn setup(memory_budget: u64) -> Setup {
    let bytes = parquet_bytes();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.parquet");
    std::fs::write(&file, &bytes).unwrap();
    let plain = SessionContext::new();
    plain
        .register_parquet("t", file.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();

    let mem = Arc::new(InMemory::new());
    mem.put(&Path::from("t.parquet"), PutPayload::from(bytes))
        .await
        .unwrap();
    let batches = ColumnCache::new(memory_budget, CacheMetrics::noop());
    let pages = PageCache::new(PageCacheConfig::default(), CacheMetrics::noop());
    let tiers = CacheTiers::new(PageStore::builder(pages).merge_gap(0).build(), batches.clone());
    let store = Arc::new(CachedStore::new(
        mem as Arc<dyn ObjectStore>,
        tiers,
        "t0",
        Freshness::Always,
    ));
    let silt = SessionContext::new();
    let location = TableLocation::parse("memory:///t.parquet").unwrap();
    let table = ParquetTable {
        name: "t",
        location: &location,
        store,
        options: TableOptions::default(),
        catalog: None,
    };
    let shared = ScanShared {
        batches: batches.clone(),
        metrics: ScanMetrics::noop(),
    };
    register_parquet_table(&silt, table, &shared).await.unwrap();
    Setup {
        silt,
        plain,
        batches,
        _dir: dir,
    }
}

async fn text(ctx: &SessionContext, sql: &str) -> String {
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    pretty_format_batches(&batches).unwrap().to_string()
}

const QUERIES: &[&str] = &[
    "SELECT count(*) FROM t",
    "SELECT count(*), sum(id), min(tag), max(payload) FROM t WHERE id >= 30000 AND id < 30100",
    "SELECT tag, count(*) AS n FROM t WHERE tag IS NOT NULL GROUP BY tag ORDER BY tag",
    "SELECT id, tag FROM t WHERE tag = 'tag3' AND id % 1000 = 3 ORDER BY id",
    "SELECT payload FROM t WHERE tag LIKE '%5' ORDER BY id LIMIT 5",
    "SELECT id FROM t WHERE tag IS NULL ORDER BY id DESC LIMIT 3",
    "SELECT * FROM t WHERE id > 99990 ORDER BY id",
    "SELECT id FROM t LIMIT 0",
    "SELECT count(*) FROM t WHERE id < 0",
];

#[tokio::test]
async fn answers_equal_datafusion_cold_and_warm() {
    let s = setup(1 << 30).await;
    for round in ["cold", "warm"] {
        for sql in QUERIES {
            assert_eq!(text(&s.silt, sql).await, text(&s.plain, sql).await, "{round}: {sql}");
        }
    }
    assert!(s.batches.weighted_size() > 0);
}

#[tokio::test]
async fn a_row_group_the_filter_rejects_never_decodes_its_projected_columns() {
    let s = setup(1 << 30).await;
    // `id % 20000 = 7` defeats statistics pruning but matches one row per
    // row group; `id < 20000` prunes all but the first row group.
    let sql = "SELECT payload FROM t WHERE id % 20000 = 7 AND id < 40000 AND tag = 'tag0'";
    let per_group = ROW_GROUP.div_ceil(BATCH_ROWS) as u64;
    // Row groups 0 and 1 survive pruning. In group 0 the filter keeps row 7
    // (tag0), so `payload` is read there: on the first run only that row
    // (a first touch of a sparse projection is not admitted), on the second
    // the whole chunk, admitted. In group 1 row 20007 has tag `tag1`, so only
    // the filter columns (id, tag) are ever decoded.
    let filter_columns = per_group * 2 /* id, tag */ * 2;
    for expected in [filter_columns, filter_columns + per_group /* payload of group 0 */] {
        assert_eq!(text(&s.silt, sql).await, text(&s.plain, sql).await);
        assert_eq!(s.batches.entry_count(), expected, "entries");
    }
}

#[tokio::test]
async fn a_tiny_memory_budget_still_gives_right_answers() {
    let s = setup(64 << 10).await;
    for sql in QUERIES {
        assert_eq!(text(&s.silt, sql).await, text(&s.plain, sql).await, "{sql}");
    }
    assert!(s.batches.weighted_size() <= 64 << 10);
}
