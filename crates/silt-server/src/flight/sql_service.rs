//! The Flight SQL endpoints of [`SiltFlightService`]: metadata (catalogs,
//! schemas, tables, SQL info), statements, prepared statements, Silt's own
//! tickets (scans, lookups) and actions (stats, preload). Queries themselves
//! run through the parent module.

use super::*;
use crate::query::Request as QueryRequest;

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
        self.statement_info(&query.query, request.get_ref()).await
    }

    async fn get_flight_info_prepared_statement(
        &self,
        cmd: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let sql = handle_sql(&cmd.prepared_statement_handle)?;
        self.statement_info(&sql, request.get_ref()).await
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
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let handle = handle_sql(&ticket.statement_handle)?;
        self.respond(self.runner.run_statement(&handle).await)
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let sql = handle_sql(&query.prepared_statement_handle)?;
        self.respond(self.runner.run(QueryRequest::Sql(sql)).await)
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
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let mut builder = query.into_builder();
        for (name, entry) in self.engine().catalog() {
            if entry.unavailable.is_some() {
                continue;
            }
            let Some(schema) = self.engine().table_schema(&name).await else {
                continue;
            };
            builder
                .append(CATALOG, SCHEMA, &name, entry.type_name(), &schema)
                .map_err(|source| ProtocolError::ListingTable {
                    name: name.clone(),
                    source,
                })?;
        }
        let schema = builder.schema();
        Ok(Response::new(one_batch(schema, builder.build())))
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

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let schema = self
            .runner
            .describe(&QueryRequest::Sql(query.query.clone()))
            .await?
            .schema;
        let message: IpcMessage = SchemaAsIpc::new(&schema, &IpcWriteOptions::default())
            .try_into()
            .map_err(ProtocolError::EncodingSchema)?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: query.query.into_bytes().into(),
            dataset_schema: message.0,
            parameter_schema: Default::default(),
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        _query: ActionClosePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        // Prepared statements are stateless (the handle is the SQL).
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
