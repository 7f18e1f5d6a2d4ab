//! Rebuilding the index from the region files of a previous run.
//!
//! Runs on its own thread so that opening the tier is instant. It first
//! deletes what is left of other layouts (one file per page from before
//! region files, regions of another slot size), then reads the header block
//! of every slot of every region file found at open (4 KiB per slot,
//! whatever the page size); data checksums are verified lazily by every
//! read. A blank slot is free; a slot whose header is damaged is counted and
//! freed; a valid page is indexed in the slot it is in. Regions are handed
//! to the index one at a time, so the tier's new pages can use the free
//! slots of the regions already read. A region that cannot be read is
//! dropped (its slots freed). If the budget shrank since the last run, the
//! slots past it were cut off at open ([`super::regions::Regions::existing`]):
//! the pages kept are those in the lowest slots, not the policy's choice.

use std::io;
use std::sync::{Arc, Weak};
use std::time::Instant;

use super::DiskTier;
use super::format::{self, Invalid};
use super::tier::FoundPage;

/// Starts recovery of `tier` on a background thread. The thread holds only a
/// weak reference between regions, so dropping the tier stops it.
pub(super) fn spawn(tier: &Arc<DiskTier>) -> io::Result<()> {
    let weak = Arc::downgrade(tier);
    std::thread::Builder::new()
        .name("silt-disk-recovery".into())
        .spawn(move || run(weak))?;
    Ok(())
}

/// Marks recovery done when dropped, so that a panic cannot leave
/// `wait_recovered` callers blocked forever; regions it never read (a panic)
/// are freed, so their slots are not lost for the run.
struct Done {
    tier: Weak<DiskTier>,
    unread: std::ops::Range<u32>,
}

impl Drop for Done {
    fn drop(&mut self) {
        if let Some(tier) = self.tier.upgrade() {
            let geometry = tier.regions().geometry();
            let slots: Vec<u32> = self.unread.clone().flat_map(|r| geometry.slots_of(r)).collect();
            if !slots.is_empty() {
                tier.adopt_recovered(Vec::new(), slots);
            }
            tier.finish_recovery();
        }
    }
}

fn run(weak: Weak<DiskTier>) {
    let mut done = Done {
        tier: weak.clone(),
        unread: 0..0,
    };
    let started = Instant::now();
    let Some((existing, stale)) = weak.upgrade().map(|t| {
        let mut found = t
            .found_at_open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::take(&mut *found)
    }) else {
        return;
    };
    for path in stale {
        tracing::info!(path = %path.display(), "disk tier: deleting pages of another layout or page size");
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        if let Err(e) = removed {
            tracing::warn!(path = %path.display(), error = %e, "disk tier: cannot delete");
        }
    }
    let regions_to_read = existing.last().map_or(0, |&r| r + 1);
    done.unread = 0..regions_to_read;
    let mut slots_read = 0usize;
    for region in 0..regions_to_read {
        done.unread.start = region;
        let Some(tier) = weak.upgrade() else {
            return;
        };
        let geometry = tier.regions().geometry();
        let slots = geometry.slots_of(region);
        if existing.binary_search(&region).is_err() {
            tier.adopt_recovered(Vec::new(), slots.collect());
            continue;
        }
        let headers = match tier.regions().headers(region) {
            Ok(headers) => headers,
            Err(e) => {
                // Nothing of it is indexed, so its slots are free to
                // overwrite: the tier keeps its whole budget.
                let path = tier.regions().path(region);
                tracing::warn!(path = %path.display(), error = %e, "disk tier recovery: cannot read region; its pages are dropped");
                tier.adopt_recovered(Vec::new(), slots.collect());
                continue;
            }
        };
        slots_read += headers.len();
        let mut found: Vec<FoundPage> = Vec::new();
        let mut free = Vec::new();
        for (slot, header) in slots.zip(headers) {
            let decoded = match header {
                None => Err(Invalid::Blank),
                Some(h) => format::decode_header(&h).and_then(|h| {
                    if h.data_len <= geometry.capacity() {
                        Ok(h)
                    } else {
                        Err(Invalid::Length { len: h.data_len })
                    }
                }),
            };
            match decoded {
                Ok(h) => found.push((h.key, slot, h.data_len, h.cost)),
                Err(Invalid::Blank) => free.push(slot),
                Err(reason) => {
                    tier.count_unrecoverable(&tier.regions().path(region), slot, &reason);
                    free.push(slot);
                }
            }
        }
        tier.adopt_recovered(found, free);
    }
    done.unread = 0..0;
    if let Some(tier) = weak.upgrade() {
        let stats = tier.stats();
        tracing::info!(
            slots_read,
            pages = stats.pages,
            used_bytes = stats.used_bytes,
            dropped = stats.recovered_dropped,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "disk tier: recovery done"
        );
    }
}
