//! The hybrid client's fetched row groups as stored (`silt_client::scan::bytes`):
//! on a slow link, a fetched row group's column chunks come as the
//! compressed Parquet the server's tiers hold (a `RangesRequest`) and are
//! decoded on the client, with the answers plain DataFusion gives; the
//! byte-ranges request reads one version of one object of one table, and
//! refuses anything else clearly while the server carries on.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, UInt64Type};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::parquet::file::reader::ChunkReader;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use silt_bench::compare::check_same;
use silt_bench::local_s3::LocalS3;
use silt_bench::tpch;
use silt_client::scan::bytes::FetchedRanges;
use silt_client::{SiltClient, SiltTableOptions};
use silt_proto::{ByteRange, Projection, RangesRequest, ScanRequest, layout};
use silt_server::ServerConfig;
use silt_server::config::TableConfig;

use crate::common::{Fixture, client_with, metric, s3_settings};
use crate::hybrid::{plan_counter, run_with_plan, tpch_over_row_groups, tpch_row_groups_dir};

/// A link slow enough that every compressible row group comes as stored.
const SLOW_LINK: f64 = 1.0e5;

fn cache_options(link: Option<f64>) -> SiltTableOptions {
    SiltTableOptions {
        local_cache_bytes: 1 << 30,
        link_bytes_per_second: link,
        ..Default::default()
    }
}

/// Scans of TPC-H's strings, decimals and dates (and whole queries over
/// them) give plain DataFusion's answers on every run; on the slow link the
/// fetched row groups come compressed, on the default link as Arrow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_fetches_compressed_chunks_on_a_slow_link_with_plain_answers() {
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
    let scans = [
        "SELECT l_orderkey, l_linenumber, l_comment, l_shipdate, l_extendedprice, l_discount, l_returnflag \
         FROM lineitem WHERE l_quantity < 30",
        "SELECT o_orderkey, o_orderdate, o_totalprice, o_comment, o_orderpriority FROM orders \
         WHERE o_orderdate < DATE '1995-01-01'",
    ];
    for (link, compressed) in [(Some(SLOW_LINK), true), (None, false)] {
        let ctx = client_with(&fx.server, &cache_options(link)).await;
        for sql in scans {
            let expected = crate::common::answer(&base, sql).await;
            let mut fetched = (0, 0, 0);
            // Pushed, fetched (used twice: admitted), local.
            for run in ["pushdown", "fetch", "local"] {
                let (got, plan) = run_with_plan(&ctx, sql).await;
                check_same(&format!("{sql} [{run}, link {link:?}]"), &got, &expected, false).unwrap();
                fetched.0 += plan_counter(&plan, "row_groups_fetched");
                fetched.1 += plan_counter(&plan, "row_groups_fetched_compressed");
                fetched.2 += plan_counter(&plan, "bytes_fetched_compressed");
            }
            let (groups, as_stored, bytes) = fetched;
            assert!(groups > 0, "{sql}: some row groups are fetched");
            if compressed {
                assert_eq!(as_stored, groups, "{sql}: on a slow link every fetch is as stored");
                assert!(bytes > 0);
            } else {
                assert_eq!((as_stored, bytes), (0, 0), "{sql}: a fast link fetches Arrow");
            }
        }
        // EXPLAIN ANALYZE shows the count (a new client: its second run fetches).
        let fresh = client_with(&fx.server, &cache_options(link)).await;
        fresh.sql(scans[0]).await.unwrap().collect().await.unwrap();
        let explained = fresh
            .sql(&format!("EXPLAIN ANALYZE {}", scans[0]))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&explained)
            .unwrap()
            .to_string();
        let shown = text
            .split("row_groups_fetched_compressed=")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or_else(|| panic!("no row_groups_fetched_compressed in {text}"));
        assert_eq!(shown > 0, compressed, "{text}");
        // Whole TPC-H queries over the same client.
        let files: Vec<String> = ["q03.sql", "q10.sql", "q12.sql", "q19.sql"]
            .iter()
            .map(|f| f.to_string())
            .collect();
        let failures = crate::benchmarks::compare_suite(
            &fx,
            &base,
            &ctx,
            "bench/tpch/queries",
            &files,
            &["pushdown", "fetch", "local"],
        )
        .await;
        assert!(failures.is_empty(), "link {link:?}: {}", failures.join("\n"));
    }
    assert_eq!(fx.metric("silt_query_errors_total"), 0.0);
}

/// Version `k` of a three-column file (`id`, `v` = `k`, a string `s`),
/// `50_000 + 5_000 k` rows in row groups of 8,192, ZSTD: written to a
/// temporary name and renamed into place. Returns its row count.
fn write_version(path: &Path, k: i64) -> i64 {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let rows = 50_000 + k * 5_000;
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
        Field::new("s", DataType::Utf8, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..rows)),
            Arc::new(Int64Array::from_iter_values((0..rows).map(|_| k))),
            Arc::new(StringArray::from_iter_values(
                (0..rows).map(|i| format!("row {i} of version {k}")),
            )),
        ],
    )
    .unwrap();
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(8192))
        .build();
    let tmp = path.with_extension(format!("tmp{k}"));
    let mut w = ArrowWriter::try_new(std::fs::File::create(&tmp).unwrap(), schema, Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    std::fs::rename(tmp, path).unwrap();
    rows
}

/// The first layout row of `table` (projecting `columns`): object,
/// version, and its column chunk's offset and length.
async fn first_chunk(client: &SiltClient, table: &str, columns: &[&str]) -> (String, String, u64, u64) {
    let layout = client
        .scan_all(&ScanRequest {
            table: table.into(),
            projection: Some(Projection {
                columns: columns.iter().map(|c| c.to_string()).collect(),
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
    let number = |name: &str| {
        let column = first.column_by_name(name).unwrap().as_primitive::<UInt64Type>();
        assert!(!column.is_null(0), "the layout gives {name}");
        column.value(0)
    };
    (
        text(layout::OBJECT),
        text(layout::VERSION),
        number(layout::CHUNK_OFFSET),
        number(layout::CHUNK_LENGTH),
    )
}

/// `id` and `v` of every row `sql` returns.
fn ids_and_values(batches: &[RecordBatch]) -> Vec<(i64, i64)> {
    let mut rows: Vec<(i64, i64)> = batches
        .iter()
        .flat_map(|b| {
            let (ids, vs) = (
                b.column(0).as_primitive::<Int64Type>().clone(),
                b.column(1).as_primitive::<Int64Type>().clone(),
            );
            (0..b.num_rows()).map(move |i| (ids.value(i), vs.value(i)))
        })
        .collect();
    rows.sort_unstable();
    rows
}

/// A byte-ranges request reads exactly the object's bytes at the version
/// it names, counted as sent bytes; an overwritten version is `ABORTED`
/// (the client's restart); an object of another table, a path out of the
/// table, a range past the end, a request too large and a wrong version are
/// refused with a clear error, and the server carries on. A hybrid client
/// on a slow link then reads every version whole, before and after
/// overwrites, never mixing two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_byte_ranges_are_of_one_version_of_one_table() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("mix/t/part.parquet");
    write_version(&file, 1);
    write_version(&root.path().join("mix/u/other.parquet"), 7);
    let s3 = LocalS3::start(root.path()).await.unwrap();
    let cache = tempfile::tempdir().unwrap();
    let mut cfg = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        cache_dir: cache.path().to_path_buf(),
        s3: s3_settings(&s3),
        ..Default::default()
    };
    for (name, url) in [("mix", "s3://mix/t/"), ("other", "s3://mix/u/")] {
        cfg.tables.insert(
            name.into(),
            TableConfig {
                url: url.into(),
                ..Default::default()
            },
        );
    }
    let server = silt_server::start(cfg).await.expect("start server");
    let client = SiltClient::connect(&server.flight_url()).await.unwrap();

    let (object, version, offset, length) = first_chunk(&client, "mix", &["s"]).await;
    let bytes = std::fs::read(&file).unwrap();
    let size = bytes.len() as u64;
    let request = RangesRequest {
        table: "mix".into(),
        path: object.clone(),
        version: version.clone(),
        ranges: vec![ByteRange { offset, length }],
        tail: 100,
        query: None,
    };
    let sent = metric(&server, "silt_flight_bytes_sent_total");
    let answer = FetchedRanges::from_answer(&client.ranges(&request).await.unwrap()).unwrap();
    let slice = |o: u64, l: u64| bytes[o as usize..(o + l) as usize].to_vec();
    assert_eq!(
        answer.get_bytes(offset, length as usize).unwrap().to_vec(),
        slice(offset, length)
    );
    assert_eq!(
        answer.get_bytes(size - 100, 100).unwrap().to_vec(),
        slice(size - 100, 100)
    );
    assert!(
        metric(&server, "silt_flight_bytes_sent_total") - sent >= (length + 100) as f64,
        "the bytes are counted as sent"
    );
    assert_eq!(metric(&server, "silt_byte_ranges_total"), 1.0);
    assert_eq!(metric(&server, "silt_byte_ranges_bytes_total"), (length + 100) as f64);

    // Hostile requests: each refused clearly, none stops the server.
    let (other_object, _, _, _) = first_chunk(&client, "other", &["s"]).await;
    let refusals: Vec<(RangesRequest, tonic::Code, &str)> = vec![
        (
            RangesRequest {
                ranges: vec![ByteRange {
                    offset: size - 10,
                    length: 11,
                }],
                ..request.clone()
            },
            tonic::Code::InvalidArgument,
            "past the object's",
        ),
        (
            RangesRequest {
                ranges: vec![ByteRange {
                    offset: u64::MAX,
                    length: 2,
                }],
                ..request.clone()
            },
            tonic::Code::InvalidArgument,
            "past the object's",
        ),
        (
            RangesRequest {
                ranges: vec![ByteRange {
                    offset: 0,
                    length: silt_proto::MAX_RANGES_BYTES + 1,
                }],
                ..request.clone()
            },
            tonic::Code::InvalidArgument,
            "per request",
        ),
        (
            RangesRequest {
                path: other_object.clone(),
                ..request.clone()
            },
            tonic::Code::InvalidArgument,
            "not an object of the table",
        ),
        (
            RangesRequest {
                path: object.replace("t/part.parquet", "t/../u/other.parquet"),
                ..request.clone()
            },
            tonic::Code::InvalidArgument,
            "not an object of the table",
        ),
        (
            RangesRequest {
                version: "not-a-version".into(),
                ..request.clone()
            },
            tonic::Code::Aborted,
            "",
        ),
        (
            RangesRequest {
                table: "nope".into(),
                ..request.clone()
            },
            tonic::Code::NotFound,
            "nope",
        ),
    ];
    for (bad, code, says) in refusals {
        let err = client.ranges(&bad).await.unwrap_err();
        let (got, message) = err.status().unwrap_or_else(|| panic!("{err}"));
        assert_eq!(got, code, "{bad:?}: {err}");
        assert!(message.contains(says), "{bad:?}: {err}");
        assert!(
            !client.ranges(&request).await.unwrap().is_empty(),
            "the server carries on"
        );
    }

    // Overwritten: the old version is refused as changed; the new layout's reads.
    write_version(&file, 2);
    let err = client.ranges(&request).await.unwrap_err();
    assert!(err.is_changed(), "{err}");
    let (_, new_version, offset, length) = first_chunk(&client, "mix", &["s"]).await;
    assert_ne!(new_version, version);
    let bytes = std::fs::read(&file).unwrap();
    let renewed = RangesRequest {
        version: new_version,
        ranges: vec![ByteRange { offset, length }],
        tail: 0,
        ..request.clone()
    };
    let answer = FetchedRanges::from_answer(&client.ranges(&renewed).await.unwrap()).unwrap();
    assert_eq!(
        answer.get_bytes(offset, length as usize).unwrap().to_vec(),
        bytes[offset as usize..(offset + length) as usize].to_vec()
    );

    // A hybrid client on a slow link: pushed, then fetched as stored, then
    // local; overwritten between runs, it reads the new version whole.
    let ctx = client_with(&server, &cache_options(Some(SLOW_LINK))).await;
    let sql = "SELECT id, v, s FROM mix WHERE id >= 0";
    let mut as_stored = 0;
    for k in [2, 3] {
        if k == 3 {
            write_version(&file, 3);
        }
        let rows = 50_000 + k * 5_000;
        for _ in 0..3 {
            let (got, plan) = run_with_plan(&ctx, sql).await;
            let expected: Vec<(i64, i64)> = (0..rows).map(|i| (i, k)).collect();
            assert_eq!(ids_and_values(&got), expected, "version {k} whole");
            for b in &got {
                let s = b.column(2);
                let s = datafusion::arrow::compute::cast(s, &DataType::Utf8).unwrap();
                let ids = b.column(0).as_primitive::<Int64Type>();
                for (i, text) in s.as_string::<i32>().iter().enumerate() {
                    assert_eq!(text.unwrap(), format!("row {} of version {k}", ids.value(i)));
                }
            }
            as_stored += plan_counter(&plan, "row_groups_fetched_compressed");
        }
    }
    assert!(as_stored > 0, "row groups came as stored");
}

/// SSB's 13 queries through a hybrid client on a slow link (its fetched
/// row groups as stored) give plain DataFusion's answers on every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_ssb_13_queries_on_a_slow_link() {
    let (fx, base) = crate::ssb::ssb_fixture().await;
    let ctx = client_with(&fx.server, &cache_options(Some(SLOW_LINK))).await;
    let queries = crate::ssb::ssb_queries();
    let failures = crate::benchmarks::compare_suite(
        &fx,
        &base,
        &ctx,
        "bench/ssb/queries",
        &queries,
        &["pushdown", "fetch", "local"],
    )
    .await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(fx.metric("silt_byte_ranges_total") > 0.0, "row groups came as stored");
    assert!(fx.metric("silt_byte_ranges_bytes_total") > 0.0);
    assert_eq!(fx.metric("silt_query_errors_total"), 0.0);
}

/// Overwrites during scans of a hybrid client on a slow link (its fetched
/// row groups as stored) never mix versions: each answer is one whole
/// version, or the typed "changed" error when the object changed again
/// under the scan's one restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_overwrites_during_fetches_as_stored_never_mix_versions() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("mix/t/part.parquet");
    write_version(&file, 1);
    let s3 = LocalS3::start(root.path()).await.unwrap();
    let cache = tempfile::tempdir().unwrap();
    let mut cfg = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        cache_dir: cache.path().to_path_buf(),
        s3: s3_settings(&s3),
        ..Default::default()
    };
    cfg.tables.insert(
        "mix".into(),
        TableConfig {
            url: "s3://mix/t/".into(),
            ..Default::default()
        },
    );
    let server = silt_server::start(cfg).await.expect("start server");
    let ctx = client_with(&server, &cache_options(Some(SLOW_LINK))).await;
    let sql = "SELECT id, v, s FROM mix WHERE id >= 0";
    let one_version = |answer: datafusion::error::Result<Vec<RecordBatch>>, what: &str| -> bool {
        match answer {
            Ok(batches) => {
                let rows = ids_and_values(&batches);
                let k = rows.first().map_or(0, |r| r.1);
                let expected: Vec<(i64, i64)> = (0..50_000 + k * 5_000).map(|i| (i, k)).collect();
                assert!(rows == expected, "{what}: not exactly version {k}");
                true
            }
            Err(e) => {
                let changed = silt_client::ClientError::find(&e).is_some_and(|c| c.is_changed());
                assert!(changed, "{what}: unexpected error: {e}");
                false
            }
        }
    };
    let mut answered = 0;
    const ROUNDS: i64 = 30;
    for i in 0..ROUNDS {
        let writer = {
            let file = file.clone();
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_micros((i as u64 * 1_300) % 20_000)).await;
                tokio::task::spawn_blocking(move || write_version(&file, 2 + i % 3))
                    .await
                    .unwrap();
            })
        };
        let run = || async {
            datafusion::physical_plan::collect(ctx.sql(sql).await?.create_physical_plan().await?, ctx.task_ctx()).await
        };
        let (a, b) = tokio::join!(run(), run());
        writer.await.unwrap();
        answered += usize::from(one_version(a, &format!("round {i} a")));
        answered += usize::from(one_version(b, &format!("round {i} b")));
    }
    assert!(answered >= 10, "only {answered} of {} scans answered", 2 * ROUNDS);
    assert!(
        metric(&server, "silt_byte_ranges_total") > 0.0,
        "row groups came as stored"
    );
    // After the last overwrite, a query sees the current version whole.
    let last = 2 + (ROUNDS - 1) % 3;
    let (got, _) = run_with_plan(&ctx, sql).await;
    let expected: Vec<(i64, i64)> = (0..50_000 + last * 5_000).map(|i| (i, last)).collect();
    assert!(ids_and_values(&got) == expected, "the last version whole");
}
