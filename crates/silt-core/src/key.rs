//! The one key every cached thing hangs off: an object at one version.
//!
//! A page of bytes ([`PageKey`]), a column chunk ([`ChunkKey`](crate::ChunkKey))
//! and its decoded batches ([`BatchKey`](crate::BatchKey)), a footer in the
//! metadata tier and a disk page all name the object they came from with an
//! [`ObjectKey`]. A
//! query validates each object once at its start and carries the key (with
//! its [`ObjectVersion`]) down to every read, so nothing below the scan looks
//! a version up again and no read can mix two versions.

use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::version::ObjectVersion;

/// `(store, path, version)`: one version of one object.
///
/// - `store` distinguishes the stores (tables) that share a server's tiers;
/// - `path` is the object's path within that store (not namespaced);
/// - `version` is the version tag ([`ObjectVersion::tag`]: the ETag, else
///   size and modification time).
///
/// Cloning is three reference-count increments.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The store (one per table) the object is read through.
    pub store: Arc<str>,
    /// The object's path within its store.
    pub path: Arc<str>,
    /// The version tag ([`ObjectVersion::tag`]).
    pub version: Arc<str>,
}

impl ObjectKey {
    /// The key of `version` of `path` in `store`.
    pub fn new(store: impl Into<Arc<str>>, path: impl Into<Arc<str>>, version: impl Into<Arc<str>>) -> Self {
        ObjectKey {
            store: store.into(),
            path: path.into(),
            version: version.into(),
        }
    }

    /// Whether `other` names the same object (store and path), whatever its version.
    pub fn same_object(&self, other: &ObjectKey) -> bool {
        self.store == other.store && self.path == other.path
    }

    /// Whether `other` is another version of this key's object: what
    /// invalidation drops when this key's version becomes the current one.
    pub fn is_other_version(&self, other: &ObjectKey) -> bool {
        self.same_object(other) && self.version != other.version
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}@{}", self.store, self.path, self.version)
    }
}

/// Identifies one page of one version of one object: the unit of the page
/// buffer and of the disk tier.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PageKey {
    /// The object version the page is of.
    pub object: ObjectKey,
    /// Page number: bytes `page * page_size ..` of the object.
    pub page: u64,
}

impl PageKey {
    /// Page `page` of `object`.
    pub fn new(object: ObjectKey, page: u64) -> Self {
        PageKey { object, page }
    }
}

/// An object a query has pinned: its key and the full version it validated
/// (size and ETag are needed to read it: ranges are checked against the
/// size, misses are fetched with `If-Match` on the ETag).
///
/// When validation gave no ETag (stores whose listings carry none), the
/// first answer's ETag is learned into the pin and shared by its clones, so
/// every later read of this pin must be of that same content, whatever
/// happens to the shared tiers meanwhile.
#[derive(Debug, Clone)]
pub struct PinnedObject {
    /// The pinned version's key.
    pub key: ObjectKey,
    /// The full version validated.
    pub version: ObjectVersion,
    learned_etag: Arc<OnceLock<String>>,
}

impl PinnedObject {
    /// Pins `version` of `path` in `store`.
    pub fn new(store: Arc<str>, path: Arc<str>, version: ObjectVersion) -> Self {
        PinnedObject {
            key: ObjectKey {
                store,
                path,
                version: version.tag.clone(),
            },
            version,
            learned_etag: Arc::default(),
        }
    }

    /// The ETag every read of this pin must answer with: the validated one,
    /// else the one learned from the pin's first answer (if any yet).
    pub fn etag(&self) -> Option<&str> {
        self.version
            .e_tag
            .as_deref()
            .or_else(|| self.learned_etag.get().map(String::as_str))
    }

    /// Learns `etag` as the pin's content (the first learned one wins);
    /// whether the pin's ETag is now `etag`.
    pub fn learn_etag(&self, etag: &str) -> bool {
        self.etag()
            .unwrap_or_else(|| self.learned_etag.get_or_init(|| etag.to_string()))
            == etag
    }

    /// Object size in bytes.
    pub fn size(&self) -> u64 {
        self.version.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_versions_are_of_the_same_object_only() {
        let k = ObjectKey::new("s", "a", "v1");
        assert!(k.is_other_version(&ObjectKey::new("s", "a", "v2")));
        assert!(!k.is_other_version(&ObjectKey::new("s", "a", "v1")));
        assert!(!k.is_other_version(&ObjectKey::new("s", "b", "v2")));
        assert!(!k.is_other_version(&ObjectKey::new("t", "a", "v2")));
        assert_eq!(k.to_string(), "s/a@v1");
    }
}
