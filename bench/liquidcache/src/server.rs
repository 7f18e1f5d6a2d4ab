//! `silt-liquidcache server`: LiquidCache's Flight server
//! (`liquid-cache-server`) over the throttled loopback S3 store.
//!
//! LiquidCache's server builds an object store itself when a client
//! registers one (`RegisterObjectStore`), but only when none is registered
//! yet for that URL in its `SessionContext`'s runtime environment. So this
//! server registers, before it serves, exactly what LiquidCache would have
//! built — its `ByteCache` (Parquet bytes on local disk, in its cache
//! folder) over the S3 store — with the throttle and the counters slotted in
//! between; the client's registration then finds it and keeps it.
//!
//! Protocol with the runner: the first stdout line is `ready ADDR`; then
//! each `stats` line on stdin is answered by one JSON line on stdout
//! ([`Stats`]); the server exits when stdin closes.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use arrow_flight::flight_service_server::FlightServiceServer;
use liquid_cache_server::LiquidCacheService;
use liquid_cache_server::common::IoMode;
use liquid_cache_server::common::utils::sanitize_object_store_url_for_dirname;
use liquid_cache_server::storage::ByteCache;
use liquid_cache_server::storage::cache::squeeze_policies::TranscodeSqueezeEvict;
use liquid_cache_server::storage::cache_policies::LiquidPolicy;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use url::Url;

use crate::flight::CountingFlight;
use crate::store::{SlowStore, StoreCounters, Throttle, loopback_s3};

/// Options of `silt-liquidcache server`.
#[derive(Debug, Clone)]
pub struct ServerArgs {
    /// Where to serve Flight, e.g. `127.0.0.1:0` (the bound address is printed).
    pub listen: String,
    /// The loopback S3 endpoint, e.g. `http://127.0.0.1:9000`.
    pub s3_endpoint: String,
    /// Buckets to serve (`s3://{bucket}`).
    pub buckets: Vec<String>,
    pub throttle: Throttle,
    /// LiquidCache's memory budget: beyond it, batches are transcoded to liquid, then moved to disk.
    pub max_cache_bytes: usize,
    /// LiquidCache's disk cache folder (Parquet bytes and evicted batches).
    pub cache_dir: PathBuf,
    /// How LiquidCache reads and writes its disk cache.
    pub io_mode: IoMode,
}

/// What the server reports on `stats`: cumulative counters since it started.
#[derive(Debug, Serialize, Deserialize)]
pub struct Stats {
    /// GETs (ranged or not) the object store served, and their body bytes.
    pub store_get_requests: u64,
    pub store_get_bytes: u64,
    pub store_head_requests: u64,
    /// Arrow IPC bytes (header + body) sent in `DoGet` answers.
    pub flight_bytes_sent: u64,
    /// LiquidCache's memory budget accounting (batches held in memory).
    pub cache_memory_bytes: u64,
    /// LiquidCache's batches on disk.
    pub cache_disk_bytes: u64,
    /// Parquet bytes in LiquidCache's byte cache (on disk).
    pub byte_cache_bytes: u64,
    /// Batches held, by form.
    pub memory_arrow_entries: u64,
    pub memory_liquid_entries: u64,
    pub memory_hybrid_liquid_entries: u64,
    pub disk_liquid_entries: u64,
    pub disk_arrow_entries: u64,
}

/// Runs the server until stdin closes.
pub async fn serve(args: ServerArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.cache_dir).with_context(|| format!("creating {}", args.cache_dir.display()))?;
    let ctx = LiquidCacheService::context().context("building LiquidCache's session context")?;
    let runtime = ctx.runtime_env();
    let service = LiquidCacheService::new(
        ctx,
        Some(args.max_cache_bytes),
        Some(args.cache_dir.clone()),
        Box::new(LiquidPolicy::new()),
        Box::new(TranscodeSqueezeEvict),
        Some(args.io_mode),
    )
    .context("starting LiquidCache")?;

    let counters = Arc::new(StoreCounters::default());
    let byte_cache_dir = service.get_parquet_cache_dir().clone();
    for bucket in &args.buckets {
        let url = Url::parse(&format!("s3://{bucket}")).with_context(|| format!("bucket name {bucket}"))?;
        let slow = SlowStore::new(loopback_s3(&args.s3_endpoint, bucket)?, args.throttle, counters.clone());
        let dir = byte_cache_dir.join(sanitize_object_store_url_for_dirname(&url));
        runtime.register_object_store(&url, Arc::new(ByteCache::new(Arc::new(slow), dir)));
    }

    let sent = Arc::new(AtomicU64::new(0));
    let cache = service.cache().clone();
    let report = {
        let (counters, sent) = (counters.clone(), sent.clone());
        move || {
            let s = cache.storage().stats();
            let (store_get_requests, store_get_bytes) = counters.read();
            Stats {
                store_get_requests,
                store_get_bytes,
                store_head_requests: counters.head_requests.load(Ordering::Relaxed),
                flight_bytes_sent: sent.load(Ordering::Relaxed),
                cache_memory_bytes: s.memory_usage_bytes as u64,
                cache_disk_bytes: s.disk_usage_bytes as u64,
                byte_cache_bytes: folder_bytes(&byte_cache_dir),
                memory_arrow_entries: s.memory_arrow_entries as u64,
                memory_liquid_entries: s.memory_liquid_entries as u64,
                memory_hybrid_liquid_entries: s.memory_hybrid_liquid_entries as u64,
                disk_liquid_entries: s.disk_liquid_entries as u64,
                disk_arrow_entries: s.disk_arrow_entries as u64,
            }
        }
    };

    let listener = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    let flight = FlightServiceServer::new(CountingFlight::new(service, sent))
        .max_decoding_message_size(256 << 20)
        .max_encoding_message_size(256 << 20);
    let serving = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(flight)
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    println!("ready {addr}");
    std::io::stdout().flush()?;
    // Commands arrive on stdin; its end (the runner gone) ends the server.
    tokio::task::spawn_blocking(move || answer_commands(report))
        .await
        .context("the command loop panicked")??;
    serving.abort();
    // Give in-flight responses a moment; the runner has stopped asking by now.
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(())
}

/// Answers `stats` lines on stdin until it closes.
fn answer_commands(report: impl Fn() -> Stats) -> anyhow::Result<()> {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        match line?.trim() {
            "stats" => {
                serde_json::to_writer(&mut out, &report())?;
                writeln!(out)?;
                out.flush()?;
            }
            "" => {}
            other => anyhow::bail!("unknown command '{other}' (known: stats)"),
        }
    }
    Ok(())
}

/// Bytes of the files below `dir` (0 if it does not exist).
fn folder_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => folder_bytes(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}
