//! Object versions: what makes two reads of the same path the same bytes.

use std::sync::Arc;

use object_store::ObjectMeta;

/// The version of an object as seen by the last LIST or HEAD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectVersion {
    /// Object size in bytes.
    pub size: u64,
    /// ETag when the store reports one (used for `If-Match`).
    pub e_tag: Option<String>,
    /// Cache-key form of the version: the ETag, else `size-mtime`.
    pub tag: Arc<str>,
    /// The metadata the store returned (handed back in `GetResult`s).
    pub meta: ObjectMeta,
}

impl ObjectVersion {
    /// Whether two descriptions of an object are of the same version: same
    /// size, modification time and ETag. The one comparison of versions
    /// every tier uses.
    pub fn same(a: &ObjectMeta, b: &ObjectMeta) -> bool {
        a.size == b.size && a.last_modified == b.last_modified && a.e_tag == b.e_tag
    }

    pub fn from_meta(meta: &ObjectMeta) -> Self {
        let tag: Arc<str> = match &meta.e_tag {
            Some(e) => Arc::from(e.as_str()),
            None => Arc::from(format!(
                "{}-{}",
                meta.size,
                meta.last_modified.timestamp_nanos_opt().unwrap_or_default()
            )),
        };
        ObjectVersion {
            size: meta.size,
            e_tag: meta.e_tag.clone(),
            tag,
            meta: meta.clone(),
        }
    }
}
