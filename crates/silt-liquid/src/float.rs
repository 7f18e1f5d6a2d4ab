//! Liquid float arrays: ALP (adaptive lossless floating point).
//!
//! Why: most float columns hold decimals (prices, measurements) that were
//! parsed from text with a few fractional digits. Such a value `v` is the
//! float nearest to `d / 10^e` for a small integer `d`, so it is stored as
//! `d` (frame of reference + bit-packing, like integers) and decoded as
//! `d * 10^f / 10^e` — bit-exactly, which is checked per value at encoding
//! time. Values that do not round-trip (NaN, ±inf, -0.0, full-precision
//! noise) are exceptions kept as `(position, value)`, sorted by position.
//! When exceptions are not rare, or packing would not save space, the batch
//! stays plain (Arrow's buffer as is).
//!
//! Predicates decode block by block and compare with Arrow's total order
//! (`total_cmp`: -0.0 < +0.0, NaN above everything and equal to itself
//! bit-for-bit), which is what Arrow's `cmp` kernels do for floats.

use std::cmp::Ordering;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, UInt32Array};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow::datatypes::{ArrowNativeType, DataType};

use crate::bitpack::{BLOCK, BitPacked, PackWord, bit_width};
use crate::integer::{
    BitWriter, Evaluate, PlainArray, by_word, compact_nulls, evaluate, gather_primitive, index_rows, native_literal,
    native_values, nulls_heap_size, primitive_array, selection_mask,
};
use crate::persist::{self, Reader, Writer, tag};
use crate::{CmpOp, LiquidArray, LiquidArrayRef, LiquidPredicate};

/// Whether `data_type` is handled by this module (Float16 is not).
pub fn is_supported(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Float32 | DataType::Float64)
}

/// The liquid form of `array`, or `None` when its type is not handled here.
pub fn encode(array: &ArrayRef) -> Option<LiquidArrayRef> {
    match array.data_type() {
        DataType::Float32 => Some(encode_float::<f32>(array)),
        DataType::Float64 => Some(encode_float::<f64>(array)),
        _ => None,
    }
}

/// At most this share of the valid values may be exceptions (1 in 20).
const MAX_EXCEPTION_RATIO: usize = 20;

/// Values sampled to choose the exponents.
const SAMPLE: usize = 256;

/// A float ALP can encode.
pub(crate) trait AlpFloat: ArrowNativeType {
    /// `10^0 ..= 10^max`, each exactly representable.
    const POWERS: &'static [Self];

    /// Arrow's (and IEEE's) total order.
    fn total_cmp(&self, other: &Self) -> Ordering;

    /// `d` with `round(v * 10^e / 10^f) = d` when `d` decodes back to exactly
    /// `v` (same bits), else `None`.
    fn alp_encode(self, e: usize, f: usize) -> Option<i64>;

    /// `d * 10^f / 10^e`.
    fn alp_decode(d: i64, e: usize, f: usize) -> Self;

    /// The value's bits, widened (for [`crate::persist`]).
    fn to_word(self) -> u64;

    /// The value of bits [`AlpFloat::to_word`] gave.
    fn from_word(word: u64) -> Self;
}

macro_rules! alp_float {
    ($t:ty, [$($p:expr),*]) => {
        impl AlpFloat for $t {
            const POWERS: &'static [$t] = &[$($p),*];

            #[inline]
            fn total_cmp(&self, other: &Self) -> Ordering {
                <$t>::total_cmp(self, other)
            }

            #[inline]
            fn alp_encode(self, e: usize, f: usize) -> Option<i64> {
                let scaled = (self * Self::POWERS[e] / Self::POWERS[f]).round();
                // Also rejects NaN and ±inf; the bound keeps `as i64` exact.
                if scaled.is_nan() || scaled.abs() >= (1u64 << 62) as $t {
                    return None;
                }
                let d = scaled as i64;
                (Self::alp_decode(d, e, f).to_bits() == self.to_bits()).then_some(d)
            }

            #[inline]
            fn alp_decode(d: i64, e: usize, f: usize) -> Self {
                d as $t * Self::POWERS[f] / Self::POWERS[e]
            }

            fn to_word(self) -> u64 {
                self.to_bits() as u64
            }

            fn from_word(word: u64) -> Self {
                <$t>::from_bits(word as _)
            }
        }
    };
}
alp_float!(f32, [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10]);
alp_float!(
    f64,
    [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18
    ]
);

/// ALP when it pays, else plain.
fn encode_float<F: AlpFloat>(array: &ArrayRef) -> LiquidArrayRef {
    match try_alp::<F>(array) {
        Some(alp) => alp,
        None => Arc::new(PlainArray::new(array, "plain")),
    }
}

/// The ALP form of `array`, or `None` when exceptions are not rare or it
/// would not be smaller than plain.
fn try_alp<F: AlpFloat>(array: &ArrayRef) -> Option<LiquidArrayRef> {
    let data = array.to_data();
    let values = &data.buffer::<F>(0)[..array.len()];
    let nulls = compact_nulls(array.nulls());
    let (e, f) = choose_exponents(&sample(values, nulls.as_ref()))?;
    let valid = |i: usize| nulls.as_ref().is_none_or(|n| n.is_valid(i));
    // `None`: null or exception.
    let digits: Vec<Option<i64>> = (0..values.len())
        .map(|i| valid(i).then(|| values[i].alp_encode(e, f)).flatten())
        .collect();
    let (positions, exceptions): (Vec<u32>, Vec<F>) = (0..values.len())
        .filter(|&i| digits[i].is_none() && valid(i))
        .map(|i| (i as u32, values[i]))
        .unzip();
    let valid_count = values.len() - nulls.as_ref().map_or(0, NullBuffer::null_count);
    if exceptions.len() * MAX_EXCEPTION_RATIO > valid_count {
        return None;
    }
    let (min, max) = digits
        .iter()
        .flatten()
        .fold((i64::MAX, i64::MIN), |(lo, hi), &d| (lo.min(d), hi.max(d)));
    let width = bit_width((i128::from(max) - i128::from(min)) as u64);
    if alp_bits::<F>(values.len(), width, exceptions.len()) >= values.len() * 8 * std::mem::size_of::<F>() {
        return None;
    }
    let parts = AlpParts {
        data_type: array.data_type().clone(),
        nulls,
        e,
        f,
        reference: min,
        positions,
        exceptions,
    };
    Some(by_word!(width, W => {
        let offsets: Vec<W> = digits
            .iter()
            .map(|d| W::narrow(d.map_or(0, |d| (i128::from(d) - i128::from(min)) as u64)))
            .collect();
        Arc::new(AlpArray { parts, offsets: BitPacked::pack(&offsets, width) }) as LiquidArrayRef
    }))
}

/// An [`AlpArray`] [`LiquidArray::write`] wrote (after its tag).
pub(crate) fn read_alp(r: &mut Reader<'_>) -> persist::Result<LiquidArrayRef> {
    match r.data_type()? {
        DataType::Float32 => read_alp_of::<f32>(r, DataType::Float32),
        DataType::Float64 => read_alp_of::<f64>(r, DataType::Float64),
        other => persist::bad(format!("ALP floats of type {other}")),
    }
}

fn read_alp_of<F: AlpFloat>(r: &mut Reader<'_>, data_type: DataType) -> persist::Result<LiquidArrayRef> {
    let (e, f) = (r.u8()? as usize, r.u8()? as usize);
    if e >= F::POWERS.len() || f > e {
        return persist::bad(format!("ALP exponents {e}, {f}"));
    }
    let reference = i64::try_from(r.i128()?).map_err(|e| persist::PersistError(format!("ALP reference: {e}")))?;
    let positions = r.u32s()?;
    let count = r.len(8)?;
    let exceptions: Vec<F> = (0..count)
        .map(|_| r.u64().map(F::from_word))
        .collect::<persist::Result<_>>()?;
    let width = r.u8()?;
    Ok(by_word!(width, W => {
        let offsets = r.packed::<W>()?;
        let len = offsets.len();
        let ascending = positions.windows(2).all(|p| p[0] < p[1]) && positions.last().is_none_or(|&p| (p as usize) < len);
        if offsets.width() != width || exceptions.len() != positions.len() || !ascending {
            return persist::bad("ALP exceptions or offsets that do not fit the batch");
        }
        let nulls = r.nulls(len)?;
        let parts = AlpParts { data_type, nulls, e, f, reference, positions, exceptions };
        Arc::new(AlpArray { parts, offsets }) as LiquidArrayRef
    }))
}

/// Estimated size in bits of `len` ALP digits of `width` bits plus `exceptions`.
fn alp_bits<F>(len: usize, width: u8, exceptions: usize) -> usize {
    len * usize::from(width) + exceptions * 8 * (std::mem::size_of::<u32>() + std::mem::size_of::<F>())
}

/// Up to about [`SAMPLE`] valid values, spread over the batch.
fn sample<F: AlpFloat>(values: &[F], nulls: Option<&NullBuffer>) -> Vec<F> {
    let step = values.len().div_ceil(SAMPLE).max(1);
    (0..values.len())
        .step_by(step)
        .filter(|&i| nulls.is_none_or(|n| n.is_valid(i)))
        .map(|i| values[i])
        .collect()
}

/// The `(e, f)` that store a sample of the values in the fewest bits
/// (exceptions counted at their full cost); `None` for no values.
fn choose_exponents<F: AlpFloat>(sample: &[F]) -> Option<(usize, usize)> {
    if sample.is_empty() {
        return None;
    }
    let cost = |e: usize, f: usize| {
        let (mut lo, mut hi, mut exceptions) = (i64::MAX, i64::MIN, 0);
        for v in sample {
            match v.alp_encode(e, f) {
                Some(d) => (lo, hi) = (lo.min(d), hi.max(d)),
                None => exceptions += 1,
            }
        }
        let width = if lo > hi {
            0
        } else {
            bit_width((i128::from(hi) - i128::from(lo)) as u64)
        };
        alp_bits::<F>(sample.len(), width, exceptions)
    };
    (0..F::POWERS.len())
        .flat_map(|e| (0..=e).map(move |f| (e, f)))
        .min_by_key(|&(e, f)| cost(e, f))
}

/// Everything of an ALP batch but the packed digits.
#[derive(Debug)]
struct AlpParts<F> {
    data_type: DataType,
    nulls: Option<NullBuffer>,
    e: usize,
    f: usize,
    /// The minimum digit; offsets are `digit - reference`.
    reference: i64,
    /// Rows of the exceptions, ascending.
    positions: Vec<u32>,
    /// The exceptions' values, in the order of `positions`.
    exceptions: Vec<F>,
}

/// A batch of floats as packed ALP digits plus exceptions.
#[derive(Debug)]
struct AlpArray<F: AlpFloat, W: PackWord> {
    parts: AlpParts<F>,
    offsets: BitPacked<W>,
}

impl<F: AlpFloat, W: PackWord> AlpArray<F, W> {
    #[inline]
    fn digit_value(&self, offset: W) -> F {
        let p = &self.parts;
        F::alp_decode(p.reference.wrapping_add(offset.widen() as i64), p.e, p.f)
    }

    /// The value at row `i`, decoded on its own.
    fn value(&self, i: usize) -> F {
        let p = &self.parts;
        match p.positions.binary_search(&(i as u32)) {
            Ok(j) => p.exceptions[j],
            Err(_) => self.digit_value(self.offsets.get(i)),
        }
    }

    /// Calls `g(block_start, values)` for each block of decoded values,
    /// exceptions patched in.
    fn for_each_block(&self, mut g: impl FnMut(usize, &[F])) {
        let p = &self.parts;
        let mut buf = [F::default(); BLOCK];
        let mut next = 0;
        self.offsets.for_each_block(|start, block| {
            let out = &mut buf[..block.len()];
            for (v, &o) in out.iter_mut().zip(block) {
                *v = self.digit_value(o);
            }
            while let Some(&pos) = p.positions.get(next).filter(|&&pos| (pos as usize) < start + out.len()) {
                out[pos as usize - start] = p.exceptions[next];
                next += 1;
            }
            g(start, out);
        });
    }

    /// `test` applied to every decoded value, block by block.
    fn value_bits(&self, test: impl Fn(F) -> bool) -> BooleanBuffer {
        let mut bits = BitWriter::new(self.offsets.len());
        self.for_each_block(|start, block| bits.write(start, block, &test));
        bits.finish()
    }
}

impl<F: AlpFloat, W: PackWord> LiquidArray for AlpArray<F, W> {
    fn data_type(&self) -> &DataType {
        &self.parts.data_type
    }

    fn write(&self, w: &mut Writer<'_>) {
        let p = &self.parts;
        w.u8(tag::ALP);
        w.data_type(&p.data_type);
        w.u8(p.e as u8);
        w.u8(p.f as u8);
        w.i128(i128::from(p.reference));
        w.u32s(&p.positions);
        w.count(p.exceptions.len());
        for x in &p.exceptions {
            w.u64(x.to_word());
        }
        w.u8(self.offsets.width());
        w.packed(&self.offsets);
        w.nulls(p.nulls.as_ref());
    }

    fn len(&self) -> usize {
        self.offsets.len()
    }

    fn null_count(&self) -> usize {
        self.parts.nulls.as_ref().map_or(0, NullBuffer::null_count)
    }

    fn heap_size(&self) -> usize {
        let p = &self.parts;
        self.offsets.heap_size()
            + nulls_heap_size(p.nulls.as_ref())
            + p.positions.capacity() * std::mem::size_of::<u32>()
            + p.exceptions.capacity() * std::mem::size_of::<F>()
    }

    fn encoding(&self) -> &'static str {
        "alp"
    }

    fn to_arrow(&self) -> ArrayRef {
        let mut values = Vec::with_capacity(self.offsets.len());
        self.for_each_block(|_, block| values.extend_from_slice(block));
        let len = values.len();
        let nulls = self.parts.nulls.clone();
        primitive_array(&self.parts.data_type, Buffer::from_vec(values), len, nulls)
    }

    fn filter(&self, selection: &BooleanArray) -> ArrayRef {
        let mask = selection_mask(selection);
        let rows = mask.set_indices().map(Some);
        gather_primitive(
            &self.parts.data_type,
            self.parts.nulls.as_ref(),
            mask.count_set_bits(),
            rows,
            |i| self.value(i),
        )
    }

    fn take(&self, indices: &UInt32Array) -> ArrayRef {
        let rows = index_rows(indices);
        let nulls = self.parts.nulls.as_ref();
        gather_primitive(&self.parts.data_type, nulls, indices.len(), rows, |i| self.value(i))
    }

    fn evaluate(&self, predicate: &LiquidPredicate) -> Option<BooleanArray> {
        evaluate(self, predicate)
    }
}

impl<F: AlpFloat, W: PackWord> Evaluate for AlpArray<F, W> {
    type Value = F;

    fn shape(&self) -> (usize, Option<&NullBuffer>) {
        (self.offsets.len(), self.parts.nulls.as_ref())
    }

    fn literal(&self, literal: &ArrayRef) -> Option<Option<F>> {
        native_literal(&self.parts.data_type, literal)
    }

    fn list(&self, values: &ArrayRef) -> Option<Vec<F>> {
        native_values(&self.parts.data_type, values)
    }

    fn compare_bits(&self, op: CmpOp, literal: F) -> BooleanBuffer {
        self.value_bits(|v| op.holds(v.total_cmp(&literal)))
    }

    fn between_bits(&self, low: F, high: F) -> BooleanBuffer {
        self.value_bits(|v| v.total_cmp(&low).is_ge() && v.total_cmp(&high).is_le())
    }

    fn in_list_bits(&self, mut values: Vec<F>) -> BooleanBuffer {
        values.sort_unstable_by(F::total_cmp);
        values.dedup_by(|a, b| a.total_cmp(b).is_eq());
        self.value_bits(|v| values.binary_search_by(|x| x.total_cmp(&v)).is_ok())
    }
}
