//! `CacheError`: what can go wrong reading through the cache, with its kind
//! kept from the object store to the client.
//!
//! The kind matters to whoever handles the error: a missing object is a
//! not-found for the client, a version gone from the store means "revalidate
//! and read again", a timeout may be retried, corrupt bytes must never be
//! cached. Errors are `Clone` (sources are shared as `Arc`) so that every
//! request waiting on one fetch gets the same typed error as the fetcher.
//!
//! Boundaries: inside `ObjectStore` methods a `CacheError` travels as the
//! source of the matching `object_store::Error` variant (NotFound,
//! Precondition, else Generic), so DataFusion carries it unchanged;
//! [`CacheError::find`] digs it out again at the server's edge (Flight
//! status, S3 status).

use std::error::Error as StdError;
use std::sync::Arc;

/// A failed read through the cache. Every message names the object.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CacheError {
    /// The object does not exist (deleted upstream, or never did).
    #[error("object {path} does not exist")]
    NotFound {
        path: String,
        #[source]
        source: Option<Arc<object_store::Error>>,
    },
    /// The version being read is gone: the object was overwritten or
    /// deleted since it was validated. Retrying at the same version cannot
    /// succeed; revalidate and read the new version.
    #[error("object {path} changed while it was read (version {version} is gone from the store)")]
    Changed {
        path: String,
        version: String,
        #[source]
        source: Option<Arc<object_store::Error>>,
    },
    /// The store did not answer in time.
    #[error("timed out reading {path}: {source}")]
    Timeout {
        path: String,
        #[source]
        source: Arc<object_store::Error>,
    },
    /// The store (or a cached copy) returned bytes that cannot be right: a
    /// body of the wrong length, a page past the object's end.
    #[error("corrupt data for {path}: {detail}")]
    Corrupt { path: String, detail: String },
    /// A range outside the object.
    #[error("invalid range {range} for {path} of {size} bytes")]
    InvalidRange { path: String, range: String, size: u64 },
    /// Any other failure of the object store.
    #[error("reading {path}: {source}")]
    Store {
        path: String,
        #[source]
        source: Arc<object_store::Error>,
    },
}

/// Results of reads through the cache.
pub type CacheResult<T> = std::result::Result<T, CacheError>;

impl CacheError {
    /// Classifies an error of the object store read at `path`: the kind is
    /// kept (a `CacheError` already inside is returned as it is).
    pub fn from_store(path: &str, e: object_store::Error) -> CacheError {
        if let Some(inner) = Self::inside_store_error(&e) {
            return inner.clone();
        }
        let path = path.to_string();
        match e {
            object_store::Error::NotFound { .. } => CacheError::NotFound {
                path,
                source: Some(Arc::new(e)),
            },
            object_store::Error::Precondition { .. } => CacheError::Changed {
                path,
                version: "validated".into(),
                source: Some(Arc::new(e)),
            },
            object_store::Error::Generic { ref source, .. }
                if source.downcast_ref::<silt_store::RequestTimeout>().is_some() =>
            {
                CacheError::Timeout {
                    path,
                    source: Arc::new(e),
                }
            }
            e => CacheError::Store {
                path,
                source: Arc::new(e),
            },
        }
    }

    /// The `CacheError` an object-store error carries as its source, if any.
    fn inside_store_error(e: &object_store::Error) -> Option<&CacheError> {
        let source: &(dyn StdError + 'static) = match e {
            object_store::Error::NotFound { source, .. }
            | object_store::Error::Precondition { source, .. }
            | object_store::Error::Generic { source, .. } => source.as_ref(),
            _ => return None,
        };
        source.downcast_ref::<CacheError>()
    }

    /// The first `CacheError` in `e` or its chain of sources (through
    /// DataFusion, Parquet, Arrow and object_store wrappers), so the edge
    /// of the server can answer by kind.
    pub fn find<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a CacheError> {
        let mut next = Some(e);
        while let Some(err) = next {
            if let Some(found) = err.downcast_ref::<CacheError>() {
                return Some(found);
            }
            if let Some(os) = err.downcast_ref::<object_store::Error>()
                && let Some(found) = Self::inside_store_error(os)
            {
                return Some(found);
            }
            next = err.source();
        }
        None
    }

    /// [`CacheError::Changed`]: `version` of `path` is gone from the store.
    pub fn changed(path: impl ToString, version: impl ToString) -> CacheError {
        CacheError::Changed {
            path: path.to_string(),
            version: version.to_string(),
            source: None,
        }
    }

    /// Whether this is [`CacheError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, CacheError::NotFound { .. })
    }

    /// Whether this is [`CacheError::Changed`].
    pub fn is_changed(&self) -> bool {
        matches!(self, CacheError::Changed { .. })
    }
}

impl From<CacheError> for object_store::Error {
    /// The object-store variant of the same kind, carrying the `CacheError`
    /// as its source (so [`CacheError::find`] recovers it).
    fn from(e: CacheError) -> object_store::Error {
        match &e {
            CacheError::NotFound { path, .. } => object_store::Error::NotFound {
                path: path.clone(),
                source: Box::new(e),
            },
            CacheError::Changed { path, .. } => object_store::Error::Precondition {
                path: path.clone(),
                source: Box::new(e),
            },
            _ => object_store::Error::Generic {
                store: "silt-cache",
                source: Box::new(e),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_found() -> object_store::Error {
        object_store::Error::NotFound {
            path: "a".into(),
            source: "gone".into(),
        }
    }

    #[test]
    fn kinds_survive_a_round_trip_through_object_store_errors() {
        let e = CacheError::from_store("t0/a", not_found());
        assert!(e.is_not_found());
        let os: object_store::Error = e.into();
        assert!(matches!(os, object_store::Error::NotFound { .. }));
        // Classifying again finds the original, not a wrapper of it.
        assert!(CacheError::from_store("x", os).is_not_found());

        let changed = CacheError::from_store(
            "t0/a",
            object_store::Error::Precondition {
                path: "a".into(),
                source: "etag".into(),
            },
        );
        assert!(changed.is_changed());
        let os: object_store::Error = changed.into();
        assert!(matches!(os, object_store::Error::Precondition { .. }));
    }

    #[test]
    fn timeouts_are_recognised_by_their_typed_source() {
        let os = object_store::Error::Generic {
            store: "silt",
            source: Box::new(silt_store::RequestTimeout {
                what: "GET".into(),
                location: "a".into(),
                after: std::time::Duration::from_secs(1),
            }),
        };
        assert!(matches!(CacheError::from_store("a", os), CacheError::Timeout { .. }));
    }

    #[test]
    fn find_walks_the_source_chain() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] object_store::Error);
        let inner: object_store::Error = CacheError::Corrupt {
            path: "p".into(),
            detail: "short".into(),
        }
        .into();
        let outer = Outer(inner);
        let found = CacheError::find(&outer).expect("found through the chain");
        assert!(matches!(found, CacheError::Corrupt { .. }));
        assert!(
            CacheError::find(&not_found()).is_none(),
            "a plain store error carries none"
        );
    }
}
