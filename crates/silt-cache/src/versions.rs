//! The version of every object a server has validated.

use std::collections::HashMap;
use std::time::Instant;

use object_store::path::Path;
use parking_lot::RwLock;

use crate::ObjectVersion;

/// What a validation found, compared with the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Validation {
    /// First validation of the object since the server started.
    FirstSight,
    /// Same version as last time.
    Unchanged,
    /// A new version: the object was overwritten upstream.
    Changed,
}

/// The version of every object the server has validated, keyed by the path
/// the query engine sees (namespaced per table store, so unique per server).
///
/// It decides which version a *new* query pins (and, under `ttl` and
/// `immutable`, whether a new query must ask the store at all). A running
/// query never consults it: it reads the version it pinned.
#[derive(Default)]
pub struct VersionRegistry {
    versions: RwLock<HashMap<Path, (ObjectVersion, Instant)>>,
}

impl VersionRegistry {
    /// The last validated version of `path` and when it was validated.
    pub fn get(&self, path: &Path) -> Option<(ObjectVersion, Instant)> {
        self.versions.read().get(path).cloned()
    }

    /// Records a validation and says how it relates to the previous one.
    pub(crate) fn record(&self, path: &Path, version: ObjectVersion) -> Validation {
        let tag = version.tag.clone();
        match self.versions.write().insert(path.clone(), (version, Instant::now())) {
            None => Validation::FirstSight,
            Some((previous, _)) if previous.tag == tag => Validation::Unchanged,
            Some(_) => Validation::Changed,
        }
    }

    /// Forgets `path` (deleted, or found changed): its next read asks the store.
    pub(crate) fn forget(&self, path: &Path) {
        self.versions.write().remove(path);
    }
}
