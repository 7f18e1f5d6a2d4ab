//! Placement: which member of a fleet owns a named unit (a row group, an
//! S3 body chunk), by rendezvous
//! (highest-random-weight) hashing. Part of the wire contract: every client
//! (the Rust fleet client, `silt worker`s, a server forwarding an S3 GET to
//! its owner) must compute the same owners without talking to the others,
//! so the hash is spelled out here rather than taken from a library whose
//! output may change between versions.

/// The name a fleet member is placed by: its URL as given, trimmed, with
/// `grpc://` and `grpc+tcp://` spelled `http://`, `grpc+tls://` spelled
/// `https://`, and no trailing `/`.
/// Every client, worker and server names members this way.
pub fn member_name(url: &str) -> String {
    url.trim()
        .trim_end_matches('/')
        .replacen("grpc+tcp://", "http://", 1)
        .replacen("grpc+tls://", "https://", 1)
        .replacen("grpc://", "http://", 1)
}

/// The name rendezvous hashing places: one row group of one object.
pub fn row_group_name(object: &str, row_group: u32) -> String {
    format!("{object}#{row_group}")
}

/// The rendezvous weight of `server` for the unit named `name`: FNV-1a
/// (64 bit) of `server`, a zero byte and `name`, then MurmurHash3's 64-bit
/// finalizer. Fixed here (not Rust's `Hash`) so that every client, in any
/// language or version, picks the same owners.
pub fn weight(server: &str, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in server.as_bytes().iter().chain(&[0u8]).chain(name.as_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Indices of `servers` by descending [`weight`] for the unit named `name` (ties by
/// index, so the order is total).
pub fn rendezvous_order<S: AsRef<str>>(servers: &[S], name: &str) -> Vec<usize> {
    let mut order: Vec<(u64, usize)> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| (weight(s.as_ref(), name), i))
        .collect();
    order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    order.into_iter().map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_are_the_published_ones() {
        // Golden values: the Python package (`silt.fleet.weight`) checks
        // the same ones, so a change of the hash fails on both sides.
        assert_eq!(weight("http://a:1", "x#0"), 11_891_827_647_523_181_874);
        assert_eq!(
            weight("http://127.0.0.1:50051", "lineitem/part-0.parquet#3"),
            14_811_625_242_926_266_543
        );
        assert_eq!(row_group_name("t/a.parquet", 7), "t/a.parquet#7");
        assert_eq!(member_name(" grpc://a:1/ "), "http://a:1");
        assert_eq!(member_name("grpc+tcp://a:1"), "http://a:1");
        assert_eq!(member_name("http://a:1"), "http://a:1");
    }
}
