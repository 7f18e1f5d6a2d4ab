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

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Weak};

use arrow::array::ArrayRef;
use std::time::{Duration, Instant};

use silt_liquid::ColumnEncoder;

use crate::column_cache::{BatchKey, CachedColumn, ColumnCache, MemoryForm, TranscodePolicy};

/// Fraction of one core the transcoder may use (on the 2-core machines we
/// target, a quarter of the CPU: queries keep the rest).
pub const CPU_SHARE: f64 = 0.5;

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

/// With no batch to transcode for this long, the encoders are dropped: the
/// scans that admitted their chunks are over.
const IDLE: Duration = Duration::from_secs(1);

/// Encodes every admitted batch of a type liquid supports, at admission (not
/// only under memory pressure), on one background thread. Held by its
/// [`ColumnCache`]; dropping it stops the worker.
pub struct LiquidTranscoder {
    tx: SyncSender<BatchKey>,
    backlog: Arc<AtomicUsize>,
}

impl LiquidTranscoder {
    /// Starts the worker for `cache` (a [`crate::ColumnCacheBuilder::transcode`] factory).
    pub fn start(cache: Weak<ColumnCache>) -> Box<dyn TranscodePolicy> {
        Box::new(Self::spawn(cache))
    }

    fn spawn(cache: Weak<ColumnCache>) -> Self {
        let (tx, rx) = sync_channel(QUEUE);
        let backlog = Arc::new(AtomicUsize::new(0));
        let worker_backlog = backlog.clone();
        let spawned = std::thread::Builder::new()
            .name("silt-transcoder".into())
            .spawn(move || run(cache, rx, worker_backlog));
        if let Err(e) = spawned {
            // Without a worker every entry stays Arrow: slower, still correct.
            tracing::warn!("cannot start the liquid transcoder: {e}");
        }
        LiquidTranscoder { tx, backlog }
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
        self.backlog.fetch_add(1, Ordering::Relaxed);
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(key.clone()) {
            self.backlog.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn backlog(&self) -> usize {
        self.backlog.load(Ordering::Relaxed)
    }
}

/// The column of a file (object version) a batch belongs to: its key
/// without the row group and batch index.
type ColumnKey = (crate::key::ObjectKey, u32);

fn run(cache: Weak<ColumnCache>, rx: Receiver<BatchKey>, backlog: Arc<AtomicUsize>) {
    let mut encoders = Encoders::default();
    loop {
        let key = match rx.recv_timeout(IDLE) {
            Ok(key) => key,
            Err(RecvTimeoutError::Timeout) => {
                encoders = Encoders::default();
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let started = Instant::now();
        let Some(cache) = cache.upgrade() else {
            return;
        };
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| transcode(&cache, &key, &mut encoders)));
        if done.is_err() {
            tracing::error!(path = %key.object.path, column = key.column, "transcoding a column batch panicked; it stays Arrow");
            encoders = Encoders::default();
        }
        drop(cache);
        backlog.fetch_sub(1, Ordering::Relaxed);
        let worked = started.elapsed();
        std::thread::sleep(
            worked
                .mul_f64((1.0 - CPU_SHARE) / CPU_SHARE)
                .min(Duration::from_millis(100)),
        );
    }
}

/// The encoders of the columns being transcoded, at most [`ENCODERS`] and
/// [`ENCODER_BYTES`], least recently used dropped first.
#[derive(Default)]
struct Encoders {
    map: HashMap<ColumnKey, (ColumnEncoder, u64)>,
    uses: u64,
}

impl Encoders {
    /// The encoder of `column`, made for `data_type` if it has none.
    fn get(&mut self, column: ColumnKey, data_type: &arrow::datatypes::DataType) -> &mut ColumnEncoder {
        self.uses += 1;
        if !self.map.contains_key(&column) {
            self.make_room();
        }
        let (encoder, used) = self
            .map
            .entry(column)
            .or_insert_with(|| (ColumnEncoder::new(data_type), 0));
        *used = self.uses;
        encoder
    }

    /// Drops least recently used encoders until one more fits.
    fn make_room(&mut self) {
        let mut bytes: usize = self.map.values().map(|(e, _)| e.heap_size()).sum();
        while self.map.len() >= ENCODERS || (!self.map.is_empty() && bytes > ENCODER_BYTES) {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            let Some((dropped, _)) = oldest.and_then(|k| self.map.remove(&k)) else {
                break;
            };
            bytes -= dropped.heap_size();
        }
    }
}

/// Transcodes one entry if it is still the Arrow batch that was admitted,
/// keeping the liquid form only when it is no larger.
fn transcode(cache: &ColumnCache, key: &BatchKey, encoders: &mut Encoders) {
    let Some(CachedColumn::Arrow(array)) = cache.peek(key) else {
        return; // evicted, invalidated or already liquid
    };
    let column = (key.object.clone(), key.column);
    let encoder = encoders.get(column, array.data_type());
    let Some(liquid) = encoder.encode(&array) else {
        return;
    };
    let arrow_bytes = arrow::array::Array::get_array_memory_size(array.as_ref());
    if liquid.heap_size() <= arrow_bytes {
        cache.replace_with_liquid(
            key,
            &array,
            CachedColumn::Liquid {
                array: liquid,
                arrow_bytes,
            },
        );
    }
}
