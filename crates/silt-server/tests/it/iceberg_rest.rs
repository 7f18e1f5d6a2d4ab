//! An Iceberg REST catalog: pyiceberg's SQL catalog served through the REST
//! spec's config and load-table endpoints (`scripts/iceberg_rest_fixture.py`,
//! with a bearer token), its tables queried as `catalog.namespace.table`
//! through Flight SQL against pyiceberg's own scans of the same snapshots.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use silt_server::config::CatalogConfig;

use crate::flight_sql::{fetch, flight_sql_client_at};
use crate::iceberg::{QUERIES, check_time_travel, expected_ctx, flight_error, render, repo, run_fixture, serve_tables};

type FlightClient = arrow_flight::sql::client::FlightSqlServiceClient<tonic::transport::Channel>;

/// The REST catalog fixture over a warehouse; stopped when dropped.
struct RestFixture {
    child: Child,
    uri: String,
}

impl RestFixture {
    fn start(warehouse: &Path, token: &str) -> RestFixture {
        let env = Command::new("bash")
            .arg(repo().join("scripts/python-env.sh"))
            .output()
            .expect("running scripts/python-env.sh");
        assert!(env.status.success(), "{}", String::from_utf8_lossy(&env.stderr));
        let python = String::from_utf8(env.stdout).unwrap().trim().to_string();
        let mut child = Command::new(python)
            .arg(repo().join("scripts/iceberg_rest_fixture.py"))
            .arg(warehouse)
            .arg(token)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the REST catalog fixture");
        let mut port = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut port)
            .unwrap();
        assert!(!port.trim().is_empty(), "the REST catalog fixture printed no port");
        RestFixture {
            uri: format!("http://127.0.0.1:{}", port.trim()),
            child,
        }
    }
}

impl Drop for RestFixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every one of [`QUERIES`] on `lake.db.events` through Flight SQL equals
/// DataFusion's over pyiceberg's rows of `snapshot`.
async fn check_catalog_table(flight: &mut FlightClient, warehouse: &Path, snapshot: i64, label: &str) {
    let expected = expected_ctx(warehouse, snapshot).await;
    for sql in QUERIES {
        let want = render(&crate::common::answer(&expected, sql).await);
        let named = sql.replace("FROM events", "FROM lake.db.events");
        let info = flight.execute(named.clone(), None).await.unwrap();
        assert_eq!(render(&fetch(flight, info).await), want, "{label}: {named}");
    }
}

/// Load-table requests the fixture has answered.
fn load_table_requests(warehouse: &Path) -> usize {
    std::fs::read_to_string(warehouse.join("rest-requests.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("/tables/"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rest_catalog_tables_answer_and_follow_commits() {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().canonicalize().unwrap();
    let created = run_fixture("iceberg_server_fixture.py", &warehouse, "create");
    let rest = RestFixture::start(&warehouse, "s3cret");
    let catalog = CatalogConfig {
        kind: "iceberg-rest".into(),
        uri: rest.uri.clone(),
        token: Some("s3cret".into()),
        tables: vec!["db.events".into(), "db.missing".into()],
        ..Default::default()
    };
    let (server, _cache) = serve_tables(&[], |cfg| {
        cfg.catalogs.insert("lake".into(), catalog.clone());
    })
    .await;
    let mut flight = flight_sql_client_at(&server.flight_url()).await;
    let current = created["current_snapshot_id"].as_i64().unwrap();
    check_catalog_table(&mut flight, &warehouse, current, "after create").await;

    // Under `always`, a warm query asks the catalog once: its one
    // metadata read.
    let before = load_table_requests(&warehouse);
    let info = flight
        .execute("SELECT count(*) FROM lake.db.events".into(), None)
        .await
        .unwrap();
    fetch(&mut flight, info).await;
    assert_eq!(
        load_table_requests(&warehouse) - before,
        1,
        "load-table requests of a warm query"
    );

    // Point lookups name the table as SQL does (the snapshot has no
    // deletes: copy-on-write only).
    let client = silt_client::SiltClient::connect(&server.flight_url()).await.unwrap();
    let ids: datafusion::arrow::array::ArrayRef =
        std::sync::Arc::new(datafusion::arrow::array::Int64Array::from(vec![3000, 3001, 5]));
    let found = client
        .lookup("lake.db.events", "id", ids, Some(vec!["id".into(), "cat".into()]))
        .await
        .unwrap();
    let want = crate::common::answer(
        &expected_ctx(&warehouse, current).await,
        "SELECT id, cat FROM events WHERE id IN (3000, 3001, 5) ORDER BY id",
    )
    .await;
    let rows = |batches: &[datafusion::arrow::array::RecordBatch]| batches.iter().map(|b| b.num_rows()).sum::<usize>();
    assert_eq!(rows(&found), rows(&want), "lookup of lake.db.events");

    // A commit through the catalog is seen by the next query.
    let appended = run_fixture("iceberg_server_fixture.py", &warehouse, "append");
    let current = appended["current_snapshot_id"].as_i64().unwrap();
    check_catalog_table(&mut flight, &warehouse, current, "after an append").await;

    // Time travel, as for tables named by their folder.
    let first = created["snapshots"][0]["snapshot_id"].as_i64().unwrap();
    let select = "SELECT count(*) AS n, sum(id) AS s FROM";
    check_time_travel(&mut flight, &warehouse, select, "lake.db.\"events@", first).await;

    // A configured table the catalog does not have, and a name no catalog
    // serves: clear errors, and the other table keeps answering.
    let err = flight_error(&mut flight, "SELECT count(*) FROM lake.db.missing").await;
    assert!(err.contains("catalog 'lake'") && err.contains("no such table"), "{err}");
    let err = flight_error(&mut flight, "SELECT count(*) FROM lake.db.nope").await;
    assert!(err.contains("unknown table"), "{err}");
    check_catalog_table(&mut flight, &warehouse, current, "after the errors").await;

    // A wrong token: the table is unavailable, saying why.
    let wrong = CatalogConfig {
        token: Some("wrong".into()),
        ..catalog
    };
    let (refused, _cache) = serve_tables(&[], |cfg| {
        cfg.catalogs.insert("lake".into(), wrong);
    })
    .await;
    let mut flight = flight_sql_client_at(&refused.flight_url()).await;
    let err = flight_error(&mut flight, "SELECT count(*) FROM lake.db.events").await;
    assert!(err.contains("401"), "{err}");
}
