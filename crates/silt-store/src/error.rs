//! Errors of the object-store layer.

/// What went wrong while locating or opening an object store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid table URL '{url}': {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("unsupported URL scheme '{scheme}' in '{url}' (use file://, s3://, gs://, az:// or abfs(s)://)")]
    UnsupportedScheme { scheme: String, url: String },
    #[error("unknown setting '{key}' in [{section}] (use object_store's configuration keys for that store)")]
    UnknownSetting { section: &'static str, key: String },
    #[error("cannot open object store for '{url}': {source}")]
    Open {
        url: String,
        #[source]
        source: object_store::Error,
    },
}

/// An attempt at a request that did not finish within its deadline. Carried
/// as the source of an `object_store::Error::Generic`, so layers above can
/// tell a timeout from other failures by type, not by message.
#[derive(Debug, thiserror::Error)]
#[error("{what} {location} timed out after {after:?}")]
pub struct RequestTimeout {
    /// The request (`GET`, `HEAD`, `LIST`, ...).
    pub what: String,
    /// The object or prefix it was for.
    pub location: String,
    /// The deadline it missed.
    pub after: std::time::Duration,
}
