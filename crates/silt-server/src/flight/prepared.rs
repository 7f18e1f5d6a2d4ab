//! Prepared statements without server state: the handle a client holds
//! carries the statement and, once values are bound, the statement with
//! them (Flight SQL's stateless prepared statements: binding answers a new
//! handle, `DoPutPreparedStatementResult`). Any server of a fleet, or this
//! one after a restart, can run any handle.

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::sql::server::PeekableFlightDataStream;
use datafusion::common::ScalarValue;
use futures::TryStreamExt;
use prost::Message;

use crate::error::{ParameterError, ProtocolError, RequestError, ServerError};
use crate::query::parameters;

/// What a prepared statement's handle holds.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PreparedHandle {
    /// The statement as the client prepared it, placeholders and all.
    #[prost(string, tag = "1")]
    pub sql: String,
    /// The statement with the last values bound to it, when values were.
    #[prost(string, optional, tag = "2")]
    pub bound: Option<String>,
}

impl PreparedHandle {
    /// The handle of `sql`, no values bound.
    pub(crate) fn new(sql: String) -> Self {
        PreparedHandle { sql, bound: None }
    }

    /// The handle a client sent.
    pub(crate) fn decode_from(handle: &[u8]) -> Result<Self, ServerError> {
        PreparedHandle::decode(handle).map_err(|e| ProtocolError::MalformedPreparedHandle(e).into())
    }

    pub(crate) fn to_bytes(&self) -> bytes::Bytes {
        self.encode_to_vec().into()
    }

    /// The statement to run: with its bound values, if any.
    pub(crate) fn statement(&self) -> &str {
        self.bound.as_deref().unwrap_or(&self.sql)
    }

    /// This statement with `values` bound (a row of no values binds none).
    pub(crate) fn with_values(self, values: &[ScalarValue]) -> Result<Self, ServerError> {
        let bound = if values.is_empty() {
            None
        } else {
            Some(parameters::bind(&self.sql, values)?)
        };
        Ok(PreparedHandle { bound, ..self })
    }
}

/// The one row of values a client's `DoPut` binds, one per parameter.
pub(crate) async fn bound_values(stream: PeekableFlightDataStream) -> Result<Vec<ScalarValue>, ServerError> {
    let invalid = |e: FlightError| RequestError::Parameters(ParameterError::NotArrow(e));
    let batches: Vec<_> = FlightRecordBatchStream::new_from_flight_data(stream.map_err(FlightError::from))
        .try_collect()
        .await
        .map_err(invalid)?;
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let Some(batch) = batches.iter().find(|b| b.num_rows() > 0) else {
        return Ok(Vec::new());
    };
    if rows > 1 {
        return Err(RequestError::Parameters(ParameterError::Rows { rows }).into());
    }
    batch
        .columns()
        .iter()
        .enumerate()
        .map(|(i, column)| {
            ScalarValue::try_from_array(column, 0)
                .map_err(|source| RequestError::Parameters(ParameterError::Value { index: i + 1, source }).into())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_binds_again_from_its_statement() {
        let handle = PreparedHandle::new("SELECT a FROM t WHERE b = ?".into());
        assert_eq!(handle.statement(), "SELECT a FROM t WHERE b = ?");
        let once = handle.with_values(&[ScalarValue::Int64(Some(1))]).unwrap();
        let again = PreparedHandle::decode_from(&once.to_bytes())
            .unwrap()
            .with_values(&[ScalarValue::Int64(Some(2))])
            .unwrap();
        assert_eq!(again.statement(), "SELECT a FROM t WHERE b = 2");
        assert!(PreparedHandle::decode_from(b"\xff\xff").is_err());
    }
}
