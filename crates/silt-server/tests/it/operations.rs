//! What an operator sees: `silt_system` tables over Flight SQL, per-table and
//! per-column hit ratios on `/metrics`, and the admin endpoints behind the
//! auth token.

use std::net::SocketAddr;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{Float64Type, UInt64Type};
use silt_cache::MemoryForm;

use crate::common::{Fixture, baseline_ctx, check_same};
use crate::flight_sql::{fetch, flight_sql_client};

/// Status code, headers and body of `GET path` with `headers`.
async fn http_get_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n{extra}\r\n").as_bytes())
        .await
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

/// The one batch of `sql` through a generic Flight SQL client.
async fn flight_sql(fx: &Fixture, sql: &str) -> RecordBatch {
    let mut client = flight_sql_client(fx).await;
    let info = client
        .execute(sql.to_string(), None)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let batches = fetch(&mut client, info).await;
    concat_batches(&batches[0].schema(), &batches).unwrap()
}

async fn flight_sql_error(fx: &Fixture, sql: &str) -> String {
    let mut client = flight_sql_client(fx).await;
    match client.execute(sql.to_string(), None).await {
        Ok(_) => panic!("{sql} should fail"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_tables_answer_sql_about_the_cache() {
    // Arrow form: no background transcoding changes sizes under the test.
    let fx = Fixture::start_with(|c| c.memory_form = MemoryForm::Arrow).await;
    // The filter keeps most rows, so the first run admits the projected
    // column too (a sparse one would be admitted on its second read).
    let sql = "SELECT l_returnflag, sum(l_quantity) AS q FROM lineitem WHERE l_quantity < 40 GROUP BY 1 ORDER BY 1";
    let got = flight_sql(&fx, sql).await;
    let expected = baseline_ctx().await.sql(sql).await.unwrap().collect().await.unwrap();
    // A generic client gets plain types (Utf8 for DataFusion's Utf8View).
    let plain = crate::flight_sql::cast_like(std::slice::from_ref(&got), &expected[0].schema());
    check_same(sql, &plain, &expected, false).unwrap();

    // cache_segments: what each tier holds, per table.
    let segments = flight_sql(
        &fx,
        "SELECT table_name, tier, sum(bytes) AS bytes, count(*) AS n FROM silt_system.cache_segments \
         GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .await;
    let tables = segments.column(0).as_string::<i32>();
    let tiers = segments.column(1).as_string::<i32>();
    let bytes = segments.column(2).as_primitive::<UInt64Type>();
    let memory_of_lineitem: u64 = (0..segments.num_rows())
        .filter(|&i| tables.value(i) == "lineitem" && tiers.value(i) == "memory")
        .map(|i| bytes.value(i))
        .sum();
    assert!(
        memory_of_lineitem > 0,
        "lineitem's columns are in the memory tier: {segments:?}"
    );
    let memory_total: u64 = (0..segments.num_rows())
        .filter(|&i| tiers.value(i) == "memory")
        .map(|i| bytes.value(i))
        .sum();
    assert_eq!(
        memory_total,
        fx.server.engine.tiers().batches().weighted_size(),
        "memory segments add up to the tier's size"
    );
    let columns = flight_sql(
        &fx,
        "SELECT DISTINCT column_name FROM silt_system.cache_segments \
         WHERE table_name = 'lineitem' AND tier = 'memory' ORDER BY 1",
    )
    .await;
    let names: Vec<&str> = columns.column(0).as_string::<i32>().iter().flatten().collect();
    assert_eq!(names, ["l_quantity", "l_returnflag"], "only the columns the query read");

    // queries: the query above, finished, with the rows it sent.
    let queries = flight_sql(
        &fx,
        "SELECT kind, state, rows, total_ms, scan_ms FROM silt_system.queries \
         WHERE text LIKE '%sum(l_quantity)%' AND text NOT LIKE '%silt_system%'",
    )
    .await;
    assert_eq!(queries.num_rows(), 1, "{queries:?}");
    assert_eq!(queries.column(0).as_string::<i32>().value(0), "sql");
    assert_eq!(queries.column(1).as_string::<i32>().value(0), "finished");
    assert_eq!(
        queries.column(2).as_primitive::<UInt64Type>().value(0),
        got.num_rows() as u64
    );
    let running = flight_sql(
        &fx,
        "SELECT count(*) FROM silt_system.queries WHERE state = 'running' AND text LIKE '%silt_system.queries%'",
    )
    .await;
    assert_eq!(
        running
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
            .value(0),
        1,
        "the asking query is itself running"
    );

    // tables: lookups and the hit ratio per table.
    let t = flight_sql(
        &fx,
        "SELECT memory_misses, hit_ratio, column_chunk_bytes FROM silt_system.tables WHERE table_name = 'lineitem'",
    )
    .await;
    assert_eq!(t.num_rows(), 1);
    assert!(t.column(0).as_primitive::<UInt64Type>().value(0) > 0);
    let ratio = t.column(1).as_primitive::<Float64Type>().value(0);
    assert!((0.0..=1.0).contains(&ratio), "{ratio}");
    assert!(t.column(2).as_primitive::<UInt64Type>().value(0) > 0);

    // store_requests: the same GETs the metrics count.
    let before = fx.metric("silt_object_store_get_requests_total") as u64;
    let s = flight_sql(
        &fx,
        "SELECT requests FROM silt_system.store_requests WHERE operation = 'get'",
    )
    .await;
    let after = fx.metric("silt_object_store_get_requests_total") as u64;
    let gets = s.column(0).as_primitive::<UInt64Type>().value(0);
    assert!(
        before > 0 && (before..=after).contains(&gets),
        "{before} <= {gets} <= {after}"
    );

    // Read-only, and only its own names.
    let err = flight_sql_error(&fx, "SELECT * FROM silt_system.nope").await;
    assert!(err.contains("silt_system.nope"), "{err}");
    let err = flight_sql_error(&fx, "SELECT * FROM queries").await;
    assert!(err.contains("queries"), "{err}");
    let err = flight_sql_error(&fx, "DROP TABLE silt_system.queries").await;
    assert!(!err.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints_need_the_token_and_metrics_carry_hit_ratios() {
    let fx = Fixture::start_with(|c| c.auth_token = Some("s3cret".into())).await;
    let admin = fx.server.admin_addr.unwrap();
    for path in ["/metrics", "/stats", "/", "/stats?token=wrong"] {
        let (status, _, body) = http_get_with(admin, path, &[]).await;
        assert_eq!(status, 401, "{path}: {body}");
    }
    let (status, _, _) = http_get_with(admin, "/metrics", &[("authorization", "Bearer wrong")]).await;
    assert_eq!(status, 401);
    let (status, _, _) = http_get_with(admin, "/health", &[]).await;
    assert_eq!(status, 200, "health stays open");
    let (status, _, _) = http_get_with(admin, "/assets/uPlot.iife.min.js", &[]).await;
    assert_eq!(status, 200, "the vendored chart library is public");

    // A browser: the token in the address sets a cookie that later works.
    let (status, head, body) = http_get_with(admin, "/?token=s3cret", &[]).await;
    assert_eq!(status, 200);
    assert!(body.contains("<html"), "the dashboard page");
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .expect("a cookie")
        .split(';')
        .next()
        .unwrap()
        .to_string();
    assert!(head.to_lowercase().contains("httponly"));
    assert!(
        !cookie.contains("s3cret"),
        "the cookie is a session id, not the token: {cookie}"
    );
    let (status, _, _) = http_get_with(admin, "/stats", &[("cookie", &cookie)]).await;
    assert_eq!(status, 200);

    // Two runs of one query through Silt's client: misses, then hits.
    let mut client = flight_sql_client(&fx).await;
    client.set_token("s3cret".into());
    for _ in 0..2 {
        let info = client
            .execute("SELECT sum(l_quantity) FROM lineitem".into(), None)
            .await
            .unwrap();
        fetch(&mut client, info).await;
    }
    let (status, _, text) = http_get_with(admin, "/metrics", &[("authorization", "Bearer s3cret")]).await;
    assert_eq!(status, 200);
    let series = silt_server::metrics::parse_exposition(&text);
    let get = |s: &str| *series.get(s).unwrap_or_else(|| panic!("{s} missing"));
    assert!(get("silt_column_misses_total{table=\"lineitem\",column=\"l_quantity\"}") > 0.0);
    assert!(get("silt_column_hits_total{table=\"lineitem\",column=\"l_quantity\"}") > 0.0);
    let ratio = get("silt_column_hit_ratio{table=\"lineitem\",column=\"l_quantity\"}");
    assert!(ratio > 0.0 && ratio < 1.0, "{ratio}");
    assert!(get("silt_table_hits_total{table=\"lineitem\"}") > 0.0);
    assert!(get("silt_scan_column_chunk_bytes_total") > 0.0);
    assert!(get("silt_object_store_request_seconds_count") > 0.0);
    // Bounded: at most TOP named tables plus `other`.
    let named = series
        .keys()
        .filter(|k| k.starts_with("silt_table_hits_total{"))
        .count();
    assert!(named <= silt_server::table_metrics::TOP + 1, "{named}");

    // `/stats` agrees with `/metrics` and lists the queries.
    let (_, _, stats) = http_get_with(admin, "/stats", &[("authorization", "Bearer s3cret")]).await;
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    let columns = &stats["tables"]["lineitem"]["columns"]["l_quantity"];
    assert!(columns["hits"].as_u64().unwrap() > 0, "{columns}");
    assert!(stats["bytes_saved"]["would_read"].as_u64().unwrap() > 0);
    let slow = stats["queries"]["slow"].as_array().unwrap();
    assert!(
        slow.iter()
            .any(|q| q["text"].as_str().unwrap().contains("sum(l_quantity)")),
        "{slow:?}"
    );
    assert!(
        !stats["history"]["samples"].as_array().unwrap().is_empty(),
        "a sample at start-up"
    );
}
