//! Errors of the cache server and how they reach clients.
//!
//! Every failure is a typed [`ServerError`] until it leaves the server: the
//! variants (and the sub-enums they wrap: [`ConfigError`], [`RequestError`],
//! [`GuardRefusal`]) keep the table, column, path or limit they are about, so
//! the edge chooses its answer by kind, in one place per edge — the Flight
//! status in [`ServerError::to_status`], the S3 error in
//! `crate::s3_api::errors`. The text of each is the message clients read.
//!
//! A leaf of the crate: it imports no other module of it, so any module can
//! name its errors without a circle.

mod config;
mod protocol;
mod request;
mod transport;

use std::sync::Arc;

use datafusion::error::DataFusionError;
use silt_cache::CacheError;
use tonic::Status;

pub use config::{ConfigError, SizeError, TlsError};
pub use protocol::ProtocolError;
pub use request::{
    FragmentError, GuardRefusal, IpcError, KeysError, ParameterError, RangesError, RequestError, SqlFilterError,
};
pub use transport::TransportError;

/// Everything that can fail inside the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("refused: {0}")]
    Refused(#[from] GuardRefusal),
    #[error("unknown table '{name}' (registered: {registered})")]
    UnknownTable { name: String, registered: String },
    #[error("table '{name}' is unavailable: {cause}")]
    Unavailable { name: String, cause: UnavailableCause },
    #[error("invalid request: {0}")]
    InvalidRequest(#[from] RequestError),
    #[error("query exceeded its time limit of {0:?} and was cancelled")]
    Timeout(std::time::Duration),
    #[error("{0}")]
    DataFusion(#[from] DataFusionError),
    /// A failure while reading data, with the objects the query reads.
    #[error("reading {sources}: {source}")]
    Read {
        sources: String,
        #[source]
        source: DataFusionError,
    },
    /// A REST catalog that did not answer, or answered that a table is
    /// not there.
    #[error("catalog '{catalog}': {reason}")]
    Catalog { catalog: String, reason: String },
    #[error("object {url} (table '{table}') does not exist")]
    ObjectNotFound { table: String, url: String },
    #[error("{0}")]
    Store(#[from] silt_store::StoreError),
    /// The object store did not answer within a server-side deadline.
    #[error("timed out after {after:?} reading {url}")]
    StoreTimeout { url: String, after: std::time::Duration },
    #[error("I/O on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A listener that could not start or stopped with an error.
    #[error("{0}")]
    Transport(#[from] TransportError),
    /// A Flight request refused or failed outside the query engine; its
    /// text carries no prefix (clients have always read it bare).
    #[error("{0}")]
    Protocol(#[from] ProtocolError),
    /// The server is stopping ([`crate::drain`]): new queries are refused.
    #[error(
        "the server is draining (stopping): it takes no new queries; use another server or retry after its restart"
    )]
    Draining,
}

/// Why a table or view cannot be used now, kept as the error its
/// registration failed with (not its text), so what answers a query naming
/// the table can still tell a timeout from a missing object or a bad view.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UnavailableCause {
    /// Registration has not run yet (the server is starting).
    #[error("not registered yet")]
    NotRegisteredYet,
    /// The catalog lists the table but its store is gone (a failed retry).
    #[error("not registered")]
    NotRegistered,
    /// The last registration attempt failed with this error.
    #[error(transparent)]
    Failed(Arc<ServerError>),
}

impl From<ServerError> for UnavailableCause {
    fn from(e: ServerError) -> Self {
        UnavailableCause::Failed(Arc::new(e))
    }
}

impl ServerError {
    /// Wrap a DataFusion error with the objects being read, unless it is a
    /// planning error (those already say what is wrong with the query).
    pub fn reading(sources: &str, e: DataFusionError) -> ServerError {
        match e.find_root() {
            DataFusionError::Plan(_)
            | DataFusionError::SQL(..)
            | DataFusionError::SchemaError(..)
            | DataFusionError::NotImplemented(_)
            | DataFusionError::ResourcesExhausted(_) => ServerError::DataFusion(e),
            _ if sources.is_empty() => ServerError::DataFusion(e),
            _ => ServerError::Read {
                sources: sources.to_string(),
                source: e,
            },
        }
    }

    /// Whether this failure is an object changing under the query (a read
    /// found another version than the one its listing validated): the query
    /// runner restarts a query once on it, before anything was sent.
    pub fn is_version_changed(&self) -> bool {
        match self {
            ServerError::DataFusion(e) | ServerError::Read { source: e, .. } => {
                CacheError::find(e).is_some_and(CacheError::is_changed)
            }
            _ => false,
        }
    }

    /// The gRPC status a client sees: the code says whose fault it is, the
    /// message says what failed and where.
    pub fn to_status(&self) -> Status {
        let msg = self.to_string();
        match self {
            ServerError::Refused(_) => Status::permission_denied(msg),
            ServerError::UnknownTable { .. } => Status::not_found(msg),
            ServerError::InvalidRequest(_) | ServerError::Config(_) => Status::invalid_argument(msg),
            ServerError::Unavailable { .. } => Status::unavailable(msg),
            ServerError::Timeout(_) => Status::deadline_exceeded(msg),
            ServerError::StoreTimeout { .. } | ServerError::Catalog { .. } => Status::unavailable(msg),
            ServerError::DataFusion(e) | ServerError::Read { source: e, .. } => datafusion_status(e, msg),
            ServerError::ObjectNotFound { .. } => Status::not_found(msg),
            ServerError::Store(_) | ServerError::Io { .. } | ServerError::Transport(_) => Status::internal(msg),
            ServerError::Protocol(e) => protocol_status(e, msg),
            ServerError::Draining => Status::unavailable(msg),
        }
    }
}

fn datafusion_status(e: &DataFusionError, msg: String) -> Status {
    if let Some(cache) = CacheError::find(e) {
        return cache_status(cache, msg);
    }
    match e.find_root() {
        DataFusionError::Plan(_)
        | DataFusionError::SQL(..)
        | DataFusionError::SchemaError(..)
        | DataFusionError::NotImplemented(_) => Status::invalid_argument(msg),
        DataFusionError::ResourcesExhausted(_) => Status::resource_exhausted(msg),
        DataFusionError::ObjectStore(os) if matches!(**os, object_store::Error::NotFound { .. }) => {
            Status::not_found(msg)
        }
        _ => Status::internal(msg),
    }
}

/// The status of a request the Flight service refused or failed itself.
fn protocol_status(e: &ProtocolError, msg: String) -> Status {
    match e {
        ProtocolError::UnsupportedCommand { .. } | ProtocolError::UnsupportedTicket { .. } => {
            Status::unimplemented(msg)
        }
        ProtocolError::ReadOnly { .. } => Status::permission_denied(msg),
        ProtocolError::UnknownAction { .. }
        | ProtocolError::MalformedScan(_)
        | ProtocolError::MalformedLookup(_)
        | ProtocolError::MalformedRanges(_)
        | ProtocolError::MalformedPreload(_)
        | ProtocolError::HandleNotUtf8
        | ProtocolError::MalformedPreparedHandle(_) => Status::invalid_argument(msg),
        ProtocolError::ListingTable { .. }
        | ProtocolError::EncodingSchema(_)
        | ProtocolError::PlainTypes(_)
        | ProtocolError::Stats(_)
        | ProtocolError::Preload(_) => Status::internal(msg),
    }
}

/// The status of a read that failed in the cache, by the kind it kept.
fn cache_status(e: &CacheError, msg: String) -> Status {
    match e {
        CacheError::NotFound { .. } => Status::not_found(msg),
        // The client may retry: the object changed under the query after it
        // had started answering (before that, the server restarts it itself).
        CacheError::Changed { .. } => Status::aborted(msg),
        CacheError::Timeout { .. } => Status::unavailable(msg),
        CacheError::Corrupt { .. } => Status::data_loss(msg),
        CacheError::InvalidRange { .. } | CacheError::Store { .. } => Status::internal(msg),
    }
}

impl From<ServerError> for Status {
    fn from(e: ServerError) -> Status {
        e.to_status()
    }
}

/// So the Flight service can answer `Err(ProtocolError::...)?` directly,
/// through the one mapping.
impl From<ProtocolError> for Status {
    fn from(e: ProtocolError) -> Status {
        ServerError::from(e).to_status()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tonic::Code;

    use super::*;

    #[test]
    fn an_unavailable_table_keeps_the_error_it_failed_with() {
        let timeout = ServerError::StoreTimeout {
            url: "s3://b/t/".into(),
            after: Duration::from_secs(60),
        };
        let e = ServerError::Unavailable {
            name: "t".into(),
            cause: timeout.into(),
        };
        let status = e.to_status();
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(
            status.message(),
            "table 't' is unavailable: timed out after 60s reading s3://b/t/"
        );
        let ServerError::Unavailable {
            cause: UnavailableCause::Failed(cause),
            ..
        } = &e
        else {
            panic!("{e}")
        };
        assert!(matches!(cause.as_ref(), ServerError::StoreTimeout { .. }));
        let starting = ServerError::Unavailable {
            name: "t".into(),
            cause: UnavailableCause::NotRegisteredYet,
        };
        assert_eq!(starting.to_string(), "table 't' is unavailable: not registered yet");
        let _shared: UnavailableCause = UnavailableCause::Failed(Arc::new(starting));
    }

    #[test]
    fn flight_service_refusals_keep_their_bare_text_and_code() {
        let cases: [(ProtocolError, Code, &str); 4] = [
            (
                ProtocolError::UnsupportedCommand { type_url: "x.Y".into() },
                Code::Unimplemented,
                "unsupported command x.Y",
            ),
            (
                ProtocolError::ReadOnly {
                    type_url: "x.Put".into(),
                },
                Code::PermissionDenied,
                "refused: Silt is read-only (x.Put is not supported)",
            ),
            (
                ProtocolError::UnknownAction { action: "drop".into() },
                Code::InvalidArgument,
                "unknown action 'drop'",
            ),
            (
                ProtocolError::HandleNotUtf8,
                Code::InvalidArgument,
                "statement handle is not UTF-8 SQL",
            ),
        ];
        for (e, code, text) in cases {
            let status = ServerError::from(e).to_status();
            assert_eq!((status.code(), status.message()), (code, text));
        }
    }

    #[test]
    fn typed_refusals_read_as_the_strings_they_replaced() {
        let e: ServerError = ConfigError::Rate {
            setting: "store.fail_rate",
            rate: 1.5,
        }
        .into();
        assert_eq!(
            e.to_string(),
            "configuration: store.fail_rate must be between 0 and 1, got 1.5"
        );
        assert_eq!(e.to_status().code(), Code::InvalidArgument);
        let e: ServerError = GuardRefusal::NotReadOnly {
            kind: "DROP TABLE".into(),
        }
        .into();
        assert_eq!(
            e.to_string(),
            "refused: only read-only queries (SELECT, EXPLAIN SELECT) are allowed; 'DROP TABLE ...' is not"
        );
        assert_eq!(e.to_status().code(), Code::PermissionDenied);
        let e: ServerError = RequestError::LimitTooLarge { limit: u64::MAX }.into();
        assert_eq!(
            e.to_string(),
            format!("invalid request: limit {} is too large", u64::MAX)
        );
    }
}
