//! `silt`: the Silt cache server and its tools.

mod admin_cmds;
mod bench;
mod bench_cache;
mod bench_gen;
mod bench_replay;
mod demo;
mod harness;
mod output;
mod query;
mod serve;
mod telemetry;
mod worker;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "silt", version, about = "Silt: a pushdown cache for Parquet data lakes")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log lines as text or JSON (one object per line); filter with SILT_LOG.
    #[arg(long, global = true, value_enum, default_value_t = telemetry::LogFormat::Text)]
    log_format: telemetry::LogFormat,
    /// Trust this PEM CA certificate (besides the system's) when connecting
    /// to servers over TLS (grpc+tls://, https://).
    #[arg(long, global = true, value_name = "PEM", env = "SILT_TLS_CA")]
    tls_ca: Option<std::path::PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Run a cache server (Flight SQL + admin HTTP).
    Serve(Box<serve::ServeArgs>),
    /// Run SQL against a Silt server, scans pushed down; no SQL opens a shell.
    Query(query::QueryArgs),
    /// Generate TPC-H SF 0.1, serve it in-process and run queries cold and warm.
    Demo(demo::DemoArgs),
    /// Print a server's cache statistics per tier and per table.
    Stats(admin_cmds::StatsArgs),
    /// Warm a server's metadata and disk tiers (and memory) with a table's data.
    Preload(admin_cmds::PreloadArgs),
    /// Run a distributed-query worker (datafusion-distributed) whose leaf scans read Silt servers.
    Worker(worker::WorkerArgs),
    /// Benchmarks: the harness (clickbench, tpch, smoke), cache, replay, data generators.
    Bench(bench::BenchArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let fail = |e: anyhow::Error| {
        eprintln!("error: {e:#}");
        std::process::ExitCode::FAILURE
    };
    if let Some(path) = &cli.tls_ca {
        match std::fs::read(path) {
            Ok(pem) => silt_client::tls::set_ca_pem(pem),
            Err(e) => return fail(anyhow::anyhow!("reading --tls-ca {}: {e}", path.display())),
        }
    }
    // A server's config is read first: it says where traces go, and the
    // subscriber (with its exporter's own thread) is set up before the
    // async runtime starts.
    let (command, serve_config) = match cli.command {
        Command::Serve(a) => {
            let print = a.print_config;
            match a.into_config() {
                Ok(effective) if print => {
                    print!("{}", effective.listing());
                    return std::process::ExitCode::SUCCESS;
                }
                Ok(effective) => (None, Some(effective)),
                Err(e) => return fail(e),
            }
        }
        other => (Some(other), None),
    };
    let otlp = serve_config.as_ref().and_then(|e| e.config.otlp_endpoint.as_deref());
    let _telemetry = match telemetry::init(cli.log_format, otlp) {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let Some(command) = command else {
            return serve::run(serve_config.expect("a serve command's config")).await;
        };
        match command {
            Command::Serve(_) => unreachable!("handled above"),
            Command::Query(a) => query::run(a).await,
            Command::Demo(a) => demo::run(a).await,
            Command::Stats(a) => admin_cmds::stats(a).await,
            Command::Preload(a) => admin_cmds::preload(a).await,
            Command::Bench(a) => bench::run(a).await,
            Command::Worker(a) => worker::run(a).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
