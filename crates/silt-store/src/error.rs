//! Errors of the object-store layer.

/// What went wrong while locating or opening an object store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid table URL '{url}': {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("unsupported URL scheme '{scheme}' in '{url}' (use file://, s3:// or memory://)")]
    UnsupportedScheme { scheme: String, url: String },
    #[error("cannot open object store for '{url}': {source}")]
    Open {
        url: String,
        #[source]
        source: object_store::Error,
    },
}
