//! `silt worker`: a `datafusion-distributed` worker whose leaf scans are
//! Silt scans ([`silt_client::distributed`]). Run one beside each cache
//! server and give `silt query --distributed` the workers in the same
//! order as the servers.

use std::net::SocketAddr;

use anyhow::Context;
use clap::Args;

/// What `silt worker` prints once it listens, before its URL.
pub const READY: &str = "silt worker listening on ";

#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// Address the worker's gRPC service listens on.
    #[arg(long, default_value = "127.0.0.1:50061")]
    listen: SocketAddr,
    /// Bearer token for cache servers started with --auth-token.
    #[arg(long, env = "SILT_AUTH_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The cache servers this worker may read from, comma separated (plans
    /// naming others are refused); required with --token, so that no plan
    /// can send the token elsewhere.
    #[arg(long, value_delimiter = ',')]
    servers: Vec<String>,
    /// Keep up to this much of the cache servers' data (e.g. 2GiB) in a
    /// compute-side cache shared by this worker's tasks: a task's row
    /// groups are then answered here, fetched from their owner, or pushed
    /// to it, per row group, as `silt query` does. 0: none, every task's
    /// share pushed to its owners [default: a quarter of the machine's
    /// memory, at most 4 GiB].
    #[arg(long, value_parser = silt_server::config::parse_bytes)]
    local_cache: Option<u64>,
}

pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    if args.token.is_some() && args.servers.is_empty() {
        anyhow::bail!("a worker with a token needs --servers: the cache servers it may send the token to");
    }
    let servers = (!args.servers.is_empty()).then_some(args.servers);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding the worker to {}", args.listen))?;
    let addr = listener.local_addr()?;
    eprintln!("{READY}http://{addr}");
    let options = silt_client::SiltTableOptions {
        local_cache_bytes: args.local_cache.unwrap_or_else(silt_client::default_local_cache_bytes),
        ..Default::default()
    };
    silt_client::distributed::serve_worker(listener, args.token, servers, &options, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
    .context("serving the worker")
}
