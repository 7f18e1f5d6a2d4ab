//! `silt-liquidcache`: the published LiquidCache (crates.io
//! `liquid-cache-server` / `liquid-cache-client` 0.1.10, on its own
//! DataFusion) run beside Silt's modes by Silt's benchmark harness
//! (`silt bench ... --modes liquidcache`), on the same files, over the same
//! throttled loopback S3 store.
//!
//! - `silt-liquidcache server --listen ADDR --s3-endpoint URL --bucket B
//!   [--bucket B ...] --latency-ms N --mbps F --max-cache-bytes B
//!   --cache-dir DIR [--io-mode uring|std-blocking|...]`: LiquidCache's
//!   Flight server (see [`server`]).
//! - `silt-liquidcache run`: a JSON job on stdin, a JSON report on stdout
//!   (see [`run`]); it starts one `server` child per query.

mod flight;
mod procfs;
mod run;
mod server;
mod store;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

const USAGE: &str = "usage: silt-liquidcache server --listen ADDR --s3-endpoint URL --bucket NAME [--bucket NAME ...] \
--latency-ms N --mbps F --max-cache-bytes B --cache-dir DIR [--io-mode MODE]
       silt-liquidcache run   (a JSON job on stdin, a JSON report on stdout)";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("building the tokio runtime");
    let result = match args.first().map(String::as_str) {
        Some("server") => parse_server_args(&args[1..]).and_then(|a| runtime.block_on(server::serve(a))),
        Some("run") => runtime.block_on(run::run()),
        _ => Err(anyhow::anyhow!("{USAGE}")),
    };
    if let Err(e) = result {
        eprintln!("silt-liquidcache: {e:#}");
        std::process::exit(1);
    }
}

/// `--key value` pairs; a key may repeat.
fn flags(args: &[String]) -> anyhow::Result<HashMap<String, Vec<String>>> {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    let mut it = args.iter();
    while let Some(key) = it.next() {
        let name = key
            .strip_prefix("--")
            .with_context(|| format!("expected --flag, got '{key}'\n{USAGE}"))?;
        let value = it.next().with_context(|| format!("--{name} needs a value"))?;
        out.entry(name.to_string()).or_default().push(value.clone());
    }
    Ok(out)
}

fn parse_server_args(args: &[String]) -> anyhow::Result<server::ServerArgs> {
    let mut f = flags(args)?;
    let mut one = |name: &str| -> anyhow::Result<String> {
        f.remove(name)
            .and_then(|mut v| v.pop())
            .with_context(|| format!("--{name} is required\n{USAGE}"))
    };
    let number = |name: &str, v: String| -> anyhow::Result<f64> {
        v.parse::<f64>()
            .with_context(|| format!("--{name} wants a number, got '{v}'"))
    };
    let listen = one("listen")?;
    let s3_endpoint = one("s3-endpoint")?;
    let latency_ms = number("latency-ms", one("latency-ms")?)?;
    let mbps = number("mbps", one("mbps")?)?;
    let max_cache_bytes = number("max-cache-bytes", one("max-cache-bytes")?)? as usize;
    let cache_dir = PathBuf::from(one("cache-dir")?);
    let io_mode = one("io-mode").unwrap_or_else(|_| "uring".into());
    let buckets = f.remove("bucket").context("--bucket is required (repeatable)")?;
    if let Some(unknown) = f.keys().next() {
        anyhow::bail!("unknown flag --{unknown}\n{USAGE}");
    }
    Ok(server::ServerArgs {
        listen,
        s3_endpoint,
        buckets,
        throttle: store::Throttle {
            latency: Duration::from_secs_f64(latency_ms / 1e3),
            bytes_per_second: (mbps * 1e6) as u64,
        },
        max_cache_bytes,
        cache_dir,
        io_mode: io_mode.parse().map_err(|e: String| anyhow::anyhow!(e))?,
    })
}
