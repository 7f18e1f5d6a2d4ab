//! Squeezed column chunks: liquid batches the memory tier let go of, kept on
//! disk in their encoded form (issue 43), so a later scan (or the first one
//! after a restart) reads them back without Parquet decoding or transcoding.
//!
//! Why: whatever the memory tier evicts was, before this, gone: the disk
//! tier keeps raw Parquet pages only, so the next read decoded those pages
//! and transcoded them again, which on 2 cores is most of a cold query's
//! CPU. Reading a squeezed chunk back costs one disk read of its encoded
//! bytes (about the Parquet bytes, often less) and the checks of
//! [`silt_liquid::persist`].
//!
//! What is squeezed: a column chunk evicted whole (the memory tier evicts
//! chunks whole), every batch of it liquid; and, with squeezing ahead (the
//! server's default), a chunk admitted whole once its last batch is liquid,
//! so what the memory tier holds also survives a kill -9
//! ([`crate::squeeze_ahead`]). Arrow batches are not (the
//! arrow form is for comparison runs; its batches are 4x the Parquet bytes).
//! A chunk is written by a background thread; while more than
//! [`SqueezeConfig::max_pending`] bytes of evicted batches wait for it, so
//! that the memory held beyond the memory tier's budget stays bounded,
//! further chunks are not queued: an evicted chunk whose batches are all
//! liquid is written by the evicting thread (a copy and a checksum, against
//! the Parquet decode and transcode its next read would cost if dropped;
//! [`Squeezed::offer_evicted`]), any other is dropped (counted).
//!
//! Where: a [`DiskTier`] of its own under `cache_dir/squeezed`, with its own
//! budget (a share of the disk budget), so squeezed chunks and raw pages do
//! not evict each other, and with everything the disk tier gives pages:
//! slots in region files, a checksum per slot verified on every read, torn
//! writes never served, recovery of the index from the slot headers at
//! start (so squeezed chunks survive a clean stop and a kill -9), eviction
//! by its policy within its budget. A chunk's encoded bytes are cut into
//! [`PIECE_BYTES`] pieces, one per slot, keyed by the chunk's object version
//! and a page number that packs (row group, column, piece); a chunk missing
//! any piece is a miss. Every piece starts with its record's id, and a
//! record is read only from pieces of one id: a chunk squeezed again after
//! its record was forgotten may find pieces of the old one still on disk
//! (forgetting is an index operation), and must never read them as its own.
//! The objects a column's batches share (FSST tables, zstd dictionaries,
//! shared-dictionary segments: [`silt_liquid::persist`]'s parts) are
//! written once each, as records of their own keyed by part id;
//! part ids start from the clock at each start, so a restarted server never
//! reuses the id of a part still on disk.
//!
//! Weak spots, accepted for now: a part is evicted by the tier's policy like
//! any record, and a chunk whose part is gone is a miss (decoded again); a
//! record that passes its checksums but does not parse (a format change) is
//! a miss each time until evicted.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use silt_liquid::persist::{PartCatalog, PartId};
use silt_liquid::{ColumnEncoder, LiquidArrayRef};

use crate::disk::{DiskConfig, DiskMetrics, DiskTier};
use crate::policy::PolicyKind;
use crate::{CachedColumn, ChunkKey, ObjectKey, PageKey};

/// Bytes of a chunk's record per slot of the squeeze tier.
pub const PIECE_BYTES: u64 = 128 << 10;

/// The store name of part records' keys (no table is named so: names are
/// validated as identifiers).
const PARTS_STORE: &str = "\u{0}squeezed-parts";

/// Bits of the page number for the piece, the column and the row group.
const PIECE_BITS: u32 = 20;
const COLUMN_BITS: u32 = 16;
const ROW_GROUP_BITS: u32 = 27;

/// Configuration of a [`Squeezed`] tier.
#[derive(Debug, Clone)]
pub struct SqueezeConfig {
    /// Directory of its region files (owned by this tier: locked).
    pub dir: std::path::PathBuf,
    /// Disk bytes it may use.
    pub budget_bytes: u64,
    /// `O_DIRECT` reads and writes (as the disk tier's).
    pub direct_io: bool,
    /// Which eviction policy orders its records' slots.
    pub policy: PolicyKind,
    /// Bytes of evicted batches that may wait for the writer; beyond it,
    /// evicted chunks are dropped, or written by the evicting thread
    /// (`write_when_behind`).
    pub max_pending: u64,
    /// Whether a chunk evicted while the writer is behind is written by the
    /// evicting thread when its batches are all liquid
    /// ([`Squeezed::offer_evicted`]); otherwise it is dropped.
    pub write_when_behind: bool,
}

/// What the tier did since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SqueezeStats {
    /// Chunks written.
    pub squeezed_chunks: u64,
    /// Bytes of records written (chunks and parts).
    pub squeezed_bytes: u64,
    /// Part records written (FSST tables, dictionaries, shared-dictionary
    /// segments), each in a slot of its own: with `squeezed_chunks` and
    /// `disk_bytes`, what the slots hold.
    pub squeezed_parts: u64,
    /// Bytes of part records written (in `squeezed_bytes` too).
    pub squeezed_part_bytes: u64,
    /// Evicted chunks not squeezed: the writer was behind.
    pub dropped_chunks: u64,
    /// Evicted chunks written by the evicting thread: the writer was
    /// behind and their batches were liquid (counted in `squeezed_chunks`
    /// too).
    pub written_here_chunks: u64,
    /// Chunks read back.
    pub restored_chunks: u64,
    /// Bytes of records read back.
    pub restored_bytes: u64,
    /// Chunks found on disk that could not be read back (a piece or part
    /// missing or damaged): decoded again instead.
    pub unreadable_chunks: u64,
    /// Bytes of evicted batches waiting for the writer now.
    pub pending_bytes: u64,
    /// Disk bytes the tier holds.
    pub disk_bytes: u64,
}

#[derive(Default)]
struct Counters {
    squeezed_chunks: AtomicU64,
    squeezed_bytes: AtomicU64,
    squeezed_parts: AtomicU64,
    squeezed_part_bytes: AtomicU64,
    dropped_chunks: AtomicU64,
    written_here_chunks: AtomicU64,
    restored_chunks: AtomicU64,
    restored_bytes: AtomicU64,
    unreadable_chunks: AtomicU64,
    pending_bytes: AtomicU64,
}

/// What an offer does when the writer is too far behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WhenBehind {
    /// Drop the chunk (counted).
    Drop,
    /// Write it on the offering thread if its batches are all liquid.
    WriteLiquidHere,
}

/// A chunk waiting for the writer.
struct Job {
    chunk: ChunkKey,
    batches: Vec<CachedColumn>,
    bytes: u64,
}

/// A liquid batch and the bytes it takes as Arrow (for the memory tier's
/// usage figures once it is back).
pub type Squeezable = (LiquidArrayRef, u64);

/// What the writer thread and the readers share.
struct Shared {
    disk: Arc<DiskTier>,
    catalog: PartCatalog,
    /// The next record's id (from the clock at start, like part ids).
    next_record: AtomicU64,
    counters: Counters,
    max_pending: u64,
    write_when_behind: bool,
    /// Chunks queued for the writer: offered once until written (a chunk
    /// squeezed ahead may be evicted, and offered again, before it is).
    queued: Mutex<HashSet<ChunkKey>>,
    /// Run when the writer's queue empties ([`Squeezed::on_idle`]).
    idle: Mutex<Option<IdleHook>>,
}

/// See [`Squeezed::on_idle`].
type IdleHook = Box<dyn Fn() + Send + Sync>;

/// The squeeze tier (module docs). Dropping it lets the writer finish what
/// is queued and stop.
pub struct Squeezed {
    shared: Arc<Shared>,
    jobs: Mutex<Option<Sender<Job>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Squeezed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Squeezed").field("stats", &self.stats()).finish()
    }
}

impl Squeezed {
    /// Opens (creating if needed) the tier in `config.dir`; recovery of what
    /// an earlier run squeezed starts in the background.
    pub fn open(config: SqueezeConfig) -> std::io::Result<Arc<Squeezed>> {
        let disk = DiskTier::open(
            DiskConfig {
                dir: config.dir,
                budget_bytes: config.budget_bytes,
                page_bytes: PIECE_BYTES,
                direct_io: config.direct_io,
                policy: config.policy,
                reservations: None,
            },
            DiskMetrics::noop(),
        )?;
        // Ids from the clock: past every id an earlier run wrote.
        let first_id = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        let shared = Arc::new(Shared {
            disk,
            catalog: PartCatalog::starting_at(first_id),
            next_record: AtomicU64::new(first_id),
            counters: Counters::default(),
            max_pending: config.max_pending,
            write_when_behind: config.write_when_behind,
            queued: Mutex::default(),
            idle: Mutex::default(),
        });
        let (tx, rx) = channel();
        let worker = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("silt-squeeze".into())
                .spawn(move || write_jobs(&shared, rx))?
        };
        Ok(Arc::new(Squeezed {
            shared,
            jobs: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(worker)),
        }))
    }

    /// Offers a chunk whose batches all became liquid
    /// ([`crate::squeeze_ahead`]): its batches, in order. Queued for the
    /// writer unless it is too far behind (then dropped and counted),
    /// already queued, or already squeezed (a chunk read back, or squeezed
    /// ahead and evicted: its record, of the same object version, is still
    /// on disk). Never blocks on the disk. False only when dropped because
    /// the writer is behind: worth offering again later (the chunk keeps
    /// its mark; see [`Squeezed::on_idle`]). Batches still Arrow are
    /// encoded by the writer (one encoder for the chunk's); a chunk with a
    /// batch of a type liquid lacks is not kept.
    pub fn offer(&self, chunk: ChunkKey, batches: Vec<CachedColumn>) -> bool {
        self.offer_or(chunk, batches, WhenBehind::Drop)
    }

    /// Offers a chunk the memory tier evicted whole, as [`Squeezed::offer`],
    /// except when the writer is too far behind: an evicted chunk gets no
    /// second offer, so one whose batches are all liquid is written here, on
    /// the evicting thread, when [`SqueezeConfig::write_when_behind`] says
    /// so. That is the cheaper side of the choice: writing liquid bytes is a
    /// copy and a checksum, while dropping them costs the chunk's next read a
    /// Parquet decode and a transcode, many times that on 2 cores (the
    /// niced writer falls behind exactly while queries keep the cores busy,
    /// when the memory tier churns most). A chunk with batches still Arrow
    /// would have to be encoded here first, about what dropping it costs
    /// later: it is dropped.
    pub fn offer_evicted(&self, chunk: ChunkKey, batches: Vec<CachedColumn>) {
        let when_behind = if self.shared.write_when_behind {
            WhenBehind::WriteLiquidHere
        } else {
            WhenBehind::Drop
        };
        self.offer_or(chunk, batches, when_behind);
    }

    /// [`Squeezed::offer`] with what to do when the writer is behind.
    fn offer_or(&self, chunk: ChunkKey, batches: Vec<CachedColumn>, when_behind: WhenBehind) -> bool {
        if batches.is_empty() || chunk_page(&chunk, 0).is_none() || self.holds(&chunk) {
            return true;
        }
        let bytes: u64 = batches.iter().map(|b| b.heap_size() as u64).sum();
        let counters = &self.shared.counters;
        let pending = counters.pending_bytes.load(Ordering::Relaxed);
        if pending + bytes > self.shared.max_pending {
            let all_liquid = batches.iter().all(|b| matches!(b, CachedColumn::Liquid { .. }));
            if when_behind == WhenBehind::WriteLiquidHere && all_liquid {
                if self.shared.queue(&chunk) {
                    self.shared.write_chunk(&chunk, &batches);
                    counters.written_here_chunks.fetch_add(1, Ordering::Relaxed);
                    self.shared.dequeue(&chunk);
                }
                return true;
            }
            counters.dropped_chunks.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if !self.shared.queue(&chunk) {
            return true;
        }
        counters.pending_bytes.fetch_add(bytes, Ordering::Relaxed);
        let job = Job {
            chunk: chunk.clone(),
            batches,
            bytes,
        };
        let sent = self
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|tx| tx.send(job));
        if !matches!(sent, Some(Ok(()))) {
            counters.pending_bytes.fetch_sub(bytes, Ordering::Relaxed);
            self.shared.dequeue(&chunk);
        }
        true
    }

    /// Runs `hook` on the writer's thread each time its queue empties,
    /// before [`Squeezed::wait_written`] can see it idle: the memory tier
    /// offers there what it could not offer while the writer was behind.
    /// The hook must not block on the writer.
    pub fn on_idle(&self, hook: impl Fn() + Send + Sync + 'static) {
        *self.shared.idle.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(hook));
    }

    /// Whether `chunk` may be squeezed: an index lookup, no I/O.
    pub fn holds(&self, chunk: &ChunkKey) -> bool {
        chunk_page(chunk, 0).is_some_and(|page| self.shared.disk.holds(&PageKey::new(chunk.object.clone(), page)))
    }

    /// The batches of `chunk` read back, if it was squeezed with exactly
    /// `batches` batches and every piece and part of it reads back intact.
    /// Blocks on disk reads.
    pub fn restore(&self, chunk: &ChunkKey, batches: usize) -> Option<Vec<Squeezable>> {
        if !self.holds(chunk) {
            return None;
        }
        let shared = &self.shared;
        let restored = read_record(&shared.disk, |piece| {
            chunk_page(chunk, piece).map(|page| PageKey::new(chunk.object.clone(), page))
        })
        .and_then(|record| {
            let arrays = parse_chunk(&record, &shared.catalog, &|id| {
                read_record(&shared.disk, |piece| Some(part_key(id, piece)))
            })?;
            Some((record.len(), arrays))
        });
        match restored {
            Some((bytes, arrays)) if arrays.len() == batches => {
                shared.counters.restored_chunks.fetch_add(1, Ordering::Relaxed);
                shared
                    .counters
                    .restored_bytes
                    .fetch_add(bytes as u64, Ordering::Relaxed);
                Some(arrays)
            }
            _ => {
                // Forgotten, so its next eviction writes it again.
                shared.counters.unreadable_chunks.fetch_add(1, Ordering::Relaxed);
                if let Some(page) = chunk_page(chunk, 0) {
                    shared.disk.forget(&PageKey::new(chunk.object.clone(), page));
                }
                None
            }
        }
    }

    /// Forgets the chunks of `keep`'s object at any other version (a
    /// changed object, or chunks recovered from an earlier run).
    pub fn drop_other_versions(&self, keep: &ObjectKey) {
        self.shared
            .disk
            .drop_other_versions(&keep.store, &keep.path, &keep.version);
    }

    /// Blocks until nothing waits for the writer or `timeout` passes;
    /// whether it emptied. For tests and benchmarks.
    pub fn wait_written(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.shared.counters.pending_bytes.load(Ordering::Relaxed) > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// Blocks until recovery has read every region file of an earlier run.
    pub fn wait_recovered(&self) {
        self.shared.disk.wait_recovered();
    }

    /// One [`crate::HeldUnit`] per chunk on disk (tier `"squeezed"`, form
    /// `"liquid"`, bytes = its pieces' slots; batches 0: the count is in
    /// the record, not read here). Parts (shared tables and dictionaries)
    /// are not listed. Walks the index: for introspection only.
    pub fn held_units(&self) -> Vec<crate::HeldUnit> {
        let mut chunks: std::collections::HashMap<ChunkKey, u64> = std::collections::HashMap::new();
        for (key, bytes) in self.shared.disk.held_units().into_iter().filter_map(|u| match u.held {
            crate::Held::Page(p) if &*p.object.store != PARTS_STORE => Some((p, u.bytes)),
            _ => None,
        }) {
            *chunks.entry(page_chunk(&key)).or_default() += bytes;
        }
        chunks
            .into_iter()
            .map(|(chunk, bytes)| crate::HeldUnit {
                tier: "squeezed",
                held: crate::Held::Chunk(chunk),
                column_name: None,
                form: "liquid",
                batches: 0,
                bytes,
                arrow_bytes: 0,
            })
            .collect()
    }

    /// Whether recovery has read every region file of an earlier run.
    pub fn recovery_done(&self) -> bool {
        self.shared.disk.recovery_done()
    }

    /// What the tier did since start.
    pub fn stats(&self) -> SqueezeStats {
        let c = &self.shared.counters;
        SqueezeStats {
            squeezed_chunks: c.squeezed_chunks.load(Ordering::Relaxed),
            squeezed_bytes: c.squeezed_bytes.load(Ordering::Relaxed),
            squeezed_parts: c.squeezed_parts.load(Ordering::Relaxed),
            squeezed_part_bytes: c.squeezed_part_bytes.load(Ordering::Relaxed),
            dropped_chunks: c.dropped_chunks.load(Ordering::Relaxed),
            written_here_chunks: c.written_here_chunks.load(Ordering::Relaxed),
            restored_chunks: c.restored_chunks.load(Ordering::Relaxed),
            restored_bytes: c.restored_bytes.load(Ordering::Relaxed),
            unreadable_chunks: c.unreadable_chunks.load(Ordering::Relaxed),
            pending_bytes: c.pending_bytes.load(Ordering::Relaxed),
            disk_bytes: self.shared.disk.used_bytes(),
        }
    }
}

impl Drop for Squeezed {
    fn drop(&mut self) {
        // Closing the channel ends the writer once the queue is written.
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(worker) = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take() {
            // The writer's idle hook may hold the last reference for a
            // moment: a thread never joins itself.
            if worker.thread().id() != std::thread::current().id() {
                let _ = worker.join();
            }
        }
    }
}

/// The writer thread: each queued chunk's new parts, then the chunk.
fn write_jobs(shared: &Shared, jobs: Receiver<Job>) {
    // Below the query threads, as the transcoder: queries keep the cores.
    crate::transcoder::lower_this_threads_priority(crate::transcoder::WORKER_NICE);
    for job in jobs {
        shared.write_chunk(&job.chunk, &job.batches);
        drop(job.batches);
        shared.dequeue(&job.chunk);
        let c = &shared.counters;
        if c.pending_bytes.load(Ordering::Relaxed) == job.bytes {
            // The last job: one byte stays pending while the idle hook
            // offers what waited, so no waiter sees the writer idle between.
            c.pending_bytes.fetch_add(1, Ordering::Relaxed);
            c.pending_bytes.fetch_sub(job.bytes, Ordering::Relaxed);
            if let Some(hook) = shared.idle.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                hook();
            }
            c.pending_bytes.fetch_sub(1, Ordering::Relaxed);
        } else {
            c.pending_bytes.fetch_sub(job.bytes, Ordering::Relaxed);
        }
    }
}

/// A chunk's batches in liquid form: those still Arrow encoded with one
/// encoder (so they share an FSST table and dictionary, as the
/// transcoder's would); `None` if a batch's type has no liquid form.
fn liquid_batches(batches: &[CachedColumn]) -> Option<Vec<Squeezable>> {
    let mut encoder: Option<ColumnEncoder> = None;
    batches
        .iter()
        .map(|b| match b {
            CachedColumn::Liquid { array, arrow_bytes } => Some((array.clone(), *arrow_bytes as u64)),
            CachedColumn::Arrow(array) => {
                let encoder = encoder.get_or_insert_with(|| ColumnEncoder::new(array.data_type()));
                let liquid = encoder.encode(array)?;
                Some((liquid, array.get_array_memory_size() as u64))
            }
        })
        .collect()
}

/// The page number of piece `piece` of `chunk`'s record; `None` when the
/// chunk's coordinates do not fit (such chunks are not squeezed).
fn chunk_page(chunk: &ChunkKey, piece: u64) -> Option<u64> {
    let fits = u64::from(chunk.row_group) < 1 << ROW_GROUP_BITS
        && u64::from(chunk.column) < 1 << COLUMN_BITS
        && piece < 1 << PIECE_BITS;
    fits.then(|| {
        (u64::from(chunk.row_group) << (COLUMN_BITS + PIECE_BITS)) | (u64::from(chunk.column) << PIECE_BITS) | piece
    })
}

/// The chunk a piece's key belongs to (the inverse of [`chunk_page`]).
fn page_chunk(key: &PageKey) -> ChunkKey {
    let row_group = key.page >> (COLUMN_BITS + PIECE_BITS);
    let column = (key.page >> PIECE_BITS) & ((1 << COLUMN_BITS) - 1);
    ChunkKey::new(key.object.clone(), row_group as u32, column as u32)
}

/// The key of piece `piece` of part `id`'s record.
fn part_key(id: PartId, piece: u64) -> PageKey {
    PageKey::new(ObjectKey::new(PARTS_STORE, id.to_string(), "1"), piece)
}

/// Bytes at the start of every piece: its record's id.
const RECORD_ID_BYTES: usize = 8;

/// Bytes of a record (its length first) per piece.
const PIECE_SHARE: usize = PIECE_BYTES as usize - RECORD_ID_BYTES;

impl Shared {
    /// Writes `chunk`'s record (and the parts its batches add), batches
    /// still Arrow encoded first; counts it. Nothing is written for a chunk
    /// with a batch of a type liquid lacks.
    fn write_chunk(&self, chunk: &ChunkKey, batches: &[CachedColumn]) {
        let Some(batches) = liquid_batches(batches) else {
            return;
        };
        let mut record = Vec::new();
        record.extend_from_slice(&(batches.len() as u64).to_le_bytes());
        let mut bodies = Vec::with_capacity(batches.len());
        let mut written = 0u64;
        for (batch, arrow_bytes) in &batches {
            let persisted = self.catalog.write(batch);
            for (id, bytes) in &persisted.new_parts {
                let part_bytes = self.write_record(bytes, |piece| Some(part_key(*id, piece)));
                self.counters.squeezed_parts.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .squeezed_part_bytes
                    .fetch_add(part_bytes, Ordering::Relaxed);
                written += part_bytes;
            }
            record.extend_from_slice(&(persisted.bytes.len() as u64).to_le_bytes());
            record.extend_from_slice(&arrow_bytes.to_le_bytes());
            bodies.push(persisted.bytes);
        }
        for body in bodies {
            record.extend_from_slice(&body);
        }
        written += self.write_record(&record, |piece| {
            chunk_page(chunk, piece).map(|page| PageKey::new(chunk.object.clone(), page))
        });
        self.counters.squeezed_chunks.fetch_add(1, Ordering::Relaxed);
        self.counters.squeezed_bytes.fetch_add(written, Ordering::Relaxed);
    }

    /// Claims `chunk`'s place in the writer's queue: false if it is queued.
    fn queue(&self, chunk: &ChunkKey) -> bool {
        self.queued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(chunk.clone())
    }

    /// Frees `chunk`'s place in the queue (written, or not kept).
    fn dequeue(&self, chunk: &ChunkKey) {
        self.queued.lock().unwrap_or_else(|e| e.into_inner()).remove(chunk);
    }

    /// Writes `record` (its length first) in pieces under `key(piece)`, each
    /// starting with a fresh record id; the bytes written. Best effort, as
    /// the disk tier is: a piece it could not store makes the record a miss.
    fn write_record(&self, record: &[u8], key: impl Fn(u64) -> Option<PageKey>) -> u64 {
        let id = self.next_record.fetch_add(1, Ordering::Relaxed);
        // The first piece holds the length and the record's start; the
        // rest, a share of the record each.
        let first = record.len().min(PIECE_SHARE - 8);
        let shares = std::iter::once(&record[..first]).chain(record[first..].chunks(PIECE_SHARE));
        let mut piece_bytes = Vec::with_capacity(PIECE_BYTES as usize);
        let mut written = 0;
        for (piece, share) in shares.enumerate() {
            let Some(key) = key(piece as u64) else {
                return 0;
            };
            piece_bytes.clear();
            piece_bytes.extend_from_slice(&id.to_le_bytes());
            if piece == 0 {
                piece_bytes.extend_from_slice(&(record.len() as u64).to_le_bytes());
            }
            piece_bytes.extend_from_slice(share);
            // A piece of an earlier record under this key may still be
            // stored (as long or longer, the disk tier would keep it).
            self.disk.forget(&key);
            // Its refetch cost: about the bytes to decode again (weighted-lfu).
            self.disk.put(key, &piece_bytes, piece_bytes.len() as f64);
            written += piece_bytes.len() as u64;
        }
        written
    }
}

/// A piece's record id and its share of the record.
fn split_piece(piece: &[u8]) -> Option<(u64, &[u8])> {
    let id = u64::from_le_bytes(piece.get(..RECORD_ID_BYTES)?.try_into().ok()?);
    Some((id, &piece[RECORD_ID_BYTES..]))
}

/// The record stored under `key(0..)`, if every piece reads back and all
/// are of one record.
fn read_record(disk: &DiskTier, key: impl Fn(u64) -> Option<PageKey>) -> Option<Vec<u8>> {
    let first = disk.get(&key(0)?)?;
    let (id, share) = split_piece(&first.bytes)?;
    let len = u64::from_le_bytes(share.get(..8)?.try_into().ok()?);
    let pieces = len.checked_add(8)?.div_ceil(PIECE_SHARE as u64);
    let rest: Vec<PageKey> = (1..pieces).map(&key).collect::<Option<_>>()?;
    let mut record = Vec::with_capacity(usize::try_from(len).ok()?);
    record.extend_from_slice(&share[8..]);
    for piece in disk.get_many(&rest) {
        let piece = piece?;
        let (piece_id, share) = split_piece(&piece.bytes)?;
        if piece_id != id {
            return None;
        }
        record.extend_from_slice(share);
    }
    (record.len() as u64 == len).then_some(record)
}

/// The batches of a chunk's record: a count, each batch's length and Arrow
/// bytes, then the batches' bytes ([`silt_liquid::persist`]).
fn parse_chunk(
    record: &[u8],
    catalog: &PartCatalog,
    load: &dyn Fn(PartId) -> Option<Vec<u8>>,
) -> Option<Vec<Squeezable>> {
    let word = |at: usize| -> Option<u64> { Some(u64::from_le_bytes(record.get(at..at + 8)?.try_into().ok()?)) };
    let count = usize::try_from(word(0)?).ok()?;
    if count > record.len() / 16 {
        return None;
    }
    let mut at = 8 + 16 * count;
    let mut arrays = Vec::with_capacity(count);
    for i in 0..count {
        let len = usize::try_from(word(8 + 16 * i)?).ok()?;
        let arrow_bytes = word(16 + 16 * i)?;
        let bytes = record.get(at..at.checked_add(len)?)?;
        at += len;
        match catalog.read(bytes, load) {
            Ok(array) => arrays.push((array, arrow_bytes)),
            Err(e) => {
                tracing::debug!(error = %e, "squeezed batch unreadable");
                return None;
            }
        }
    }
    (at == record.len()).then_some(arrays)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use silt_liquid::ColumnEncoder;

    use super::*;

    fn config(dir: &std::path::Path) -> SqueezeConfig {
        SqueezeConfig {
            dir: dir.to_path_buf(),
            budget_bytes: 64 << 20,
            direct_io: false,
            policy: PolicyKind::Lru,
            max_pending: 64 << 20,
            write_when_behind: true,
        }
    }

    fn chunk(column: u32) -> ChunkKey {
        ChunkKey::new(ObjectKey::new("s", "t/a.parquet", "v1"), 3, column)
    }

    /// Three batches of strings (FSST, sharing the column's table; the
    /// last over a piece long) and of integers.
    fn batches(strings: bool) -> Vec<Squeezable> {
        let mut encoder = ColumnEncoder::new(if strings {
            &arrow::datatypes::DataType::Utf8
        } else {
            &arrow::datatypes::DataType::Int64
        });
        (0..3)
            .map(|b| {
                let rows = if b == 2 { 8192 } else { 3000 };
                let array: ArrayRef = if strings {
                    Arc::new(StringArray::from_iter_values(
                        // Distinct, with a hash no codec shrinks much: the chunk spans pieces.
                        (0..rows).map(|i| {
                            let h = ((i as u64) << 8 | b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                            format!("https://example.com/{b}/{i}/{h:016x}{:016x}", h.rotate_left(29) ^ h)
                        }),
                    ))
                } else {
                    Arc::new(Int64Array::from_iter_values((0..rows as i64).map(|i| i * 7 + b)))
                };
                let liquid = encoder.encode(&array).unwrap();
                (liquid, array.get_array_memory_size() as u64)
            })
            .collect()
    }

    /// The batches as the memory tier holds them.
    fn columns(batches: &[Squeezable]) -> Vec<CachedColumn> {
        batches
            .iter()
            .map(|(array, arrow_bytes)| CachedColumn::Liquid {
                array: array.clone(),
                arrow_bytes: *arrow_bytes as usize,
            })
            .collect()
    }

    /// The batches as Arrow (evicted before the transcoder reached them).
    fn arrow(batches: &[Squeezable]) -> Vec<CachedColumn> {
        batches
            .iter()
            .map(|(array, _)| CachedColumn::Arrow(array.to_arrow()))
            .collect()
    }

    fn same(got: &[Squeezable], want: &[Squeezable]) {
        assert_eq!(got.len(), want.len());
        for ((g, ga), (w, wa)) in got.iter().zip(want) {
            assert_eq!(&g.to_arrow(), &w.to_arrow());
            assert_eq!(ga, wa);
        }
    }

    #[test]
    fn a_chunk_squeezed_again_never_reads_pieces_of_its_old_record() {
        let dir = tempfile::tempdir().unwrap();
        let tier = Squeezed::open(config(dir.path())).unwrap();
        tier.wait_recovered();
        let strings = batches(true);
        tier.offer(chunk(0), columns(&strings));
        assert!(tier.wait_written(Duration::from_secs(30)));
        // Another batch count: unreadable, and its record forgotten.
        assert!(tier.restore(&chunk(0), 2).is_none());
        assert!(!tier.holds(&chunk(0)));
        // Squeezed again, shorter: the old record's later pieces are as
        // long as the new ones and still on disk.
        let fewer = &strings[1..];
        tier.offer(chunk(0), columns(fewer));
        assert!(tier.wait_written(Duration::from_secs(30)));
        same(&tier.restore(&chunk(0), 2).unwrap(), fewer);
    }

    #[test]
    fn squeezed_chunks_are_listed_as_held_units_and_parts_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let tier = Squeezed::open(config(dir.path())).unwrap();
        tier.wait_recovered();
        tier.offer(chunk(0), columns(&batches(true)));
        tier.offer(chunk(5), columns(&batches(false)));
        assert!(tier.wait_written(Duration::from_secs(30)));
        let mut held: Vec<(ChunkKey, u64)> = tier
            .held_units()
            .into_iter()
            .map(|u| match u.held {
                crate::Held::Chunk(c) => (c, u.bytes),
                other => panic!("not a chunk: {other:?}"),
            })
            .collect();
        held.sort_by_key(|(c, _)| c.column);
        assert_eq!(
            held.iter().map(|(c, _)| c.clone()).collect::<Vec<_>>(),
            [chunk(0), chunk(5)]
        );
        // The strings' record is over a piece long: two slots at least.
        assert!(held[0].1 >= 2 * PIECE_BYTES, "{held:?}");
    }

    #[test]
    fn offered_chunks_come_back_exact_and_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (strings, ints) = (batches(true), batches(false));
        {
            let tier = Squeezed::open(config(dir.path())).unwrap();
            tier.wait_recovered();
            assert!(tier.restore(&chunk(0), 3).is_none());
            tier.offer(chunk(0), columns(&strings));
            tier.offer(chunk(1), arrow(&ints));
            assert!(tier.wait_written(Duration::from_secs(30)));
            let stats = tier.stats();
            assert_eq!(stats.squeezed_chunks, 2);
            assert!(stats.squeezed_bytes > PIECE_BYTES, "the string chunk spans pieces");
            same(&tier.restore(&chunk(0), 3).unwrap(), &strings);
            same(&tier.restore(&chunk(1), 3).unwrap(), &ints);
            // Another batch count than squeezed is a miss, counted.
            assert!(tier.restore(&chunk(1), 4).is_none());
            assert_eq!(tier.stats().unreadable_chunks, 1);
            // Another version of the object: its chunks go.
            tier.drop_other_versions(&ObjectKey::new("s", "t/a.parquet", "v2"));
            assert!(!tier.holds(&chunk(0)));
            tier.offer(chunk(0), columns(&strings));
            assert!(tier.wait_written(Duration::from_secs(30)));
        }
        // A new process on the same directory: recovered from the slot
        // headers, parts read from their records.
        let tier = Squeezed::open(config(dir.path())).unwrap();
        tier.wait_recovered();
        same(&tier.restore(&chunk(0), 3).unwrap(), &strings);
        // A dropped chunk's slots keep it until reused, so recovery finds it
        // again (right for its key); the server drops other versions on
        // first sight of an object, as for the disk tier's pages.
        tier.drop_other_versions(&ObjectKey::new("s", "t/a.parquet", "v2"));
        assert!(tier.restore(&chunk(0), 3).is_none());
        assert!(tier.restore(&chunk(1), 3).is_none());
    }

    #[test]
    fn a_damaged_piece_or_part_is_a_miss_never_wrong_batches() {
        let dir = tempfile::tempdir().unwrap();
        let strings = batches(true);
        {
            let tier = Squeezed::open(config(dir.path())).unwrap();
            tier.offer(chunk(0), columns(&strings));
            assert!(tier.wait_written(Duration::from_secs(30)));
        }
        // Flip a byte of data in every written slot (the chunk's pieces and
        // its parts): each fails its checksum when read.
        let slot = 4096 + PIECE_BYTES as usize;
        let mut flipped = 0;
        for entry in walk(dir.path()) {
            let mut bytes = std::fs::read(&entry).unwrap();
            for start in (0..bytes.len()).step_by(slot) {
                let header = &bytes[start..start + 8];
                if header == b"SILTPAGE" && start + 4096 + 100 < bytes.len() {
                    bytes[start + 4096 + 100] ^= 0xFF;
                    flipped += 1;
                }
            }
            std::fs::write(&entry, bytes).unwrap();
        }
        assert!(flipped >= 2, "{flipped} slots flipped");
        let tier = Squeezed::open(config(dir.path())).unwrap();
        tier.wait_recovered();
        assert!(tier.restore(&chunk(0), 3).is_none());
    }

    fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else if path.extension().is_some_and(|e| e == "region") {
                out.push(path);
            }
        }
        out
    }

    #[test]
    fn a_writer_too_far_behind_drops_chunks_instead_of_holding_memory() {
        let dir = tempfile::tempdir().unwrap();
        let tier = Squeezed::open(SqueezeConfig {
            max_pending: 1,
            ..config(dir.path())
        })
        .unwrap();
        tier.offer(chunk(0), columns(&batches(false)));
        assert_eq!(tier.stats().dropped_chunks, 1);
        assert!(tier.wait_written(Duration::from_secs(30)));
        assert!(!tier.holds(&chunk(0)));
    }

    #[test]
    fn an_evicted_liquid_chunk_is_written_by_the_evicting_thread_when_the_writer_is_behind() {
        let dir = tempfile::tempdir().unwrap();
        let tier = Squeezed::open(SqueezeConfig {
            max_pending: 1,
            ..config(dir.path())
        })
        .unwrap();
        tier.wait_recovered();
        let strings = batches(true);
        tier.offer_evicted(chunk(0), columns(&strings));
        // Written before the offer returned: no writer involved.
        assert!(tier.holds(&chunk(0)));
        let stats = tier.stats();
        assert_eq!(
            (stats.written_here_chunks, stats.squeezed_chunks, stats.dropped_chunks),
            (1, 1, 0)
        );
        same(&tier.restore(&chunk(0), 3).unwrap(), &strings);
        // Batches still Arrow would be encoded on the evicting thread: dropped.
        tier.offer_evicted(chunk(1), arrow(&batches(false)));
        assert_eq!(tier.stats().dropped_chunks, 1);
        assert!(!tier.holds(&chunk(1)));
        // Off: a liquid chunk is dropped too.
        let off_dir = tempfile::tempdir().unwrap();
        let off = Squeezed::open(SqueezeConfig {
            max_pending: 1,
            write_when_behind: false,
            ..config(off_dir.path())
        })
        .unwrap();
        off.wait_recovered();
        off.offer_evicted(chunk(0), columns(&strings));
        assert!(!off.holds(&chunk(0)));
        assert_eq!(off.stats().dropped_chunks, 1);
    }
}
