//! Deletion vectors (Delta protocol, "Deletion Vectors"): the rows of a
//! data file that are deleted, as a 64-bit roaring bitmap of row positions
//! in the file, stored inline in the log or in a `.bin` file beside the
//! data. This module finds where a vector's bytes are and decodes them;
//! reading the bytes is the caller's (through its cached store).

use serde::Deserialize;

use crate::{LakehouseError, Result};

/// A deletion vector descriptor, as an `add` or `remove` action holds it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct DeletionVector {
    /// `u`: a file named by a UUID (relative to the table), `i`: inline,
    /// `p`: a file by absolute path.
    pub storage_type: String,
    pub path_or_inline_dv: String,
    /// Where in the file the vector starts (files `u` and `p`).
    #[serde(default)]
    pub offset: Option<i32>,
    pub size_in_bytes: i32,
    pub cardinality: i64,
}

/// Where a deletion vector's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VectorBytes {
    /// In the descriptor: the serialized bitmap (magic number first).
    Inline(Vec<u8>),
    /// In a file: `size` bytes of serialized bitmap at `offset + 4` (after
    /// a 4-byte length), followed by their CRC-32. `relative`: the path is
    /// relative to the table's root (else an absolute URI).
    File {
        path: String,
        relative: bool,
        offset: u64,
        size: u64,
    },
}

/// The first four bytes of a serialized vector (little-endian).
const MAGIC: u32 = 1_681_511_377;

impl DeletionVector {
    /// The vector's identity among a file's versions (`storageType` +
    /// `pathOrInlineDv` + `@offset`): an `add` and the `remove` of the same
    /// file with the same vector name the same entry.
    pub fn unique_id(&self) -> String {
        match self.offset {
            Some(offset) => format!("{}{}@{offset}", self.storage_type, self.path_or_inline_dv),
            None => format!("{}{}", self.storage_type, self.path_or_inline_dv),
        }
    }

    /// Where the vector's bytes are.
    pub fn bytes(&self) -> Result<VectorBytes> {
        let size = u64::try_from(self.size_in_bytes).map_err(|_| self.invalid("a negative size"))?;
        let offset = u64::try_from(self.offset.unwrap_or(1)).map_err(|_| self.invalid("a negative offset"))?;
        match self.storage_type.as_str() {
            "i" => {
                let mut bytes = z85_decode(&self.path_or_inline_dv).ok_or_else(|| self.invalid("bad Z85"))?;
                bytes.truncate(size as usize);
                Ok(VectorBytes::Inline(bytes))
            }
            "u" => {
                let text = &self.path_or_inline_dv;
                let split = text
                    .len()
                    .checked_sub(20)
                    .filter(|&s| text.is_char_boundary(s))
                    .ok_or_else(|| self.invalid("no Z85 UUID at the end"))?;
                let (prefix, encoded) = text.split_at(split);
                let uuid = z85_decode(encoded)
                    .filter(|b| b.len() == 16)
                    .ok_or_else(|| self.invalid("bad Z85 UUID"))?;
                let name = format!("deletion_vector_{}.bin", uuid_text(&uuid));
                let path = if prefix.is_empty() {
                    name
                } else {
                    format!("{prefix}/{name}")
                };
                Ok(VectorBytes::File {
                    path,
                    relative: true,
                    offset,
                    size,
                })
            }
            "p" => Ok(VectorBytes::File {
                path: self.path_or_inline_dv.clone(),
                relative: false,
                offset,
                size,
            }),
            other => Err(self.invalid(&format!("storage type {other:?}"))),
        }
    }

    fn invalid(&self, reason: &str) -> LakehouseError {
        LakehouseError::Invalid {
            path: self.unique_id(),
            what: "Delta deletion vector",
            reason: reason.to_string(),
        }
    }
}

/// The deleted row positions, ascending, of a vector read from a file:
/// `framed` is the length, the serialized bitmap and its CRC-32 as stored
/// at the descriptor's offset. The length and checksum are checked, so a
/// damaged file is an error rather than wrong rows.
pub fn decode_framed(name: &str, framed: &[u8], expected: &DeletionVector) -> Result<Vec<u64>> {
    let invalid = |reason: String| LakehouseError::Invalid {
        path: name.to_string(),
        what: "Delta deletion vector file",
        reason,
    };
    let size = usize::try_from(expected.size_in_bytes).map_err(|_| invalid("a negative size".into()))?;
    if framed.len() < size.saturating_add(8) {
        return Err(invalid(format!(
            "{} bytes where {} were expected",
            framed.len(),
            size + 8
        )));
    }
    let stored_size = u32::from_be_bytes(framed[0..4].try_into().expect("4 bytes")) as usize;
    if stored_size != size {
        return Err(invalid(format!("length {stored_size}, the log says {size}")));
    }
    let data = &framed[4..4 + size];
    let crc = u32::from_be_bytes(framed[4 + size..8 + size].try_into().expect("4 bytes"));
    if crc32fast::hash(data) != crc {
        return Err(invalid("checksum mismatch".into()));
    }
    decode(name, data, expected)
}

/// The deleted row positions, ascending, of a serialized vector (magic
/// number, then a portable 64-bit roaring bitmap); its cardinality must be
/// the descriptor's.
pub fn decode(name: &str, data: &[u8], expected: &DeletionVector) -> Result<Vec<u64>> {
    let invalid = |reason: String| LakehouseError::Invalid {
        path: name.to_string(),
        what: "Delta deletion vector",
        reason,
    };
    let magic = data
        .get(0..4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        .ok_or_else(|| invalid("empty".into()))?;
    if magic != MAGIC {
        return Err(invalid(format!("magic number {magic}, not {MAGIC}")));
    }
    let bitmap = roaring::RoaringTreemap::deserialize_from(&data[4..]).map_err(|e| invalid(e.to_string()))?;
    // Checked before the rows are listed: a few bytes of runs can name
    // billions of rows.
    if i64::try_from(bitmap.len()).ok() != Some(expected.cardinality) {
        return Err(invalid(format!(
            "{} rows where the log says {}",
            bitmap.len(),
            expected.cardinality
        )));
    }
    Ok(bitmap.iter().collect())
}

const Z85: &[u8; 85] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/// Z85 (ZeroMQ's base 85): every 5 characters are 4 bytes, big-endian.
fn z85_decode(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(5) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 5 * 4);
    for chunk in text.as_bytes().chunks(5) {
        let mut value: u64 = 0;
        for &c in chunk {
            let digit = Z85.iter().position(|&z| z == c)? as u64;
            value = value * 85 + digit;
        }
        out.extend_from_slice(&u32::try_from(value).ok()?.to_be_bytes());
    }
    Some(out)
}

fn uuid_text(b: &[u8]) -> String {
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serialized(rows: &[u64]) -> Vec<u8> {
        let bitmap: roaring::RoaringTreemap = rows.iter().copied().collect();
        let mut data = MAGIC.to_le_bytes().to_vec();
        bitmap.serialize_into(&mut data).unwrap();
        data
    }

    fn descriptor(storage: &str, text: &str, size: usize, cardinality: usize) -> DeletionVector {
        DeletionVector {
            storage_type: storage.into(),
            path_or_inline_dv: text.into(),
            offset: Some(1),
            size_in_bytes: size as i32,
            cardinality: cardinality as i64,
        }
    }

    #[test]
    fn z85_is_zeromq_s() {
        // The specification's test vector.
        let hello = z85_decode("HelloWorld").unwrap();
        assert_eq!(hello, [0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B]);
        assert!(z85_decode("Hell").is_none());
        assert!(z85_decode("Hell~").is_none());
    }

    #[test]
    fn uuid_vectors_live_beside_the_data_under_their_prefix() {
        // The protocol's example: prefix "ab", UUID d2c639aa-8816-431a-aaf6-d3fe2512ff61.
        let dv = descriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 40, 6);
        let VectorBytes::File { path, relative, .. } = dv.bytes().unwrap() else {
            panic!("a file")
        };
        assert_eq!(path, "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin");
        assert!(relative);
    }

    #[test]
    fn framed_vectors_are_checked_and_decoded() {
        let rows = [0u64, 5, 6, 1 << 33];
        let data = serialized(&rows);
        let dv = descriptor("u", "", data.len(), rows.len());
        let mut framed = (data.len() as u32).to_be_bytes().to_vec();
        framed.extend_from_slice(&data);
        framed.extend_from_slice(&crc32fast::hash(&data).to_be_bytes());
        assert_eq!(decode_framed("f.bin", &framed, &dv).unwrap(), rows);
        let mut damaged = framed.clone();
        damaged[9] ^= 1;
        assert!(decode_framed("f.bin", &damaged, &dv).is_err());
        assert!(decode_framed("f.bin", &framed[..framed.len() - 1], &dv).is_err());
        let wrong_count = descriptor("u", "", data.len(), 3);
        assert!(decode_framed("f.bin", &framed, &wrong_count).is_err());
    }
}
