//! Where a fleet's members come from, and how the list follows the cluster.
//!
//! Shared by the fleet client (`silt_client::fleet::Fleet::connect`) and
//! the server's own view of its `[cluster]` (S3 forwarding, the fleet
//! view), so both read the same entries the same way. Each entry is one of:
//!
//! - a server URL (`http://host:port`, `grpc://`, `https://`, ...): that
//!   member, always;
//! - `file:///path`: a file listing member URLs, one per line (blank lines
//!   and `#` comments ignored), re-read when it changes, as an orchestrator
//!   rewrites it (a ConfigMap, a service-discovery agent's output);
//! - `dns://name:port`: every address `name` resolves to, as
//!   `http://ADDRESS:port`, re-resolved periodically (a Kubernetes headless
//!   service names one address per ready pod). Plain HTTP only: a TLS
//!   member must be named as its certificate is, which an address is not.
//!
//! The fleet's list is the union, in entry order (a file's in its order, a
//! name's addresses sorted), without repeats. [`REFRESH_EVERY`] a
//! background thread re-reads the dynamic entries; when the list changes,
//! the fleet's next scans use the new one. Members that stay keep their
//! connection and health; placement is rendezvous hashing, so a member
//! joining takes ~1/N of the row groups, only from the others, and a member
//! leaving hands only its own to their next owners. A refresh that finds no
//! member at all (an empty file, a name that does not resolve) keeps the
//! previous list: a fleet never shrinks to nothing by a transient failure.

use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::placement::member_name;

/// An entry that names no member, or a list with none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipError(pub String);

impl std::fmt::Display for MembershipError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MembershipError {}

/// How often dynamic entries are re-read: a change is in use within this
/// (plus one scan's start).
pub const REFRESH_EVERY: Duration = Duration::from_secs(2);

/// One entry of a fleet's list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// One member, by its URL.
    Member(String),
    /// A file of member URLs.
    File(PathBuf),
    /// A DNS name and the port its members listen on.
    Dns { host: String, port: u16 },
}

impl Source {
    /// The entry `text` names.
    pub fn parse(text: &str) -> Result<Source, MembershipError> {
        let text = text.trim();
        if let Some(path) = text.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(MembershipError(format!(
                    "{text}: a membership file is named by an absolute path (file:///path)"
                )));
            }
            return Ok(Source::File(PathBuf::from(path)));
        }
        if let Some(rest) = text.strip_prefix("dns://") {
            let rest = rest.trim_end_matches('/');
            let (host, port) = rest
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
                .filter(|(h, _)| !h.is_empty())
                .ok_or_else(|| MembershipError(format!("{text}: a DNS entry is dns://NAME:PORT")))?;
            return Ok(Source::Dns {
                host: host.to_string(),
                port,
            });
        }
        Ok(Source::Member(text.to_string()))
    }

    /// Whether the entry `text` names members that can change (a file or
    /// a DNS name) rather than being one.
    pub fn names_members(text: &str) -> bool {
        Source::parse(text).is_ok_and(|s| s.is_dynamic())
    }

    /// Whether this entry can change (a file or a DNS name).
    pub fn is_dynamic(&self) -> bool {
        !matches!(self, Source::Member(_))
    }

    /// The member URLs this entry names now.
    fn members(&self) -> Result<Vec<String>, String> {
        match self {
            Source::Member(url) => Ok(vec![url.clone()]),
            Source::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
                Ok(text
                    .lines()
                    .map(|l| l.split('#').next().unwrap_or("").trim())
                    .filter(|l| !l.is_empty())
                    .map(str::to_string)
                    .collect())
            }
            Source::Dns { host, port } => {
                let mut addrs: Vec<std::net::SocketAddr> = (host.as_str(), *port)
                    .to_socket_addrs()
                    .map_err(|e| format!("resolving {host}: {e}"))?
                    .collect();
                addrs.sort();
                addrs.dedup();
                Ok(addrs.into_iter().map(|a| format!("http://{a}")).collect())
            }
        }
    }

    /// When a file entry last changed (`None` for the others, or when it
    /// cannot be read): a refresh re-reads a file only when this moved.
    fn modified(&self) -> Option<SystemTime> {
        match self {
            Source::File(path) => std::fs::metadata(path).and_then(|m| m.modified()).ok(),
            _ => None,
        }
    }
}

/// A fleet's entries and what they named at the last refresh.
#[derive(Debug)]
pub struct Sources {
    entries: Vec<Source>,
    /// Per entry, its last good list and (files) when it was read.
    last: Vec<(Vec<String>, Option<SystemTime>)>,
}

impl Sources {
    /// The entries `texts` name, read once. An entry that cannot be read
    /// now (a missing file, a name that does not resolve) names no member
    /// until it can; a list with no member at all is an error.
    pub fn parse(texts: &[String]) -> Result<Sources, MembershipError> {
        let sources = Sources::read(texts)?;
        if sources.members().is_empty() {
            return Err(MembershipError(format!(
                "a fleet needs at least one server (none in {})",
                texts.join(", ")
            )));
        }
        Ok(sources)
    }

    /// The entries `texts` name, read once, even if they name no member
    /// yet (a server whose DNS name resolves only once some member is
    /// ready); only an entry that is not one is an error.
    pub fn read(texts: &[String]) -> Result<Sources, MembershipError> {
        let entries = texts.iter().map(|t| Source::parse(t)).collect::<Result<Vec<_>, _>>()?;
        let mut sources = Sources {
            last: vec![(Vec::new(), None); entries.len()],
            entries,
        };
        sources.refresh();
        Ok(sources)
    }

    /// Whether any entry can change.
    pub fn is_dynamic(&self) -> bool {
        self.entries.iter().any(Source::is_dynamic)
    }

    /// Re-reads the dynamic entries (a file only when it changed); whether
    /// the member list changed. An entry that fails keeps its last list.
    pub fn refresh(&mut self) -> bool {
        let before = self.members();
        for (entry, last) in self.entries.iter().zip(self.last.iter_mut()) {
            let modified = entry.modified();
            if matches!(entry, Source::File(_)) && modified.is_some() && modified == last.1 {
                continue;
            }
            match entry.members() {
                Ok(members) => *last = (members, modified),
                Err(e) => {
                    tracing::warn!(entry = ?entry, error = %e, "fleet membership: entry unreadable; keeping its last members")
                }
            }
        }
        self.members() != before
    }

    /// The member URLs, in entry order, each once (as placement names them).
    pub fn members(&self) -> Vec<String> {
        let mut seen = std::collections::HashSet::new();
        self.last
            .iter()
            .flat_map(|(members, _)| members.iter())
            .filter(|m| seen.insert(member_name(m)))
            .cloned()
            .collect()
    }
}

/// Calls `refresh` on `target` every [`REFRESH_EVERY`] on a thread named
/// `name`, until `target` is dropped: how a fleet's list follows its
/// entries. A thread rather than a task, so a slow DNS answer never holds a
/// runtime's worker.
pub fn refresh_while_alive<T, F>(target: std::sync::Weak<T>, name: &str, refresh: F)
where
    T: Send + Sync + 'static,
    F: Fn(&T) + Send + 'static,
{
    let spawned = std::thread::Builder::new().name(name.to_string()).spawn(move || {
        loop {
            std::thread::sleep(REFRESH_EVERY);
            let Some(target) = target.upgrade() else {
                return;
            };
            refresh(&target);
        }
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "fleet membership: no refresh thread; the list stays as first read");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_members_files_and_names() {
        assert_eq!(
            Source::parse("http://a:1").unwrap(),
            Source::Member("http://a:1".into())
        );
        assert_eq!(
            Source::parse("file:///etc/silt/members").unwrap(),
            Source::File("/etc/silt/members".into())
        );
        assert_eq!(
            Source::parse("dns://silt.default.svc:50051").unwrap(),
            Source::Dns {
                host: "silt.default.svc".into(),
                port: 50051
            }
        );
        assert!(Source::parse("file://relative").is_err());
        assert!(Source::parse("dns://nameonly").is_err());
        assert!(Source::parse("dns://:50051").is_err());
    }

    #[test]
    fn a_file_is_reread_when_it_changes_and_an_empty_list_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("members");
        std::fs::write(&file, "# the fleet\nhttp://a:1\n\nhttp://b:1  # second\nhttp://a:1\n").unwrap();
        let entries = vec![format!("file://{}", file.display()), "http://c:1".to_string()];
        let mut sources = Sources::parse(&entries).unwrap();
        assert!(sources.is_dynamic());
        assert_eq!(sources.members(), ["http://a:1", "http://b:1", "http://c:1"]);
        assert!(!sources.refresh(), "unchanged");
        // A rewrite (its modification time moves on) is read again.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&file, "http://b:1\nhttp://d:1\n").unwrap();
        let later = SystemTime::now() + Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert!(sources.refresh());
        assert_eq!(sources.members(), ["http://b:1", "http://d:1", "http://c:1"]);
        // A file that disappears keeps its last members.
        std::fs::remove_file(&file).unwrap();
        assert!(!sources.refresh());
        assert_eq!(sources.members().len(), 3);
        let missing = vec![format!("file://{}", dir.path().join("none").display())];
        assert!(Sources::parse(&missing).is_err());
    }

    #[test]
    fn a_name_names_every_address_it_resolves_to() {
        let sources = Sources::parse(&["dns://localhost:50051".to_string()]).unwrap();
        let members = sources.members();
        assert!(!members.is_empty());
        assert!(
            members
                .iter()
                .all(|m| m.starts_with("http://") && m.ends_with(":50051")),
            "{members:?}"
        );
    }
}
