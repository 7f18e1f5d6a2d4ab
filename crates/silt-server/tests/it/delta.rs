//! Delta Lake tables through a Silt server, against DuckDB's delta
//! extension reading the same versions (`scripts/delta_server_fixture.py`,
//! which writes with deltalake and checks DuckDB against deltalake's own
//! engine), partitioned by `cat` (values in the log, not in the files):
//! appends, a copy-on-write delete, an overwrite, deletion vectors
//! (in a `.bin` file and inline), then, while the server runs, an added
//! column, a checkpoint, vectors replacing vectors, a compaction and an
//! append. Every answer must equal DataFusion's over DuckDB's rows of the
//! version; a deleted row never comes back; a warm query makes no store
//! request but the LIST of the log.

use std::path::{Path, PathBuf};

use crate::common::{answer, check_same, client, pushdown_client};
use crate::flight_sql::{fetch, flight_sql_client_at};
use crate::iceberg::{
    Fixture, check_all, check_clients, check_flight, check_lookups, check_time_travel,
    commits_during_queries_never_mix, expected_ctx, files_scanned, flight_error, render, run_fixture, serve_tables,
    store_requests,
};

const SCRIPT: &str = "delta_server_fixture.py";

/// The version's commit file's modification time, in milliseconds (what
/// time travel by time compares, as the Delta protocol says for tables
/// without in-commit timestamps).
fn committed_ms(table: &Path, version: u64) -> u64 {
    let commit = table.join(format!("_delta_log/{version:020}.json"));
    let modified = std::fs::metadata(commit).unwrap().modified().unwrap();
    modified.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// The rows of every data file in the table's folder (by their footers).
fn rows_in_files(table: &Path) -> i64 {
    let partitions = std::fs::read_dir(table)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("cat="));
    partitions
        .flat_map(|dir| std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()))
        .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
        .map(|p| {
            use datafusion::parquet::file::reader::FileReader;
            let file = std::fs::File::open(p).unwrap();
            let reader = datafusion::parquet::file::reader::SerializedFileReader::new(file).unwrap();
            reader.metadata().file_metadata().num_rows()
        })
        .sum()
}

struct Served {
    warehouse: PathBuf,
    table: PathBuf,
    created: serde_json::Value,
    server: silt_server::ServerHandle,
    _dirs: [tempfile::TempDir; 2],
}

/// The fixture's `create` phase in a new folder, and a server with
/// `events`, the Delta table. (Its root is no plain Parquet table: deltalake
/// writes strings as `string` or `string_view` by the path that wrote the
/// file, which a listing cannot merge; the table's schema reads both.)
async fn serve_created_table() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().canonicalize().unwrap();
    let table = warehouse.join("events");
    let created = run_fixture(SCRIPT, &table, "create");
    let location = created["table_location"].as_str().unwrap().to_string();
    let (server, cache) = serve_tables(&[("events", format!("delta+{location}"))], |_| {}).await;
    Served {
        warehouse,
        table,
        created,
        server,
        _dirs: [dir, cache],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delta_tables_answer_as_duckdb_reads_each_version() {
    let Served {
        warehouse,
        table,
        created,
        server,
        _dirs,
    } = serve_created_table().await;
    let pushdown = pushdown_client(&server).await;
    let default = client(&server).await;

    let current = created["current_version"].as_i64().unwrap();
    check_all(&pushdown, &warehouse, current, "after create, pushed down").await;
    check_all(&default, &warehouse, current, "after create, default client").await;
    let table_rows = answer(&pushdown, "SELECT count(*) AS n FROM events").await;
    let table_rows = datafusion::arrow::util::pretty::pretty_format_batches(&table_rows)
        .unwrap()
        .to_string();
    assert!(
        !table_rows.contains(&format!(" {} ", rows_in_files(&table))),
        "the folder holds replaced files and deleted rows the version does not: {table_rows}"
    );

    // Warm: the only store request of a query is the LIST of the log.
    let requests = || store_requests(&server);
    let before = requests();
    answer(&pushdown, "SELECT cat, count(*) FROM events GROUP BY cat").await;
    let warm = requests() - before;
    assert!(warm <= 1.0, "a warm query made {warm} store requests");

    // Only the partition column: no file holds it, and every row of the
    // partition still comes back through the default client's choice.
    let only_partition = "SELECT cat FROM events WHERE cat = 'b'";
    let created_rows = expected_ctx(&warehouse, current).await;
    for _ in 0..2 {
        let want = answer(&created_rows, only_partition).await;
        check_same(only_partition, &want, &answer(&default, only_partition).await, false).unwrap();
    }

    // Lookups skip rows deletion vectors removed (every 7th of each file).
    let keys: Vec<i64> = (100..160).chain(3000..3040).collect();
    check_lookups(&server, &created_rows, &["id", "cat", "v"], &keys).await;

    // Commits while the server runs: the next query reads the new version.
    let more = run_fixture(SCRIPT, &table, "more");
    let current = more["current_version"].as_i64().unwrap();
    for (ctx, label) in [(&pushdown, "pushed down"), (&default, "default client")] {
        check_all(
            ctx,
            &warehouse,
            current,
            &format!("after a checkpoint, vectors, optimize: {label}"),
        )
        .await;
    }
    let fresh = pushdown_client(&server).await;
    let expected = expected_ctx(&warehouse, current).await;
    for sql in [
        "SELECT note, count(*) AS n, sum(v) AS s FROM events GROUP BY note ORDER BY note",
        "SELECT id, note FROM events WHERE note = 'n3' ORDER BY id",
    ] {
        check_same(sql, &answer(&expected, sql).await, &answer(&fresh, sql).await, true).unwrap();
    }

    // Flight SQL (the server plans), and time travel by version and by
    // commit time, every version in its own schema.
    let mut flight = flight_sql_client_at(&server.flight_url()).await;
    check_flight(&mut flight, &expected).await;
    // Lookups: rows deletion vectors removed are not found, the partition
    // column `cat` has its value from the log. A lookup by `cat` itself is
    // refused (every row of a file has the key), and SQL of that shape
    // takes the general path.
    let keys: Vec<i64> = (0..40).chain(3000..3040).chain([10002, 20001, 20007, 21005]).collect();
    check_lookups(&server, &expected, &["id", "cat", "v", "note"], &keys).await;
    let silt = silt_client::SiltClient::connect(&server.flight_url()).await.unwrap();
    let by_cat = std::sync::Arc::new(datafusion::arrow::array::StringArray::from(vec!["a"]));
    let err = silt
        .lookup("events", "cat", by_cat, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("partition column"), "{err}");
    let sql = "SELECT id FROM events WHERE cat = 'b'";
    let info = flight.execute(sql.to_string(), None).await.unwrap();
    let got = render(&fetch(&mut flight, info).await);
    let want = render(&answer(&expected, sql).await);
    assert_eq!(got.lines().count(), want.lines().count(), "{sql}");
    let summary = "SELECT count(*) AS n, sum(id) AS s, min(v) AS lo FROM";
    let versions: Vec<u64> = more["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect();
    for &version in &versions {
        let want = render(
            &answer(
                &expected_ctx(&warehouse, version as i64).await,
                &format!("{summary} events"),
            )
            .await,
        );
        let mut names = vec![format!("\"events@{version}\"")];
        let ms = committed_ms(&table, version);
        // By time only where the next commit is in a later millisecond.
        if versions.last() == Some(&version) || committed_ms(&table, version + 1) > ms {
            let at = humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms));
            names.push(format!("\"events@{at}\""));
        }
        for name in names {
            let sql = format!("{summary} {name}");
            let info = flight.execute(sql.clone(), None).await.unwrap();
            assert_eq!(render(&fetch(&mut flight, info).await), want, "{sql}");
        }
    }
    let err = flight_error(&mut flight, "SELECT count(*) FROM \"events@99\"").await;
    assert!(err.contains("no version 99"), "{err}");

    // Pruning from the log: a filter on the partition column opens only
    // that partition's files; one on `id` skips the files whose bounds (the
    // log's statistics: the last append's ids are all above 21000) miss.
    let mut scanned = Vec::new();
    for sql in [
        "SELECT count(*) FROM events",
        "SELECT count(*) FROM events WHERE cat = 'b'",
        "SELECT count(*) FROM events WHERE id < 1000",
    ] {
        scanned.push(files_scanned(&mut flight, sql).await);
    }
    let (all, one) = (scanned[0], scanned[1]);
    assert!(
        one * 2 < all + 1 && one > 0,
        "{one} of {all} files scanned for one of three partitions"
    );
    let low = scanned[2];
    assert!(low < all && low > 0, "{low} of {all} files scanned for ids below 1000");

    let sql = "SELECT snapshot_id FROM silt_system.tables WHERE table_name = 'events'";
    let info = flight.execute(sql.to_string(), None).await.unwrap();
    let shown = render(&fetch(&mut flight, info).await);
    assert!(shown.contains(&format!("| {current} ")), "{shown}");
}

/// Column mapping (modes `name` and `id`): data files, statistics and
/// partition values name columns physically (mode `id`: files matched by
/// field id); `v` was renamed to `amount` and a new
/// `v` added (older files' `v` is another column). Every client path,
/// lookups, the server's SQL, pruning by the partition and by statistics,
/// and time travel in each version's schema answer as deltalake's engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn column_mapped_tables_read_renamed_and_reused_columns() {
    for phase in ["mapping", "mapping-id"] {
        check_column_mapping(phase).await;
    }
}

/// The checks of [`column_mapped_tables_read_renamed_and_reused_columns`]
/// on the table the fixture's `phase` writes.
async fn check_column_mapping(phase: &str) {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().canonicalize().unwrap();
    let table = warehouse.join("events");
    let made = run_fixture(SCRIPT, &table, phase);
    let location = made["table_location"].as_str().unwrap();
    let (server, _cache) = serve_tables(&[("events", format!("delta+{location}"))], |_| {}).await;
    let current = made["current_version"].as_i64().unwrap();
    let expected = expected_ctx(&warehouse, current).await;
    let queries = [
        "SELECT id, cat, amount, v FROM events ORDER BY id",
        "SELECT cat, count(*) AS n, sum(amount) AS s, count(v) AS vs FROM events GROUP BY cat ORDER BY cat",
        "SELECT id, amount FROM events WHERE amount > 1200 AND cat = 'b' ORDER BY id",
        "SELECT id, v FROM events WHERE v = 'x3' ORDER BY id",
        "SELECT count(*) AS n FROM events WHERE id < 100",
    ];
    let (pushdown, default) = (pushdown_client(&server).await, client(&server).await);
    check_clients(
        &queries,
        &expected,
        [("pushed down", &pushdown), ("default client", &default)],
    )
    .await;
    let mut flight = flight_sql_client_at(&server.flight_url()).await;
    for sql in queries {
        let info = flight.execute(sql.to_string(), None).await.unwrap();
        assert_eq!(
            render(&fetch(&mut flight, info).await),
            render(&answer(&expected, sql).await),
            "{sql}"
        );
    }
    let keys = [5, 1999, 2500, 5000, 5001, 5599, 9999];
    check_lookups(&server, &expected, &["id", "cat", "amount", "v"], &keys).await;
    // Pruning by the physically named partition values and statistics.
    let every = files_scanned(&mut flight, "SELECT count(*) FROM events").await;
    let one = files_scanned(&mut flight, "SELECT count(*) FROM events WHERE cat = 'a'").await;
    let new = files_scanned(&mut flight, "SELECT count(*) FROM events WHERE id >= 5000").await;
    assert!(
        one * 2 < every && new * 2 < every,
        "{one} and {new} of {every} files scanned"
    );
    // Each version in its own schema: `v` is the double before the rename.
    for version in made["versions"].as_array().unwrap() {
        let version = version["version"].as_i64().unwrap();
        let column = if version < 2 { "v" } else { "amount" };
        let summary = format!("SELECT count(*) AS n, sum({column}) AS s, min(cat) AS c FROM");
        check_time_travel(&mut flight, &warehouse, &summary, "\"events@", version).await;
    }
}

/// A damaged deletion vector is a clear error naming its file, for the
/// queries that read it only (never rows it would have deleted): other
/// versions keep answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_deletion_vector_fails_its_queries_only() {
    let Served {
        table, server, _dirs, ..
    } = serve_created_table().await;
    let ctx = pushdown_client(&server).await;
    answer(&ctx, "SELECT count(*) FROM events").await;

    // A commit whose vector file is then damaged (one bit flipped).
    run_fixture(SCRIPT, &table, "more");
    let newest = std::fs::read_dir(&table)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("deletion_vector_"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap())
        .unwrap();
    let mut bytes = std::fs::read(&newest).unwrap();
    bytes[12] ^= 0x10;
    std::fs::write(&newest, &bytes).unwrap();
    // The compaction after the vectors rewrote their files: read the
    // version that has them.
    let with_vectors = (0..20)
        .rev()
        .find(|v| {
            std::fs::read_to_string(table.join(format!("_delta_log/{v:020}.json")))
                .is_ok_and(|c| c.contains("\"storageType\": \"u\""))
        })
        .unwrap();
    let mut flight = flight_sql_client_at(&server.flight_url()).await;
    let err = flight_error(&mut flight, &format!("SELECT count(*) FROM \"events@{with_vectors}\"")).await;
    let name = newest.file_name().unwrap().to_string_lossy().to_string();
    assert!(err.contains(&name) && err.contains("checksum"), "{err}");
    answer(&ctx, "SELECT count(*) FROM events").await;
    let earlier = format!("SELECT count(*) FROM \"events@{}\"", with_vectors - 3);
    let info = flight.execute(earlier, None).await.unwrap();
    fetch(&mut flight, info).await;
}

/// Commits while queries run never mix versions (Delta): 30 appends by
/// deltalake while 4 clients run two-scan queries.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commits_during_queries_never_mix_versions() {
    let Served {
        warehouse,
        table,
        server,
        _dirs,
        ..
    } = serve_created_table().await;
    let fixture = Fixture {
        script: SCRIPT,
        dir: &table,
        expected: &warehouse,
        snapshots: "versions",
        id: "version",
    };
    commits_during_queries_never_mix(&server, &fixture).await;
}

/// The same table read over the S3 protocol (a loopback S3 server over the
/// folder): the log is listed with `start-after`, vectors read by ranged
/// GETs; answers equal DuckDB's after the first commits and after more
/// (a checkpoint, vectors replacing vectors, an optimize).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_tables_read_over_s3() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap().join("s3");
    let warehouse = root.join("lake");
    let table = warehouse.join("events");
    let created = run_fixture(SCRIPT, &table, "create");
    let s3 = silt_bench::local_s3::LocalS3::start(&root).await.unwrap();
    let tables = [("events", "delta+s3://lake/events".to_string())];
    let (server, _cache) = serve_tables(&tables, |cfg| cfg.s3 = s3.s3_settings()).await;
    let pushdown = pushdown_client(&server).await;
    let current = created["current_version"].as_i64().unwrap();
    check_all(&pushdown, &warehouse, current, "over S3, after create").await;
    let more = run_fixture(SCRIPT, &table, "more");
    let current = more["current_version"].as_i64().unwrap();
    check_all(&pushdown, &warehouse, current, "over S3, after more").await;
}
