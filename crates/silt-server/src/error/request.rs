//! What is wrong with a client's request, and why the SQL guard refuses a
//! statement: typed, so the Flight status and the S3 error are chosen by
//! kind and a test or a caller can match on the case, while the text stays
//! what a client reads after `invalid request: ` or `refused: `.

use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::error::ArrowError;
use datafusion::error::DataFusionError;

/// A request the server cannot serve as asked (the client's fault:
/// `INVALID_ARGUMENT`).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("SQL parse error: {0}")]
    SqlParse(#[source] DataFusionError),
    #[error("empty SQL")]
    EmptySql,
    /// A scan's SQL-text filter does not parse or plan over the table.
    #[error("the SQL filter {sql:?} of scan on '{table}': {reason}")]
    ScanFilterSql {
        table: String,
        sql: String,
        reason: SqlFilterError,
    },
    /// A scan's serialized filter expression does not decode.
    #[error("filter #{index} of scan on '{table}': {source}")]
    ScanFilter {
        table: String,
        index: usize,
        #[source]
        source: DataFusionError,
    },
    #[error("limit {limit} is too large")]
    LimitTooLarge { limit: u64 },
    /// A scan scope whose row selections do not match its row groups.
    #[error("scope of '{path}' has {row_groups} row groups but {selections} row selections")]
    ScopeSelections {
        path: String,
        row_groups: usize,
        selections: usize,
    },
    /// A pushed-down fragment that is not a partial aggregate over the scan.
    #[error("partial aggregate on '{table}': {reason}")]
    PartialAggregate { table: String, reason: FragmentError },
    /// A lookup whose keys are not one Arrow column.
    #[error("lookup on '{table}': {reason}")]
    LookupKeys { table: String, reason: KeysError },
    #[error("table '{table}' has no column '{column}'")]
    NoColumn { table: String, column: String },
    /// Lookups read only tables whose columns the cache holds.
    #[error("table '{table}' has nested columns; query it with SQL instead")]
    NestedColumns { table: String },
    #[error("lookups need an integer, string or date key column; '{column}' is {data_type}")]
    LookupKeyType { column: String, data_type: DataType },
    #[error("a lookup returns at least one column")]
    EmptyProjection,
    #[error("table '{table}' is not a cached Parquet table")]
    NotCachedParquet { table: String },
    /// A surface that reads tables (`uses`, e.g. "lookups read") was given a view.
    #[error("{uses} tables; '{name}' is a view")]
    IsAView { uses: String, name: String },
    /// A byte-ranges request the server will not answer
    /// (`silt_proto::RangesRequest`).
    #[error("byte ranges of '{path}' of table '{table}': {reason}")]
    Ranges {
        table: String,
        path: String,
        reason: RangesError,
    },
    /// Parameters bound to a prepared statement that it cannot take.
    #[error("prepared statement parameters: {0}")]
    Parameters(#[from] ParameterError),
}

/// Why parameters cannot be bound to a prepared statement.
#[derive(Debug, thiserror::Error)]
pub enum ParameterError {
    /// The bound values are not an Arrow IPC stream.
    #[error("the values are not Arrow record batches: {0}")]
    NotArrow(#[source] arrow_flight::error::FlightError),
    /// A query binds one row of values (several rows would be several queries).
    #[error("a query binds one row of values, got {rows}")]
    Rows { rows: usize },
    /// The statement has a placeholder no value was bound to.
    #[error("no value bound to placeholder {placeholder} ({bound} values bound)")]
    Missing { placeholder: String, bound: usize },
    /// A placeholder that is neither `?` nor `$<n>` (n from 1).
    #[error("placeholder {placeholder} is neither ? nor $1, $2, ...")]
    Name { placeholder: String },
    /// A bound value that cannot be written as a SQL literal.
    #[error("value #{index}: {source}")]
    Value {
        index: usize,
        #[source]
        source: DataFusionError,
    },
}

/// Why a byte-ranges request is refused.
#[derive(Debug, thiserror::Error)]
pub enum RangesError {
    #[error("not an object of the table")]
    NotInTable,
    #[error("{ranges} ranges; at most {max} per request", max = silt_proto::MAX_RANGES)]
    TooManyRanges { ranges: usize },
    #[error("{bytes} bytes asked for; at most {max} per request", max = silt_proto::MAX_RANGES_BYTES)]
    TooManyBytes { bytes: u128 },
    #[error("a tail of {tail} bytes; at most {max}", max = silt_proto::MAX_TAIL_BYTES)]
    TailTooLarge { tail: u64 },
    #[error("range {offset}+{length} ends past the object's {size} bytes")]
    PastEnd { offset: u64, length: u64, size: u64 },
}

/// Why a scan's SQL-text filter is refused.
#[derive(Debug, thiserror::Error)]
pub enum SqlFilterError {
    /// It does not parse or plan over the table's columns.
    #[error("{0}")]
    Plan(#[source] DataFusionError),
    /// A filter reads one row of the table.
    #[error("only a row-level expression is allowed (no subquery, aggregate or window)")]
    NotRowLevel,
}

/// Why a pushed-down plan fragment is refused.
#[derive(Debug, thiserror::Error)]
pub enum FragmentError {
    #[error("not a physical plan: {0}")]
    NotAPlan(#[source] prost::DecodeError),
    #[error("the root must be an aggregate")]
    RootNotAggregate,
    #[error("only a partial aggregate may be pushed")]
    NotPartial,
    #[error("an operator has no input")]
    NoInput,
    #[error("an operator is empty")]
    EmptyOperator,
    /// An operator other than a projection or a filter above the leaf.
    #[error("operator {operator} is not allowed in a pushed fragment")]
    Operator { operator: String },
    /// The fragment passed the shape check but does not decode into a plan.
    #[error("{0}")]
    Decode(#[source] DataFusionError),
    #[error("the root is {root}, not a partial aggregate")]
    RootIs { root: String },
}

/// Why a lookup's keys are refused.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    #[error("keys are not an Arrow IPC stream: {0}")]
    NotIpc(#[source] IpcError),
    #[error("keys must be one column, got {columns}")]
    Columns { columns: usize },
    #[error("no keys")]
    NoKeys,
    /// The key batches do not concatenate (differing types).
    #[error("{0}")]
    Concat(#[source] ArrowError),
}

/// Why bytes a client sent are not an Arrow IPC stream.
#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    #[error("{0}")]
    Decode(#[from] ArrowError),
    /// The decoder panicked on the buffers (caught, never a dead connection).
    #[error("malformed Arrow IPC buffers")]
    Malformed,
}

/// Why the SQL guard refuses a statement (`PERMISSION_DENIED`): the SQL is
/// well-formed but not allowed on this server.
#[derive(Debug, thiserror::Error)]
pub enum GuardRefusal {
    #[error("exactly one SQL statement per request is allowed, got {count}")]
    StatementCount { count: usize },
    /// A statement that is not a query; `kind` is its first two words.
    #[error("only read-only queries (SELECT, EXPLAIN SELECT) are allowed; '{kind} ...' is not")]
    NotReadOnly { kind: String },
    /// DataFusion's `SQLOptions` found DDL, DML or a statement in the plan.
    #[error("{0}")]
    Plan(#[source] DataFusionError),
    /// The plan scans a table that is not registered.
    #[error("'{table}' is not a registered table")]
    Unregistered { table: String },
}
