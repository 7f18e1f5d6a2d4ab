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

pub mod membership;
pub mod placement;

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
    /// Scan only these row groups of these object versions (a client that
    /// holds the others in its own cache). An object that is no longer at
    /// the named version fails the scan with `ABORTED`, so a client never
    /// merges rows of two versions: it asks for the layout again.
    #[prost(message, optional, tag = "6")]
    pub scope: Option<SegmentScope>,
    /// Return the table's layout instead of rows: one row per (object, row
    /// group, projected column) with the object's validated version, in the
    /// schema of [`layout_schema`]. Filters only leave out the row groups
    /// whose statistics rule them out (no rows are read).
    #[prost(bool, tag = "7")]
    pub layout_only: bool,
    /// The client query this scan is part of. Under `validation = "always"`
    /// a query must see versions validated after it started: the server
    /// takes the instant it first saw `query.id` as the start of every scan
    /// of it, and at that instant validates all of `query.tables`, so the
    /// query's later scans find their validations done instead of each
    /// waiting for its own LIST.
    #[prost(message, optional, tag = "8")]
    pub query: Option<QueryContext>,
    /// A filter as SQL text (a boolean expression over the table's
    /// columns), ANDed with `filters`: for clients without DataFusion (the
    /// Python package's fleet placement). Parsed on the server against the
    /// table's schema; only an expression, never a statement.
    #[prost(string, optional, tag = "9")]
    pub filter_sql: Option<String>,
    /// Ask for a [`ScanReport`] after the last batch: one more `FlightData`
    /// message without Arrow data (an IPC message of header type `NONE`)
    /// whose `app_metadata` is `Any{silt.ScanReport}`. Off by default, so
    /// clients that do not ask never see the extra message.
    #[prost(bool, tag = "10")]
    pub report: bool,
    /// Compress the Arrow IPC buffers of the answer (Arrow's own body
    /// compression, which every Arrow Flight decoder undoes): for a link
    /// slower than compressing.
    #[prost(enumeration = "IpcCompression", tag = "11")]
    pub compression: i32,
    /// With `layout_only`: the client honors the layout's
    /// [`layout::SERVER_ONLY`] column (it scans such row groups on the
    /// server, never from its own cache). A lakehouse snapshot that deletes
    /// rows, or keeps partition values outside its files, has a layout only
    /// for such a client; others are refused it (`INVALID_ARGUMENT`) and
    /// push their scans down whole.
    #[prost(bool, tag = "12")]
    pub honors_server_only: bool,
}

/// Arrow IPC buffer compression of a scan's answer ([`ScanRequest::compression`]):
/// the codecs of Arrow's IPC format (`CompressionType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum IpcCompression {
    None = 0,
    Lz4Frame = 1,
    Zstd = 2,
}

impl IpcCompression {
    /// Arrow's codec for it (`None` for no compression). This crate
    /// enables arrow-ipc's `lz4` and `zstd` features, so the server can
    /// encode and the client decode both.
    pub fn arrow(self) -> Option<arrow_ipc::CompressionType> {
        match self {
            IpcCompression::None => None,
            IpcCompression::Lz4Frame => Some(arrow_ipc::CompressionType::LZ4_FRAME),
            IpcCompression::Zstd => Some(arrow_ipc::CompressionType::ZSTD),
        }
    }
}

/// What the server spent on one pushed-down scan, sent after its last batch
/// when the request asked ([`ScanRequest::report`]). Protobuf, so fields
/// may be added: a reader takes what it knows and defaults the rest.
#[derive(Clone, PartialEq, Message)]
pub struct ScanReport {
    /// [`SCAN_REPORT_VERSION`] of the writer.
    #[prost(uint32, tag = "1")]
    pub version: u32,
    /// Wall seconds producing the answer's batches: executing the plan and
    /// polling it (reading tiers and the store, decoding, filtering). Not
    /// planning, not validation, not encoding, not sending.
    #[prost(double, tag = "2")]
    pub scan_seconds: f64,
    /// Wall seconds encoding the batches as Flight data (compression included).
    #[prost(double, tag = "3")]
    pub encode_seconds: f64,
    /// Seconds from the request's arrival to its first message leaving
    /// (planning, validation, the first batch): what a client subtracts
    /// from its time to the first message to get the link's round trip.
    #[prost(double, tag = "4")]
    pub first_message_seconds: f64,
    /// Seconds planning and waiting on validation (not part of `scan_seconds`).
    #[prost(double, tag = "5")]
    pub planning_seconds: f64,
    /// Rows of the row groups the scan read (after pruning).
    #[prost(uint64, tag = "6")]
    pub rows_scanned: u64,
    /// Uncompressed bytes of the needed column chunks of those row groups
    /// (as the layout counts them).
    #[prost(uint64, tag = "7")]
    pub bytes_scanned: u64,
    /// Rows sent.
    #[prost(uint64, tag = "8")]
    pub rows_sent: u64,
    /// Bytes of the Flight data sent before this report (IPC headers and
    /// bodies, compressed when compression was asked).
    #[prost(uint64, tag = "9")]
    pub bytes_sent: u64,
    /// The Arrow buffers of the batches sent, uncompressed: with
    /// `bytes_sent`, the compression ratio achieved.
    #[prost(uint64, tag = "10")]
    pub arrow_bytes_sent: u64,
    /// The compression the answer was encoded with.
    #[prost(enumeration = "IpcCompression", tag = "11")]
    pub compression: i32,
}

/// The [`ScanReport::version`] this crate writes.
pub const SCAN_REPORT_VERSION: u32 = 1;

impl ProstMessageExt for ScanReport {
    fn type_url() -> &'static str {
        "type.googleapis.com/silt.ScanReport"
    }

    fn as_any(&self) -> Any {
        Any {
            type_url: Self::type_url().to_string(),
            value: self.encode_to_vec().into(),
        }
    }
}

impl ScanReport {
    /// The report as the last `FlightData` of a scan's `DoGet` stream: an
    /// Arrow IPC message of header type `NONE` (no schema, no batch: Flight
    /// decoders pass it over) with the report in `app_metadata`.
    pub fn to_flight_data(&self) -> arrow_flight::FlightData {
        use arrow::ipc::{MessageBuilder, MessageHeader, MetadataVersion};
        let mut fbb = flatbuffers::FlatBufferBuilder::new();
        let mut message = MessageBuilder::new(&mut fbb);
        message.add_version(MetadataVersion::V5);
        message.add_header_type(MessageHeader::NONE);
        message.add_bodyLength(0);
        let root = message.finish();
        fbb.finish(root, None);
        arrow_flight::FlightData::new()
            .with_data_header(fbb.finished_data().to_vec())
            .with_app_metadata(self.as_any().encode_to_vec())
    }

    /// The report `app_metadata` carries, if it is one. `None` for empty or
    /// other metadata; an error for a report that does not decode.
    pub fn from_app_metadata(app_metadata: &[u8]) -> Result<Option<ScanReport>, arrow::error::ArrowError> {
        if app_metadata.is_empty() {
            return Ok(None);
        }
        let Ok(any) = Any::decode(app_metadata) else {
            return Ok(None);
        };
        any.unpack::<ScanReport>()
    }
}

/// Which client query a scan belongs to ([`ScanRequest::query`]).
#[derive(Clone, PartialEq, Message)]
pub struct QueryContext {
    /// Unique per execution of a client query (the client's choice).
    #[prost(string, tag = "1")]
    pub id: String,
    /// Every table the query scans on this server.
    #[prost(string, repeated, tag = "2")]
    pub tables: Vec<String>,
}

/// Row groups of object versions a scan is limited to ([`ScanRequest::scope`]).
#[derive(Clone, PartialEq, Message)]
pub struct SegmentScope {
    #[prost(message, repeated, tag = "1")]
    pub objects: Vec<ObjectSegments>,
}

/// Row groups of one object version.
#[derive(Clone, PartialEq, Message)]
pub struct ObjectSegments {
    /// The object as the layout names it.
    #[prost(string, tag = "1")]
    pub path: String,
    /// The version token the layout gave (size, modification time, ETag).
    #[prost(string, tag = "2")]
    pub version: String,
    #[prost(uint32, repeated, tag = "3")]
    pub row_groups: Vec<u32>,
    /// Empty, or one per row group of `row_groups`: the rows of it to
    /// return, as a bitmap (row `i` is bit `i % 8` of byte `i / 8`, as
    /// Arrow packs booleans; `ceil(rows / 8)` bytes). An empty bitmap
    /// returns every row. Rows come back in row-group order, so a client
    /// that filtered some columns itself can line the returned columns up
    /// with its own (the "hybrid" path of `silt-client`).
    #[prost(bytes = "vec", repeated, tag = "4")]
    pub selections: Vec<Vec<u8>>,
}

/// Columns of a layout answer ([`ScanRequest::layout_only`]).
pub mod layout {
    /// The object's path as the server lists it.
    pub const OBJECT: &str = "object";
    /// The version the listing validated (an opaque token).
    pub const VERSION: &str = "version";
    /// Row group index within the object.
    pub const ROW_GROUP: &str = "row_group";
    /// Rows in the row group.
    pub const ROWS: &str = "rows";
    /// A projected column's name.
    pub const COLUMN: &str = "column";
    /// The column chunk's uncompressed size in bytes (what fetching it moves, roughly).
    pub const BYTES: &str = "bytes";
    /// The column chunk's compressed size in bytes, as stored (nullable:
    /// absent from servers before it, null when unknown).
    pub const COMPRESSED_BYTES: &str = "compressed_bytes";
    /// Where the column chunk starts in the object (its dictionary page, or
    /// its first data page), for a [`crate::RangesRequest`] (nullable).
    pub const CHUNK_OFFSET: &str = "chunk_offset";
    /// The column chunk's length in the object from [`CHUNK_OFFSET`]
    /// (nullable).
    pub const CHUNK_LENGTH: &str = "chunk_length";
    /// Whether only the server's scan reads the row group right (nullable,
    /// null as false): the query's lakehouse snapshot deletes rows of it
    /// (by position or by value), which a client decoding it itself would
    /// return. Sent only to a client that asked with
    /// [`crate::ScanRequest::honors_server_only`].
    pub const SERVER_ONLY: &str = "server_only";
}

/// The Arrow schema of a layout answer: `object` and `version` (Utf8),
/// `row_group` (UInt32), `rows` (UInt64), `column` (Utf8), `bytes` (UInt64),
/// then the nullable `compressed_bytes`, `chunk_offset` and `chunk_length`
/// (UInt64) and `server_only` (Boolean). Clients read columns by name, so a client that predates a
/// column ignores it, and a client finding none of the last three (an older
/// server) never fetches column chunks as stored.
pub fn layout_schema() -> arrow::datatypes::SchemaRef {
    use arrow::datatypes::{DataType, Field, Schema};
    std::sync::Arc::new(Schema::new(vec![
        Field::new(layout::OBJECT, DataType::Utf8, false),
        Field::new(layout::VERSION, DataType::Utf8, false),
        Field::new(layout::ROW_GROUP, DataType::UInt32, false),
        Field::new(layout::ROWS, DataType::UInt64, false),
        Field::new(layout::COLUMN, DataType::Utf8, false),
        Field::new(layout::BYTES, DataType::UInt64, false),
        Field::new(layout::COMPRESSED_BYTES, DataType::UInt64, true),
        Field::new(layout::CHUNK_OFFSET, DataType::UInt64, true),
        Field::new(layout::CHUNK_LENGTH, DataType::UInt64, true),
        Field::new(layout::SERVER_ONLY, DataType::Boolean, true),
    ]))
}

/// Bytes of one object of a table exactly as stored, at one version, read
/// through the server's tiers (page buffer, disk tier, then the object
/// store): what a client that decodes Parquet itself fetches when the link
/// is slower than its decoder (`silt-client`'s `scan::bytes`). A `DoGet`
/// ticket (`Any` with type URL [`RangesRequest::type_url`]), answered with
/// batches of [`ranges_schema`]: per requested range in request order, then
/// the tail, its bytes in pieces of at most [`RANGE_PIECE_BYTES`], each
/// piece with its offset in the object.
///
/// Refused: an object the table does not hold (`INVALID_ARGUMENT`); a range
/// past the object's end, more than [`MAX_RANGES`] ranges or more than
/// [`MAX_RANGES_BYTES`] in all (`INVALID_ARGUMENT`); an object no longer at
/// `version`, as the server's validated listing has it (`ABORTED`, as a
/// scoped scan: the client plans again from a new layout).
#[derive(Clone, PartialEq, Message)]
pub struct RangesRequest {
    /// A table (not a view) as registered on the server.
    #[prost(string, tag = "1")]
    pub table: String,
    /// The object as the layout names it.
    #[prost(string, tag = "2")]
    pub path: String,
    /// The version token the layout gave.
    #[prost(string, tag = "3")]
    pub version: String,
    #[prost(message, repeated, tag = "4")]
    pub ranges: Vec<ByteRange>,
    /// Also the object's last `min(tail, size)` bytes (0: none): a Parquet
    /// footer without knowing the object's size. Counted in
    /// [`MAX_RANGES_BYTES`] at most [`MAX_TAIL_BYTES`].
    #[prost(uint64, tag = "5")]
    pub tail: u64,
    /// The client query this read is part of ([`ScanRequest::query`]).
    #[prost(message, optional, tag = "6")]
    pub query: Option<QueryContext>,
}

/// `length` bytes from `offset` ([`RangesRequest::ranges`]).
#[derive(Clone, PartialEq, Message)]
pub struct ByteRange {
    #[prost(uint64, tag = "1")]
    pub offset: u64,
    #[prost(uint64, tag = "2")]
    pub length: u64,
}

/// Ranges one [`RangesRequest`] may name.
pub const MAX_RANGES: usize = 4096;
/// Bytes one [`RangesRequest`] may ask for, its tail included (the
/// server holds them, and their answer, in memory).
pub const MAX_RANGES_BYTES: u64 = 256 << 20;
/// The largest tail a [`RangesRequest`] may ask for.
pub const MAX_TAIL_BYTES: u64 = 64 << 20;
/// The largest piece of a [`RangesRequest`]'s answer (one row).
pub const RANGE_PIECE_BYTES: usize = 1 << 20;

/// Columns of a [`RangesRequest`]'s answer.
pub mod ranges {
    /// Where the piece starts in the object.
    pub const OFFSET: &str = "offset";
    /// The piece's bytes.
    pub const DATA: &str = "data";
}

/// The Arrow schema of a [`RangesRequest`]'s answer: `offset` (UInt64),
/// `data` (Binary), neither null.
pub fn ranges_schema() -> arrow::datatypes::SchemaRef {
    use arrow::datatypes::{DataType, Field, Schema};
    std::sync::Arc::new(Schema::new(vec![
        Field::new(ranges::OFFSET, DataType::UInt64, false),
        Field::new(ranges::DATA, DataType::Binary, false),
    ]))
}

impl ProstMessageExt for RangesRequest {
    fn type_url() -> &'static str {
        "type.googleapis.com/silt.RangesRequest"
    }

    fn as_any(&self) -> Any {
        Any {
            type_url: Self::type_url().to_string(),
            value: self.encode_to_vec().into(),
        }
    }
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

/// The Flight action that returns every fleet member's summary, as the
/// answering member sees it (one JSON result: `{"members": [...]}`).
pub const ACTION_FLEET: &str = "silt.fleet";

/// Flight action that warms the cache tiers with a table's data. Body: JSON
/// `{"table": NAME, "columns": [..] | null, "memory": bool}`; each result is
/// a JSON progress report `{"files_total", "files_done", "bytes_total",
/// "bytes_done", "done"}`, the last one with `"done": true`.
pub const ACTION_PRELOAD: &str = "silt.preload";

/// gRPC header a Flight SQL client sends (value `true`) to receive Arrow's
/// view types (`Utf8View`, `BinaryView`, `ListView`) as the engine makes
/// them. Without it, SQL results and table schemas come in the plain types
/// every Flight SQL client reads (`Utf8`, `Binary`, `List`): JDBC, ODBC and
/// older Arrow libraries refuse the view types. Silt's own clients send it
/// (a view column needs no copy on either side); Silt's scan, lookup and
/// byte-range tickets always answer in the engine's types.
pub const VIEW_TYPES_HEADER: &str = "x-silt-view-types";

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
            honors_server_only: true,
            limit: Some(10),
            partial_aggregate: Some(vec![4, 5]),
            scope: Some(SegmentScope {
                objects: vec![ObjectSegments {
                    path: "t/a.parquet".into(),
                    version: "v1".into(),
                    row_groups: vec![0, 2],
                    selections: vec![vec![0b101], Vec::new()],
                }],
            }),
            layout_only: false,
            query: Some(QueryContext {
                id: "q1".into(),
                tables: vec!["lineitem".into(), "orders".into()],
            }),
            filter_sql: Some("l_quantity < 10".into()),
            report: true,
            compression: IpcCompression::Zstd as i32,
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

    #[test]
    fn ranges_request_round_trips_and_is_not_a_scan() {
        let req = RangesRequest {
            table: "lineitem".into(),
            path: "t/a.parquet".into(),
            version: "v1".into(),
            ranges: vec![
                ByteRange { offset: 4, length: 100 },
                ByteRange { offset: 200, length: 1 },
            ],
            tail: 1 << 16,
            query: Some(QueryContext {
                id: "q1".into(),
                tables: vec!["lineitem".into()],
            }),
        };
        let any = req.as_any();
        assert!(any.is::<RangesRequest>());
        assert!(!any.is::<ScanRequest>() && !any.is::<LookupRequest>());
        let back: RangesRequest = any.unpack().unwrap().unwrap();
        assert_eq!(back, req);
        // The layout's chunk columns are nullable: older servers leave them out.
        let schema = layout_schema();
        for name in [
            layout::COMPRESSED_BYTES,
            layout::CHUNK_OFFSET,
            layout::CHUNK_LENGTH,
            layout::SERVER_ONLY,
        ] {
            assert!(schema.field_with_name(name).unwrap().is_nullable(), "{name}");
        }
    }

    #[test]
    fn a_scan_report_rides_a_flight_data_message_decoders_pass_over() {
        use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
        use arrow_flight::encode::FlightDataEncoderBuilder;
        use futures::{StreamExt, TryStreamExt};
        let report = ScanReport {
            version: SCAN_REPORT_VERSION,
            scan_seconds: 0.25,
            rows_scanned: 8192,
            bytes_scanned: 65536,
            rows_sent: 3,
            bytes_sent: 1000,
            compression: IpcCompression::Lz4Frame as i32,
            ..Default::default()
        };
        let batch = arrow::array::RecordBatch::try_from_iter([(
            "a",
            std::sync::Arc::new(arrow::array::Int32Array::from(vec![1, 2, 3])) as arrow::array::ArrayRef,
        )])
        .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let data = FlightDataEncoderBuilder::new()
                .build(futures::stream::iter([Ok(batch.clone())]))
                .chain(futures::stream::iter([Ok(report.to_flight_data())]));
            // The plain decoder yields the batch and nothing else.
            let plain = arrow_flight::decode::FlightRecordBatchStream::new_from_flight_data(data);
            let batches: Vec<_> = plain.try_collect().await.unwrap();
            assert_eq!(batches, vec![batch.clone()]);
            // The message-level decoder sees the report.
            let data = FlightDataEncoderBuilder::new()
                .build(futures::stream::iter([Ok(batch)]))
                .chain(futures::stream::iter([Ok(report.to_flight_data())]));
            let messages: Vec<_> = FlightDataDecoder::new(data).try_collect().await.unwrap();
            let last = messages.last().unwrap();
            assert!(matches!(last.payload, DecodedPayload::None));
            assert_eq!(
                ScanReport::from_app_metadata(&last.app_metadata()).unwrap(),
                Some(report)
            );
            // Metadata of other kinds is not a report.
            assert_eq!(ScanReport::from_app_metadata(b"").unwrap(), None);
            assert_eq!(ScanReport::from_app_metadata(b"\xffnot protobuf").unwrap(), None);
        });
    }
}
