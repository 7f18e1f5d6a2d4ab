//! A dictionary shared by the batches of one column of one file (`shared-dict`).
//!
//! Why: a file's column is cached as batches of 8192 rows (16 per 128Ki-row
//! row group). Repetitive columns (URLs, phrases, user ids) see most of the
//! column's distinct values in every batch, so a dictionary per batch stores
//! them once per batch, and even Parquet's dictionary per column chunk
//! stores them once per row group. One dictionary per file column stores each
//! value once: on 5M hits-like rows the `URL` column's values were ~40% of
//! its liquid bytes with a dictionary per row group, a few percent with one
//! per file.
//!
//! The dictionary grows in *segments*: a batch adds one segment holding the
//! values no earlier batch had, encoded with the column's flat encoding (FSST
//! strings with the column's symbol table, bit-packed integers), and keeps
//! its rows as bit-packed global ids into all segments so far. Batches may
//! arrive in any order and some never arrive (a filter rejected them); each
//! holds `Arc`s to the segments it can reference.
//!
//! Only the first [`MAX_SHARED_SEGMENTS`] segments, up to [`MAX_ENTRIES`]
//! values, join the shared dictionary. Later batches' new values form a
//! *private* segment that only that batch references: a long tail of rare
//! values cannot grow the segment list (which every batch walks) or the
//! encoder's memory without bound. When a full dictionary misses more than
//! 1 in [`ROLL_OVER`] of a batch's values (values drift through the file,
//! like user ids), the encoder starts a new dictionary instead; batches
//! encoded before keep the segments they reference.
//!
//! Predicates run once per dictionary entry, not once per row, and each
//! shared segment memoizes its last few predicates' results, so a scan over a
//! file evaluates `LIKE '%google%'` once per distinct URL, not once per batch.
//!
//! A segment's values are FSST strings, or zstd blocks when the column's
//! scans only take the entries their filter matched
//! ([`crate::encoder::ValueUse::Filtered`]): the memo then also keeps those
//! entries decoded ([`crate::segment_memo`]), and a scan keeps segments it
//! takes other entries from decoded for its later batches
//! ([`DecodedDictionaries`]).
//!
//! Memory accounting: a segment is charged in full to the batch that created
//! it (its `heap_size`) and to no other, so the memory tier's total is exact
//! while every batch of the column is cached. A segment whose creator was
//! evicted while later batches still reference it is held but uncharged
//! (bounded by the column's distinct values). The memo is bounded to
//! [`MEMO`] results of one bit per entry (and
//! [`crate::segment_memo::MATCHED_BYTES`] of matched entries) and not charged
//! either.

use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef, BooleanArray, BooleanBufferBuilder, UInt32Array};
use arrow::buffer::{BooleanBuffer, NullBuffer};
use arrow::compute::{concat, take};
use arrow::datatypes::DataType;

/// Hashing the column's values is most of the encoder's time; SipHash's DoS
/// resistance buys nothing on data we cache ourselves.
type HashMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;

use crate::integer::{compact_nulls, nulls_heap_size};
use crate::persist::{self, Reader, Writer, tag};
use crate::row_keys::RowKeys;
use crate::segment_memo::{Matched, SegmentMemo};
use crate::{LiquidArray, LiquidArrayRef, LiquidPredicate, selection_to_indices};

pub use crate::segment_memo::MEMO;

/// Values the shared dictionary grows to at most; later new values go to
/// private segments. Bounds the encoder's hash map (the values' bytes plus
/// ~40 bytes each) and the dictionary's key width (18 bits).
pub const MAX_ENTRIES: usize = 1 << 18;

/// Shared segments at most: every batch evaluates a predicate segment by
/// segment, so the list must stay short.
pub const MAX_SHARED_SEGMENTS: usize = 32;

/// A full dictionary missing more than 1 in this many of a batch's values
/// is replaced by a new one.
pub const ROLL_OVER: usize = 8;

/// Whether batches of `data_type` may share a dictionary: plain byte types
/// and integers (floats keep ALP; dictionary-typed input keeps its own
/// per-batch dictionary, so decoding can restore its key type).
pub fn is_eligible(data_type: &DataType) -> bool {
    crate::bytes::is_value_type(data_type)
        || (crate::integer::is_supported(data_type) && data_type.primitive_width().is_some())
}

/// The encoder's side of a column's dictionary: every shared value and the
/// shared segments built so far.
#[derive(Debug, Default)]
pub struct SharedDictionary {
    ids: HashMap<Box<[u8]>, u32>,
    segments: Vec<Arc<Segment>>,
    entries: usize,
    /// Bytes of the values in `ids`.
    value_bytes: usize,
}

/// Encodes dictionary values (no nulls) or whole batches in the column's
/// own form, as [`FlatForm`] says which.
pub type FlatEncoder<'a> = dyn FnMut(&ArrayRef, FlatForm) -> Option<LiquidArrayRef> + 'a;

/// Which of a column's flat forms a [`FlatEncoder`] is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlatForm {
    /// One value at a time (FSST or raw strings): for a batch weighed
    /// against the shared dictionary (whose segments memoize predicate
    /// results, which no per-batch form does).
    ValueByValue,
    /// A segment's values, on which every batch that uses them evaluates
    /// predicates and from which it takes entries: value by value, or zstd
    /// blocks for a column whose takes are of entries its predicates
    /// matched ([`crate::encoder::ValueUse`]).
    Segment,
    /// The column's smallest form, zstd blocks of strings included when they
    /// are clearly smaller: for a batch of mostly new values, which no
    /// dictionary can hold (`Referer` on ClickBench's hits: 3.7x Parquet's
    /// bytes as FSST, 1.1x as zstd blocks).
    Smallest,
}

impl SharedDictionary {
    /// Approximate heap bytes the encoder holds (its hash map of values), so
    /// the transcoder can bound the memory of the encoders it keeps.
    pub fn heap_size(&self) -> usize {
        self.value_bytes + self.ids.capacity() * (std::mem::size_of::<(Box<[u8]>, u32)>() + 8)
    }

    /// The liquid form of `array`: keys into the column's dictionary when that
    /// is smaller than `flat`'s encoding of the batch, else `flat`'s.
    pub fn encode(&mut self, array: &ArrayRef, flat: &mut FlatEncoder<'_>) -> Option<LiquidArrayRef> {
        let data = array.to_data();
        let Some(rows) = row_bytes(array.as_ref(), &data) else {
            return flat(array, FlatForm::Smallest);
        };
        let nulls = compact_nulls(array.logical_nulls().as_ref());
        let valid = rows.len() - nulls.as_ref().map_or(0, NullBuffer::null_count);
        if valid == 0 || u32::try_from(rows.len()).is_err() {
            return flat(array, FlatForm::Smallest);
        }
        // Global ids per row; values the dictionary lacks get ids after the existing ones.
        let mut fresh: HashMap<&[u8], u32> = HashMap::default();
        let mut fresh_rows: Vec<u32> = Vec::new();
        let mut ids = Vec::with_capacity(rows.len());
        for (i, value) in rows.iter().enumerate() {
            if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                // Any id in range will do for a null row: the previous
                // row's does not break its run (`RowKeys`).
                ids.push(ids.last().copied().unwrap_or(0));
                continue;
            }
            let id = match self.ids.get(*value) {
                Some(&id) => id,
                None => *fresh.entry(value).or_insert_with(|| {
                    fresh_rows.push(i as u32);
                    (self.entries + fresh_rows.len() - 1) as u32
                }),
            };
            ids.push(id);
        }
        // Mostly new values: a dictionary cannot pay.
        if fresh_rows.len() * 2 > valid {
            return flat(array, FlatForm::Smallest);
        }
        // The shared dictionary is full yet misses many of this batch's
        // values (the column's values drift, e.g. ids over time): start a
        // new one with this batch rather than store them privately per batch.
        if self.segments.len() >= MAX_SHARED_SEGMENTS && fresh_rows.len() * ROLL_OVER > valid {
            *self = SharedDictionary::default();
            return self.encode(array, flat);
        }
        let segment = match fresh_rows.is_empty() {
            true => None,
            false => {
                let values = take(array.as_ref(), &UInt32Array::from(fresh_rows.clone()), None).ok()?;
                Some(flat(&values, FlatForm::Segment)?)
            }
        };
        let keys = RowKeys::of(&ids);
        let dict_cost = keys.heap_size() + segment.as_ref().map_or(0, |s| s.heap_size());
        // Integers' flat form is cheap to build and can beat any dictionary
        // (a narrow range packs tighter than the keys), so always compare;
        // strings only when neither clearly wins.
        let compare = fresh_rows.len() * 8 > valid || !crate::bytes::is_value_type(array.data_type());
        if compare && let Some(flat) = flat(array, FlatForm::ValueByValue).filter(|f| f.heap_size() <= dict_cost) {
            return Some(flat);
        }
        let mut segments = self.segments.clone();
        let owned = segment.is_some();
        if let Some(values) = segment {
            let shared = self.segments.len() < MAX_SHARED_SEGMENTS;
            let segment = Arc::new(Segment {
                first: self.entries as u32,
                values,
                memo: Mutex::default(),
            });
            if shared && self.entries + fresh_rows.len() <= MAX_ENTRIES {
                for (value, id) in fresh {
                    self.value_bytes += value.len();
                    self.ids.insert(value.into(), id);
                }
                self.entries += fresh_rows.len();
                self.segments.push(segment.clone());
            }
            segments.push(segment);
        }
        Some(Arc::new(SharedDictArray {
            data_type: array.data_type().clone(),
            keys,
            nulls,
            segments,
            owned,
        }))
    }
}

/// Dictionaries decoded for one scan, reused by the later batches it reads
/// that share them: with one dictionary per file column, decoding it per
/// batch cost a scan projecting a string column more than the rows it kept
/// (ClickBench q31). Owned by the scan (one per partition and column) and
/// dropped with it, so the memory tier's accounting is untouched; holds at
/// most [`DECODED_DICTIONARIES`] dictionaries.
///
/// It also keeps block-compressed segments decoded (up to
/// [`DECODED_SEGMENTS`]): a take of a few rows from a zstd segment
/// decompresses whole blocks of values, which every later batch of the scan
/// would decompress again.
#[derive(Debug, Default)]
pub struct DecodedDictionaries {
    decoded: Vec<Decoded>,
    segments: Vec<(Arc<Segment>, ArrayRef)>,
}

/// One decoded dictionary and the segment list it decodes.
#[derive(Debug)]
struct Decoded {
    /// The address of the list's last segment and the list's length: the
    /// last segment names its list (segments are only ever appended).
    key: (usize, usize),
    /// The list, kept alive so no address is reused while the key is held.
    _segments: Vec<Arc<Segment>>,
    values: ArrayRef,
}

/// Decoded dictionaries one [`DecodedDictionaries`] keeps.
pub const DECODED_DICTIONARIES: usize = 4;

/// Decoded block-compressed segments one [`DecodedDictionaries`] keeps: the
/// shared ones of two dictionaries and some private ones.
pub const DECODED_SEGMENTS: usize = 80;

impl DecodedDictionaries {
    fn key(segments: &[Arc<Segment>]) -> (usize, usize) {
        let last = segments.last().map_or(0, |s| Arc::as_ptr(s) as usize);
        (last, segments.len())
    }

    fn get(&self, segments: &[Arc<Segment>]) -> Option<ArrayRef> {
        let key = Self::key(segments);
        self.decoded.iter().find(|d| d.key == key).map(|d| d.values.clone())
    }

    /// `segment`'s values decoded, kept for the scan's later batches.
    fn segment(&mut self, segment: &Arc<Segment>) -> ArrayRef {
        if let Some((_, values)) = self.segments.iter().find(|(s, _)| Arc::ptr_eq(s, segment)) {
            return values.clone();
        }
        if self.segments.len() >= DECODED_SEGMENTS {
            self.segments.remove(0);
        }
        let values = segment.values.to_arrow();
        self.segments.push((segment.clone(), values.clone()));
        values
    }

    fn insert(&mut self, segments: &[Arc<Segment>], values: ArrayRef) -> ArrayRef {
        if self.decoded.len() >= DECODED_DICTIONARIES {
            self.decoded.remove(0);
        }
        self.decoded.push(Decoded {
            key: Self::key(segments),
            _segments: segments.to_vec(),
            values: values.clone(),
        });
        values
    }
}

/// A string or binary view array taken from a reused dictionary (or any
/// larger batch) references the whole data buffers; copying out just its
/// rows' bytes keeps an output batch (and what Flight sends of it) to its
/// own rows.
pub fn compact_views(rows: ArrayRef) -> ArrayRef {
    use arrow::array::AsArray;
    match rows.data_type() {
        DataType::Utf8View => Arc::new(rows.as_string_view().gc()),
        DataType::BinaryView => Arc::new(rows.as_binary_view().gc()),
        _ => rows,
    }
}

/// Each row's value as bytes (anything for null rows): the bytes of a byte
/// type, the little-endian bytes of a primitive.
fn row_bytes<'a>(array: &'a dyn Array, data: &'a arrow::array::ArrayData) -> Option<Vec<&'a [u8]>> {
    if crate::bytes::is_value_type(array.data_type()) {
        return crate::bytes::row_values(array);
    }
    let width = array.data_type().primitive_width()?;
    let start = data.offset() * width;
    let buffer = data.buffers().first()?.as_slice();
    Some(buffer[start..start + data.len() * width].chunks_exact(width).collect())
}

/// Segments' decoded values as one array (no copy for one segment).
fn concat_parts(mut parts: Vec<ArrayRef>) -> ArrayRef {
    match parts.len() {
        1 => parts.pop().expect("one part"),
        _ => concat(&parts.iter().map(|p| p.as_ref()).collect::<Vec<_>>()).expect("segments share a type"),
    }
}

/// The distinct ids among `row_ids`, ascending: by sorting when the rows
/// are few, else by marking a bitmap over the `entries`.
fn used_ids(row_ids: &[Option<u32>], entries: usize) -> Vec<u32> {
    if row_ids.len() * 4 < entries {
        let mut used: Vec<u32> = row_ids.iter().flatten().copied().collect();
        used.sort_unstable();
        used.dedup();
        return used;
    }
    let mut seen = vec![false; entries];
    for id in row_ids.iter().flatten() {
        seen[*id as usize] = true;
    }
    (0..entries as u32).filter(|&id| seen[id as usize]).collect()
}

/// Values a batch added to its column's dictionary (or kept private), and the
/// predicate results on them that scans of the column share.
#[derive(Debug)]
struct Segment {
    /// Global id of the first value.
    first: u32,
    /// The values, in the column's flat liquid form, no nulls.
    values: LiquidArrayRef,
    /// Recent predicates, their result per value and (zstd values) the values they matched.
    memo: Mutex<SegmentMemo>,
}

impl Segment {
    fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether a value is read with its block (zstd), not on its own.
    fn is_block_compressed(&self) -> bool {
        self.values.encoding() == "zstd"
    }

    /// The values at `local` (ids in the segment, no nulls, ascending and
    /// distinct): from a zstd segment, out of the entries a remembered
    /// predicate matched or scans took when one set holds them all, else out
    /// of the scan's `decoded` segments (and then remembered as taken);
    /// otherwise read value by value.
    fn take(self: &Arc<Self>, local: &UInt32Array, decoded: Option<&mut DecodedDictionaries>) -> ArrayRef {
        if !self.is_block_compressed() {
            return self.values.take(local);
        }
        if let Some(values) = self.memo().take_matched(local) {
            return values;
        }
        let values = match decoded {
            Some(decoded) => {
                let values = decoded.segment(self);
                compact_views(take(values.as_ref(), local, None).expect("ids index the segment"))
            }
            None => self.values.take(local),
        };
        self.memo().remember_taken(local, &values, self.len());
        values
    }

    /// Writes the segment (a part: [`crate::persist`]); not its memo.
    fn write(&self, w: &mut Writer<'_>) {
        w.u64(u64::from(self.first));
        w.array(&self.values);
    }

    /// A segment [`Segment::write`] wrote.
    fn read(r: &mut Reader<'_>) -> persist::Result<Self> {
        let first = u32::try_from(r.u64()?).map_err(|e| persist::PersistError(format!("segment start: {e}")))?;
        let values = r.array()?;
        if values.null_count() > 0 {
            return persist::bad("a dictionary segment with nulls");
        }
        Ok(Segment {
            first,
            values,
            memo: Mutex::default(),
        })
    }

    /// The memo; a panic elsewhere while holding it leaves it usable (it only caches).
    fn memo(&self) -> std::sync::MutexGuard<'_, SegmentMemo> {
        self.memo.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `predicate` on every value, from the memo when a scan of this column
    /// already asked; `None` when the values' encoding cannot evaluate it.
    /// A zstd segment remembers the few entries it matched decoded, for the
    /// takes of the rows the filter keeps.
    fn evaluate(&self, predicate: &LiquidPredicate) -> Option<Arc<BooleanArray>> {
        if let Some(hit) = self.memo().get(predicate) {
            return Some(hit);
        }
        let result = Arc::new(self.values.evaluate(predicate)?);
        let matched = match self.is_block_compressed() {
            true => Matched::of(&result, |ids| self.values.take(ids)),
            false => None,
        };
        self.memo().insert(predicate.clone(), Arc::clone(&result), matched);
        Some(result)
    }
}

/// A [`SharedDictArray`] [`LiquidArray::write`] wrote (after its tag): its
/// segments contiguous from id 0, of its type, and its keys within them.
pub(crate) fn read_shared_dict(r: &mut Reader<'_>, runs: bool) -> persist::Result<LiquidArrayRef> {
    let data_type = r.data_type()?;
    let keys = RowKeys::read(r, runs)?;
    let nulls = r.nulls(keys.len())?;
    let owned = r.bool()?;
    let count = r.len(8)?;
    let mut segments: Vec<Arc<Segment>> = Vec::with_capacity(count);
    let mut entries = 0u64;
    for _ in 0..count {
        let segment = r.part(Segment::read)?;
        if u64::from(segment.first) != entries || segment.values.data_type() != &data_type {
            return persist::bad("dictionary segments out of order or of another type");
        }
        entries += segment.len() as u64;
        segments.push(segment);
    }
    let array = SharedDictArray {
        data_type,
        keys,
        nulls,
        segments,
        owned,
    };
    let unpacked = array.keys.unpack();
    let in_range = unpacked
        .iter()
        .enumerate()
        .all(|(row, &k)| !array.is_valid(row) || u64::from(k) < entries);
    if !in_range {
        return persist::bad("dictionary ids beyond the dictionary");
    }
    Ok(Arc::new(array))
}

/// A batch whose rows are ids into its column's shared dictionary.
#[derive(Debug)]
pub struct SharedDictArray {
    data_type: DataType,
    /// Global dictionary id per row (on a null row, any id in range), bit-packed or as runs.
    keys: RowKeys,
    nulls: Option<NullBuffer>,
    /// The shared segments when this batch was encoded, then its private one (all its ids fall in them).
    segments: Vec<Arc<Segment>>,
    /// Whether the last segment was added by this batch (and is charged to it).
    owned: bool,
}

impl SharedDictArray {
    fn is_valid(&self, row: usize) -> bool {
        self.nulls.as_ref().is_none_or(|n| n.is_valid(row))
    }

    fn entries(&self) -> usize {
        self.segments.last().map_or(0, |s| s.first as usize + s.len())
    }

    /// Every entry of the batch's dictionary, decoded, in id order.
    fn decode_dictionary(&self) -> ArrayRef {
        concat_parts(self.segments.iter().map(|s| s.values.to_arrow()).collect())
    }

    /// Decodes the rows at `indices` (a null index = a null row): the
    /// entries they use, once each, then `take` through compact keys; or,
    /// when rows are many per entry or `decoded` already holds this batch's
    /// dictionary, `take` from the whole decoded dictionary.
    fn gather(&self, indices: &UInt32Array, mut decoded: Option<&mut DecodedDictionaries>) -> ArrayRef {
        let unpacked = (indices.len() * 8 > self.keys.len()).then(|| self.keys.unpack());
        let id = |r: usize| unpacked.as_ref().map_or_else(|| self.keys.get(r), |k| k[r]);
        let row_ids: Vec<Option<u32>> = indices
            .iter()
            .map(|r| r.map(|r| r as usize).filter(|&r| self.is_valid(r)).map(id))
            .collect();
        // Many rows per entry: decoding every entry in bulk and taking from
        // them beats finding the used ones (measured on ClickBench q31:
        // sorting, deduplicating and remapping ids cost more than decoding
        // up to two string entries, or sixteen integers, per row).
        let rows_per_entry = match crate::bytes::is_value_type(&self.data_type) {
            true => 2,
            false => 16,
        };
        let bulk = self.entries() <= indices.len() * rows_per_entry;
        let known = decoded.as_ref().and_then(|d| d.get(&self.segments));
        if !self.segments.is_empty() && (bulk || known.is_some()) {
            let keys: UInt32Array = row_ids.into_iter().collect();
            let (values, reused) = match (known, decoded.as_deref_mut()) {
                (Some(values), _) => (values, true),
                (None, Some(decoded)) => (decoded.insert(&self.segments, self.decode_dictionary()), false),
                (None, None) => (self.decode_dictionary(), false),
            };
            let rows = take(values.as_ref(), &keys, None).expect("ids index the dictionary");
            // A dictionary decoded for this batch is at most a few times its
            // rows' bytes; one reused from earlier batches may be far larger.
            return if reused { compact_views(rows) } else { rows };
        }
        // The ids used, ascending, once each; a row's compact key is its id's position.
        let used = used_ids(&row_ids, self.entries());
        let mut parts: Vec<ArrayRef> = Vec::new();
        let mut rest = &used[..];
        for segment in &self.segments {
            let end = segment.first + segment.len() as u32;
            let (mine, after) = rest.split_at(rest.partition_point(|&id| id < end));
            rest = after;
            if !mine.is_empty() {
                let local = UInt32Array::from_iter_values(mine.iter().map(|id| id - segment.first));
                parts.push(segment.take(&local, decoded.as_deref_mut()));
            }
        }
        if parts.is_empty() {
            return arrow::array::new_null_array(&self.data_type, indices.len());
        }
        let values = concat_parts(parts);
        // Distinct non-null rows in ascending id order (one row, say) are the values themselves.
        if used.len() == row_ids.len() && row_ids.iter().zip(&used).all(|(r, u)| *r == Some(*u)) {
            return values;
        }
        let keys: UInt32Array = row_ids
            .iter()
            .map(|id| id.map(|id| used.binary_search(&id).expect("every row's id is used") as u32))
            .collect();
        take(values.as_ref(), &keys, None).expect("compact keys index the values")
    }

    /// Each entry's result (`None` = null) across all segments, or `None`
    /// when some segment cannot evaluate `predicate`.
    fn entry_results(&self, predicate: &LiquidPredicate) -> Option<Vec<Arc<BooleanArray>>> {
        self.segments.iter().map(|s| s.evaluate(predicate)).collect()
    }

    fn validity(&self) -> BooleanBuffer {
        match &self.nulls {
            Some(n) => n.inner().clone(),
            None => BooleanBuffer::new_set(self.keys.len()),
        }
    }
}

impl LiquidArray for SharedDictArray {
    fn data_type(&self) -> &DataType {
        &self.data_type
    }

    fn write(&self, w: &mut Writer<'_>) {
        w.u8(match self.keys.is_runs() {
            true => tag::SHARED_DICT_RUNS,
            false => tag::SHARED_DICT,
        });
        w.data_type(&self.data_type);
        self.keys.write(w);
        w.nulls(self.nulls.as_ref());
        w.bool(self.owned);
        w.count(self.segments.len());
        for segment in &self.segments {
            w.part(segment, Segment::write);
        }
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    fn null_count(&self) -> usize {
        self.nulls.as_ref().map_or(0, NullBuffer::null_count)
    }

    /// Keys, nulls, the segment list and, when this batch created it, the
    /// newest segment (see the module documentation).
    fn heap_size(&self) -> usize {
        let owned = match (self.owned, self.segments.last()) {
            (true, Some(s)) => s.values.heap_size(),
            _ => 0,
        };
        self.keys.heap_size()
            + nulls_heap_size(self.nulls.as_ref())
            + self.segments.capacity() * std::mem::size_of::<Arc<Segment>>()
            + owned
    }

    fn encoding(&self) -> &'static str {
        match self.keys.is_runs() {
            true => "shared-dict-runs",
            false => "shared-dict",
        }
    }

    fn evaluates_per_entry(&self) -> bool {
        true
    }

    fn to_arrow(&self) -> ArrayRef {
        self.gather(&UInt32Array::from_iter_values(0..self.len() as u32), None)
    }

    fn filter(&self, selection: &BooleanArray) -> ArrayRef {
        self.gather(&selection_to_indices(selection), None)
    }

    fn take(&self, indices: &UInt32Array) -> ArrayRef {
        self.gather(indices, None)
    }

    fn take_reusing(&self, indices: &UInt32Array, decoded: &mut DecodedDictionaries) -> ArrayRef {
        self.gather(indices, Some(decoded))
    }

    fn evaluate(&self, predicate: &LiquidPredicate) -> Option<BooleanArray> {
        let len = self.len();
        match predicate {
            LiquidPredicate::IsNull => return Some(BooleanArray::new(!&self.validity(), None)),
            LiquidPredicate::IsNotNull => return Some(BooleanArray::new(self.validity(), None)),
            _ => {}
        }
        let results = self.entry_results(predicate)?;
        let any_null = results.iter().any(|r| r.null_count() > 0);
        if !any_null {
            if results.iter().all(|r| r.true_count() == 0) {
                return Some(BooleanArray::new(BooleanBuffer::new_unset(len), self.nulls.clone()));
            }
            if results.iter().all(|r| r.true_count() == r.len()) {
                return Some(BooleanArray::new(BooleanBuffer::new_set(len), self.nulls.clone()));
            }
        }
        // Per entry: its result, and whether it is valid, as bitmaps (one
        // copy of each segment's bits, not a bool per entry per batch).
        let mut truth = BooleanBufferBuilder::new(self.entries());
        let mut valid = any_null.then(|| BooleanBufferBuilder::new(self.entries()));
        for r in &results {
            truth.append_buffer(r.values());
            if let Some(valid) = valid.as_mut() {
                match r.nulls() {
                    Some(n) => valid.append_buffer(n.inner()),
                    None => valid.append_n(r.len(), true),
                }
            }
        }
        let truth = truth.finish();
        let keys = self.keys.unpack();
        let values = BooleanBuffer::collect_bool(len, |i| truth.value(keys[i] as usize));
        let nulls = match valid {
            Some(mut valid) => {
                let valid = valid.finish();
                let valid = NullBuffer::new(BooleanBuffer::collect_bool(len, |i| valid.value(keys[i] as usize)));
                NullBuffer::union(self.nulls.as_ref(), Some(&valid))
            }
            None => self.nulls.clone(),
        };
        Some(BooleanArray::new(values, nulls))
    }
}
