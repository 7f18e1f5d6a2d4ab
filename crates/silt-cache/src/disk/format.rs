//! The page file format and the page file names.
//!
//! A page file is a fixed [`HEADER_LEN`]-byte header followed by the data, so
//! the data starts 4 KiB aligned and a whole file can be read with `O_DIRECT`.
//! Header, little-endian, zero padded:
//!
//! | offset | size | field                                              |
//! |--------|------|----------------------------------------------------|
//! | 0      | 8    | magic `SILTPAGE`                                   |
//! | 8      | 4    | format version ([`FORMAT_VERSION`])                |
//! | 12     | 4    | flags (0)                                          |
//! | 16     | 8    | data length                                        |
//! | 24     | 4    | CRC32C of the data                                 |
//! | 28     | 4    | length `n` of the encoded key                      |
//! | 32     | n    | key: page u64, then store, path, version as u32 length + UTF-8 |
//! | 4084   | 8    | refetch cost in ns, f64 (format 2 only)            |
//! | 4092   | 4    | CRC32C of bytes 0..4092                            |
//!
//! The key is stored in full so that a hash collision of file names is
//! detected (and served as a miss) and so that recovery can rebuild the index
//! from headers alone. The cost (what the page's GET measured, see
//! [`CostModel::share_of_request`](crate::policy::CostModel::share_of_request))
//! is stored so that a restart keeps `weighted-lfu`'s order instead of
//! repricing every page by a model. Format 1 pages (written before costs were
//! stored; the layout is otherwise the same) are still read: they have no
//! cost, and the index prices them by its model.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use twox_hash::XxHash3_128;

use crate::page_cache::PageKey;

/// Size of the header block; also the alignment of the data and the unit in
/// which page files are charged to the budget.
pub(crate) const HEADER_LEN: usize = 4096;
/// Block size used for budget accounting and `O_DIRECT` alignment.
pub(crate) const BLOCK: u64 = 4096;
const MAGIC: [u8; 8] = *b"SILTPAGE";
/// Bumped when the layout changes; files of versions not read here
/// ([`decode_header`]) are dropped.
pub(crate) const FORMAT_VERSION: u32 = 2;
/// The format before costs were stored, still read.
const FORMAT_WITHOUT_COST: u32 = 1;
const KEY_START: usize = 32;
const CRC_AT: usize = HEADER_LEN - 4;
const COST_AT: usize = CRC_AT - 8;

/// Bytes a page of `data_len` bytes is charged: the header block plus the
/// data rounded up to whole blocks (what the file occupies on disk).
pub(crate) fn charged_size(data_len: u64) -> u64 {
    BLOCK + data_len.div_ceil(BLOCK) * BLOCK
}

/// What a header says.
#[derive(Debug)]
pub(crate) struct Header {
    pub data_len: u64,
    pub data_crc: u32,
    pub key: PageKey,
    /// The refetch cost stored with the page, in ns; `None` for format 1
    /// pages and for a stored value that is not a finite non-negative number.
    pub cost: Option<f64>,
}

/// Why a page file is rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Invalid {
    /// Shorter than a header, or not header + data length.
    Length {
        file_len: u64,
    },
    BadMagic,
    UnsupportedVersion(u32),
    HeaderChecksum,
    MalformedKey,
    DataChecksum,
    /// A valid page stored under a name that is not its key's hash.
    Misplaced,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Invalid::Length { file_len } => write!(f, "file length {file_len} does not match its header"),
            Invalid::BadMagic => f.write_str("not a page file (bad magic)"),
            Invalid::UnsupportedVersion(v) => write!(f, "unsupported page format version {v}"),
            Invalid::HeaderChecksum => f.write_str("header checksum mismatch"),
            Invalid::MalformedKey => f.write_str("malformed key in header"),
            Invalid::DataChecksum => f.write_str("data checksum mismatch"),
            Invalid::Misplaced => f.write_str("file name does not match its key"),
        }
    }
}

/// The key as hashed for the file name and stored in the header.
fn encode_key(key: &PageKey, out: &mut Vec<u8>) {
    out.extend_from_slice(&key.page.to_le_bytes());
    for field in [&key.object.store, &key.object.path, &key.object.version] {
        out.extend_from_slice(&(field.len() as u32).to_le_bytes());
        out.extend_from_slice(field.as_bytes());
    }
}

/// The page file's path relative to the `pages` directory:
/// `<2 hex>/<32 hex>.page`, from xxh3-128 of the encoded key (stable across
/// runs, builds and platforms, unlike `std`'s `DefaultHasher`).
pub(crate) fn relative_path(key: &PageKey) -> PathBuf {
    let mut encoded = Vec::with_capacity(64 + key.object.path.len());
    encode_key(key, &mut encoded);
    let name = format!("{:032x}", XxHash3_128::oneshot(&encoded));
    let mut path = PathBuf::from(&name[..2]);
    path.push(format!("{name}.page"));
    path
}

/// The header of a page holding `data` under `key`, fetched at refetch
/// `cost` (ns); `None` when the key does not fit in a header (keys are object
/// paths, at most ~1 KiB in practice).
pub(crate) fn encode_header(key: &PageKey, data: &[u8], cost: f64) -> Option<Vec<u8>> {
    let mut encoded = Vec::with_capacity(64 + key.object.path.len());
    encode_key(key, &mut encoded);
    if KEY_START + encoded.len() > COST_AT {
        return None;
    }
    let mut h = vec![0u8; HEADER_LEN];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
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

/// Parses and checks a header block (the first [`HEADER_LEN`] bytes of a file).
pub(crate) fn decode_header(h: &[u8]) -> Result<Header, Invalid> {
    if h.len() < HEADER_LEN {
        return Err(Invalid::Length {
            file_len: h.len() as u64,
        });
    }
    let h = &h[..HEADER_LEN];
    if h[0..8] != MAGIC {
        return Err(Invalid::BadMagic);
    }
    if crc32c::crc32c(&h[..CRC_AT]) != u32_at(h, CRC_AT) {
        return Err(Invalid::HeaderChecksum);
    }
    let (key_end, cost) = match u32_at(h, 8) {
        FORMAT_VERSION => {
            let cost = f64::from_le_bytes(h[COST_AT..CRC_AT].try_into().expect("8 bytes"));
            (COST_AT, Some(cost).filter(|c| c.is_finite() && *c >= 0.0))
        }
        FORMAT_WITHOUT_COST => (CRC_AT, None),
        other => return Err(Invalid::UnsupportedVersion(other)),
    };
    let key_len = u32_at(h, 28) as usize;
    if KEY_START + key_len > key_end {
        return Err(Invalid::MalformedKey);
    }
    let key = decode_key(&h[KEY_START..KEY_START + key_len]).ok_or(Invalid::MalformedKey)?;
    Ok(Header {
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

/// Checks that a header fits a file of `file_len` bytes.
pub(crate) fn check_length(header: &Header, file_len: u64) -> Result<(), Invalid> {
    if header.data_len.checked_add(HEADER_LEN as u64) == Some(file_len) {
        Ok(())
    } else {
        Err(Invalid::Length { file_len })
    }
}

/// What reading a whole page file for a key found.
#[derive(Debug)]
pub(crate) enum Verified {
    /// The page: its data's offset range in the file, and its stored cost.
    Page(std::ops::Range<usize>, Option<f64>),
    /// A valid page of another key whose name hashes the same.
    OtherKey,
}

/// Verifies a whole page file (header, key, length, data CRC) read for `key`.
pub(crate) fn verify(file: &[u8], key: &PageKey) -> Result<Verified, Invalid> {
    let header = decode_header(file)?;
    check_length(&header, file.len() as u64)?;
    if header.key != *key {
        return Ok(Verified::OtherKey);
    }
    let data = &file[HEADER_LEN..];
    if crc32c::crc32c(data) != header.data_crc {
        return Err(Invalid::DataChecksum);
    }
    Ok(Verified::Page(HEADER_LEN..file.len(), header.cost))
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
        let mut f = encode_header(key, data, 1234.5).unwrap();
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
        let f = file(&k, b"hello");
        assert!(matches!(verify(&f, &k), Ok(Verified::Page(r, c)) if &f[r.clone()] == b"hello" && c == Some(1234.5)));
        assert!(matches!(verify(&f, &key(4)), Ok(Verified::OtherKey)));
        let mut bad = f.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(verify(&bad, &k).unwrap_err(), Invalid::DataChecksum);
        let mut bad = f.clone();
        bad[40] ^= 1;
        assert_eq!(verify(&bad, &k).unwrap_err(), Invalid::HeaderChecksum);
        assert_eq!(
            verify(&f[..f.len() - 1], &k).unwrap_err(),
            Invalid::Length {
                file_len: f.len() as u64 - 1
            }
        );
        assert_eq!(verify(&f[..100], &k).unwrap_err(), Invalid::Length { file_len: 100 });
    }

    #[test]
    fn format_1_pages_are_read_without_a_cost() {
        let k = key(5);
        let f = file_v1(&k, b"old page");
        assert!(matches!(verify(&f, &k), Ok(Verified::Page(r, None)) if &f[r.clone()] == b"old page"));
        assert_eq!(decode_header(&f).unwrap().cost, None);
        let mut other = f.clone();
        other[8..12].copy_from_slice(&7u32.to_le_bytes());
        let crc = crc32c::crc32c(&other[..CRC_AT]);
        other[CRC_AT..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(verify(&other, &k).unwrap_err(), Invalid::UnsupportedVersion(7));
    }

    #[test]
    fn broken_costs_read_as_unknown() {
        let k = key(6);
        for bad in [f64::NAN, -1.0, f64::INFINITY] {
            let h = encode_header(&k, b"x", bad).unwrap();
            assert_eq!(decode_header(&h).unwrap().cost, None, "{bad}");
        }
    }

    #[test]
    fn names_are_stable() {
        // Pinned: a change here orphans every page file of existing caches.
        let p = relative_path(&key(0));
        assert_eq!(p, PathBuf::from("94/94836c7144f388ca199cbe4c0fea5aca.page"));
        assert_ne!(p, relative_path(&key(1)));
    }

    #[test]
    fn sizes_are_charged_in_blocks() {
        assert_eq!(charged_size(0), 4096);
        assert_eq!(charged_size(1), 8192);
        assert_eq!(charged_size(4096), 8192);
        assert_eq!(charged_size(4097), 12288);
    }

    #[test]
    fn oversized_keys_are_refused() {
        let mut k = key(0);
        k.object.path = "x".repeat(5000).into();
        assert!(encode_header(&k, b"", 0.0).is_none());
    }
}
