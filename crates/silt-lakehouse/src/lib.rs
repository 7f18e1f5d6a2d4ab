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
//!   `apache-avro`. Written and checked against pyiceberg
//!   (`tests/iceberg.rs`, `scripts/iceberg_fixture.py`).
//!
//! Not yet: Delta Lake (`delta_kernel` with its `arrow-59` feature and
//! `delta_kernel_default_engine` are the plan), applying delete files and
//! schema evolution by field id, which the scans will do with what this
//! crate returns ([`iceberg::ContentFile`] carries each file's kind and
//! sequence number for that).

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
}

pub type Result<T, E = LakehouseError> = std::result::Result<T, E>;
