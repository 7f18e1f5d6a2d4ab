//! `silt bench`: benchmarks and their data. Each subcommand lives in its own
//! file (`bench_replay.rs`, `bench_cache.rs`, `bench_gen.rs`, `harness/`,
//! the guard in `harness/guard.rs`);
//! this one only dispatches.

use clap::{Args, Subcommand};

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Replay cache-access traces through the eviction policies and Belady's optimum.
    Replay(crate::bench_replay::ReplayArgs),
    /// TPC-H through Silt versus DataFusion reading a throttled object store directly.
    Cache(crate::bench_cache::CacheBenchArgs),
    /// Generate benchmark data: TPC-H, hits-like ClickBench data, the point-lookup table.
    Gen(crate::bench_gen::GenArgs),
    /// ClickBench queries on hits-like data in every mode: results.json, report.md, plots.
    Clickbench(crate::harness::ClickbenchArgs),
    /// TPC-H queries in every mode: results.json, report.md, plots.
    Tpch(crate::harness::TpchArgs),
    /// The Star Schema Benchmark's 13 queries (data derived from TPC-H) in every mode.
    Ssb(crate::harness::SsbArgs),
    /// Point lookups (`WHERE id = ?`) with concurrent clients: p50/p99 latency, lookups/s.
    Lookup(crate::harness::LookupArgs),
    /// N clients running a TPC-H + ClickBench mix under budgets below the working set:
    /// plan-aware eviction vs each policy alone, direct vs buffered disk I/O.
    Mixed(crate::harness::MixedArgs),
    /// TPC-H through a fleet of 1, 2, 3 servers: throughput, latency, a kill test, placement.
    Fleet(crate::harness::FleetArgs),
    /// The performance guard: a fixed small set (lookups, TPC-H SF 0.1, ClickBench 1M, one cold
    /// run) as same-run ratios, compared with the committed baseline (docs/results/guard/baseline.json).
    Guard(crate::harness::GuardArgs),
    /// The whole harness on tiny data (run by the test suite so it never rots).
    Smoke(crate::harness::SmokeArgs),
    /// A loopback S3 server in its own process (started by the harness).
    #[command(hide = true)]
    ObjectStore(crate::harness::ObjectStoreArgs),
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Replay(a) => crate::bench_replay::run(&a),
        BenchCommand::Cache(a) => crate::bench_cache::run(a).await,
        BenchCommand::Gen(a) => crate::bench_gen::run(a).await,
        BenchCommand::Clickbench(a) => crate::harness::clickbench(a).await,
        BenchCommand::Tpch(a) => crate::harness::tpch(a).await,
        BenchCommand::Ssb(a) => crate::harness::ssb(a).await,
        BenchCommand::Lookup(a) => crate::harness::lookup(a).await,
        BenchCommand::Fleet(a) => crate::harness::fleet(a).await,
        BenchCommand::Mixed(a) => crate::harness::mixed(a).await,
        BenchCommand::Guard(a) => crate::harness::guard(a).await,
        BenchCommand::Smoke(a) => crate::harness::smoke(a).await,
        BenchCommand::ObjectStore(a) => crate::harness::object_store(a).await,
    }
}
