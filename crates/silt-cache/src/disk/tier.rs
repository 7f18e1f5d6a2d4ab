//! [`DiskTier`]: get/put/drop of pages in region slots, coordinated with the index.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use super::format::{self, Invalid, Verified};
use super::full::{WritePause, is_out_of_space};
use super::index::{Admission, Adopted, Entry, Index};
use super::metrics::Counters;
use super::regions::{Geometry, Regions};
use super::{DiskConfig, DiskMetrics, DiskStats};
use crate::PageKey;
use crate::page_cache::Page;

/// Largest read of neighbouring slots made as one request.
const MAX_RUN_BYTES: u64 = 8 << 20;

/// A page recovery found in a slot: key, slot, data length, stored cost.
pub(super) type FoundPage = (PageKey, u32, u64, Option<f64>);

/// The disk page tier: pages of object bytes in the slots of region files
/// under one directory, within a byte budget, verified on every read, and
/// recovered at restart.
///
/// All methods block on file I/O; async callers run them in
/// `tokio::task::spawn_blocking`. Errors are never returned from `get`/`put`:
/// a cache that cannot read or write degrades to misses, logs a warning and
/// counts the failure, and the query goes to the object store.
pub struct DiskTier {
    dir: PathBuf,
    regions: Regions,
    index: Mutex<Index>,
    counters: Counters,
    /// Region files found at open (recovery reads their slot headers), and
    /// what is left of other layouts (recovery deletes it).
    pub(super) found_at_open: Mutex<(Vec<u32>, Vec<PathBuf>)>,
    /// True until recovery has scanned every region file.
    recovering: AtomicBool,
    recovered: Mutex<bool>,
    recovered_cv: Condvar,
    /// Writes paused while the cache disk is full.
    pause: WritePause,
    /// Holds an exclusive `flock` on `<dir>/LOCK` for the tier's lifetime:
    /// a second process on the same directory would overwrite this one's
    /// slots behind its back.
    _lock: fs::File,
}

impl DiskTier {
    /// The tier in `config.dir`, opened (created if needed) without
    /// starting recovery: [`DiskTier::open`] starts it (tests start it when
    /// they choose).
    pub(super) fn create(config: DiskConfig, metrics: DiskMetrics) -> std::io::Result<Arc<DiskTier>> {
        fs::create_dir_all(&config.dir)?;
        let lock = lock_dir(&config.dir)?;
        let geometry = Geometry::new(config.page_bytes, config.budget_bytes);
        // The exact page size, not the slot size: page keys are page numbers,
        // so pages of another size must never be found (two sizes can share
        // a slot size).
        let name = format!("regions-{}", config.page_bytes);
        let regions_dir = config.dir.join(&name);
        fs::create_dir_all(&regions_dir)?;
        // One file per page (before regions), or slots of another size.
        let mut stale = Vec::new();
        for entry in fs::read_dir(&config.dir)?.flatten() {
            let file_name = entry.file_name();
            let file_name = file_name.to_string_lossy();
            if file_name == "pages" || file_name == "tmp" || (file_name.starts_with("regions-") && file_name != name) {
                stale.push(entry.path());
            }
        }
        let regions = Regions::new(regions_dir, geometry, config.direct_io);
        let existing = regions.existing()?;
        let scan_end = existing.last().map_or(0, |&r| geometry.slots_of(r).end);
        let tier = Arc::new(DiskTier {
            dir: config.dir.clone(),
            regions,
            index: Mutex::new(Index::new(
                geometry.slots,
                geometry.slot_bytes,
                scan_end,
                config.policy,
                config.reservations.clone(),
            )),
            counters: Counters::new(metrics),
            found_at_open: Mutex::new((existing, stale)),
            recovering: AtomicBool::new(true),
            recovered: Mutex::new(false),
            recovered_cv: Condvar::new(),
            pause: WritePause::new(),
            _lock: lock,
        });
        Ok(tier)
    }

    /// The verified bytes of `key`'s page (or of the part of it stored), or
    /// `None` on a miss.
    pub fn get(&self, key: &PageKey) -> Option<Page> {
        self.get_many(std::slice::from_ref(key)).pop().flatten()
    }

    /// Whether (a part of) `key` is held and written: an index lookup, no
    /// I/O (the page may still fail its checksum when read).
    pub fn holds(&self, key: &PageKey) -> bool {
        self.lock().get(key).is_some_and(|e| !e.writing)
    }

    /// The verified bytes of each of `keys`' pages (`None` where missed).
    /// Pages in neighbouring slots of one region file are read with one
    /// request (up to [`MAX_RUN_BYTES`]); consecutive pages of an object are
    /// written to neighbouring slots where they are free, so a scan's pages
    /// mostly come back in a few large reads.
    ///
    /// Every page read checks the header checksum, the key (a slot reused
    /// since the lookup is a miss), the length and the data CRC32C; a page
    /// that fails is forgotten (its slot freed) and counted in
    /// `corrupt_pages`.
    pub fn get_many(&self, keys: &[PageKey]) -> Vec<Option<Page>> {
        let mut wanted: Vec<(usize, Entry)> = {
            let mut idx = self.lock();
            keys.iter()
                .enumerate()
                .filter_map(|(i, k)| idx.access(k).filter(|e| !e.writing).map(|e| (i, e)))
                .collect()
        };
        wanted.sort_unstable_by_key(|(_, e)| e.slot);
        let mut found: Vec<Option<Page>> = vec![None; keys.len()];
        if wanted.is_empty() {
            self.count_lookups(&found);
            return found;
        }
        for run in self.runs(&wanted) {
            let (first, last) = (run[0].1, run[run.len() - 1].1);
            self.counters.read_request();
            match self.regions.read_run(first.slot, last.slot, last.len) {
                Ok(bytes) => {
                    for &(i, entry) in run {
                        let at = (entry.slot - first.slot) as usize * self.regions.geometry().slot_bytes as usize;
                        let end = at + Geometry::read_len(entry.len) as usize;
                        let slot = bytes.slice(at.min(bytes.len())..end.min(bytes.len()));
                        found[i] = self.check(&keys[i], entry, slot);
                    }
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    for &(i, entry) in run {
                        self.forget_vanished(&keys[i], entry);
                    }
                }
                Err(e) => {
                    let (region, _) = self.regions.geometry().locate(first.slot);
                    tracing::warn!(path = %self.regions.path(region).display(), error = %e, "disk tier: cannot read pages");
                }
            }
        }
        // A page whose entry is still the one looked up was in a slot no
        // other page can have been written to meanwhile: certain, where the
        // checks above leave a torn read's checksum collision (2^-32) to chance.
        {
            let idx = self.lock();
            for &(i, entry) in &wanted {
                if found[i].is_some() && idx.get(&keys[i]).is_none_or(|e| e.generation != entry.generation) {
                    found[i] = None;
                }
            }
        }
        self.count_lookups(&found);
        found
    }

    fn count_lookups(&self, found: &[Option<Page>]) {
        for page in found {
            match page {
                Some(data) => self.counters.hit(data.len() as u64),
                None => self.counters.miss(),
            }
        }
    }

    /// Splits `wanted` (sorted by slot) into runs of neighbouring slots of
    /// one region, each at most [`MAX_RUN_BYTES`].
    fn runs<'a>(&self, wanted: &'a [(usize, Entry)]) -> Vec<&'a [(usize, Entry)]> {
        let geometry = self.regions.geometry();
        let max_slots = (MAX_RUN_BYTES / geometry.slot_bytes).max(1) as usize;
        let mut runs = Vec::new();
        let mut start = 0;
        for i in 1..=wanted.len() {
            let ends = i == wanted.len() || {
                let (prev, next) = (wanted[i - 1].1.slot, wanted[i].1.slot);
                next != prev + 1 || geometry.locate(next).0 != geometry.locate(prev).0 || i - start >= max_slots
            };
            if ends {
                runs.push(&wanted[start..i]);
                start = i;
            }
        }
        runs
    }

    /// Verifies the bytes read from `entry`'s slot for `key`.
    fn check(&self, key: &PageKey, entry: Entry, slot: Bytes) -> Option<Page> {
        match format::verify(&slot, key, entry.len) {
            Ok(Verified::Page { data, offset }) => Some(Page {
                offset,
                bytes: slot.slice(data),
            }),
            Ok(Verified::OtherKey) => {
                self.forget_vanished(key, entry);
                None
            }
            Err(reason) => {
                self.drop_corrupt(key, entry, &reason);
                None
            }
        }
    }

    /// Stores `data` as `key`'s page, best effort: evicts pages to make room
    /// first, so the slots in use never exceed the budget. `cost` is the
    /// estimated time in ns to fetch the page again (its share of the GET
    /// that brought it, see
    /// [`CostModel::share_of_request`](crate::policy::CostModel::share_of_request)):
    /// the caller measured that GET, the tier could not. It orders
    /// `weighted-lfu` and is kept in the page header, so it survives restarts.
    /// A page already stored (or being written) is not rewritten, and a page
    /// larger than a slot (the page size the tier was opened with) is not
    /// stored. Failures are logged and counted, never returned; a full disk
    /// pauses writes for a while (see [`super::full`]).
    pub fn put(&self, key: PageKey, data: &[u8], cost: f64) {
        self.put_at(key, 0, data, cost)
    }

    /// [`Self::put`] for part of a page: `data` is the page's bytes from
    /// byte `offset` on. It replaces a stored part of the page that is
    /// shorter (a read fetched what that part lacked, and the parts were
    /// merged before they came here); a longer or equal one stays.
    pub fn put_at(&self, key: PageKey, offset: u64, data: &[u8], cost: f64) {
        if self.pause.is_paused() {
            return;
        }
        let capacity = self.regions.geometry().capacity();
        if data.len() as u64 > capacity {
            tracing::debug!(len = data.len(), capacity, "disk tier: page larger than a slot");
            return;
        }
        let Some(header) = format::encode_header(&key, offset, data, cost) else {
            tracing::warn!(path = %key.object.path, offset, "disk tier: key too long for a page header");
            self.counters.write_error();
            return;
        };
        let Some(admission) = self.with_index(|idx| idx.reserve(&key, data.len() as u64, cost)) else {
            return;
        };
        let Some((generation, slot)) = self.apply(admission) else {
            return;
        };
        let written = self.regions.write(slot, &header, data);
        match &written {
            Ok(()) => self.pause.written(&self.dir),
            Err(e) => {
                // What part of the page reached the disk must not be
                // recovered as a page after a restart. Best effort: if even
                // this fails, the write never reached the header block,
                // which is then blank or an earlier page's, whole.
                let _ = self.regions.blank(slot);
                if is_out_of_space(e) {
                    self.pause.disk_full(&self.dir, e);
                } else {
                    tracing::warn!(dir = %self.dir.display(), slot, error = %e, "disk tier: cannot write page");
                }
                self.counters.write_error();
            }
        }
        self.with_index(|idx| idx.finish_write(&key, generation, slot, written.is_ok()));
    }

    /// Forgets the pages of object (`store`, `path`) whose version is not
    /// `keep_version` (the object changed; old pages can never be read
    /// again), freeing their slots, and returns how many were indexed. Uses
    /// the per-object index, so it costs the number of pages of that object.
    /// While recovery runs, old pages it has not reached yet are dropped
    /// when it reaches them.
    pub fn drop_other_versions(&self, store: &str, path: &str, keep_version: &str) -> usize {
        self.with_index(|idx| idx.drop_other_versions(store, path, keep_version))
    }

    /// Counts `bytes` fetched from below after a disk miss. `get` cannot know
    /// the size of a page it does not have, so the caller reports it, as the
    /// memory tier counts the bytes it fetched.
    pub fn record_miss_bytes(&self, bytes: u64) {
        self.counters.miss_bytes(bytes);
    }

    /// One [`HeldUnit`](crate::HeldUnit) per page held. Walks the index under
    /// its lock: for introspection, not for query paths.
    pub fn held_units(&self) -> Vec<crate::HeldUnit> {
        let pages = self.lock().pages();
        pages
            .iter()
            .map(|(key, size)| crate::HeldUnit::page("disk", key, *size))
            .collect()
    }

    /// Bytes charged to the budget: one slot per page (pages being written
    /// included).
    pub fn used_bytes(&self) -> u64 {
        self.lock().used_bytes()
    }

    /// The configured budget in bytes.
    pub fn budget_bytes(&self) -> u64 {
        let g = self.regions.geometry();
        g.slots as u64 * g.slot_bytes
    }

    /// Pages in the index.
    pub fn page_count(&self) -> usize {
        self.lock().len()
    }

    /// Whether recovery has scanned every region file of the previous run.
    pub fn recovery_done(&self) -> bool {
        !self.recovering.load(Ordering::Acquire)
    }

    /// Blocks until recovery is done.
    pub fn wait_recovered(&self) {
        let mut done = self.recovered.lock().unwrap_or_else(PoisonError::into_inner);
        while !*done {
            done = self.recovered_cv.wait(done).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Whether reads and writes bypass the OS page cache (`direct_io` was
    /// asked for and the filesystem accepted it so far).
    pub fn direct_io_active(&self) -> bool {
        self.regions.is_direct()
    }

    /// A snapshot of the counters and sizes.
    pub fn stats(&self) -> DiskStats {
        let (used_bytes, pages) = self.with_index(|idx| (idx.used_bytes(), idx.len() as u64));
        DiskStats {
            used_bytes,
            budget_bytes: self.budget_bytes(),
            pages,
            recovery_done: self.recovery_done(),
            ..self.counters.snapshot()
        }
    }

    // ---- shared with recovery and tests ----

    pub(super) fn regions(&self) -> &Regions {
        &self.regions
    }

    /// The region file and offset of `key`'s slot, if indexed.
    #[cfg(test)]
    pub(super) fn slot_of(&self, key: &PageKey) -> Option<(PathBuf, u64)> {
        let entry = self.lock().get(key)?;
        let (region, offset) = self.regions.geometry().locate(entry.slot);
        Some((self.regions.path(region), offset))
    }

    /// Takes the pages recovery found into the index and frees the slots it
    /// found empty or damaged, in one lock.
    pub(super) fn adopt_recovered(&self, found: Vec<FoundPage>, free: Vec<u32>) {
        let mut recovered = 0;
        let mut admissions = Vec::new();
        self.with_index(|idx| {
            for slot in free {
                idx.found_free(slot);
            }
            for (key, slot, len, cost) in found {
                match idx.adopt(&key, slot, len, cost) {
                    Adopted::Admitted(a) => {
                        recovered += 1;
                        admissions.push(a);
                    }
                    Adopted::Present => {}
                    Adopted::Rejected(a) => admissions.push(a),
                }
            }
        });
        self.counters.recovered(recovered);
        for admission in admissions {
            self.apply(admission);
        }
    }

    /// Counts a slot recovery found damaged (its slot is freed by
    /// [`Self::adopt_recovered`]).
    pub(super) fn count_unrecoverable(&self, path: &Path, slot: u32, reason: &Invalid) {
        tracing::warn!(path = %path.display(), slot, %reason, "disk tier: dropping a damaged page");
        self.counters.corrupt();
        self.counters.recovered_dropped();
    }

    /// Marks recovery done and wakes the waiters.
    pub(super) fn finish_recovery(&self) {
        self.with_index(Index::recovery_finished);
        self.recovering.store(false, Ordering::Release);
        *self.recovered.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.recovered_cv.notify_all();
    }

    // ---- internals ----

    pub(super) fn lock(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the locked index and publishes the used bytes.
    fn with_index<T>(&self, f: impl FnOnce(&mut Index) -> T) -> T {
        let mut idx = self.lock();
        let out = f(&mut idx);
        self.counters.used_bytes(idx.used_bytes());
        out
    }

    /// Counts an admission's evictions; returns the new entry's generation
    /// and slot.
    fn apply(&self, admission: Admission) -> Option<(u64, u32)> {
        self.counters.evictions(admission.evicted);
        self.counters.reserved_evictions(admission.reserved_evicted);
        admission.placed
    }

    /// The slot of an indexed page holds another page (or its region file
    /// is gone): forget the entry, unless it was replaced since the lookup.
    /// Forgets `key`'s page, freeing its slot (a caller found it useless:
    /// the squeeze tier's record that no longer reads back whole).
    pub fn forget(&self, key: &PageKey) {
        self.with_index(|idx| {
            if let Some(e) = idx.get(key) {
                idx.remove_if(key, e.generation);
            }
        });
    }

    fn forget_vanished(&self, key: &PageKey, seen: Entry) {
        self.with_index(|idx| idx.remove_if(key, seen.generation));
    }

    /// A page failed verification: forget it and count it, unless it was
    /// replaced since the lookup (then the slot was reused under the read,
    /// which is a miss, not damage).
    fn drop_corrupt(&self, key: &PageKey, seen: Entry, reason: &Invalid) {
        if self.with_index(|idx| idx.remove_if(key, seen.generation)) {
            let (region, offset) = self.regions.geometry().locate(seen.slot);
            tracing::warn!(path = %self.regions.path(region).display(), offset, %reason, "disk tier: dropping damaged page");
            self.counters.corrupt();
        }
    }
}

/// Takes the directory's lock, or fails with a clear error when another
/// process (or another tier in this process) holds it.
pub fn lock_dir(dir: &Path) -> std::io::Result<fs::File> {
    use std::os::fd::AsRawFd;
    let path = dir.join("LOCK");
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    // A tier being dropped (its recovery thread finishing, a server shutting
    // down in this process) releases the lock within moments: wait up to 2 s
    // before calling the directory taken.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        // SAFETY: flock on a descriptor we own; no memory is shared with the call.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(file);
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != ErrorKind::WouldBlock {
            return Err(err);
        }
        if std::time::Instant::now() >= deadline {
            return Err(std::io::Error::new(
                ErrorKind::WouldBlock,
                format!(
                    "the disk cache in {} is in use by another process (another silt serve on the same --cache-dir?)",
                    dir.display()
                ),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
