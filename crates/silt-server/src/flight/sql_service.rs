//! The Flight SQL endpoints of [`SiltFlightService`]: metadata (catalogs,
//! schemas, tables, table types, SQL and XDBC type info, keys), statements,
//! prepared statements (with parameters), Silt's own tickets (scans,
//! lookups) and actions (stats, preload). Queries themselves run through the
//! parent module. SQL answers and table schemas go out in the types the
//! call asked for ([`WireTypes`]).

use arrow_flight::sql::{
    CommandGetCrossReference, CommandGetExportedKeys, CommandGetImportedKeys, CommandGetPrimaryKeys,
    CommandGetTableTypes, CommandGetXdbcTypeInfo, DoPutPreparedStatementResult,
};

use super::metadata::{FOREIGN_KEYS_SCHEMA, PRIMARY_KEYS_SCHEMA, TABLE_TYPES, XDBC_TYPES, no_keys};
use super::prepared::{PreparedHandle, bound_values};
use super::*;
use crate::query::Request as QueryRequest;
use datafusion::arrow::datatypes::SchemaRef;

static SQL_INFO: LazyLock<SqlInfoData> = LazyLock::new(|| {
    let mut b = SqlInfoDataBuilder::new();
    b.append(SqlInfo::FlightSqlServerName, "Silt");
    b.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    b.append(SqlInfo::FlightSqlServerArrowVersion, "1.3");
    b.append(SqlInfo::FlightSqlServerReadOnly, true);
    b.append(SqlInfo::FlightSqlServerSql, true);
    b.append(SqlInfo::FlightSqlServerSubstrait, false);
    b.append(SqlInfo::FlightSqlServerTransaction, 0i32);
    b.append(SqlInfo::FlightSqlServerCancel, false);
    b.build().expect("static SqlInfo is valid")
});

#[tonic::async_trait]
impl FlightSqlService for SiltFlightService {
    type FlightService = SiltFlightService;

    async fn do_handshake(
        &self,
        _request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>, Status> {
        // Authentication is a bearer token checked on every call (see
        // `auth`), so the handshake only has to succeed.
        let response = HandshakeResponse {
            protocol_version: 0,
            payload: Default::default(),
        };
        Ok(Response::new(Box::pin(futures::stream::once(async { Ok(response) }))))
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let types = WireTypes::asked(request.metadata());
        self.statement_info(&query.query, request.get_ref(), types).await
    }

    async fn get_flight_info_prepared_statement(
        &self,
        cmd: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let handle = PreparedHandle::decode_from(&cmd.prepared_statement_handle)?;
        let types = WireTypes::asked(request.metadata());
        self.statement_info(handle.statement(), request.get_ref(), types).await
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        self.info(&schema, query.as_any(), None, request.get_ref())
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        self.info(&schema, query.as_any(), None, request.get_ref())
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        self.info(&schema, query.as_any(), None, request.get_ref())
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        self.info(&schema, query.as_any(), None, request.get_ref())
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder(&XDBC_TYPES).schema();
        self.info(&schema, query.as_any(), None, request.get_ref())
    }

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.info(&PRIMARY_KEYS_SCHEMA, query.as_any(), Some(0), request.get_ref())
    }

    async fn get_flight_info_exported_keys(
        &self,
        query: CommandGetExportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.info(&FOREIGN_KEYS_SCHEMA, query.as_any(), Some(0), request.get_ref())
    }

    async fn get_flight_info_imported_keys(
        &self,
        query: CommandGetImportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.info(&FOREIGN_KEYS_SCHEMA, query.as_any(), Some(0), request.get_ref())
    }

    async fn get_flight_info_cross_reference(
        &self,
        query: CommandGetCrossReference,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.info(&FOREIGN_KEYS_SCHEMA, query.as_any(), Some(0), request.get_ref())
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder(&SQL_INFO).schema();
        self.info(schema.as_ref(), query.as_any(), None, request.get_ref())
    }

    async fn get_flight_info_fallback(
        &self,
        cmd: Command,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let any = cmd.into_any();
        let Some(query) = unpack_query(&any)? else {
            return Err(ProtocolError::UnsupportedCommand { type_url: any.type_url }.into());
        };
        let described = self.runner.describe(&query).await?;
        self.info(&described.schema, any, described.rows, request.get_ref())
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let handle = handle_sql(&ticket.statement_handle)?;
        let delivery = Delivery::of_statement(request.metadata());
        self.deliver(self.runner.run_statement(&handle).await, delivery)
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let handle = PreparedHandle::decode_from(&query.prepared_statement_handle)?;
        let delivery = Delivery::of_statement(request.metadata());
        let sql = handle.statement().to_string();
        self.deliver(self.runner.run(QueryRequest::Sql(sql)).await, delivery)
    }

    async fn do_get_fallback(
        &self,
        _request: Request<Ticket>,
        message: Any,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let since = std::time::Instant::now();
        let Some(query) = unpack_query(&message)? else {
            return Err(ProtocolError::UnsupportedTicket {
                type_url: message.type_url,
            }
            .into());
        };
        let delivery = match &query {
            QueryRequest::Scan(scan) => Delivery::of_scan(scan, since),
            _ => Delivery::default(),
        };
        self.deliver(self.runner.run(query).await, delivery)
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let mut builder = query.into_builder();
        builder.append(CATALOG);
        let schema = builder.schema();
        Ok(Response::new(one_batch(schema, builder.build())))
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let mut builder = query.into_builder();
        builder.append(CATALOG, SCHEMA);
        let schema = builder.schema();
        Ok(Response::new(one_batch(schema, builder.build())))
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let types = WireTypes::asked(request.metadata());
        let mut builder = query.into_builder();
        for (name, entry) in self.engine().catalog() {
            if entry.unavailable.is_some() {
                continue;
            }
            let Some(schema) = self.engine().table_schema(&name).await else {
                continue;
            };
            builder
                .append(CATALOG, SCHEMA, &name, entry.type_name(), &types.schema(&schema))
                .map_err(|source| ProtocolError::ListingTable {
                    name: name.clone(),
                    source,
                })?;
        }
        let schema = builder.schema();
        Ok(Response::new(one_batch(schema, builder.build())))
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let mut builder = query.into_builder();
        for kind in TABLE_TYPES {
            builder.append(kind);
        }
        let schema = builder.schema();
        Ok(Response::new(one_batch(schema, builder.build())))
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let builder = query.into_builder(&XDBC_TYPES);
        let schema = builder.schema();
        Ok(Response::new(one_batch(schema, builder.build())))
    }

    async fn do_get_primary_keys(
        &self,
        _query: CommandGetPrimaryKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        Ok(Response::new(no_keys_answer(&PRIMARY_KEYS_SCHEMA)))
    }

    async fn do_get_exported_keys(
        &self,
        _query: CommandGetExportedKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        Ok(Response::new(no_keys_answer(&FOREIGN_KEYS_SCHEMA)))
    }

    async fn do_get_imported_keys(
        &self,
        _query: CommandGetImportedKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        Ok(Response::new(no_keys_answer(&FOREIGN_KEYS_SCHEMA)))
    }

    async fn do_get_cross_reference(
        &self,
        _query: CommandGetCrossReference,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        Ok(Response::new(no_keys_answer(&FOREIGN_KEYS_SCHEMA)))
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let builder = query.into_builder(&SQL_INFO);
        let schema = builder.schema();
        Ok(Response::new(one_batch(schema, builder.build())))
    }

    async fn do_put_fallback(
        &self,
        _request: Request<PeekableFlightDataStream>,
        message: Any,
    ) -> Result<Response<<Self as FlightService>::DoPutStream>, Status> {
        Err(ProtocolError::ReadOnly {
            type_url: message.type_url,
        }
        .into())
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let handle = PreparedHandle::decode_from(&query.prepared_statement_handle)?;
        let values = bound_values(request.into_inner()).await?;
        let bound = handle.with_values(&values)?;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(bound.to_bytes()),
        })
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let types = WireTypes::asked(request.metadata());
        let described = self.runner.describe(&QueryRequest::Sql(query.query.clone())).await?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: PreparedHandle::new(query.query).to_bytes(),
            dataset_schema: schema_ipc(&types.schema(&described.schema))?,
            parameter_schema: schema_ipc(&types.schema(&described.parameters))?,
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        _query: ActionClosePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        // Prepared statements are stateless (the handle carries the SQL).
        Ok(())
    }

    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        let action = request.into_inner();
        if action.r#type == ACTION_STATS {
            let body = self
                .engine()
                .off_worker(|e| crate::stats::stats_json(e).to_string())
                .await
                .map_err(ProtocolError::Stats)?;
            let result = arrow_flight::Result { body: body.into() };
            return Ok(Response::new(Box::pin(futures::stream::once(async { Ok(result) }))));
        }
        if action.r#type == silt_proto::ACTION_FLEET {
            let body = crate::fleet_view::fleet_json(self.engine()).await.to_string();
            let result = arrow_flight::Result { body: body.into() };
            return Ok(Response::new(Box::pin(futures::stream::once(async { Ok(result) }))));
        }
        if action.r#type == ACTION_PRELOAD {
            let request: crate::preload::PreloadRequest =
                serde_json::from_slice(&action.body).map_err(ProtocolError::MalformedPreload)?;
            let (tx, rx) = tokio::sync::mpsc::channel(16);
            let task = tokio::spawn(crate::preload::run(self.engine().clone(), request, tx));
            let to_result = |p: &crate::preload::PreloadProgress| arrow_flight::Result {
                body: serde_json::to_vec(p).unwrap_or_default().into(),
            };
            let progress = tokio_stream::wrappers::ReceiverStream::new(rx).map(move |p| Ok(to_result(&p)));
            let last = futures::stream::once(async move {
                match task.await {
                    Ok(Ok(report)) => Ok(to_result(&report)),
                    Ok(Err(e)) => Err(e.to_status()),
                    Err(e) => Err(ProtocolError::Preload(e).into()),
                }
            });
            return Ok(Response::new(Box::pin(progress.chain(last))));
        }
        Err(ProtocolError::UnknownAction { action: action.r#type }.into())
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

/// `schema` as the Arrow IPC message a prepared statement's result carries.
fn schema_ipc(schema: &Schema) -> Result<bytes::Bytes, Status> {
    let message: IpcMessage = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
        .try_into()
        .map_err(ProtocolError::EncodingSchema)?;
    Ok(message.0)
}

/// The answer of a key call: Silt's tables have no keys.
fn no_keys_answer(schema: &SchemaRef) -> DoGetStream {
    one_batch(schema.clone(), Ok(no_keys(schema)))
}

fn handle_sql(handle: &[u8]) -> Result<String, Status> {
    String::from_utf8(handle.to_vec()).map_err(|_| ProtocolError::HandleNotUtf8.into())
}

/// Silt's own ticket or command (a `LookupRequest`, a `RangesRequest` or a
/// `ScanRequest`),
/// decoded; `None` for any other message.
fn unpack_query(any: &Any) -> Result<Option<QueryRequest>, Status> {
    let lookup = any.unpack::<LookupRequest>().map_err(ProtocolError::MalformedLookup)?;
    if let Some(request) = lookup {
        return Ok(Some(QueryRequest::Lookup(LookupQuery::from_request(&request)?)));
    }
    let ranges = any.unpack::<RangesRequest>().map_err(ProtocolError::MalformedRanges)?;
    if let Some(request) = ranges {
        return Ok(Some(QueryRequest::Ranges(request)));
    }
    let scan = any.unpack::<ScanRequest>().map_err(ProtocolError::MalformedScan)?;
    Ok(scan.map(QueryRequest::Scan))
}
