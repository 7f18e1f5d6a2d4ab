//! Sequences of byte strings, each decodable on its own: raw, or FSST
//! compressed with a symbol table shared by the batches of a column.

use std::sync::Arc;

use fsst::{Compressor, Decompressor, Symbol};

use crate::bitpack::BitPacked;

/// The decoding half of a column's FSST symbol table (~2.3 KiB).
///
/// Arrays keep only this, not the [`Compressor`] (whose lookup tables take
/// ~160 KiB), so holding a table per batch costs little and `heap_size` can
/// charge it to every array that holds it without grossly overstating memory.
#[derive(Debug)]
pub(crate) struct SymbolTable {
    symbols: [Symbol; 255],
    lengths: [u8; 255],
}

impl SymbolTable {
    fn of(compressor: &Compressor) -> Self {
        let mut symbols = [Symbol::ZERO; 255];
        let mut lengths = [0u8; 255];
        let n = compressor.n_symbols();
        symbols[..n].copy_from_slice(compressor.symbol_table());
        lengths[..n].copy_from_slice(compressor.symbol_lengths());
        SymbolTable { symbols, lengths }
    }

    fn decompressor(&self) -> Decompressor<'_> {
        Decompressor::new(&self.symbols, &self.lengths)
    }

    /// Appends the decompression of `codes` to `out`.
    fn decompress_into(&self, codes: &[u8], out: &mut Vec<u8>) {
        let d = self.decompressor();
        out.reserve(d.max_decompression_capacity(codes) + 8);
        let n = d.decompress_into(codes, out.spare_capacity_mut());
        // SAFETY: `decompress_into` initialised exactly `n` bytes of the spare capacity.
        unsafe { out.set_len(out.len() + n) };
    }
}

/// A column's FSST codec: the trained compressor (kept by the encoder
/// only) and the decoding table its arrays share.
pub(crate) struct Codec {
    compressor: Compressor,
    table: Arc<SymbolTable>,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Codec")
            .field("symbols", &self.compressor.n_symbols())
            .finish()
    }
}

impl Codec {
    /// Trains a symbol table on `sample` (FSST samples ~16 KiB of it itself).
    pub(crate) fn train(sample: &Vec<&[u8]>) -> Self {
        let compressor = Compressor::train(sample);
        let table = Arc::new(SymbolTable::of(&compressor));
        Codec { compressor, table }
    }

    /// Appends the compression of `value` to `out`.
    fn compress_into(&self, value: &[u8], out: &mut Vec<u8>) {
        // FSST output is at most two bytes per input byte (all escapes).
        out.reserve(2 * value.len() + 8);
        // SAFETY: the spare capacity holds the worst case computed above.
        unsafe {
            let n = self.compressor.compress_into(value, out.spare_capacity_mut());
            out.set_len(out.len() + n);
        }
    }
}

/// Element `i` occupies `offsets[i]..offsets[i + 1]` of the bytes.
#[derive(Debug)]
pub(crate) enum Store {
    /// Values as they are, for data FSST does not shrink.
    Raw { offsets: BitPacked<u64>, bytes: Vec<u8> },
    /// FSST codes per value, decoded with the chunk's table.
    Fsst {
        offsets: BitPacked<u64>,
        codes: Vec<u8>,
        table: Arc<SymbolTable>,
    },
}

/// FSST must save this share of the raw bytes to be worth its decoding cost.
const MIN_SAVING_DIVISOR: usize = 10;

impl Store {
    /// The smaller of the raw and the FSST form of `values` (raw without a codec).
    pub(crate) fn best(values: &[&[u8]], codec: Option<&Codec>) -> Self {
        let raw_len: usize = values.iter().map(|v| v.len()).sum();
        if let Some(codec) = codec {
            let fsst = Self::fsst(values, codec);
            // Offsets cost about the same in both forms; compare the rest.
            let fsst_cost = fsst.heap_size() - fsst.offsets().heap_size();
            if fsst_cost < raw_len - raw_len / MIN_SAVING_DIVISOR {
                return fsst;
            }
        }
        Self::raw(values, raw_len)
    }

    fn raw(values: &[&[u8]], raw_len: usize) -> Self {
        let mut bytes = Vec::with_capacity(raw_len);
        let offsets = offsets_of(values, |v| {
            bytes.extend_from_slice(v);
            bytes.len()
        });
        Store::Raw { offsets, bytes }
    }

    fn fsst(values: &[&[u8]], codec: &Codec) -> Self {
        let mut codes = Vec::new();
        let offsets = offsets_of(values, |v| {
            codec.compress_into(v, &mut codes);
            codes.len()
        });
        codes.shrink_to_fit();
        Store::Fsst {
            offsets,
            codes,
            table: Arc::clone(&codec.table),
        }
    }

    /// Whether values are FSST compressed.
    pub(crate) fn is_fsst(&self) -> bool {
        matches!(self, Store::Fsst { .. })
    }

    /// Number of values.
    pub(crate) fn len(&self) -> usize {
        self.offsets().len().saturating_sub(1)
    }

    fn offsets(&self) -> &BitPacked<u64> {
        match self {
            Store::Raw { offsets, .. } | Store::Fsst { offsets, .. } => offsets,
        }
    }

    /// Appends value `i` to `out`, decoding only that value.
    pub(crate) fn append(&self, i: usize, out: &mut Vec<u8>) {
        let offsets = self.offsets();
        let range = offsets.get(i) as usize..offsets.get(i + 1) as usize;
        self.append_range(range, out);
    }

    fn append_range(&self, range: std::ops::Range<usize>, out: &mut Vec<u8>) {
        match self {
            Store::Raw { bytes, .. } => out.extend_from_slice(&bytes[range]),
            Store::Fsst { codes, table, .. } => table.decompress_into(&codes[range], out),
        }
    }

    /// Appends every value to `out` (one pass over the offsets), recording
    /// where each ends in `ends`.
    pub(crate) fn append_all(&self, out: &mut Vec<u8>, ends: &mut Vec<usize>) {
        let offsets = self.offsets().unpack();
        ends.reserve(offsets.len().saturating_sub(1));
        for w in offsets.windows(2) {
            self.append_range(w[0] as usize..w[1] as usize, out);
            ends.push(out.len());
        }
    }

    /// Calls `f(i, value)` for every value in order (one pass, one scratch buffer).
    pub(crate) fn for_each(&self, mut f: impl FnMut(usize, &[u8])) {
        let offsets = self.offsets().unpack();
        let mut scratch = Vec::new();
        for (i, w) in offsets.windows(2).enumerate() {
            let range = w[0] as usize..w[1] as usize;
            match self {
                Store::Raw { bytes, .. } => f(i, &bytes[range]),
                Store::Fsst { .. } => {
                    scratch.clear();
                    self.append_range(range, &mut scratch);
                    f(i, &scratch);
                }
            }
        }
    }

    /// Heap bytes held, counting the shared symbol table in full: it is
    /// small, and the memory tier can not know which arrays outlive the others.
    pub(crate) fn heap_size(&self) -> usize {
        match self {
            Store::Raw { offsets, bytes } => offsets.heap_size() + bytes.capacity(),
            Store::Fsst { offsets, codes, .. } => {
                offsets.heap_size() + codes.capacity() + std::mem::size_of::<SymbolTable>()
            }
        }
    }
}

/// Writes each value with `write` (which returns the bytes written so far)
/// and bit-packs the running ends.
fn offsets_of(values: &[&[u8]], mut write: impl FnMut(&[u8]) -> usize) -> BitPacked<u64> {
    let mut offsets = Vec::with_capacity(values.len() + 1);
    offsets.push(0u64);
    for v in values {
        offsets.push(write(v) as u64);
    }
    BitPacked::pack_min_width(&offsets)
}
