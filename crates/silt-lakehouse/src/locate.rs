//! From the absolute URLs table metadata holds to paths in one store.

use object_store::path::Path;
use url::Url;

use crate::{LakehouseError, Result};

/// Turns the absolute URLs a table's metadata names files by
/// (`s3://bucket/wh/t/data/f.parquet`, `file:///wh/t/...`) into paths of
/// the object store whose root is `root` (`s3://bucket/`, `file:///`).
/// Writers spell S3 as `s3`, `s3a` or `s3n`: all three are one scheme here.
#[derive(Debug, Clone)]
pub struct ObjectLocator {
    root: Url,
}

impl ObjectLocator {
    /// Paths relative to `root`, the URL of the store's empty path.
    pub fn new(root: Url) -> Self {
        ObjectLocator { root }
    }

    /// The store path of `url`; an error when `url` is in another store.
    pub fn path(&self, url: &str) -> Result<Path> {
        let elsewhere = || LakehouseError::Elsewhere {
            url: url.to_string(),
            root: self.root.to_string(),
        };
        let parsed = Url::parse(url).map_err(|_| elsewhere())?;
        if scheme(parsed.scheme()) != scheme(self.root.scheme()) || parsed.host_str() != self.root.host_str() {
            return Err(elsewhere());
        }
        let base = self.root.path().trim_end_matches('/');
        let relative = parsed.path().strip_prefix(base).ok_or_else(elsewhere)?;
        if !relative.starts_with('/') && !base.is_empty() {
            return Err(elsewhere()); // `/wh2/x` is not below `/wh`
        }
        Path::from_url_path(relative.trim_start_matches('/')).map_err(|_| elsewhere())
    }
}

/// One name per scheme family.
fn scheme(s: &str) -> &str {
    match s {
        "s3a" | "s3n" => "s3",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_become_paths_of_their_store_only() {
        let s3 = ObjectLocator::new(Url::parse("s3://lake/").unwrap());
        assert_eq!(
            s3.path("s3a://lake/wh/t/data/a%20b.parquet").unwrap().as_ref(),
            "wh/t/data/a b.parquet"
        );
        assert!(s3.path("s3://other/wh/t.parquet").is_err());
        assert!(s3.path("gs://lake/wh/t.parquet").is_err());
        let local = ObjectLocator::new(Url::parse("file:///").unwrap());
        assert_eq!(
            local.path("file:///tmp/wh/t/f.parquet").unwrap().as_ref(),
            "tmp/wh/t/f.parquet"
        );
        let prefixed = ObjectLocator::new(Url::parse("file:///tmp/wh").unwrap());
        assert_eq!(
            prefixed.path("file:///tmp/wh/t/f.parquet").unwrap().as_ref(),
            "t/f.parquet"
        );
        assert!(prefixed.path("file:///tmp/wh2/t/f.parquet").is_err());
    }
}
