//! The background transcoder: the [`TranscodePolicy`] that turns admitted
//! Arrow column batches into the liquid form, with a bounded share of one core.
//!
//! Queries never wait for it: the scan admits Arrow and uses whichever form
//! an entry has when it reads it. The worker is one OS thread blocked on a
//! channel (no polling: an idle server spends no CPU here); after each batch
//! it sleeps in proportion to the time it worked, so it uses at most
//! [`CPU_SHARE`] of a core even under a flood of admissions. When its queue is
//! full, further admissions simply stay Arrow. A panic in an encoder is caught
//! and logged: that batch stays Arrow and the worker carries on.
//!
//! A wide cold scan (ClickBench's `SELECT *`: 105 columns) admits Arrow far
//! faster than half a core encodes it; left to the worker, gigabytes of Arrow
//! would wait in the tier for their turn. So once [`INLINE_AFTER_BYTES`] of
//! admitted Arrow await the worker, further admissions are encoded on the
//! admitting (query) thread, "at decode time": the query pays the encoding,
//! and the Arrow held at once stays about one row group's worth. Both paths
//! share the per-column encoders (and so the shared dictionaries). Scans ask
//! [`TranscodePolicy::behind`] first: a chunk they read for the first time
//! while the worker is behind is not admitted at all (`crate::FirstTouches`),
//! so only chunks read again pay the inline encoding.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Weak};

use arrow::array::{Array, ArrayRef};
use parking_lot::Mutex;
use std::time::{Duration, Instant};

use silt_liquid::ColumnEncoder;

use crate::column_cache::{ColumnCache, TranscodePolicy};
use crate::column_uses::ColumnUses;
use crate::{BatchKey, CachedColumn, MemoryForm, ObjectKey};

/// Fraction of one core the transcoder may use (on the 2-core machines we
/// target, a quarter of the CPU: queries keep the rest).
pub const CPU_SHARE: f64 = 0.5;

/// The worker thread's nice value (Linux, where nice is per thread): below
/// the query threads' (0), so while queries want the cores (a cold scan
/// decoding what it fetched) the scheduler gives the worker about a tenth
/// of its share, and it catches up when they idle. Profiles of cold TPC-H
/// queries on 2 cores put it at ~15% of the server's CPU samples during the
/// query at equal priority.
pub const WORKER_NICE: i32 = 10;

/// Column batches waiting at most; beyond this, admissions stay Arrow.
const QUEUE: usize = 1 << 16;

/// Columns whose encoders (FSST symbol tables, shared dictionaries) are
/// kept between batches; the least recently used goes first. One encoder
/// serves every row group of a file's column, so a scan of a wide table
/// (105 columns for ClickBench's `SELECT *`) keeps all its dictionaries.
const ENCODERS: usize = 256;

/// Bytes the kept encoders may hold together (a shared dictionary indexes
/// its values: up to [`silt_liquid::shared_dict::MAX_ENTRIES`] of them);
/// beyond it the least recently used encoders are dropped. A dropped
/// column's next batches start a new dictionary: more memory, still correct.
const ENCODER_BYTES: usize = 256 << 20;

/// Arrow bytes waiting for the worker beyond which admissions are encoded
/// inline: about one row group (128 Ki rows) of a 100-column table.
pub const INLINE_AFTER_BYTES: usize = 64 << 20;

/// With no batch to transcode and no inline encode for this long, the
/// encoders are dropped: the scans that admitted their chunks are over.
const IDLE: Duration = Duration::from_secs(1);

/// Encodes every admitted batch of a type liquid supports, at admission (not
/// only under memory pressure), on one background thread. Held by its
/// [`ColumnCache`]; dropping it stops the worker.
pub struct LiquidTranscoder {
    tx: SyncSender<(BatchKey, usize)>,
    backlog: Arc<AtomicUsize>,
    /// Arrow bytes queued and not yet taken up by the worker.
    queued_bytes: Arc<AtomicUsize>,
    /// Queued Arrow bytes beyond which admissions are encoded inline.
    inline_after: usize,
    encoders: Arc<Mutex<Encoders>>,
    /// How scans read each column: the form of its segments.
    uses: Arc<ColumnUses>,
}

impl LiquidTranscoder {
    /// Starts the worker for `cache` (a [`crate::ColumnCacheBuilder::transcode`] factory).
    pub fn start(cache: Weak<ColumnCache>) -> Box<dyn TranscodePolicy> {
        Box::new(Self::spawn(cache, INLINE_AFTER_BYTES))
    }

    /// A factory like [`Self::start`] with another inline threshold than
    /// [`INLINE_AFTER_BYTES`] (0: every admission is encoded inline).
    pub fn start_with_inline_after(inline_after: usize) -> impl FnOnce(Weak<ColumnCache>) -> Box<dyn TranscodePolicy> {
        move |cache| Box::new(Self::spawn(cache, inline_after)) as Box<dyn TranscodePolicy>
    }

    fn spawn(cache: Weak<ColumnCache>, inline_after: usize) -> Self {
        let (tx, rx) = sync_channel(QUEUE);
        let transcoder = LiquidTranscoder {
            tx,
            backlog: Arc::default(),
            queued_bytes: Arc::default(),
            inline_after,
            encoders: Arc::default(),
            uses: Arc::default(),
        };
        let worker = Worker {
            cache,
            rx,
            backlog: transcoder.backlog.clone(),
            queued_bytes: transcoder.queued_bytes.clone(),
            encoders: transcoder.encoders.clone(),
            uses: transcoder.uses.clone(),
        };
        let spawned = std::thread::Builder::new()
            .name("silt-transcoder".into())
            .spawn(move || worker.run());
        if let Err(e) = spawned {
            // Without a worker every entry stays Arrow: slower, still correct.
            tracing::warn!("cannot start the liquid transcoder: {e}");
        }
        transcoder
    }
}

impl TranscodePolicy for LiquidTranscoder {
    fn form(&self) -> MemoryForm {
        MemoryForm::Liquid
    }

    /// Queues `key` for transcoding (when full, the batch stays Arrow).
    fn admitted(&self, key: &BatchKey, column: &ArrayRef) {
        if !silt_liquid::is_supported(column.data_type()) {
            return;
        }
        let bytes = column.get_array_memory_size();
        self.backlog.fetch_add(1, Ordering::Relaxed);
        self.queued_bytes.fetch_add(bytes, Ordering::Relaxed);
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send((key.clone(), bytes)) {
            self.backlog.fetch_sub(1, Ordering::Relaxed);
            self.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    /// Encodes on the admitting thread once `inline_after` bytes of Arrow
    /// wait for the worker, or its queue is full (many small batches).
    /// It may wait on a column's encoder lock while the worker encodes that
    /// column (a short, bounded wait; nothing awaits while holding a lock). A batch whose liquid form is not smaller, or
    /// whose encoder panics (caught), is admitted as final Arrow, as the
    /// worker would leave it.
    fn encode_inline(&self, key: &BatchKey, column: &ArrayRef) -> Option<CachedColumn> {
        if !silt_liquid::is_supported(column.data_type()) || !self.behind() {
            return None;
        }
        let encoded =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| encode(&self.encoders, &self.uses, key, column)))
            .unwrap_or_else(|_| {
                tracing::error!(path = %key.object.path, column = key.column, "encoding a column batch inline panicked; it stays Arrow");
                // The encoder may be half-updated: no one may use it again.
                reset(&self.encoders);
                None
            });
        // Not smaller as liquid (or the encoder failed): Arrow is final, the
        // worker would only repeat the attempt.
        Some(encoded.unwrap_or_else(|| CachedColumn::Arrow(column.clone())))
    }

    /// `inline_after` bytes of Arrow wait for the worker, or its queue is full.
    fn behind(&self) -> bool {
        self.queued_bytes.load(Ordering::Relaxed) >= self.inline_after || self.backlog.load(Ordering::Relaxed) >= QUEUE
    }

    fn backlog(&self) -> usize {
        self.backlog.load(Ordering::Relaxed)
    }

    fn note_use(&self, object: &ObjectKey, column: u32, value_use: silt_liquid::ValueUse) {
        self.uses.note(object, column, value_use);
    }
}

/// The column of a file (object version) a batch belongs to: its key
/// without the row group and batch index.
type ColumnKey = (crate::ObjectKey, u32);

/// The background thread's end of a [`LiquidTranscoder`].
struct Worker {
    cache: Weak<ColumnCache>,
    rx: Receiver<(BatchKey, usize)>,
    backlog: Arc<AtomicUsize>,
    queued_bytes: Arc<AtomicUsize>,
    encoders: Arc<Mutex<Encoders>>,
    uses: Arc<ColumnUses>,
}

impl Worker {
    fn run(self) {
        lower_this_threads_priority(WORKER_NICE);
        loop {
            let (key, bytes) = match self.rx.recv_timeout(IDLE) {
                Ok(item) => item,
                Err(RecvTimeoutError::Timeout) => {
                    // Idle only if no inline encode used them either; dropped
                    // outside the lock (a full map holds up to 256 MiB).
                    let idle = {
                        let mut encoders = self.encoders.lock();
                        match encoders.last_used {
                            Some(t) if t.elapsed() < IDLE => Encoders::default(),
                            _ => std::mem::take(&mut *encoders),
                        }
                    };
                    drop(idle);
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            };
            self.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
            let started = Instant::now();
            let Some(cache) = self.cache.upgrade() else {
                return;
            };
            let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                transcode(&cache, &key, &self.encoders, &self.uses)
            }));
            if done.is_err() {
                tracing::error!(path = %key.object.path, column = key.column, "transcoding a column batch panicked; it stays Arrow");
                reset(&self.encoders);
            }
            // The last batch queued: what stayed Arrow stays Arrow. Before
            // the backlog reads 0, so whoever waits for it finds the chunks
            // squeezed ahead already offered.
            if self.backlog.load(Ordering::Relaxed) == 1 {
                cache.squeeze_ahead_sweep(true);
            }
            drop(cache);
            self.backlog.fetch_sub(1, Ordering::Relaxed);
            let worked = started.elapsed();
            std::thread::sleep(
                worked
                    .mul_f64((1.0 - CPU_SHARE) / CPU_SHARE)
                    .min(Duration::from_millis(100)),
            );
        }
    }
}

/// The encoders of the columns being transcoded, at most [`ENCODERS`] and
/// [`ENCODER_BYTES`], least recently used dropped first.
/// Shared by the worker and inline encodes; each column's encoder has its
/// own lock, so two partitions encode different columns at once.
#[derive(Default)]
struct Encoders {
    map: HashMap<ColumnKey, (Arc<Mutex<ColumnEncoder>>, u64)>,
    uses: u64,
    /// When an encoder was last handed out (worker or inline).
    last_used: Option<Instant>,
}

/// Sets the calling thread's nice value to `nice` (Linux: per thread; a
/// raise needs no privilege). Logged and ignored where it fails: the worker
/// then runs at the server's priority, as it did before. Also the squeeze
/// tier's writer's: background work, like transcoding.
pub(crate) fn lower_this_threads_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid and setpriority take no pointers; `who` = this
        // thread's id names only this thread.
        let done = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, nice)
        };
        if done != 0 {
            tracing::warn!(
                "cannot lower a background thread's priority: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

/// Drops every encoder, outside the lock.
fn reset(encoders: &Mutex<Encoders>) {
    let dropped = std::mem::take(&mut *encoders.lock());
    drop(dropped);
}

impl Encoders {
    /// The encoder of `column`, made for `data_type` if it has none.
    fn get(&mut self, column: ColumnKey, data_type: &arrow::datatypes::DataType) -> Arc<Mutex<ColumnEncoder>> {
        self.uses += 1;
        self.last_used = Some(Instant::now());
        if !self.map.contains_key(&column) {
            self.make_room();
        }
        let (encoder, used) = self
            .map
            .entry(column)
            .or_insert_with(|| (Arc::new(Mutex::new(ColumnEncoder::new(data_type))), 0));
        *used = self.uses;
        encoder.clone()
    }

    /// Drops least recently used encoders until one more fits (an encoder
    /// in use elsewhere counts as empty; it is dropped when its user is done).
    fn make_room(&mut self) {
        let size = |e: &Mutex<ColumnEncoder>| e.try_lock().map_or(0, |e| e.heap_size());
        let mut bytes: usize = self.map.values().map(|(e, _)| size(e)).sum();
        while self.map.len() >= ENCODERS || (!self.map.is_empty() && bytes > ENCODER_BYTES) {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            let Some((dropped, _)) = oldest.and_then(|k| self.map.remove(&k)) else {
                break;
            };
            bytes = bytes.saturating_sub(size(&dropped));
        }
    }
}

/// The liquid form of `array` (`key`'s column), if it has one no larger
/// than the Arrow, built for how scans read the column (`uses`).
fn encode(encoders: &Mutex<Encoders>, uses: &ColumnUses, key: &BatchKey, array: &ArrayRef) -> Option<CachedColumn> {
    let encoder = encoders.lock().get((key.object.clone(), key.column), array.data_type());
    let value_use = uses.get(&key.object, key.column);
    let liquid = {
        let mut encoder = encoder.lock();
        encoder.set_use(value_use);
        encoder.encode(array)?
    };
    let arrow_bytes = array.get_array_memory_size();
    (liquid.heap_size() <= arrow_bytes).then_some(CachedColumn::Liquid {
        array: liquid,
        arrow_bytes,
    })
}

/// Transcodes one entry if it is still the Arrow batch that was admitted,
/// keeping the liquid form only when it is no larger.
fn transcode(cache: &ColumnCache, key: &BatchKey, encoders: &Mutex<Encoders>, uses: &ColumnUses) {
    let Some(CachedColumn::Arrow(array)) = cache.peek(key) else {
        return; // evicted, invalidated or already liquid
    };
    if let Some(liquid) = encode(encoders, uses, key, &array) {
        cache.replace_with_liquid(key, &array, liquid);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use arrow::array::{ArrayRef, Int64Array};

    use super::*;
    use crate::ObjectKey;
    use crate::column_cache::ColumnCache;
    use crate::page_cache::CacheMetrics;
    use crate::{BatchKey, CachedColumn};

    /// Nice values of this process's threads named `name` (from `/proc`).
    fn nice_of_threads_named(name: &str) -> Vec<i32> {
        let mut found = Vec::new();
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim_end() != name {
                continue;
            }
            let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
                continue; // the thread ended meanwhile
            };
            // Fields after the parenthesised name: state is field 3, nice 19.
            let after = &stat[stat.rfind(')').unwrap() + 2..];
            found.push(after.split(' ').nth(16).unwrap().parse().unwrap());
        }
        found
    }

    /// The same batches of mostly-long URLs, transcoded for a column scans
    /// only filter on and for one they project: the first's shared segments
    /// take zstd blocks (smaller, though charged the column's 64 KiB zstd
    /// dictionary once), the second's stay FSST, and both decode exactly.
    #[test]
    fn a_column_scans_only_filter_on_takes_the_smaller_segments() {
        use arrow::array::StringViewArray;
        use silt_liquid::ValueUse;
        let cache = ColumnCache::builder(1 << 30, CacheMetrics::noop())
            .transcode(LiquidTranscoder::start)
            .build();
        let object = ObjectKey::new("s", "t/a.parquet", "v1");
        // Each batch shares half its values with the one before.
        let batch = |b: usize| -> ArrayRef {
            let rows = (0..8192).map(|i| {
                let v = b * 1500 + (i * 31) % 3000;
                let mix = (v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
                Some(format!(
                    "https://www.example{}.com/catalog/{}/item-{v:05}?session={mix:x}",
                    v % 7,
                    v % 40
                ))
            });
            Arc::new(StringViewArray::from_iter(rows))
        };
        cache.note_use(&object, 0, ValueUse::Filtered);
        cache.note_use(&object, 1, ValueUse::Filtered);
        cache.note_use(&object, 1, ValueUse::Taken);
        let key = |column, batch| BatchKey {
            object: object.clone(),
            row_group: 0,
            column,
            batch,
        };
        const BATCHES: u32 = 8;
        for b in 0..BATCHES {
            for column in [0, 1] {
                cache.insert(key(column, b), CachedColumn::Arrow(batch(b as usize)));
            }
            // In order, so each batch finds the dictionary the earlier ones built.
            assert!(cache.wait_transcoded(Duration::from_secs(60)));
        }
        let bytes = |column| {
            (0..BATCHES)
                .map(|b| match cache.peek(&key(column, b)) {
                    Some(CachedColumn::Liquid { array: liquid, .. }) => {
                        assert_eq!(&liquid.to_arrow(), &batch(b as usize), "column {column}, batch {b}");
                        liquid.heap_size()
                    }
                    other => panic!("column {column}, batch {b}: {other:?}"),
                })
                .sum::<usize>()
        };
        let (filtered, taken) = (bytes(0), bytes(1));
        assert!(filtered < taken, "filtered {filtered} bytes, taken {taken}");
    }

    #[test]
    fn the_worker_runs_below_the_query_threads_priority() {
        let cache = ColumnCache::builder(1 << 30, CacheMetrics::noop())
            .transcode(LiquidTranscoder::start)
            .build();
        let key = BatchKey {
            object: ObjectKey::new("s", "t/a.parquet", "v1"),
            row_group: 0,
            column: 0,
            batch: 0,
        };
        let array: ArrayRef = Arc::new(Int64Array::from_iter_values(0..8192));
        cache.insert(key, CachedColumn::Arrow(array));
        // The worker lowered its priority before it took its first batch.
        assert!(cache.wait_transcoded(Duration::from_secs(30)));
        // Other tests' workers may be starting now: each sets its nice first thing.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let nices = nice_of_threads_named("silt-transcoder");
            assert!(!nices.is_empty(), "no transcoder thread found");
            if nices.iter().all(|&n| n == WORKER_NICE) {
                break;
            }
            assert!(Instant::now() < deadline, "transcoder threads' nice values: {nices:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
