//! Object versions: what makes two reads of the same path the same bytes.
//!
//! A version travels as three strings, each owned here so that every user
//! spells it the same way: the cache tag ([`ObjectVersion::tag`], in every
//! [`ObjectKey`](crate::ObjectKey)), the wire token a client and a server
//! compare in scan scopes ([`ObjectVersion::wire_token`]), and the entity
//! tag the S3 API shows ([`ObjectVersion::entity_tag`]).

use std::sync::Arc;

use object_store::ObjectMeta;

/// Marks an [`ObjectVersion::immutable_meta`] (in `ObjectMeta::version`,
/// which Silt never sends to a store).
const IMMUTABLE: &str = "silt:immutable";

/// The generation of an [`ObjectVersion::immutable_meta`], `None` for any
/// other description.
fn immutable_generation(meta: &ObjectMeta) -> Option<&str> {
    meta.version.as_deref()?.strip_prefix(IMMUTABLE)?.strip_prefix(':')
}

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

    /// Whether `answered` (the metadata of a GET or HEAD answer) can be of
    /// this version: same size, and the same ETag when one is expected
    /// (`expected`: the validated ETag or one learned for this version),
    /// else the same modification time to the second (HTTP dates have no
    /// finer resolution, listings may). Without ETags, a same-size overwrite
    /// within the same second cannot be told apart; stores that list
    /// ETags (S3, GCS, Azure) do not have that gap.
    pub fn may_be(&self, answered: &ObjectMeta, expected: Option<&str>) -> bool {
        if answered.size != self.size {
            return false;
        }
        match (expected, answered.e_tag.as_deref()) {
            (Some(want), Some(got)) => want == got,
            // An immutable object is known by path and size alone.
            _ if self.is_immutable() => true,
            _ => answered.last_modified.timestamp() == self.meta.last_modified.timestamp(),
        }
    }

    /// The description of an object that never changes under its path (a
    /// lakehouse table's data file: the table's metadata names it with its
    /// size, and writers never rewrite a file in place), for reading it
    /// without a LIST or HEAD. Its version is path + size: a GET answer of
    /// that size is of it (and, once learned from the first answer, of the
    /// same ETag), so the file stays warm across the snapshots that keep it,
    /// and across restarts.
    ///
    /// `generation` becomes part of the cache tag: what is cached of the
    /// file depends on more than its bytes (the table schema its columns
    /// are decoded in, the store it is in), so a reader of another
    /// generation never shares a cached batch with this one.
    pub fn immutable_meta(location: object_store::path::Path, size: u64, generation: &str) -> ObjectMeta {
        ObjectMeta {
            location,
            last_modified: Default::default(),
            size,
            e_tag: None,
            version: Some(format!("{IMMUTABLE}:{generation}")),
        }
    }

    /// Whether this is the version of an [`ObjectVersion::immutable_meta`].
    pub fn is_immutable(&self) -> bool {
        immutable_generation(&self.meta).is_some()
    }

    /// The version `meta` (a LIST or HEAD answer) describes.
    pub fn from_meta(meta: &ObjectMeta) -> Self {
        let tag: Arc<str> = match &meta.e_tag {
            Some(e) => Arc::from(e.as_str()),
            None => match immutable_generation(meta) {
                Some(generation) => Arc::from(format!("{}-immutable-{generation}", meta.size)),
                None => Arc::from(format!(
                    "{}-{}",
                    meta.size,
                    meta.last_modified.timestamp_nanos_opt().unwrap_or_default()
                )),
            },
        };
        ObjectVersion {
            size: meta.size,
            e_tag: meta.e_tag.clone(),
            tag,
            meta: meta.clone(),
        }
    }

    /// The version as a client and a server compare it in scan scopes
    /// (`silt_scan::scope`): size, modification time and ETag, the three
    /// things [`ObjectVersion::same`] compares.
    pub fn wire_token(&self) -> String {
        Self::wire_token_of(&self.meta)
    }

    /// [`ObjectVersion::wire_token`] of the version `meta` describes,
    /// without building the version.
    pub fn wire_token_of(meta: &ObjectMeta) -> String {
        format!(
            "{}:{}:{}",
            meta.size,
            meta.last_modified.timestamp_nanos_opt().unwrap_or_default(),
            meta.e_tag.as_deref().unwrap_or("")
        )
    }

    /// The entity tag S3 clients see, unquoted: the upstream ETag (else the
    /// size-mtime [`tag`](Self::tag)) as one strong entity tag. Characters an
    /// entity tag (or the XML it is written into unescaped) cannot hold
    /// become `_`, the same way in listings, HEAD and GET, so clients can
    /// compare them.
    pub fn entity_tag(&self) -> String {
        let raw = self.tag.trim_start_matches("W/").trim_matches('"');
        raw.chars()
            .map(|c| match c {
                '&' | '<' | '>' | '\'' => '_',
                c if c == '!' || ('#'..='~').contains(&c) => c,
                _ => '_',
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(e_tag: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            location: object_store::path::Path::from("t/a.parquet"),
            last_modified: Default::default(),
            size: 7,
            e_tag: e_tag.map(str::to_string),
            version: None,
        }
    }

    #[test]
    fn a_version_spells_its_three_encodings() {
        let tagged = ObjectVersion::from_meta(&meta(Some("\"abc\"")));
        assert_eq!(&*tagged.tag, "\"abc\"");
        assert_eq!(tagged.wire_token(), "7:0:\"abc\"");
        assert_eq!(tagged.wire_token(), ObjectVersion::wire_token_of(&tagged.meta));
        assert_eq!(tagged.entity_tag(), "abc");
        let untagged = ObjectVersion::from_meta(&meta(None));
        assert_eq!(&*untagged.tag, "7-0");
        assert_eq!(untagged.wire_token(), "7:0:");
        assert_eq!(untagged.entity_tag(), "7-0");
    }

    #[test]
    fn an_immutable_object_is_known_by_path_and_size() {
        let v = ObjectVersion::from_meta(&ObjectVersion::immutable_meta("t/a.parquet".into(), 7, "g1"));
        assert!(v.is_immutable());
        assert_eq!(&*v.tag, "7-immutable-g1");
        let mut answered = meta(None);
        answered.last_modified = "2026-11-27T10:00:00Z".parse().unwrap();
        assert!(v.may_be(&answered, None));
        assert!(v.may_be(&meta(Some("x")), Some("x")));
        assert!(!v.may_be(&meta(Some("y")), Some("x")));
        answered.size = 8;
        assert!(!v.may_be(&answered, None));
        assert!(!ObjectVersion::from_meta(&meta(None)).is_immutable());
    }
}
