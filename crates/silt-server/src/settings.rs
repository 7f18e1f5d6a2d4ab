//! The effective configuration of `silt serve`, and where each setting came
//! from.
//!
//! [`ServerConfig::default`] holds fixed defaults, the same on every machine
//! (what tests and an embedding process start from). A deployment expects
//! more: `silt serve` also listens for health, metrics and the dashboard on
//! [`DEFAULT_ADMIN`], and sizes its memory budgets as shares of the memory
//! it may use (the cgroup's limit where there is one, else the machine's:
//! `silt_core::machine`) — unless the file, a flag or the environment says
//! otherwise. [`Effective`] records who set what, for `silt serve
//! --print-config` and the start-up line that prints the budgets.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::path::{Path, PathBuf};

use silt_store::{CloudSettings, S3Settings};

use crate::config::{DEFAULT_ADMIN, ServerConfig};
use crate::error::{ConfigError, ServerError};

/// The memory this server may use (the cgroup's limit where lower than the
/// machine's), which the deployment defaults share out.
pub use silt_core::machine::memory_bytes as machine_memory;

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Silt's fixed default.
    Default,
    /// A share of the memory this server may use (the text says which).
    Machine(String),
    /// The config file.
    File,
    /// A command-line flag.
    Flag,
    /// An environment variable.
    Env(&'static str),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => write!(f, "default"),
            Source::Machine(how) => write!(f, "default: {how}"),
            Source::File => write!(f, "file"),
            Source::Flag => write!(f, "flag"),
            Source::Env(var) => write!(f, "environment {var}"),
        }
    }
}

/// A memory budget `silt serve` sizes from the machine: its key, the share
/// (1 / divisor), a cap, and how to set it.
struct MemoryShare {
    key: &'static str,
    divisor: u64,
    cap: u64,
    set: fn(&mut ServerConfig, u64),
}

/// The budgets that default to shares of memory. The memory tier and a
/// query may each take a quarter; the page buffer and the metadata tier,
/// which only front the disk tier and hold footers, far less.
const MEMORY_SHARES: [MemoryShare; 4] = [
    MemoryShare {
        key: "memory_budget",
        divisor: 4,
        cap: u64::MAX,
        set: |c, v| c.memory_budget = v,
    },
    MemoryShare {
        key: "page_memory_budget",
        divisor: 32,
        cap: 4 << 30,
        set: |c, v| c.page_memory_budget = v,
    },
    MemoryShare {
        key: "metadata_budget",
        divisor: 64,
        cap: 2 << 30,
        set: |c, v| c.metadata_budget = v,
    },
    MemoryShare {
        key: "query_memory_limit",
        divisor: 4,
        cap: u64::MAX,
        set: |c, v| c.query_memory_limit = v,
    },
];

/// A configuration and the source of each of its settings (a setting not
/// named came from [`Source::Default`]).
pub struct Effective {
    pub config: ServerConfig,
    sources: BTreeMap<String, Source>,
}

impl Effective {
    /// The fixed defaults, with the settings of the TOML file at `path` (if
    /// any) over them.
    pub fn from_file(path: Option<&Path>) -> Result<Self, ServerError> {
        let Some(path) = path else {
            return Ok(Effective {
                config: ServerConfig::default(),
                sources: BTreeMap::new(),
            });
        };
        let config = ServerConfig::from_file(path)?;
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let table: toml::Table = toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        let mut keys = Vec::new();
        flatten_keys("", &table, &mut keys);
        Ok(Effective {
            config,
            sources: keys.into_iter().map(|k| (k, Source::File)).collect(),
        })
    }

    /// Applies `value`, when there is one, with `apply`, as setting `key`
    /// from `source`.
    pub fn set<T>(&mut self, key: &str, value: Option<T>, source: Source, apply: impl FnOnce(&mut ServerConfig, T)) {
        if let Some(v) = value {
            apply(&mut self.config, v);
            self.sources.insert(key.to_string(), source);
        }
    }

    /// Where `key` came from.
    pub fn source(&self, key: &str) -> Source {
        self.sources.get(key).cloned().unwrap_or(Source::Default)
    }

    /// `silt serve`'s defaults for the settings nobody set: the admin
    /// listener on [`DEFAULT_ADMIN`], and the memory budgets as shares of
    /// `memory` bytes (what this server may use; the fixed defaults stay
    /// where it is unknown).
    pub fn with_deployment_defaults(mut self, memory: Option<u64>) -> Self {
        if self.source("admin") == Source::Default {
            self.config.admin = Some(DEFAULT_ADMIN.parse().expect("static address"));
        }
        let Some(memory) = memory else {
            return self;
        };
        for share in &MEMORY_SHARES {
            if self.source(share.key) != Source::Default {
                continue;
            }
            let bytes = (memory / share.divisor).min(share.cap);
            (share.set)(&mut self.config, bytes);
            let capped = if bytes == share.cap { ", capped" } else { "" };
            let how = format!("1/{} of {}{capped}", share.divisor, human_bytes(memory));
            self.sources.insert(share.key.to_string(), Source::Machine(how));
        }
        self
    }

    /// Every effective setting, one `key = value  # source` line each, as
    /// `silt serve --print-config` shows them (secrets masked).
    pub fn listing(&self) -> String {
        let mut out = String::new();
        for (key, value) in entries(&self.config) {
            out.push_str(&format!("{key} = {value}  # {}\n", self.source(&key)));
        }
        for (key, value, var) in s3_from_env(&self.config.s3) {
            out.push_str(&format!("{key} = {value}  # {}\n", Source::Env(var)));
        }
        out
    }

    /// The memory budgets and where they came from, for the start-up log.
    pub fn budgets(&self) -> String {
        let c = &self.config;
        [
            ("memory", "memory_budget", c.memory_budget),
            ("page buffer", "page_memory_budget", c.page_memory_budget),
            ("metadata", "metadata_budget", c.metadata_budget),
            ("per query", "query_memory_limit", c.query_memory_limit),
            ("disk", "disk_budget", c.disk_budget),
        ]
        .iter()
        .map(|(name, key, bytes)| format!("{name} {} ({})", human_bytes(*bytes), self.source(key)))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// The dotted keys of `table`'s values (`store.retries`,
/// `tables.hits.url`), prefixed with `prefix`.
fn flatten_keys(prefix: &str, table: &toml::Table, out: &mut Vec<String>) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        if let toml::Value::Table(t) = v {
            flatten_keys(&key, t, out);
        }
        out.push(key);
    }
}

/// Bytes as `1.5 GiB`.
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn quoted(s: impl Display) -> String {
    format!("{:?}", s.to_string())
}

fn optional<T: Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "unset".to_string(), quoted)
}

fn path(p: &Option<PathBuf>) -> String {
    optional(&p.as_ref().map(|p| p.display()))
}

fn secret(v: &Option<String>) -> String {
    v.as_ref()
        .map_or_else(|| "unset".to_string(), |_| "\"***\"".to_string())
}

fn list(v: &[String]) -> String {
    format!("[{}]", v.iter().map(quoted).collect::<Vec<_>>().join(", "))
}

/// Every setting of `c` as (TOML key, value), in the file's order.
fn entries(c: &ServerConfig) -> Vec<(String, String)> {
    let bytes = |b: u64| quoted(human_bytes(b));
    let duration = |d: std::time::Duration| quoted(humantime::format_duration(d));
    let fixed: Vec<(&str, String)> = vec![
        ("listen", quoted(c.listen)),
        ("admin", c.admin.map_or_else(|| quoted("off"), quoted)),
        ("cache_dir", quoted(c.cache_dir.display())),
        ("memory_budget", bytes(c.memory_budget)),
        ("memory_form", quoted(format!("{:?}", c.memory_form).to_lowercase())),
        ("transcode_inline_after", bytes(c.transcode_inline_after)),
        ("page_memory_budget", bytes(c.page_memory_budget)),
        ("disk_budget", bytes(c.disk_budget)),
        ("squeeze_share", c.squeeze_share.to_string()),
        ("squeeze_ahead", c.squeeze_ahead.to_string()),
        ("metadata_budget", bytes(c.metadata_budget)),
        ("page_size", bytes(c.page_size)),
        ("disk_policy", quoted(c.disk_policy)),
        ("memory_policy", quoted(c.memory_policy)),
        ("plan_aware", c.plan_aware.to_string()),
        ("plan_horizon", quoted(c.plan_horizon)),
        ("max_concurrent_queries", c.max_concurrent_queries.to_string()),
        ("direct_io", c.direct_io.to_string()),
        ("memory_pressure_floor", bytes(c.memory_pressure_floor)),
        ("query_memory_limit", bytes(c.query_memory_limit)),
        ("query_timeout", duration(c.query_timeout)),
        ("drain_timeout", duration(c.drain_timeout)),
        ("registration_wait", duration(c.registration_wait)),
        ("auth_token", secret(&c.auth_token)),
        ("tls_cert", path(&c.tls_cert)),
        ("tls_key", path(&c.tls_key)),
        ("allow_insecure", c.allow_insecure.to_string()),
        ("otlp_endpoint", optional(&c.otlp_endpoint)),
        ("store.retries", c.store.retries.to_string()),
        ("store.request_timeout", duration(c.store.request_timeout)),
        ("store.total_timeout", duration(c.store.total_timeout)),
        ("store.latency", duration(c.store.latency)),
        ("store.mbps", optional(&c.store.mbps)),
        ("store.fail_rate", c.store.fail_rate.to_string()),
        ("store.truncate_rate", c.store.truncate_rate.to_string()),
        ("s3_api.listen", optional(&c.s3_api.listen)),
        ("s3_api.access_key_id", optional(&c.s3_api.access_key_id)),
        ("s3_api.secret_access_key", secret(&c.s3_api.secret_access_key)),
        ("cluster.servers", list(&c.cluster.servers)),
        ("cluster.admin", list(&c.cluster.admin)),
        ("cluster.admin_port", optional(&c.cluster.admin_port)),
        ("cluster.self", optional(&c.cluster.self_url)),
        ("cluster.ca_cert", path(&c.cluster.ca_cert)),
    ];
    let mut out: Vec<(String, String)> = fixed.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    out.extend(s3_entries("s3", &c.s3));
    out.extend(cloud_entries("gcs", &c.gcs));
    out.extend(cloud_entries("azure", &c.azure));
    for (name, t) in &c.tables {
        out.push((format!("tables.{name}.url"), quoted(&t.url)));
        out.push((
            format!("tables.{name}.binary_as_string"),
            t.binary_as_string.to_string(),
        ));
        out.push((format!("tables.{name}.validation"), quoted(t.validation)));
        out.extend(s3_entries(&format!("tables.{name}.s3"), &t.s3));
        out.extend(cloud_entries(&format!("tables.{name}.gcs"), &t.gcs));
        out.extend(cloud_entries(&format!("tables.{name}.azure"), &t.azure));
    }
    for (name, sql) in &c.views {
        out.push((format!("views.{name}"), quoted(sql)));
    }
    out
}

/// The S3 settings set in `s` (unset ones are left to the environment).
fn s3_entries(prefix: &str, s: &S3Settings) -> Vec<(String, String)> {
    [
        ("endpoint", s.endpoint.as_ref().map(quoted)),
        ("access_key_id", s.access_key_id.as_ref().map(quoted)),
        (
            "secret_access_key",
            s.secret_access_key.as_ref().map(|_| "\"***\"".to_string()),
        ),
        ("session_token", s.session_token.as_ref().map(|_| "\"***\"".to_string())),
        ("region", s.region.as_ref().map(quoted)),
        ("allow_http", s.allow_http.map(|b| b.to_string())),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (format!("{prefix}.{k}"), v)))
    .collect()
}

/// The object_store keys of a `[gcs]`/`[azure]` section, with the values of
/// credential keys (a key, a secret, a token, a SAS) shown as `***`.
fn cloud_entries(prefix: &str, s: &CloudSettings) -> Vec<(String, String)> {
    let is_credential = |k: &str| {
        ["key", "secret", "token", "sas"]
            .iter()
            .any(|w| k.to_lowercase().contains(w))
    };
    s.0.iter()
        .map(|(k, v)| {
            let shown = if is_credential(k) {
                "\"***\"".to_string()
            } else {
                quoted(v)
            };
            (format!("{prefix}.{k}"), shown)
        })
        .collect()
}

/// The `s3` settings the file leaves to the AWS environment variables and
/// the environment sets: (key, value, variable).
fn s3_from_env(file: &S3Settings) -> Vec<(String, String, &'static str)> {
    let var = |k: &'static str| std::env::var(k).ok().filter(|v| !v.is_empty()).map(|v| (k, v));
    let candidates = [
        (
            file.endpoint.is_none(),
            "endpoint",
            var("AWS_ENDPOINT_URL").or_else(|| var("AWS_ENDPOINT")),
            false,
        ),
        (
            file.access_key_id.is_none(),
            "access_key_id",
            var("AWS_ACCESS_KEY_ID"),
            false,
        ),
        (
            file.secret_access_key.is_none(),
            "secret_access_key",
            var("AWS_SECRET_ACCESS_KEY"),
            true,
        ),
        (
            file.session_token.is_none(),
            "session_token",
            var("AWS_SESSION_TOKEN"),
            true,
        ),
        (
            file.region.is_none(),
            "region",
            var("AWS_REGION").or_else(|| var("AWS_DEFAULT_REGION")),
            false,
        ),
        (file.allow_http.is_none(), "allow_http", var("AWS_ALLOW_HTTP"), false),
    ];
    candidates
        .into_iter()
        .filter_map(|(unset, key, found, secret)| {
            let (var, value) = found.filter(|_| unset)?;
            let value = if secret { "\"***\"".to_string() } else { quoted(value) };
            Some((format!("s3.{key}"), value, var))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_settings_get_the_deployment_defaults_and_say_so() {
        let gib = 1u64 << 30;
        let effective = Effective::from_file(None)
            .unwrap()
            .with_deployment_defaults(Some(24 * gib));
        let c = &effective.config;
        assert_eq!(c.admin, Some(DEFAULT_ADMIN.parse().unwrap()));
        assert_eq!(c.memory_budget, 6 * gib);
        assert_eq!(c.query_memory_limit, 6 * gib);
        assert_eq!(c.page_memory_budget, 768 << 20);
        assert_eq!(c.metadata_budget, 384 << 20);
        assert_eq!(
            effective.source("memory_budget"),
            Source::Machine("1/4 of 24 GiB".into())
        );
        assert_eq!(effective.source("disk_budget"), Source::Default);
        let listing = effective.listing();
        assert!(
            listing.contains("memory_budget = \"6 GiB\"  # default: 1/4 of 24 GiB\n"),
            "{listing}"
        );
        assert!(listing.contains("admin = \"127.0.0.1:9090\"  # default\n"), "{listing}");
        assert!(effective.budgets().starts_with("memory 6 GiB (default: 1/4 of 24 GiB)"));
    }

    #[test]
    fn what_the_file_or_a_flag_sets_is_kept_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("silt.toml");
        std::fs::write(
            &file,
            "admin = \"off\"\nmemory_budget = \"2GiB\"\n[store]\nretries = 2\n[tables.t]\nurl = \"file:///d/\"\n",
        )
        .unwrap();
        let mut effective = Effective::from_file(Some(&file)).unwrap();
        effective.set("query_memory_limit", Some(1u64 << 30), Source::Flag, |c, v| {
            c.query_memory_limit = v
        });
        effective.set(
            "auth_token",
            Some("t".to_string()),
            Source::Env("SILT_AUTH_TOKEN"),
            |c, v| c.auth_token = Some(v),
        );
        let effective = effective.with_deployment_defaults(Some(64 << 30));
        let c = &effective.config;
        assert_eq!(c.admin, None, "off in the file stays off");
        assert_eq!(c.memory_budget, 2 << 30);
        assert_eq!(c.query_memory_limit, 1 << 30);
        let listing = effective.listing();
        for line in [
            "admin = \"off\"  # file",
            "memory_budget = \"2 GiB\"  # file",
            "query_memory_limit = \"1 GiB\"  # flag",
            "store.retries = 2  # file",
            "tables.t.url = \"file:///d/\"  # file",
            "auth_token = \"***\"  # environment SILT_AUTH_TOKEN",
            "page_memory_budget = \"2 GiB\"  # default: 1/32 of 64 GiB",
            "metadata_budget = \"1 GiB\"  # default: 1/64 of 64 GiB",
        ] {
            assert!(listing.contains(&format!("{line}\n")), "{line} in:\n{listing}");
        }
    }

    #[test]
    fn without_a_known_memory_the_fixed_budgets_stay() {
        let effective = Effective::from_file(None).unwrap().with_deployment_defaults(None);
        assert_eq!(effective.config.memory_budget, ServerConfig::default().memory_budget);
        assert_eq!(effective.source("memory_budget"), Source::Default);
    }
}
