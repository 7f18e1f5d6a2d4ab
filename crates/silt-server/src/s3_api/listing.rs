//! ListObjectsV2 over a bucket's keys: prefix, delimiter (common prefixes),
//! `start-after`, and pages of at most 1,000 keys resumed by a continuation
//! token (the last key the page before covered).

use s3s::dto::{CommonPrefix, ListObjectsV2Input, ListObjectsV2Output, Object, ObjectStorageClass};
use s3s::{S3Error, s3_error};

use super::bucket::Entry;
use super::read::{entity_tag, timestamp};

/// Most keys one ListObjectsV2 page returns (S3's own limit).
const MAX_KEYS: usize = 1000;

/// The parameters of a ListObjectsV2 request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ListParams {
    prefix: String,
    /// Empty: no delimiter (a flat listing).
    delimiter: String,
    start_after: Option<String>,
    /// The `NextContinuationToken` of the page before: the last key it covered.
    token: Option<String>,
    max_keys: usize,
}

impl ListParams {
    /// The parameters of a request; `max-keys` above 1,000 is cut to 1,000,
    /// a negative one refused. (`encoding-type=url` is not honoured: keys
    /// are returned as they are, and the answer says no encoding.)
    pub fn from_input(input: &ListObjectsV2Input) -> Result<ListParams, S3Error> {
        let max_keys = match input.max_keys {
            None => MAX_KEYS,
            Some(n) => usize::try_from(n)
                .map_err(|_| s3_error!(InvalidArgument, "invalid max-keys {n}"))?
                .min(MAX_KEYS),
        };
        let given = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
        Ok(ListParams {
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: input.delimiter.clone().unwrap_or_default(),
            start_after: given(&input.start_after),
            token: given(&input.continuation_token),
            max_keys,
        })
    }
}

/// One item of a listing page: an object, or a common prefix standing for
/// every key below it.
#[derive(Debug)]
enum Listed<'a> {
    Object(&'a Entry),
    Prefix(String),
}

/// A page of a listing, and the token that resumes after it if more remain.
#[derive(Debug)]
struct ListPage<'a> {
    items: Vec<Listed<'a>>,
    next_token: Option<String>,
}

/// The ListObjectsV2 answer for `params` over `entries` (sorted by key).
pub(super) fn list_objects(bucket: &str, entries: &[Entry], params: ListParams) -> ListObjectsV2Output {
    let page = list_page(entries, &params);
    let mut contents = Vec::new();
    let mut common_prefixes = Vec::new();
    for item in &page.items {
        match item {
            Listed::Object(e) => contents.push(Object {
                key: Some(e.key.clone()),
                last_modified: Some(timestamp(&e.version)),
                e_tag: Some(entity_tag(&e.version)),
                size: Some(i64::try_from(e.version.size).unwrap_or(i64::MAX)),
                storage_class: Some(ObjectStorageClass::from_static(ObjectStorageClass::STANDARD)),
                ..Default::default()
            }),
            Listed::Prefix(p) => common_prefixes.push(CommonPrefix {
                prefix: Some(p.clone()),
            }),
        }
    }
    ListObjectsV2Output {
        name: Some(bucket.to_string()),
        prefix: Some(params.prefix),
        delimiter: Some(params.delimiter).filter(|d| !d.is_empty()),
        max_keys: Some(i32::try_from(params.max_keys).unwrap_or(i32::MAX)),
        key_count: Some(i32::try_from(page.items.len()).unwrap_or(i32::MAX)),
        is_truncated: Some(page.next_token.is_some()),
        continuation_token: params.token,
        start_after: params.start_after,
        next_continuation_token: page.next_token,
        contents: Some(contents),
        common_prefixes: Some(common_prefixes),
        ..Default::default()
    }
}

/// The page `params` selects from `entries` (sorted by key). The
/// continuation token is the last key the page covered (for a common prefix,
/// the last key below it), so the next page resumes with the keys after it.
fn list_page<'a>(entries: &'a [Entry], params: &ListParams) -> ListPage<'a> {
    let after = |key: &str| {
        [&params.start_after, &params.token]
            .iter()
            .all(|a| a.as_deref().is_none_or(|a| key > a))
    };
    let mut items: Vec<Listed<'a>> = Vec::new();
    let mut last_key: Option<&str> = None;
    for entry in entries
        .iter()
        .filter(|e| e.key.starts_with(&params.prefix) && after(&e.key))
    {
        let item = match common_prefix(&entry.key, &params.prefix, &params.delimiter) {
            Some(p) if matches!(items.last(), Some(Listed::Prefix(q)) if q == p) => {
                last_key = Some(&entry.key);
                continue;
            }
            Some(p) => Listed::Prefix(p.to_string()),
            None => Listed::Object(entry),
        };
        if items.len() == params.max_keys {
            return ListPage {
                items,
                next_token: last_key.map(str::to_string),
            };
        }
        items.push(item);
        last_key = Some(&entry.key);
    }
    ListPage {
        items,
        next_token: None,
    }
}

/// The common prefix `key` rolls up into: `prefix` and the rest of the key
/// up to and including the first `delimiter` after it.
fn common_prefix<'k>(key: &'k str, prefix: &str, delimiter: &str) -> Option<&'k str> {
    if delimiter.is_empty() {
        return None;
    }
    let rest = key.get(prefix.len()..)?;
    let at = rest.find(delimiter)?;
    key.get(..prefix.len() + at + delimiter.len())
}

#[cfg(test)]
mod tests {
    use object_store::path::Path as ObjectPath;
    use silt_cache::ObjectVersion;

    use super::*;

    fn entries(keys: &[&str]) -> Vec<Entry> {
        keys.iter()
            .map(|k| Entry {
                key: k.to_string(),
                version: ObjectVersion::from_meta(&object_store::ObjectMeta {
                    location: ObjectPath::from(*k),
                    last_modified: Default::default(),
                    size: 1,
                    e_tag: Some("\"e\"".into()),
                    version: None,
                }),
            })
            .collect()
    }

    fn params(prefix: &str, delimiter: &str, max_keys: usize, token: Option<&str>) -> ListParams {
        ListParams {
            prefix: prefix.into(),
            delimiter: delimiter.into(),
            start_after: None,
            token: token.map(str::to_string),
            max_keys,
        }
    }

    fn names(page: &ListPage) -> Vec<String> {
        page.items
            .iter()
            .map(|i| match i {
                Listed::Object(e) => e.key.clone(),
                Listed::Prefix(p) => format!("{p}*"),
            })
            .collect()
    }

    #[test]
    fn listing_pages_resume_after_their_token() {
        let all = entries(&["a.parquet", "b/1.parquet", "b/2.parquet", "c.parquet", "d/x/1.parquet"]);
        let flat = list_page(&all, &params("", "", 2, None));
        assert_eq!(names(&flat), ["a.parquet", "b/1.parquet"]);
        let next = list_page(&all, &params("", "", 2, flat.next_token.as_deref()));
        assert_eq!(names(&next), ["b/2.parquet", "c.parquet"]);
        let last = list_page(&all, &params("", "", 2, next.next_token.as_deref()));
        assert_eq!(names(&last), ["d/x/1.parquet"]);
        assert!(last.next_token.is_none());

        // A common prefix is one item; the next page starts after all its keys.
        let grouped = list_page(&all, &params("", "/", 2, None));
        assert_eq!(names(&grouped), ["a.parquet", "b/*"]);
        assert_eq!(grouped.next_token.as_deref(), Some("b/2.parquet"));
        let rest = list_page(&all, &params("", "/", 2, grouped.next_token.as_deref()));
        assert_eq!(names(&rest), ["c.parquet", "d/*"]);
        assert!(rest.next_token.is_none());

        assert_eq!(names(&list_page(&all, &params("d/", "/", 10, None))), ["d/x/*"]);
        assert_eq!(
            names(&list_page(&all, &params("b", "", 10, None))),
            ["b/1.parquet", "b/2.parquet"]
        );
        assert!(list_page(&all, &params("", "", 0, None)).items.is_empty());
    }

    #[test]
    fn max_keys_is_capped_and_must_not_be_negative() {
        let input = |n| ListObjectsV2Input {
            max_keys: Some(n),
            ..Default::default()
        };
        assert_eq!(ListParams::from_input(&input(5000)).unwrap().max_keys, MAX_KEYS);
        assert_eq!(ListParams::from_input(&input(3)).unwrap().max_keys, 3);
        assert!(ListParams::from_input(&input(-1)).is_err());
    }
}
