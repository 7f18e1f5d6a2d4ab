//! What the Flight SQL service refuses or fails at before a query runs:
//! commands, tickets and actions it does not know or cannot decode, and the
//! few things it encodes itself. Typed so that the Flight status of each is
//! chosen in [`super::ServerError::to_status`] with the others, not where
//! the refusal is written.

use datafusion::arrow::error::ArrowError;

/// A Flight request the service refuses or fails to answer, before or
/// beside the query engine.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// A Flight SQL command that is neither SQL, a scan nor a lookup
    /// (`UNIMPLEMENTED`).
    #[error("unsupported command {type_url}")]
    UnsupportedCommand { type_url: String },
    /// A ticket this server did not issue (`UNIMPLEMENTED`).
    #[error("unsupported ticket {type_url}")]
    UnsupportedTicket { type_url: String },
    /// A write of any kind (`PERMISSION_DENIED`).
    #[error("refused: Silt is read-only ({type_url} is not supported)")]
    ReadOnly { type_url: String },
    /// An action that is not `silt.stats` or `silt.preload` (`INVALID_ARGUMENT`).
    #[error("unknown action '{action}'")]
    UnknownAction { action: String },
    /// A scan request or ticket that does not decode (`INVALID_ARGUMENT`).
    #[error("malformed scan request: {0}")]
    MalformedScan(#[source] ArrowError),
    /// A lookup request or ticket that does not decode (`INVALID_ARGUMENT`).
    #[error("malformed lookup request: {0}")]
    MalformedLookup(#[source] ArrowError),
    /// A byte-ranges ticket that does not decode (`INVALID_ARGUMENT`).
    #[error("malformed byte-ranges request: {0}")]
    MalformedRanges(#[source] ArrowError),
    /// A preload action whose body is not its JSON (`INVALID_ARGUMENT`).
    #[error("malformed preload request: {0}")]
    MalformedPreload(#[source] serde_json::Error),
    /// A statement ticket's handle carries its SQL (`INVALID_ARGUMENT`).
    #[error("statement handle is not UTF-8 SQL")]
    HandleNotUtf8,
    /// A prepared statement's handle that this server did not make
    /// (`INVALID_ARGUMENT`).
    #[error("malformed prepared statement handle: {0}")]
    MalformedPreparedHandle(#[source] prost::DecodeError),
    /// A table's row of `GetTables` could not be built (`INTERNAL`).
    #[error("listing table {name}: {source}")]
    ListingTable {
        name: String,
        #[source]
        source: arrow_flight::error::FlightError,
    },
    /// A result schema could not be encoded as Arrow IPC (`INTERNAL`).
    #[error("encoding schema: {0}")]
    EncodingSchema(#[source] ArrowError),
    /// An answer could not be turned into the plain Arrow types a client
    /// without view types reads (`INTERNAL`).
    #[error(
        "converting the answer to plain Arrow types (send header x-silt-view-types: true to receive view types): {0}"
    )]
    PlainTypes(#[source] ArrowError),
    /// The task computing the stats action's answer failed (`INTERNAL`).
    #[error("computing stats: {0}")]
    Stats(#[source] tokio::task::JoinError),
    /// The preload task failed (`INTERNAL`).
    #[error("preload failed: {0}")]
    Preload(#[source] tokio::task::JoinError),
}
