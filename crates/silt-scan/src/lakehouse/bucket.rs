//! Iceberg's `bucket[N]` partition transform (spec, "Bucket Transform
//! Details"): a 32-bit Murmur3 hash of the value's bytes, taken modulo `N`.
//! A file partitioned by `bucket[N](c)` holds only values of one bucket, so
//! a filter `c = v` or `c IN (...)` rules out every file whose bucket none
//! of the literals falls in ([`crate::scan_filter::FileStatistics::buckets`]).

use datafusion::common::ScalarValue;

/// The bucket of `value` among `n` buckets, for the types the spec hashes
/// and Silt reads (integers, dates, microsecond timestamps, decimals,
/// strings, binaries); `None` for others and for nulls.
pub fn bucket_of(value: &ScalarValue, n: u32) -> Option<i32> {
    let hash = hash(value)?;
    Some(((hash & i32::MAX) as u32 % n) as i32)
}

/// Iceberg's hash of a value: integers and dates as 8 little-endian bytes
/// of the value as a long, timestamps as their microseconds so, decimals
/// as the minimal big-endian two's complement bytes of the unscaled value,
/// strings as UTF-8.
fn hash(value: &ScalarValue) -> Option<i32> {
    use ScalarValue::*;
    let long = |v: i64| Some(murmur3_32(&v.to_le_bytes()));
    match value {
        Int8(Some(v)) => long(i64::from(*v)),
        Int16(Some(v)) => long(i64::from(*v)),
        Int32(Some(v)) => long(i64::from(*v)),
        Int64(Some(v)) => long(*v),
        UInt8(Some(v)) => long(i64::from(*v)),
        UInt16(Some(v)) => long(i64::from(*v)),
        UInt32(Some(v)) => long(i64::from(*v)),
        UInt64(Some(v)) => long(i64::try_from(*v).ok()?),
        Date32(Some(days)) => long(i64::from(*days)),
        TimestampMicrosecond(Some(micros), _) => long(*micros),
        Decimal128(Some(unscaled), _, _) => Some(murmur3_32(&minimal_be_bytes(*unscaled))),
        Utf8(Some(s)) | Utf8View(Some(s)) | LargeUtf8(Some(s)) => Some(murmur3_32(s.as_bytes())),
        Binary(Some(b)) | BinaryView(Some(b)) | LargeBinary(Some(b)) | FixedSizeBinary(_, Some(b)) => {
            Some(murmur3_32(b))
        }
        _ => None,
    }
}

/// The fewest big-endian bytes that hold `v` in two's complement.
fn minimal_be_bytes(v: i128) -> Vec<u8> {
    let bytes = v.to_be_bytes();
    let sign = if v < 0 { 0xff } else { 0x00 };
    let mut start = 0;
    // Drop a leading sign byte while the next byte keeps the sign bit.
    while start < 15 && bytes[start] == sign && (bytes[start + 1] & 0x80) == (sign & 0x80) {
        start += 1;
    }
    bytes[start..].to_vec()
}

/// Murmur3 x86 32-bit, seed 0, as a signed int (Guava's `murmur3_32`,
/// which the spec names).
fn murmur3_32(data: &[u8]) -> i32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mix = |k: u32| k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
    let mut h: u32 = 0;
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for chunk in chunks {
        let k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        h ^= mix(k);
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    if !tail.is_empty() {
        let k = tail.iter().rev().fold(0u32, |k, &b| (k << 8) | u32::from(b));
        h ^= mix(k);
    }
    h ^= data.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spec's hash test vectors ("Appendix B: 32-bit Hash Requirements").
    #[test]
    fn hashes_match_the_spec() {
        assert_eq!(hash(&ScalarValue::Int32(Some(34))), Some(2_017_239_379));
        assert_eq!(hash(&ScalarValue::Int64(Some(34))), Some(2_017_239_379));
        assert_eq!(hash(&ScalarValue::Decimal128(Some(1420), 9, 2)), Some(-500_754_589));
        // 2017-11-16
        assert_eq!(hash(&ScalarValue::Date32(Some(17_486))), Some(-653_330_422));
        // 2017-11-16T22:31:08 (and with a zone: the same instant)
        let micros = 1_510_871_468_000_000;
        assert_eq!(
            hash(&ScalarValue::TimestampMicrosecond(Some(micros), None)),
            Some(-2_047_944_441)
        );
        assert_eq!(
            hash(&ScalarValue::Utf8View(Some("iceberg".into()))),
            Some(1_210_000_089)
        );
        assert_eq!(hash(&ScalarValue::Binary(Some(vec![0, 1, 2, 3]))), Some(-188_683_207));
        assert_eq!(hash(&ScalarValue::Float64(Some(1.0))), None);
        assert_eq!(hash(&ScalarValue::Int64(None)), None);
    }

    #[test]
    fn decimals_hash_their_fewest_bytes_and_buckets_are_non_negative() {
        assert_eq!(minimal_be_bytes(1420), vec![0x05, 0x8c]);
        assert_eq!(minimal_be_bytes(0), vec![0]);
        assert_eq!(minimal_be_bytes(-1), vec![0xff]);
        assert_eq!(minimal_be_bytes(128), vec![0x00, 0x80]);
        assert_eq!(minimal_be_bytes(-129), vec![0xff, 0x7f]);
        for v in -50..50i64 {
            let b = bucket_of(&ScalarValue::Int64(Some(v)), 4).unwrap();
            assert!((0..4).contains(&b));
        }
    }
}
