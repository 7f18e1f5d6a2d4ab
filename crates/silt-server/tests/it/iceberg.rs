//! Iceberg tables through a Silt server, against pyiceberg's own scans of
//! the same snapshots (`scripts/iceberg_server_fixture.py`): appends, a
//! copy-on-write delete, a partition overwrite, then, while the server runs,
//! position deletes (merge-on-read), an added column and an append. Every
//! answer must equal DataFusion's over the rows pyiceberg's scan returns
//! for the snapshot; a deleted row never comes back through a pushed-down
//! filter or a partial aggregate; a warm query makes no store request but
//! the one that finds the current metadata.

use std::path::{Path, PathBuf};

use datafusion::prelude::{ParquetReadOptions, SessionContext};
use silt_server::ServerConfig;
use silt_server::config::TableConfig;

use crate::common::{answer, check_same, client, metric, pushdown_client};
use crate::flight_sql::{fetch, flight_sql_client_at};

/// The repository's root.
pub(crate) fn repo() -> PathBuf {
    silt_bench::files::source_dir(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs a phase of the fixture script on `warehouse`; its description.
fn fixture_phase(warehouse: &Path, phase: &str) -> serde_json::Value {
    run_fixture("iceberg_server_fixture.py", warehouse, phase)
}

/// Runs a phase of a lakehouse fixture script (`scripts/<script>`) on
/// `dir`; the JSON it prints.
pub(crate) fn run_fixture(script: &str, dir: &Path, phase: &str) -> serde_json::Value {
    let out = silt_bench::files::run_python_script(&repo(), script, &[dir.as_os_str(), phase.as_ref()]);
    serde_json::from_slice(&out).expect("the fixture's JSON")
}

/// A context where `events` is the independent reader's rows of
/// `snapshot` (`expected/<snapshot>.parquet` in `warehouse`).
pub(crate) async fn expected_ctx(warehouse: &Path, snapshot: i64) -> SessionContext {
    let ctx = SessionContext::new();
    let file = warehouse.join(format!("expected/{snapshot}.parquet"));
    ctx.register_parquet("events", file.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();
    ctx
}

/// Queries whose answers are compared: scans, pushed filters (a filter on
/// a deleted row's id must not find it), partial aggregates, a limit.
pub(crate) const QUERIES: &[&str] = &[
    "SELECT id, cat, v FROM events ORDER BY id",
    "SELECT count(*) AS n, sum(v) AS s, min(id) AS lo, max(id) AS hi FROM events",
    "SELECT cat, count(*) AS n, sum(id) AS s FROM events GROUP BY cat ORDER BY cat",
    "SELECT id, v FROM events WHERE id % 7 = 3 AND v > 10 ORDER BY id",
    "SELECT count(*) AS n FROM events WHERE cat = 'b'",
    "SELECT id FROM events WHERE id IN (3000, 3007, 3014, 3001, 20006) ORDER BY id",
];

pub(crate) async fn check_all(silt: &SessionContext, warehouse: &Path, snapshot: i64, label: &str) {
    let expected = expected_ctx(warehouse, snapshot).await;
    for sql in QUERIES {
        let want = answer(&expected, sql).await;
        let got = answer(silt, sql).await;
        check_same(&format!("{label}: {sql}"), &want, &got, sql.contains("ORDER BY")).unwrap();
    }
}

/// Store requests (GET, HEAD, LIST) the server has made so far.
pub(crate) fn store_requests(server: &silt_server::ServerHandle) -> f64 {
    ["get", "head", "list"]
        .iter()
        .map(|kind| metric(server, &format!("silt_object_store_{kind}_requests_total")))
        .sum()
}

/// Batches as a table of text (Flight SQL sends strings as Utf8 where
/// DataFusion reads views: answers are compared as rendered).
pub(crate) fn render(batches: &[datafusion::arrow::array::RecordBatch]) -> String {
    datafusion::arrow::util::pretty::pretty_format_batches(batches)
        .unwrap()
        .to_string()
}

/// Every one of [`QUERIES`], planned by the server (plain Flight SQL),
/// answers as `expected` does.
pub(crate) async fn check_flight(
    flight: &mut arrow_flight::sql::client::FlightSqlServiceClient<tonic::transport::Channel>,
    expected: &SessionContext,
) {
    for sql in QUERIES {
        let info = flight.execute(sql.to_string(), None).await.unwrap();
        let got = fetch(flight, info).await;
        assert_eq!(render(&got), render(&answer(expected, sql).await), "{sql}");
    }
}

/// A server (its cache in a new folder) with `tables` (name, URL), its
/// config otherwise the default after `configure`.
pub(crate) async fn serve_tables(
    tables: &[(&str, String)],
    configure: impl FnOnce(&mut ServerConfig),
) -> (silt_server::ServerHandle, tempfile::TempDir) {
    let cache = tempfile::tempdir().unwrap();
    let mut cfg = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        cache_dir: cache.path().to_path_buf(),
        ..Default::default()
    };
    for (name, url) in tables {
        cfg.tables.insert(
            name.to_string(),
            TableConfig {
                url: url.clone(),
                ..Default::default()
            },
        );
    }
    configure(&mut cfg);
    (silt_server::start(cfg).await.expect("start server"), cache)
}

/// The error of a Flight SQL query that must fail (at planning or while
/// its results stream).
pub(crate) async fn flight_error(
    flight: &mut arrow_flight::sql::client::FlightSqlServiceClient<tonic::transport::Channel>,
    sql: &str,
) -> String {
    match flight.execute(sql.to_string(), None).await {
        Ok(info) => match flight.do_get(info.endpoint[0].ticket.clone().unwrap()).await {
            Ok(stream) => futures::TryStreamExt::try_collect::<Vec<_>>(stream)
                .await
                .map(|_| ())
                .expect_err(sql)
                .to_string(),
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    }
}

/// A warehouse after the fixture's `create` phase, and a server over it
/// with `events` (the Iceberg table) and `folder` (the same table's data
/// folder as loose Parquet: every file ever written, the replaced ones too
/// — what Silt served before it read table formats).
struct Served {
    warehouse: PathBuf,
    created: serde_json::Value,
    server: silt_server::ServerHandle,
    _dirs: [tempfile::TempDir; 2],
}

async fn serve_created_table() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().canonicalize().unwrap();
    let created = fixture_phase(&warehouse, "create");
    let location = created["table_location"].as_str().unwrap().to_string();
    let tables = [
        ("events", format!("iceberg+{location}")),
        ("folder", format!("{location}/data/")),
    ];
    let (server, cache) = serve_tables(&tables, |_| {}).await;
    Served {
        warehouse,
        created,
        server,
        _dirs: [dir, cache],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn iceberg_tables_answer_as_pyiceberg_reads_each_snapshot() {
    let Served {
        warehouse,
        created,
        server,
        _dirs,
    } = serve_created_table().await;
    let pushdown = pushdown_client(&server).await;
    let default = client(&server).await;

    let current = created["current_snapshot_id"].as_i64().unwrap();
    check_all(&pushdown, &warehouse, current, "after create, pushed down").await;
    check_all(&default, &warehouse, current, "after create, default client").await;
    let folder_rows = answer(&pushdown, "SELECT count(*) AS n FROM folder").await;
    let table_rows = answer(&pushdown, "SELECT count(*) AS n FROM events").await;
    assert_ne!(
        format!("{folder_rows:?}"),
        format!("{table_rows:?}"),
        "the folder holds replaced files the snapshot does not"
    );

    // Warm: the only store request of a query is the metadata pointer (the
    // LIST of `metadata/`: pyiceberg's SQL catalog writes no version hint).
    let requests = || store_requests(&server);
    let before = requests();
    answer(&pushdown, "SELECT cat, count(*) FROM events GROUP BY cat").await;
    let warm = requests() - before;
    assert!(warm <= 1.0, "a warm query made {warm} store requests");

    // Commits while the server runs: the next query reads the new snapshot.
    let more = fixture_phase(&warehouse, "more");
    let current = more["current_snapshot_id"].as_i64().unwrap();
    check_all(
        &pushdown,
        &warehouse,
        current,
        "after position deletes and an append, pushed down",
    )
    .await;
    check_all(
        &default,
        &warehouse,
        current,
        "after position deletes and an append, default client",
    )
    .await;

    // The added column, through a client registered after the schema
    // change (a client's table keeps the schema it registered with).
    let fresh = pushdown_client(&server).await;
    let expected = expected_ctx(&warehouse, current).await;
    // Lookups skip rows deleted by position (every 7th of a file), before
    // and after scans have filled the memory tier.
    let keys: Vec<i64> = (3000..3030).chain([20000, 20001, 20007, 21005, 10002]).collect();
    check_lookups(&server, &expected, &["id", "cat", "v", "note"], &keys).await;
    for sql in [
        "SELECT note, count(*) AS n, sum(v) AS s FROM events GROUP BY note ORDER BY note",
        "SELECT id, note FROM events WHERE note = 'n3' ORDER BY id",
    ] {
        check_same(sql, &answer(&expected, sql).await, &answer(&fresh, sql).await, true).unwrap();
    }
    // Only the added column: older files hold none of the scan's columns,
    // and their rows (nulls) still count, through the default client's
    // per-row-group choice too.
    let only_added = "SELECT note FROM events WHERE note IS NULL OR note = 'n3'";
    let fresh_default = client(&server).await;
    for _ in 0..2 {
        let want = answer(&expected, only_added).await;
        check_same(only_added, &want, &answer(&fresh_default, only_added).await, false).unwrap();
    }

    // Plain Flight SQL (the server plans the SQL) reads the same snapshot,
    // and silt_system shows which.
    let mut flight = flight_sql_client_at(&server.flight_url()).await;
    check_flight(&mut flight, &expected).await;
    check_lookups(&server, &expected, &["id", "cat", "v", "note"], &keys).await;
    // Time travel through Flight SQL: every snapshot by id, and by the time
    // it was committed (`"events@<RFC 3339>"`), in that snapshot's schema.
    let summary = "SELECT count(*) AS n, sum(id) AS s, min(v) AS lo FROM";
    for snap in more["snapshots"].as_array().unwrap() {
        let id = snap["snapshot_id"].as_i64().unwrap();
        let ms = snap["timestamp_ms"].as_u64().unwrap();
        let at = humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms));
        let want = render(&answer(&expected_ctx(&warehouse, id).await, &format!("{summary} events")).await);
        for name in [format!("\"events@{id}\""), format!("\"events@{at}\"")] {
            let sql = format!("{summary} {name}");
            let info = flight.execute(sql.clone(), None).await.unwrap();
            assert_eq!(render(&fetch(&mut flight, info).await), want, "{sql}");
        }
    }
    for (sql, says) in [
        ("SELECT count(*) FROM \"events@yesterday\"", "snapshot id or a time"),
        ("SELECT count(*) FROM \"events@42\"", "no snapshot 42"),
        ("SELECT count(*) FROM \"folder@42\"", "only lakehouse tables"),
    ] {
        let err = flight_error(&mut flight, sql).await;
        assert!(err.contains(says), "{sql}: {err}");
    }

    let sql = "SELECT snapshot_id FROM silt_system.tables WHERE table_name = 'events'";
    let info = flight.execute(sql.to_string(), None).await.unwrap();
    let shown = render(&fetch(&mut flight, info).await);
    assert!(shown.contains(&current.to_string()), "{shown}");

    // A bucket partition (`bucket[4](id)`, the last appends' spec) rules
    // out the files of other buckets for an equality or IN filter, which
    // min/max bounds (every such file spans the appended ids) cannot.
    let range = files_scanned(
        &mut flight,
        "SELECT count(*) FROM events WHERE id BETWEEN 21000 AND 21399",
    )
    .await;
    for sql in [
        "SELECT id, cat, v, note FROM events WHERE id = 21005",
        "SELECT id, cat, v, note FROM events WHERE id IN (21005, 21010)",
    ] {
        let scanned = files_scanned(&mut flight, sql).await;
        assert!(scanned * 2 <= range && scanned > 0, "{sql}: {scanned} of {range} files");
        let info = flight.execute(sql.to_string(), None).await.unwrap();
        assert_eq!(
            render(&fetch(&mut flight, info).await),
            render(&answer(&expected, sql).await),
            "{sql}"
        );
    }

    // The rows position deletes removed: pyiceberg does not return them,
    // and neither does any path of Silt's.
    let deleted_snapshot = more["snapshots"].as_array().unwrap()[5]["snapshot_id"]
        .as_i64()
        .unwrap();
    let expected = expected_ctx(&warehouse, deleted_snapshot).await;
    let sql = "SELECT count(*) AS n FROM events WHERE id BETWEEN 3000 AND 3100";
    check_same(sql, &answer(&expected, sql).await, &answer(&pushdown, sql).await, false).unwrap();
}

/// Schema changes pyiceberg makes that only reading by field id gets
/// right: `v` renamed to `amount`, a new string column given the old name
/// `v` (in older files `v` is another column), an int column promoted to
/// long. Every client path, the server's own SQL and time travel (in each
/// snapshot's schema) answer as pyiceberg, including filters whose
/// statistics pruning reads the renamed columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn renamed_reused_and_promoted_columns_are_read_by_field_id() {
    let Served {
        warehouse,
        created,
        server,
        _dirs,
    } = serve_created_table().await;
    let evolved = fixture_phase(&warehouse, "evolve");
    let current = evolved["current_snapshot_id"].as_i64().unwrap();
    let expected = expected_ctx(&warehouse, current).await;
    let queries = [
        "SELECT id, cat, amount, v, qty FROM events ORDER BY id",
        "SELECT count(*) AS n, sum(amount) AS s, count(v) AS nv, sum(qty) AS q FROM events",
        "SELECT id, amount FROM events WHERE amount > 1400 AND amount < 1500 ORDER BY id",
        "SELECT id, v FROM events WHERE v = 'x5' ORDER BY id",
        "SELECT cat, count(*) AS n FROM events WHERE v IS NULL GROUP BY cat ORDER BY cat",
        "SELECT id, qty FROM events WHERE qty > 2147483647 ORDER BY id",
    ];
    // A query plans in the schema of the last snapshot the server read, so
    // the first one after a schema change still plans in the old one (and
    // reads the new snapshot's columns by field id); clients registered
    // after it get the new schema.
    let mut flight = flight_sql_client_at(&server.flight_url()).await;
    let info = flight
        .execute("SELECT count(*) FROM events".into(), None)
        .await
        .unwrap();
    fetch(&mut flight, info).await;
    let pushdown = pushdown_client(&server).await;
    let default = client(&server).await;
    check_clients(
        &queries,
        &expected,
        [("pushed down", &pushdown), ("default client", &default)],
    )
    .await;
    for sql in queries {
        let info = flight.execute(sql.to_string(), None).await.unwrap();
        assert_eq!(
            render(&fetch(&mut flight, info).await),
            render(&answer(&expected, sql).await),
            "Flight SQL: {sql}"
        );
    }
    // Lookups read the renamed column by its old name in older files, the
    // reused name only in newer ones, the promoted column widened.
    let keys = [150, 2999, 10003, 50001, 50499, 51000, 51299, 77777];
    check_lookups(&server, &expected, &["id", "amount", "v", "qty", "cat"], &keys).await;
    // Each snapshot in its own schema: `v` is the double before the rename.
    let before = created["current_snapshot_id"].as_i64().unwrap();
    let old = "SELECT count(*) AS n, sum(v) AS s FROM";
    check_time_travel(&mut flight, &warehouse, old, "\"events@", before).await;
}

/// Equality delete files (written to the spec: pyiceberg writes none): in
/// partition `a` by `id`, in partition `b` by (`cat`, `v`), then an append
/// of rows with deleted keys. Deleted rows never come back through a
/// pushed-down filter, a partial aggregate or any client path; a delete
/// applies to its partition's older files only; time travel to every
/// snapshot answers as the expected rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn equality_deletes_remove_rows_by_value_in_their_partition() {
    let (warehouse, server, deleted, _dirs) = serve_equality_deleted().await;
    let current = deleted["current_snapshot_id"].as_i64().unwrap();
    let pushdown = pushdown_client(&server).await;
    let default = client(&server).await;
    check_all(&pushdown, &warehouse, current, "equality deletes, pushed down").await;
    check_all(&default, &warehouse, current, "equality deletes, default client").await;
    let expected = expected_ctx(&warehouse, current).await;
    let queries = [
        // Keys deleted in `a` (10002, 10020), kept in `b` (100, 103), and
        // re-appended after the delete (10002, 10011, 202).
        "SELECT id, cat, v FROM events WHERE id IN (10002, 10011, 10020, 100, 103, 202, 208) ORDER BY id",
        "SELECT cat, count(*) AS n, sum(v) AS s FROM events WHERE id BETWEEN 100 AND 10600 GROUP BY cat ORDER BY cat",
        "SELECT count(*) AS n FROM events WHERE cat = 'b' AND v < 600",
    ];
    check_clients(
        &queries,
        &expected,
        [("pushed down", &pushdown), ("default client", &default)],
    )
    .await;
    // Lookups (the server's lookup path): deleted keys are not found, kept
    // and re-appended ones are; equality deletes compare the rows' `id`
    // and (`cat`, `v`), read with the found rows though not asked for.
    let keys = [10002, 10011, 10020, 100, 103, 202, 208, 3001, 3005, 99999];
    check_lookups(&server, &expected, &["id", "cat", "v"], &keys).await;
    check_lookups(&server, &expected, &["id"], &keys).await;
    let mut flight = flight_sql_client_at(&server.flight_url()).await;
    check_flight(&mut flight, &expected).await;
    let summary = "SELECT count(*) AS n, sum(id) AS s, min(v) AS lo FROM";
    for snap in deleted["snapshots"].as_array().unwrap() {
        let id = snap["snapshot_id"].as_i64().unwrap();
        check_time_travel(&mut flight, &warehouse, summary, "\"events@", id).await;
    }
}

/// How many files the server's plan of `sql` scans (`CachedScanExec:
/// files=N` in its EXPLAIN): those the table's metadata did not rule out
/// (0: it ruled out every file).
pub(crate) async fn files_scanned(
    flight: &mut arrow_flight::sql::client::FlightSqlServiceClient<tonic::transport::Channel>,
    sql: &str,
) -> usize {
    let info = flight.execute(format!("EXPLAIN {sql}"), None).await.unwrap();
    let plan = render(&fetch(flight, info).await);
    let Some(at) = plan.find("CachedScanExec: files=") else {
        assert!(
            plan.contains("EmptyExec"),
            "neither a Silt scan nor an empty one: {plan}"
        );
        return 0;
    };
    let at = at + "CachedScanExec: files=".len();
    plan[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Manifest metrics and hidden partitioning prune whole files before any
/// footer is read: `db.trips` is partitioned by `day(ts)` and
/// `truncate(1000, id)` (then also `month(d)`), and keeps no metrics for
/// `ts`, so a filter on `ts` prunes by the tuples alone; filters on `id`,
/// `name` and `price` by the manifests' bounds (`price` a decimal, some
/// negative). Answers equal pyiceberg's scan, through both clients and
/// Flight SQL, at every snapshot (the first ones in the older spec).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn manifest_bounds_and_hidden_partitions_prune_files() {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().canonicalize().unwrap();
    let made = fixture_phase(&warehouse, "hidden");
    let location = made["table_location"].as_str().unwrap();
    let (server, _cache) = serve_tables(&[("events", format!("iceberg+{location}"))], |_| {}).await;
    let current = made["current_snapshot_id"].as_i64().unwrap();
    let expected = expected_ctx(&warehouse, current).await;
    // Lookups skip the files the metadata rules out before reading their
    // footers: once the snapshot is resolved (the first lookup), a key
    // of one file (`id` 2110: day 20779, truncate 2000) reads that file.
    let columns = ["id", "name", "price", "d"];
    let before = store_requests(&server);
    check_lookups(&server, &expected, &columns, &[5]).await;
    let first = store_requests(&server) - before;
    check_lookups(&server, &expected, &columns, &[2110]).await;
    let both = store_requests(&server) - before;
    let all = "SELECT count(*) AS n, min(id) AS lo, max(id) AS hi, sum(price) AS s FROM events";
    // Each filter, and at most how many of the table's files it may scan.
    let filtered = [
        // One day of five (and then some): by `day(ts)` alone.
        ("WHERE ts >= '2026-11-21T00:00:00Z' AND ts < '2026-11-22T00:00:00Z'", 3),
        ("WHERE id BETWEEN 2100 AND 2120", 2),
        ("WHERE name = 'n03333'", 1),
        ("WHERE price < -5", 1),
        ("WHERE d >= DATE '2026-11-25'", 3),
        // Nothing: the first day's prices are all below 0.
        ("WHERE ts < '2026-11-21T00:00:00Z' AND price > 1", 0),
    ];
    let pushdown = pushdown_client(&server).await;
    let default = client(&server).await;
    let mut flight = flight_sql_client_at(&server.flight_url()).await;
    let every = files_scanned(&mut flight, all).await;
    assert!(every >= 10, "{every} files in the table");
    // Reading every file's footer and page index takes two requests or
    // more each (measured: 25 for the first lookup without this pruning,
    // 5 with it).
    assert!(
        both < 2.0 * every as f64,
        "two lookups of one key each made {first} and {both} store requests in all, over {every} files"
    );
    let mut queries = vec![all.to_string()];
    for (filter, most) in filtered {
        let sql = format!("{all} {filter}");
        let scanned = files_scanned(&mut flight, &sql).await;
        assert!(scanned <= most, "{scanned} of {every} files scanned {filter}");
        queries.push(sql);
        queries.push(format!("SELECT id, name, price, d FROM events {filter} ORDER BY id"));
    }
    let queries: Vec<&str> = queries.iter().map(String::as_str).collect();
    check_clients(
        &queries,
        &expected,
        [("pushed down", &pushdown), ("default client", &default)],
    )
    .await;
    for sql in &queries {
        let info = flight.execute(sql.to_string(), None).await.unwrap();
        let got = fetch(&mut flight, info).await;
        let want = answer(&expected, sql).await;
        if got.is_empty() {
            // No rows: Flight sent no batch (the schema alone).
            assert_eq!(want.iter().map(|b| b.num_rows()).sum::<usize>(), 0, "{sql}");
        } else {
            assert_eq!(render(&got), render(&want), "{sql}");
        }
    }
    for snap in made["snapshots"].as_array().unwrap() {
        let id = snap["snapshot_id"].as_i64().unwrap();
        let select = "SELECT count(*) AS n, sum(price) AS s FROM";
        check_time_travel(&mut flight, &warehouse, select, "\"events@", id).await;
        let day = "WHERE ts >= '2026-11-21T00:00:00Z' AND ts < '2026-11-22T00:00:00Z' AND id < 3000";
        let want = render(&answer(&expected_ctx(&warehouse, id).await, &format!("{select} events {day}")).await);
        let sql = format!("{select} \"events@{id}\" {day}");
        let info = flight.execute(sql.clone(), None).await.unwrap();
        assert_eq!(render(&fetch(&mut flight, info).await), want, "{sql}");
    }
}

/// Lookups by `id` of `keys` — through `SiltClient::lookup` and as SQL of
/// a lookup's shape (the server's lookup path: nothing planned) — return
/// exactly the rows `expected` has for them: none a delete removed, every
/// column as the table's snapshot has it (renamed, promoted, partition
/// values kept outside the files). Compared as rendered, in `id` order.
pub(crate) async fn check_lookups(
    server: &silt_server::ServerHandle,
    expected: &SessionContext,
    columns: &[&str],
    keys: &[i64],
) {
    let list = keys.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
    let select = format!("SELECT {} FROM events WHERE id IN ({list})", columns.join(", "));
    let want = render(&answer(expected, &format!("{select} ORDER BY id")).await);
    let client = silt_client::SiltClient::connect(&server.flight_url()).await.unwrap();
    let keys: datafusion::arrow::array::ArrayRef =
        std::sync::Arc::new(datafusion::arrow::array::Int64Array::from(keys.to_vec()));
    let names = columns.iter().map(|c| c.to_string()).collect();
    let looked_up = client.lookup("events", "id", keys, Some(names)).await.unwrap();
    let as_sql = client.sql(&select).await.unwrap();
    for (how, got) in [("lookup", looked_up), ("SQL", as_sql)] {
        let ctx = SessionContext::new();
        let schema = got.first().expect("a lookup answers with a batch").schema();
        let table = datafusion::datasource::MemTable::try_new(schema, vec![got]).unwrap();
        ctx.register_table("found", std::sync::Arc::new(table)).unwrap();
        let sorted = render(&answer(&ctx, "SELECT * FROM found ORDER BY id").await);
        assert_eq!(sorted, want, "{how}: {select}");
    }
}

/// The default client still chooses per row group on a snapshot that
/// deletes rows: row groups no delete touches (partition `c`'s files, which
/// no equality delete applies to) are answered from its own cache once
/// warm, the others are scanned on the server (the layout marks them
/// `server_only`), and every answer is the expected one. A pushdown-only
/// client answers alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_client_cache_answers_row_groups_no_delete_touches() {
    let (warehouse, server, deleted, _dirs) = serve_equality_deleted().await;
    let current = deleted["current_snapshot_id"].as_i64().unwrap();
    let expected = expected_ctx(&warehouse, current).await;
    let default = client(&server).await;
    for sql in [
        "SELECT id, cat, v FROM events WHERE v > 10 ORDER BY id",
        "SELECT id, cat FROM events WHERE id % 3 = 1 ORDER BY id",
    ] {
        let want = answer(&expected, sql).await;
        for _ in 0..3 {
            check_same(sql, &want, &answer(&default, sql).await, true).unwrap();
        }
        let (got, plan) = crate::hybrid::run_with_plan(&default, sql).await;
        check_same(sql, &want, &got, true).unwrap();
        let (local, pushed) = (
            crate::hybrid::plan_counter(&plan, "row_groups_local"),
            crate::hybrid::plan_counter(&plan, "row_groups_pushed"),
        );
        assert!(
            local > 0 && pushed > 0,
            "{sql}: {local} row groups local, {pushed} pushed"
        );
    }
    let pushdown = pushdown_client(&server).await;
    check_all(&pushdown, &warehouse, current, "equality deletes, pushed down").await;
}

/// A server over the created table after the fixture's `equality-deletes`
/// phase, and that phase's description.
/// (The folders live as long as the test holds them.)
async fn serve_equality_deleted() -> (
    PathBuf,
    silt_server::ServerHandle,
    serde_json::Value,
    [tempfile::TempDir; 2],
) {
    let served = serve_created_table().await;
    let deleted = fixture_phase(&served.warehouse, "equality-deletes");
    (served.warehouse, served.server, deleted, served._dirs)
}

/// A fleet of two servers over one Iceberg table whose snapshot deletes
/// rows by value: the fleet places its scans by data file and row group
/// (the layout, `server_only` marks and all, taken by a fleet client that
/// scans every row group on a server), both members own row groups and
/// serve queries, and every answer is the expected one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_places_a_lakehouse_tables_row_groups_and_answers_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().canonicalize().unwrap();
    fixture_phase(&warehouse, "create");
    let deleted = fixture_phase(&warehouse, "equality-deletes");
    let location = deleted["table_location"].as_str().unwrap();
    // Only the Iceberg table: every row group counted below is one of its.
    let tables = [("events", format!("iceberg+{location}"))];
    let (a, _a_cache) = serve_tables(&tables, |_| {}).await;
    let (b, _b_cache) = serve_tables(&tables, |_| {}).await;
    let urls = vec![a.flight_url(), b.flight_url()];
    let fleet = crate::fleet::fleet_ctx(&urls, std::time::Duration::from_secs(5)).await;
    let current = deleted["current_snapshot_id"].as_i64().unwrap();
    check_all(&fleet, &warehouse, current, "a fleet of two").await;
    let owned = silt_client::fleet::Fleet::connect(&urls, None)
        .unwrap()
        .owned_row_groups()
        .await
        .unwrap();
    assert!(owned.iter().all(|&n| n > 0), "every member owns row groups: {owned:?}");
    for server in [&a, &b] {
        assert!(
            metric(server, "silt_queries_total") > 0.0,
            "every member serves its share"
        );
        assert_eq!(metric(server, "silt_query_errors_total"), 0.0);
    }
}

/// `{select} {table}{snapshot}"` through Flight SQL (time travel: `table`
/// is the name up to its opening quote and `@`) equals `{select} events`
/// over the expected rows of `snapshot`.
pub(crate) async fn check_time_travel(
    flight: &mut arrow_flight::sql::client::FlightSqlServiceClient<tonic::transport::Channel>,
    warehouse: &Path,
    select: &str,
    table: &str,
    snapshot: i64,
) {
    let want = render(&answer(&expected_ctx(warehouse, snapshot).await, &format!("{select} events")).await);
    let sql = format!("{select} {table}{snapshot}\"");
    let info = flight.execute(sql.clone(), None).await.unwrap();
    assert_eq!(render(&fetch(flight, info).await), want, "{sql}");
}

/// Each of `queries` answers on both `clients` as on `expected`.
pub(crate) async fn check_clients(queries: &[&str], expected: &SessionContext, clients: [(&str, &SessionContext); 2]) {
    for sql in queries {
        let want = answer(expected, sql).await;
        for (label, ctx) in clients {
            check_same(&format!("{label}: {sql}"), &want, &answer(ctx, sql).await, true).unwrap();
        }
    }
}

/// A damaged manifest list, a damaged manifest and a missing manifest are
/// each a clear error naming the file, for the Iceberg table's queries only: other tables keep answering, and the table
/// answers again once a good snapshot is committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_or_missing_manifests_fail_their_table_only() {
    let Served {
        warehouse,
        server,
        _dirs,
        ..
    } = serve_created_table().await;
    let ctx = pushdown_client(&server).await;
    answer(&ctx, "SELECT count(*) FROM events").await;

    // A commit whose manifest list is then truncated.
    fixture_phase(&warehouse, "append");
    let metadata = warehouse.join("db/events/metadata");
    let newest = newest_file(&metadata, |name| name.starts_with("snap-"));
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &bytes[..bytes.len() / 3]).unwrap();
    let err = silt_client::script::run_script_last_query(&ctx, "SELECT count(*) FROM events")
        .await
        .unwrap_err()
        .to_string();
    let name = newest.file_name().unwrap().to_string_lossy().to_string();
    assert!(err.contains(&name), "the error names the damaged file: {err}");
    answer(&ctx, "SELECT count(*) FROM folder").await;

    // Mended (the writer rewrites it): the table answers again.
    std::fs::write(&newest, &bytes).unwrap();
    let sql = "SELECT count(*) AS n FROM events";
    let current = fixture_phase(&warehouse, "append")["current_snapshot_id"]
        .as_i64()
        .unwrap();
    check_same(
        sql,
        &answer(&expected_ctx(&warehouse, current).await, sql).await,
        &answer(&ctx, sql).await,
        false,
    )
    .unwrap();

    // A manifest (the newest commit's, which no query has read yet)
    // truncated, then one missing: the same.
    for missing in [false, true] {
        fixture_phase(&warehouse, "append");
        let manifest = newest_file(&metadata, |name| name.ends_with(".avro") && !name.starts_with("snap-"));
        let bytes = std::fs::read(&manifest).unwrap();
        if missing {
            std::fs::remove_file(&manifest).unwrap();
        } else {
            std::fs::write(&manifest, &bytes[..bytes.len() / 3]).unwrap();
        }
        let err = silt_client::script::run_script_last_query(&ctx, sql)
            .await
            .unwrap_err()
            .to_string();
        let name = manifest.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            err.contains(&name),
            "the error names the manifest (missing: {missing}): {err}"
        );
        answer(&ctx, "SELECT count(*) FROM folder").await;
        std::fs::write(&manifest, &bytes).unwrap();
        answer(&ctx, sql).await;
    }
}

/// The most recently modified file in `dir` whose name `wanted` accepts.
fn newest_file(dir: &Path, wanted: impl Fn(&str) -> bool) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| wanted(&p.file_name().unwrap().to_string_lossy()))
        .max_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap())
        .unwrap()
}

/// Commits while queries run never mix snapshots (Iceberg): see
/// [`commits_during_queries_never_mix`].
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commits_during_queries_never_mix_snapshots() {
    let Served {
        warehouse,
        server,
        _dirs,
        ..
    } = serve_created_table().await;
    let script = Fixture {
        script: "iceberg_server_fixture.py",
        dir: &warehouse,
        expected: &warehouse,
        snapshots: "snapshots",
        id: "snapshot_id",
    };
    commits_during_queries_never_mix(&server, &script).await;
}

/// A lakehouse fixture script and where it keeps a table.
pub(crate) struct Fixture<'a> {
    pub script: &'a str,
    /// What the script is given (the warehouse, or the table's folder).
    pub dir: &'a Path,
    /// The folder of `expected/<id>.parquet`.
    pub expected: &'a Path,
    /// The keys of its description: the list of snapshots, and each one's id.
    pub snapshots: &'a str,
    pub id: &'a str,
}

/// Commits while queries run never give an answer that mixes two snapshots:
/// 4 clients each run queries that scan the table twice (two subqueries) —
/// at least 25 each, and on until another process has made 30 commits
/// (appends, the script's `appends 30`); both scans of one query must see
/// the same snapshot, one the table has had.
pub(crate) async fn commits_during_queries_never_mix(server: &silt_server::ServerHandle, fixture: &Fixture<'_>) {
    let committed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let committer = {
        let (script, dir, committed) = (fixture.script.to_string(), fixture.dir.to_path_buf(), committed.clone());
        std::thread::spawn(move || {
            silt_bench::files::run_python_script(
                &repo(),
                &script,
                &[dir.as_os_str(), "appends".as_ref(), "30".as_ref()],
            );
            committed.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let sql = "SELECT (SELECT count(*) FROM events) AS a, (SELECT sum(id) FROM events) AS b";
    let clients = (0..4).map(|_| {
        let (url, committed) = (server.flight_url(), committed.clone());
        tokio::spawn(async move {
            let mut flight = flight_sql_client_at(&url).await;
            let mut seen = Vec::new();
            while seen.len() < 25 || !committed.load(std::sync::atomic::Ordering::SeqCst) {
                let info = flight.execute(sql.to_string(), None).await.unwrap();
                let batches = fetch(&mut flight, info).await;
                let row = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                    .unwrap()
                    .to_string();
                seen.push(row);
            }
            seen
        })
    });
    let answers: Vec<String> = futures::future::join_all(clients)
        .await
        .into_iter()
        .flat_map(|r| r.unwrap())
        .collect();
    committer.join().unwrap();
    // Every snapshot's own (count, sum), from the independent reader's rows.
    let described = run_fixture(fixture.script, fixture.dir, "append");
    let mut valid = std::collections::BTreeSet::new();
    for snap in described[fixture.snapshots].as_array().unwrap() {
        let id = snap[fixture.id].as_i64().unwrap();
        let one = answer(
            &expected_ctx(fixture.expected, id).await,
            "SELECT count(*) AS a, sum(id) AS b FROM events",
        )
        .await;
        valid.insert(
            datafusion::arrow::util::pretty::pretty_format_batches(&one)
                .unwrap()
                .to_string(),
        );
    }
    let distinct: std::collections::BTreeSet<&String> = answers.iter().collect();
    for a in &distinct {
        assert!(valid.contains(*a), "an answer of no snapshot (two mixed?):\n{a}");
    }
    eprintln!("{} snapshots seen across {} queries", distinct.len(), answers.len());
    assert!(distinct.len() > 1, "the queries ran while commits landed");
}
