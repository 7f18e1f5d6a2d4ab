//! This server's view of its `[cluster]`: the members now, which of them
//! is this server, and where each one's admin listener is. S3 forwarding
//! ([`crate::s3_api::peers`]) places chunks on these members and the fleet
//! view ([`crate::fleet_view`]) lists them.
//!
//! `cluster.servers` entries are read as the fleet client reads them
//! ([`silt_proto::membership`]): URLs, `file:///path` and `dns://name:port`.
//! Dynamic entries are re-read every
//! [`REFRESH_EVERY`](silt_proto::membership::REFRESH_EVERY) on a thread of
//! their own, so a member that joins or leaves is used (and this server's
//! chunk ownership follows) without a restart, the same way on every member
//! and client. A refresh that reads no member keeps the last list.
//!
//! **Which member is this server** is decided against each list: `cluster.self`,
//! else the entry whose address is the Flight listener. A server that is not
//! (or not yet) in the list owns nothing and forwards nothing: it serves
//! every GET from its own tiers, as a server without a fleet does.
//!
//! **Admin listeners**: by position in `cluster.admin` (a static list of
//! URLs), or on `cluster.admin_port` of each member's host (what a file or
//! DNS name needs: it names Flight URLs only).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};

use silt_proto::membership::{Sources, refresh_while_alive};
use silt_proto::placement::member_name;

use crate::config::ClusterConfig;
use crate::error::{ConfigError, ServerError};

/// The members of the cluster at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMembers {
    /// Members' Flight URLs, as placement names them, in list order.
    pub servers: Vec<String>,
    /// This server's index in `servers`, when it is a member.
    pub me: Option<usize>,
    /// Per member, its admin listener's URL, when known.
    admin: Vec<Option<String>>,
}

impl ClusterMembers {
    /// The admin listener of member `i` (`http(s)://host:port`), if known.
    pub fn admin(&self, i: usize) -> Option<&str> {
        self.admin.get(i).and_then(|a| a.as_deref())
    }
}

/// `cluster.servers` as it changes (see the module docs).
#[derive(Debug)]
pub struct Cluster {
    config: ClusterConfig,
    listen: SocketAddr,
    sources: Mutex<Sources>,
    current: RwLock<Arc<ClusterMembers>>,
}

impl Cluster {
    /// The cluster of `config` (`None` when `servers` is empty), its
    /// dynamic entries refreshed in the background while it lives.
    pub fn start(config: &ClusterConfig, listen: SocketAddr) -> Result<Option<Arc<Cluster>>, ServerError> {
        if config.servers.is_empty() {
            return Ok(None);
        }
        // A dynamic list may name no member yet (a DNS name resolves once
        // some member is ready): this server then owns and forwards nothing
        // until a refresh finds members.
        let sources = Sources::read(&config.servers).map_err(|e| ConfigError::Membership { message: e.0 })?;
        let dynamic = sources.is_dynamic();
        let members = members_of(config, listen, &sources.members());
        warn_if_not_listed(config, &members);
        let cluster = Arc::new(Cluster {
            config: config.clone(),
            listen,
            sources: Mutex::new(sources),
            current: RwLock::new(Arc::new(members)),
        });
        if dynamic {
            refresh_while_alive(Arc::downgrade(&cluster), "silt-cluster-membership", Cluster::refresh);
        }
        Ok(Some(cluster))
    }

    /// The members now.
    pub fn members(&self) -> Arc<ClusterMembers> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether GETs may be forwarded to other members: their admin
    /// listeners are known (`cluster.admin` or `cluster.admin_port`).
    pub fn forwards(&self) -> bool {
        !self.config.admin.is_empty() || self.config.admin_port.is_some()
    }

    /// Re-reads the dynamic entries; a changed list becomes current.
    pub fn refresh(&self) {
        let urls = {
            let mut sources = self.sources.lock().unwrap_or_else(|p| p.into_inner());
            if !sources.refresh() {
                return;
            }
            sources.members()
        };
        if urls.is_empty() {
            // A file caught half-written, a name that resolves to nothing for
            // a moment: never shrink to no member.
            return;
        }
        let next = members_of(&self.config, self.listen, &urls);
        warn_if_not_listed(&self.config, &next);
        let before = self.members();
        tracing::info!(
            joined = ?next.servers.iter().filter(|s| !before.servers.contains(s)).collect::<Vec<_>>(),
            left = ?before.servers.iter().filter(|s| !next.servers.contains(s)).collect::<Vec<_>>(),
            this_server = ?next.me.map(|i| &next.servers[i]),
            "cluster membership changed"
        );
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(next);
    }
}

/// Says so when this server forwards S3 reads but is not among `members`:
/// it then forwards nothing. The usual cause with a DNS name is a server
/// listening on `0.0.0.0`, which matches no member address: give it
/// `cluster.self` (its URL as the name lists it) or listen on its own address.
fn warn_if_not_listed(config: &ClusterConfig, members: &ClusterMembers) {
    let forwards = !config.admin.is_empty() || config.admin_port.is_some();
    if forwards && members.me.is_none() && !members.servers.is_empty() {
        tracing::warn!(
            members = ?members.servers,
            "this server is not among cluster.servers: it serves every S3 read itself (set cluster.self, or listen on the address the members are named by)"
        );
    }
}

/// The members `urls` name, this server found among them and each one's
/// admin listener.
fn members_of(config: &ClusterConfig, listen: SocketAddr, urls: &[String]) -> ClusterMembers {
    let servers: Vec<String> = urls.iter().map(|u| member_name(u)).collect();
    let me = config.self_among(&servers, listen).ok();
    let admin = servers
        .iter()
        .enumerate()
        .map(|(i, url)| match config.admin_port {
            Some(port) => admin_on_port(url, port),
            None => config.admin.get(i).map(|a| a.trim_end_matches('/').to_string()),
        })
        .collect();
    ClusterMembers { servers, me, admin }
}

/// The admin listener on `port` of the host of Flight URL `url`: `https`
/// when the Flight URL is TLS.
fn admin_on_port(url: &str, port: u16) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    let host = parsed.host()?;
    let scheme = match parsed.scheme() {
        "https" | "grpcs" | "grpc+tls" => "https",
        _ => "http",
    };
    Some(format!("{scheme}://{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use silt_bench::files::write_members;

    use super::*;

    fn listen(addr: &str) -> SocketAddr {
        addr.parse().unwrap()
    }

    #[test]
    fn a_static_list_pairs_admin_urls_by_position() {
        let config = ClusterConfig {
            servers: vec!["http://127.0.0.1:1".into(), "http://127.0.0.1:2".into()],
            admin: vec!["http://127.0.0.1:11/".into(), "http://127.0.0.1:12".into()],
            ..Default::default()
        };
        let cluster = Cluster::start(&config, listen("127.0.0.1:2")).unwrap().unwrap();
        let members = cluster.members();
        assert_eq!(members.me, Some(1));
        assert_eq!(members.admin(0), Some("http://127.0.0.1:11"));
        assert_eq!(members.admin(1), Some("http://127.0.0.1:12"));
        assert!(cluster.forwards());
        assert!(
            Cluster::start(&ClusterConfig::default(), listen("127.0.0.1:2"))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_membership_file_is_followed_with_admin_listeners_on_a_port() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("members");
        write_members(&file, &["http://127.0.0.2:50051", "grpc+tls://[::1]:50051"]);
        let config = ClusterConfig {
            servers: vec![format!("file://{}", file.display())],
            admin_port: Some(8080),
            ..Default::default()
        };
        let cluster = Cluster::start(&config, listen("127.0.0.3:50051")).unwrap().unwrap();
        let members = cluster.members();
        assert_eq!(members.me, None, "not (yet) a member");
        assert_eq!(members.admin(0), Some("http://127.0.0.2:8080"));
        assert_eq!(members.admin(1), Some("https://[::1]:8080"));
        // This server joins: the next refresh finds it.
        write_members(&file, &["http://127.0.0.2:50051", "http://127.0.0.3:50051"]);
        cluster.refresh();
        let members = cluster.members();
        assert_eq!(members.me, Some(1));
        assert_eq!(members.admin(1), Some("http://127.0.0.3:8080"));
        // A rewrite to nothing keeps the members.
        write_members::<&str>(&file, &[]);
        cluster.refresh();
        assert_eq!(cluster.members().servers.len(), 2);
        // No member yet (a name that resolves to nothing, a missing file):
        // the server starts, owning nothing.
        let empty = ClusterConfig {
            servers: vec![format!("file://{}", dir.path().join("none").display())],
            admin_port: Some(8080),
            ..Default::default()
        };
        let cluster = Cluster::start(&empty, listen("127.0.0.3:50051")).unwrap().unwrap();
        assert!(cluster.members().servers.is_empty());
        assert_eq!(cluster.members().me, None);
        let bad = ClusterConfig {
            servers: vec!["dns://no-port".into()],
            ..Default::default()
        };
        assert!(Cluster::start(&bad, listen("127.0.0.3:50051")).is_err());
    }
}
