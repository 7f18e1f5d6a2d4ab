//! Object-store access for Silt.
//!
//! * [`location`]: turn a table URL (`file://`, `s3://`, `memory://`) and S3
//!   settings into an `object_store` instance and the prefix to scan.
//! * [`metered`]: a wrapper that counts every request and byte that reaches
//!   the real store, so `/metrics` and the demo report what crossed the wire.
//!
//! Silt never writes to the object store; the wrappers here forward writes
//! only so that they satisfy the `ObjectStore` trait.

pub mod error;
pub mod location;
pub mod metered;

pub use error::StoreError;
pub use location::{S3Settings, TableLocation};
pub use metered::{MeteredStore, StoreMetrics};
