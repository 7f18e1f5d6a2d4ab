//! Wire types shared by the Silt cache server and Silt's own clients.
//!
//! Silt speaks standard Arrow Flight SQL to any client. On top of that, Silt's
//! DataFusion client sends *pushdown scans*: a table, the columns it needs,
//! the filters to evaluate on the server, and a row limit. The scan travels as
//! a Flight SQL `Any` command (type URL [`ScanRequest::type_url`]) in the
//! `FlightDescriptor` of `GetFlightInfo` and in the `Ticket` of `DoGet`, so it
//! rides the same gRPC service as SQL. Filters are DataFusion logical
//! expressions serialized structurally with `datafusion-proto`; this crate
//! only carries the bytes so that it does not depend on DataFusion.

use arrow_flight::sql::{Any, ProstMessageExt};
use prost::Message;

/// A scan pushed down to the cache server.
#[derive(Clone, PartialEq, Message)]
pub struct ScanRequest {
    /// Table or view name as registered on the server.
    #[prost(string, tag = "1")]
    pub table: String,
    /// Columns to return, in this order. `None` means all columns; an empty
    /// list means no columns (only row counts are wanted, e.g. `count(*)`).
    #[prost(message, optional, tag = "2")]
    pub projection: Option<Projection>,
    /// Conjunctive filters, each a `datafusion_proto::protobuf::LogicalExprNode`.
    /// The server evaluates all of them exactly.
    #[prost(bytes = "vec", repeated, tag = "3")]
    pub filters: Vec<Vec<u8>>,
    /// Return at most this many rows (after filtering).
    #[prost(uint64, optional, tag = "4")]
    pub limit: Option<u64>,
    /// A partial aggregate to run on the scan's rows before they are sent:
    /// a `datafusion_proto::protobuf::PhysicalPlanNode` whose one leaf is
    /// an extension node standing for this scan (its payload: the Arrow
    /// schema the fragment was planned for). The server returns the
    /// fragment's output (per-group accumulator states) instead of rows.
    /// Only partial aggregates over projections and filters are accepted.
    #[prost(bytes = "vec", optional, tag = "5")]
    pub partial_aggregate: Option<Vec<u8>>,
}

/// An explicit column list (wrapped so that "all columns" and "no columns"
/// are distinguishable on the wire).
#[derive(Clone, PartialEq, Message)]
pub struct Projection {
    #[prost(string, repeated, tag = "1")]
    pub columns: Vec<String>,
}

impl ProstMessageExt for ScanRequest {
    fn type_url() -> &'static str {
        "type.googleapis.com/silt.ScanRequest"
    }

    fn as_any(&self) -> Any {
        Any {
            type_url: Self::type_url().to_string(),
            value: self.encode_to_vec().into(),
        }
    }
}

/// A point lookup, answered in one `DoGet` (no `GetFlightInfo`, nothing
/// planned): the rows of `table` whose `key_column` equals one of `keys`,
/// with the columns of `projection` (all columns when `None`). Semantics are
/// SQL's `WHERE key_column IN (keys)`: each matching row once, null keys
/// match nothing, rows in file order.
#[derive(Clone, PartialEq, Message)]
pub struct LookupRequest {
    #[prost(string, tag = "1")]
    pub table: String,
    #[prost(string, tag = "2")]
    pub key_column: String,
    /// The keys: an Arrow IPC stream holding one batch of one column (any
    /// type castable to the key column's: integers, strings, dates).
    #[prost(bytes = "vec", tag = "3")]
    pub keys: Vec<u8>,
    #[prost(message, optional, tag = "4")]
    pub projection: Option<Projection>,
}

impl LookupRequest {
    /// `keys` in the form [`LookupRequest::keys`] carries: an Arrow IPC
    /// stream of one batch with the one column `key`.
    pub fn encode_keys(keys: arrow::array::ArrayRef) -> Result<Vec<u8>, arrow::error::ArrowError> {
        let batch = arrow::array::RecordBatch::try_from_iter([("key", keys)])?;
        let mut encoded = Vec::new();
        let mut writer = arrow::ipc::writer::StreamWriter::try_new(&mut encoded, &batch.schema())?;
        writer.write(&batch)?;
        writer.finish()?;
        drop(writer);
        Ok(encoded)
    }
}

impl ProstMessageExt for LookupRequest {
    fn type_url() -> &'static str {
        "type.googleapis.com/silt.LookupRequest"
    }

    fn as_any(&self) -> Any {
        Any {
            type_url: Self::type_url().to_string(),
            value: self.encode_to_vec().into(),
        }
    }
}

/// Name of the single column the server returns when a scan asks for no
/// columns: one boolean per matching row, so the client can count rows.
pub const ROW_MARKER_COLUMN: &str = "__silt_row";

/// Name of the Flight action that returns server statistics as JSON.
pub const ACTION_STATS: &str = "silt.stats";

/// Flight action that warms the cache tiers with a table's data. Body: JSON
/// `{"table": NAME, "columns": [..] | null, "memory": bool}`; each result is
/// a JSON progress report `{"files_total", "files_done", "bytes_total",
/// "bytes_done", "done"}`, the last one with `"done": true`.
pub const ACTION_PRELOAD: &str = "silt.preload";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_request_round_trips_through_any() {
        let req = ScanRequest {
            table: "lineitem".into(),
            projection: Some(Projection {
                columns: vec!["l_quantity".into()],
            }),
            filters: vec![vec![1, 2, 3]],
            limit: Some(10),
            partial_aggregate: Some(vec![4, 5]),
        };
        let any = req.as_any();
        assert!(any.is::<ScanRequest>());
        let back: ScanRequest = any.unpack().unwrap().unwrap();
        assert_eq!(back, req);
        let empty = ScanRequest {
            projection: Some(Projection { columns: vec![] }),
            ..Default::default()
        };
        let back: ScanRequest = empty.as_any().unpack().unwrap().unwrap();
        assert_eq!(back.projection, Some(Projection { columns: vec![] }));
    }
}
