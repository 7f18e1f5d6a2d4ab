//! `silt serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use silt_cache::MemoryForm;
use silt_cache::policy::PolicyKind;
use silt_server::config::{parse_bytes, parse_listener};
use silt_server::settings::{Effective, Source};

/// A listener's address, or none (`off`).
#[derive(Clone, Debug)]
struct Listener(Option<SocketAddr>);

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Flight SQL (gRPC) address [default: 127.0.0.1:50051].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Admin HTTP address for the dashboard, /health, /metrics, /stats and the S3 read API under /s3,
    /// or "off" [default: 127.0.0.1:9090].
    #[arg(long, value_name = "ADDR|off", value_parser = |s: &str| parse_listener(s).map(Listener))]
    admin: Option<Listener>,
    /// S3 API address: the tables as buckets at the root, path- or
    /// virtual-host-style (Host: TABLE.localhost:PORT) [default: off].
    #[arg(long, value_name = "ADDR")]
    s3_listen: Option<SocketAddr>,
    /// Directory for the server's local state: the disk tier, spill files [default: $XDG_CACHE_HOME/silt, else
    /// ~/.cache/silt].
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Print every effective setting and where it came from (default, file, flag, environment), then exit.
    #[arg(long)]
    pub print_config: bool,
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
    /// Memory tier budget (decoded column batches), e.g. 2GiB [default: 1/4 of the memory this server may use].
    #[arg(long, value_parser = parse_bytes)]
    memory_budget: Option<u64>,
    /// Form of the memory tier's columns: liquid (compressed, filters run on it) or arrow [default: liquid].
    #[arg(long)]
    memory_form: Option<MemoryForm>,
    /// Page buffer budget (object bytes in memory, in front of the disk tier) [default: 1/32 of memory, at most 4GiB].
    #[arg(long, value_parser = parse_bytes)]
    page_memory_budget: Option<u64>,
    /// Disk tier budget (region files under the cache dir), e.g. 100GiB; 0 disables the disk tier.
    #[arg(long, value_parser = parse_bytes)]
    disk_budget: Option<u64>,
    /// Share of the disk budget for liquid chunks the memory tier evicts, kept encoded so they come back without decoding [default: 0.25; 0: off].
    #[arg(long)]
    squeeze_share: Option<f64>,
    /// Also write each liquid chunk to the squeeze tier once transcoded, not only when evicted, so it survives a restart [default: true].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    squeeze_ahead: Option<bool>,
    /// Metadata tier budget (decoded Parquet footers and page indexes) [default: 1/64 of memory, at most 2GiB].
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
    /// Memory one query may use, e.g. 1GiB; a query over it fails alone [default: 1/4 of memory].
    #[arg(long, value_parser = parse_bytes)]
    query_memory_limit: Option<u64>,
    /// Cancel queries running longer than this, e.g. 30s or 5m.
    #[arg(long, value_parser = humantime::parse_duration)]
    query_timeout: Option<Duration>,
    /// On SIGTERM (or a first Ctrl-C) the server drains: new queries are
    /// refused (UNAVAILABLE, /health 503 "draining"), running ones get this
    /// long to finish, e.g. 60s [default: 25s]. A second signal stops at once.
    #[arg(long, value_parser = humantime::parse_duration)]
    drain_timeout: Option<Duration>,
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
    /// The config file (if any), every command-line flag and environment
    /// variable applied on top, then `silt serve`'s deployment defaults for
    /// what none of them set (`silt_server::settings`).
    pub fn into_config(self) -> anyhow::Result<Effective> {
        let mut e = Effective::from_file(self.config.as_deref())?;
        let flag = || Source::Flag;
        e.set("listen", self.listen, flag(), |c, v| c.listen = v);
        e.set("admin", self.admin, flag(), |c, v| c.admin = v.0);
        e.set("s3_api.listen", self.s3_listen, flag(), |c, v| {
            c.s3_api.listen = Some(v)
        });
        e.set("cache_dir", self.cache_dir, flag(), |c, v| c.cache_dir = v);
        let token_source = flag_or_env("--auth-token", "SILT_AUTH_TOKEN");
        e.set("auth_token", self.auth_token, token_source, |c, v| {
            c.auth_token = Some(v)
        });
        e.set("memory_budget", self.memory_budget, flag(), |c, v| c.memory_budget = v);
        e.set("memory_form", self.memory_form, flag(), |c, v| c.memory_form = v);
        e.set("page_memory_budget", self.page_memory_budget, flag(), |c, v| {
            c.page_memory_budget = v
        });
        e.set("disk_budget", self.disk_budget, flag(), |c, v| c.disk_budget = v);
        e.set("squeeze_share", self.squeeze_share, flag(), |c, v| c.squeeze_share = v);
        e.set("squeeze_ahead", self.squeeze_ahead, flag(), |c, v| c.squeeze_ahead = v);
        e.set("metadata_budget", self.metadata_budget, flag(), |c, v| {
            c.metadata_budget = v
        });
        e.set("page_size", self.page_size, flag(), |c, v| c.page_size = v);
        e.set("disk_policy", self.disk_policy, flag(), |c, v| c.disk_policy = v);
        e.set("memory_policy", self.memory_policy, flag(), |c, v| c.memory_policy = v);
        e.set("plan_aware", self.plan_aware, flag(), |c, v| c.plan_aware = v);
        e.set("plan_horizon", self.plan_horizon, flag(), |c, v| c.plan_horizon = v);
        e.set("max_concurrent_queries", self.max_concurrent_queries, flag(), |c, v| {
            c.max_concurrent_queries = v
        });
        e.set("memory_pressure_floor", self.memory_pressure_floor, flag(), |c, v| {
            c.memory_pressure_floor = v
        });
        e.set("direct_io", self.direct_io, flag(), |c, v| c.direct_io = v);
        e.set("store.retries", self.store_retries, flag(), |c, v| c.store.retries = v);
        e.set("store.request_timeout", self.store_timeout, flag(), |c, v| {
            c.store.request_timeout = v
        });
        e.set("store.latency", self.store_latency_ms, flag(), |c, v| {
            c.store.latency = Duration::from_millis(v)
        });
        e.set("store.mbps", self.store_mbps, flag(), |c, v| c.store.mbps = Some(v));
        e.set("store.fail_rate", self.store_fail_rate, flag(), |c, v| {
            c.store.fail_rate = v
        });
        e.set("store.truncate_rate", self.store_truncate_rate, flag(), |c, v| {
            c.store.truncate_rate = v
        });
        e.set("query_memory_limit", self.query_memory_limit, flag(), |c, v| {
            c.query_memory_limit = v
        });
        e.set("query_timeout", self.query_timeout, flag(), |c, v| c.query_timeout = v);
        e.set("drain_timeout", self.drain_timeout, flag(), |c, v| c.drain_timeout = v);
        e.set("registration_wait", self.registration_wait, flag(), |c, v| {
            c.registration_wait = v
        });
        e.set("tls_cert", self.tls_cert, flag(), |c, v| c.tls_cert = Some(v));
        e.set("tls_key", self.tls_key, flag(), |c, v| c.tls_key = Some(v));
        e.set("allow_insecure", self.allow_insecure.then_some(true), flag(), |c, v| {
            c.allow_insecure = v
        });
        let otlp_source = flag_or_env("--otlp-endpoint", "SILT_OTLP_ENDPOINT");
        e.set("otlp_endpoint", self.otlp_endpoint, otlp_source, |c, v| {
            c.otlp_endpoint = Some(v)
        });
        for t in &self.tables {
            e.config.add_table_arg(t)?;
            let name = t.split_once('=').map_or(t.as_str(), |(n, _)| n);
            e.set(&format!("tables.{name}.url"), Some(()), flag(), |_, ()| {});
        }
        for v in &self.views {
            e.config.add_view_arg(v)?;
            let name = v.split_once('=').map_or(v.as_str(), |(n, _)| n);
            e.set(&format!("views.{name}"), Some(()), flag(), |_, ()| {});
        }
        let e = e.with_deployment_defaults(silt_server::settings::machine_memory());
        e.config.validate()?;
        Ok(e)
    }
}

/// Where a setting clap took from `flag` or else from the environment
/// variable `var` came from: the flag when it is on the command line.
fn flag_or_env(flag: &str, var: &'static str) -> Source {
    let on_command_line = std::env::args().any(|a| a == flag || a.starts_with(&format!("{flag}=")));
    if on_command_line {
        Source::Flag
    } else {
        Source::Env(var)
    }
}

/// Runs a server with `effective`'s config (from [`ServeArgs::into_config`])
/// until it stops or Ctrl-C.
pub async fn run(effective: Effective) -> anyhow::Result<()> {
    eprintln!("silt: budgets: {}", effective.budgets());
    let config = effective.config;
    let (flight_scheme, admin_scheme) = if config.tls() {
        ("grpc+tls", "https")
    } else {
        ("grpc", "http")
    };
    let mut handle = silt_server::start(config).await.context("starting the server")?;
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
    let drain_timeout = handle.engine.config().drain_timeout;
    let mut stopping = std::pin::pin!(stop_signal());
    tokio::select! {
        r = handle.wait_for_failure() => return r.context("server stopped"),
        _ = &mut stopping => {}
    }
    let running = handle.engine.drain().running();
    eprintln!(
        "silt: draining: new queries refused, {running} running get up to {} to finish (a second signal stops now)",
        humantime::format_duration(drain_timeout)
    );
    tokio::select! {
        cut = handle.drain(drain_timeout) => match cut.context("stopping the server")? {
            0 => eprintln!("silt: drained; stopped"),
            n => eprintln!("silt: drain timeout: {n} requests still running were cut; stopped"),
        },
        _ = stop_signal() => eprintln!("silt: second signal: stopping now"),
    }
    Ok(())
}

/// SIGTERM (how orchestrators and `kill` stop a process) or SIGINT (Ctrl-C).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C drains");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
