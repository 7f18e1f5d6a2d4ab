//! Server configuration: a TOML file and command-line overrides.
//!
//! ```toml
//! listen = "127.0.0.1:50051"      # Flight SQL (gRPC)
//! admin = "127.0.0.1:9090"        # HTTP: /health, /metrics, dashboard (the default for `silt serve`; "off" disables it)
//! cache_dir = "/var/cache/silt"  # disk tier, spill files (default: $XDG_CACHE_HOME/silt, else ~/.cache/silt)
//! memory_budget = "1GiB"          # memory tier: decoded column batches (`silt serve`: 1/4 of memory)
//! memory_form = "liquid"          # liquid | arrow
//! transcode_inline_after = "64MiB" # Arrow waiting for the transcoder beyond which scans encode inline
//! page_memory_budget = "256MiB"   # page buffer: object bytes in memory (`silt serve`: 1/32 of memory, at most 4GiB)
//! disk_budget = "100GiB"          # disk tier: region files under cache_dir/disk
//! squeeze_share = 0.25            # of disk_budget: liquid chunks the memory tier evicts, kept encoded (cache_dir/squeezed); 0: off
//! squeeze_ahead = true            # also write each liquid chunk there once transcoded: the memory tier survives a restart
//! metadata_budget = "256MiB"      # decoded footers and page indexes (`silt serve`: 1/64 of memory, at most 2GiB)
//! page_size = "64KiB"
//! disk_policy = "weighted-lfu"    # lru | lfu | sieve | weighted-lfu | s3-fifo
//! memory_policy = "s3-fifo"       # orders the memory tier's batches no scan has reserved
//! plan_aware = false              # evict what registered scans will still read last (off: see bench mixed)
//! plan_horizon = "queued"         # which scans reserve: queued (all registered) | running
//! max_concurrent_queries = 64     # queries executing at once (0: no limit); the rest queue
//! direct_io = true                # disk tier bypasses the OS page cache (O_DIRECT)
//! memory_pressure_floor = "1GiB"  # below this much free memory the memory tier shrinks (0: never)
//! query_memory_limit = "4GiB"     # per query (DataFusion memory pool; `silt serve`: 1/4 of memory)
//! query_timeout = "5m"
//! drain_timeout = "25s"           # on SIGTERM: new queries refused, running ones get this long to finish
//! auth_token = "secret"           # or SILT_AUTH_TOKEN
//! tls_cert = "/etc/silt/cert.pem" # TLS on both listeners (with tls_key)
//! tls_key = "/etc/silt/key.pem"
//! allow_insecure = false          # token over plaintext off loopback: refused unless true
//! otlp_endpoint = "http://127.0.0.1:4318"  # OpenTelemetry traces (OTLP/HTTP)
//!
//! [s3_api]                        # the S3-compatible read API (SigV4)
//! listen = "127.0.0.1:9000"       # its own listener, API at the root (also /s3 on admin)
//! access_key_id = "silt-reader"
//! secret_access_key = "change-me"
//!
//! [cluster]                       # a fleet of servers over the same tables
//! servers = ["http://a:50051", "http://b:50051"]  # every member's Flight URL (clients place by these)
//! admin = ["http://a:9090", "http://b:9090"]      # their admin listeners, same order (S3 GETs forwarded)
//! self = "http://a:50051"         # this member (default: the entry whose host:port is `listen`)
//! ca_cert = "/etc/silt/ca.pem"    # trust for https:// admin URLs (default: tls_cert)
//!
//! [s3]                            # defaults for every s3:// table
//! endpoint = "http://127.0.0.1:9000"
//!
//! [gcs]                           # every gs:// table: object_store's GCS keys (over GOOGLE_*)
//! service_account_path = "/etc/silt/gcs.json"
//!
//! [azure]                         # every az:// / abfs(s):// table: object_store's Azure keys (over AZURE_*)
//! account_name = "lake"
//! access_key = "..."
//!
//! [store]                         # object-store access (all tables)
//! retries = 5                     # attempts per request, first included
//! request_timeout = "30s"
//! # testing only: simulate a slow or flaky store
//! latency = "20ms"
//! mbps = 100
//! fail_rate = 0.0
//! truncate_rate = 0.0
//!
//! [tables.hits_raw]
//! url = "s3://bucket/hits/"
//! binary_as_string = true
//! validation = "always"           # or "ttl=30s", "immutable", "notify", "notify,sweep=60s"
//! [tables.hits_raw.s3]            # per-table override (also [tables.NAME.gcs], [tables.NAME.azure])
//! region = "eu-west-1"
//!
//! [views]
//! hits = "SELECT * EXCEPT (\"EventDate\"), CAST(CAST(\"EventDate\" AS INTEGER) AS DATE) AS \"EventDate\" FROM hits_raw"
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use silt_cache::Freshness;
use silt_cache::MemoryForm;
use silt_cache::policy::PolicyKind;
use silt_store::{Cloud, CloudSettings, FaultConfig, RetryPolicy, S3Settings, StoreSettings, TableLocation};

use crate::error::{ConfigError, ServerError, SizeError};

/// How long a drain waits for running queries by default: long enough for
/// interactive queries, short of orchestrators' usual grace period before
/// they kill (Kubernetes: 30 s; give it `terminationGracePeriodSeconds`
/// above `drain_timeout`).
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(25);

/// Everything `silt serve` needs to run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Flight SQL address.
    pub listen: SocketAddr,
    /// Admin HTTP address (`/health`, `/metrics`, dashboard); none (`"off"`
    /// in a file) disables it. `silt serve` listens on [`DEFAULT_ADMIN`]
    /// unless told otherwise ([`crate::settings`]); an embedding process
    /// (tests, the benchmark harness) picks its own.
    #[serde(deserialize_with = "de_listener")]
    pub admin: Option<SocketAddr>,
    /// Directory for the server's local state: the disk tier, spill files
    /// ([`default_cache_dir`] unless set).
    pub cache_dir: PathBuf,
    /// Byte budget of the memory tier (decoded column batches, counted by
    /// their real buffer sizes).
    #[serde(deserialize_with = "de_bytes")]
    pub memory_budget: u64,
    /// Form of the memory tier's columns: `liquid` (transcoded in the
    /// background, filterable without decoding) or `arrow` (decoded only).
    #[serde(deserialize_with = "de_from_str")]
    pub memory_form: MemoryForm,
    /// With the liquid form: bytes of admitted Arrow waiting for the
    /// background transcoder beyond which further admissions are encoded on
    /// the scan's own thread (a wide cold scan then never piles up Arrow).
    /// 0 encodes every admission inline.
    #[serde(deserialize_with = "de_bytes")]
    pub transcode_inline_after: u64,
    /// Byte budget of the page buffer: object bytes held in memory in front
    /// of the disk tier (footers, pages read by several queries at once).
    #[serde(deserialize_with = "de_bytes")]
    pub page_memory_budget: u64,
    /// Byte budget of the disk tier (region files under `cache_dir/disk`); 0 disables it.
    #[serde(deserialize_with = "de_bytes")]
    pub disk_budget: u64,
    /// With the liquid form: the share of `disk_budget` given to squeezed
    /// chunks (liquid chunks the memory tier evicted, kept on disk in their
    /// encoded form under `cache_dir/squeezed`: `silt_cache::squeeze`); the
    /// page tier gets the rest. 0 drops evicted chunks instead.
    pub squeeze_share: f64,
    /// With squeezing on: also write each liquid chunk a scan admitted
    /// whole to the squeeze tier once all its batches are liquid, not only
    /// when evicted (`silt_cache`'s `squeeze_ahead`), so the memory tier's
    /// transcoded chunks survive a restart or a kill -9 and eviction costs
    /// no write. Off: written at eviction only.
    pub squeeze_ahead: bool,
    /// Byte budget of the metadata tier (decoded footers and page indexes).
    #[serde(deserialize_with = "de_bytes")]
    pub metadata_budget: u64,
    /// Page size of the page buffer and disk tier.
    #[serde(deserialize_with = "de_bytes")]
    pub page_size: u64,
    /// Eviction policy of the disk tier.
    #[serde(deserialize_with = "de_from_str")]
    pub disk_policy: PolicyKind,
    /// Eviction policy of the memory tier's batches that no registered scan
    /// still needs (`Cached`).
    #[serde(deserialize_with = "de_from_str")]
    pub memory_policy: PolicyKind,
    /// Plan-aware eviction in the memory and disk tiers: what the scan sets
    /// of planned and queued queries will read (`Reserved`) is evicted last.
    /// Off by default: in `silt bench mixed` (8 clients, budgets half the
    /// working set) it cost store GETs against the same policy alone
    /// (`docs/results/mixed-sf1-hits1m-p64k`: 2232 vs 716 over sieve), since
    /// remaining-scan counts of queued queries are a poor proxy for next use.
    pub plan_aware: bool,
    /// Which registered scans reserve what they will read when `plan_aware`:
    /// `queued` (every registered scan, Column Cache's rule) or `running`
    /// (only executing ones; queued queries' segments are evicted by the
    /// policy like any other).
    #[serde(deserialize_with = "de_from_str")]
    pub plan_horizon: silt_cache::PlanHorizon,
    /// Queries executing at once; planned queries beyond it wait for a slot
    /// (their scan sets already registered). 0: no limit.
    pub max_concurrent_queries: usize,
    /// Read and write disk pages with O_DIRECT, so the OS page cache holds
    /// no second copy (falls back to buffered I/O with a warning where the
    /// filesystem refuses it).
    pub direct_io: bool,
    /// Memory the machine (or the server's cgroup) should keep available:
    /// below it the memory tier's budget is lowered by the shortfall, and
    /// given back once there is room ([`crate::memory_pressure`]). 0 never shrinks.
    #[serde(deserialize_with = "de_bytes")]
    pub memory_pressure_floor: u64,
    /// Object-store access: retries, timeouts, injected faults.
    pub store: StoreConfig,
    /// Memory one query may use before it fails (or spills).
    #[serde(deserialize_with = "de_bytes")]
    pub query_memory_limit: u64,
    /// A query running longer than this is cancelled.
    #[serde(with = "humantime_serde_compat")]
    pub query_timeout: Duration,
    /// How long a drain (`silt serve` on SIGTERM, [`crate::drain`]) waits
    /// for running queries before the server stops anyway.
    #[serde(with = "humantime_serde_compat")]
    pub drain_timeout: Duration,
    /// How long start-up waits for the tables to register before serving;
    /// tables still registering (a slow or dead bucket) then finish in the
    /// background and are "unavailable" until they do.
    #[serde(with = "humantime_serde_compat")]
    pub registration_wait: Duration,
    /// When set, every Flight call must carry `authorization: Bearer <token>`.
    pub auth_token: Option<String>,
    /// PEM certificate chain served by the Flight and admin listeners (TLS
    /// 1.2/1.3, rustls); with `tls_key`. Clients then connect with
    /// `grpc+tls://` (Flight) and `https://` (admin).
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// Let the auth token cross a plaintext listener on a non-loopback
    /// address (refused by default: anyone on the path could read it).
    pub allow_insecure: bool,
    /// Send OpenTelemetry traces (a span per query, its stages, row groups
    /// and store requests) over OTLP/HTTP to this collector, e.g.
    /// `http://127.0.0.1:4318`. Read by `silt serve`, which owns the
    /// process's tracing subscriber.
    pub otlp_endpoint: Option<String>,
    /// The S3-compatible read API: its own listener and its keys.
    pub s3_api: S3ApiConfig,
    /// The fleet this server is a member of, if any.
    pub cluster: ClusterConfig,
    /// Defaults for every `s3://` table (over the AWS environment variables).
    pub s3: S3Settings,
    /// Defaults for every `gs://` table: object_store's GCS keys (over the
    /// `GOOGLE_*` environment variables).
    pub gcs: CloudSettings,
    /// Defaults for every `az://`, `abfs://`, `abfss://` table:
    /// object_store's Azure keys (over the `AZURE_*` environment variables).
    pub azure: CloudSettings,
    /// Registered tables by name.
    pub tables: BTreeMap<String, TableConfig>,
    /// Views by name: a SELECT over registered tables.
    pub views: BTreeMap<String, String>,
    /// Table catalogs by name (`[catalogs.NAME]`): their tables are served
    /// as `NAME.namespace.table`.
    pub catalogs: BTreeMap<String, CatalogConfig>,
}

/// An Iceberg REST catalog whose tables Silt serves (`[catalogs.NAME]`,
/// `type = "iceberg-rest"`). Each table of `tables` is registered as
/// `NAME.namespace.table`; its current metadata file is the catalog's
/// load-table answer, read once per query under `always` (the query's one
/// metadata read), and its files are read from the table's store with the
/// catalog's store settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogConfig {
    /// `iceberg-rest` (the only kind so far).
    #[serde(rename = "type")]
    pub kind: String,
    /// The catalog's base URI (what `/v1/config` is below).
    pub uri: String,
    /// The warehouse to ask the catalog for, if it serves several.
    #[serde(default)]
    pub warehouse: Option<String>,
    /// A bearer token for the catalog, if it needs one.
    #[serde(default)]
    pub token: Option<String>,
    /// The tables to serve, as `namespace.table` (the catalog's listing
    /// endpoints are not used: a catalog may not offer them).
    pub tables: Vec<String>,
    /// S3 settings for the catalog's warehouse (over the server's).
    #[serde(default)]
    pub s3: S3Settings,
    /// How often each table's pointer is read again: as a table's.
    #[serde(default, deserialize_with = "de_from_str")]
    pub validation: Freshness,
}

/// A table of a REST catalog, as the registry registers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogTable {
    pub catalog: String,
    pub uri: String,
    pub warehouse: Option<String>,
    pub token: Option<String>,
    pub namespace: String,
    pub table: String,
}

/// One table: where its Parquet files are and how to read them.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableConfig {
    /// `file:///abs/dir/`, `file:///abs/file.parquet`, `s3://bucket/prefix/`,
    /// `gs://bucket/prefix/`, `az://container/prefix/` (or `abfs://`,
    /// `abfss://`); a trailing `/` means every `*.parquet` under it.
    pub url: String,
    /// Read BINARY columns as strings.
    #[serde(default)]
    pub binary_as_string: bool,
    /// Per-table S3 overrides.
    #[serde(default)]
    pub s3: S3Settings,
    /// Per-table GCS overrides (object_store keys).
    #[serde(default)]
    pub gcs: CloudSettings,
    /// Per-table Azure overrides (object_store keys).
    #[serde(default)]
    pub azure: CloudSettings,
    /// How often the table's objects are revalidated: `always`, `ttl=30s`,
    /// `immutable`, or `notify` (`notify,sweep=60s`): when the store says
    /// they changed (inotify, S3 event notifications), and after the sweep.
    #[serde(default, deserialize_with = "de_from_str")]
    pub validation: Freshness,
    /// Set for a table of a `[catalogs.NAME]` REST catalog (never in a
    /// config file: [`ServerConfig::catalog_tables`] makes these).
    #[serde(skip)]
    pub catalog: Option<CatalogTable>,
}

/// The S3-compatible read API: its own listener, and its credentials:
/// requests must be signed (SigV4) with this key pair. Without one, a server
/// with an auth token accepts the key id `silt` with the token as its secret;
/// a server with neither serves unsigned requests.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct S3ApiConfig {
    /// Where the API is served at the root of a listener of its own (path-
    /// and virtual-host-style buckets), for clients that take an endpoint
    /// host and no path; `None`: only under `/s3` on the admin listener.
    pub listen: Option<SocketAddr>,
    /// The access key id clients sign with.
    pub access_key_id: Option<String>,
    /// Its secret access key.
    pub secret_access_key: Option<String>,
}

/// A fleet of servers that serve the same tables (same config but for
/// `self`). Clients place row groups on `servers` by rendezvous hashing;
/// with `admin` or `admin_port` set, a member's S3 API forwards a GET to the
/// member that owns its bytes, so byte readers see one cache
/// ([`crate::s3_api`]). `servers` may name members that change
/// ([`silt_proto::membership`]: `file:///path`, `dns://name:port`); the
/// server follows them ([`crate::cluster`]).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Every member's Flight URL, spelled the same for every member and
    /// client (placement hashes the spelling); or entries naming them:
    /// `file:///path` (a file of URLs, re-read when it changes) and
    /// `dns://name:port` (every address the name resolves to).
    pub servers: Vec<String>,
    /// Per member of `servers`, in the same order, its admin listener's
    /// URL (`http://host:port`); empty: GETs are never forwarded (unless
    /// `admin_port`). Only for a list of URLs: a file or a name cannot keep
    /// an order to pair with.
    pub admin: Vec<String>,
    /// Every member's admin listener is on this port of its Flight URL's
    /// host (`https` when the Flight URL is TLS): how members named by a
    /// file or DNS are reached for S3 forwarding. Instead of `admin`.
    pub admin_port: Option<u16>,
    /// This server's entry in `servers`; default: the entry whose
    /// `host:port` is the `listen` address.
    #[serde(rename = "self")]
    pub self_url: Option<String>,
    /// PEM CA certificate the members' admin listeners are trusted by when
    /// they serve TLS (`https://` in `admin`), besides the system's roots;
    /// default: this server's own `tls_cert` (a fleet sharing one
    /// certificate or CA needs nothing more).
    pub ca_cert: Option<PathBuf>,
}

impl ClusterConfig {
    /// The index of this server in `servers`, listening on `listen`.
    pub fn self_index(&self, listen: SocketAddr) -> Result<usize, ServerError> {
        self.self_among(&self.servers, listen)
    }

    /// Whether `servers` names members that can change (a file, a DNS name).
    pub fn is_dynamic(&self) -> bool {
        self.servers
            .iter()
            .any(|s| silt_proto::membership::Source::names_members(s))
    }

    /// The index of this server (`self`, else the one listening on
    /// `listen`) among `members`, URLs as `servers` names them now.
    pub fn self_among(&self, members: &[String], listen: SocketAddr) -> Result<usize, ServerError> {
        let normalize = silt_proto::placement::member_name;
        if let Some(me) = &self.self_url {
            return members
                .iter()
                .position(|s| normalize(s) == normalize(me))
                .ok_or_else(|| ConfigError::SelfNotAMember { self_url: me.clone() }.into());
        }
        let matches: Vec<usize> = (0..members.len())
            .filter(|&i| {
                let s = normalize(&members[i]);
                let authority = s.split_once("://").map_or(s.as_str(), |(_, rest)| rest);
                authority.parse::<SocketAddr>().is_ok_and(|a| a == listen)
                    || authority == format!("localhost:{}", listen.port()) && listen.ip().is_loopback()
            })
            .collect();
        match matches.as_slice() {
            [i] => Ok(*i),
            _ => Err(ConfigError::SelfUnknown { listen }.into()),
        }
    }

    fn validate(&self) -> Result<(), ServerError> {
        if !self.admin.is_empty() && self.is_dynamic() {
            return Err(ConfigError::AdminWithMembership.into());
        }
        if !self.admin.is_empty() && self.admin_port.is_some() {
            return Err(ConfigError::AdminTwice.into());
        }
        if !self.admin.is_empty() && self.admin.len() != self.servers.len() {
            return Err(ConfigError::AdminCount {
                admin: self.admin.len(),
                servers: self.servers.len(),
            }
            .into());
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(twice) = self
            .servers
            .iter()
            .find(|s| !seen.insert(silt_proto::placement::member_name(s)))
        {
            return Err(ConfigError::RepeatedMember { url: twice.clone() }.into());
        }
        for url in self.admin.iter().chain(&self.servers) {
            if silt_proto::membership::Source::names_members(url) {
                continue;
            }
            if url::Url::parse(url).is_err() {
                return Err(ConfigError::NotAUrl { url: url.clone() }.into());
            }
        }
        Ok(())
    }
}

/// The key id a server with only an auth token accepts (its secret is the token).
pub const TOKEN_ACCESS_KEY_ID: &str = "silt";

impl ServerConfig {
    /// The key pair S3 requests must be signed with: `[s3_api]`'s keys, else
    /// (`silt`, auth token); `None` when neither is set (unsigned requests are served).
    pub fn s3_api_key(&self) -> Option<(String, String)> {
        match (&self.s3_api.access_key_id, &self.s3_api.secret_access_key) {
            (Some(id), Some(secret)) => Some((id.clone(), secret.clone())),
            _ => self
                .auth_token
                .as_ref()
                .filter(|t| !t.is_empty())
                .map(|t| (TOKEN_ACCESS_KEY_ID.to_string(), t.clone())),
        }
    }
}

/// How the server talks to object stores.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Attempts per request, the first included.
    pub retries: u32,
    /// Deadline of one request attempt, body included.
    #[serde(with = "humantime_serde_compat")]
    pub request_timeout: Duration,
    /// Deadline of one request with all its retries (at least
    /// `request_timeout`).
    #[serde(with = "humantime_serde_compat")]
    pub total_timeout: Duration,
    /// Testing: latency added to every request.
    #[serde(with = "humantime_serde_compat")]
    pub latency: Duration,
    /// Testing: bandwidth of the link to the store in megabytes (10^6 B) per second.
    pub mbps: Option<f64>,
    /// Testing: fraction of GETs and HEADs that fail transiently.
    pub fail_rate: f64,
    /// Testing: fraction of GET bodies cut short.
    pub truncate_rate: f64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        let retry = RetryPolicy::default();
        StoreConfig {
            retries: retry.attempts,
            request_timeout: retry.request_timeout,
            total_timeout: retry.total_timeout,
            latency: Duration::ZERO,
            mbps: None,
            fail_rate: 0.0,
            truncate_rate: 0.0,
        }
    }
}

impl StoreConfig {
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            attempts: self.retries.max(1),
            request_timeout: self.request_timeout,
            total_timeout: self.total_timeout.max(self.request_timeout),
            ..RetryPolicy::default()
        }
    }

    pub fn faults(&self) -> FaultConfig {
        FaultConfig {
            latency: self.latency,
            bytes_per_second: self.mbps.map(|m| (m * 1e6) as u64),
            fail_rate: self.fail_rate,
            truncate_rate: self.truncate_rate,
            seed: 0x5117,
        }
    }
}

/// Default page size of the page buffer and disk tier: 64 KiB. Pages are
/// the unit a miss fetches, so a scan reads its column chunks widened to
/// page boundaries: with 1 MiB pages a cold TPC-H SF 1 Q1 fetched 98 MB where
/// DataFusion reading the store directly fetched 50 (a column chunk of a few
/// hundred KB dragged up to 2 MiB of neighbours along). 64 KiB bounds that
/// to 128 KiB per chunk; runs of missing pages are still one GET each.
pub const DEFAULT_PAGE_SIZE: u64 = 64 << 10;

/// Where `silt serve`'s admin listener (health, metrics, dashboard) is
/// unless configured: loopback, so nothing is exposed by default.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:9090";

/// The cache directory unless configured: `$XDG_CACHE_HOME/silt`, else
/// `~/.cache/silt` (a cache survives restarts there, and is on disk where
/// `$TMPDIR` is often tmpfs), else `$TMPDIR/silt-cache` without a home.
pub fn default_cache_dir() -> PathBuf {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    cache_dir_from(var("XDG_CACHE_HOME"), var("HOME"))
}

fn cache_dir_from(xdg_cache_home: Option<PathBuf>, home: Option<PathBuf>) -> PathBuf {
    // XDG: a relative $XDG_CACHE_HOME is invalid and ignored.
    match (xdg_cache_home.filter(|p| p.is_absolute()), home) {
        (Some(xdg), _) => xdg.join("silt"),
        (None, Some(home)) => home.join(".cache").join("silt"),
        (None, None) => std::env::temp_dir().join("silt-cache"),
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:50051".parse().expect("static address"),
            admin: None,
            cache_dir: default_cache_dir(),
            memory_budget: 1 << 30,
            memory_form: MemoryForm::Liquid,
            transcode_inline_after: silt_cache::transcoder::INLINE_AFTER_BYTES as u64,
            page_memory_budget: 256 << 20,
            disk_budget: 10 << 30,
            squeeze_share: 0.25,
            squeeze_ahead: true,
            metadata_budget: 256 << 20,
            page_size: DEFAULT_PAGE_SIZE,
            disk_policy: PolicyKind::WeightedLfu,
            memory_policy: PolicyKind::S3Fifo,
            plan_aware: false,
            plan_horizon: silt_cache::PlanHorizon::Queued,
            max_concurrent_queries: 64,
            direct_io: true,
            memory_pressure_floor: 1 << 30,
            store: StoreConfig::default(),
            query_memory_limit: 4 << 30,
            query_timeout: Duration::from_secs(300),
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            registration_wait: Duration::from_secs(30),
            auth_token: None,
            tls_cert: None,
            tls_key: None,
            allow_insecure: false,
            otlp_endpoint: None,
            s3_api: S3ApiConfig::default(),
            cluster: ClusterConfig::default(),
            s3: S3Settings::default(),
            gcs: CloudSettings::default(),
            azure: CloudSettings::default(),
            tables: BTreeMap::new(),
            views: BTreeMap::new(),
            catalogs: BTreeMap::new(),
        }
    }
}

impl ServerConfig {
    /// Read a TOML config file.
    pub fn from_file(path: &Path) -> Result<Self, ServerError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| {
            ConfigError::Parse {
                path: path.to_path_buf(),
                source,
            }
            .into()
        })
    }

    /// Add `NAME=URL` (from `--table`).
    pub fn add_table_arg(&mut self, arg: &str) -> Result<(), ServerError> {
        let (name, url) = split_assignment(arg, "--table NAME=URL")?;
        self.tables.insert(
            name.to_string(),
            TableConfig {
                url: url.to_string(),
                ..Default::default()
            },
        );
        Ok(())
    }

    /// Add `NAME=SQL` (from `--view`).
    pub fn add_view_arg(&mut self, arg: &str) -> Result<(), ServerError> {
        let (name, sql) = split_assignment(arg, "--view NAME=SQL")?;
        self.views.insert(name.to_string(), sql.to_string());
        Ok(())
    }

    /// Whether the listeners serve TLS.
    pub fn tls(&self) -> bool {
        self.tls_cert.is_some()
    }

    /// TLS needs both files; the token never crosses a plaintext
    /// non-loopback listener unless `allow_insecure` says so.
    fn validate_transport(&self) -> Result<(), ServerError> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), Some(_)) | (None, None) => {}
            _ => {
                return Err(ConfigError::TlsHalf.into());
            }
        }
        let has_token = self.auth_token.as_deref().is_some_and(|t| !t.is_empty());
        if has_token && !self.tls() && !self.allow_insecure {
            let exposed = std::iter::once(self.listen)
                .chain(self.admin)
                .chain(self.s3_api.listen)
                .find(|a| !a.ip().is_loopback());
            if let Some(addr) = exposed {
                return Err(ConfigError::PlaintextToken { addr }.into());
            }
        }
        Ok(())
    }

    /// The tables of the `[catalogs]`, by the name they are served as
    /// (`catalog.namespace.table`).
    pub fn catalog_tables(&self) -> Result<BTreeMap<String, TableConfig>, ServerError> {
        let mut tables = BTreeMap::new();
        for (name, catalog) in &self.catalogs {
            let bad = |reason: String| ConfigError::Catalog {
                name: name.clone(),
                reason,
            };
            validate_name(name)?;
            if name.chars().any(|c| c.is_ascii_uppercase()) || ["silt", "datafusion"].contains(&name.as_str()) {
                return Err(
                    bad("name it in lowercase, other than silt and datafusion (SQL names the catalog)".into()).into(),
                );
            }
            if catalog.kind != "iceberg-rest" {
                return Err(bad(format!(
                    "type '{}': Silt serves type = \"iceberg-rest\" catalogs",
                    catalog.kind
                ))
                .into());
            }
            if !(catalog.uri.starts_with("http://") || catalog.uri.starts_with("https://")) {
                return Err(bad(format!("uri '{}' is not an http:// or https:// URL", catalog.uri)).into());
            }
            for full in &catalog.tables {
                let Some((namespace, table)) = full.rsplit_once('.') else {
                    return Err(bad(format!("table '{full}': name it as namespace.table")).into());
                };
                for part in namespace.split('.').chain([table]) {
                    if validate_name(part).is_err() || part.chars().any(|c| c.is_ascii_uppercase()) {
                        return Err(bad(format!("table '{full}': '{part}' is not a plain lowercase name")).into());
                    }
                }
                if namespace.contains('.') {
                    return Err(bad(format!("table '{full}': nested namespaces are not served yet")).into());
                }
                tables.insert(
                    format!("{name}.{full}"),
                    TableConfig {
                        url: format!("iceberg-rest+{}#{full}", catalog.uri),
                        s3: catalog.s3.clone(),
                        validation: catalog.validation,
                        catalog: Some(CatalogTable {
                            catalog: name.clone(),
                            uri: catalog.uri.clone(),
                            warehouse: catalog.warehouse.clone(),
                            token: catalog.token.clone(),
                            namespace: namespace.to_string(),
                            table: table.to_string(),
                        }),
                        ..Default::default()
                    },
                );
            }
        }
        Ok(tables)
    }

    /// Check names and sizes before anything starts.
    pub fn validate(&self) -> Result<(), ServerError> {
        for name in self.tables.keys().chain(self.views.keys()) {
            validate_name(name)?;
        }
        self.catalog_tables()?;
        if let Some(dup) = self.views.keys().find(|v| self.tables.contains_key(*v)) {
            return Err(ConfigError::TableAndView { name: dup.clone() }.into());
        }
        if self.page_size == 0 || self.page_size > (256 << 20) {
            return Err(ConfigError::PageSize {
                page_size: self.page_size,
            }
            .into());
        }
        for (setting, rate) in [
            ("store.fail_rate", self.store.fail_rate),
            ("store.truncate_rate", self.store.truncate_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(ConfigError::Rate { setting, rate }.into());
            }
        }
        if !(0.0..1.0).contains(&self.squeeze_share) {
            return Err(ConfigError::Rate {
                setting: "squeeze_share",
                rate: self.squeeze_share,
            }
            .into());
        }
        if self.store.mbps.is_some_and(|m| m <= 0.0 || !m.is_finite()) {
            return Err(ConfigError::NotPositive { setting: "store.mbps" }.into());
        }
        if self.store.request_timeout.is_zero() {
            return Err(ConfigError::NotPositive {
                setting: "store.request_timeout",
            }
            .into());
        }
        if self.query_timeout.is_zero() {
            return Err(ConfigError::NotPositive {
                setting: "query_timeout",
            }
            .into());
        }
        self.validate_transport()?;
        self.cluster.validate()?;
        if !self.cluster.admin.is_empty() {
            self.cluster.self_index(self.listen)?;
        }
        match (&self.s3_api.access_key_id, &self.s3_api.secret_access_key) {
            (Some(id), Some(secret)) if !id.is_empty() && !secret.is_empty() => {}
            (None, None) => {}
            _ => {
                return Err(ConfigError::S3ApiKeys.into());
            }
        }
        self.validate_stores()
    }

    /// Refuses `memory://` tables, and `[gcs]`/`[azure]` keys (the
    /// server's or a table's) that object_store does not know.
    fn validate_stores(&self) -> Result<(), ServerError> {
        let check = |context: &str, cloud: Cloud, settings: &CloudSettings| {
            cloud.check_keys(settings).map_err(|source| ConfigError::StoreSetting {
                context: context.to_string(),
                source,
            })
        };
        check("server", Cloud::Gcs, &self.gcs)?;
        check("server", Cloud::Azure, &self.azure)?;
        for (name, table) in &self.tables {
            let context = format!("table '{name}'");
            check(&context, Cloud::Gcs, &table.gcs)?;
            check(&context, Cloud::Azure, &table.azure)?;
            if TableLocation::parse(&table.url).is_ok_and(|l| l.url.scheme() == "memory") {
                return Err(ConfigError::MemoryTable { name: name.clone() }.into());
            }
        }
        Ok(())
    }

    /// The store settings of `table`: its own over the server's over the
    /// environment (S3's here; GCS's and Azure's read by their builders).
    pub fn store_settings(&self, table: &TableConfig) -> StoreSettings {
        StoreSettings {
            s3: table.s3.or(&self.s3.or(&S3Settings::from_env())),
            gcs: table.gcs.or(&self.gcs),
            azure: table.azure.or(&self.azure),
        }
    }
}

fn split_assignment<'a>(arg: &'a str, what: &'static str) -> Result<(&'a str, &'a str), ServerError> {
    let (name, value) = arg.split_once('=').ok_or_else(|| ConfigError::Assignment {
        what,
        arg: arg.to_string(),
    })?;
    let name = name.trim();
    validate_name(name)?;
    Ok((name, value.trim()))
}

/// Table and view names are plain identifiers, so they never need quoting
/// and cannot smuggle SQL.
pub fn validate_name(name: &str) -> Result<(), ServerError> {
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::InvalidName { name: name.to_string() }.into())
    }
}

/// Parse a byte size: `1048576`, `512KiB`, `64MiB`, `1GiB`, `1.5GB`, `10k`.
pub fn parse_bytes(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| SizeError::Number { input: s.to_string() })?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        "t" | "tb" => 1_000_000_000_000,
        "tib" => 1 << 40,
        other => {
            return Err(SizeError::Unit {
                unit: other.to_string(),
                input: s.to_string(),
            });
        }
    };
    Ok((value * mult as f64).round() as u64)
}

fn de_from_str<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

/// A listener address, or `"off"` for none.
fn de_listener<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    parse_listener(&s).map_err(serde::de::Error::custom)
}

/// `ADDR` (`127.0.0.1:9090`), or `off` for no listener.
pub fn parse_listener(s: &str) -> Result<Option<SocketAddr>, String> {
    if s.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    s.trim()
        .parse()
        .map(Some)
        .map_err(|e| format!("'{s}' is neither an address (127.0.0.1:9090) nor off: {e}"))
}

fn de_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        N(u64),
        S(String),
    }
    match Size::deserialize(d)? {
        Size::N(n) => Ok(n),
        Size::S(s) => parse_bytes(&s).map_err(serde::de::Error::custom),
    }
}

mod humantime_serde_compat {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_dir_follows_xdg_then_home() {
        let p = PathBuf::from;
        assert_eq!(cache_dir_from(Some(p("/x")), Some(p("/h"))), p("/x/silt"));
        assert_eq!(cache_dir_from(None, Some(p("/h"))), p("/h/.cache/silt"));
        assert_eq!(
            cache_dir_from(Some(p("relative")), Some(p("/h"))),
            p("/h/.cache/silt"),
            "a relative XDG_CACHE_HOME is ignored"
        );
        assert_eq!(cache_dir_from(None, None), std::env::temp_dir().join("silt-cache"));
    }

    #[test]
    fn the_admin_listener_can_be_turned_off_in_a_file() {
        let off: ServerConfig = toml::from_str(r#"admin = "off""#).unwrap();
        assert_eq!(off.admin, None);
        let on: ServerConfig = toml::from_str(r#"admin = "127.0.0.1:9191""#).unwrap();
        assert_eq!(on.admin, Some("127.0.0.1:9191".parse().unwrap()));
        let err = toml::from_str::<ServerConfig>(r#"admin = "nowhere""#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("neither an address"), "{err}");
    }

    #[test]
    fn a_cluster_section_names_this_server_and_its_peers() {
        let text = r#"
            listen = "127.0.0.1:50052"
            [cluster]
            servers = ["http://127.0.0.1:50051", "grpc://127.0.0.1:50052", "http://127.0.0.1:50053"]
            admin = ["http://127.0.0.1:9091", "http://127.0.0.1:9092", "http://127.0.0.1:9093"]
        "#;
        let config: ServerConfig = toml::from_str(text).unwrap();
        config.validate().unwrap();
        assert_eq!(
            config.cluster.self_index(config.listen).unwrap(),
            1,
            "found by --listen"
        );
        let mut named = config.clone();
        named.cluster.self_url = Some("http://127.0.0.1:50053".into());
        assert_eq!(named.cluster.self_index(named.listen).unwrap(), 2, "cluster.self wins");
        named.cluster.self_url = Some("http://elsewhere:1".into());
        assert!(named.validate().is_err(), "self must be a member");
        let mut short = config.clone();
        short.cluster.admin.pop();
        let err = short.validate().unwrap_err().to_string();
        assert!(err.contains("one per server"), "{err}");
        let mut stranger = config.clone();
        stranger.listen = "127.0.0.1:60000".parse().unwrap();
        assert!(
            stranger.validate().is_err(),
            "a server that is no member must say which it is"
        );
        // Members from a file or a name: admin listeners by port only, and
        // this server need not be listed yet.
        let mut dynamic = config.clone();
        dynamic.cluster.servers = vec!["file:///etc/silt/members".into(), "dns://silt.svc:50051".into()];
        let err = dynamic.validate().unwrap_err().to_string();
        assert!(err.contains("admin_port"), "{err}");
        dynamic.cluster.admin.clear();
        dynamic.cluster.admin_port = Some(9090);
        dynamic.validate().unwrap();
        let mut both = config.clone();
        both.cluster.admin_port = Some(9090);
        assert!(both.validate().is_err(), "admin and admin_port");
        let mut twice = config;
        twice.cluster.servers[2] = "http://127.0.0.1:50051/".into();
        let err = twice.validate().unwrap_err().to_string();
        assert!(err.contains("twice"), "{err}");
    }

    #[test]
    fn the_token_needs_tls_off_loopback() {
        let mut cfg = ServerConfig {
            listen: "0.0.0.0:50051".parse().unwrap(),
            auth_token: Some("t".into()),
            ..Default::default()
        };
        let err = cfg.validate().unwrap_err().to_string();
        assert!(
            err.contains("--allow-insecure") && err.contains("0.0.0.0:50051"),
            "{err}"
        );
        cfg.allow_insecure = true;
        cfg.validate().unwrap();
        cfg.allow_insecure = false;
        cfg.tls_cert = Some("cert.pem".into());
        assert!(cfg.validate().unwrap_err().to_string().contains("tls_key"));
        cfg.tls_key = Some("key.pem".into());
        cfg.validate().unwrap();
        let loopback = ServerConfig {
            admin: Some("127.0.0.1:9090".parse().unwrap()),
            auth_token: Some("t".into()),
            ..Default::default()
        };
        loopback.validate().unwrap();
    }

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_bytes("1024").unwrap(), 1024);
        assert_eq!(parse_bytes("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("1.5 GB").unwrap(), 1_500_000_000);
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("").is_err());
    }

    #[test]
    fn parses_a_config_file() {
        let cfg: ServerConfig = toml::from_str(
            r#"
            listen = "127.0.0.1:1"
            memory_budget = "10MiB"
            query_timeout = "30s"
            disk_policy = "sieve"
            [s3]
            endpoint = "http://127.0.0.1:9000"
            [store]
            latency = "20ms"
            mbps = 100
            [tables.hits_raw]
            url = "s3://b/hits/"
            binary_as_string = true
            validation = "ttl=30s"
            [tables.hits_raw.s3]
            region = "eu"
            [views]
            hits = "SELECT * FROM hits_raw"
            "#,
        )
        .unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.memory_budget, 10 << 20);
        assert_eq!(cfg.query_timeout, Duration::from_secs(30));
        assert!(cfg.tables["hits_raw"].binary_as_string);
        assert_eq!(cfg.tables["hits_raw"].s3.region.as_deref(), Some("eu"));
        assert_eq!(cfg.views["hits"], "SELECT * FROM hits_raw");
        assert_eq!(cfg.disk_policy, PolicyKind::Sieve);
        assert_eq!(
            cfg.tables["hits_raw"].validation,
            Freshness::Ttl(Duration::from_secs(30))
        );
        assert_eq!(cfg.store.faults().bytes_per_second, Some(100_000_000));
        assert_eq!(cfg.store.faults().latency, Duration::from_millis(20));
        let bad = toml::from_str::<ServerConfig>("[tables.t]\nurl = \"file:///x/\"\nvalidation = \"sometimes\"");
        assert!(bad.unwrap_err().to_string().contains("sometimes"));
    }

    #[test]
    fn s3_api_keys_come_from_the_config_else_the_token() {
        let cfg: ServerConfig =
            toml::from_str("auth_token = \"t\"\n[s3_api]\naccess_key_id = \"ak\"\nsecret_access_key = \"sk\"").unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.s3_api_key(), Some(("ak".into(), "sk".into())));
        let token_only = ServerConfig {
            auth_token: Some("t".into()),
            ..Default::default()
        };
        assert_eq!(token_only.s3_api_key(), Some(("silt".into(), "t".into())));
        assert_eq!(ServerConfig::default().s3_api_key(), None);
        let half: ServerConfig = toml::from_str("[s3_api]\naccess_key_id = \"ak\"").unwrap();
        assert!(half.validate().is_err());
        assert!(toml::from_str::<ServerConfig>("[s3_api]\nregion = \"x\"").is_err());
    }

    #[test]
    fn rejects_bad_names_and_unknown_keys() {
        let mut cfg = ServerConfig::default();
        assert!(cfg.add_table_arg("bad name=file:///x").is_err());
        assert!(cfg.add_table_arg("noequals").is_err());
        assert!(cfg.add_table_arg("1x=file:///x").is_err());
        cfg.add_table_arg("ok_1=file:///x/").unwrap();
        assert!(toml::from_str::<ServerConfig>("bogus = 1").is_err());
    }
}
