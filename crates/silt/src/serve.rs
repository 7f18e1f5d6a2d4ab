//! `silt serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use silt_cache::MemoryForm;
use silt_cache::policy::PolicyKind;
use silt_server::ServerConfig;
use silt_server::config::parse_bytes;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Flight SQL (gRPC) address [default: 127.0.0.1:50051].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Admin HTTP address for /health, /metrics, /stats and the S3 read API under /s3 [default: off].
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// S3 API address: the tables as buckets at the root, path- or
    /// virtual-host-style (Host: TABLE.localhost:PORT) [default: off].
    #[arg(long, value_name = "ADDR")]
    s3_listen: Option<SocketAddr>,
    /// Directory for the server's local state.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Register a table: NAME=URL (file:///abs/dir/, file:///abs/f.parquet,
    /// s3://bucket/prefix/, gs://bucket/prefix/, az://container/prefix/,
    /// abfss://container@account.dfs.core.windows.net/prefix/). Repeatable.
    #[arg(long = "table", value_name = "NAME=URL")]
    tables: Vec<String>,
    /// Define a view: NAME=SQL over registered tables. Repeatable.
    #[arg(long = "view", value_name = "NAME=SQL")]
    views: Vec<String>,
    /// TOML config file (the same settings plus per-table options).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Require `authorization: Bearer TOKEN` on every Flight call; S3 API
    /// requests must then be signed with key id `silt` and this secret
    /// (unless `[s3_api]` keys are configured).
    #[arg(long, env = "SILT_AUTH_TOKEN", hide_env_values = true)]
    auth_token: Option<String>,
    /// Memory tier budget (decoded column batches), e.g. 2GiB [default: 1GiB].
    #[arg(long, value_parser = parse_bytes)]
    memory_budget: Option<u64>,
    /// Form of the memory tier's columns: liquid (compressed, filters run on it) or arrow [default: liquid].
    #[arg(long)]
    memory_form: Option<MemoryForm>,
    /// Page buffer budget (object bytes in memory, in front of the disk tier) [default: 256MiB].
    #[arg(long, value_parser = parse_bytes)]
    page_memory_budget: Option<u64>,
    /// Disk tier budget (region files under the cache dir), e.g. 100GiB; 0 disables the disk tier.
    #[arg(long, value_parser = parse_bytes)]
    disk_budget: Option<u64>,
    /// Metadata tier budget (decoded Parquet footers and page indexes).
    #[arg(long, value_parser = parse_bytes)]
    metadata_budget: Option<u64>,
    /// Page size of the page buffer and disk tier: the fetch and storage unit [default: 64KiB].
    #[arg(long, value_parser = parse_bytes)]
    page_size: Option<u64>,
    /// Eviction policy of the disk tier: lru, lfu, sieve, weighted-lfu, s3-fifo [default: weighted-lfu].
    #[arg(long)]
    disk_policy: Option<PolicyKind>,
    /// Eviction policy of the memory tier's batches no planned scan still needs [default: s3-fifo].
    #[arg(long)]
    memory_policy: Option<PolicyKind>,
    /// Plan-aware eviction: what planned and queued queries will read is evicted last [default: false].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    plan_aware: Option<bool>,
    /// Which scans reserve under plan-aware eviction: queued (every planned query) or running [default: queued].
    #[arg(long, value_name = "HORIZON")]
    plan_horizon: Option<silt_cache::PlanHorizon>,
    /// Queries executing at once; the rest queue (their scan sets registered). 0: no limit [default: 64].
    #[arg(long, value_name = "N")]
    max_concurrent_queries: Option<usize>,
    /// Free memory to keep: below it the memory tier shrinks, e.g. 2GiB; 0 never shrinks [default: 1GiB].
    #[arg(long, value_parser = parse_bytes)]
    memory_pressure_floor: Option<u64>,
    /// Disk tier with O_DIRECT (no OS page-cache copy; falls back with a warning where refused) [default: true].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    direct_io: Option<bool>,
    /// Attempts per object-store request, the first included [default: 5].
    #[arg(long, value_name = "N")]
    store_retries: Option<u32>,
    /// Deadline of one object-store request attempt, body included [default: 30s].
    #[arg(long, value_parser = humantime::parse_duration)]
    store_timeout: Option<Duration>,
    /// Testing: add this latency to every object-store request.
    #[arg(long, value_name = "MS", help_heading = "Testing")]
    store_latency_ms: Option<u64>,
    /// Testing: cap the bandwidth to the object store (megabytes per second, shared by all requests).
    #[arg(long, value_name = "MB/S", help_heading = "Testing")]
    store_mbps: Option<f64>,
    /// Testing: fail this fraction (0-1) of object-store GETs and HEADs transiently.
    #[arg(long, value_name = "FRACTION", help_heading = "Testing")]
    store_fail_rate: Option<f64>,
    /// Testing: cut this fraction (0-1) of object-store GET bodies short.
    #[arg(long, value_name = "FRACTION", help_heading = "Testing")]
    store_truncate_rate: Option<f64>,
    /// Memory one query may use, e.g. 1GiB; a query over it fails alone.
    #[arg(long, value_parser = parse_bytes)]
    query_memory_limit: Option<u64>,
    /// Cancel queries running longer than this, e.g. 30s or 5m.
    #[arg(long, value_parser = humantime::parse_duration)]
    query_timeout: Option<Duration>,
    /// How long start-up waits for tables to register before serving (the
    /// rest register in the background), e.g. 5s.
    #[arg(long, value_parser = humantime::parse_duration)]
    registration_wait: Option<Duration>,
    /// Serve TLS on every listener with this PEM certificate chain (with
    /// --tls-key); clients connect with grpc+tls:// and https://.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Accept the auth token over plaintext on a non-loopback address
    /// (refused by default: use TLS).
    #[arg(long)]
    allow_insecure: bool,
    /// Export OpenTelemetry traces over OTLP/HTTP to this collector, e.g.
    /// http://127.0.0.1:4318 (spans per query, stage, row group, tier read
    /// and store request).
    #[arg(long, value_name = "URL", env = "SILT_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
}

impl ServeArgs {
    /// The config file (if any) with every command-line flag applied on top.
    pub fn into_config(self) -> anyhow::Result<ServerConfig> {
        let mut cfg = match &self.config {
            Some(path) => ServerConfig::from_file(path)?,
            None => ServerConfig::default(),
        };
        if let Some(v) = self.listen {
            cfg.listen = v;
        }
        if let Some(v) = self.admin {
            cfg.admin = Some(v);
        }
        if let Some(v) = self.s3_listen {
            cfg.s3_api.listen = Some(v);
        }
        if let Some(v) = self.cache_dir {
            cfg.cache_dir = v;
        }
        if let Some(v) = self.auth_token {
            cfg.auth_token = Some(v);
        }
        if let Some(v) = self.memory_budget {
            cfg.memory_budget = v;
        }
        if let Some(v) = self.memory_form {
            cfg.memory_form = v;
        }
        if let Some(v) = self.page_memory_budget {
            cfg.page_memory_budget = v;
        }
        if let Some(v) = self.disk_budget {
            cfg.disk_budget = v;
        }
        if let Some(v) = self.metadata_budget {
            cfg.metadata_budget = v;
        }
        if let Some(v) = self.page_size {
            cfg.page_size = v;
        }
        if let Some(v) = self.disk_policy {
            cfg.disk_policy = v;
        }
        if let Some(v) = self.memory_policy {
            cfg.memory_policy = v;
        }
        if let Some(v) = self.plan_aware {
            cfg.plan_aware = v;
        }
        if let Some(v) = self.plan_horizon {
            cfg.plan_horizon = v;
        }
        if let Some(v) = self.max_concurrent_queries {
            cfg.max_concurrent_queries = v;
        }
        if let Some(v) = self.memory_pressure_floor {
            cfg.memory_pressure_floor = v;
        }
        if let Some(v) = self.direct_io {
            cfg.direct_io = v;
        }
        if let Some(v) = self.store_retries {
            cfg.store.retries = v;
        }
        if let Some(v) = self.store_timeout {
            cfg.store.request_timeout = v;
        }
        if let Some(v) = self.store_latency_ms {
            cfg.store.latency = Duration::from_millis(v);
        }
        if let Some(v) = self.store_mbps {
            cfg.store.mbps = Some(v);
        }
        if let Some(v) = self.store_fail_rate {
            cfg.store.fail_rate = v;
        }
        if let Some(v) = self.store_truncate_rate {
            cfg.store.truncate_rate = v;
        }
        if let Some(v) = self.query_memory_limit {
            cfg.query_memory_limit = v;
        }
        if let Some(v) = self.query_timeout {
            cfg.query_timeout = v;
        }
        if let Some(v) = self.registration_wait {
            cfg.registration_wait = v;
        }
        if let Some(v) = self.tls_cert {
            cfg.tls_cert = Some(v);
        }
        if let Some(v) = self.tls_key {
            cfg.tls_key = Some(v);
        }
        if self.allow_insecure {
            cfg.allow_insecure = true;
        }
        if let Some(v) = self.otlp_endpoint {
            cfg.otlp_endpoint = Some(v);
        }
        for t in &self.tables {
            cfg.add_table_arg(t)?;
        }
        for v in &self.views {
            cfg.add_view_arg(v)?;
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

/// Runs a server with `config` (from [`ServeArgs::into_config`]) until it
/// stops or Ctrl-C.
pub async fn run(config: ServerConfig) -> anyhow::Result<()> {
    let (flight_scheme, admin_scheme) = if config.tls() {
        ("grpc+tls", "https")
    } else {
        ("grpc", "http")
    };
    let handle = silt_server::start(config).await.context("starting the server")?;
    for (name, entry) in handle.engine.catalog() {
        match &entry.unavailable {
            None => eprintln!("  {} {name}", entry.type_name().to_lowercase()),
            Some(cause) => eprintln!("  {} {name} UNAVAILABLE: {cause}", entry.type_name().to_lowercase()),
        }
    }
    eprintln!("silt: Flight SQL on {flight_scheme}://{}", handle.flight_addr);
    if let Some(a) = handle.admin_addr {
        eprintln!("silt: admin on {admin_scheme}://{a} (dashboard at /, /health, /metrics, /stats, S3 API at /s3)");
    }
    if let Some(a) = handle.s3_addr {
        eprintln!("silt: S3 API on {admin_scheme}://{a} (buckets: the tables; path or virtual-host style)");
    }
    let engine = handle.engine.clone();
    tokio::select! {
        r = handle.wait() => r.context("server stopped")?,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("silt: shutting down");
            drop(engine);
        }
    }
    Ok(())
}
