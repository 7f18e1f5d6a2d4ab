//! Object-store access for Silt.
//!
//! * [`location`]: turn a table URL (`file://`, `s3://`, `gs://`, `az://`,
//!   `memory://`) and the store's settings into an `object_store` instance
//!   and the prefix to scan; [`cloud`]: the GCS and Azure stores.
//! * [`metered`]: a wrapper that counts every request and byte that reaches
//!   the real store, so `/metrics` and the demo report what crossed the wire.
//! * [`retry`]: per-request deadlines, retries with backoff and jitter, and
//!   whole-body length checks on every read.
//! * [`faults`]: injected latency, bandwidth caps, failures and short bodies,
//!   for tests, benchmarks and `silt serve --store-*` testing flags.
//!
//! Silt never writes to the object store; the wrappers here forward writes
//! only so that they satisfy the `ObjectStore` trait.

pub mod cloud;
pub mod error;
pub mod faults;
pub mod location;
pub mod metered;
pub mod retry;
pub mod wrapper;

pub use cloud::{Cloud, CloudSettings};
pub use error::{RequestTimeout, StoreError};
pub use faults::{FaultConfig, FaultyStore};
pub use location::{S3Settings, StoreSettings, TableFormat, TableLocation};
pub use metered::{MeteredStore, StoreMetrics};
pub use retry::{RetryPolicy, RetryingStore};
