//! An Iceberg REST catalog (the Iceberg REST catalog OpenAPI spec): where a
//! table's current metadata file is. Two endpoints are used: `GET
//! /v1/config` once (the catalog's `prefix` for later paths, and the
//! warehouse it serves), and `GET /v1/{prefix}/namespaces/{ns}/tables/{t}`
//! (load-table) per resolution, whose `metadata-location` is the table's
//! current pointer: the one metadata read a query makes under `always`.
//! The metadata file itself, manifests and data files are then read from
//! the table's store like any Iceberg table's.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::{LakehouseError, Result};

/// How long one catalog request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A connected REST catalog.
#[derive(Clone)]
pub struct RestCatalog {
    /// The catalog's base URI (without a trailing `/`).
    uri: String,
    /// `v1/` or `v1/{prefix}/`: what table paths start with.
    base: String,
    token: Option<String>,
    client: reqwest::Client,
}

/// Without the token.
impl std::fmt::Debug for RestCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestCatalog")
            .field("uri", &self.uri)
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .finish()
    }
}

/// `GET /v1/config`'s answer.
#[derive(Debug, Deserialize)]
struct CatalogConfig {
    #[serde(default)]
    defaults: serde_json::Map<String, Value>,
    #[serde(default)]
    overrides: serde_json::Map<String, Value>,
}

/// Load-table's answer (the fields Silt reads).
#[derive(Debug, Deserialize)]
struct LoadTable {
    #[serde(rename = "metadata-location")]
    metadata_location: Option<String>,
    metadata: Option<Value>,
}

impl RestCatalog {
    /// Connects to the catalog at `uri` (for `warehouse`, if given), with
    /// a bearer `token` if given: reads its configuration.
    pub async fn connect(uri: &str, warehouse: Option<&str>, token: Option<&str>) -> Result<RestCatalog> {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| unreachable_at(uri, e.to_string()))?;
        let mut catalog = RestCatalog {
            uri: uri.trim_end_matches('/').to_string(),
            base: "v1/".into(),
            token: token.map(str::to_string),
            client,
        };
        let query = warehouse
            .map(|w| format!("?warehouse={}", encode(w)))
            .unwrap_or_default();
        let body = catalog.get(&format!("v1/config{query}")).await?;
        let config: CatalogConfig = serde_json::from_slice(&body).map_err(|e| catalog.invalid("config", e))?;
        // Overrides win over the client's settings, defaults lose to them:
        // Silt sets none, so either gives the prefix.
        let prefix = config
            .overrides
            .get("prefix")
            .or_else(|| config.defaults.get("prefix"))
            .and_then(Value::as_str);
        if let Some(prefix) = prefix.filter(|p| !p.is_empty()) {
            catalog.base = format!("v1/{}/", prefix.trim_matches('/'));
        }
        Ok(catalog)
    }

    /// The current metadata file of `namespace.table` (a namespace of one
    /// or more levels, dot-separated), as the catalog spells its URL.
    pub async fn metadata_location(&self, namespace: &str, table: &str) -> Result<String> {
        let levels: Vec<String> = namespace.split('.').map(encode).collect();
        // Multi-level namespaces are joined by the unit separator (spec).
        let path = format!(
            "{}namespaces/{}/tables/{}",
            self.base,
            levels.join("%1F"),
            encode(table)
        );
        let body = self.get(&path).await.map_err(|e| match e {
            LakehouseError::NoSuchSnapshot { .. } => LakehouseError::NoSuchSnapshot {
                table: format!("{namespace}.{table}"),
                reason: format!("the catalog at {} has no such table", self.uri),
            },
            other => other,
        })?;
        let loaded: LoadTable = serde_json::from_slice(&body).map_err(|e| self.invalid("load-table answer", e))?;
        loaded
            .metadata_location
            .or_else(|| {
                // Some catalogs leave the location to the metadata itself.
                loaded
                    .metadata?
                    .get("metadata-location")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .ok_or_else(|| LakehouseError::Invalid {
                path: format!("{}/{path}", self.uri),
                what: "Iceberg REST load-table answer",
                reason: "no metadata-location".into(),
            })
    }

    /// The catalog's base URI.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The body of `GET {uri}/{path}`: a 404 as [`LakehouseError::NoSuchSnapshot`],
    /// other failures as the catalog being unreachable.
    async fn get(&self, path: &str) -> Result<bytes::Bytes> {
        let url = format!("{}/{path}", self.uri);
        let mut request = self.client.get(&url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|e| unreachable_at(&url, e.to_string()))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| unreachable_at(&url, e.to_string()))?;
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(LakehouseError::NoSuchSnapshot {
                table: url,
                reason: "not found".into(),
            });
        }
        if !status.is_success() {
            let message = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
            return Err(unreachable_at(&url, format!("HTTP {status}: {message}")));
        }
        Ok(body)
    }

    fn invalid(&self, what: &str, e: serde_json::Error) -> LakehouseError {
        LakehouseError::Invalid {
            path: self.uri.clone(),
            what: "Iceberg REST catalog answer",
            reason: format!("{what}: {e}"),
        }
    }
}

/// One table of a REST catalog: its current pointer is the catalog's
/// answer.
#[derive(Debug, Clone)]
pub struct RestTable {
    pub catalog: RestCatalog,
    /// Dot-separated levels.
    pub namespace: String,
    pub table: String,
}

impl RestTable {
    /// The table's current metadata file's URL (one catalog request).
    pub async fn metadata_location(&self) -> Result<String> {
        self.catalog.metadata_location(&self.namespace, &self.table).await
    }
}

fn unreachable_at(url: &str, reason: String) -> LakehouseError {
    LakehouseError::Catalog {
        url: url.to_string(),
        reason,
    }
}

/// `s` percent-encoded for one path segment or query value.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(encode("db"), "db");
        assert_eq!(encode("my table/x"), "my%20table%2Fx");
    }
}
