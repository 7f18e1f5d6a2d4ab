//! The disk page tier: pages of object bytes in the slots of large region
//! files, surviving restarts.
//!
//! Layout under [`DiskConfig::dir`]:
//! - `regions-<page bytes>/<6 digits>.region`: region files of about 64 MiB,
//!   each a row of fixed-size slots; a slot holds one page: a 4 KiB header
//!   block (key, length, checksums, refetch cost; see [`format`]) and the
//!   data. The page size is in the directory name, so a tier reopened with
//!   another page size starts empty (the old regions are deleted). See
//!   [`regions`] for where a slot lives.
//! - `LOCK`: one process owns the directory at a time (an exclusive `flock`).
//!
//! Why regions rather than one file per page (the layout before them, which
//! is deleted at open): a file per 64 KiB page costs an open, a read and a
//! close per page, an inode each, and neighbouring pages can never be read
//! in one request. In regions, consecutive pages of an object are written
//! to neighbouring slots where they are free, and [`DiskTier::get_many`]
//! reads neighbouring slots with one request (foyer's block engine and
//! Velox's SSD cache keep large files for the same reasons). A run's last
//! slot is read up to its page's end (rounded to 4 KiB), not whole.
//!
//! Crash safety without fsync: a page is written in place into a free slot
//! and indexed only when its write has ended; every read verifies the
//! header checksum, the key, the length and the CRC32C of the data, so a
//! slot torn by a crash (or reused under a reader) is a miss, never wrong
//! bytes, and a damaged page is forgotten and its slot freed. A cache can
//! always refetch, so paying an fsync per page (milliseconds on many disks)
//! to avoid an occasional refetch after a power loss is not worth it. A
//! freed slot keeps its old page until reused, so after a restart an evicted
//! page may come back: its bytes are still right for its key (keys carry the
//! object version), so that costs only space, which eviction reclaims. A
//! part of a page replaced by a longer part comes back the same way, as a
//! second copy of its page: recovery keeps the longer copy, whichever slot
//! it reads first (otherwise a restart could serve the footer's part of a
//! page and miss the rest the page held before it stopped).
//!
//! The in-memory index (which page is in which slot, the free slots, the
//! eviction order, and a map from object to versions to pages) is not
//! persisted: at open it is rebuilt by [`recovery`] on a background thread
//! from the slot headers only. Until recovery has read a region, its pages
//! are misses and its slots are not written; new pages go to slots known to
//! be free.

mod format;
mod full;
mod index;
mod io;
mod medium;
mod metrics;
mod recovery;
mod regions;
mod slots;
mod tier;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

use std::sync::Arc;

use crate::PageKey;
use crate::policy::{PolicyKind, Reservations};

pub use medium::Medium;
pub use metrics::{DiskMetrics, DiskStats};
pub use tier::{DiskTier, lock_dir};

impl DiskTier {
    /// Opens (creating if needed) the tier in `config.dir` and starts
    /// rebuilding the index from the region files on a background thread;
    /// returns at once. While recovery runs, pages it has not reached yet
    /// are misses and new pages go to slots known to be free.
    ///
    /// Here, where the tier and its [`recovery`] meet: recovery drives the
    /// tier, and the tier knows nothing of recovery.
    pub fn open(config: DiskConfig, metrics: DiskMetrics) -> std::io::Result<Arc<DiskTier>> {
        let tier = Self::create(config, metrics)?;
        recovery::spawn(&tier)?;
        Ok(tier)
    }
}

/// Configuration of a [`DiskTier`].
#[derive(Clone)]
pub struct DiskConfig {
    /// Directory that holds the tier (created if missing); owned by one process.
    pub dir: PathBuf,
    /// Budget in bytes: the region files hold `budget_bytes / slot size`
    /// slots, so it bounds the disk space used.
    pub budget_bytes: u64,
    /// The largest page stored: the page size of the store above. A slot is
    /// a 4 KiB header plus this, rounded up to 4 KiB; larger pages are not
    /// stored.
    pub page_bytes: u64,
    /// Read and write pages with `O_DIRECT`, bypassing the OS page cache: the
    /// memory tier already caches hot pages, so a second copy in the OS
    /// cache only wastes memory. Falls back to buffered I/O (with one
    /// warning) where the filesystem refuses `O_DIRECT` (e.g. older tmpfs).
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
            .field("page_bytes", &self.page_bytes)
            .field("direct_io", &self.direct_io)
            .field("policy", &self.policy)
            .field("plan_aware", &self.reservations.is_some())
            .finish()
    }
}
