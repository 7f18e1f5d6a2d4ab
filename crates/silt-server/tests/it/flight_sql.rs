//! Generic Flight SQL: arrow-flight's own client, no Silt code on its side.

use arrow_flight::FlightInfo;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{CommandGetDbSchemas, CommandGetTables, SqlInfo};
use datafusion::arrow::array::{Array, BinaryArray, RecordBatch, StringArray};
use datafusion::arrow::compute::concat_batches;
use futures::TryStreamExt;
use tonic::transport::Channel;

use crate::common::{Fixture, baseline_ctx, check_same};

pub async fn flight_sql_client(fx: &Fixture) -> FlightSqlServiceClient<Channel> {
    let channel = Channel::from_shared(fx.server.flight_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    FlightSqlServiceClient::new(channel)
}

pub async fn fetch(client: &mut FlightSqlServiceClient<Channel>, info: FlightInfo) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    for ep in info.endpoint {
        let stream = client.do_get(ep.ticket.unwrap()).await.unwrap();
        out.extend(stream.try_collect::<Vec<_>>().await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_flight_sql_client_runs_select() {
    let fx = Fixture::start().await;
    let mut client = flight_sql_client(&fx).await;
    let sql = "SELECT count(*) AS n FROM lineitem WHERE l_quantity < 10";
    let info = client.execute(sql.to_string(), None).await.unwrap();
    let got = fetch(&mut client, info).await;
    let expected = baseline_ctx().await.sql(sql).await.unwrap().collect().await.unwrap();
    check_same(sql, &got, &expected, false).unwrap();

    // Prepared statements (what many drivers use) return the same.
    let mut prepared = client.prepare(sql.to_string(), None).await.unwrap();
    let info = prepared.execute().await.unwrap();
    let got = fetch(&mut client, info).await;
    check_same("prepared", &got, &expected, false).unwrap();
    prepared.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_tools_can_browse_catalogs_schemas_tables_and_info() {
    let fx = Fixture::start().await;
    let mut client = flight_sql_client(&fx).await;

    let info = client.get_catalogs().await.unwrap();
    let batches = fetch(&mut client, info).await;
    let b = concat_batches(&batches[0].schema(), &batches).unwrap();
    let catalogs = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
    assert_eq!(catalogs.value(0), "silt");

    let info = client.get_db_schemas(CommandGetDbSchemas::default()).await.unwrap();
    let batches = fetch(&mut client, info).await;
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);

    let info = client
        .get_tables(CommandGetTables {
            include_schema: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let batches = fetch(&mut client, info).await;
    let b = concat_batches(&batches[0].schema(), &batches).unwrap();
    let names = b
        .column_by_name("table_name")
        .unwrap()
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    let types = b
        .column_by_name("table_type")
        .unwrap()
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    let schemas = b
        .column_by_name("table_schema")
        .unwrap()
        .as_any()
        .downcast_ref::<BinaryArray>()
        .unwrap();
    let mut found = std::collections::BTreeMap::new();
    for i in 0..b.num_rows() {
        found.insert(names.value(i).to_string(), (types.value(i).to_string(), i));
    }
    assert_eq!(found["lineitem"].0, "TABLE");
    assert_eq!(found["hits"].0, "VIEW");
    assert_eq!(found.len(), 10, "{found:?}");
    let li = found["lineitem"].1;
    let schema = datafusion::arrow::ipc::convert::try_schema_from_ipc_buffer(schemas.value(li)).unwrap();
    assert!(schema.field_with_name("l_quantity").is_ok());

    // A table filter pattern is honoured.
    let info = client
        .get_tables(CommandGetTables {
            table_name_filter_pattern: Some("line%".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let batches = fetch(&mut client, info).await;
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);

    let info = client
        .get_sql_info(vec![SqlInfo::FlightSqlServerName, SqlInfo::FlightSqlServerReadOnly])
        .await
        .unwrap();
    let batches = fetch(&mut client, info).await;
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 2);
}

/// `GET /metrics` over plain HTTP/1.0 on the admin port.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).await.unwrap();
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_health_are_served_over_http() {
    let fx = Fixture::start().await;
    let admin = fx.server.admin_addr.unwrap();
    let health = http_get(admin, "/health").await;
    assert!(
        health.starts_with("HTTP/1.0 200") || health.starts_with("HTTP/1.1 200"),
        "{health}"
    );
    assert!(health.contains("\"status\":\"ok\""));

    let ctx = fx.client_ctx().await;
    ctx.sql("SELECT count(*) FROM lineitem WHERE l_quantity < 10")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let text = http_get(admin, "/metrics").await;
    let values = silt_server::metrics::parse_exposition(text.split("\r\n\r\n").nth(1).unwrap());
    for name in [
        "silt_queries_total",
        "silt_object_store_get_requests_total",
        "silt_object_store_get_bytes_total",
        "silt_flight_bytes_sent_total",
    ] {
        assert!(values.get(name).copied().unwrap_or(0.0) > 0.0, "{name} in {text}");
    }
    assert!(values.contains_key("silt_query_errors_total"), "{text}");
}
