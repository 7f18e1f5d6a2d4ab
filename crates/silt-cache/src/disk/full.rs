//! Pausing the disk tier's writes while the cache disk is full.
//!
//! A full disk (or quota, or file-size limit) fails every page write the
//! same way. Trying each one again costs a file create, a partial write and
//! a delete per page, and logs a warning per page. Instead the first such
//! failure pauses writes for [`PAUSE`]: the tier keeps serving the pages it
//! has, new pages stay in the memory tiers only, and one warning says so.
//! When the pause ends the next write tries again; if space was freed, the
//! tier carries on, and the resumption is logged.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long writes stay paused after the disk was found full.
pub(crate) const PAUSE: Duration = Duration::from_secs(30);

/// Whether `e` says the disk (or a quota or a size limit) has no room.
pub(crate) fn is_out_of_space(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded | io::ErrorKind::FileTooLarge
    ) || matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG))
}

/// The pause state: until when writes are skipped, and whether the last
/// write attempt had found the disk full (to log the resumption once).
pub(crate) struct WritePause {
    origin: Instant,
    /// Milliseconds since `origin` until which writes are skipped (0: none).
    until_ms: AtomicU64,
    was_full: AtomicBool,
}

impl WritePause {
    pub(crate) fn new() -> Self {
        WritePause {
            origin: Instant::now(),
            until_ms: AtomicU64::new(0),
            was_full: AtomicBool::new(false),
        }
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// Whether writes are paused now.
    pub(crate) fn is_paused(&self) -> bool {
        self.now_ms() < self.until_ms.load(Ordering::Relaxed)
    }

    /// A write failed for lack of space: pause writes, warning once per pause.
    pub(crate) fn disk_full(&self, dir: &std::path::Path, error: &io::Error) {
        let until = self.now_ms() + PAUSE.as_millis() as u64;
        let previous = self.until_ms.swap(until, Ordering::Relaxed);
        self.was_full.store(true, Ordering::Relaxed);
        if previous <= self.now_ms() {
            tracing::warn!(
                dir = %dir.display(),
                %error,
                pause_s = PAUSE.as_secs(),
                "disk tier: the cache disk is full; new pages are kept in memory only until writes are tried again"
            );
        }
    }

    /// A write succeeded: if the disk had been full, say writes resumed.
    pub(crate) fn written(&self, dir: &std::path::Path) {
        if self.was_full.swap(false, Ordering::Relaxed) {
            tracing::info!(dir = %dir.display(), "disk tier: the cache disk has room again; writes resumed");
        }
    }
}
