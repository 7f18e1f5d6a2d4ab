//! Lakehouse table formats: which data files form a table at a snapshot.
//!
//! A folder of Parquet files is a table by listing; an Iceberg or Delta Lake
//! table is not: its metadata names the files of each snapshot, and files a
//! compaction replaced or a delete rewrote stay in the folder until they are
//! expired. Serving every file under the table's prefix gives wrong answers
//! (rows counted twice, deleted rows back). This crate reads the metadata and
//! answers the one question the rest of Silt needs: the files of a snapshot,
//! and which snapshot a query means (the current one, one by id, or the one
//! current at a time: time travel).
//!
//! It reads with any [`object_store::ObjectStore`] (the caller's, with its
//! retries and throttles), and never reads data files: those are Silt's
//! pinned, cached scans' job.
//!
//! - [`iceberg`]: Iceberg tables (format v1 and v2), from a metadata JSON or
//!   a table folder; manifest lists and manifests are Avro, read with
//!   `apache-avro`; or the table's current metadata file as an Iceberg REST
//!   catalog names it ([`iceberg::rest`]). Written and checked against pyiceberg
//!   (`tests/iceberg.rs`, `scripts/iceberg_fixture.py`).
//!
//! - [`delta`]: Delta Lake tables, from their root folder: the log's JSON
//!   commits and Parquet checkpoints replayed into a version's files and
//!   their deletion vectors. Checked against deltalake (delta-rs) and
//!   DuckDB's delta extension (`crates/silt-server/tests/it/delta.rs`).
//!
//! Decision: both formats' metadata is read by this crate rather than by
//! the `iceberg` crate (a second arrow and DataFusion in the build) or
//! `delta_kernel` (its engine API replays the whole log per scan and would
//! be a second, large dependency tree for a few hundred lines of log
//! replay); the scans read data files either way.

pub mod delta;
pub mod iceberg;
mod locate;

pub use locate::ObjectLocator;

/// Why a table's metadata could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LakehouseError {
    #[error("reading {path}: {source}")]
    Store {
        path: String,
        #[source]
        source: object_store::Error,
    },
    #[error("{path}: not a valid {what}: {reason}")]
    Invalid {
        path: String,
        what: &'static str,
        reason: String,
    },
    #[error("{url}: outside the table's store ({root})")]
    Elsewhere { url: String, root: String },
    #[error("{table}: {reason}")]
    NoSuchSnapshot { table: String, reason: String },
    #[error("{table}: {reason}")]
    Unsupported { table: String, reason: String },
    #[error("Iceberg REST catalog {url}: {reason}")]
    Catalog { url: String, reason: String },
}

/// Which snapshot (Iceberg) or version (Delta Lake) a query reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotChoice {
    /// The table's current snapshot.
    Current,
    /// The snapshot with this id (Delta Lake: this version).
    Id(i64),
    /// The snapshot that was current at this time (milliseconds since the
    /// epoch): the last one committed at or before it.
    AsOf(i64),
}

pub type Result<T, E = LakehouseError> = std::result::Result<T, E>;
