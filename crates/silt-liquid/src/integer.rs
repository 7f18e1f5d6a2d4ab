//! Liquid integer arrays: frame of reference + bit-packing.
//!
//! Why: integer-like columns (keys, dates, timestamps, decimals) usually span
//! a narrow range, so `value - min` fits in far fewer bits than the native
//! width. Packed offsets stay element-addressable ([`BitPacked::get`]), and
//! predicates move the literal into the offset domain once, then compare
//! unsigned offsets block by block without materialising the values.
//!
//! Every integer-like Arrow type maps to its physical native (`Date32` is an
//! `i32`, `Timestamp(_, tz)` an `i64`, `Decimal128` an `i128`); the exact
//! `DataType` (time zone, precision, scale) is kept and given back.
//!
//! The second half of this file holds the pieces the float and boolean
//! encodings share: null handling, gathering rows for `filter`/`take`,
//! the predicate skeleton ([`Evaluate`], [`evaluate`]) and [`PlainArray`].

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayDataBuilder, ArrayRef, BooleanArray, BooleanBufferBuilder, MutableArrayData, Scalar, UInt32Array,
    make_array,
};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow::compute::kernels::cmp;
use arrow::compute::{and_kleene, is_not_null, is_null, not, or_kleene};
use arrow::datatypes::{ArrowNativeType, DataType};

use crate::bitpack::{BitPacked, PackWord, bit_width};
use crate::persist::{self, Reader, Writer, tag};
use crate::{CmpOp, LiquidArray, LiquidArrayRef, LiquidPredicate};

/// Whether `data_type` is handled by this module.
pub fn is_supported(data_type: &DataType) -> bool {
    physical(data_type).is_some()
}

/// The liquid form of `array`, or `None` when its type is not handled here
/// (or, for `Decimal128`, when its values span more than `u64` offsets).
pub fn encode(array: &ArrayRef) -> Option<LiquidArrayRef> {
    match physical(array.data_type())? {
        Physical::I8 => encode_native::<i8>(array),
        Physical::I16 => encode_native::<i16>(array),
        Physical::I32 => encode_native::<i32>(array),
        Physical::I64 => encode_native::<i64>(array),
        Physical::I128 => encode_native::<i128>(array),
        Physical::U8 => encode_native::<u8>(array),
        Physical::U16 => encode_native::<u16>(array),
        Physical::U32 => encode_native::<u32>(array),
        Physical::U64 => encode_native::<u64>(array),
    }
}

/// The physical native integer of a supported type.
enum Physical {
    I8,
    I16,
    I32,
    I64,
    I128,
    U8,
    U16,
    U32,
    U64,
}

/// The single list of supported types, shared by [`is_supported`] and [`encode`].
fn physical(data_type: &DataType) -> Option<Physical> {
    use DataType::*;
    Some(match data_type {
        Int8 => Physical::I8,
        Int16 => Physical::I16,
        Int32 | Date32 | Time32(_) => Physical::I32,
        Int64 | Date64 | Time64(_) | Timestamp(_, _) | Duration(_) => Physical::I64,
        Decimal128(_, _) => Physical::I128,
        UInt8 => Physical::U8,
        UInt16 => Physical::U16,
        UInt32 => Physical::U32,
        UInt64 => Physical::U64,
        _ => return None,
    })
}

/// A physical integer native: the arithmetic frame of reference needs.
pub(crate) trait IntNative: ArrowNativeType + Ord {
    /// The value, widened without loss (all offsets are computed in `i128`,
    /// so no subtraction can overflow for 64-bit natives).
    fn to_i128(self) -> i128;
    /// `self + offset`, wrapping in the native width (exact whenever the
    /// true sum fits, which holds for every encoded offset).
    fn add_offset(self, offset: u64) -> Self;
    /// `v` in the native width (exact for every value `to_i128` gave).
    fn from_i128(v: i128) -> Self;
}

macro_rules! int_native {
    ($($t:ty),*) => {$(
        impl IntNative for $t {
            #[inline]
            fn to_i128(self) -> i128 {
                self as i128
            }
            #[inline]
            fn add_offset(self, offset: u64) -> Self {
                self.wrapping_add(offset as $t)
            }
            #[inline]
            fn from_i128(v: i128) -> Self {
                v as $t
            }
        }
    )*};
}
int_native!(i8, i16, i32, i64, i128, u8, u16, u32, u64);

/// Runs `$body` with `$w` bound to the smallest [`PackWord`] holding
/// `$width` bits: one generic body instead of one per word type.
macro_rules! by_word {
    ($width:expr, $w:ident => $body:expr) => {
        match $width {
            0..=8 => {
                type $w = u8;
                $body
            }
            9..=16 => {
                type $w = u16;
                $body
            }
            17..=32 => {
                type $w = u32;
                $body
            }
            _ => {
                type $w = u64;
                $body
            }
        }
    };
}
pub(crate) use by_word;

/// Frame of reference + bit-packing for one native type, or plain when the
/// offsets would need the full native width.
fn encode_native<N: IntNative>(array: &ArrayRef) -> Option<LiquidArrayRef> {
    let data = array.to_data();
    let values = &data.buffer::<N>(0)[..array.len()];
    let nulls = compact_nulls(array.nulls());
    let (min, max) = min_max(values, nulls.as_ref()).unwrap_or_default();
    let range = max.to_i128().checked_sub(min.to_i128())?;
    let max_offset = u64::try_from(range).ok()?;
    let width = bit_width(max_offset);
    if usize::from(width) >= 8 * std::mem::size_of::<N>() {
        return Some(Arc::new(PlainArray::new(array, "plain")));
    }
    let frame = Frame {
        reference: min,
        max_offset,
    };
    // One pass at encode time; comparisons on a sorted batch then binary
    // search instead of scanning it (a key column written in key order).
    let sorted = nulls.is_none() && values.is_sorted();
    Some(by_word!(width, W => {
        let offsets = frame.offsets::<W>(values, nulls.as_ref());
        Arc::new(ForArray {
            data_type: array.data_type().clone(),
            nulls,
            frame,
            offsets: BitPacked::pack(&offsets, width),
            sorted,
        }) as LiquidArrayRef
    }))
}

/// A [`ForArray`] [`LiquidArray::write`] wrote (after its tag).
pub(crate) fn read_for(r: &mut Reader<'_>) -> persist::Result<LiquidArrayRef> {
    let data_type = r.data_type()?;
    match physical(&data_type) {
        Some(Physical::I8) => read_native::<i8>(r, data_type),
        Some(Physical::I16) => read_native::<i16>(r, data_type),
        Some(Physical::I32) => read_native::<i32>(r, data_type),
        Some(Physical::I64) => read_native::<i64>(r, data_type),
        Some(Physical::I128) => read_native::<i128>(r, data_type),
        Some(Physical::U8) => read_native::<u8>(r, data_type),
        Some(Physical::U16) => read_native::<u16>(r, data_type),
        Some(Physical::U32) => read_native::<u32>(r, data_type),
        Some(Physical::U64) => read_native::<u64>(r, data_type),
        None => persist::bad(format!("integers of type {data_type}")),
    }
}

fn read_native<N: IntNative>(r: &mut Reader<'_>, data_type: DataType) -> persist::Result<LiquidArrayRef> {
    let frame = Frame {
        reference: N::from_i128(r.i128()?),
        max_offset: r.u64()?,
    };
    let sorted = r.bool()?;
    let width = r.u8()?;
    Ok(by_word!(width, W => {
        let offsets = r.packed::<W>()?;
        if offsets.width() != width {
            return persist::bad(format!("offsets of {} bits, {width} announced", offsets.width()));
        }
        let nulls = r.nulls(offsets.len())?;
        Arc::new(ForArray { data_type, nulls, frame, offsets, sorted }) as LiquidArrayRef
    }))
}

/// Minimum and maximum of the valid values, `None` when there are none.
fn min_max<N: IntNative>(values: &[N], nulls: Option<&NullBuffer>) -> Option<(N, N)> {
    let mut valid = values
        .iter()
        .enumerate()
        .filter(|(i, _)| nulls.is_none_or(|n| n.is_valid(*i)))
        .map(|(_, v)| *v);
    let first = valid.next()?;
    Some(valid.fold((first, first), |(lo, hi), v| (lo.min(v), hi.max(v))))
}

/// The frame of reference: offsets are `value - reference`, at most `max_offset`.
#[derive(Debug, Clone, Copy)]
struct Frame<N> {
    reference: N,
    max_offset: u64,
}

impl<N: IntNative> Frame<N> {
    /// The offsets of `values`; null slots get offset 0.
    fn offsets<W: PackWord>(&self, values: &[N], nulls: Option<&NullBuffer>) -> Vec<W> {
        let min = self.reference.to_i128();
        let offset = |v: &N| W::narrow((v.to_i128() - min) as u64);
        match nulls {
            None => values.iter().map(offset).collect(),
            Some(n) => values
                .iter()
                .zip(n.iter())
                .map(|(v, ok)| if ok { offset(v) } else { W::default() })
                .collect(),
        }
    }

    /// `literal - reference`, saturating (far out of range stays out of range).
    fn offset_of(&self, literal: N) -> i128 {
        literal.to_i128().saturating_sub(self.reference.to_i128())
    }
}

/// A batch of integers as packed offsets from the batch minimum.
#[derive(Debug)]
struct ForArray<N: IntNative, W: PackWord> {
    data_type: DataType,
    nulls: Option<NullBuffer>,
    frame: Frame<N>,
    offsets: BitPacked<W>,
    /// No nulls and the values in ascending order: a comparison's rows are
    /// one contiguous run, found by binary search.
    sorted: bool,
}

impl<N: IntNative, W: PackWord> ForArray<N, W> {
    /// The values of `rows` (ascending), block-wise.
    fn gather_rows(&self, rows: Vec<usize>) -> ArrayRef {
        let reference = self.frame.reference;
        let values: Vec<N> = self
            .offsets
            .gather_ascending(&rows)
            .into_iter()
            .map(|o| reference.add_offset(o.widen()))
            .collect();
        let nulls = self
            .nulls
            .as_ref()
            .map(|n| NullBuffer::new(rows.iter().map(|&r| n.is_valid(r)).collect()));
        primitive_array(&self.data_type, Buffer::from_vec(values), rows.len(), nulls)
    }

    #[inline]
    fn value(&self, i: usize) -> N {
        self.frame.reference.add_offset(self.offsets.get(i).widen())
    }

    /// Rows whose offset lies in `lo..=hi` (`!=` negate), clamped to the
    /// offsets that occur, so out-of-range literals give constants.
    fn range_bits(&self, lo: i128, hi: i128, negate: bool) -> BooleanBuffer {
        let len = self.offsets.len();
        let (lo, hi) = (lo.max(0), hi.min(i128::from(self.frame.max_offset)));
        if lo > hi {
            return constant_bits(len, negate);
        }
        if lo == 0 && hi == i128::from(self.frame.max_offset) {
            return constant_bits(len, !negate);
        }
        let (lo, hi) = (lo as u64, hi as u64);
        if self.sorted {
            return run_bits(len, std::iter::once(self.run_of(lo, hi)), negate);
        }
        self.offset_bits(|o| (lo <= o && o <= hi) != negate)
    }

    /// On a sorted batch: the rows whose offset lies in `lo..=hi`, by binary
    /// search (random access to single packed values).
    fn run_of(&self, lo: u64, hi: u64) -> Range<usize> {
        let first_not_below = |bound: u64| partition_point(self.offsets.len(), |i| self.offsets.get(i).widen() < bound);
        let start = first_not_below(lo);
        let end = match hi.checked_add(1) {
            Some(after) => first_not_below(after),
            None => self.offsets.len(),
        };
        start..end.max(start)
    }

    /// `test` applied to every offset, block by block.
    fn offset_bits(&self, test: impl Fn(u64) -> bool) -> BooleanBuffer {
        let mut bits = BitWriter::new(self.offsets.len());
        self.offsets
            .for_each_block(|start, block| bits.write(start, block, |o| test(o.widen())));
        bits.finish()
    }
}

impl<N: IntNative, W: PackWord> LiquidArray for ForArray<N, W> {
    fn data_type(&self) -> &DataType {
        &self.data_type
    }

    fn write(&self, w: &mut Writer<'_>) {
        w.u8(tag::FOR);
        w.data_type(&self.data_type);
        w.i128(self.frame.reference.to_i128());
        w.u64(self.frame.max_offset);
        w.bool(self.sorted);
        w.u8(self.offsets.width());
        w.packed(&self.offsets);
        w.nulls(self.nulls.as_ref());
    }

    fn len(&self) -> usize {
        self.offsets.len()
    }

    fn null_count(&self) -> usize {
        self.nulls.as_ref().map_or(0, NullBuffer::null_count)
    }

    fn heap_size(&self) -> usize {
        self.offsets.heap_size() + nulls_heap_size(self.nulls.as_ref())
    }

    fn encoding(&self) -> &'static str {
        "for-bitpack"
    }

    fn to_arrow(&self) -> ArrayRef {
        let reference = self.frame.reference;
        let mut values = Vec::with_capacity(self.offsets.len());
        self.offsets.for_each_block(|_, block| {
            values.extend(block.iter().map(|o| reference.add_offset(o.widen())));
        });
        let len = values.len();
        primitive_array(&self.data_type, Buffer::from_vec(values), len, self.nulls.clone())
    }

    /// Block-wise: dense blocks are unpacked whole, then the selected rows
    /// picked ([`BitPacked::gather_ascending`]).
    fn filter(&self, selection: &BooleanArray) -> ArrayRef {
        let mask = selection_mask(selection);
        self.gather_rows(mask.set_indices().collect())
    }

    /// Ascending, non-null indices (what a scan's selection gives) take the
    /// block-wise path of `filter`; others decode row by row.
    fn take(&self, indices: &UInt32Array) -> ArrayRef {
        if indices.null_count() == 0 && indices.values().is_sorted() {
            return self.gather_rows(indices.values().iter().map(|&i| i as usize).collect());
        }
        let rows = index_rows(indices);
        gather_primitive(&self.data_type, self.nulls.as_ref(), indices.len(), rows, |i| {
            self.value(i)
        })
    }

    fn evaluate(&self, predicate: &LiquidPredicate) -> Option<BooleanArray> {
        evaluate(self, predicate)
    }
}

impl<N: IntNative, W: PackWord> Evaluate for ForArray<N, W> {
    type Value = N;

    fn shape(&self) -> (usize, Option<&NullBuffer>) {
        (self.offsets.len(), self.nulls.as_ref())
    }

    fn literal(&self, literal: &ArrayRef) -> Option<Option<N>> {
        native_literal(&self.data_type, literal)
    }

    fn list(&self, values: &ArrayRef) -> Option<Vec<N>> {
        native_values(&self.data_type, values)
    }

    fn compare_bits(&self, op: CmpOp, literal: N) -> BooleanBuffer {
        let k = self.frame.offset_of(literal);
        let (lo, hi) = (i128::MIN, i128::MAX);
        match op {
            CmpOp::Eq => self.range_bits(k, k, false),
            CmpOp::NotEq => self.range_bits(k, k, true),
            CmpOp::Lt => self.range_bits(lo, k.saturating_sub(1), false),
            CmpOp::LtEq => self.range_bits(lo, k, false),
            CmpOp::Gt => self.range_bits(k.saturating_add(1), hi, false),
            CmpOp::GtEq => self.range_bits(k, hi, false),
        }
    }

    fn between_bits(&self, low: N, high: N) -> BooleanBuffer {
        self.range_bits(self.frame.offset_of(low), self.frame.offset_of(high), false)
    }

    fn in_list_bits(&self, values: Vec<N>) -> BooleanBuffer {
        let max = i128::from(self.frame.max_offset);
        let mut set: Vec<u64> = values
            .into_iter()
            .map(|v| self.frame.offset_of(v))
            .filter(|k| (0..=max).contains(k))
            .map(|k| k as u64)
            .collect();
        set.sort_unstable();
        set.dedup();
        match set.as_slice() {
            [] => constant_bits(self.offsets.len(), false),
            [k] => self.range_bits(i128::from(*k), i128::from(*k), false),
            // Two binary searches per key beat a scan only for a few keys
            // (a join filter's list may hold thousands).
            _ if self.sorted && set.len() * SEARCHES_PER_SCAN <= self.offsets.len() => {
                run_bits(self.offsets.len(), set.iter().map(|&k| self.run_of(k, k)), false)
            }
            _ => self.offset_bits(|o| set.binary_search(&o).is_ok()),
        }
    }
}

// ---------------------------------------------------------------------------
// Shared by the integer, float and boolean encodings.
// ---------------------------------------------------------------------------

/// A copy of `bits` in its own exact-size allocation, so `heap_size` counts
/// only what the liquid array holds (not the rest of a sliced input).
pub(crate) fn compact_bits(bits: &BooleanBuffer) -> BooleanBuffer {
    let bytes = bits.sliced();
    let copy = bytes.as_slice()[..bits.len().div_ceil(8)].to_vec();
    BooleanBuffer::new(Buffer::from_vec(copy), 0, bits.len())
}

/// The nulls of an input array, compacted; `None` when nothing is null.
pub(crate) fn compact_nulls(nulls: Option<&NullBuffer>) -> Option<NullBuffer> {
    nulls
        .filter(|n| n.null_count() > 0)
        .map(|n| NullBuffer::new(compact_bits(n.inner())))
}

/// Heap bytes of a null buffer.
pub(crate) fn nulls_heap_size(nulls: Option<&NullBuffer>) -> usize {
    nulls.map_or(0, |n| n.buffer().capacity())
}

/// Rows a sorted batch must have per key of an IN list for the list to be
/// found by binary search rather than a scan (a search reads ~2 log2(rows)
/// single packed values; a scan unpacks every row once and looks it up).
const SEARCHES_PER_SCAN: usize = 64;

/// Bits set on the rows of `runs` (ascending, disjoint), all others unset;
/// inverted when `negate`.
fn run_bits(len: usize, runs: impl Iterator<Item = Range<usize>>, negate: bool) -> BooleanBuffer {
    let mut bits = arrow::array::BooleanBufferBuilder::new(len);
    for run in runs {
        bits.append_n(run.start - bits.len(), negate);
        bits.append_n(run.len(), !negate);
    }
    bits.append_n(len - bits.len(), negate);
    bits.finish()
}

/// The first index in `0..n` for which `before` is false (`before` holds
/// on a prefix): `slice::partition_point` for data reached by index (packed
/// values, statistics arrays).
pub fn partition_point(n: usize, before: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if before(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// All-true or all-false bits.
pub(crate) fn constant_bits(len: usize, value: bool) -> BooleanBuffer {
    if value {
        BooleanBuffer::new_set(len)
    } else {
        BooleanBuffer::new_unset(len)
    }
}

/// Builds a predicate's bitmap from blocks of values, 64 bits at a time.
pub(crate) struct BitWriter {
    words: Vec<u64>,
    len: usize,
}

impl BitWriter {
    /// A writer for `len` bits, all false.
    pub(crate) fn new(len: usize) -> Self {
        BitWriter {
            words: vec![0; len.div_ceil(64)],
            len,
        }
    }

    /// Sets bits `start..start + values.len()` to `test(value)`; `start` is a
    /// multiple of 64 (blocks are 1024 values).
    #[inline]
    pub(crate) fn write<T: Copy>(&mut self, start: usize, values: &[T], test: impl Fn(T) -> bool) {
        debug_assert_eq!(start % 64, 0);
        let words = &mut self.words[start / 64..];
        for (word, chunk) in words.iter_mut().zip(values.chunks(64)) {
            *word = chunk
                .iter()
                .enumerate()
                .fold(0u64, |acc, (b, &v)| acc | (u64::from(test(v)) << b));
        }
    }

    /// The bitmap.
    pub(crate) fn finish(self) -> BooleanBuffer {
        BooleanBuffer::new(Buffer::from_vec(self.words), 0, self.len)
    }
}

/// The rows `filter` keeps: true and not null.
pub(crate) fn selection_mask(selection: &BooleanArray) -> BooleanBuffer {
    match selection.nulls() {
        Some(n) => selection.values() & n.inner(),
        None => selection.values().clone(),
    }
}

/// The rows `take` reads; `None` for a null index.
pub(crate) fn index_rows(indices: &UInt32Array) -> impl Iterator<Item = Option<usize>> + '_ {
    indices.iter().map(|i| i.map(|i| i as usize))
}

/// Decodes only `rows` (`None`: a null row) with `value`, keeping `nulls`:
/// the body of `filter` and `take` for every primitive encoding.
pub(crate) fn gather_primitive<N: ArrowNativeType>(
    data_type: &DataType,
    nulls: Option<&NullBuffer>,
    capacity: usize,
    rows: impl Iterator<Item = Option<usize>>,
    value: impl Fn(usize) -> N,
) -> ArrayRef {
    let mut values = Vec::with_capacity(capacity);
    let mut validity = BooleanBufferBuilder::new(capacity);
    for row in rows {
        values.push(row.map_or(N::default(), &value));
        validity.append(row.is_some_and(|i| nulls.is_none_or(|n| n.is_valid(i))));
    }
    let len = values.len();
    let nulls = Some(NullBuffer::new(validity.finish()));
    primitive_array(data_type, Buffer::from_vec(values), len, nulls)
}

/// A primitive array of `data_type` (any type with that native width,
/// time zone and decimal scale kept) over `values`.
pub(crate) fn primitive_array(data_type: &DataType, values: Buffer, len: usize, nulls: Option<NullBuffer>) -> ArrayRef {
    let nulls = nulls.filter(|n| n.null_count() > 0);
    let data = ArrayDataBuilder::new(data_type.clone())
        .len(len)
        .add_buffer(values)
        .nulls(nulls)
        .build()
        .expect("invariant: `values` holds `len` natives of the width of `data_type`");
    make_array(data)
}

/// A length-1 literal of `data_type` as its native: `None` when it is not
/// usable (other type or length), `Some(None)` when it is null.
pub(crate) fn native_literal<N: ArrowNativeType>(data_type: &DataType, literal: &ArrayRef) -> Option<Option<N>> {
    if literal.len() != 1 || literal.data_type() != data_type {
        return None;
    }
    if literal.is_null(0) {
        return Some(None);
    }
    native_values(data_type, literal).map(|v| v.first().copied())
}

/// The natives of a list of `data_type` without nulls; `None` otherwise.
pub(crate) fn native_values<N: ArrowNativeType>(data_type: &DataType, values: &ArrayRef) -> Option<Vec<N>> {
    if values.data_type() != data_type || values.null_count() > 0 {
        return None;
    }
    let data = values.to_data();
    data.buffer::<N>(0).get(..values.len()).map(<[N]>::to_vec)
}

/// What an encoding provides to evaluate predicates; [`evaluate`] does the
/// rest (null literals, nulls of the result, `IS [NOT] NULL`, negation).
pub(crate) trait Evaluate {
    /// A literal's decoded value.
    type Value: Copy;

    /// Length and nulls of the batch.
    fn shape(&self) -> (usize, Option<&NullBuffer>);

    /// A literal: `None` when unusable, `Some(None)` when null.
    fn literal(&self, literal: &ArrayRef) -> Option<Option<Self::Value>>;

    /// An `IN` list: `None` when unusable (other type, nulls).
    fn list(&self, values: &ArrayRef) -> Option<Vec<Self::Value>>;

    /// `column <op> literal` per row (bits under nulls are ignored).
    fn compare_bits(&self, op: CmpOp, literal: Self::Value) -> BooleanBuffer;

    /// `low <= column <= high` per row.
    fn between_bits(&self, low: Self::Value, high: Self::Value) -> BooleanBuffer;

    /// `column IN values` per row.
    fn in_list_bits(&self, values: Vec<Self::Value>) -> BooleanBuffer;
}

/// [`LiquidArray::evaluate`] for any [`Evaluate`], with Arrow's null semantics.
pub(crate) fn evaluate<E: Evaluate>(e: &E, predicate: &LiquidPredicate) -> Option<BooleanArray> {
    let (len, nulls) = e.shape();
    let with_nulls = |bits: BooleanBuffer| BooleanArray::new(bits, nulls.cloned());
    let all_null = || BooleanArray::new_null(len);
    match predicate {
        LiquidPredicate::Compare { op, literal } => Some(match e.literal(literal)? {
            Some(v) => with_nulls(e.compare_bits(*op, v)),
            None => all_null(),
        }),
        LiquidPredicate::Between { low, high } => match (e.literal(low)?, e.literal(high)?) {
            (Some(l), Some(h)) => Some(with_nulls(e.between_bits(l, h))),
            (None, None) => Some(all_null()),
            // and_kleene(null, x) is false where x is false, else null.
            (Some(l), None) => and_kleene(&with_nulls(e.compare_bits(CmpOp::GtEq, l)), &all_null()).ok(),
            (None, Some(h)) => and_kleene(&all_null(), &with_nulls(e.compare_bits(CmpOp::LtEq, h))).ok(),
        },
        LiquidPredicate::InList { values, negated } => {
            let bits = e.in_list_bits(e.list(values)?);
            Some(with_nulls(if *negated { !&bits } else { bits }))
        }
        LiquidPredicate::IsNull => Some(null_test(len, nulls, true)),
        LiquidPredicate::IsNotNull => Some(null_test(len, nulls, false)),
        LiquidPredicate::Like { .. } => None,
    }
}

/// `is_null` / `is_not_null` from the validity bitmap (never null).
fn null_test(len: usize, nulls: Option<&NullBuffer>, is_null: bool) -> BooleanArray {
    let valid = nulls.map_or_else(|| BooleanBuffer::new_set(len), |n| n.inner().clone());
    BooleanArray::new(if is_null { !&valid } else { valid }, None)
}

/// A batch kept as its Arrow array, in its own compact buffers: chosen when
/// packing would not save space. Still element-addressable, and predicates
/// run Arrow's kernels directly on it (its encoded form *is* Arrow's).
#[derive(Debug)]
pub(crate) struct PlainArray {
    array: ArrayRef,
    encoding: &'static str,
}

/// A [`PlainArray`] [`LiquidArray::write`] wrote (after its tag).
pub(crate) fn read_plain(r: &mut Reader<'_>) -> persist::Result<LiquidArrayRef> {
    let data_type = r.data_type()?;
    if !is_supported(&data_type) && !crate::float::is_supported(&data_type) {
        return persist::bad(format!("a plain batch of {data_type}"));
    }
    let array = r.fixed_width(data_type)?;
    Ok(Arc::new(PlainArray {
        array,
        encoding: "plain",
    }))
}

impl PlainArray {
    /// Copies `array` (so a slice of a larger batch does not pin it).
    pub(crate) fn new(array: &ArrayRef, encoding: &'static str) -> Self {
        let data = array.to_data();
        let mut copy = MutableArrayData::new(vec![&data], false, array.len());
        copy.try_extend(0, 0, array.len())
            .expect("invariant: fixed-width arrays have no offsets to overflow");
        PlainArray {
            array: make_array(copy.freeze()),
            encoding,
        }
    }
}

impl LiquidArray for PlainArray {
    fn data_type(&self) -> &DataType {
        self.array.data_type()
    }

    fn write(&self, w: &mut Writer<'_>) {
        w.u8(tag::PLAIN);
        w.data_type(self.array.data_type());
        w.fixed_width(&self.array);
    }

    fn len(&self) -> usize {
        self.array.len()
    }

    fn null_count(&self) -> usize {
        self.array.null_count()
    }

    fn heap_size(&self) -> usize {
        self.array.get_buffer_memory_size()
    }

    fn encoding(&self) -> &'static str {
        self.encoding
    }

    fn to_arrow(&self) -> ArrayRef {
        self.array.clone()
    }

    fn filter(&self, selection: &BooleanArray) -> ArrayRef {
        arrow::compute::filter(&self.array, selection).expect("invariant: the selection has the batch's length")
    }

    fn take(&self, indices: &UInt32Array) -> ArrayRef {
        arrow::compute::take(&self.array, indices, None).expect("invariant: indices are in bounds")
    }

    fn evaluate(&self, predicate: &LiquidPredicate) -> Option<BooleanArray> {
        kernel_evaluate(&self.array, predicate)
    }
}

/// `predicate` by Arrow's kernels, as [`LiquidPredicate`] defines it.
pub(crate) fn kernel_evaluate(array: &ArrayRef, predicate: &LiquidPredicate) -> Option<BooleanArray> {
    let data_type = array.data_type();
    let scalar = |literal: &ArrayRef| {
        (literal.len() == 1 && literal.data_type() == data_type).then(|| Scalar::new(literal.clone()))
    };
    match predicate {
        LiquidPredicate::Compare { op, literal } => compare_kernel(array, *op, &scalar(literal)?),
        LiquidPredicate::Between { low, high } => and_kleene(
            &compare_kernel(array, CmpOp::GtEq, &scalar(low)?)?,
            &compare_kernel(array, CmpOp::LtEq, &scalar(high)?)?,
        )
        .ok(),
        LiquidPredicate::InList { values, negated } => {
            if values.data_type() != data_type || values.null_count() > 0 {
                return None;
            }
            let unset = BooleanBuffer::new_unset(array.len());
            let mut found = BooleanArray::new(unset, array.nulls().cloned());
            for i in 0..values.len() {
                let eq = compare_kernel(array, CmpOp::Eq, &Scalar::new(values.slice(i, 1)))?;
                found = or_kleene(&found, &eq).ok()?;
            }
            if *negated { not(&found).ok() } else { Some(found) }
        }
        LiquidPredicate::IsNull => is_null(array).ok(),
        LiquidPredicate::IsNotNull => is_not_null(array).ok(),
        LiquidPredicate::Like { .. } => None,
    }
}

/// One `cmp` kernel.
fn compare_kernel(array: &ArrayRef, op: CmpOp, literal: &Scalar<ArrayRef>) -> Option<BooleanArray> {
    match op {
        CmpOp::Eq => cmp::eq(array, literal),
        CmpOp::NotEq => cmp::neq(array, literal),
        CmpOp::Lt => cmp::lt(array, literal),
        CmpOp::LtEq => cmp::lt_eq(array, literal),
        CmpOp::Gt => cmp::gt(array, literal),
        CmpOp::GtEq => cmp::gt_eq(array, literal),
    }
    .ok()
}
