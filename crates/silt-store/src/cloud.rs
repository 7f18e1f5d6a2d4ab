//! Google Cloud Storage and Azure Blob Storage tables (`gs://`, `az://`,
//! `abfs://`, `abfss://`, `azure://`, `adl://`), opened through
//! `object_store`'s own implementations.
//!
//! Their settings are `object_store`'s own configuration keys (the names
//! its docs and every tool built on it use, e.g. `service_account_path`,
//! `base_url` for GCS; `account_name`, `access_key`, `endpoint` for Azure),
//! so nothing is renamed or left out. They come, weakest first, from the
//! standard environment (`GOOGLE_*`, `AZURE_*`, read by the builders'
//! `from_env`), the server's `[gcs]` / `[azure]` sections, and a table's own
//! `[tables.NAME.gcs]` / `[tables.NAME.azure]`.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;

use futures::stream::{BoxStream, StreamExt, TryStreamExt};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::path::Path;
use object_store::{GetOptions, GetResult, ListResult, ObjectMeta, ObjectStore};
use serde::Deserialize;
use url::Url;

use crate::StoreError;
use crate::location::client_settings;

/// A store's settings as `object_store` configuration keys and values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct CloudSettings(pub BTreeMap<String, String>);

impl CloudSettings {
    /// `self` with every key it does not set taken from `base`.
    pub fn or(&self, base: &CloudSettings) -> CloudSettings {
        let mut merged = base.0.clone();
        merged.extend(self.0.iter().map(|(k, v)| (k.clone(), v.clone())));
        CloudSettings(merged)
    }
}

/// Which cloud store a URL scheme names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cloud {
    Gcs,
    Azure,
}

impl Cloud {
    /// The cloud store of `scheme`, if it is one.
    pub fn of_scheme(scheme: &str) -> Option<Cloud> {
        match scheme {
            "gs" => Some(Cloud::Gcs),
            "az" | "abfs" | "abfss" | "azure" | "adl" => Some(Cloud::Azure),
            _ => None,
        }
    }

    /// The config section its settings are in (`gcs`, `azure`).
    pub fn section(self) -> &'static str {
        match self {
            Cloud::Gcs => "gcs",
            Cloud::Azure => "azure",
        }
    }

    /// Checks that every key of `settings` is one of this store's
    /// `object_store` keys, so a typo fails at start, naming the key.
    pub fn check_keys(self, settings: &CloudSettings) -> Result<(), StoreError> {
        for key in settings.0.keys() {
            let known = match self {
                Cloud::Gcs => GoogleConfigKey::from_str(key).is_ok(),
                Cloud::Azure => AzureConfigKey::from_str(key).is_ok(),
            };
            if !known {
                return Err(StoreError::UnknownSetting {
                    section: self.section(),
                    key: key.clone(),
                });
            }
        }
        Ok(())
    }

    /// The store of the bucket or container `url` names, with `settings`
    /// over the environment, and Silt's client settings (one retry layer,
    /// its own deadlines).
    pub fn open(self, url: &Url, settings: &CloudSettings) -> Result<Arc<dyn ObjectStore>, StoreError> {
        self.check_keys(settings)?;
        let open_err = |source| StoreError::Open {
            url: url.to_string(),
            source,
        };
        let (client, retry) = client_settings(allows_http(settings));
        let store: Arc<dyn ObjectStore> = match self {
            Cloud::Gcs => {
                let mut b = GoogleCloudStorageBuilder::from_env().with_url(url.as_str());
                for (k, v) in &settings.0 {
                    b = b.with_config(GoogleConfigKey::from_str(k).map_err(open_err)?, v);
                }
                Arc::new(
                    b.with_client_options(client)
                        .with_retry(retry)
                        .build()
                        .map_err(open_err)?,
                )
            }
            Cloud::Azure => {
                let mut b = MicrosoftAzureBuilder::from_env().with_url(url.as_str());
                for (k, v) in &settings.0 {
                    b = b.with_config(AzureConfigKey::from_str(k).map_err(open_err)?, v);
                }
                Arc::new(
                    b.with_client_options(client)
                        .with_retry(retry)
                        .build()
                        .map_err(open_err)?,
                )
            }
        };
        Ok(Arc::new(QuotedEtags { inner: store }))
    }
}

/// Entity tags in one spelling. Azure Blob Storage (and fake-gcs-server)
/// list them bare (`0x8D…`) but send and compare them quoted (`"0x8D…"`) in
/// headers, so a version seen by a LIST would never match the same version
/// seen by a HEAD or GET (Silt would take it for an overwrite), and an
/// `If-Match` with a listed tag fails: every tag is quoted here. Tags that
/// are quoted already (GCS's XML API) pass unchanged.
struct QuotedEtags {
    inner: Arc<dyn ObjectStore>,
}

/// `tag` in double quotes (unchanged if it already is).
fn quoted(tag: &str) -> String {
    if tag.starts_with('"') || tag.starts_with("W/\"") {
        tag.to_string()
    } else {
        format!("\"{tag}\"")
    }
}

fn quote_meta(mut meta: ObjectMeta) -> ObjectMeta {
    meta.e_tag = meta.e_tag.as_deref().map(quoted);
    meta
}

crate::read_path_store!(QuotedEtags, "QuotedEtags", {
    async fn get_opts(&self, location: &Path, mut options: GetOptions) -> object_store::Result<GetResult> {
        options.if_match = options.if_match.as_deref().map(quoted);
        options.if_none_match = options.if_none_match.as_deref().map(quoted);
        let mut result = self.inner.get_opts(location, options).await?;
        result.meta = quote_meta(result.meta);
        Ok(result)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix).map_ok(quote_meta).boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset).map_ok(quote_meta).boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let mut listed = self.inner.list_with_delimiter(prefix).await?;
        listed.objects = listed.objects.into_iter().map(quote_meta).collect();
        Ok(listed)
    }
});

/// Whether `settings` ask for plain HTTP (an emulator): `allow_http` set, or
/// an endpoint or base URL that is `http://`.
fn allows_http(settings: &CloudSettings) -> bool {
    settings.0.iter().any(|(k, v)| {
        let key = k.trim_start_matches("google_").trim_start_matches("azure_");
        match key {
            "allow_http" => matches!(v.as_str(), "1" | "true" | "TRUE"),
            "base_url" | "endpoint" | "storage_endpoint" => v.starts_with("http://"),
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> CloudSettings {
        CloudSettings(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn a_table_overrides_the_server_key_by_key() {
        let server = settings(&[("account_name", "a"), ("access_key", "k")]);
        let table = settings(&[("account_name", "b")]);
        assert_eq!(
            table.or(&server),
            settings(&[("account_name", "b"), ("access_key", "k")])
        );
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        assert!(Cloud::Gcs.check_keys(&settings(&[("base_url", "http://x")])).is_ok());
        assert!(Cloud::Azure.check_keys(&settings(&[("use_emulator", "true")])).is_ok());
        let err = Cloud::Gcs.check_keys(&settings(&[("acount", "x")])).unwrap_err();
        assert!(
            err.to_string().contains("[gcs]") && err.to_string().contains("acount"),
            "{err}"
        );
    }

    #[test]
    fn plain_http_only_when_asked() {
        assert!(allows_http(&settings(&[("google_base_url", "http://127.0.0.1:4443")])));
        assert!(allows_http(&settings(&[(
            "endpoint",
            "http://127.0.0.1:10000/devstoreaccount1"
        )])));
        assert!(allows_http(&settings(&[("allow_http", "true")])));
        assert!(!allows_http(&settings(&[("base_url", "https://storage.example")])));
    }

    #[test]
    fn azure_tags_are_quoted_once() {
        assert_eq!(quoted("0x8D1"), "\"0x8D1\"");
        assert_eq!(quoted("\"0x8D1\""), "\"0x8D1\"");
    }

    #[test]
    fn schemes_name_their_store() {
        assert_eq!(Cloud::of_scheme("gs"), Some(Cloud::Gcs));
        for s in ["az", "abfs", "abfss", "azure", "adl"] {
            assert_eq!(Cloud::of_scheme(s), Some(Cloud::Azure), "{s}");
        }
        assert_eq!(Cloud::of_scheme("s3"), None);
    }
}
