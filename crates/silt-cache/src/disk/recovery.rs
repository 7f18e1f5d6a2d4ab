//! Rebuilding the index from the page files of a previous run.
//!
//! Runs on its own thread so that opening the tier is instant. Only headers
//! are read (4 KiB per file, whatever the page size), so the time is one
//! open + read + stat per page; data checksums are verified lazily by every
//! read. Files that cannot be pages of this tier (bad header, wrong length,
//! name not matching the key) are deleted and counted. If the budget shrank
//! since the last run, admitting the pages evicts down to the new budget.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Instant;

use super::DiskTier;
use super::format::{self, Header, Invalid, charged_size};
use super::io::read_header;

/// Starts recovery of `tier` on a background thread. The thread holds only a
/// weak reference between directories, so dropping the tier stops it.
pub(super) fn spawn(tier: &Arc<DiskTier>) -> io::Result<()> {
    let weak = Arc::downgrade(tier);
    std::thread::Builder::new()
        .name("silt-disk-recovery".into())
        .spawn(move || run(weak))?;
    Ok(())
}

/// Marks recovery done when dropped, so that a panic cannot leave
/// `wait_recovered` callers blocked forever.
struct Done(Weak<DiskTier>);

impl Drop for Done {
    fn drop(&mut self) {
        if let Some(tier) = self.0.upgrade() {
            tier.finish_recovery();
        }
    }
}

fn run(weak: Weak<DiskTier>) {
    let _done = Done(weak.clone());
    let started = Instant::now();
    let mut files = 0usize;
    for shard in 0..256u32 {
        let Some(tier) = weak.upgrade() else {
            return;
        };
        let dir = tier.pages_dir().join(format!("{shard:02x}"));
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "disk tier recovery: cannot list directory");
                continue;
            }
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            files += 1;
            let path = entry.path();
            match inspect(&path) {
                Ok(Ok(h)) => found.push((h.key, charged_size(h.data_len), h.cost, path)),
                Ok(Err(reason)) => tier.drop_unrecoverable(&path, &reason),
                // Deleted meanwhile (evicted, dropped, or found damaged by a read).
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(path = %path.display(), error = %e, "disk tier recovery: cannot read page"),
            }
        }
        tier.adopt_recovered(found);
    }
    if let Some(tier) = weak.upgrade() {
        let stats = tier.stats();
        tracing::info!(
            files,
            pages = stats.pages,
            used_bytes = stats.used_bytes,
            dropped = stats.recovered_dropped,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "disk tier: recovery done"
        );
    }
}

/// Checks a page file by its header: the header (key, data length, stored
/// cost), or why the file is unusable. The outer error is an I/O failure
/// (file left alone).
fn inspect(path: &Path) -> io::Result<Result<Header, Invalid>> {
    let (header, file_len) = read_header(path)?;
    let header = match format::decode_header(&header) {
        Ok(h) => h,
        Err(Invalid::Length { .. }) => return Ok(Err(Invalid::Length { file_len })),
        Err(reason) => return Ok(Err(reason)),
    };
    if let Err(reason) = format::check_length(&header, file_len) {
        return Ok(Err(reason));
    }
    let expected = format::relative_path(&header.key);
    if !path.ends_with(&expected) {
        return Ok(Err(Invalid::Misplaced));
    }
    Ok(Ok(header))
}
