//! Liquid string and binary arrays (LiquidCache §4.1.1, §4.2).
//!
//! A batch is stored in one of four forms, chosen from its data:
//!
//! - `dict-fsst`: the distinct values once, FSST compressed with the column
//!   column's symbol table, and one bit-packed key per row. Predicates run once
//!   per distinct value and are mapped through the keys.
//! - `dict`: the same with raw dictionary values, when FSST does not pay.
//! - `fsst`: no dictionary (high cardinality), every value FSST compressed.
//! - `plain`: no dictionary, raw values.
//!
//! Every value is addressable on its own (bit-packed offsets), so `filter`
//! and `take` decode only the rows (and, with a dictionary, only the
//! dictionary entries) they return.
//!
//! Dictionary-typed columns always keep the dictionary form, so decoding
//! back to the input's key type can never overflow it. Their predicates'
//! literals have the dictionary's *value* type (the caller casts literals to
//! the type Arrow compares in); a literal of the dictionary type itself is
//! accepted too. Results equal Arrow's kernels on the array cast to its value
//! type. Decoding gives the input's dictionary type with only the entries the
//! returned rows use; rows whose key pointed at a null value come back with a
//! null key (logically the same array).
//!
//! Each FSST array holds the column's ~2.3 KiB decoding table through an `Arc`
//! and counts it in full in `heap_size` (see `store::SymbolTable`).

mod access;
mod pattern;
mod store;
mod zstd_blocks;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, UInt32Array};
use arrow::buffer::{BooleanBuffer, NullBuffer};
use arrow::compute::and_kleene;
use arrow::datatypes::DataType;

use crate::bitpack::BitPacked;
use crate::persist::{self, Reader, Writer, tag};
use crate::{CmpOp, LiquidArray, LiquidArrayRef, LiquidPredicate, selection_to_indices};
use access::{build_dictionary, build_flat, is_utf8, own_nulls, value_type};
pub(crate) use access::{is_value_type, row_values};
use pattern::LikeMatcher;
use store::{Codec, Store};
pub use store::{Compaction, MIN_COMPACT_BYTES};
use zstd_blocks::ZstdBlocks;

/// Whether `data_type` is handled by this module: the six byte types, and
/// dictionaries of them with any integer key.
pub fn is_supported(data_type: &DataType) -> bool {
    match data_type {
        DataType::Dictionary(key, value) => key.is_dictionary_key_type() && is_value_type(value),
        other => is_value_type(other),
    }
}

/// Per column (of one file) state for string and binary batches: the FSST codec,
/// trained on the first batch with data and reused for the rest, so the
/// training cost and the table's memory are paid once per column.
#[derive(Debug, Default)]
pub struct BytesEncoder {
    codec: Option<Codec>,
    compaction: Compaction,
}

impl BytesEncoder {
    /// A fresh encoder for one column of a file.
    pub fn new() -> Self {
        BytesEncoder::default()
    }

    /// A fresh encoder whose batches take the zstd block form as
    /// `compaction` says (the default: when clearly smaller).
    pub fn with_compaction(compaction: Compaction) -> Self {
        BytesEncoder {
            codec: None,
            compaction,
        }
    }

    /// The liquid form of `array`, or `None` when its type is not handled here.
    pub fn encode(&mut self, array: &ArrayRef) -> Option<LiquidArrayRef> {
        Some(Arc::new(self.encode_bytes(array)?))
    }

    /// The liquid form of `array` with one stored value per row (no
    /// dictionary), FSST compressed with the column's table when that pays;
    /// `None` unless `array` has a plain byte type. The shared dictionary
    /// stores its values this way, and evaluates predicates on all of them
    /// for every batch that uses them and takes entries one by one: so they
    /// take the zstd block form only when `blocks` (the column's takes are
    /// of entries its predicates matched: [`crate::encoder::ValueUse`]) and
    /// the encoder's compaction allows it, or under [`Compaction::Always`]
    /// (measured on ClickBench q31 at 5M rows: `SearchPhrase <> ''` projected
    /// from zstd segments took 3.6x the time of FSST ones).
    pub fn encode_flat(&mut self, array: &ArrayRef, blocks: bool) -> Option<LiquidArrayRef> {
        if !is_value_type(array.data_type()) {
            return None;
        }
        let rows = row_values(array.as_ref())?;
        let compaction = match self.compaction {
            Compaction::Always => Compaction::Always,
            allowed if blocks => allowed,
            _ => Compaction::Never,
        };
        let codec = self.codec_for(&rows);
        Some(Arc::new(LiquidBytesArray {
            data_type: array.data_type().clone(),
            len: rows.len(),
            nulls: own_nulls(array.as_ref()),
            layout: Layout::Flat(Store::best(&rows, codec, compaction)),
        }))
    }

    /// [`BytesEncoder::encode`] with the concrete type.
    fn encode_bytes(&mut self, array: &dyn Array) -> Option<LiquidBytesArray> {
        if !is_supported(array.data_type()) {
            return None;
        }
        let rows = row_values(array)?;
        let nulls = own_nulls(array);
        let dict = Distinct::of(&rows, nulls.as_ref());
        let compaction = self.compaction;
        let codec = self.codec_for(&dict.values);
        let keep_dict = matches!(array.data_type(), DataType::Dictionary(..)) || dict.pays(&rows, nulls.as_ref());
        let layout = if keep_dict {
            Layout::Dict {
                keys: BitPacked::pack_min_width(&dict.keys),
                values: Store::best(&dict.values, codec, compaction),
            }
        } else {
            Layout::Flat(Store::best(&rows, codec, compaction))
        };
        Some(LiquidBytesArray {
            data_type: array.data_type().clone(),
            len: rows.len(),
            nulls,
            layout,
        })
    }

    /// The column's codec, trained on `sample` (distinct values) if this is the
    /// first batch with any bytes.
    fn codec_for(&mut self, sample: &Vec<&[u8]>) -> Option<&Codec> {
        if self.codec.is_none() && sample.iter().any(|v| !v.is_empty()) {
            self.codec = Some(Codec::train(sample, self.compaction));
        }
        self.codec.as_ref()
    }
}

/// The distinct non-null values of a batch, in order of first occurrence,
/// and each row's index into them (0 for null rows).
struct Distinct<'a> {
    values: Vec<&'a [u8]>,
    keys: Vec<u32>,
}

impl<'a> Distinct<'a> {
    fn of(rows: &[&'a [u8]], nulls: Option<&NullBuffer>) -> Self {
        let mut ids: HashMap<&[u8], u32> = HashMap::new();
        let mut values = Vec::new();
        let keys = rows
            .iter()
            .enumerate()
            .map(|(i, &v)| match nulls.is_some_and(|n| n.is_null(i)) {
                true => 0,
                false => *ids.entry(v).or_insert_with(|| {
                    values.push(v);
                    (values.len() - 1) as u32
                }),
            })
            .collect();
        Distinct { values, keys }
    }

    /// A dictionary pays when it is smaller: the distinct values once plus
    /// a bit-packed key per row, against every value (both compressed alike
    /// by FSST, so raw lengths stand in), with a 10% margin for the indirection.
    fn pays(&self, rows: &[&[u8]], nulls: Option<&NullBuffer>) -> bool {
        if u32::try_from(rows.len()).is_err() || self.values.is_empty() {
            return false;
        }
        const OFFSET: usize = 4;
        let distinct: usize = self.values.iter().map(|v| v.len() + OFFSET).sum();
        let all: usize = rows
            .iter()
            .enumerate()
            .filter(|(i, _)| !nulls.is_some_and(|n| n.is_null(*i)))
            .map(|(_, v)| v.len() + OFFSET)
            .sum();
        let key_bits = (usize::BITS - (self.values.len() - 1).leading_zeros()).max(1) as usize;
        distinct + rows.len() * key_bits / 8 < all * 9 / 10
    }
}

/// How the values of a batch are stored.
#[derive(Debug)]
enum Layout {
    /// Distinct values once; `keys[row]` indexes them (any value on null rows).
    Dict { keys: BitPacked<u32>, values: Store },
    /// One stored value per row (empty on null rows).
    Flat(Store),
}

/// A liquid string or binary batch (see the module documentation).
#[derive(Debug)]
pub struct LiquidBytesArray {
    data_type: DataType,
    len: usize,
    nulls: Option<NullBuffer>,
    layout: Layout,
}

/// A [`LiquidBytesArray`] [`LiquidArray::write`] wrote (after its tag):
/// its keys checked against its values.
pub(crate) fn read_bytes(r: &mut Reader<'_>) -> persist::Result<LiquidArrayRef> {
    let data_type = r.data_type()?;
    if !is_supported(&data_type) {
        return persist::bad(format!("strings of type {data_type}"));
    }
    let len = r.count()?;
    let nulls = r.nulls(len)?;
    let layout = match r.u8()? {
        0 => {
            let keys = r.packed::<u32>()?;
            let values = Store::read(r)?;
            let valid = |row: usize| nulls.as_ref().is_none_or(|n| n.is_valid(row));
            let unpacked = keys.unpack();
            let in_range = unpacked
                .iter()
                .enumerate()
                .all(|(row, &k)| !valid(row) || (k as usize) < values.len());
            if keys.len() != len || !in_range {
                return persist::bad("dictionary keys that do not fit their values");
            }
            Layout::Dict { keys, values }
        }
        1 => {
            let values = Store::read(r)?;
            if values.len() != len {
                return persist::bad(format!("{} values for {len} rows", values.len()));
            }
            Layout::Flat(values)
        }
        l => return persist::bad(format!("unknown string layout {l}")),
    };
    Ok(Arc::new(LiquidBytesArray {
        data_type,
        len,
        nulls,
        layout,
    }))
}

/// Decoded entries and, per output row, the entry it shows (`None` = null).
#[derive(Default)]
struct Gathered {
    data: Vec<u8>,
    ends: Vec<usize>,
    keys: Vec<Option<u32>>,
}

impl Gathered {
    /// Appends an entry with `decode` and returns its id.
    fn push(&mut self, decode: impl FnOnce(&mut Vec<u8>)) -> u32 {
        decode(&mut self.data);
        self.ends.push(self.data.len());
        (self.ends.len() - 1) as u32
    }

    /// The output array of `data_type`.
    fn into_array(self, data_type: &DataType) -> ArrayRef {
        let Gathered { data, ends, keys } = self;
        let starts = std::iter::once(0).chain(ends.iter().copied());
        let entries: Vec<&[u8]> = starts.zip(&ends).map(|(s, &e)| &data[s..e]).collect();
        if let DataType::Dictionary(..) = data_type {
            return build_dictionary(data_type, &entries, keys);
        }
        let rows: Vec<Option<&[u8]>> = keys.iter().map(|k| k.map(|k| entries[k as usize])).collect();
        build_flat(data_type, &rows)
    }
}

impl LiquidBytesArray {
    fn is_valid(&self, row: usize) -> bool {
        self.nulls.as_ref().is_none_or(|n| n.is_valid(row))
    }

    /// Decodes the given rows (`None` = null row): with a dictionary, each
    /// referenced entry once, in order of first use.
    fn gather(&self, rows: impl Iterator<Item = Option<usize>>) -> Gathered {
        let mut g = Gathered::default();
        match &self.layout {
            Layout::Dict { keys, values } => {
                let mut remap = vec![u32::MAX; values.len()];
                let mut reader = values.reader();
                for row in rows {
                    let key = row.filter(|&r| self.is_valid(r)).map(|r| {
                        let old = keys.get(r) as usize;
                        if remap[old] == u32::MAX {
                            remap[old] = g.push(|out| reader.append(old, out));
                        }
                        remap[old]
                    });
                    g.keys.push(key);
                }
            }
            Layout::Flat(values) => {
                let mut reader = values.reader();
                for row in rows {
                    let key = row
                        .filter(|&r| self.is_valid(r))
                        .map(|r| g.push(|out| reader.append(r, out)));
                    g.keys.push(key);
                }
            }
        }
        g
    }

    /// Decodes every row in one pass (no per-row random access).
    fn gather_all(&self) -> Gathered {
        let mut g = Gathered::default();
        let values = match &self.layout {
            Layout::Dict { values, .. } | Layout::Flat(values) => values,
        };
        values.append_all(&mut g.data, &mut g.ends);
        g.keys = match &self.layout {
            Layout::Dict { keys, .. } => keys.unpack().into_iter().map(Some).collect(),
            Layout::Flat(_) => (0..self.len as u32).map(Some).collect(),
        };
        if let Some(nulls) = &self.nulls {
            for (key, valid) in g.keys.iter_mut().zip(nulls.iter()) {
                if !valid {
                    *key = None;
                }
            }
        }
        g
    }

    /// `f` applied to every non-null row's value, as a boolean array with the
    /// batch's nulls. With a dictionary `f` runs once per distinct value.
    fn eval_values(&self, mut f: impl FnMut(&[u8]) -> bool) -> BooleanArray {
        let bits = match &self.layout {
            Layout::Dict { keys, values } => {
                let mut matches = Vec::with_capacity(values.len());
                values.for_each(|_, v| matches.push(f(v)));
                map_keys(keys, &matches)
            }
            Layout::Flat(values) => {
                let mut bits = vec![false; self.len];
                values.for_each(|i, v| bits[i] = self.is_valid(i) && f(v));
                BooleanBuffer::from(bits)
            }
        };
        BooleanArray::new(bits, self.nulls.clone())
    }

    /// Whether `f` holds for every non-null row's value.
    fn all_values(&self, mut f: impl FnMut(&[u8]) -> bool) -> bool {
        let mut all = true;
        let values = match &self.layout {
            Layout::Dict { values, .. } | Layout::Flat(values) => values,
        };
        values.for_each(|i, v| {
            if !self.is_flat_null(i) {
                all &= f(v);
            }
        });
        all
    }

    /// Whether stored value `i` belongs to a null row (only flat layouts store those).
    fn is_flat_null(&self, i: usize) -> bool {
        matches!(self.layout, Layout::Flat(_)) && !self.is_valid(i)
    }

    /// The bytes of a length-1 literal of the value type (or of this type):
    /// `Some(None)` for a null literal, `None` when the literal does not fit.
    fn literal<'a>(&self, literal: &'a ArrayRef) -> Option<Option<&'a [u8]>> {
        let values = self.literals(literal)?;
        if values.len() != 1 {
            return None;
        }
        Some(
            literal
                .logical_nulls()
                .is_none_or(|n| n.is_valid(0))
                .then_some(values[0]),
        )
    }

    /// The rows of `array` when its type is this array's value type (or this type).
    fn literals<'a>(&self, array: &'a ArrayRef) -> Option<Vec<&'a [u8]>> {
        let t = array.data_type();
        (t == value_type(&self.data_type) || t == &self.data_type)
            .then(|| row_values(array.as_ref()))
            .flatten()
    }

    fn compare(&self, op: CmpOp, literal: &ArrayRef) -> Option<BooleanArray> {
        let Some(lit) = self.literal(literal)? else {
            return Some(BooleanArray::new_null(self.len));
        };
        Some(self.eval_values(|v| op.holds(v.cmp(lit))))
    }

    fn in_list(&self, list: &ArrayRef, negated: bool) -> Option<BooleanArray> {
        let values = self.literals(list)?;
        if list.logical_null_count() > 0 {
            return None;
        }
        let set: HashSet<&[u8]> = values.into_iter().collect();
        Some(self.eval_values(|v| set.contains(v) != negated))
    }

    fn like(&self, pattern: &str, negated: bool, case_insensitive: bool) -> Option<BooleanArray> {
        if !is_utf8(&self.data_type) {
            return None;
        }
        let matcher = LikeMatcher::parse(pattern, case_insensitive)?;
        if matcher.is_case_insensitive() && !self.all_values(|v| v.is_ascii()) {
            // Arrow folds case with Unicode rules on non-ASCII data.
            return None;
        }
        if let Layout::Flat(values) = &self.layout
            && let Some(blocks) = values.zstd_blocks()
            && matcher.searches_blocks()
        {
            return Some(self.contained_in_blocks(blocks, &matcher, negated));
        }
        Some(self.eval_values(|v| matcher.matches(v) != negated))
    }

    /// `%abc%` over zstd blocks: one substring search per decoded block
    /// ([`LikeMatcher::mark_contained`]) instead of one per value.
    fn contained_in_blocks(&self, blocks: &ZstdBlocks, matcher: &LikeMatcher, negated: bool) -> BooleanArray {
        let mut hits = vec![false; self.len];
        blocks.for_each_block(|first, bytes, ends| {
            matcher.mark_contained(bytes, ends, &mut hits[first..first + ends.len()]);
        });
        let bits = BooleanBuffer::collect_bool(self.len, |i| self.is_valid(i) && hits[i] != negated);
        BooleanArray::new(bits, self.nulls.clone())
    }

    fn validity(&self) -> BooleanBuffer {
        match &self.nulls {
            Some(n) => n.inner().clone(),
            None => BooleanBuffer::new_set(self.len),
        }
    }
}

/// `matches[keys[row]]` for every row; all-false or all-true dictionaries
/// answer without reading the keys.
fn map_keys(keys: &BitPacked<u32>, matches: &[bool]) -> BooleanBuffer {
    if !matches.contains(&true) {
        return BooleanBuffer::new_unset(keys.len());
    }
    if !matches.contains(&false) {
        return BooleanBuffer::new_set(keys.len());
    }
    let keys = keys.unpack();
    BooleanBuffer::collect_bool(keys.len(), |i| matches.get(keys[i] as usize).copied().unwrap_or(false))
}

impl LiquidArray for LiquidBytesArray {
    fn data_type(&self) -> &DataType {
        &self.data_type
    }

    fn write(&self, w: &mut Writer<'_>) {
        w.u8(tag::BYTES);
        w.data_type(&self.data_type);
        w.count(self.len);
        w.nulls(self.nulls.as_ref());
        match &self.layout {
            Layout::Dict { keys, values } => {
                w.u8(0);
                w.packed(keys);
                values.write(w);
            }
            Layout::Flat(values) => {
                w.u8(1);
                values.write(w);
            }
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn null_count(&self) -> usize {
        self.nulls.as_ref().map_or(0, NullBuffer::null_count)
    }

    /// Keys, offsets, value bytes, null bitmap and the symbol table (see
    /// `Store::heap_size`); not the struct itself or its `DataType`.
    fn heap_size(&self) -> usize {
        let nulls = self.nulls.as_ref().map_or(0, |n| n.buffer().capacity());
        nulls
            + match &self.layout {
                Layout::Dict { keys, values } => keys.heap_size() + values.heap_size(),
                Layout::Flat(values) => values.heap_size(),
            }
    }

    fn encoding(&self) -> &'static str {
        match &self.layout {
            Layout::Dict { values, .. } => match values.form() {
                "fsst" => "dict-fsst",
                "zstd" => "dict-zstd",
                _ => "dict",
            },
            Layout::Flat(values) => match values.form() {
                "" => "plain",
                form => form,
            },
        }
    }

    fn evaluates_per_entry(&self) -> bool {
        matches!(self.layout, Layout::Dict { .. })
    }

    fn to_arrow(&self) -> ArrayRef {
        self.gather_all().into_array(&self.data_type)
    }

    fn filter(&self, selection: &BooleanArray) -> ArrayRef {
        let rows = selection_to_indices(selection);
        self.take(&rows)
    }

    fn take(&self, indices: &UInt32Array) -> ArrayRef {
        let rows = indices.iter().map(|i| i.map(|i| i as usize));
        self.gather(rows).into_array(&self.data_type)
    }

    fn evaluate(&self, predicate: &LiquidPredicate) -> Option<BooleanArray> {
        match predicate {
            LiquidPredicate::Compare { op, literal } => self.compare(*op, literal),
            LiquidPredicate::Between { low, high } => {
                let low = self.compare(CmpOp::GtEq, low)?;
                let high = self.compare(CmpOp::LtEq, high)?;
                and_kleene(&low, &high).ok()
            }
            LiquidPredicate::InList { values, negated } => self.in_list(values, *negated),
            LiquidPredicate::IsNull => Some(BooleanArray::new(!&self.validity(), None)),
            LiquidPredicate::IsNotNull => Some(BooleanArray::new(self.validity(), None)),
            LiquidPredicate::Like {
                pattern,
                negated,
                case_insensitive,
            } => self.like(pattern, *negated, *case_insensitive),
        }
    }
}
