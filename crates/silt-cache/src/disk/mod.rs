//! The disk page tier: pages of object bytes kept as files, surviving restarts.
//!
//! Layout under [`DiskConfig::dir`]:
//! - `pages/<2 hex>/<32 hex>.page`: one file per page, named by a stable
//!   128-bit hash (xxh3) of the full [`PageKey`](crate::page_cache::PageKey),
//!   so a page is found by name without any index, and the 256 fan-out
//!   directories keep directories small. The format is in [`format`].
//! - `tmp/`: pages being written. A page is written to a unique temporary file
//!   and renamed into place, so readers see either no page or a whole page,
//!   never a torn one. Leftovers (from a crash) are deleted at open.
//!
//! Crash safety without fsync: renames make pages appear atomically while the
//! machine stays up; after a power loss a renamed file may have lost its data
//! blocks, so every read verifies the header checksum and the CRC32C of the
//! data, and a page that fails is deleted and reported as a miss. A cache can
//! always refetch, so paying an fsync per page (milliseconds on many disks)
//! to avoid an occasional refetch after a power loss is not worth it.
//!
//! The in-memory index (which pages exist, their sizes, eviction order, and a
//! map from object to versions to pages) is not persisted: at open it is
//! rebuilt by [`recovery`] on a background thread from the page headers only,
//! while [`DiskTier::get`] already serves pages by reading their files
//! directly.
//!
//! One process owns a directory at a time, enforced by an exclusive `flock`
//! on `LOCK`: `open` deletes temporary files it finds, which would break a
//! second process writing into the same directory.

mod format;
mod full;
mod index;
mod io;
mod metrics;
mod recovery;
mod tier;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

use std::sync::Arc;

use crate::page_cache::PageKey;
use crate::policy::{PolicyKind, Reservations};

pub use metrics::{DiskMetrics, DiskStats};
pub use tier::{DiskTier, lock_dir};

/// Configuration of a [`DiskTier`].
#[derive(Clone)]
pub struct DiskConfig {
    /// Directory that holds the tier (created if missing); owned by one process.
    pub dir: PathBuf,
    /// Budget for page files in bytes, counted in 4 KiB blocks (header block
    /// plus data rounded up), so it bounds the disk space actually used.
    pub budget_bytes: u64,
    /// Read pages with `O_DIRECT`, bypassing the OS page cache: the memory
    /// tier already caches hot pages, so a second copy in the OS cache only
    /// wastes memory. Falls back to buffered reads (with one warning) where
    /// the filesystem refuses `O_DIRECT` (e.g. tmpfs).
    pub direct_io: bool,
    /// Which eviction policy orders the pages.
    pub policy: PolicyKind,
    /// The server's scan sets, for plan-aware eviction: pages registered
    /// scans will read are evicted last ([`crate::policy::BudgetedCache`]);
    /// `None` evicts by the policy alone.
    pub reservations: Option<Arc<dyn Reservations<PageKey>>>,
}

impl std::fmt::Debug for DiskConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskConfig")
            .field("dir", &self.dir)
            .field("budget_bytes", &self.budget_bytes)
            .field("direct_io", &self.direct_io)
            .field("policy", &self.policy)
            .field("plan_aware", &self.reservations.is_some())
            .finish()
    }
}
