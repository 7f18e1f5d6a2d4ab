//! Table locations: where a table's Parquet files live and how to reach them.

use std::sync::Arc;

use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};
use serde::Deserialize;
use url::Url;

use crate::StoreError;
use crate::cloud::{Cloud, CloudSettings};

/// The object path whose stored (already encoded) form is `raw`, as
/// `Path::as_ref` or `Display` gave it: for keys and wire fields that carry
/// a path as text. `Path::from` would encode it again (a `%` in a file name,
/// as Hive-style partition folders have, becomes `%25`), naming another
/// object. Text that is not a stored form (a control character) is encoded.
pub fn path_from_raw(raw: &str) -> object_store::path::Path {
    object_store::path::Path::parse(raw).unwrap_or_else(|_| object_store::path::Path::from(raw))
}

/// The settings of every kind of store a table can be in: each table's are
/// its own over the server's over the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreSettings {
    pub s3: S3Settings,
    pub gcs: CloudSettings,
    pub azure: CloudSettings,
}

impl From<S3Settings> for StoreSettings {
    fn from(s3: S3Settings) -> StoreSettings {
        StoreSettings {
            s3,
            ..Default::default()
        }
    }
}

impl StoreSettings {
    /// The settings of the cloud store `cloud`.
    pub fn cloud(&self, cloud: Cloud) -> &CloudSettings {
        match cloud {
            Cloud::Gcs => &self.gcs,
            Cloud::Azure => &self.azure,
        }
    }
}

/// S3 connection settings. Unset fields fall back to the standard AWS
/// environment variables (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ALLOW_HTTP`), so a config file
/// only needs to name what differs per table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Settings {
    pub endpoint: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    pub region: Option<String>,
    pub allow_http: Option<bool>,
}

impl S3Settings {
    /// Settings read from the standard AWS environment variables.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        S3Settings {
            endpoint: var("AWS_ENDPOINT_URL").or_else(|| var("AWS_ENDPOINT")),
            access_key_id: var("AWS_ACCESS_KEY_ID"),
            secret_access_key: var("AWS_SECRET_ACCESS_KEY"),
            session_token: var("AWS_SESSION_TOKEN"),
            region: var("AWS_REGION").or_else(|| var("AWS_DEFAULT_REGION")),
            allow_http: var("AWS_ALLOW_HTTP").map(|v| matches!(v.as_str(), "1" | "true" | "TRUE")),
        }
    }

    /// `self` with every unset field taken from `base`.
    pub fn or(&self, base: &S3Settings) -> S3Settings {
        S3Settings {
            endpoint: self.endpoint.clone().or_else(|| base.endpoint.clone()),
            access_key_id: self.access_key_id.clone().or_else(|| base.access_key_id.clone()),
            secret_access_key: self
                .secret_access_key
                .clone()
                .or_else(|| base.secret_access_key.clone()),
            session_token: self.session_token.clone().or_else(|| base.session_token.clone()),
            region: self.region.clone().or_else(|| base.region.clone()),
            allow_http: self.allow_http.or(base.allow_http),
        }
    }
}

/// A parsed table URL: the store that holds the files and the path inside it.
#[derive(Debug, Clone)]
pub struct TableLocation {
    /// The URL as the operator wrote it.
    pub url: Url,
    /// Path inside the store (no leading slash). A trailing `/` on the URL
    /// marks a directory or prefix; otherwise it may be a single file.
    pub path: String,
    /// True when the URL names a directory/prefix (ends with `/`).
    pub is_prefix: bool,
    /// What the objects at the URL are: loose Parquet files, or a table
    /// format's folder (`iceberg+URL`, `delta+URL`).
    pub format: TableFormat,
}

/// How a table's files are found: by listing, or from a table format's
/// metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TableFormat {
    /// Every `*.parquet` object at the URL (a file, or a prefix).
    #[default]
    Parquet,
    /// An Iceberg table: its folder (the current metadata from
    /// `metadata/version-hint.text`, else the highest-numbered
    /// `*.metadata.json`) or one metadata JSON.
    Iceberg,
    /// A Delta Lake table: its root, holding `_delta_log/`.
    Delta,
}

impl TableFormat {
    /// The URL prefix that names the format (`iceberg+`), empty for Parquet.
    pub fn prefix(self) -> &'static str {
        match self {
            TableFormat::Parquet => "",
            TableFormat::Iceberg => "iceberg+",
            TableFormat::Delta => "delta+",
        }
    }
}

impl TableLocation {
    /// Parse and validate a table URL: a store URL, optionally prefixed by
    /// a table format (`iceberg+s3://bucket/wh/db/t`).
    pub fn parse(raw: &str) -> Result<Self, StoreError> {
        let (format, raw) = [TableFormat::Iceberg, TableFormat::Delta]
            .into_iter()
            .find_map(|f| Some((f, raw.strip_prefix(f.prefix())?)))
            .unwrap_or((TableFormat::Parquet, raw));
        let url = Url::parse(raw).map_err(|e| StoreError::InvalidUrl {
            url: raw.to_string(),
            reason: e.to_string(),
        })?;
        match url.scheme() {
            "file" => {
                if url.host_str().is_some_and(|h| !h.is_empty() && h != "localhost") {
                    return Err(StoreError::InvalidUrl {
                        url: raw.into(),
                        reason: "file URLs must be absolute: file:///abs/path".into(),
                    });
                }
            }
            scheme @ ("s3" | "s3a" | "gs" | "az" | "abfs" | "abfss" | "azure" | "adl") => {
                if url.host_str().unwrap_or("").is_empty() {
                    return Err(StoreError::InvalidUrl {
                        url: raw.into(),
                        reason: format!("missing bucket or container: {scheme}://bucket/prefix/"),
                    });
                }
            }
            "memory" => {}
            other => {
                return Err(StoreError::UnsupportedScheme {
                    scheme: other.into(),
                    url: raw.into(),
                });
            }
        }
        let path = object_store::path::Path::from_url_path(url.path())
            .map_err(|e| StoreError::InvalidUrl {
                url: raw.to_string(),
                reason: e.to_string(),
            })?
            .to_string();
        let is_prefix = raw.ends_with('/') || path.is_empty();
        Ok(TableLocation {
            url,
            path,
            is_prefix,
            format,
        })
    }

    /// The `scheme://authority` part that identifies the store.
    pub fn store_key(&self) -> String {
        format!("{}://{}", self.url.scheme(), self.url.host_str().unwrap_or(""))
    }

    /// Open the object store this location lives in, with `settings` for
    /// its kind. `memory://` locations get `memory` (an in-memory store the
    /// caller fills).
    pub fn open(&self, settings: &StoreSettings, memory: &Arc<InMemory>) -> Result<Arc<dyn ObjectStore>, StoreError> {
        let open_err = |source| StoreError::Open {
            url: self.url.to_string(),
            source,
        };
        let s3 = &settings.s3;
        if let Some(cloud) = Cloud::of_scheme(self.url.scheme()) {
            install_crypto_provider();
            return cloud.open(&self.url, settings.cloud(cloud));
        }
        match self.url.scheme() {
            "file" => Ok(Arc::new(LocalFileSystem::new())),
            "memory" => Ok(memory.clone()),
            _ => {
                install_crypto_provider();
                let bucket = self.url.host_str().unwrap_or_default();
                let mut b = AmazonS3Builder::new()
                    .with_bucket_name(bucket)
                    .with_virtual_hosted_style_request(false);
                if let Some(v) = &s3.endpoint {
                    b = b.with_endpoint(v);
                }
                if let Some(v) = &s3.access_key_id {
                    b = b.with_access_key_id(v);
                }
                if let Some(v) = &s3.secret_access_key {
                    b = b.with_secret_access_key(v);
                }
                if let Some(v) = &s3.session_token {
                    b = b.with_token(v);
                }
                b = b.with_region(s3.region.as_deref().unwrap_or("us-east-1"));
                let http = s3
                    .allow_http
                    .unwrap_or_else(|| s3.endpoint.as_deref().is_some_and(|e| e.starts_with("http://")));
                let (client, retry) = client_settings(http);
                b = b.with_client_options(client).with_retry(retry);
                Ok(Arc::new(b.build().map_err(open_err)?))
            }
        }
    }
}

/// The HTTP client settings of every remote store (`allow_http`: plain
/// HTTP too). Client options carry allow_http, so they are set together.
/// No retries and no request timeout of the client's own: `RetryingStore`
/// is the one retry layer, and its deadlines per attempt and per request
/// are the ones that hold.
pub(crate) fn client_settings(allow_http: bool) -> (ClientOptions, RetryConfig) {
    let client = ClientOptions::new()
        .with_allow_http(allow_http)
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout_disabled();
    let retry = RetryConfig {
        max_retries: 0,
        retry_timeout: Duration::ZERO,
        backoff: BackoffConfig::default(),
    };
    (client, retry)
}

/// HTTPS to object stores needs a process-wide rustls crypto provider;
/// install `ring` once unless the embedding program chose another.
fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_path_round_trips_through_its_text() {
        use object_store::path::Path;
        // A Hive-style partition folder whose value had a space (a writer
        // escapes it as `%20` in the folder's name).
        let stored = Path::from("t/p=4-NOT%20SPECIFIED/part-0.parquet");
        assert_eq!(path_from_raw(stored.as_ref()), stored);
        assert_ne!(
            Path::from(stored.as_ref()),
            stored,
            "encoding again names another object"
        );
        assert_eq!(
            path_from_raw("a/b\ncontrol").as_ref(),
            Path::from("a/b\ncontrol").as_ref()
        );
    }

    #[test]
    fn parses_supported_urls() {
        let l = TableLocation::parse("file:///data/tpch/lineitem/").unwrap();
        assert_eq!(l.path, "data/tpch/lineitem");
        assert!(l.is_prefix);
        let l = TableLocation::parse("file:///data/x%20y.parquet").unwrap();
        assert_eq!(l.path, "data/x y.parquet");
        assert!(!l.is_prefix);
        let l = TableLocation::parse("s3://bucket/pre/fix/").unwrap();
        assert_eq!(l.store_key(), "s3://bucket");
        assert_eq!(l.path, "pre/fix");
        assert!(TableLocation::parse("memory:///t/").unwrap().is_prefix);
        let l = TableLocation::parse("iceberg+s3://lake/wh/db/t").unwrap();
        assert_eq!(
            (l.format, l.path.as_str(), l.url.as_str()),
            (TableFormat::Iceberg, "wh/db/t", "s3://lake/wh/db/t")
        );
        assert_eq!(
            TableLocation::parse("delta+file:///t/").unwrap().format,
            TableFormat::Delta
        );
        assert_eq!(TableLocation::parse("file:///t/").unwrap().format, TableFormat::Parquet);
        let l = TableLocation::parse("gs://lake/tpch/lineitem/").unwrap();
        assert_eq!(
            (l.store_key().as_str(), l.path.as_str()),
            ("gs://lake", "tpch/lineitem")
        );
        for url in [
            "az://lake/t/",
            "abfs://lake/t/",
            "abfss://lake@acct.dfs.core.windows.net/t/",
        ] {
            assert_eq!(TableLocation::parse(url).unwrap().path, "t", "{url}");
        }
    }

    #[test]
    fn rejects_bad_urls() {
        assert!(matches!(
            TableLocation::parse("http://x/y"),
            Err(StoreError::UnsupportedScheme { .. })
        ));
        assert!(TableLocation::parse("s3:///nobucket").is_err());
        assert!(TableLocation::parse("gs:///nobucket").is_err());
        assert!(TableLocation::parse("not a url").is_err());
        assert!(TableLocation::parse("file://host/x").is_err());
    }

    #[test]
    fn settings_override_falls_back_to_base() {
        let base = S3Settings {
            endpoint: Some("http://a".into()),
            region: Some("r".into()),
            ..Default::default()
        };
        let over = S3Settings {
            endpoint: Some("http://b".into()),
            ..Default::default()
        };
        let m = over.or(&base);
        assert_eq!(m.endpoint.as_deref(), Some("http://b"));
        assert_eq!(m.region.as_deref(), Some("r"));
    }
}
