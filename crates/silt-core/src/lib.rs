//! The words for cached things, shared by the server's cache tiers
//! (`silt-cache`) and a client's compute-side cache (`silt-client`):
//!
//! - what is cached is named by an [`ObjectKey`] (one object at one
//!   version), a [`PageKey`] (a page of its bytes), a [`ChunkKey`] (one
//!   column of one row group) or a [`BatchKey`] (one batch of a chunk);
//! - an [`ObjectVersion`] owns the version's three encodings (cache tag,
//!   wire token, S3 entity tag);
//! - a cached column batch is a [`CachedColumn`] in a [`MemoryForm`];
//! - [`policy`] orders what a byte-budgeted cache evicts;
//! - [`single_flight`] de-duplicates concurrent loads of one key, and
//!   [`backoff`] skips a failed fleet member for a while;
//! - [`machine`] says how much memory there is, for budgets that default
//!   to a share of it;
//! - [`restart`] is the one policy for a read that meets a changed object
//!   version: restart it once.
//!
//! A leaf crate: it knows nothing of stores, scans, servers or clients.

pub mod backoff;
mod chunk;
mod column;
mod key;
pub mod machine;
pub mod policy;
pub mod restart;
pub mod single_flight;
mod version;

pub use backoff::Backoff;
pub use chunk::{BATCH_ROWS, BatchKey, ChunkKey};
pub use column::{CachedColumn, MemoryForm};
pub use key::{ObjectKey, PageKey, PinnedObject};
pub use single_flight::SingleFlight;
pub use version::ObjectVersion;
