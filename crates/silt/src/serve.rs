//! `silt serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use silt_server::ServerConfig;
use silt_server::config::parse_bytes;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Flight SQL (gRPC) address [default: 127.0.0.1:50051].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Admin HTTP address for /health and /metrics [default: off].
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// Directory for the server's local state.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Register a table: NAME=URL (file:///abs/dir/, file:///abs/f.parquet,
    /// s3://bucket/prefix/, memory:///prefix/). Repeatable.
    #[arg(long = "table", value_name = "NAME=URL")]
    tables: Vec<String>,
    /// Define a view: NAME=SQL over registered tables. Repeatable.
    #[arg(long = "view", value_name = "NAME=SQL")]
    views: Vec<String>,
    /// TOML config file (the same settings plus per-table options).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Require `authorization: Bearer TOKEN` on every Flight call.
    #[arg(long, env = "SILT_AUTH_TOKEN", hide_env_values = true)]
    auth_token: Option<String>,
    /// Memory for cached object pages, e.g. 2GiB.
    #[arg(long, value_parser = parse_bytes)]
    memory_budget: Option<u64>,
    /// Memory one query may use, e.g. 1GiB; a query over it fails alone.
    #[arg(long, value_parser = parse_bytes)]
    query_memory_limit: Option<u64>,
    /// Cancel queries running longer than this, e.g. 30s or 5m.
    #[arg(long, value_parser = humantime::parse_duration)]
    query_timeout: Option<Duration>,
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
        if let Some(v) = self.cache_dir {
            cfg.cache_dir = v;
        }
        if let Some(v) = self.auth_token {
            cfg.auth_token = Some(v);
        }
        if let Some(v) = self.memory_budget {
            cfg.memory_budget = v;
        }
        if let Some(v) = self.query_memory_limit {
            cfg.query_memory_limit = v;
        }
        if let Some(v) = self.query_timeout {
            cfg.query_timeout = v;
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

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = args.into_config()?;
    let handle = silt_server::start(config).await.context("starting the server")?;
    for (name, entry) in handle.engine.catalog() {
        match &entry.unavailable {
            None => eprintln!("  {} {name}", entry.type_name().to_lowercase()),
            Some(cause) => eprintln!("  {} {name} UNAVAILABLE: {cause}", entry.type_name().to_lowercase()),
        }
    }
    eprintln!("silt: Flight SQL on grpc://{}", handle.flight_addr);
    if let Some(a) = handle.admin_addr {
        eprintln!("silt: admin on http://{a} (/health, /metrics, /stats)");
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
