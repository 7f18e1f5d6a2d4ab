//! A registered table seen as an S3 bucket: which keys it holds, where each
//! key's object is in the table's store (what a failed call means to an S3
//! client is [`super::errors`]).

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use s3s::{S3Error, s3_error};
use silt_cache::{CachedStore, ObjectVersion};
use silt_store::TableLocation;

use super::BODY_CHUNK_PAGES;
use super::errors::{S3Failure, no_such_key, s3_error};
use crate::engine::Engine;
use crate::registry::ResolvedTable;

/// What makes an object under a prefix part of the table (as for queries).
const PARQUET: &str = ".parquet";

/// One object of a bucket, as listed.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub key: String,
    pub version: ObjectVersion,
}

/// Where a bucket's objects are in its table's store (namespaced paths).
enum Layout {
    /// Every `*.parquet` below `root`, keyed by the path relative to it.
    Prefix { root: ObjectPath },
    /// The one object at `path`, keyed `key` (its file name).
    Single { key: String, path: ObjectPath },
}

/// A registered table seen as an S3 bucket.
pub(super) struct Bucket {
    pub name: String,
    /// The table's URL, to name objects in errors.
    url: String,
    pub store: Arc<CachedStore>,
    layout: Layout,
    /// Bytes per step of a response body.
    pub chunk: u64,
    /// Decides which keys are the table's (as its scans list them).
    table: ResolvedTable,
}

impl Bucket {
    /// The bucket of table `name`: views and unknown names are no bucket; an
    /// unavailable table is retried (as a query would) before it is refused.
    pub async fn open(engine: &Engine, name: &str) -> Result<Bucket, S3Error> {
        let table = engine
            .resolve_table(name, "the S3 API serves")
            .await
            .map_err(|error| s3_error(S3Failure::Bucket { table: name, error }))?;
        let url = table.config.url.clone();
        let store = table.store.clone();
        let location = TableLocation::parse(&url).map_err(|error| {
            s3_error(S3Failure::TableUrl {
                table: name,
                url: &url,
                error,
            })
        })?;
        let path = store.qualify(&ObjectPath::from(location.path.as_str()));
        let layout = match (location.is_prefix, path.filename()) {
            (false, Some(file)) => Layout::Single {
                key: file.to_string(),
                path: path.clone(),
            },
            _ => Layout::Prefix { root: path },
        };
        Ok(Bucket {
            name: name.to_string(),
            url,
            store,
            layout,
            chunk: engine.tiers().page_size().max(1).saturating_mul(BODY_CHUNK_PAGES),
            table,
        })
    }

    pub fn object_path(&self, key: &str) -> Result<ObjectPath, S3Error> {
        let relative = parse_key(key)?;
        match &self.layout {
            Layout::Prefix { root } => {
                let path = ObjectPath::from_iter(root.parts().chain(relative.parts()));
                if self.table.holds(&path) {
                    Ok(path)
                } else {
                    Err(no_such_key(&self.name, key))
                }
            }
            Layout::Single { key: only, path } if key == only => Ok(path.clone()),
            _ => Err(no_such_key(&self.name, key)),
        }
    }

    /// What a failed store call on `key` ("" for the whole table) tells the
    /// client ([`super::errors`]), naming the object by key, table and URL.
    pub fn store_error(&self, key: &str, error: object_store::Error) -> S3Error {
        let object = match &self.layout {
            Layout::Prefix { .. } => format!("object {key:?} of table {:?} ({}{key})", self.name, self.url),
            Layout::Single { .. } => format!("object {key:?} of table {:?} ({})", self.name, self.url),
        };
        s3_error(S3Failure::Object {
            table: &self.name,
            key,
            object,
            error,
        })
    }

    /// Every object of the bucket, sorted by key. A prefix is listed through
    /// the cache (a LIST or a listing the table's freshness trusts); a
    /// one-object table is HEADed, as its queries do.
    pub async fn objects(&self) -> Result<Vec<Entry>, S3Error> {
        let listed = match &self.layout {
            Layout::Single { key, path } => self.store.head(path).await.map(|meta| {
                vec![Entry {
                    key: key.clone(),
                    version: ObjectVersion::from_meta(&meta),
                }]
            }),
            Layout::Prefix { root } => self.store.list(Some(root)).try_collect::<Vec<_>>().await.map(|metas| {
                let held = metas.into_iter().filter(|m| self.table.holds(&m.location)).collect();
                entries_below(root, held)
            }),
        };
        match listed {
            Ok(entries) => Ok(entries),
            Err(object_store::Error::NotFound { .. }) => Ok(Vec::new()),
            Err(e) => Err(self.store_error("", e)),
        }
    }
}

/// `key` as an object path relative to the bucket. Keys must be plain
/// relative paths: no `.` or `..` segments, no empty segments, no leading or
/// trailing `/`, no control characters — nothing that could reach outside
/// the table's prefix or name one object two ways.
pub(super) fn parse_key(key: &str) -> Result<ObjectPath, S3Error> {
    match ObjectPath::parse(key) {
        Ok(p) if !key.is_empty() && p.as_ref() == key && !key.chars().any(char::is_control) => Ok(p),
        _ => Err(s3_error!(InvalidArgument, "invalid object key {key:?}")),
    }
}

/// The `*.parquet` objects of a listing below `root`, keyed relative to it.
/// Objects whose key could not be asked for (see [`parse_key`]) are left out.
fn entries_below(root: &ObjectPath, metas: Vec<object_store::ObjectMeta>) -> Vec<Entry> {
    let mut entries: Vec<Entry> = metas
        .into_iter()
        .filter_map(|meta| {
            let parts: Vec<String> = meta
                .location
                .prefix_match(root)?
                .map(|p| p.as_ref().to_string())
                .collect();
            let key = parts.join("/");
            (key.ends_with(PARQUET) && parse_key(&key).is_ok()).then(|| Entry {
                key,
                version: ObjectVersion::from_meta(&meta),
            })
        })
        .collect();
    entries.sort_by(|a, b| a.key.cmp(&b.key));
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_must_be_plain_relative_paths() {
        for bad in [
            "",
            "..",
            "../x.parquet",
            "a/../b.parquet",
            "./a.parquet",
            "a//b.parquet",
            "/a.parquet",
            "a/",
            "a\u{1}.parquet",
        ] {
            let err = parse_key(bad).unwrap_err();
            assert_eq!(err.code(), &s3s::S3ErrorCode::InvalidArgument, "{bad:?}");
        }
        assert_eq!(
            parse_key("year=2024/part 0.parquet").unwrap().as_ref(),
            "year=2024/part 0.parquet"
        );
    }
}
