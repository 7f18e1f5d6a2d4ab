//! `ColumnCache`, the memory tier: decoded column batches, budgeted by their
//! real buffer sizes.
//!
//! The form an admitted Arrow batch ends up in is not the cache's business:
//! a [`TranscodePolicy`] injected by the builder decides (the liquid
//! transcoder, `crate::transcoder`, encodes at admission in the background;
//! without one, batches stay Arrow). The cache only offers the policy a safe
//! swap ([`ColumnCache::replace_with_liquid`]).
//!
//! A query that finds its columns here skips the object store, the disk and
//! Parquet decoding alike; this is what makes a warm pushdown scan cost only
//! its filter. Entries are one column of one batch of up to
//! [`BATCH_ROWS`](crate::BATCH_ROWS) rows of one row group of one object version, so a query
//! touching two columns of a wide table keeps only those two in memory.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};

use arrow::array::{Array, ArrayRef};

use crate::decode_flights::DecodeFlights;
use crate::first_touch::FirstTouches;
use crate::held::{Held, HeldUnit};
use crate::page_cache::CacheMetrics;
use crate::policy::{BudgetedCache, PolicyKind, Reservations};
use crate::scan_sets::{MemoryResidency, ScanSets};
use crate::squeeze::Squeezed;
use crate::squeeze_ahead::AheadMarks;
use crate::{BatchKey, CachedColumn, ChunkKey, MemoryForm, ObjectKey};

/// A column of a store's table: (store, column index).
type ColumnId = (Arc<str>, u32);

/// Memory held by one column of one store in one form.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColumnUsage {
    /// The store (one per table).
    pub store: Arc<str>,
    /// Column index in the table.
    pub column: u32,
    /// Column name, once a scan has named it.
    pub name: Option<Arc<str>>,
    /// `"arrow"` or `"liquid"`.
    pub form: &'static str,
    /// Column batches held.
    pub batches: u64,
    /// Heap bytes held.
    pub bytes: u64,
    /// Heap bytes the same batches take as Arrow.
    pub arrow_bytes: u64,
}

/// Decides what becomes of column batches admitted in Arrow form: the
/// policy of a [`ColumnCache`], injected by [`ColumnCacheBuilder::transcode`].
pub trait TranscodePolicy: Send + Sync {
    /// The form the cache's entries end up in.
    fn form(&self) -> MemoryForm;

    /// `key` was just admitted as the Arrow `column`: encode it now, later
    /// or never. Must not block the admitting query.
    fn admitted(&self, key: &BatchKey, column: &ArrayRef);

    /// Called before `column` is admitted: its final form now, encoded on
    /// the admitting thread, when waiting for the background would let too
    /// much Arrow pile up (a wide cold scan outrunning the worker); `None`
    /// admits it as Arrow. The default never encodes inline.
    fn encode_inline(&self, _key: &BatchKey, _column: &ArrayRef) -> Option<CachedColumn> {
        None
    }

    /// Whether an admission now would be encoded inline (the background is
    /// behind): scans then skip admitting chunks read for the first time
    /// ([`crate::FirstTouches`]). The default never is.
    fn behind(&self) -> bool {
        false
    }

    /// Batches admitted and not yet in their final form.
    fn backlog(&self) -> usize;

    /// A scan read `column` of `object` as `value_use` (filtered on, or
    /// projected), for the form of the batches it encodes later
    /// ([`crate::column_uses`]). The default ignores it.
    fn note_use(&self, _object: &ObjectKey, _column: u32, _value_use: silt_liquid::ValueUse) {}
}

/// Makes a cache's [`TranscodePolicy`], given the cache (weakly: the policy
/// must not keep the cache alive).
pub type TranscodePolicyFactory = Box<dyn FnOnce(Weak<ColumnCache>) -> Box<dyn TranscodePolicy>>;

/// The entries and their budget, under one lock.
struct Entries {
    values: HashMap<BatchKey, CachedColumn>,
    /// The batches held of each column chunk. A scan reads a chunk whole
    /// from memory or decodes all of it again (`ColumnLoader::load`), so a
    /// chunk an eviction broke holds dead bytes: its other batches go too
    /// ([`Entries::drop_evicted`]).
    chunks: HashMap<ChunkKey, Vec<u32>>,
    budget: BudgetedCache<BatchKey>,
}

impl Entries {
    /// Holds `column` at `key` (already admitted to the budget); returns
    /// what it replaced.
    fn put(&mut self, key: BatchKey, column: CachedColumn) -> Option<CachedColumn> {
        let batches = self.chunks.entry(key.chunk()).or_default();
        if !batches.contains(&key.batch) {
            batches.push(key.batch);
        }
        self.values.insert(key, column)
    }

    /// Lets go of `key`'s value (already out of the budget).
    fn take(&mut self, key: &BatchKey) -> Option<CachedColumn> {
        let chunk = key.chunk();
        if let Some(batches) = self.chunks.get_mut(&chunk) {
            batches.retain(|&b| b != key.batch);
            if batches.is_empty() {
                self.chunks.remove(&chunk);
            }
        }
        self.values.remove(key)
    }

    /// Lets go of the budget's `victims` and of every other batch of their
    /// column chunks (but `keep`, the batch being admitted); returns the
    /// batches and how many went beyond the victims.
    fn drop_evicted(&mut self, victims: &[BatchKey], keep: Option<&BatchKey>) -> (Vec<(BatchKey, CachedColumn)>, u64) {
        let (mut dropped, mut siblings) = (Vec::new(), 0);
        for victim in victims {
            dropped.extend(self.take(victim).map(|v| (victim.clone(), v)));
            let Some(batches) = self.chunks.get(&victim.chunk()).cloned() else {
                continue;
            };
            for batch in batches {
                let sibling = BatchKey {
                    batch,
                    ..victim.clone()
                };
                if Some(&sibling) != keep && self.budget.remove(&sibling).is_some() {
                    dropped.extend(self.take(&sibling).map(|v| (sibling, v)));
                    siblings += 1;
                }
            }
        }
        (dropped, siblings)
    }
}

/// The byte-budgeted map from [`BatchKey`] to [`CachedColumn`], shared by
/// every table of a server. Eviction is plan-aware (see [`ScanSets`] and
/// [`BudgetedCache`]): batches that registered scans will still read are
/// `Reserved` and go last; the rest (`Cached`) go by the configured policy
/// (`--memory-policy`, default `s3-fifo`: a one-off scan of a large table
/// does not flush the columns hot queries keep using). Build with
/// [`ColumnCache::builder`].
pub struct ColumnCache {
    entries: Mutex<Entries>,
    capacity: u64,
    pub(crate) metrics: CacheMetrics,
    /// The scan sets the eviction consults (when plan-aware) and scans register in.
    scan_sets: Arc<ScanSets>,
    /// Column chunks being decoded (one decode per chunk at a time).
    decodes: DecodeFlights,
    /// Column chunks read once without admission (admitted on the next read).
    first_touches: FirstTouches,
    /// What becomes of admitted Arrow batches; none keeps them Arrow.
    policy: Option<Box<dyn TranscodePolicy>>,
    /// Column names per (store, column index), for stats.
    column_names: RwLock<HashMap<ColumnId, Arc<str>>>,
    /// Where evicted liquid chunks go instead of away, if anywhere.
    squeezed: Option<Arc<Squeezed>>,
    /// Chunks admitted whole waiting for their last transcode to be
    /// squeezed ahead of eviction (`None`: squeezed at eviction only).
    ahead: Option<AheadMarks>,
}

/// Builds a [`ColumnCache`].
pub struct ColumnCacheBuilder {
    capacity: u64,
    metrics: CacheMetrics,
    policy: Option<TranscodePolicyFactory>,
    eviction: PolicyKind,
    scan_sets: Option<Arc<ScanSets>>,
    plan_aware: bool,
    squeezed: Option<Arc<Squeezed>>,
    squeeze_ahead: bool,
}

impl ColumnCacheBuilder {
    /// Admitted Arrow batches go to the policy `make` returns (e.g.
    /// `crate::transcoder::LiquidTranscoder::start`).
    pub fn transcode(mut self, make: impl FnOnce(Weak<ColumnCache>) -> Box<dyn TranscodePolicy> + 'static) -> Self {
        self.policy = Some(Box::new(make));
        self
    }

    /// The policy that orders `Cached` batches (default `s3-fifo`).
    pub fn eviction(mut self, policy: PolicyKind) -> Self {
        self.eviction = policy;
        self
    }

    /// The server's scan sets (one per server, shared with the disk tier);
    /// by default the cache makes its own.
    pub fn scan_sets(mut self, scan_sets: Arc<ScanSets>) -> Self {
        self.scan_sets = Some(scan_sets);
        self
    }

    /// Whether eviction consults the scan sets (default true here; the
    /// server passes its `plan_aware` setting, off by default); false evicts
    /// by the policy alone (the baseline `silt bench mixed` compares with).
    pub fn plan_aware(mut self, on: bool) -> Self {
        self.plan_aware = on;
        self
    }

    /// Liquid column chunks evicted whole go to `squeezed` (on disk, in
    /// their encoded form: [`crate::squeeze`]), and scans that miss a chunk
    /// here read it back from there ([`ColumnCache::restore_squeezed`]).
    pub fn squeeze(mut self, squeezed: Arc<Squeezed>) -> Self {
        self.squeezed = Some(squeezed);
        self
    }

    /// With a squeeze tier: also write each liquid chunk admitted whole
    /// there once all its batches are liquid, before any eviction, so it
    /// survives a restart ([`crate::squeeze_ahead`]; default off here, the
    /// server's `squeeze_ahead` setting is on by default).
    pub fn squeeze_ahead(mut self, on: bool) -> Self {
        self.squeeze_ahead = on;
        self
    }

    pub fn build(self) -> Arc<ColumnCache> {
        let ColumnCacheBuilder {
            capacity,
            metrics,
            policy,
            eviction,
            scan_sets,
            plan_aware,
            squeezed,
            squeeze_ahead,
        } = self;
        let scan_sets = scan_sets.unwrap_or_default();
        let reservations = plan_aware.then(|| scan_sets.clone() as Arc<dyn Reservations<BatchKey>>);
        let entries = Mutex::new(Entries {
            values: HashMap::new(),
            chunks: HashMap::new(),
            budget: BudgetedCache::new(capacity, eviction.build()).with_reservations(reservations),
        });
        Arc::new_cyclic(|me: &Weak<ColumnCache>| {
            scan_sets.attach_memory(me.clone());
            if let (true, Some(squeezed)) = (squeeze_ahead, &squeezed) {
                // What the writer was too far behind to take, offered again.
                let cache = me.clone();
                squeezed.on_idle(move || {
                    if let Some(cache) = cache.upgrade() {
                        cache.squeeze_ahead_sweep(cache.transcode_backlog() == 0);
                    }
                });
            }
            ColumnCache {
                entries,
                capacity,
                metrics,
                scan_sets,
                decodes: DecodeFlights::default(),
                first_touches: FirstTouches::default(),
                policy: policy.map(|make| make(me.clone())),
                column_names: RwLock::default(),
                ahead: (squeeze_ahead && squeezed.is_some()).then(AheadMarks::default),
                squeezed,
            }
        })
    }
}

impl MemoryResidency for ColumnCache {
    fn holds_chunk(&self, chunk: &ChunkKey, batches: u32) -> bool {
        let entries = self.entries.lock();
        let held = entries.chunks.get(chunk).map_or(0, Vec::len);
        held >= usize::try_from(batches).unwrap_or(usize::MAX)
    }
}

impl ColumnCache {
    /// A cache of at most `capacity` bytes, counted in `metrics`.
    pub fn builder(capacity: u64, metrics: CacheMetrics) -> ColumnCacheBuilder {
        ColumnCacheBuilder {
            capacity,
            metrics,
            policy: None,
            eviction: PolicyKind::S3Fifo,
            scan_sets: None,
            plan_aware: true,
            squeezed: None,
            squeeze_ahead: false,
        }
    }

    /// A cache holding at most `capacity` bytes of decoded Arrow columns.
    pub fn new(capacity: u64, metrics: CacheMetrics) -> Arc<Self> {
        Self::builder(capacity, metrics).build()
    }

    /// The form columns are kept in.
    pub fn form(&self) -> MemoryForm {
        self.policy.as_ref().map_or(MemoryForm::Arrow, |p| p.form())
    }

    /// The scan sets scans register in (consulted by eviction when plan-aware).
    pub fn scan_sets(&self) -> &Arc<ScanSets> {
        &self.scan_sets
    }

    /// Column chunks being decoded: a scan claims a chunk before decoding it.
    pub fn decodes(&self) -> &DecodeFlights {
        &self.decodes
    }

    /// Column chunks read once without being admitted (see [`FirstTouches`]).
    pub fn first_touches(&self) -> &FirstTouches {
        &self.first_touches
    }

    /// Whether admitting an Arrow batch now would encode it on the admitting
    /// thread (the transcoder is behind; see [`TranscodePolicy::behind`]).
    pub fn admission_encodes_inline(&self) -> bool {
        self.policy.as_ref().is_some_and(|p| p.behind())
    }

    /// The policy ordering `Cached` batches.
    pub fn policy_name(&self) -> &'static str {
        self.entries.lock().budget.policy_name()
    }

    /// The column batch for `key`, counting a hit or a miss.
    pub fn get(&self, key: &BatchKey) -> Option<CachedColumn> {
        let found = {
            let mut entries = self.entries.lock();
            entries.budget.access(key);
            entries.values.get(key).cloned()
        };
        self.metrics.record_lookup(found.as_ref().map(CachedColumn::heap_size));
        found
    }

    /// Whether `key` is held, without counting a lookup.
    pub fn contains(&self, key: &BatchKey) -> bool {
        self.entries.lock().values.contains_key(key)
    }

    /// Admits a decoded column batch, evicting to stay within the budget
    /// (plan-aware). An entry larger than the whole budget is not kept.
    /// Returns the batch in the form it was admitted in (liquid when the
    /// policy encoded it inline), for the admitting scan to use: a filter
    /// run on the liquid form warms its predicate memos for the next query.
    pub fn insert(&self, key: BatchKey, column: CachedColumn) -> CachedColumn {
        // Liquid already, or encoded inline by the policy: final, not queued.
        let (column, queue) = match column {
            CachedColumn::Arrow(array) => {
                let array = own_view_buffers(array);
                match self.policy.as_ref().and_then(|p| p.encode_inline(&key, &array)) {
                    Some(encoded) => (encoded, false),
                    None => (CachedColumn::Arrow(array), true),
                }
            }
            liquid => (liquid, false),
        };
        let admitted_form = column.clone();
        let size = column.heap_size() as u64;
        self.metrics.miss_bytes.increment(size);
        if size > self.capacity {
            return admitted_form;
        }
        let admitted_arrow = match &column {
            CachedColumn::Arrow(a) if queue => Some(a.clone()),
            _ => None,
        };
        // Values leave the lock before they are dropped (freeing is not free).
        let (insertion, mut dropped, siblings, replaced) = {
            let mut entries = self.entries.lock();
            let insertion = entries.budget.insert(key.clone(), size, size as f64);
            let replaced = entries.take(&key);
            let (dropped, siblings) = entries.drop_evicted(&insertion.evicted, Some(&key));
            if insertion.admitted {
                entries.put(key.clone(), column);
            }
            (insertion, dropped, siblings, replaced)
        };
        if insertion.admitted {
            self.metrics.bytes.increment(size as f64);
        }
        // The evicted chunks, not the batch this one replaced.
        self.squeeze(dropped.iter());
        dropped.extend(replaced.map(|v| (key.clone(), v)));
        self.uncount(&dropped);
        self.metrics
            .evictions
            .increment(insertion.evicted.len() as u64 + siblings);
        self.metrics.reserved_evictions.increment(insertion.reserved_evicted);
        drop(dropped);
        if insertion.admitted
            && let (Some(policy), Some(arrow)) = (&self.policy, admitted_arrow)
        {
            policy.admitted(&key, &arrow);
        }
        admitted_form
    }

    /// The entry for `key` without counting a lookup or a use (the transcoder's read).
    pub(crate) fn peek(&self, key: &BatchKey) -> Option<CachedColumn> {
        self.entries.lock().values.get(key).cloned()
    }

    /// Replaces the Arrow entry `arrow` at `key` by `liquid`, unless the entry
    /// changed meanwhile (evicted, invalidated, readmitted): a transcode never
    /// resurrects or overwrites newer data.
    pub(crate) fn replace_with_liquid(&self, key: &BatchKey, arrow: &ArrayRef, liquid: CachedColumn) {
        let size = liquid.heap_size();
        let replaced = {
            let mut entries = self.entries.lock();
            let current = matches!(entries.values.get(key), Some(CachedColumn::Arrow(a)) if Arc::ptr_eq(a, arrow));
            if current && entries.budget.shrink(key, size as u64) {
                entries.put(key.clone(), liquid)
            } else {
                None
            }
        };
        if let Some(old) = replaced {
            self.metrics.bytes.increment(size as f64);
            self.metrics.bytes.decrement(old.heap_size() as f64);
            self.squeeze_ahead_if_ready(&key.chunk(), false);
        }
    }

    /// `chunk` was just decoded and admitted whole, as `batches` batches:
    /// with squeezing ahead, it goes to the squeeze tier once every batch
    /// is liquid (now, if they already are).
    pub fn admitted_whole(&self, chunk: &ChunkKey, batches: usize) {
        let Some(ahead) = &self.ahead else {
            return;
        };
        if self.form() != MemoryForm::Liquid || batches == 0 {
            return;
        }
        if ahead.mark(chunk.clone(), u32::try_from(batches).unwrap_or(u32::MAX)) {
            // With nothing queued for the transcoder, an Arrow batch stays Arrow.
            self.squeeze_ahead_if_ready(chunk, self.transcode_backlog() == 0);
        }
    }

    /// Offers every marked chunk whose batches are all held and liquid, or
    /// Arrow for good when `arrow_final` (the transcoder's queue is about
    /// to empty: what stayed Arrow stays Arrow). Run by the transcoder then
    /// and by the squeeze tier's writer when its queue empties (chunks it
    /// was too far behind to take).
    pub(crate) fn squeeze_ahead_sweep(&self, arrow_final: bool) {
        if let Some(ahead) = &self.ahead {
            for chunk in ahead.chunks() {
                self.squeeze_ahead_if_ready(&chunk, arrow_final);
            }
        }
    }

    /// Offers marked `chunk` to the squeeze tier (and forgets the mark) if
    /// all its batches are held and liquid, or Arrow for good when
    /// `arrow_final`; forgets the mark if a batch is gone.
    fn squeeze_ahead_if_ready(&self, chunk: &ChunkKey, arrow_final: bool) {
        let (Some(ahead), Some(squeezed)) = (&self.ahead, &self.squeezed) else {
            return;
        };
        let Some(count) = ahead.batches(chunk) else {
            return;
        };
        let held: Option<Vec<CachedColumn>> = {
            let entries = self.entries.lock();
            (0..count)
                .map(|b| entries.values.get(&chunk.batch(b)).cloned())
                .collect()
        };
        match held {
            None => ahead.unmark(chunk),
            Some(batches) if arrow_final || batches.iter().all(|b| matches!(b, CachedColumn::Liquid { .. })) => {
                // Kept marked if the writer is behind: offered again when it idles.
                if squeezed.offer(chunk.clone(), batches) {
                    ahead.unmark(chunk);
                }
            }
            Some(_) => {}
        }
    }

    /// Column batches admitted but not yet transcoded (0 for the Arrow form).
    pub fn transcode_backlog(&self) -> usize {
        self.policy.as_ref().map_or(0, |p| p.backlog())
    }

    /// Blocks until the transcoder's backlog is empty or `timeout` passes;
    /// whether it emptied. For tests and benchmarks that want every entry in
    /// its final form.
    pub fn wait_transcoded(&self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while self.transcode_backlog() > 0 {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        true
    }

    /// A scan read `column` of `object` as `value_use`: its policy builds
    /// the column's later liquid batches for that ([`TranscodePolicy::note_use`]).
    pub fn note_use(&self, object: &ObjectKey, column: u32, value_use: silt_liquid::ValueUse) {
        if let Some(policy) = &self.policy {
            policy.note_use(object, column, value_use);
        }
    }

    /// Names `column` of `store`'s table for [`Self::usage_by_column`] (the
    /// keys hold only indices). The scan calls it for the columns it loads.
    pub fn label_column(&self, store: &Arc<str>, column: u32, name: &str) {
        let key = (store.clone(), column);
        if self.column_names.read().contains_key(&key) {
            return;
        }
        self.column_names.write().insert(key, Arc::from(name));
    }

    /// What the tier holds per (store, column, form): batches, bytes, and
    /// the bytes the same batches take as Arrow (equal for the Arrow form),
    /// sorted by store and column. Walks every entry: for stats, not for
    /// query paths.
    pub fn usage_by_column(&self) -> Vec<ColumnUsage> {
        let mut usage: HashMap<(Arc<str>, u32, &'static str), ColumnUsage> = HashMap::new();
        let names = self.column_names.read();
        for (k, v) in self.snapshot() {
            let u = usage
                .entry((k.object.store.clone(), k.column, v.form()))
                .or_insert_with(|| ColumnUsage {
                    store: k.object.store.clone(),
                    column: k.column,
                    name: names.get(&(k.object.store.clone(), k.column)).cloned(),
                    form: v.form(),
                    ..Default::default()
                });
            u.batches += 1;
            u.bytes += v.heap_size() as u64;
            u.arrow_bytes += v.arrow_bytes() as u64;
        }
        let mut out: Vec<ColumnUsage> = usage.into_values().collect();
        out.sort_by(|a, b| (&a.store, a.column, a.form).cmp(&(&b.store, b.column, b.form)));
        out
    }

    /// One [`HeldUnit`] per column chunk held (its batches summed) per
    /// form, and one per chunk of the squeeze tier (tier `"squeezed"`), in
    /// no particular order. Walks every entry: for introspection, not for
    /// query paths.
    pub fn held_units(&self) -> Vec<HeldUnit> {
        let mut chunks: HashMap<(ChunkKey, &'static str), HeldUnit> = HashMap::new();
        // A copy: scans label columns under the write lock, and this walk is long.
        let names = self.column_names.read().clone();
        for (k, v) in self.snapshot() {
            let form = v.form();
            let s = chunks.entry((k.chunk(), form)).or_insert_with(|| HeldUnit {
                tier: "memory",
                held: Held::Chunk(k.chunk()),
                column_name: names.get(&(k.object.store.clone(), k.column)).cloned(),
                form,
                batches: 0,
                bytes: 0,
                arrow_bytes: 0,
            });
            s.batches += 1;
            s.bytes += v.heap_size() as u64;
            s.arrow_bytes += v.arrow_bytes() as u64;
        }
        let mut held: Vec<HeldUnit> = chunks.into_values().collect();
        for mut unit in self.squeezed.iter().flat_map(|s| s.held_units()) {
            if let Held::Chunk(c) = &unit.held {
                unit.column_name = names.get(&(c.object.store.clone(), c.column)).cloned();
            }
            held.push(unit);
        }
        held
    }

    /// Takes entries that left the tier off its bytes gauge.
    fn uncount(&self, dropped: &[(BatchKey, CachedColumn)]) {
        let freed: usize = dropped.iter().map(|(_, v)| v.heap_size()).sum();
        self.metrics.bytes.decrement(freed as f64);
    }

    /// Offers the chunks among `evicted` that left whole (batches 0 to n) to
    /// the squeeze tier, if there is one and the form is liquid (batches
    /// still Arrow, evicted before the transcoder reached them, are encoded
    /// by the squeeze tier's writer).
    fn squeeze<'a>(&self, evicted: impl Iterator<Item = &'a (BatchKey, CachedColumn)>) {
        let Some(squeezed) = &self.squeezed else {
            return;
        };
        if self.form() != MemoryForm::Liquid {
            return;
        }
        let mut chunks: HashMap<ChunkKey, Vec<(u32, CachedColumn)>> = HashMap::new();
        for (key, value) in evicted {
            chunks.entry(key.chunk()).or_default().push((key.batch, value.clone()));
        }
        for (chunk, mut batches) in chunks {
            if let Some(ahead) = &self.ahead {
                ahead.unmark(&chunk);
            }
            batches.sort_by_key(|(b, _)| *b);
            // Batches 0..n, and not a chunk whose batches are being admitted
            // (by a decode or a read-back, under its claim): evicted while
            // admitted, its first batches would look like all of it.
            let whole =
                batches.iter().enumerate().all(|(i, (b, _))| *b as usize == i) && !self.decodes.is_decoding(&chunk);
            if whole {
                squeezed.offer_evicted(chunk, batches.into_iter().map(|(_, c)| c).collect());
            }
        }
    }

    /// The squeeze tier, if evicted chunks go to one.
    pub fn squeezed(&self) -> Option<&Arc<Squeezed>> {
        self.squeezed.as_ref()
    }

    /// The `batches` batches of `chunk` read back from the squeeze tier and
    /// admitted again, if it holds them all; `None` otherwise (and without
    /// a squeeze tier). Blocks on disk reads: async callers run it in
    /// `spawn_blocking`.
    pub fn restore_squeezed(&self, chunk: &ChunkKey, batches: usize) -> Option<Vec<CachedColumn>> {
        let arrays = self.squeezed.as_ref()?.restore(chunk, batches)?;
        Some(
            arrays
                .into_iter()
                .enumerate()
                .map(|(b, (array, arrow_bytes))| {
                    let column = CachedColumn::Liquid {
                        array,
                        arrow_bytes: arrow_bytes as usize,
                    };
                    self.insert(chunk.batch(b as u32), column)
                })
                .collect(),
        )
    }

    /// Every entry, copied out of the lock (cheap: `Arc`s).
    fn snapshot(&self) -> Vec<(BatchKey, CachedColumn)> {
        let entries = self.entries.lock();
        entries.values.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Drops the batches of `path` in `store` of any version but `keep`.
    pub(crate) fn drop_other_versions(&self, keep: &ObjectKey) {
        let dropped: Vec<(BatchKey, CachedColumn)> = {
            let mut entries = self.entries.lock();
            let keys: Vec<BatchKey> = entries
                .values
                .keys()
                .filter(|k| keep.is_other_version(&k.object))
                .cloned()
                .collect();
            keys.into_iter()
                .filter_map(|k| {
                    entries.budget.remove(&k);
                    entries.take(&k).map(|v| (k, v))
                })
                .collect()
        };
        self.uncount(&dropped);
    }

    /// Entries currently held.
    pub fn entry_count(&self) -> u64 {
        self.entries.lock().values.len() as u64
    }

    /// The configured budget in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The budget in force: the configured one, or less while the machine
    /// is short of memory ([`Self::set_budget`]).
    pub fn budget(&self) -> u64 {
        self.entries.lock().budget.capacity()
    }

    /// Holds the tier to `bytes` (at most the configured budget), evicting
    /// (plan-aware) what no longer fits; the memory-pressure monitor shrinks
    /// the tier this way before the OS has to, and restores it later.
    pub fn set_budget(&self, bytes: u64) {
        let dropped: Vec<(BatchKey, CachedColumn)> = {
            let mut entries = self.entries.lock();
            let shrunk = entries.budget.set_capacity(bytes.min(self.capacity));
            let (dropped, siblings) = entries.drop_evicted(&shrunk.evicted, None);
            self.metrics.evictions.increment(shrunk.evicted.len() as u64 + siblings);
            self.metrics.reserved_evictions.increment(shrunk.reserved_evicted);
            dropped
        };
        self.uncount(&dropped);
        self.squeeze(dropped.iter());
    }

    /// Bytes currently held.
    pub fn weighted_size(&self) -> u64 {
        self.entries.lock().budget.used_bytes()
    }
}

/// `array` with buffers of its own when it is a string or binary view array
/// that points into larger shared buffers (the Parquet reader's batches
/// share the decoded pages' buffers). Such a batch would keep the whole
/// buffer alive and be charged for all of it, once per batch sharing it:
/// the tier reported 382 MiB of Arrow where the process held 266 MB. A
/// compacted copy is charged exactly what it holds, and evicting it frees
/// that memory. Other arrays are returned as they are.
fn own_view_buffers(array: ArrayRef) -> ArrayRef {
    use arrow::array::{AsArray, GenericByteViewArray};
    use arrow::datatypes::{ByteViewType, DataType};
    /// The array compacted, when its data buffers hold more bytes than its
    /// views point at outside themselves (values over 12 bytes).
    fn compacted<T: ByteViewType>(a: &GenericByteViewArray<T>) -> Option<ArrayRef> {
        let held: usize = a.data_buffers().iter().map(|b| b.len()).sum();
        let referenced: usize = a
            .views()
            .iter()
            .map(|v| *v as u32 as usize)
            .filter(|&len| len > 12)
            .sum();
        (held > referenced).then(|| Arc::new(a.gc()) as ArrayRef)
    }
    let compact = match array.data_type() {
        DataType::Utf8View => compacted(array.as_string_view()),
        DataType::BinaryView => compacted(array.as_binary_view()),
        _ => None,
    };
    compact.unwrap_or(array)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BATCH_ROWS;
    use arrow::array::Int64Array;

    fn key(batch: u32, version: &str) -> BatchKey {
        BatchKey {
            object: ObjectKey::new("t0", "a.parquet", version),
            row_group: 0,
            column: 1,
            batch,
        }
    }

    fn column(n: usize) -> CachedColumn {
        CachedColumn::Arrow(Arc::new(Int64Array::from_iter_values(0..n as i64)))
    }

    #[test]
    fn accounts_real_buffer_sizes_and_stays_under_budget() {
        let one = column(BATCH_ROWS).heap_size() as u64;
        assert!(one >= (BATCH_ROWS * 8) as u64, "{one}");
        let cache = ColumnCache::new(one * 3, CacheMetrics::noop());
        for b in 0..10 {
            cache.insert(key(b, "v1"), column(BATCH_ROWS));
            assert!(cache.weighted_size() <= one * 3);
        }
        assert!(cache.weighted_size() > 0);
    }

    #[test]
    fn view_batches_sharing_a_buffer_are_charged_only_their_own_bytes() {
        use arrow::array::{AsArray, StringViewArray};
        // One array of 2 x 8,192 long strings, then two batches sliced from it:
        // both point into the same data buffers.
        let whole =
            StringViewArray::from_iter_values((0..2 * BATCH_ROWS).map(|i| format!("a long enough value {i:08}")));
        let whole: ArrayRef = Arc::new(whole);
        let (first, second) = (whole.slice(0, BATCH_ROWS), whole.slice(BATCH_ROWS, BATCH_ROWS));
        // As sliced, each batch reports (and would keep alive) the whole data buffers.
        let data_bytes: usize = whole.as_string_view().data_buffers().iter().map(|b| b.capacity()).sum();
        assert!(first.get_array_memory_size() > data_bytes);
        let cache = ColumnCache::new(1 << 30, CacheMetrics::noop());
        cache.insert(key(0, "v1"), CachedColumn::Arrow(first.clone()));
        cache.insert(key(1, "v1"), CachedColumn::Arrow(second.clone()));
        let (a, b) = (cache.get(&key(0, "v1")).unwrap(), cache.get(&key(1, "v1")).unwrap());
        // Same values, own buffers, charged about half the shared size each.
        assert_eq!(a.to_arrow().as_ref(), first.as_ref());
        assert_eq!(b.to_arrow().as_ref(), second.as_ref());
        let (a, b) = (a.to_arrow(), b.to_arrow());
        let ptr = |x: &ArrayRef| x.as_string_view().data_buffers()[0].as_ptr();
        assert_ne!(ptr(&a), ptr(&b), "each batch owns its bytes");
        let shared = whole.get_array_memory_size() as u64;
        assert!(
            cache.weighted_size() < shared * 6 / 10 * 2 && cache.weighted_size() > shared / 2,
            "{} vs {shared}",
            cache.weighted_size()
        );
        // An array that owns its buffers already is kept as it is.
        let own: ArrayRef = Arc::new(StringViewArray::from_iter_values(["short", "a value of more than 12"]));
        assert!(Arc::ptr_eq(&own_view_buffers(own.clone()), &own));
    }

    #[test]
    fn drops_other_versions_only() {
        let cache = ColumnCache::new(1 << 30, CacheMetrics::noop());
        cache.insert(key(0, "v1"), column(10));
        cache.insert(key(1, "v2"), column(10));
        cache.drop_other_versions(&ObjectKey::new("t0", "a.parquet", "v2"));
        assert!(cache.get(&key(0, "v1")).is_none());
        assert!(cache.get(&key(1, "v2")).is_some());
    }

    #[test]
    fn a_lowered_budget_evicts_and_a_restored_one_admits_again() {
        let one = column(1000).heap_size() as u64;
        let cache = ColumnCache::new(one * 4, CacheMetrics::noop());
        // One batch per column chunk: each goes alone.
        let key = |row_group: u32, version: &str| BatchKey {
            row_group,
            ..key(0, version)
        };
        for b in 0..4 {
            cache.insert(key(b, "v1"), column(1000));
        }
        cache.set_budget(one * 2);
        assert_eq!((cache.budget(), cache.entry_count()), (one * 2, 2));
        assert!(cache.weighted_size() <= one * 2);
        // Never above the configured budget.
        cache.set_budget(u64::MAX);
        assert_eq!(cache.budget(), cache.capacity());
        for b in 4..8 {
            cache.insert(key(b, "v1"), column(1000));
        }
        assert_eq!(cache.entry_count(), 4);
    }

    #[test]
    fn an_entry_over_the_whole_budget_is_not_kept() {
        let cache = ColumnCache::new(100, CacheMetrics::noop());
        cache.insert(key(0, "v1"), column(1000));
        assert!(cache.get(&key(0, "v1")).is_none());
        assert_eq!(cache.weighted_size(), 0);
    }

    /// A scan reads a column chunk whole from memory or decodes it again, so
    /// the batches of a chunk an eviction broke go with the evicted one.
    #[test]
    fn an_evicted_batch_takes_the_rest_of_its_chunk() {
        let one = column(1000).heap_size() as u64;
        let cache = ColumnCache::builder(one * 3, CacheMetrics::noop())
            .eviction(PolicyKind::Lru)
            .build();
        let at = |row_group: u32, batch: u32| BatchKey {
            row_group,
            ..key(batch, "v1")
        };
        let object = at(0, 0).object;
        cache.insert(at(0, 0), column(1000));
        cache.insert(at(0, 1), column(1000));
        cache.insert(at(1, 0), column(1000));
        assert!(cache.holds_chunk(&ChunkKey::new(object.clone(), 0, 1), 2));
        assert!(
            !cache.holds_chunk(&ChunkKey::new(object.clone(), 1, 1), 2),
            "half of row group 1"
        );
        // LRU evicts row group 0's batch 0; its batch 1 is of no use alone.
        cache.insert(at(1, 1), column(1000));
        assert!(!cache.contains(&at(0, 0)) && !cache.contains(&at(0, 1)));
        assert!(cache.holds_chunk(&ChunkKey::new(object.clone(), 1, 1), 2));
        assert!(!cache.holds_chunk(&ChunkKey::new(object.clone(), 0, 1), 2));
        assert_eq!(cache.weighted_size(), one * 2);
        assert_eq!(cache.entry_count(), 2);
        // A chunk's own batches being admitted are not taken with it.
        cache.set_budget(one);
        assert_eq!(cache.entry_count(), 0, "one batch of row group 1 evicted: both go");
        assert_eq!(cache.weighted_size(), 0);
    }

    /// A column chunk the memory tier holds whole reserves no disk page (the
    /// scan reads it from memory; the disk keeps room for what only it
    /// holds); whether memory holds it is looked at again when the scan
    /// starts, both ways.
    #[test]
    fn chunks_held_whole_in_memory_reserve_no_disk_pages() {
        let sets = ScanSets::new();
        let cache = ColumnCache::builder(1 << 30, CacheMetrics::noop())
            .scan_sets(sets.clone())
            .build();
        let object = ObjectKey::new("t0", "a.parquet", "v1");
        let at = |column: u32, batch: u32| BatchKey {
            object: object.clone(),
            row_group: 0,
            column,
            batch,
        };
        // Column 1 on page 0, column 2 on page 2 (10-byte pages), 2 batches each.
        let chunks = || {
            [(1, 0..10), (2, 20..30)]
                .into_iter()
                .map(|(column, bytes)| crate::ReservedChunk {
                    chunk: ChunkKey::new(object.clone(), 0, column),
                    bytes: vec![bytes],
                    batches: 2,
                })
                .collect::<Vec<_>>()
        };
        let page = |p| sets.remaining_for_page(&object, p);
        cache.insert(at(1, 0), column(10));
        cache.insert(at(1, 1), column(10));
        cache.insert(at(2, 0), column(10));
        let a = sets.register(chunks(), 10);
        assert_eq!(page(0), 0, "column 1 is read from memory");
        assert_eq!(page(2), 1, "half of column 2 is not in memory");
        assert_eq!(
            sets.remaining_for_chunk(&ChunkKey::new(object.clone(), 0, 1)),
            1,
            "memory keeps it"
        );
        cache.insert(at(2, 1), column(10));
        a.started();
        assert_eq!((page(0), page(2)), (0, 0), "memory got column 2 while a was queued");
        let b = sets.register(chunks(), 10);
        assert_eq!((page(0), page(2)), (0, 0));
        cache.set_budget(0);
        b.started();
        assert_eq!((page(0), page(2)), (1, 1), "memory lost both while b was queued");
        let key = |p| crate::PageKey::new(object.clone(), p);
        assert_eq!(Reservations::<crate::PageKey>::running_scans(&*sets, &key(2)), 1);
        drop(a);
        drop(b);
        assert_eq!(sets.reserved_entries(), (0, 0));
    }

    /// A plan-aware LRU memory tier of `capacity` bytes and its scan sets.
    fn plan_aware_lru(capacity: u64) -> (Arc<ScanSets>, Arc<ColumnCache>) {
        let sets = ScanSets::new();
        let cache = ColumnCache::builder(capacity, CacheMetrics::noop())
            .eviction(PolicyKind::Lru)
            .scan_sets(sets.clone())
            .build();
        (sets, cache)
    }

    /// A batch a registered scan will read survives an insert that would
    /// evict it by recency (LRU here), and goes once that scan passed it.
    #[test]
    fn a_reserved_batch_survives_eviction_until_its_scan_passes() {
        let one = column(1000).heap_size() as u64;
        let (sets, cache) = plan_aware_lru(one * 3);
        let at = |rg: u32| BatchKey {
            object: ObjectKey::new("t0", "a.parquet", "v1"),
            row_group: rg,
            column: 1,
            batch: 0,
        };
        // One registered scan of `key`'s column chunk.
        let reserve = |key: &BatchKey| {
            let bytes = std::iter::once(0..10).collect();
            sets.register(
                vec![crate::ReservedChunk {
                    chunk: key.chunk(),
                    bytes,
                    batches: 1,
                }],
                1 << 20,
            )
        };
        let scan = reserve(&at(0));
        for rg in 0..3 {
            cache.insert(at(rg), column(1000));
        }
        // LRU alone would evict row group 0 first.
        cache.insert(at(3), column(1000));
        assert!(cache.contains(&at(0)), "the reserved batch was evicted");
        assert!(!cache.contains(&at(1)));
        scan.passed(&at(0).object, 0);
        assert_eq!(sets.reserved_entries(), (0, 0));
        for rg in 4..7 {
            cache.insert(at(rg), column(1000));
        }
        assert!(!cache.contains(&at(0)), "released, it is evicted like any batch");
        assert!(cache.weighted_size() <= cache.capacity());
        // Without plan-awareness the same sequence evicts it at once.
        let blind = ColumnCache::builder(one * 3, CacheMetrics::noop())
            .eviction(PolicyKind::Lru)
            .scan_sets(sets.clone())
            .plan_aware(false)
            .build();
        let _scan = reserve(&at(0));
        for rg in 0..4 {
            blind.insert(at(rg), column(1000));
        }
        assert!(!blind.contains(&at(0)));
    }

    /// A reserved chunk whose bytes the page tiers still hold costs a decode
    /// to lose, not a fetch: it is evicted like a cached one (its pages are
    /// reserved on disk instead), and the reserved chunk whose bytes are
    /// nowhere else is kept in memory.
    #[test]
    fn a_reserved_chunk_whose_pages_are_held_below_is_not_protected() {
        use crate::PageKey;
        use crate::page_cache::{Page, PageCache, PageCacheConfig};
        let one = column(1000).heap_size() as u64;
        let (sets, cache) = plan_aware_lru(one * 3);
        let buffer = PageCache::new(
            PageCacheConfig {
                page_size: 100,
                capacity_bytes: 1 << 20,
            },
            CacheMetrics::noop(),
        );
        let pages = crate::PageStore::builder(buffer.clone()).build();
        let below: Weak<dyn crate::scan_sets::PageResidency> = Arc::downgrade(&pages) as _;
        sets.attach_pages(below);
        let object = ObjectKey::new("t0", "a.parquet", "v1");
        let at = |rg: u32| BatchKey {
            object: object.clone(),
            row_group: rg,
            column: 1,
            batch: 0,
        };
        // One scan will read row groups 0 and 1 (pages 0 and 1); the page
        // buffer holds page 0.
        let chunk = |rg: u32| crate::ReservedChunk {
            chunk: ChunkKey::new(object.clone(), rg, 1),
            bytes: std::iter::once(u64::from(rg) * 100..u64::from(rg) * 100 + 100).collect(),
            batches: 1,
        };
        let scan = sets.register(vec![chunk(0), chunk(1)], 100);
        buffer.insert(PageKey::new(object.clone(), 0), Page::whole(vec![7u8; 100].into()));
        cache.insert(at(0), column(1000));
        cache.insert(at(1), column(1000));
        // One tier protects each: the disk chunk 0's page (its bytes are
        // below), memory chunk 1 (held nowhere else).
        scan.started();
        let reserved_pages = (sets.remaining_for_page(&object, 0), sets.remaining_for_page(&object, 1));
        assert_eq!(reserved_pages, (1, 0));
        cache.insert(at(2), column(1000));
        cache.insert(at(3), column(1000));
        assert!(!cache.contains(&at(0)), "its pages are below: evicted by LRU");
        cache.insert(at(4), column(1000));
        assert!(cache.contains(&at(1)), "reserved, bytes nowhere else: kept");
        assert!(!cache.contains(&at(2)));
    }
}

#[cfg(test)]
mod liquid_tests {
    use super::*;
    use crate::BATCH_ROWS;
    use arrow::array::Int64Array;
    use std::time::Duration;

    fn key() -> BatchKey {
        BatchKey {
            object: ObjectKey::new("t0", "a.parquet", "v1"),
            row_group: 0,
            column: 0,
            batch: 0,
        }
    }

    fn prices() -> ArrayRef {
        Arc::new(Int64Array::from_iter(
            (0..BATCH_ROWS as i64).map(|i| (i % 7 != 0).then_some(1000 + i % 500)),
        ))
    }

    #[test]
    fn admitted_arrow_becomes_liquid_in_the_background_with_the_same_values() {
        let cache = ColumnCache::builder(1 << 30, CacheMetrics::noop())
            .transcode(crate::transcoder::LiquidTranscoder::start)
            .build();
        let array = prices();
        cache.insert(key(), CachedColumn::Arrow(array.clone()));
        assert!(cache.wait_transcoded(Duration::from_secs(30)));
        let entry = cache.get(&key()).unwrap();
        assert_eq!(entry.form(), "liquid");
        assert_eq!(entry.to_arrow().as_ref(), array.as_ref());
        assert!(
            entry.heap_size() < array.get_array_memory_size() / 2,
            "{}",
            entry.heap_size()
        );
        cache.label_column(&"t0".into(), 0, "price");
        let usage = cache.usage_by_column();
        assert_eq!(usage.len(), 1);
        assert_eq!(
            (usage[0].name.as_deref(), usage[0].form, usage[0].batches),
            (Some("price"), "liquid", 1)
        );
        assert_eq!(usage[0].bytes as usize, entry.heap_size());
        assert_eq!(usage[0].arrow_bytes as usize, array.get_array_memory_size());
    }

    #[test]
    fn a_wide_admission_burst_is_encoded_inline_so_little_arrow_waits() {
        let batch_bytes = prices().get_array_memory_size();
        let limit = 4 * batch_bytes;
        let cache = ColumnCache::builder(1 << 30, CacheMetrics::noop())
            .transcode(crate::transcoder::LiquidTranscoder::start_with_inline_after(limit))
            .build();
        let keys: Vec<BatchKey> = (0..64).map(|b| BatchKey { batch: b, ..key() }).collect();
        let arrays: Vec<ArrayRef> = keys.iter().map(|_| prices()).collect();
        for (k, a) in keys.iter().zip(&arrays) {
            cache.insert(k.clone(), CachedColumn::Arrow(a.clone()));
        }
        // Right after the burst: the worker can only have shrunk the Arrow.
        let arrow_held: usize = keys
            .iter()
            .filter_map(|k| match cache.peek(k) {
                Some(CachedColumn::Arrow(a)) => Some(a.get_array_memory_size()),
                _ => None,
            })
            .sum();
        assert!(
            arrow_held <= limit + batch_bytes,
            "{arrow_held} bytes of Arrow wait (limit {limit})"
        );
        assert!(cache.wait_transcoded(Duration::from_secs(30)));
        for (k, a) in keys.iter().zip(&arrays) {
            let entry = cache.get(k).unwrap();
            assert_eq!(entry.form(), "liquid");
            assert_eq!(entry.to_arrow().as_ref(), a.as_ref());
        }
    }

    /// A liquid cache squeezing ahead into a fresh squeeze tier (in the
    /// returned dir) that lets `max_pending` bytes wait for its writer.
    fn squeezing_ahead(max_pending: u64) -> (tempfile::TempDir, Arc<Squeezed>, Arc<ColumnCache>) {
        let dir = tempfile::tempdir().unwrap();
        let squeezed = Squeezed::open(crate::squeeze::SqueezeConfig {
            dir: dir.path().to_path_buf(),
            budget_bytes: 64 << 20,
            direct_io: false,
            policy: PolicyKind::Lru,
            max_pending,
            write_when_behind: false,
        })
        .unwrap();
        squeezed.wait_recovered();
        let cache = ColumnCache::builder(1 << 30, CacheMetrics::noop())
            .transcode(crate::transcoder::LiquidTranscoder::start)
            .squeeze(squeezed.clone())
            .squeeze_ahead(true)
            .build();
        (dir, squeezed, cache)
    }

    /// With squeezing ahead, a chunk admitted whole is written once its
    /// batches are liquid, before any eviction, and its later eviction
    /// writes nothing again; a tiny batch the transcoder keeps Arrow (not
    /// smaller as liquid) does not hold its chunk back.
    #[test]
    fn a_chunk_admitted_whole_is_squeezed_ahead_once_liquid_and_not_again_at_eviction() {
        let (_dir, squeezed, cache) = squeezing_ahead(64 << 20);
        let tiny: ArrayRef = Arc::new(Int64Array::from(vec![5]));
        let arrays = [prices(), prices(), tiny];
        for (b, array) in arrays.iter().enumerate() {
            cache.insert(
                BatchKey {
                    batch: b as u32,
                    ..key()
                },
                CachedColumn::Arrow(array.clone()),
            );
        }
        cache.admitted_whole(&key().chunk(), arrays.len());
        assert!(cache.wait_transcoded(Duration::from_secs(30)));
        assert!(squeezed.wait_written(Duration::from_secs(30)));
        assert_eq!(squeezed.stats().squeezed_chunks, 1, "{:?}", squeezed.stats());
        assert_eq!(cache.entry_count(), 3, "nothing was evicted");
        let back = squeezed.restore(&key().chunk(), arrays.len()).expect("squeezed ahead");
        for ((liquid, _), array) in back.iter().zip(&arrays) {
            assert_eq!(liquid.to_arrow().as_ref(), array.as_ref());
        }
        cache.set_budget(0);
        assert_eq!(cache.entry_count(), 0);
        assert!(squeezed.wait_written(Duration::from_secs(30)));
        assert_eq!(squeezed.stats().squeezed_chunks, 1, "evicted: written again");
    }

    /// Chunks squeezed ahead faster than the writer takes them (room for
    /// one chunk waiting) are offered again when it idles: all end on disk.
    #[test]
    fn chunks_the_writer_was_too_far_behind_for_are_squeezed_ahead_when_it_idles() {
        let one_chunk = {
            let mut encoder = silt_liquid::ColumnEncoder::new(prices().data_type());
            encoder.encode(&prices()).unwrap().heap_size() as u64
        };
        let (_dir, squeezed, cache) = squeezing_ahead(one_chunk * 3 / 2);
        let chunks = 6;
        for rg in 0..chunks {
            let key = BatchKey { row_group: rg, ..key() };
            let mut encoder = silt_liquid::ColumnEncoder::new(prices().data_type());
            let array = encoder.encode(&prices()).unwrap();
            let arrow_bytes = prices().get_array_memory_size();
            cache.insert(key.clone(), CachedColumn::Liquid { array, arrow_bytes });
            cache.admitted_whole(&key.chunk(), 1);
        }
        assert!(squeezed.wait_written(Duration::from_secs(30)));
        let stats = squeezed.stats();
        assert_eq!(stats.squeezed_chunks, u64::from(chunks), "{stats:?}");
        for rg in 0..chunks {
            assert!(squeezed.holds(&BatchKey { row_group: rg, ..key() }.chunk()));
        }
    }

    #[test]
    fn the_arrow_form_never_transcodes() {
        let cache = ColumnCache::new(1 << 30, CacheMetrics::noop());
        cache.insert(key(), CachedColumn::Arrow(prices()));
        assert_eq!(cache.transcode_backlog(), 0);
        assert_eq!(cache.get(&key()).unwrap().form(), "arrow");
    }

    #[test]
    fn a_transcode_does_not_overwrite_a_newer_entry() {
        let cache = ColumnCache::new(1 << 30, CacheMetrics::noop());
        let old = prices();
        let liquid = silt_liquid::ColumnEncoder::new(old.data_type()).encode(&old).unwrap();
        let newer: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3]));
        cache.insert(key(), CachedColumn::Arrow(newer.clone()));
        cache.replace_with_liquid(
            &key(),
            &old,
            CachedColumn::Liquid {
                array: liquid,
                arrow_bytes: 0,
            },
        );
        assert_eq!(cache.get(&key()).unwrap().to_arrow().as_ref(), newer.as_ref());
    }
}
