//! Generic Flight SQL: arrow-flight's own client, no Silt code on its side.

use arrow_flight::FlightInfo;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{
    CommandGetCrossReference, CommandGetDbSchemas, CommandGetExportedKeys, CommandGetImportedKeys,
    CommandGetPrimaryKeys, CommandGetTables, CommandGetXdbcTypeInfo, SqlInfo,
};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, BinaryArray, RecordBatch, StringArray};
use datafusion::arrow::compute::{cast, concat_batches};
use datafusion::arrow::datatypes::{DataType, Schema};
use futures::TryStreamExt;
use std::sync::Arc;
use tonic::transport::Channel;

use crate::common::{Fixture, baseline_ctx, check_same};

pub async fn flight_sql_client(fx: &Fixture) -> FlightSqlServiceClient<Channel> {
    flight_sql_client_at(&fx.server.flight_url()).await
}

/// A plain Flight SQL client of the server at `url`.
pub async fn flight_sql_client_at(url: &str) -> FlightSqlServiceClient<Channel> {
    let channel = Channel::from_shared(url.to_string()).unwrap().connect().await.unwrap();
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

/// The data types of `schema`'s fields.
fn types(schema: &Schema) -> Vec<DataType> {
    schema.fields().iter().map(|f| f.data_type().clone()).collect()
}

/// `batches` with every column cast to `like`'s types (a client's plain
/// answer against DataFusion's own).
pub fn cast_like(batches: &[RecordBatch], like: &Schema) -> Vec<RecordBatch> {
    batches
        .iter()
        .map(|b| {
            let columns: Vec<ArrayRef> = b
                .columns()
                .iter()
                .zip(like.fields())
                .map(|(c, f)| cast(c, f.data_type()).unwrap())
                .collect();
            RecordBatch::try_new(Arc::new(like.clone()), columns).unwrap()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_come_in_plain_types_unless_views_are_asked_for() {
    let fx = Fixture::start().await;
    let sql = "SELECT l_orderkey, l_returnflag, l_comment FROM lineitem WHERE l_orderkey < 40";
    let expected = baseline_ctx().await.sql(sql).await.unwrap().collect().await.unwrap();
    assert_eq!(
        types(&expected[0].schema())[1],
        DataType::Utf8View,
        "DataFusion reads strings as views"
    );

    // A client that does not ask: Utf8, in the FlightInfo and the batches.
    let mut plain = flight_sql_client(&fx).await;
    let info = plain.execute(sql.to_string(), None).await.unwrap();
    let announced = Schema::try_from(info.clone()).unwrap();
    let got = fetch(&mut plain, info).await;
    for schema in [announced, got[0].schema().as_ref().clone()] {
        assert_eq!(types(&schema), [DataType::Int64, DataType::Utf8, DataType::Utf8]);
    }
    check_same(sql, &cast_like(&got, &expected[0].schema()), &expected, false).unwrap();

    // One that asks gets the engine's views.
    let mut views = flight_sql_client(&fx).await;
    views.set_header(silt_proto::VIEW_TYPES_HEADER, "true");
    let info = views.execute(sql.to_string(), None).await.unwrap();
    let got = fetch(&mut views, info).await;
    check_same(sql, &got, &expected, false).unwrap();

    // Table schemas in GetTables follow the same rule.
    let column_type = |batches: &[RecordBatch]| {
        let b = concat_batches(&batches[0].schema(), batches).unwrap();
        let names = b.column_by_name("table_name").unwrap().as_string::<i32>();
        let at = (0..b.num_rows()).find(|&i| names.value(i) == "lineitem").unwrap();
        let ipc = b.column_by_name("table_schema").unwrap().as_binary::<i32>().value(at);
        let schema = datafusion::arrow::ipc::convert::try_schema_from_ipc_buffer(ipc).unwrap();
        schema.field_with_name("l_comment").unwrap().data_type().clone()
    };
    let tables = CommandGetTables {
        include_schema: true,
        ..Default::default()
    };
    let info = plain.get_tables(tables.clone()).await.unwrap();
    assert_eq!(column_type(&fetch(&mut plain, info).await), DataType::Utf8);
    let info = views.get_tables(tables).await.unwrap();
    assert_eq!(column_type(&fetch(&mut views, info).await), DataType::Utf8View);

    // Silt's own client asks for views: its SQL answers keep them.
    let silt = silt_client::SiltClient::connect(&fx.server.flight_url()).await.unwrap();
    let got = silt.sql(sql).await.unwrap();
    assert_eq!(types(&got[0].schema())[2], DataType::Utf8View);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metadata_call_a_driver_makes_answers() {
    let fx = Fixture::start().await;
    let mut client = flight_sql_client(&fx).await;
    let rows = |batches: &[RecordBatch]| batches.iter().map(|b| b.num_rows()).sum::<usize>();

    let info = client.get_table_types().await.unwrap();
    let batches = fetch(&mut client, info).await;
    let kinds: Vec<&str> = batches[0].column(0).as_string::<i32>().iter().flatten().collect();
    assert_eq!(kinds, ["TABLE", "VIEW"]);

    let info = client
        .get_xdbc_type_info(CommandGetXdbcTypeInfo { data_type: None })
        .await
        .unwrap();
    let batches = fetch(&mut client, info).await;
    let names: Vec<&str> = batches[0].column(0).as_string::<i32>().iter().flatten().collect();
    for t in ["VARCHAR", "BIGINT", "DOUBLE", "DECIMAL", "DATE", "TIMESTAMP", "BOOLEAN"] {
        assert!(names.contains(&t), "{t} not in {names:?}");
    }

    // Keys: none, in the schemas the Flight SQL specification gives.
    let keys = client
        .get_primary_keys(CommandGetPrimaryKeys {
            table: "lineitem".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let exported = client
        .get_exported_keys(CommandGetExportedKeys {
            table: "orders".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let imported = client
        .get_imported_keys(CommandGetImportedKeys {
            table: "lineitem".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let cross = client
        .get_cross_reference(CommandGetCrossReference {
            pk_table: "orders".into(),
            fk_table: "lineitem".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    for (info, column) in [
        (keys, "key_sequence"),
        (exported, "fk_column_name"),
        (imported, "pk_column_name"),
        (cross, "update_rule"),
    ] {
        let schema = Schema::try_from(info.clone()).unwrap();
        assert!(schema.field_with_name(column).is_ok(), "{column} in {schema:?}");
        assert_eq!(rows(&fetch(&mut client, info).await), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_report_and_bind_parameters() {
    let fx = Fixture::start().await;
    let base = baseline_ctx().await;
    let mut client = flight_sql_client(&fx).await;
    let sql = "SELECT count(*) AS n FROM lineitem WHERE l_returnflag = ? AND l_quantity < ?";
    let mut prepared = client.prepare(sql.to_string(), None).await.unwrap();
    let parameters = prepared.parameter_schema().unwrap().clone();
    // Typed as what each is compared with, in plain types.
    assert_eq!(types(&parameters), [DataType::Utf8, DataType::Decimal128(15, 2)]);

    let mut answers = Vec::new();
    for (flag, quantity) in [("R", 1000), ("N", 2550)] {
        let values = RecordBatch::try_new(
            Arc::new(parameters.clone()),
            vec![
                Arc::new(StringArray::from(vec![flag])) as ArrayRef,
                Arc::new(
                    datafusion::arrow::array::Decimal128Array::from(vec![quantity as i128])
                        .with_precision_and_scale(15, 2)
                        .unwrap(),
                ),
            ],
        )
        .unwrap();
        prepared.set_parameters(values).unwrap();
        let info = prepared.execute().await.unwrap();
        let got = fetch(&mut client, info).await;
        let literal = format!(
            "SELECT count(*) AS n FROM lineitem WHERE l_returnflag = '{flag}' AND l_quantity < {}",
            quantity as f64 / 100.0
        );
        let expected = base.sql(&literal).await.unwrap().collect().await.unwrap();
        check_same(&literal, &got, &expected, false).unwrap();
        answers.push(got);
    }
    assert_ne!(
        answers[0], answers[1],
        "the second values were bound, not the first again"
    );

    // Too few values: the statement names the placeholder left unbound.
    let one = RecordBatch::try_new(
        Arc::new(Schema::new(vec![parameters.field(0).clone()])),
        vec![Arc::new(StringArray::from(vec!["R"])) as ArrayRef],
    )
    .unwrap();
    prepared.set_parameters(one).unwrap();
    let err = prepared.execute().await.unwrap_err().to_string();
    assert!(err.contains("no value bound to placeholder $2"), "{err}");
    prepared.close().await.unwrap();
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
