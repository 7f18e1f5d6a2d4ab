//! Sequences of byte strings: raw or FSST compressed with a symbol table
//! shared by the batches of a column (each value decodable on its own), or
//! zstd compressed in blocks of rows ([`super::zstd_blocks`]: smaller, a
//! value decoded with its block).

use std::sync::Arc;

use fsst::{Compressor, Decompressor, Symbol};

use super::zstd_blocks::{BlockReader, ZstdBlocks, ZstdCodec};
use crate::bitpack::BitPacked;
use crate::persist::{self, Reader, Writer};

/// When a batch's values take the block-compressed zstd form, which reads
/// a value by decompressing its block (a scan's filter over it decodes every
/// block once, about what FSST costs; a take of a few rows costs more).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compaction {
    /// Never: FSST or raw only.
    Never,
    /// When it takes at most three quarters of the other forms' bytes and
    /// the batch holds at least [`MIN_COMPACT_BYTES`] of values.
    #[default]
    WhenSmaller,
    /// Whenever zstd compresses the batch at all (for columns the cache
    /// keeps for size, not speed; and tests of the form).
    Always,
}

/// Fewest raw bytes of values worth a zstd form under [`Compaction::WhenSmaller`].
pub const MIN_COMPACT_BYTES: usize = 16 << 10;

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

    /// Writes the table (a part: [`crate::persist`]).
    fn write(&self, w: &mut Writer<'_>) {
        for symbol in &self.symbols {
            w.u64(symbol.to_u64());
        }
        for &length in &self.lengths {
            w.u8(length);
        }
    }

    /// A table [`SymbolTable::write`] wrote; symbols are 1 to 8 bytes (0 for unused slots).
    fn read(r: &mut Reader<'_>) -> persist::Result<Self> {
        let mut symbols = [Symbol::ZERO; 255];
        let mut lengths = [0u8; 255];
        for symbol in &mut symbols {
            *symbol = Symbol::from_slice(&r.u64()?.to_le_bytes());
        }
        for length in &mut lengths {
            *length = r.u8()?;
            if *length > 8 {
                return persist::bad(format!("an FSST symbol of {length} bytes"));
            }
        }
        Ok(SymbolTable { symbols, lengths })
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

/// A column's codecs: FSST's trained compressor (kept by the encoder only)
/// and the decoding table its arrays share; zstd's dictionary, unless the
/// column never takes the zstd form.
pub(crate) struct Codec {
    compressor: Compressor,
    table: Arc<SymbolTable>,
    zstd: Option<ZstdCodec>,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Codec")
            .field("symbols", &self.compressor.n_symbols())
            .finish()
    }
}

impl Codec {
    /// Trains a symbol table on `sample` (FSST samples ~16 KiB of it
    /// itself) and, unless `compaction` is never, samples zstd's dictionary
    /// from it.
    pub(crate) fn train(sample: &Vec<&[u8]>, compaction: Compaction) -> Self {
        let compressor = Compressor::train(sample);
        let table = Arc::new(SymbolTable::of(&compressor));
        let zstd = (compaction != Compaction::Never).then(|| ZstdCodec::sample(sample));
        Codec {
            compressor,
            table,
            zstd,
        }
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
    /// zstd blocks of values.
    Zstd(ZstdBlocks),
}

/// FSST must save this share of the raw bytes to be worth its decoding cost.
const MIN_SAVING_DIVISOR: usize = 10;

impl Store {
    /// The smaller of the raw and the FSST form of `values` (raw without a
    /// codec), or their zstd form as `compaction` says.
    pub(crate) fn best(values: &[&[u8]], codec: Option<&Codec>, compaction: Compaction) -> Self {
        let raw_len: usize = values.iter().map(|v| v.len()).sum();
        let chosen = match codec {
            Some(codec) => {
                let fsst = Self::fsst(values, codec);
                // Offsets cost about the same in both forms; compare the rest.
                let fsst_cost = fsst.heap_size() - fsst.offsets().map_or(0, BitPacked::heap_size);
                if fsst_cost < raw_len - raw_len / MIN_SAVING_DIVISOR {
                    fsst
                } else {
                    Self::raw(values, raw_len)
                }
            }
            None => Self::raw(values, raw_len),
        };
        let zstd = codec.and_then(|c| c.zstd.as_ref());
        let worth = match compaction {
            Compaction::Never => false,
            Compaction::WhenSmaller => raw_len >= MIN_COMPACT_BYTES,
            Compaction::Always => true,
        };
        if let Some(z) = zstd.filter(|_| worth)
            && let Some(blocks) = ZstdBlocks::compress(values, z)
            && (compaction == Compaction::Always || blocks.heap_size() * 4 <= chosen.heap_size() * 3)
        {
            return Store::Zstd(blocks.charge_dictionary(z));
        }
        chosen
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

    /// Writes the values; the column's FSST table or zstd dictionary as a part.
    pub(crate) fn write(&self, w: &mut Writer<'_>) {
        match self {
            Store::Raw { offsets, bytes } => {
                w.u8(0);
                w.packed(offsets);
                w.bytes(bytes);
            }
            Store::Fsst { offsets, codes, table } => {
                w.u8(1);
                w.packed(offsets);
                w.bytes(codes);
                w.part(table, SymbolTable::write);
            }
            Store::Zstd(blocks) => {
                w.u8(2);
                blocks.write(w);
            }
        }
    }

    /// Values [`Store::write`] wrote, their offsets checked against their bytes.
    pub(crate) fn read(r: &mut Reader<'_>) -> persist::Result<Self> {
        let form = r.u8()?;
        if form == 2 {
            return Ok(Store::Zstd(ZstdBlocks::read(r)?));
        }
        let offsets = r.packed::<u64>()?;
        let data = r.bytes()?;
        let ends = offsets.unpack();
        let fits = ends.first().is_some_and(|&o| o == 0)
            && ends.windows(2).all(|w| w[0] <= w[1])
            && ends.last().is_some_and(|&o| o as usize == data.len());
        if !fits {
            return persist::bad("string offsets that do not fit their bytes");
        }
        match form {
            0 => Ok(Store::Raw { offsets, bytes: data }),
            1 => Ok(Store::Fsst {
                offsets,
                codes: data,
                table: r.part(SymbolTable::read)?,
            }),
            f => persist::bad(format!("unknown string store {f}")),
        }
    }

    /// The form's name in an encoding's (`silt stats`): "", "fsst" or "zstd".
    pub(crate) fn form(&self) -> &'static str {
        match self {
            Store::Raw { .. } => "",
            Store::Fsst { .. } => "fsst",
            Store::Zstd(_) => "zstd",
        }
    }

    /// Number of values.
    pub(crate) fn len(&self) -> usize {
        match self {
            Store::Zstd(blocks) => blocks.len(),
            Store::Raw { offsets, .. } | Store::Fsst { offsets, .. } => offsets.len().saturating_sub(1),
        }
    }

    /// Each value's start and end, for the forms that address values one by one.
    fn offsets(&self) -> Option<&BitPacked<u64>> {
        match self {
            Store::Raw { offsets, .. } | Store::Fsst { offsets, .. } => Some(offsets),
            Store::Zstd(_) => None,
        }
    }

    /// A reader of values by index (for reads in ascending order: the zstd
    /// form decodes each block it reaches once).
    pub(crate) fn reader(&self) -> StoreReader<'_> {
        match self {
            Store::Zstd(blocks) => StoreReader::Blocks(blocks.reader()),
            other => StoreReader::Direct(other),
        }
    }

    fn append_range(&self, range: std::ops::Range<usize>, out: &mut Vec<u8>) {
        match self {
            Store::Raw { bytes, .. } => out.extend_from_slice(&bytes[range]),
            Store::Fsst { codes, table, .. } => table.decompress_into(&codes[range], out),
            Store::Zstd(_) => unreachable!("zstd blocks are read by value, not by byte range"),
        }
    }

    /// Appends every value to `out` (one pass over the offsets), recording
    /// where each ends in `ends`.
    pub(crate) fn append_all(&self, out: &mut Vec<u8>, ends: &mut Vec<usize>) {
        let offsets = match self {
            Store::Zstd(blocks) => return blocks.append_all(out, ends),
            Store::Raw { offsets, .. } | Store::Fsst { offsets, .. } => offsets.unpack(),
        };
        ends.reserve(offsets.len().saturating_sub(1));
        for w in offsets.windows(2) {
            self.append_range(w[0] as usize..w[1] as usize, out);
            ends.push(out.len());
        }
    }

    /// The zstd blocks, if the values are in that form.
    pub(crate) fn zstd_blocks(&self) -> Option<&ZstdBlocks> {
        match self {
            Store::Zstd(blocks) => Some(blocks),
            _ => None,
        }
    }

    /// Calls `f(i, value)` for every value in order (one pass, one scratch buffer).
    pub(crate) fn for_each(&self, mut f: impl FnMut(usize, &[u8])) {
        let offsets = match self {
            Store::Zstd(blocks) => return blocks.for_each(f),
            Store::Raw { offsets, .. } | Store::Fsst { offsets, .. } => offsets.unpack(),
        };
        let mut scratch = Vec::new();
        for (i, w) in offsets.windows(2).enumerate() {
            let range = w[0] as usize..w[1] as usize;
            match self {
                Store::Raw { bytes, .. } => f(i, &bytes[range]),
                _ => {
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
            Store::Zstd(blocks) => blocks.heap_size(),
        }
    }
}

/// Reads a [`Store`]'s values by index ([`Store::reader`]).
pub(crate) enum StoreReader<'a> {
    Direct(&'a Store),
    Blocks(BlockReader<'a>),
}

impl StoreReader<'_> {
    /// Appends value `i` to `out`.
    pub(crate) fn append(&mut self, i: usize, out: &mut Vec<u8>) {
        match self {
            StoreReader::Direct(store) => {
                if let Some(offsets) = store.offsets() {
                    let range = offsets.get(i) as usize..offsets.get(i + 1) as usize;
                    store.append_range(range, out);
                }
            }
            StoreReader::Blocks(reader) => out.extend_from_slice(reader.value(i)),
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
