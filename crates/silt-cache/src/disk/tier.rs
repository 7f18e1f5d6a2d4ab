//! [`DiskTier`]: get/put/drop of page files, coordinated with the index.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use super::format::{self, Invalid, Verified, charged_size};
use super::full::{WritePause, is_out_of_space};
use super::index::{Admission, Adopted, Finished, Index};
use super::io::{PageIo, remove_quietly};
use super::metrics::Counters;
use super::{DiskConfig, DiskMetrics, DiskStats, recovery};
use crate::page_cache::PageKey;

/// Names temporary files uniquely within the process (with the pid, across processes).
static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The disk page tier: pages of object bytes as files under one directory,
/// within a byte budget, verified on every read, and recovered at restart.
///
/// All methods block on file I/O; async callers run them in
/// `tokio::task::spawn_blocking`. Errors are never returned from `get`/`put`:
/// a cache that cannot read or write degrades to misses, logs a warning and
/// counts the failure, and the query goes to the object store.
pub struct DiskTier {
    pages_dir: PathBuf,
    tmp_dir: PathBuf,
    budget_bytes: u64,
    index: Mutex<Index>,
    io: PageIo,
    counters: Counters,
    /// True until recovery has scanned every page file.
    recovering: AtomicBool,
    recovered: Mutex<bool>,
    recovered_cv: Condvar,
    /// Writes paused while the cache disk is full.
    pause: WritePause,
    /// Holds an exclusive `flock` on `<dir>/LOCK` for the tier's lifetime:
    /// a second process on the same directory would delete this one's
    /// temporary files and evict its pages behind its back.
    _lock: fs::File,
}

impl DiskTier {
    /// Opens (creating if needed) the tier in `config.dir`, deletes leftover
    /// temporary files, and starts rebuilding the index from the page files on
    /// a background thread; returns at once, and the tier serves reads while
    /// recovery runs (see [`get`](Self::get)).
    pub fn open(config: DiskConfig, metrics: DiskMetrics) -> std::io::Result<Arc<DiskTier>> {
        let tier = Self::create(config, metrics)?;
        recovery::spawn(&tier)?;
        Ok(tier)
    }

    /// `open` without starting recovery (tests start it when they choose).
    pub(super) fn create(config: DiskConfig, metrics: DiskMetrics) -> std::io::Result<Arc<DiskTier>> {
        let pages_dir = config.dir.join("pages");
        let tmp_dir = config.dir.join("tmp");
        for shard in 0..256 {
            fs::create_dir_all(pages_dir.join(format!("{shard:02x}")))?;
        }
        fs::create_dir_all(&tmp_dir)?;
        let lock = lock_dir(&config.dir)?;
        let mut leftovers = 0;
        for entry in fs::read_dir(&tmp_dir)? {
            let path = entry?.path();
            match remove_quietly(&path) {
                Ok(()) => leftovers += 1,
                Err(e) => tracing::warn!(path = %path.display(), error = %e, "disk tier: cannot delete temporary file"),
            }
        }
        if leftovers > 0 {
            tracing::info!(leftovers, dir = %tmp_dir.display(), "disk tier: deleted unfinished page writes");
        }
        let tier = Arc::new(DiskTier {
            pages_dir,
            tmp_dir,
            budget_bytes: config.budget_bytes,
            index: Mutex::new(Index::new(
                config.budget_bytes,
                config.policy,
                config.reservations.clone(),
            )),
            io: PageIo::new(config.direct_io),
            counters: Counters::new(metrics),
            recovering: AtomicBool::new(true),
            recovered: Mutex::new(false),
            recovered_cv: Condvar::new(),
            pause: WritePause::new(),
            _lock: lock,
        });
        Ok(tier)
    }

    /// The verified bytes of `key`'s page, or `None` on a miss.
    ///
    /// Every read checks the header checksum, the key (a file-name hash
    /// collision is a miss), the length and the data CRC32C; a page that
    /// fails is deleted and counted in `corrupt_pages`. While recovery runs,
    /// a key not in the index yet is looked up by its file directly (and
    /// taken into the index when valid), so restarts do not cause misses.
    pub fn get(&self, key: &PageKey) -> Option<Bytes> {
        let found = self.read(key);
        match &found {
            Some(data) => self.counters.hit(data.len() as u64),
            None => self.counters.miss(),
        }
        found
    }

    fn read(&self, key: &PageKey) -> Option<Bytes> {
        let seen = self.lock().access(key);
        if seen.is_none() && self.recovery_done() {
            return None;
        }
        let path = self.page_path(key);
        match self.io.read(&path) {
            Ok(file) => match format::verify(&file, key) {
                Ok(Verified::Page(range, cost)) => {
                    if seen.is_none() {
                        self.adopt_found(key, &path, (range.end - range.start) as u64, cost);
                    }
                    Some(file.slice(range))
                }
                Ok(Verified::OtherKey) => {
                    self.forget_vanished(key, seen);
                    None
                }
                Err(reason) => {
                    self.drop_corrupt(key, seen.map(|e| (e.generation, e.writing)), &path, &reason);
                    None
                }
            },
            Err(e) if e.kind() == ErrorKind::NotFound => {
                self.forget_vanished(key, seen);
                None
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "disk tier: cannot read page");
                None
            }
        }
    }

    /// Stores `data` as `key`'s page, best effort: evicts pages to make room
    /// first, so the files never exceed the budget by more than the pages
    /// being written. `cost` is the estimated time in ns to fetch the page
    /// again (its share of the GET that brought it, see
    /// [`CostModel::share_of_request`](crate::policy::CostModel::share_of_request)):
    /// the caller measured that GET, the tier could not. It orders
    /// `weighted-lfu` and is kept in the page header, so it survives restarts.
    /// A page already stored (or being written) is not rewritten, and a page
    /// larger than the whole budget is not stored. Failures are logged and
    /// counted, never returned; a full disk pauses writes for a while
    /// (see [`super::full`]).
    pub fn put(&self, key: PageKey, data: &[u8], cost: f64) {
        if self.pause.is_paused() {
            return;
        }
        let size = charged_size(data.len() as u64);
        if size > self.budget_bytes {
            tracing::debug!(
                size,
                budget = self.budget_bytes,
                "disk tier: page larger than the budget"
            );
            return;
        }
        let Some(header) = format::encode_header(&key, data, cost) else {
            tracing::warn!(path = %key.object.path, "disk tier: key too long for a page header");
            self.counters.write_error();
            return;
        };
        let Some(admission) = self.with_index(|idx| idx.reserve(&key, size, cost)) else {
            return;
        };
        let Some(generation) = self.apply(admission) else {
            return;
        };
        let tmp = self.tmp_dir.join(format!(
            "{}-{}.tmp",
            std::process::id(),
            TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let dest = self.page_path(&key);
        let written = self.io.write(&tmp, &dest, &header, data);
        match &written {
            Ok(()) => self.pause.written(&self.pages_dir),
            Err(e) if is_out_of_space(e) => {
                self.pause.disk_full(&self.pages_dir, e);
                self.counters.write_error();
            }
            Err(e) => {
                tracing::warn!(path = %dest.display(), error = %e, "disk tier: cannot write page");
                self.counters.write_error();
            }
        }
        if self.with_index(|idx| idx.finish_write(&key, generation, written.is_ok())) == Finished::Orphaned {
            self.unlink(&dest);
        }
    }

    /// Deletes the pages of object (`store`, `path`) whose version is not
    /// `keep_version` (the object changed; old pages can never be read
    /// again) and returns how many were indexed. Uses the per-object index,
    /// so it costs the number of pages of that object. While recovery runs,
    /// old pages it has not reached yet are deleted when it reaches them.
    pub fn drop_other_versions(&self, store: &str, path: &str, keep_version: &str) -> usize {
        let dropped = self.with_index(|idx| idx.drop_other_versions(store, path, keep_version));
        for key in &dropped {
            self.unlink(&self.page_path(key));
        }
        dropped.len()
    }

    /// Counts `bytes` fetched from below after a disk miss. `get` cannot know
    /// the size of a page it does not have, so the caller reports it, as the
    /// memory tier counts the bytes it fetched.
    pub fn record_miss_bytes(&self, bytes: u64) {
        self.counters.miss_bytes(bytes);
    }

    /// One [`Segment`](crate::Segment) per page held. Walks the index under
    /// its lock: for introspection, not for query paths.
    pub fn segments(&self) -> Vec<crate::Segment> {
        let pages = self.lock().pages();
        pages
            .iter()
            .map(|(key, size)| crate::Segment::page("disk", key, *size))
            .collect()
    }

    /// Bytes charged to the budget: per page, a 4 KiB header block plus the
    /// data rounded up to 4 KiB (pages being written included).
    pub fn used_bytes(&self) -> u64 {
        self.lock().used_bytes()
    }

    /// The configured budget in bytes.
    pub fn budget_bytes(&self) -> u64 {
        self.budget_bytes
    }

    /// Pages in the index.
    pub fn page_count(&self) -> usize {
        self.lock().len()
    }

    /// Whether recovery has scanned every page file of the previous run.
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
        self.io.is_direct()
    }

    /// A snapshot of the counters and sizes.
    pub fn stats(&self) -> DiskStats {
        let (used_bytes, pages) = self.with_index(|idx| (idx.used_bytes(), idx.len() as u64));
        DiskStats {
            used_bytes,
            budget_bytes: self.budget_bytes,
            pages,
            recovery_done: self.recovery_done(),
            ..self.counters.snapshot()
        }
    }

    // ---- shared with recovery ----

    pub(super) fn pages_dir(&self) -> &Path {
        &self.pages_dir
    }

    pub(super) fn page_path(&self, key: &PageKey) -> PathBuf {
        self.pages_dir.join(format::relative_path(key))
    }

    /// Takes page files found by recovery (key, charged size, stored cost,
    /// path) into the index, in one lock.
    pub(super) fn adopt_recovered(&self, found: Vec<(PageKey, u64, Option<f64>, PathBuf)>) {
        let mut reject = Vec::new();
        let mut evicted = Vec::new();
        let mut recovered = 0;
        self.with_index(|idx| {
            for (key, size, cost, path) in found {
                match idx.adopt(&key, size, cost) {
                    Adopted::Admitted(a) => {
                        recovered += 1;
                        evicted.push(a);
                    }
                    Adopted::Present => {}
                    Adopted::Rejected(a) => {
                        reject.push(path);
                        evicted.push(a);
                    }
                }
            }
        });
        self.counters.recovered(recovered);
        for admission in evicted {
            self.apply(admission);
        }
        for path in reject {
            self.unlink(&path);
        }
    }

    /// Deletes a file recovery found unusable, and counts it.
    pub(super) fn drop_unrecoverable(&self, path: &Path, reason: &Invalid) {
        tracing::warn!(path = %path.display(), %reason, "disk tier: dropping damaged page file");
        self.counters.corrupt();
        self.counters.recovered_dropped();
        self.unlink(path);
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

    /// Counts evictions and deletes the files an admission gave up (after
    /// the index lock is released); returns the new entry's generation.
    fn apply(&self, admission: Admission) -> Option<u64> {
        self.counters.evictions(admission.evicted);
        self.counters.reserved_evictions(admission.reserved_evicted);
        for key in &admission.unlink {
            self.unlink(&self.page_path(key));
        }
        admission.generation
    }

    fn unlink(&self, path: &Path) {
        if let Err(e) = remove_quietly(path) {
            tracing::warn!(path = %path.display(), error = %e, "disk tier: cannot delete page file");
        }
    }

    /// A valid file read while recovery runs, for a key not indexed yet.
    fn adopt_found(&self, key: &PageKey, path: &Path, data_len: u64, cost: Option<f64>) {
        match self.with_index(|idx| idx.adopt(key, charged_size(data_len), cost)) {
            Adopted::Admitted(a) => {
                self.counters.recovered(1);
                self.apply(a);
            }
            Adopted::Present => {}
            Adopted::Rejected(a) => {
                self.apply(a);
                self.unlink(path);
            }
        }
    }

    /// The file of an indexed page is gone (or holds another key): forget the
    /// entry, unless a write has replaced it since it was looked up.
    fn forget_vanished(&self, key: &PageKey, seen: Option<super::index::Entry>) {
        if let Some(e) = seen.filter(|e| !e.writing) {
            self.with_index(|idx| idx.remove_if(key, e.generation));
        }
    }

    /// A page failed verification: count it, forget it and delete the file,
    /// unless a write has replaced (or is replacing) it since it was looked
    /// up. `seen` is the entry's (generation, writing) at lookup.
    fn drop_corrupt(&self, key: &PageKey, seen: Option<(u64, bool)>, path: &Path, reason: &Invalid) {
        tracing::warn!(path = %path.display(), %reason, "disk tier: dropping damaged page");
        self.counters.corrupt();
        let delete = self.with_index(|idx| match seen {
            Some((_, true)) => false,
            Some((generation, false)) => idx.remove_if(key, generation),
            None => idx.get(key).is_none(),
        });
        if delete {
            self.unlink(path);
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
