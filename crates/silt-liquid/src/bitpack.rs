//! Bit-packed unsigned integers with random access, over the `fastlanes`
//! layout (blocks of 1024 values, `width` bits each).
//!
//! Shared by every encoding that stores small integers: frame-of-reference
//! offsets, dictionary keys, ALP exponents' digits. Element `i` is decoded on
//! its own ([`BitPacked::get`]), a whole batch block by block
//! ([`BitPacked::unpack`]).

use fastlanes::{BitPacking, FastLanes};

/// Values per fastlanes block.
pub const BLOCK: usize = 1024;

/// An unsigned word fastlanes can pack: `u8`, `u16`, `u32`, `u64`.
pub trait PackWord: BitPacking + FastLanes + Copy + Default + Send + Sync + std::fmt::Debug + 'static {
    /// The value as `u64`.
    fn widen(self) -> u64;
    /// The low bits of `v` as this word.
    fn narrow(v: u64) -> Self;
}

macro_rules! pack_word {
    ($($t:ty),*) => {$(
        impl PackWord for $t {
            #[inline]
            fn widen(self) -> u64 {
                self as u64
            }
            #[inline]
            fn narrow(v: u64) -> Self {
                v as $t
            }
        }
    )*};
}
pack_word!(u8, u16, u32, u64);

/// Bits needed to store `max` (0 for 0).
pub fn bit_width(max: u64) -> u8 {
    (64 - max.leading_zeros()) as u8
}

/// `len` values of `width` bits each, in fastlanes blocks.
#[derive(Debug, Clone)]
pub struct BitPacked<T: PackWord> {
    words: Vec<T>,
    width: u8,
    len: usize,
}

impl<T: PackWord> BitPacked<T> {
    fn words_per_block(width: u8) -> usize {
        BLOCK * width as usize / T::T
    }

    /// Packs `values` with `width` bits each. Every value must fit in `width`
    /// bits (checked; higher bits would be lost).
    pub fn pack(values: &[T], width: u8) -> Self {
        assert!(width as usize <= T::T, "bit width {width} exceeds the word");
        debug_assert!(values.iter().all(|v| bit_width(v.widen()) <= width));
        let wpb = Self::words_per_block(width);
        let blocks = values.len().div_ceil(BLOCK);
        let mut words = vec![T::default(); blocks * wpb];
        if wpb > 0 {
            let mut buf = [T::default(); BLOCK];
            for (b, chunk) in values.chunks(BLOCK).enumerate() {
                buf[..chunk.len()].copy_from_slice(chunk);
                buf[chunk.len()..].fill(T::default());
                // SAFETY: input is exactly BLOCK values, output exactly wpb = 1024 * width / T words.
                unsafe { T::unchecked_pack(width as usize, &buf, &mut words[b * wpb..(b + 1) * wpb]) };
            }
        }
        BitPacked {
            words,
            width,
            len: values.len(),
        }
    }

    /// Packs `values` with the smallest width that holds their maximum.
    pub fn pack_min_width(values: &[T]) -> Self {
        let max = values.iter().map(|v| v.widen()).max().unwrap_or(0);
        Self::pack(values, bit_width(max))
    }

    /// Its words, width and length, as [`BitPacked::from_parts`] takes them.
    pub fn parts(&self) -> (&[T], u8, usize) {
        (&self.words, self.width, self.len)
    }

    /// Packed values from their parts (as [`BitPacked::parts`] gave them);
    /// `None` unless the words are exactly the blocks `len` values of
    /// `width` bits take.
    pub fn from_parts(words: Vec<T>, width: u8, len: usize) -> Option<Self> {
        let fits = width as usize <= T::T && words.len() == len.div_ceil(BLOCK) * Self::words_per_block(width);
        fits.then_some(BitPacked { words, width, len })
    }

    /// Bits per value.
    pub fn width(&self) -> u8 {
        self.width
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value at `i`, decoded on its own.
    #[inline]
    pub fn get(&self, i: usize) -> T {
        assert!(i < self.len, "index {i} out of {}", self.len);
        let wpb = Self::words_per_block(self.width);
        if wpb == 0 {
            return T::default();
        }
        let b = i / BLOCK;
        // SAFETY: the slice is one whole block of wpb words; i % BLOCK < 1024.
        unsafe { T::unchecked_unpack_single(self.width as usize, &self.words[b * wpb..(b + 1) * wpb], i % BLOCK) }
    }

    /// Calls `f(block_start, values)` for each block of decoded values (the
    /// last block trimmed to `len`): the fast path for whole-batch scans.
    pub fn for_each_block(&self, mut f: impl FnMut(usize, &[T])) {
        let wpb = Self::words_per_block(self.width);
        let mut buf = [T::default(); BLOCK];
        let mut start = 0;
        while start < self.len {
            let n = (self.len - start).min(BLOCK);
            if wpb > 0 {
                let b = start / BLOCK;
                // SAFETY: input is one whole block of wpb words, output exactly BLOCK values.
                unsafe { T::unchecked_unpack(self.width as usize, &self.words[b * wpb..(b + 1) * wpb], &mut buf) };
            }
            f(start, &buf[..n]);
            start += n;
        }
    }

    /// All values, decoded.
    pub fn unpack(&self) -> Vec<T> {
        let mut out = Vec::with_capacity(self.len);
        self.for_each_block(|_, v| out.extend_from_slice(v));
        out
    }

    /// The values at `indices`, in that order.
    pub fn gather(&self, indices: impl IntoIterator<Item = usize>) -> Vec<T> {
        indices.into_iter().map(|i| self.get(i)).collect()
    }

    /// The values at `rows` (ascending), for a selective scan: a block with
    /// at least [`DENSE_ROWS`] selected rows is unpacked whole (one
    /// vectorised unpack) and its rows picked from it; sparser blocks decode
    /// their rows one by one. At 5-20% selectivity most blocks are dense.
    pub fn gather_ascending(&self, rows: &[usize]) -> Vec<T> {
        assert!(rows.last().is_none_or(|&r| r < self.len), "row out of {}", self.len);
        debug_assert!(rows.is_sorted(), "rows ascend");
        let mut out = Vec::with_capacity(rows.len());
        let wpb = Self::words_per_block(self.width);
        if wpb == 0 {
            out.resize(rows.len(), T::default());
            return out;
        }
        let mut buf = [T::default(); BLOCK];
        let mut k = 0;
        while k < rows.len() {
            let b = rows[k] / BLOCK;
            let end = k + rows[k..].partition_point(|&r| r / BLOCK == b);
            if end - k >= DENSE_ROWS {
                // SAFETY: input is one whole block of wpb words, output exactly BLOCK values.
                unsafe { T::unchecked_unpack(self.width as usize, &self.words[b * wpb..(b + 1) * wpb], &mut buf) };
                out.extend(rows[k..end].iter().map(|&r| buf[r % BLOCK]));
            } else {
                out.extend(rows[k..end].iter().map(|&r| self.get(r)));
            }
            k = end;
        }
        out
    }

    /// Heap bytes held.
    pub fn heap_size(&self) -> usize {
        self.words.capacity() * std::mem::size_of::<T>()
    }
}

/// Selected rows of a 1024-value block from which [`BitPacked::gather_ascending`]
/// unpacks the whole block rather than each row.
pub const DENSE_ROWS: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathering_ascending_rows_equals_getting_each() {
        let values: Vec<u32> = (0..5000u32).map(|i| i.wrapping_mul(2654435761) & 0x3FFF).collect();
        let p = BitPacked::pack(&values, 14);
        for step in [1usize, 3, 17, 40, 500] {
            let rows: Vec<usize> = (0..values.len()).step_by(step).collect();
            let expected: Vec<u32> = rows.iter().map(|&r| values[r]).collect();
            assert_eq!(p.gather_ascending(&rows), expected, "every {step}th row");
        }
        assert!(p.gather_ascending(&[]).is_empty());
    }

    #[test]
    fn round_trip_every_width_and_odd_lengths() {
        for width in 0..=16u8 {
            for len in [0usize, 1, 1023, 1024, 1025, 3000] {
                let mask = if width == 0 { 0 } else { (1u32 << width) - 1 };
                let values: Vec<u16> = (0..len as u32)
                    .map(|i| (i.wrapping_mul(2654435761) & mask) as u16)
                    .collect();
                let p = BitPacked::pack(&values, width);
                assert_eq!(p.unpack(), values, "width {width} len {len}");
                for (i, v) in values.iter().enumerate().step_by(97) {
                    assert_eq!(p.get(i), *v);
                }
            }
        }
        let wide: Vec<u64> = vec![u64::MAX, 0, 1 << 63];
        assert_eq!(BitPacked::pack_min_width(&wide).unpack(), wide);
    }
}
