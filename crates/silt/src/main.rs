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
mod worker;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "silt", version, about = "Silt: a pushdown cache for Parquet data lakes")]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SILT_LOG")
                // s3s logs every refused S3 request (a 404, a bad signature)
                // as an error; the S3 API logs store failures itself.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,s3s=off")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(a) => serve::run(*a).await,
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
