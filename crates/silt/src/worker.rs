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
}

pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding the worker to {}", args.listen))?;
    let addr = listener.local_addr()?;
    eprintln!("{READY}http://{addr}");
    silt_client::distributed::serve_worker(listener, args.token, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
    .context("serving the worker")
}
