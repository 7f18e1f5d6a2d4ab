//! Point lookups: `SiltClient::lookup` (one `DoGet`, nothing planned) and SQL
//! of exactly the lookup shape answer like plain DataFusion on the same
//! files, for present, absent, null and duplicate keys, across row groups and
//! files, on integer, string and date keys; other shapes and key types take
//! the general path; an overwritten object is seen by the next lookup.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Date32Array, Float64Array, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use silt_client::SiltClient;
use silt_server::ServerHandle;

use crate::common::{check_same, metric};

const ROW_GROUP: usize = 3_000;
const PAGE_ROWS: usize = 250;

/// Rows `ids` with a name (null every 11th row), a day, a score and a payload.
fn batch(ids: &[i64], tag: &str) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("day", DataType::Date32, false),
        Field::new("score", DataType::Float64, false),
        Field::new("payload", DataType::Utf8, false),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from_iter(
                ids.iter().map(|i| (i % 11 != 0).then(|| format!("n-{}", i % 500))),
            )),
            Arc::new(Date32Array::from_iter_values(
                ids.iter().map(|i| 19_000 + (*i % 40) as i32),
            )),
            Arc::new(Float64Array::from_iter_values(ids.iter().map(|i| *i as f64 / 2.0))),
            Arc::new(StringArray::from_iter_values(ids.iter().map(|i| format!("{tag}-{i}")))),
        ],
    )
    .unwrap()
}

fn write(path: &Path, batch: &RecordBatch) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(ROW_GROUP))
        .set_data_page_row_count_limit(PAGE_ROWS)
        .set_write_batch_size(PAGE_ROWS)
        .build();
    let tmp = path.with_extension("tmp");
    let mut w = ArrowWriter::try_new(std::fs::File::create(&tmp).unwrap(), batch.schema(), Some(props)).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
    std::fs::rename(tmp, path).unwrap();
}

/// Two files: `a` holds ids 0..10,000 (sorted), `b` ids 10,000..16,000 and
/// again 500..600 (duplicates of `a`'s, unsorted tail).
fn write_table(dir: &Path) {
    let a: Vec<i64> = (0..10_000).collect();
    write(&dir.join("a.parquet"), &batch(&a, "a"));
    let b: Vec<i64> = (10_000..16_000).chain(500..600).collect();
    write(&dir.join("b.parquet"), &batch(&b, "b"));
}

/// A server over a freshly written table, its client, and plain DataFusion
/// on the same files (the temporary folders live as long as it).
struct Setup {
    _data: tempfile::TempDir,
    _cache: tempfile::TempDir,
    dir: std::path::PathBuf,
    server: ServerHandle,
    client: SiltClient,
    base: SessionContext,
}

async fn setup() -> Setup {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let dir = data.path().join("t");
    write_table(&dir);
    let server = crate::common::file_table_server(&dir, cache.path(), 16 << 10).await;
    let client = SiltClient::connect(&server.flight_url()).await.unwrap();
    let base = plain(&dir).await;
    Setup {
        _data: data,
        _cache: cache,
        dir,
        server,
        client,
        base,
    }
}

async fn plain(dir: &Path) -> SessionContext {
    let ctx = SessionContext::new();
    ctx.register_parquet("t", dir.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();
    ctx
}

async fn expected(base: &SessionContext, sql: &str) -> Vec<RecordBatch> {
    crate::common::answer(base, sql).await
}

fn lookups(server: &ServerHandle) -> f64 {
    metric(server, "silt_lookups_total")
}

/// `keys` as SQL literals of `IN (...)`.
fn in_list(keys: &[Option<String>]) -> String {
    keys.iter()
        .map(|k| k.clone().unwrap_or_else(|| "NULL".into()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_answer_like_datafusion_on_every_key_type() {
    let Setup {
        dir: _,
        server,
        client,
        base,
        _data,
        _cache,
    } = setup().await;

    // Integers: present in several row groups of `a`, in `b`, duplicated
    // across files, absent (inside and outside the range), null, and asked twice.
    let ids: ArrayRef = Arc::new(Int64Array::from(vec![
        Some(0),
        Some(2_999),
        Some(3_000),
        Some(9_999),
        Some(12_345),
        Some(550),
        Some(550),
        None,
        Some(-4),
        Some(99_999),
    ]));
    let sql_keys = "0, 2999, 3000, 9999, 12345, 550, 550, NULL, -4, 99999";
    let cols = ["id", "name", "payload"].map(String::from).to_vec();
    let got = client.lookup("t", "id", ids, Some(cols)).await.unwrap();
    let want = expected(
        &base,
        &format!("SELECT id, name, payload FROM t WHERE id IN ({sql_keys})"),
    )
    .await;
    check_same("lookup by id", &got, &want, false).unwrap();
    // 0, 2999, 3000, 9999, 12345 once; 550 in both files.
    assert_eq!(got.iter().map(RecordBatch::num_rows).sum::<usize>(), 7);
    // Only the key (answered from the pinned keys, no page of another
    // column read), and only other columns (the key not returned).
    for cols in [vec!["id"], vec!["payload", "name"]] {
        let ids: ArrayRef = Arc::new(Int64Array::from(vec![
            Some(2_999),
            Some(550),
            None,
            Some(12_345),
            Some(-4),
        ]));
        let list = cols.join(", ");
        let got = client
            .lookup("t", "id", ids, Some(cols.iter().map(|c| c.to_string()).collect()))
            .await
            .unwrap();
        let want = expected(
            &base,
            &format!("SELECT {list} FROM t WHERE id IN (2999, 550, NULL, 12345, -4)"),
        )
        .await;
        check_same(&format!("lookup of {list} by id"), &got, &want, false).unwrap();
        assert_eq!(got.iter().map(RecordBatch::num_rows).sum::<usize>(), 4, "{list}");
    }

    // Strings (nulls in the column, a duplicate-heavy key), all columns.
    let names: Vec<Option<String>> = vec![Some("n-7".into()), Some("n-499".into()), Some("nope".into()), None];
    let got = client
        .lookup("t", "name", Arc::new(StringArray::from(names.clone())), None)
        .await
        .unwrap();
    let sql_names: Vec<Option<String>> = names.iter().map(|n| n.as_ref().map(|s| format!("'{s}'"))).collect();
    let want = expected(
        &base,
        &format!("SELECT * FROM t WHERE name IN ({})", in_list(&sql_names)),
    )
    .await;
    check_same("lookup by name", &got, &want, false).unwrap();
    assert!(got.iter().map(RecordBatch::num_rows).sum::<usize>() > 10);

    // Dates, keys given as strings (cast to the column's type).
    let days: ArrayRef = Arc::new(StringArray::from(vec!["2022-01-05", "1999-01-01"]));
    let got = client
        .lookup("t", "day", days, Some(vec!["id".into(), "day".into()]))
        .await
        .unwrap();
    let want = expected(
        &base,
        "SELECT id, day FROM t WHERE day IN (DATE '2022-01-05', DATE '1999-01-01')",
    )
    .await;
    check_same("lookup by day", &got, &want, false).unwrap();

    // Errors name the problem; the server carries on.
    let float_key = client
        .lookup("t", "score", Arc::new(Float64Array::from(vec![1.5])), None)
        .await
        .unwrap_err();
    assert!(float_key.to_string().contains("key column"), "{float_key}");
    let unknown = client
        .lookup("nope", "id", Arc::new(Int64Array::from(vec![1])), None)
        .await
        .unwrap_err();
    assert!(unknown.to_string().contains("unknown table"), "{unknown}");
    let bad_key = client
        .lookup("t", "id", Arc::new(StringArray::from(vec!["x"])), None)
        .await
        .unwrap_err();
    assert!(bad_key.to_string().contains("lookup keys"), "{bad_key}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_of_the_lookup_shape_takes_the_lookup_path_and_others_do_not() {
    let Setup {
        dir: _,
        server,
        client,
        base,
        _data,
        _cache,
    } = setup().await;

    let lookup_shaped = [
        "SELECT id, payload FROM t WHERE id = 4321",
        "SELECT id, payload FROM t WHERE id = 550",
        "SELECT * FROM t WHERE id IN (1, 10001, 77777, NULL)",
        "SELECT name, id FROM t WHERE name = 'n-42'",
        "SELECT id FROM silt.public.t WHERE day = DATE '2022-01-09'",
        "SELECT id FROM t WHERE 15999 = id",
        "SELECT id FROM t WHERE id = -1",
    ];
    for sql in lookup_shaped {
        let before = lookups(&server);
        let got = client.sql(sql).await.unwrap();
        let baseline = sql.replace("silt.public.", "");
        check_same(sql, &got, &expected(&base, &baseline).await, false).unwrap();
        assert_eq!(lookups(&server), before + 1.0, "not served as a lookup: {sql}");
    }
    let general = [
        "SELECT id FROM t WHERE id = 5 LIMIT 1",
        "SELECT id, score FROM t WHERE score = 2.5",
        "SELECT DISTINCT name FROM t WHERE name = 'n-7'",
        "SELECT id FROM t WHERE id = 5 OR id = 6",
        "SELECT count(*) FROM t WHERE id = 5",
        "SELECT id FROM t WHERE id = '5'",
        "SELECT id + 1 FROM t WHERE id = 5",
        "SELECT x.id FROM t x WHERE x.id = 5",
    ];
    for sql in general {
        let before = lookups(&server);
        let got = client.sql(sql).await.unwrap();
        check_same(sql, &got, &expected(&base, sql).await, false).unwrap();
        assert_eq!(lookups(&server), before, "served as a lookup: {sql}");
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_read_the_memory_tier_when_it_holds_the_columns_and_see_overwrites() {
    let Setup {
        dir,
        server,
        client,
        base,
        _data,
        _cache,
    } = setup().await;
    let sql = "SELECT id, name, payload FROM t WHERE id IN (7, 3001, 12000, 599)";

    // Cold: from pages.
    let got = client.sql(sql).await.unwrap();
    check_same(sql, &got, &expected(&base, sql).await, false).unwrap();
    assert!(metric(&server, "silt_lookup_row_groups_total{from=\"pages\"}") > 0.0);
    assert_eq!(metric(&server, "silt_lookup_row_groups_total{from=\"memory\"}"), 0.0);

    // A full scan fills the memory tier; the same lookup now reads it.
    client
        .sql("SELECT count(*), max(name), max(payload) FROM t WHERE id >= 0")
        .await
        .unwrap();
    let got = client.sql(sql).await.unwrap();
    check_same(sql, &got, &expected(&base, sql).await, false).unwrap();
    assert!(metric(&server, "silt_lookup_row_groups_total{from=\"memory\"}") > 0.0);

    // Overwritten between two lookups (validation `always`, the default):
    // the second sees the new version.
    let ids: Vec<i64> = (0..10_000).collect();
    write(&dir.join("a.parquet"), &batch(&ids, "new"));
    let fresh = plain(&dir).await;
    let got = client.sql(sql).await.unwrap();
    let want = expected(&fresh, sql).await;
    check_same(sql, &got, &want, false).unwrap();
    let payloads = datafusion::arrow::util::pretty::pretty_format_batches(&got)
        .unwrap()
        .to_string();
    assert!(payloads.contains("new-7"), "{payloads}");
    server.shutdown().await.unwrap();
}

/// `silt preload --memory` fills the memory tier even while the transcoder
/// is behind (here always: `transcode_inline_after = 0`), so lookups on a
/// preloaded table decode nothing and read no page. Issue 40's regression:
/// the preload's scan took admission on the second touch like any scan, so
/// once the transcoder fell behind a large preload admitted nothing more and
/// every lookup decoded its rows from pages (10x the server CPU).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_on_a_table_preloaded_into_memory_decode_nothing_and_read_no_page() {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let dir = data.path().join("t");
    write_table(&dir);
    let server = crate::common::file_table_server_with(&dir, cache.path(), 16 << 10, |c| {
        c.transcode_inline_after = 0;
    })
    .await;
    let client = SiltClient::connect(&server.flight_url()).await.unwrap();
    let base = plain(&dir).await;
    let last = client.preload("t", None, true, |_| {}).await.unwrap();
    assert!(last["done"] == true, "{last}");
    let decoded = metric(&server, "silt_cache_misses_total{tier=\"memory\"}");
    assert!(decoded > 0.0, "preload --memory decoded nothing");
    let page_reads = || {
        metric(&server, "silt_cache_hits_total{tier=\"pages\"}")
            + metric(&server, "silt_cache_misses_total{tier=\"pages\"}")
    };
    let pages_before = page_reads();

    for sql in [
        "SELECT id, name, payload FROM t WHERE id = 7",
        "SELECT id, name, payload FROM t WHERE id IN (3001, 12000, 599, 15999)",
        "SELECT payload, day FROM t WHERE id = 9999",
    ] {
        let got = client.sql(sql).await.unwrap();
        check_same(sql, &got, &expected(&base, sql).await, false).unwrap();
    }
    assert_eq!(
        metric(&server, "silt_lookup_row_groups_total{from=\"pages\"}"),
        0.0,
        "a lookup on the preloaded table read pages"
    );
    assert!(metric(&server, "silt_lookup_row_groups_total{from=\"memory\"}") >= 5.0);
    assert_eq!(
        metric(&server, "silt_cache_misses_total{tier=\"memory\"}"),
        decoded,
        "a lookup on the preloaded table decoded columns"
    );
    assert_eq!(
        page_reads(),
        pages_before,
        "a lookup on the preloaded table read the page tier"
    );
    server.shutdown().await.unwrap();
}

/// Queries whose stage times were recorded (a trace records when its
/// response stream is dropped, just after the client saw the end).
fn traced_queries(server: &ServerHandle) -> f64 {
    metric(server, "silt_query_stage_seconds_count{stage=\"scan\"}")
}

/// Waits (up to 10 s) until `n` queries have recorded their traces.
async fn wait_for_traces(server: &ServerHandle, n: f64) {
    for _ in 0..1000 {
        if traced_queries(server) >= n {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(traced_queries(server), n, "traces recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_is_planned_once_and_a_stale_ticket_is_planned_again() {
    let Setup {
        dir: _,
        server,
        client,
        base,
        _data,
        _cache,
    } = setup().await;
    let plans = || metric(&server, "silt_plans_total");

    // GetFlightInfo plans; DoGet runs that plan.
    let sql = "SELECT name, count(*) AS n FROM t WHERE id > 100 GROUP BY name ORDER BY n DESC, name LIMIT 5";
    let before = plans();
    let queries = || metric(&server, "silt_queries_total");
    let queries_before = queries();
    let traced = traced_queries(&server);
    let got = client.sql(sql).await.unwrap();
    check_same(sql, &got, &expected(&base, sql).await, true).unwrap();
    assert_eq!(plans(), before + 1.0, "a statement was planned more than once");
    assert_eq!(queries(), queries_before + 1.0, "a statement is one query");
    // Its trace (GetFlightInfo's planning, DoGet's scan and send) is one query.
    let stage = |name: &str| metric(&server, &format!("silt_query_stage_seconds_sum{{stage=\"{name}\"}}"));
    wait_for_traces(&server, traced + 1.0).await;
    assert!(stage("planning") > 0.0 && stage("scan") > 0.0 && stage("send") > 0.0);

    // A lookup plans nothing.
    let before = plans();
    let planning = stage("planning");
    client.sql("SELECT id FROM t WHERE id = 3").await.unwrap();
    assert_eq!(plans(), before);
    wait_for_traces(&server, traced + 2.0).await;
    assert_eq!(stage("planning"), planning, "a lookup has no planning time");

    // A ticket naming no kept plan (another server's, or an old one) still
    // runs: the SQL it carries is planned.
    let handle = format!(
        "{}999999\nSELECT count(*) AS c FROM t",
        silt_server::query::pending::PLAN_MARK
    );
    let ticket = arrow_flight::sql::TicketStatementQuery {
        statement_handle: handle.into_bytes().into(),
    };
    use arrow_flight::sql::ProstMessageExt;
    use prost::Message;
    let channel = tonic::transport::Endpoint::from_shared(server.flight_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut flight = arrow_flight::flight_service_client::FlightServiceClient::new(channel);
    let stream = flight
        .do_get(arrow_flight::Ticket::new(ticket.as_any().encode_to_vec()))
        .await
        .unwrap()
        .into_inner();
    use futures::TryStreamExt;
    let batches: Vec<RecordBatch> = arrow_flight::decode::FlightRecordBatchStream::new_from_flight_data(
        stream.map_err(|s| arrow_flight::error::FlightError::Tonic(Box::new(s))),
    )
    .try_collect()
    .await
    .unwrap();
    let want = expected(&base, "SELECT count(*) AS c FROM t").await;
    check_same("stale ticket", &batches, &want, false).unwrap();
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bloom_filters_skip_row_groups_whose_statistics_admit_the_key() {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let dir = data.path().join("t");
    std::fs::create_dir_all(&dir).unwrap();
    // Even keys scattered over [0, 2e9): every row group's min/max admits
    // almost any key, odd keys are absent.
    let keys: Vec<i64> = (0..12_000i64)
        .map(|i| 2 * ((i * 2_654_435_761) % 1_000_000_007))
        .collect();
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(keys.clone()))]).unwrap();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(ROW_GROUP))
        .set_bloom_filter_enabled(true)
        .set_bloom_filter_fpp(0.001)
        .build();
    let mut w = ArrowWriter::try_new(
        std::fs::File::create(dir.join("b.parquet")).unwrap(),
        batch.schema(),
        Some(props),
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let server = crate::common::file_table_server(&dir, cache.path(), 16 << 10).await;
    let client = SiltClient::connect(&server.flight_url()).await.unwrap();
    let base = plain(&dir).await;
    let skipped = || metric(&server, "silt_lookup_row_groups_total{from=\"bloom_filter\"}");

    let absent = keys[7] + 1;
    let sql = format!("SELECT k FROM t WHERE k = {absent}");
    let got = client.sql(&sql).await.unwrap();
    check_same(&sql, &got, &expected(&base, &sql).await, false).unwrap();
    assert!(skipped() >= 3.0, "bloom filters skipped {} row groups", skipped());

    let before = skipped();
    let sql = format!("SELECT k FROM t WHERE k IN ({}, {})", keys[5], keys[11_000]);
    let got = client.sql(&sql).await.unwrap();
    check_same(&sql, &got, &expected(&base, &sql).await, false).unwrap();
    assert_eq!(got.iter().map(RecordBatch::num_rows).sum::<usize>(), 2);
    assert!(skipped() > before, "row groups holding neither key were read");
    server.shutdown().await.unwrap();
}
