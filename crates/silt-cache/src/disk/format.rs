//! The format of a page in its slot of a region file.
//!
//! A page is a fixed [`HEADER_LEN`]-byte header followed by the data, so the
//! data starts 4 KiB aligned and a page (or a run of neighbouring slots) can
//! be read with `O_DIRECT`. Header, little-endian, zero padded:
//!
//! | offset | size | field                                              |
//! |--------|------|----------------------------------------------------|
//! | 0      | 8    | magic `SILTPAGE`                                   |
//! | 8      | 4    | format version ([`FORMAT_VERSION`])                |
//! | 12     | 4    | offset of the data in the page (format 3; 0 before) |
//! | 16     | 8    | data length                                        |
//! | 24     | 4    | CRC32C of the data                                 |
//! | 28     | 4    | length `n` of the encoded key                      |
//! | 32     | n    | key: page u64, then store, path, version as u32 length + UTF-8 |
//! | 4084   | 8    | refetch cost in ns, f64 (formats 2 and 3)          |
//! | 4092   | 4    | CRC32C of bytes 0..4092                            |
//!
//! The key is stored in full so that a slot reused by another page after a
//! lookup is detected (and served as a miss) and so that recovery can
//! rebuild the index from headers alone. A slot never written reads as zeros:
//! [`decode_header`] calls it [`Invalid::Blank`], a free slot, not damage. The cost (what the page's GET measured, see
//! [`CostModel::share_of_request`](crate::policy::CostModel::share_of_request))
//! is stored so that a restart keeps `weighted-lfu`'s order instead of
//! repricing every page by a model. Format 1 headers (written before costs
//! were stored; the layout is otherwise the same) are still read: they have
//! no cost, and the index prices them by its model. Format 3 added the
//! offset: a slot may hold part of a page (reads fetch exact byte ranges, so
//! the pages at the ends of a fetch are partial, see
//! [`Page`](crate::page_cache::Page)); formats 1 and 2 hold whole pages
//! (their field there was always 0) and are read as such.

use std::fmt;
use std::sync::Arc;

use crate::PageKey;

/// Size of the header block; also the alignment of the data and of slots.
pub(crate) const HEADER_LEN: usize = 4096;
/// Block size of `O_DIRECT` alignment.
pub(crate) const BLOCK: u64 = 4096;
const MAGIC: [u8; 8] = *b"SILTPAGE";
/// Bumped when the layout changes; pages of versions not read here
/// ([`decode_header`]) are dropped.
pub(crate) const FORMAT_VERSION: u32 = 3;
/// The format before partial pages (no offset), still read.
const FORMAT_WHOLE_PAGES: u32 = 2;
/// The format before costs were stored, still read.
const FORMAT_WITHOUT_COST: u32 = 1;
const KEY_START: usize = 32;
const CRC_AT: usize = HEADER_LEN - 4;
const COST_AT: usize = CRC_AT - 8;

/// What a header says.
#[derive(Debug)]
pub(crate) struct Header {
    /// Where the data starts in the page (0 for a whole page).
    pub offset: u64,
    pub data_len: u64,
    pub data_crc: u32,
    pub key: PageKey,
    /// The refetch cost stored with the page, in ns; `None` for format 1
    /// pages and for a stored value that is not a finite non-negative number.
    pub cost: Option<f64>,
}

/// Why a slot's content is not a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Invalid {
    /// All zeros: a slot never written (not damage).
    Blank,
    /// Shorter than a header, or a data length the slot cannot hold.
    Length {
        len: u64,
    },
    BadMagic,
    UnsupportedVersion(u32),
    HeaderChecksum,
    MalformedKey,
    DataChecksum,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Invalid::Blank => f.write_str("empty slot"),
            Invalid::Length { len } => write!(f, "length {len} does not fit the slot"),
            Invalid::BadMagic => f.write_str("not a page (bad magic)"),
            Invalid::UnsupportedVersion(v) => write!(f, "unsupported page format version {v}"),
            Invalid::HeaderChecksum => f.write_str("header checksum mismatch"),
            Invalid::MalformedKey => f.write_str("malformed key in header"),
            Invalid::DataChecksum => f.write_str("data checksum mismatch"),
        }
    }
}

/// The key as stored in the header.
fn encode_key(key: &PageKey, out: &mut Vec<u8>) {
    out.extend_from_slice(&key.page.to_le_bytes());
    for field in [&key.object.store, &key.object.path, &key.object.version] {
        out.extend_from_slice(&(field.len() as u32).to_le_bytes());
        out.extend_from_slice(field.as_bytes());
    }
}

/// The header of a page holding `data` from byte `offset` of the page on
/// under `key`, fetched at refetch `cost` (ns); `None` when the key does not
/// fit in a header (keys are object paths, at most ~1 KiB in practice) or the
/// offset does not fit its field.
pub(crate) fn encode_header(key: &PageKey, offset: u64, data: &[u8], cost: f64) -> Option<Vec<u8>> {
    let offset = u32::try_from(offset).ok()?;
    let mut encoded = Vec::with_capacity(64 + key.object.path.len());
    encode_key(key, &mut encoded);
    if KEY_START + encoded.len() > COST_AT {
        return None;
    }
    let mut h = vec![0u8; HEADER_LEN];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&offset.to_le_bytes());
    h[16..24].copy_from_slice(&(data.len() as u64).to_le_bytes());
    h[24..28].copy_from_slice(&crc32c::crc32c(data).to_le_bytes());
    h[28..32].copy_from_slice(&(encoded.len() as u32).to_le_bytes());
    h[KEY_START..KEY_START + encoded.len()].copy_from_slice(&encoded);
    h[COST_AT..CRC_AT].copy_from_slice(&cost.to_le_bytes());
    let crc = crc32c::crc32c(&h[..CRC_AT]);
    h[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
    Some(h)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Parses and checks a header block (the first [`HEADER_LEN`] bytes of a slot).
pub(crate) fn decode_header(h: &[u8]) -> Result<Header, Invalid> {
    if h.len() < HEADER_LEN {
        return Err(Invalid::Length { len: h.len() as u64 });
    }
    let h = &h[..HEADER_LEN];
    if h.iter().all(|&b| b == 0) {
        return Err(Invalid::Blank);
    }
    if h[0..8] != MAGIC {
        return Err(Invalid::BadMagic);
    }
    if crc32c::crc32c(&h[..CRC_AT]) != u32_at(h, CRC_AT) {
        return Err(Invalid::HeaderChecksum);
    }
    let stored_cost = || {
        let cost = f64::from_le_bytes(h[COST_AT..CRC_AT].try_into().expect("8 bytes"));
        Some(cost).filter(|c| c.is_finite() && *c >= 0.0)
    };
    let (key_end, cost, offset) = match u32_at(h, 8) {
        FORMAT_VERSION => (COST_AT, stored_cost(), u32_at(h, 12) as u64),
        FORMAT_WHOLE_PAGES => (COST_AT, stored_cost(), 0),
        FORMAT_WITHOUT_COST => (CRC_AT, None, 0),
        other => return Err(Invalid::UnsupportedVersion(other)),
    };
    let key_len = u32_at(h, 28) as usize;
    if KEY_START + key_len > key_end {
        return Err(Invalid::MalformedKey);
    }
    let key = decode_key(&h[KEY_START..KEY_START + key_len]).ok_or(Invalid::MalformedKey)?;
    Ok(Header {
        offset,
        data_len: u64_at(h, 16),
        data_crc: u32_at(h, 24),
        key,
        cost,
    })
}

fn decode_key(mut b: &[u8]) -> Option<PageKey> {
    let page = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
    b = &b[8..];
    let mut field = || -> Option<Arc<str>> {
        let len = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
        let s = std::str::from_utf8(b.get(4..4 + len)?).ok()?;
        b = &b[4 + len..];
        Some(Arc::from(s))
    };
    let (store, path, version) = (field()?, field()?, field()?);
    Some(PageKey::new(crate::ObjectKey { store, path, version }, page))
}

/// What reading a slot for a key found.
#[derive(Debug)]
pub(crate) enum Verified {
    /// The page: its data's range in the slot, and where that data starts
    /// in the page.
    Page { data: std::ops::Range<usize>, offset: u64 },
    /// A valid page of another key: the slot was reused since the lookup.
    OtherKey,
}

/// Verifies the page read for `key` from the start of its slot: header,
/// key, a data length of `len` (what the index recorded) within what was
/// read, and the data CRC. `slot` may extend past the data (reads are whole
/// blocks).
pub(crate) fn verify(slot: &[u8], key: &PageKey, len: u64) -> Result<Verified, Invalid> {
    let header = decode_header(slot)?;
    if header.key != *key {
        return Ok(Verified::OtherKey);
    }
    let end = (HEADER_LEN as u64).checked_add(header.data_len);
    if header.data_len != len || end.is_none_or(|end| end > slot.len() as u64) {
        return Err(Invalid::Length { len: header.data_len });
    }
    let range = HEADER_LEN..HEADER_LEN + len as usize;
    if crc32c::crc32c(&slot[range.clone()]) != header.data_crc {
        return Err(Invalid::DataChecksum);
    }
    Ok(Verified::Page {
        data: range,
        offset: header.offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(page: u64) -> PageKey {
        PageKey {
            object: crate::ObjectKey::new("s3://bucket", "data/part-0.parquet", "\"etag\""),
            page,
        }
    }

    fn file(key: &PageKey, data: &[u8]) -> Vec<u8> {
        let mut f = encode_header(key, 0, data, 1234.5).unwrap();
        f.extend_from_slice(data);
        f
    }

    /// A format 1 file, as written before costs were stored.
    fn file_v1(key: &PageKey, data: &[u8]) -> Vec<u8> {
        let mut f = file(key, data);
        f[8..12].copy_from_slice(&FORMAT_WITHOUT_COST.to_le_bytes());
        f[COST_AT..CRC_AT].fill(0);
        let crc = crc32c::crc32c(&f[..CRC_AT]);
        f[CRC_AT..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
        f
    }

    #[test]
    fn round_trip_and_checks() {
        let k = key(3);
        let mut f = file(&k, b"hello");
        assert!(matches!(verify(&f, &k, 5), Ok(Verified::Page { data: r, offset: 0 }) if &f[r.clone()] == b"hello"));
        assert_eq!(decode_header(&f).unwrap().cost, Some(1234.5));
        assert!(matches!(verify(&f, &key(4), 5), Ok(Verified::OtherKey)));
        assert_eq!(verify(&f, &k, 6).unwrap_err(), Invalid::Length { len: 5 });
        // Block padding after the data (reads are whole blocks) is ignored.
        f.resize(HEADER_LEN + 4096, 0xAA);
        assert!(matches!(verify(&f, &k, 5), Ok(Verified::Page { data: r, offset: 0 }) if &f[r.clone()] == b"hello"));
        let mut bad = f.clone();
        bad[HEADER_LEN + 4] ^= 1;
        assert_eq!(verify(&bad, &k, 5).unwrap_err(), Invalid::DataChecksum);
        let mut bad = f.clone();
        bad[40] ^= 1;
        assert_eq!(verify(&bad, &k, 5).unwrap_err(), Invalid::HeaderChecksum);
        assert_eq!(
            verify(&f[..HEADER_LEN + 4], &k, 5).unwrap_err(),
            Invalid::Length { len: 5 }
        );
        assert_eq!(verify(&f[..100], &k, 5).unwrap_err(), Invalid::Length { len: 100 });
        assert_eq!(verify(&[0; HEADER_LEN], &k, 5).unwrap_err(), Invalid::Blank);
    }

    #[test]
    fn format_1_pages_are_read_without_a_cost() {
        let k = key(5);
        let f = file_v1(&k, b"old page");
        assert!(matches!(verify(&f, &k, 8), Ok(Verified::Page { data: r, offset: 0 }) if &f[r.clone()] == b"old page"));
        assert_eq!(decode_header(&f).unwrap().cost, None);
        let mut other = f.clone();
        other[8..12].copy_from_slice(&7u32.to_le_bytes());
        let crc = crc32c::crc32c(&other[..CRC_AT]);
        other[CRC_AT..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(verify(&other, &k, 8).unwrap_err(), Invalid::UnsupportedVersion(7));
    }

    #[test]
    fn a_part_of_a_page_keeps_its_offset_and_format_2_pages_are_whole() {
        let k = key(7);
        let mut f = encode_header(&k, 40_000, b"tail", 9.0).unwrap();
        f.extend_from_slice(b"tail");
        assert!(matches!(verify(&f, &k, 4), Ok(Verified::Page { offset: 40_000, .. })));
        // The same slot as format 2 wrote it: the field was 0 there.
        let mut v2 = file(&k, b"tail");
        v2[8..12].copy_from_slice(&FORMAT_WHOLE_PAGES.to_le_bytes());
        let crc = crc32c::crc32c(&v2[..CRC_AT]);
        v2[CRC_AT..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
        let header = decode_header(&v2).unwrap();
        assert_eq!((header.offset, header.cost), (0, Some(1234.5)));
    }

    #[test]
    fn broken_costs_read_as_unknown() {
        let k = key(6);
        for bad in [f64::NAN, -1.0, f64::INFINITY] {
            let h = encode_header(&k, 0, b"x", bad).unwrap();
            assert_eq!(decode_header(&h).unwrap().cost, None, "{bad}");
        }
    }

    #[test]
    fn oversized_keys_are_refused() {
        let mut k = key(0);
        k.object.path = "x".repeat(5000).into();
        assert!(encode_header(&k, 0, b"", 0.0).is_none());
        assert!(encode_header(&key(0), 1 << 32, b"", 0.0).is_none(), "offset too large");
    }
}
