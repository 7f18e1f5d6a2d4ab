//! Values in blocks of rows, each block one zstd frame: the compact form for
//! strings that rarely repeat (URLs, titles), where FSST per value stays at
//! about twice what Parquet's zstd-compressed pages take.
//!
//! A block of [`BLOCK_ROWS`] values is compressed as their lengths (`u32`,
//! little-endian) then their bytes, against the column's dictionary: raw
//! content sampled from the column's first batch (zstd takes any bytes as a
//! dictionary, so no training library is needed), so what repeats across
//! blocks — URL prefixes, common words — costs little in each. A value is
//! read by decompressing its block: scans read blocks in order and keep the
//! last one decoded ([`BlockReader`]); predicates decode each block once.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use zstd::bulk::{Compressor, Decompressor};
use zstd::dict::{DecoderDictionary, EncoderDictionary};

use crate::persist::{self, Reader, Writer};

/// Rows per block: a read of one row decompresses this many values. (On
/// ClickBench's hits, 2048 rows with a 64 KiB dictionary take 0.98-1.15x
/// the bytes of Parquet's zstd pages for Title, Referer and URL; 1024 rows
/// 1.02-1.17x; no dictionary 1.11-1.29x.)
pub(crate) const BLOCK_ROWS: usize = 2048;
/// zstd's level: 3 (its default) compresses at a few hundred MB/s, and the
/// transcoder encodes off the query's threads.
const LEVEL: i32 = 3;
/// Most bytes of sampled values a column's dictionary holds.
const DICTIONARY_BYTES: usize = 64 << 10;
/// Shortest dictionary worth using (zstd reads shorter content as none).
const MIN_DICTIONARY_BYTES: usize = 64;

/// The decoding half of a column's dictionary, shared by its arrays.
pub(crate) struct ZstdTable {
    dictionary: Option<DecoderDictionary<'static>>,
    /// The dictionary's content (shared with the codec), kept so the table
    /// can be written to disk ([`crate::persist`]) and made again.
    content: Arc<[u8]>,
}

impl fmt::Debug for ZstdTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZstdTable").field("bytes", &self.content.len()).finish()
    }
}

impl ZstdTable {
    /// The table of a dictionary of `content` (none when empty).
    fn of(content: Arc<[u8]>) -> Self {
        ZstdTable {
            dictionary: (!content.is_empty()).then(|| DecoderDictionary::copy(&content)),
            content,
        }
    }

    /// Writes the table's content (a part: [`crate::persist`]).
    pub(crate) fn write(&self, w: &mut Writer<'_>) {
        w.bytes(&self.content);
    }

    /// A table [`ZstdTable::write`] wrote.
    pub(crate) fn read(r: &mut Reader<'_>) -> persist::Result<Self> {
        Ok(Self::of(r.bytes()?.into()))
    }

    fn decompressor(&self) -> Decompressor<'_> {
        let made = match &self.dictionary {
            Some(d) => Decompressor::with_prepared_dictionary(d),
            None => Decompressor::new(),
        };
        made.expect("a zstd decompression context")
    }
}

/// A column's zstd codec: the dictionary's content, and (made on first
/// use: most columns never take the zstd form) the prepared compression
/// dictionary, kept by the encoder only, and the decoding table its arrays
/// share.
pub(crate) struct ZstdCodec {
    content: Arc<[u8]>,
    prepared: OnceLock<Prepared>,
    /// Whether a batch already charges the dictionary in its heap size.
    charged: AtomicBool,
}

struct Prepared {
    encoder: Option<EncoderDictionary<'static>>,
    table: Arc<ZstdTable>,
}

impl fmt::Debug for ZstdCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZstdCodec")
            .field("content", &self.content.len())
            .finish()
    }
}

impl ZstdCodec {
    /// A codec whose dictionary is values of `sample` spread over it (every
    /// k-th, up to [`DICTIONARY_BYTES`]), or none when they are too short.
    pub(crate) fn sample(sample: &[&[u8]]) -> Self {
        let total: usize = sample.iter().map(|v| v.len()).sum();
        let step = (total / DICTIONARY_BYTES).max(1);
        let mut content = Vec::new();
        for v in sample.iter().step_by(step) {
            if content.len() + v.len() > DICTIONARY_BYTES {
                break;
            }
            content.extend_from_slice(v);
        }
        if content.len() < MIN_DICTIONARY_BYTES {
            content.clear();
        }
        ZstdCodec {
            content: content.into(),
            prepared: OnceLock::new(),
            charged: AtomicBool::new(false),
        }
    }

    fn prepared(&self) -> &Prepared {
        self.prepared.get_or_init(|| {
            let content = &self.content;
            let with_content = !content.is_empty();
            Prepared {
                encoder: with_content.then(|| EncoderDictionary::copy(content, LEVEL)),
                table: Arc::new(ZstdTable::of(Arc::clone(content))),
            }
        })
    }

    fn compressor(&self) -> Option<Compressor<'_>> {
        match &self.prepared().encoder {
            Some(d) => Compressor::with_prepared_dictionary(d).ok(),
            None => Compressor::new(LEVEL).ok(),
        }
    }
}

/// One compressed block.
#[derive(Debug)]
struct Block {
    frame: Box<[u8]>,
    /// Its decompressed size.
    raw_len: usize,
}

/// A sequence of values in zstd blocks (module docs).
#[derive(Debug)]
pub(crate) struct ZstdBlocks {
    blocks: Vec<Block>,
    len: usize,
    table: Arc<ZstdTable>,
    /// Whether this batch's heap size counts the column's dictionary (the
    /// first batch kept in this form does).
    charges_dictionary: bool,
}

impl ZstdBlocks {
    /// `values` compressed with `codec`; `None` if a value is longer than
    /// 4 GiB or zstd fails.
    pub(crate) fn compress(values: &[&[u8]], codec: &ZstdCodec) -> Option<Self> {
        let mut compressor = codec.compressor()?;
        let mut raw = Vec::new();
        let mut blocks = Vec::with_capacity(values.len().div_ceil(BLOCK_ROWS));
        for chunk in values.chunks(BLOCK_ROWS) {
            raw.clear();
            for v in chunk {
                raw.extend_from_slice(&u32::try_from(v.len()).ok()?.to_le_bytes());
            }
            for v in chunk {
                raw.extend_from_slice(v);
            }
            let frame = compressor.compress(&raw).ok()?.into_boxed_slice();
            blocks.push(Block {
                frame,
                raw_len: raw.len(),
            });
        }
        Some(ZstdBlocks {
            blocks,
            len: values.len(),
            table: Arc::clone(&codec.prepared().table),
            charges_dictionary: false,
        })
    }

    /// Marks this batch as the one kept in this form that counts the
    /// column's dictionary, if no batch of `codec` does yet.
    pub(crate) fn charge_dictionary(mut self, codec: &ZstdCodec) -> Self {
        self.charges_dictionary = !codec.charged.swap(true, Ordering::Relaxed);
        self
    }

    /// Number of values.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The frames and the block list, and the column's dictionary (at most
    /// [`DICTIONARY_BYTES`]: one per column of a file, shared by its
    /// batches) in the first batch kept in this form only: counted in every
    /// batch it would overstate memory several times over. (If that batch
    /// is evicted first, the dictionary stays uncounted while others use it.)
    pub(crate) fn heap_size(&self) -> usize {
        let dictionary = if self.charges_dictionary {
            self.table.content.len()
        } else {
            0
        };
        dictionary
            + self.blocks.capacity() * std::mem::size_of::<Block>()
            + self.blocks.iter().map(|b| b.frame.len()).sum::<usize>()
    }

    /// Calls `f(i, value)` for every value in order, decoding each block once.
    pub(crate) fn for_each(&self, mut f: impl FnMut(usize, &[u8])) {
        let mut reader = self.reader();
        for b in 0..self.blocks.len() {
            let block = reader.block(b);
            for j in 0..block.len() {
                f(b * BLOCK_ROWS + j, block.value(j));
            }
        }
    }

    /// Calls `f(first, bytes, ends)` per block in order: its first value's
    /// index, its values back to back and where each ends in them.
    pub(crate) fn for_each_block(&self, mut f: impl FnMut(usize, &[u8], &[usize])) {
        let mut reader = self.reader();
        for b in 0..self.blocks.len() {
            let block = reader.block(b);
            f(b * BLOCK_ROWS, block.values(), &block.ends);
        }
    }

    /// Appends every value to `out`, recording where each ends in `ends`.
    pub(crate) fn append_all(&self, out: &mut Vec<u8>, ends: &mut Vec<usize>) {
        ends.reserve(self.len);
        let mut reader = self.reader();
        for b in 0..self.blocks.len() {
            let block = reader.block(b);
            let base = out.len();
            out.extend_from_slice(block.values());
            ends.extend(block.ends.iter().map(|&e| base + e));
        }
    }

    /// Writes the blocks; the column's dictionary as a part.
    pub(crate) fn write(&self, w: &mut Writer<'_>) {
        w.count(self.len);
        w.bool(self.charges_dictionary);
        w.part(&self.table, ZstdTable::write);
        w.count(self.blocks.len());
        for block in &self.blocks {
            w.count(block.raw_len);
            w.bytes(&block.frame);
        }
    }

    /// Blocks [`ZstdBlocks::write`] wrote. Their frames are checked by
    /// their sizes only (the disk tier's checksum guards their content).
    pub(crate) fn read(r: &mut Reader<'_>) -> persist::Result<Self> {
        let len = r.count()?;
        let charges_dictionary = r.bool()?;
        let table = r.part(ZstdTable::read)?;
        let count = r.len(16)?;
        if count != len.div_ceil(BLOCK_ROWS) {
            return persist::bad(format!("{count} zstd blocks for {len} values"));
        }
        let mut blocks = Vec::with_capacity(count);
        for b in 0..count {
            let raw_len = r.count()?;
            let rows = BLOCK_ROWS.min(len - b * BLOCK_ROWS);
            if raw_len < rows * 4 {
                return persist::bad(format!("a zstd block of {raw_len} bytes for {rows} values"));
            }
            let frame = r.bytes()?.into_boxed_slice();
            blocks.push(Block { frame, raw_len });
        }
        Ok(ZstdBlocks {
            blocks,
            len,
            table,
            charges_dictionary,
        })
    }

    /// A reader that keeps the last block it decoded.
    pub(crate) fn reader(&self) -> BlockReader<'_> {
        BlockReader {
            blocks: self,
            decompressor: self.table.decompressor(),
            current: None,
            decoded: DecodedBlock::default(),
        }
    }
}

/// One decompressed block: the raw bytes and where each value ends.
#[derive(Debug, Default)]
pub(crate) struct DecodedBlock {
    raw: Vec<u8>,
    /// Where the values start in `raw` (after the lengths).
    start: usize,
    /// Each value's end, relative to `start`.
    ends: Vec<usize>,
}

impl DecodedBlock {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn value(&self, j: usize) -> &[u8] {
        let from = if j == 0 { 0 } else { self.ends[j - 1] };
        &self.raw[self.start + from..self.start + self.ends[j]]
    }

    /// Every value's bytes, back to back.
    fn values(&self) -> &[u8] {
        &self.raw[self.start..]
    }
}

/// Reads values of a [`ZstdBlocks`] by index, decompressing a block only
/// when the index leaves the last one.
pub(crate) struct BlockReader<'a> {
    blocks: &'a ZstdBlocks,
    decompressor: Decompressor<'a>,
    current: Option<usize>,
    decoded: DecodedBlock,
}

impl BlockReader<'_> {
    /// Value `i`.
    pub(crate) fn value(&mut self, i: usize) -> &[u8] {
        let block = self.block(i / BLOCK_ROWS);
        block.value(i % BLOCK_ROWS)
    }

    /// Block `b`, decoded. The frames were written by this process, so a
    /// failure to decode one is a bug, not bad input.
    fn block(&mut self, b: usize) -> &DecodedBlock {
        if self.current != Some(b) {
            let block = &self.blocks.blocks[b];
            let rows = BLOCK_ROWS.min(self.blocks.len - b * BLOCK_ROWS);
            let d = &mut self.decoded;
            d.raw.clear();
            d.raw.reserve(block.raw_len);
            let n = self
                .decompressor
                .decompress_to_buffer(&block.frame, &mut d.raw)
                .expect("a zstd block this process compressed");
            assert_eq!(n, block.raw_len, "a zstd block's decompressed size");
            d.start = rows * 4;
            d.ends.clear();
            let mut end = 0;
            for length in d.raw[..d.start].chunks_exact(4) {
                end += u32::from_le_bytes(length.try_into().expect("four bytes")) as usize;
                d.ends.push(end);
            }
            self.current = Some(b);
        }
        &self.decoded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_across_blocks_with_and_without_a_dictionary() {
        let values: Vec<Vec<u8>> = (0..2500)
            .map(|i| format!("https://example.com/{}/{}", i % 37, "x".repeat(i % 5)).into_bytes())
            .chain([Vec::new()])
            .collect();
        let slices: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        for codec in [ZstdCodec::sample(&slices), ZstdCodec::sample(&[b"ab".as_slice()])] {
            let blocks = ZstdBlocks::compress(&slices, &codec).unwrap();
            assert_eq!(blocks.len(), slices.len());
            let mut seen = Vec::new();
            blocks.for_each(|i, v| seen.push((i, v.to_vec())));
            assert_eq!(seen, values.iter().cloned().enumerate().collect::<Vec<_>>());
            let (mut out, mut ends) = (Vec::new(), Vec::new());
            blocks.append_all(&mut out, &mut ends);
            assert_eq!(ends.len(), values.len());
            assert_eq!(out, values.concat());
            let mut reader = blocks.reader();
            for i in [2500, 0, 1023, 1024, 7, 2047, 2048] {
                assert_eq!(reader.value(i), values[i].as_slice());
            }
            assert!(blocks.heap_size() < values.iter().map(Vec::len).sum::<usize>() / 4);
        }
    }
}
