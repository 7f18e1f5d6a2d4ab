//! The S3 API across a fleet (`[cluster]` with `admin` URLs or an
//! `admin_port`): every member
//! answers a GET for any key, and each body chunk (a span of
//! [`super::BODY_CHUNK_PAGES`] pages, the unit a response reads) is read
//! from the member that owns it, so the fleet caches each chunk once and
//! behaves as one cache to byte readers.
//!
//! **Ownership.** The chunk `n` of key `k` in table `t` is placed by the
//! name `t/k@n`, owned by the member with the highest rendezvous weight
//! ([`silt_proto::placement`], the hash the Flight clients place row groups
//! with) among `cluster.servers` as they are now ([`crate::cluster`]: a
//! membership file or DNS name is followed, so a member that joins takes
//! ~1/N of the chunks and one that leaves hands only its own on).
//!
//! **Forwarding.** A non-owner reads the chunk with a ranged GET from the
//! owner's S3 API, signed with this fleet's S3 key (members share their
//! config) and marked [`FORWARDED`], so the owner serves it from its own
//! tiers and never forwards again. The owner's answer is used only when its
//! ETag is the version this response is pinned to; otherwise (the object
//! changed, or the owner cannot be reached, or it fails) the chunk is read
//! locally, from the store through this member's tiers, as without a
//! fleet. A member that fails in transport is skipped for [`BACKOFF`].

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use metrics::Counter;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, GetOptions, GetRange, ObjectStore, RetryConfig};
use silt_core::Backoff;

use crate::cluster::Cluster;
use crate::config::ServerConfig;
use crate::metrics::ServerMetrics;

/// The header that marks a GET forwarded by a member: its receiver serves
/// it from its own tiers, whoever owns it.
pub const FORWARDED: &str = "x-silt-forwarded";

/// How long a member that failed a forwarded read is skipped.
pub const BACKOFF: Duration = silt_core::backoff::BACKOFF;

/// Deadline of one forwarded read (a chunk is at most 8 pages): well under
/// a client's own timeout, so a stalled owner still leaves time to read the
/// chunk locally.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// Where one response's chunks may come from: `key` of `table` in `peers`.
pub struct PeerRoute {
    pub peers: Arc<Peers>,
    pub table: String,
    pub key: String,
}

impl PeerRoute {
    /// `span` (chunk number `chunk`) from its owner, when that is another
    /// member and it answers with the version tagged `etag`.
    pub async fn read(&self, chunk: u64, span: Range<u64>, etag: &str) -> Option<Bytes> {
        let owner = self.peers.remote_owner(&self.table, &self.key, chunk)?;
        self.peers.read(&owner, &self.table, &self.key, span, etag).await
    }
}

/// This server's view of its fleet, for the S3 API.
pub struct Peers {
    cluster: Arc<Cluster>,
    /// Per member's admin listener, skipped for [`BACKOFF`] after a
    /// failure in transport (members that left are forgotten as the map
    /// grows: [`Peers::forget_departed`]).
    backoff: Mutex<HashMap<String, Arc<Backoff>>>,
    /// The S3 key the fleet's API is signed with, if any.
    key: Option<(String, String)>,
    /// An extra PEM root for members' `https://` admin listeners
    /// (`cluster.ca_cert`, else this server's own certificate).
    trust: Option<Vec<u8>>,
    /// One client per (member's admin listener, table), made on first use.
    clients: Mutex<HashMap<(String, String), Arc<AmazonS3>>>,
    forwarded: Counter,
    failures: Counter,
}

impl Peers {
    /// The fleet of `cluster` (with `config`'s key and certificates), or
    /// `None` when GETs are not forwarded (no admin listeners configured).
    pub fn new(cluster: Option<&Arc<Cluster>>, config: &ServerConfig, metrics: &ServerMetrics) -> Option<Peers> {
        let cluster = cluster.filter(|c| c.forwards())?.clone();
        Some(Peers {
            cluster,
            backoff: Mutex::new(HashMap::new()),
            key: config.s3_api_key(),
            trust: config.cluster.ca_cert.as_ref().or(config.tls_cert.as_ref()).and_then(|path| {
                std::fs::read(path)
                    .inspect_err(|e| {
                        tracing::warn!(path = %path.display(), "S3 forwarding: cannot read the fleet's CA certificate: {e}")
                    })
                    .ok()
            }),
            clients: Mutex::new(HashMap::new()),
            forwarded: metrics.s3_forwarded.clone(),
            failures: metrics.s3_forward_failures.clone(),
        })
    }

    /// The admin listener of the member that owns chunk `chunk` of `key` in
    /// `table`, when it is another member (and this server is one) that is
    /// not in back-off.
    pub fn remote_owner(&self, table: &str, key: &str, chunk: u64) -> Option<String> {
        let members = self.cluster.members();
        let me = members.me?;
        let name = format!("{table}/{key}@{chunk}");
        let owner = *silt_proto::placement::rendezvous_order(&members.servers, &name).first()?;
        let admin = members.admin(owner).filter(|_| owner != me)?;
        (!self.backoff_of(admin).is_down()).then(|| admin.to_string())
    }

    /// The back-off of the member whose admin listener is `admin`.
    fn backoff_of(&self, admin: &str) -> Arc<Backoff> {
        let mut backoff = self.backoff.lock().unwrap_or_else(|p| p.into_inner());
        if !backoff.contains_key(admin) {
            self.forget_departed(&mut backoff, |k| k);
        }
        backoff.entry(admin.to_string()).or_default().clone()
    }

    /// Drops the entries of members no longer in the list from `map` (keyed
    /// by `admin_of(key)`), once it holds more than twice the members: with
    /// DNS membership, addresses come and go for as long as the server runs.
    fn forget_departed<K, V>(&self, map: &mut HashMap<K, V>, admin_of: impl Fn(&K) -> &str) {
        let members = self.cluster.members();
        if map.len() <= 2 * members.servers.len() + 8 {
            return;
        }
        let current: std::collections::HashSet<&str> =
            (0..members.servers.len()).filter_map(|i| members.admin(i)).collect();
        map.retain(|k, _| current.contains(admin_of(k)));
    }

    /// `span` of `key` read from member `owner`, if it answers with the
    /// version whose entity tag is `etag`; `None` (read it locally) when it
    /// does not.
    pub async fn read(&self, owner: &str, table: &str, key: &str, span: Range<u64>, etag: &str) -> Option<Bytes> {
        if span.start >= span.end {
            return None; // nothing to forward (an empty object)
        }
        let Ok(path) = ObjectPath::parse(key) else {
            return None; // a key object_store cannot name: served locally
        };
        let client = match self.client(owner, table) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(peer = %owner, error = %e, "S3 API: no client for a fleet member");
                return None;
            }
        };
        let options = GetOptions {
            range: Some(GetRange::Bounded(span.clone())),
            ..Default::default()
        };
        // The body is read only when the owner answers with this version.
        let answer = async {
            let result = client.get_opts(&path, options).await?;
            let tag = result.meta.e_tag.clone().unwrap_or_default();
            if tag.trim_matches('"') != etag {
                return Ok((tag, None));
            }
            Ok::<_, object_store::Error>((tag, Some(result.bytes().await?)))
        }
        .await;
        match answer {
            Ok((_, Some(bytes))) if bytes.len() as u64 == span.end - span.start => {
                self.forwarded.increment(1);
                Some(bytes)
            }
            Ok((tag, _)) => {
                tracing::debug!(peer = %owner, %key, %tag, expected = %etag, "S3 API: a fleet member holds another version; reading locally");
                None
            }
            Err(e) => {
                self.failures.increment(1);
                // The member answered, refusing this read: it stays in service.
                let answered = matches!(
                    e,
                    object_store::Error::NotFound { .. }
                        | object_store::Error::Precondition { .. }
                        | object_store::Error::NotModified { .. }
                        | object_store::Error::PermissionDenied { .. }
                        | object_store::Error::Unauthenticated { .. }
                );
                if !answered {
                    tracing::warn!(peer = %owner, error = %e, "S3 API: a fleet member failed a forwarded read; reading locally, skipping it for {BACKOFF:?}");
                    self.backoff_of(owner).fail_for(BACKOFF);
                }
                None
            }
        }
    }

    /// The S3 client of `table` on member `owner`.
    fn client(&self, owner: &str, table: &str) -> object_store::Result<Arc<AmazonS3>> {
        let key = (owner.to_string(), table.to_string());
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        self.forget_departed(&mut clients, |(admin, _)| admin);
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(FORWARDED, axum::http::HeaderValue::from_static("1"));
        let mut options = ClientOptions::new()
            .with_allow_http(true)
            .with_timeout(FORWARD_TIMEOUT)
            .with_connect_timeout(Duration::from_secs(2))
            .with_default_headers(headers);
        if let Some(pem) = &self.trust {
            options = options.with_root_certificate(object_store::Certificate::from_pem(pem)?);
        }
        let mut builder = AmazonS3Builder::new()
            .with_endpoint(format!("{owner}/s3"))
            .with_bucket_name(table)
            .with_region("us-east-1")
            .with_virtual_hosted_style_request(false)
            .with_client_options(options)
            .with_retry(RetryConfig {
                max_retries: 0,
                ..Default::default()
            });
        builder = match &self.key {
            Some((id, secret)) => builder.with_access_key_id(id).with_secret_access_key(secret),
            None => builder.with_skip_signature(true),
        };
        let client = Arc::new(builder.build()?);
        clients.insert(key, client.clone());
        Ok(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(me: &str) -> Peers {
        let mut config = ServerConfig::default();
        config.cluster.servers = (0..3).map(|i| format!("http://127.0.0.1:5005{i}")).collect();
        config.cluster.admin = (0..3).map(|i| format!("http://127.0.0.1:909{i}")).collect();
        config.cluster.self_url = Some(me.to_string());
        let cluster = Cluster::start(&config.cluster, config.listen).unwrap();
        Peers::new(cluster.as_ref(), &config, &ServerMetrics::new()).expect("a fleet of three")
    }

    #[test]
    fn members_agree_on_owners_and_each_chunk_has_one() {
        let members: Vec<Peers> = (0..3).map(|i| fleet(&format!("http://127.0.0.1:5005{i}"))).collect();
        let mut owned = [0usize; 3];
        for chunk in 0..3000 {
            let remote: Vec<Option<String>> = members
                .iter()
                .map(|p| p.remote_owner("t", "a.parquet", chunk))
                .collect();
            // Exactly one member finds itself the owner; the others name it.
            let locals: Vec<usize> = (0..3).filter(|&i| remote[i].is_none()).collect();
            assert_eq!(locals.len(), 1, "{remote:?}");
            let owner = locals[0];
            owned[owner] += 1;
            for (i, r) in remote.iter().enumerate() {
                if i != owner {
                    assert_eq!(r.as_deref(), Some(format!("http://127.0.0.1:909{owner}").as_str()));
                }
            }
        }
        for o in owned {
            assert!((o as f64 / 3000.0 - 1.0 / 3.0).abs() < 0.05, "{owned:?}");
        }
    }

    #[test]
    fn no_fleet_without_admin_urls() {
        let mut config = ServerConfig::default();
        config.cluster.servers = vec!["http://127.0.0.1:50051".into(), "http://127.0.0.1:50052".into()];
        let cluster = Cluster::start(&config.cluster, config.listen).unwrap();
        assert!(Peers::new(cluster.as_ref(), &config, &ServerMetrics::new()).is_none());
    }
}
