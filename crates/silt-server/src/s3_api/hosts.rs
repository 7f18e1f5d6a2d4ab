//! Virtual-host-style addressing on the S3 listener: which requests name
//! their bucket in the `Host` header rather than in the path.
//!
//! Clients that take an endpoint host and no path (Spark's S3A, Trino's
//! native S3, the AWS SDKs' default) send `GET /key` with `Host:
//! table.<endpoint host>`. Silt has no configured domain, so the rule reads
//! the host alone:
//!
//! - an IP address, or a name without a dot (`localhost`, `silt`): path style;
//! - `<label>.localhost`: the label is the bucket, table or not (an unknown
//!   one is then `NoSuchBucket`, as S3 answers);
//! - `<label>.<anything>`: the label is the bucket when it names a table,
//!   else the request is path style (so `silt.example.com` serves path-style
//!   clients unless a table is called `silt`).

use std::net::IpAddr;
use std::sync::Arc;

use s3s::S3Result;
use s3s::host::{S3Host, VirtualHost};

use crate::engine::Engine;

/// The S3 listener's [`S3Host`]: the module's rule over the server's tables.
#[derive(Clone)]
pub(super) struct TableHosts {
    pub engine: Arc<Engine>,
}

impl TableHosts {
    /// The bucket `host` (a `Host` header, port included or not) names, if
    /// the request is virtual-host style.
    pub fn bucket<'a>(&self, host: &'a str) -> Option<&'a str> {
        bucket_of_host(host, |name| self.engine.config().tables.contains_key(name))
    }
}

impl S3Host for TableHosts {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        Ok(match self.bucket(host) {
            Some(bucket) => VirtualHost::new(host).with_bucket(bucket),
            None => VirtualHost::new(host),
        })
    }
}

/// The rule of this module, with `is_table` saying which names are tables.
fn bucket_of_host(host: &str, is_table: impl Fn(&str) -> bool) -> Option<&str> {
    if host.starts_with('[') {
        return None; // an IPv6 literal
    }
    let name = host.rsplit_once(':').map_or(host, |(name, _port)| name);
    if name.parse::<IpAddr>().is_ok() {
        return None;
    }
    let (label, rest) = name.split_once('.')?;
    if label.is_empty() || rest.is_empty() {
        return None;
    }
    (rest.eq_ignore_ascii_case("localhost") || is_table(label)).then_some(label)
}

#[cfg(test)]
mod tests {
    use super::bucket_of_host;

    #[test]
    fn the_bucket_is_the_first_label_of_a_localhost_or_table_host() {
        let is_table = |name: &str| name == "lineitem" || name == "hits_raw";
        for (host, bucket) in [
            ("lineitem.localhost:9000", Some("lineitem")),
            ("nope.localhost", Some("nope")),
            ("lineitem.silt.internal:443", Some("lineitem")),
            ("hits_raw.s3.example.com", Some("hits_raw")),
            ("silt.example.com:9000", None),
            ("localhost:9000", None),
            ("localhost", None),
            ("127.0.0.1:9000", None),
            ("10.1.2.3", None),
            ("[::1]:9000", None),
            (".localhost", None),
            ("lineitem.", None),
        ] {
            assert_eq!(bucket_of_host(host, is_table), bucket, "{host}");
        }
    }
}
