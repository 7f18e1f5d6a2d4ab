//! The one place a failure becomes an S3 error, as [`ServerError::to_status`]
//! is for Flight: what a failed table resolution ([`ServerError`]) or a
//! failed read through the table's cached store (an `object_store` error,
//! carrying the cache's [`CacheError`] when the cache failed) tells an S3
//! client. A client's retry logic keys on the code, so the code says whose
//! fault it is and whether a retry may help: a missing bucket or key is
//! `NoSuchBucket` / `NoSuchKey`; a table not registered yet, an object that
//! changed mid-read and a store timeout are `ServiceUnavailable`; anything
//! else is an `InternalError` that names the table or object.
//!
//! Requests malformed before any table is touched (a bad path, key or
//! range) are refused where they are parsed.

use s3s::{S3Error, s3_error};
use silt_cache::CacheError;

use crate::error::ServerError;

/// What failed in an S3 operation, with what its message names.
pub(super) enum S3Failure<'a> {
    /// Resolving table `table` as a bucket.
    Bucket { table: &'a str, error: ServerError },
    /// The table's URL no longer parses (it did when it registered).
    TableUrl {
        table: &'a str,
        url: &'a str,
        error: silt_store::StoreError,
    },
    /// Reading `key` of bucket `table` through the cached store; `object`
    /// names it for the message (key, table and URL).
    Object {
        table: &'a str,
        key: &'a str,
        object: String,
        error: object_store::Error,
    },
}

/// The S3 error a client gets for `failure`.
pub(super) fn s3_error(failure: S3Failure<'_>) -> S3Error {
    match failure {
        S3Failure::Bucket { table, error } => match error {
            // A view is no bucket either.
            ServerError::UnknownTable { .. } | ServerError::InvalidRequest(_) => {
                s3_error!(NoSuchBucket, "no table {table:?}")
            }
            ServerError::Unavailable { cause, .. } => {
                s3_error!(ServiceUnavailable, "table {table:?} is unavailable: {cause}")
            }
            other => s3_error!(InternalError, "table {table:?}: {other}"),
        },
        S3Failure::TableUrl { table, url, error } => {
            s3_error!(InternalError, "table {table:?} has an invalid URL {url:?}: {error}")
        }
        S3Failure::Object {
            table,
            key,
            object,
            error,
        } => match error {
            object_store::Error::NotFound { .. } => no_such_key(table, key),
            // Readers retry once after revalidating before they get here.
            e @ object_store::Error::Precondition { .. } => {
                s3_error!(e, ServiceUnavailable, "{object} changed while it was read: {e}")
            }
            other if matches!(CacheError::find(&other), Some(CacheError::Timeout { .. })) => {
                s3_error!(ServiceUnavailable, "reading {object} timed out: {other}")
            }
            other => {
                tracing::warn!(error = %other, "S3 API: reading {object} failed");
                s3_error!(InternalError, "reading {object}: {other}")
            }
        },
    }
}

/// `NoSuchKey` for `key` of bucket `table`: a missing object, or a key that
/// is not one of the table's objects.
pub(super) fn no_such_key(table: &str, key: &str) -> S3Error {
    s3_error!(NoSuchKey, "no object {key:?} in table {table:?}")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use s3s::S3ErrorCode;

    use super::*;
    use crate::error::{RequestError, UnavailableCause};

    #[test]
    fn a_table_failure_is_chosen_by_kind() {
        let bucket = |error| s3_error(S3Failure::Bucket { table: "t", error });
        let unknown = bucket(ServerError::UnknownTable {
            name: "t".into(),
            registered: String::new(),
        });
        assert_eq!(unknown.code(), &S3ErrorCode::NoSuchBucket);
        let view = bucket(
            RequestError::IsAView {
                uses: "the S3 API serves".into(),
                name: "t".into(),
            }
            .into(),
        );
        assert_eq!(view.code(), &S3ErrorCode::NoSuchBucket);
        let timeout = ServerError::StoreTimeout {
            url: "s3://b/t/".into(),
            after: Duration::from_secs(60),
        };
        let unavailable = bucket(ServerError::Unavailable {
            name: "t".into(),
            cause: UnavailableCause::Failed(Arc::new(timeout)),
        });
        assert_eq!(unavailable.code(), &S3ErrorCode::ServiceUnavailable);
        assert_eq!(
            unavailable.message(),
            Some("table \"t\" is unavailable: timed out after 60s reading s3://b/t/")
        );
    }
}
