//! A batch's per-row keys into a dictionary: bit-packed one per row, or as
//! runs of equal keys.
//!
//! Why: real tables are clustered (ClickBench's hits are sorted by counter
//! and time, so a user's session is consecutive rows): on 1M realistic hits
//! rows a row group of 131,072 rows holds 3,166 runs of `URLCategoryID`, 8,395
//! of `RegionID`, 17,681 of `SearchPhrase` and 34,342 of `UserID`. Parquet's
//! run-length encoding stores such a column in about a bit per row, where one
//! bit-packed key per row spends 11-17; a shared dictionary's keys were most
//! of liquid's excess over Parquet on those columns. Runs stay addressable: a
//! row's key is found by a binary search over the runs' ends, and decoding
//! every key fills each run at once.

use crate::bitpack::BitPacked;
use crate::persist::{self, Reader, Writer};

/// Runs must take at most this share (numerator over 4) of the bit-packed
/// keys' bytes to be chosen: a row read by binary search costs more than one
/// read from packed bits, so a small saving is not worth it.
const RUNS_AT_MOST_QUARTERS: usize = 3;

/// The keys of a batch's rows.
#[derive(Debug)]
pub(crate) enum RowKeys {
    /// One key per row, bit-packed.
    Packed(BitPacked<u32>),
    /// Runs of equal keys.
    Runs(Runs),
}

impl RowKeys {
    /// The smaller form of `keys` (runs only when clearly smaller).
    pub(crate) fn of(keys: &[u32]) -> Self {
        let packed = BitPacked::pack_min_width(keys);
        let runs = Runs::count(keys);
        let max = keys.iter().copied().max().unwrap_or(0) as usize;
        let runs_bytes = runs * (Narrow::width_of(max) + Narrow::width_of(keys.len()));
        if runs_bytes * 4 <= packed.heap_size() * RUNS_AT_MOST_QUARTERS {
            RowKeys::Runs(Runs::of(keys))
        } else {
            RowKeys::Packed(packed)
        }
    }

    /// Number of rows.
    pub(crate) fn len(&self) -> usize {
        match self {
            RowKeys::Packed(p) => p.len(),
            RowKeys::Runs(r) => r.len,
        }
    }

    /// The key of row `row` (`row < len`).
    pub(crate) fn get(&self, row: usize) -> u32 {
        match self {
            RowKeys::Packed(p) => p.get(row),
            RowKeys::Runs(r) => r.get(row),
        }
    }

    /// Every row's key.
    pub(crate) fn unpack(&self) -> Vec<u32> {
        match self {
            RowKeys::Packed(p) => p.unpack(),
            RowKeys::Runs(r) => r.unpack(),
        }
    }

    /// Heap bytes held.
    pub(crate) fn heap_size(&self) -> usize {
        match self {
            RowKeys::Packed(p) => p.heap_size(),
            RowKeys::Runs(r) => r.ends.heap_size() + r.keys.heap_size(),
        }
    }

    /// Whether the keys are runs (their [`RowKeys::write`] form differs).
    pub(crate) fn is_runs(&self) -> bool {
        matches!(self, RowKeys::Runs(_))
    }

    /// Writes the keys (the reader must know which form: [`RowKeys::is_runs`]).
    pub(crate) fn write(&self, w: &mut Writer<'_>) {
        match self {
            RowKeys::Packed(p) => w.packed(p),
            RowKeys::Runs(r) => {
                w.count(r.len);
                w.u32s(&r.ends.to_vec());
                w.u32s(&r.keys.to_vec());
            }
        }
    }

    /// Keys [`RowKeys::write`] wrote in the form `runs` says; checks that
    /// runs are well formed (ascending ends, the last the length).
    pub(crate) fn read(r: &mut Reader<'_>, runs: bool) -> persist::Result<Self> {
        if !runs {
            return Ok(RowKeys::Packed(r.packed::<u32>()?));
        }
        let len = r.count()?;
        let ends = r.u32s()?;
        let keys = r.u32s()?;
        let ascending = ends.windows(2).all(|w| w[0] < w[1]) && ends.first().is_none_or(|&e| e > 0);
        if ends.len() != keys.len() || !ascending || ends.last().map_or(0, |&e| e as usize) != len {
            return persist::bad("malformed runs of dictionary keys");
        }
        Ok(RowKeys::Runs(Runs {
            len,
            ends: Narrow::of(&ends),
            keys: Narrow::of(&keys),
        }))
    }
}

/// Runs of equal keys: run `j` covers rows `ends[j - 1]..ends[j]` (from 0
/// for the first) and holds `keys[j]`.
#[derive(Debug)]
pub(crate) struct Runs {
    len: usize,
    ends: Narrow,
    keys: Narrow,
}

impl Runs {
    /// Runs in `keys`.
    fn count(keys: &[u32]) -> usize {
        keys.chunk_by(|a, b| a == b).count()
    }

    fn of(keys: &[u32]) -> Self {
        let (mut ends, mut values) = (Vec::new(), Vec::new());
        let mut end = 0;
        for run in keys.chunk_by(|a, b| a == b) {
            end += run.len() as u32;
            ends.push(end);
            values.push(run[0]);
        }
        Runs {
            len: keys.len(),
            ends: Narrow::of(&ends),
            keys: Narrow::of(&values),
        }
    }

    fn get(&self, row: usize) -> u32 {
        assert!(row < self.len, "row {row} out of {}", self.len);
        self.keys.get(self.ends.first_above(row as u32))
    }

    fn unpack(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len);
        for j in 0..self.ends.len() {
            out.resize(self.ends.get(j) as usize, self.keys.get(j));
        }
        out
    }
}

/// `u32`s in the narrowest whole-byte width that holds them: runs are few,
/// so bit-packing's 1,024-value blocks would mostly be padding.
#[derive(Debug)]
enum Narrow {
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
}

impl Narrow {
    /// Bytes per value that hold `max`.
    fn width_of(max: usize) -> usize {
        match max {
            0..=0xff => 1,
            0x100..=0xffff => 2,
            _ => 4,
        }
    }

    fn of(values: &[u32]) -> Self {
        let max = values.iter().copied().max().unwrap_or(0) as usize;
        match Self::width_of(max) {
            1 => Narrow::U8(values.iter().map(|&v| v as u8).collect()),
            2 => Narrow::U16(values.iter().map(|&v| v as u16).collect()),
            _ => Narrow::U32(values.to_vec()),
        }
    }

    fn len(&self) -> usize {
        match self {
            Narrow::U8(v) => v.len(),
            Narrow::U16(v) => v.len(),
            Narrow::U32(v) => v.len(),
        }
    }

    fn get(&self, i: usize) -> u32 {
        match self {
            Narrow::U8(v) => u32::from(v[i]),
            Narrow::U16(v) => u32::from(v[i]),
            Narrow::U32(v) => v[i],
        }
    }

    /// The index of the first value above `x` (the values ascending).
    fn first_above(&self, x: u32) -> usize {
        match self {
            Narrow::U8(v) => v.partition_point(|&e| u32::from(e) <= x),
            Narrow::U16(v) => v.partition_point(|&e| u32::from(e) <= x),
            Narrow::U32(v) => v.partition_point(|&e| e <= x),
        }
    }

    fn to_vec(&self) -> Vec<u32> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }

    fn heap_size(&self) -> usize {
        match self {
            Narrow::U8(v) => v.capacity(),
            Narrow::U16(v) => v.capacity() * 2,
            Narrow::U32(v) => v.capacity() * 4,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clustered(rows: usize, run: usize) -> Vec<u32> {
        (0..rows).map(|i| ((i / run) as u32 * 7919) % 5000).collect()
    }

    #[test]
    fn runs_are_chosen_for_clustered_keys_and_read_back_exactly() {
        let keys = clustered(8192, 40);
        let form = RowKeys::of(&keys);
        assert!(form.is_runs());
        assert_eq!(form.len(), keys.len());
        assert_eq!(form.unpack(), keys);
        for (row, &k) in keys.iter().enumerate() {
            assert_eq!(form.get(row), k, "row {row}");
        }
        assert!(form.heap_size() * 4 <= BitPacked::pack_min_width(&keys).heap_size());
    }

    #[test]
    fn keys_that_rarely_repeat_stay_packed() {
        let keys = clustered(8192, 1);
        let form = RowKeys::of(&keys);
        assert!(!form.is_runs());
        assert_eq!(form.unpack(), keys);
    }
}
