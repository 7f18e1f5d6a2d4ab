//! The cache designs a user could deploy, each run the same way: a client
//! DataFusion context (and for all but `direct` a cache server process),
//! probed before and after every query.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use datafusion::arrow::array::RecordBatch;
use datafusion::prelude::SessionContext;
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::memory::InMemory;
use silt_bench::link::{Link, LinkProxy};
use silt_bench::procfs;
use silt_bench::results::ServerStages;
use silt_store::{
    FaultConfig, FaultyStore, MeteredStore, RetryPolicy, RetryingStore, S3Settings, StoreMetrics, TableLocation,
};
use url::Url;

use super::server::{ServerProcess, ServerSpec, metric, tier_bytes};
use super::suite::Suite;

/// A design under test. `duckdb`, `duckdb-s3` and `liquidcache` run outside [`Session`] (their own process per suite).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// DataFusion reads the throttled object store itself: no cache.
    Direct,
    /// The cache serves Parquet bytes over its S3 API; the client decodes and filters.
    FileServer,
    /// The cache holds Parquet bytes (page buffer + disk) and filters by decoding them.
    ParquetPushdown,
    /// The cache holds decoded Arrow batches and filters on them.
    ArrowPushdown,
    /// Silt's default: liquid batches, filters on encoded data.
    Liquid,
    /// DuckDB's Python package on the local files (an outside reference).
    Duckdb,
    /// DuckDB's Python package over the throttled object store through
    /// `httpfs`: the lake read directly, with no cache (`harness/duckdb.rs`).
    #[value(name = "duckdb-s3")]
    DuckdbS3,
    /// DataFusion on the local files: no cache, no throttle — what the
    /// client could do if the lake were on its own disk.
    Local,
    /// The liquid server plus the client's compute-side cache
    /// (`--local-cache`): per row group local, fetch or pushdown.
    Hybrid,
    /// Exactly what a user gets with no flags: the liquid server and
    /// `register_tables` with `SiltTableOptions::default()` (the default
    /// compute-side cache, the choice per row group).
    Silt,
    /// `hybrid` with LFU instead of Weighted-LFU (the SSB workload's policy
    /// comparison; not in `all`).
    HybridLfu,
    /// The client's compute-side cache and nothing pushed down: every row
    /// group the cache lacks is fetched and run locally (FlexPushdownDB's
    /// caching-only baseline; not in `all`).
    CachingOnly,
    /// The published LiquidCache (crates.io 0.1.10, on its own DataFusion),
    /// run like `duckdb` outside [`Session`], from the separate project
    /// `bench/liquidcache` (see `harness/liquidcache.rs`; not in `all`).
    Liquidcache,
}

impl Mode {
    pub const ALL: [Mode; 10] = [
        Mode::Direct,
        Mode::FileServer,
        Mode::ParquetPushdown,
        Mode::ArrowPushdown,
        Mode::Liquid,
        Mode::Duckdb,
        Mode::DuckdbS3,
        Mode::Local,
        Mode::Hybrid,
        Mode::Silt,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Direct => "direct",
            Mode::FileServer => "file-server",
            Mode::ParquetPushdown => "parquet-pushdown",
            Mode::ArrowPushdown => "arrow-pushdown",
            Mode::Liquid => "liquid",
            Mode::Duckdb => "duckdb",
            Mode::DuckdbS3 => "duckdb-s3",
            Mode::Local => "local",
            Mode::Hybrid => "hybrid",
            Mode::Silt => "silt",
            Mode::HybridLfu => "hybrid-lfu",
            Mode::CachingOnly => "caching-only",
            Mode::Liquidcache => "liquidcache",
        }
    }

    /// The server this mode runs, if any: (memory form, memory tier on).
    fn server(self) -> Option<(&'static str, bool)> {
        match self {
            Mode::Direct | Mode::Duckdb | Mode::DuckdbS3 | Mode::Local | Mode::Liquidcache => None,
            Mode::FileServer => Some(("arrow", false)),
            Mode::ParquetPushdown => Some(("arrow", false)),
            Mode::ArrowPushdown => Some(("arrow", true)),
            Mode::Liquid | Mode::Hybrid | Mode::Silt | Mode::HybridLfu | Mode::CachingOnly => Some(("liquid", true)),
        }
    }
}

/// Where the loopback object store is and how it is throttled.
#[derive(Debug, Clone)]
pub struct StoreSetup {
    pub s3: S3Settings,
    pub latency_ms: u64,
    pub mbps: f64,
    pub memory_budget: u64,
    /// The servers' `squeeze_share` (`None`: their default).
    pub squeeze_share: Option<f64>,
    pub validation: String,
    /// The compute-side cache of the `hybrid` client, bytes.
    pub local_cache: u64,
    /// The form of its column chunks.
    pub local_cache_form: silt_client::MemoryForm,
    /// The run's simulated link between the client and every cache server
    /// (`--link`; `None`: loopback). One per run, shared by its sessions.
    pub link: Option<Link>,
}

/// A proxy on `link` in front of the server at `url` (`http://host:port`),
/// and the same URL pointing at the proxy: what the client connects to.
pub fn through_link(link: &Link, url: &str) -> anyhow::Result<(LinkProxy, String)> {
    LinkProxy::in_front_of(link, url).with_context(|| format!("starting the link proxy for {url}"))
}

/// Counters of an object store the client itself reads.
#[derive(Default)]
struct ClientStoreCounters {
    requests: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
}

impl ClientStoreCounters {
    fn wrap(&self, inner: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        let metrics = StoreMetrics {
            get_requests: metrics::Counter::from_arc(self.requests.clone()),
            get_bytes: metrics::Counter::from_arc(self.bytes.clone()),
            ..StoreMetrics::noop()
        };
        Arc::new(MeteredStore::new(inner, metrics))
    }

    fn read(&self) -> (u64, u64) {
        (
            self.requests.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// Figures read before and after a query; a query's cost is the difference.
#[derive(Debug, Clone, Copy, Default)]
pub struct Probe {
    pub server_cpu: Option<f64>,
    /// This process's CPU without the link proxies' threads.
    pub client_cpu: f64,
    /// Bytes across the simulated link (to the client, to the server);
    /// `None` without one.
    pub link: Option<(u64, u64)>,
    pub to_client: u64,
    pub store_requests: u64,
    pub store_bytes: u64,
    /// Seconds the server spent per query stage so far
    /// (`silt_query_stage_seconds_sum`, [`ServerStages::NAMES`] order).
    pub stages: Option<[f64; 5]>,
    /// Column chunks the server decoded from Parquet, and read back from
    /// its squeeze tier (0 without a server).
    pub parquet_decodes: u64,
    pub restored_chunks: u64,
}

impl Probe {
    pub fn since(&self, before: &Probe) -> Probe {
        Probe {
            server_cpu: self.server_cpu.zip(before.server_cpu).map(|(a, b)| a - b),
            client_cpu: self.client_cpu - before.client_cpu,
            link: self.link.zip(before.link).map(|(a, b)| (a.0 - b.0, a.1 - b.1)),
            to_client: self.to_client - before.to_client,
            store_requests: self.store_requests - before.store_requests,
            store_bytes: self.store_bytes - before.store_bytes,
            parquet_decodes: self.parquet_decodes - before.parquet_decodes,
            restored_chunks: self.restored_chunks - before.restored_chunks,
            stages: self
                .stages
                .zip(before.stages)
                .map(|(a, b)| std::array::from_fn(|i| a[i] - b[i])),
        }
    }
}

/// One mode's client (and server), ready to run queries.
pub struct Session {
    pub mode: Mode,
    pub ctx: SessionContext,
    server: Option<ServerProcess>,
    counters: ClientStoreCounters,
    /// The link the client reaches the server through, and its proxies
    /// (Flight SQL, admin): `None` / empty on loopback and without a server.
    link: Option<Link>,
    _proxies: Vec<LinkProxy>,
    /// The Flight SQL address the client uses (the proxy's with a link).
    client_flight_url: Option<String>,
}

/// The client of the fixed pushdown modes (`parquet-pushdown`,
/// `arrow-pushdown`, `liquid`, and the other suites' server clients): no
/// compute-side cache, so every scan is pushed down whole and the figures
/// measure the server's form alone.
pub fn pushdown_only() -> silt_client::SiltTableOptions {
    silt_client::SiltTableOptions {
        local_cache_bytes: 0,
        ..Default::default()
    }
}

/// Registers the suite's buckets (`s3://{bucket}`) on `ctx` as `store`.
fn register_store(ctx: &SessionContext, bucket: &str, store: Arc<dyn ObjectStore>) -> anyhow::Result<()> {
    ctx.register_object_store(&Url::parse(&format!("s3://{bucket}"))?, store);
    Ok(())
}

/// Runs each statement of `ddl` on `ctx`.
async fn run_ddl(ctx: &SessionContext, ddl: &[String]) -> anyhow::Result<()> {
    for stmt in ddl {
        ctx.sql(stmt)
            .await
            .with_context(|| format!("running `{stmt}`"))?
            .collect()
            .await
            .with_context(|| format!("running `{stmt}`"))?;
    }
    Ok(())
}

/// The client's DataFusion context, seeing changes as the run's validation
/// promises. DataFusion keeps every listing forever by default (its
/// list-files cache: 1 MiB, no TTL), so a client reading files itself
/// (`direct`, `file-server`, `local`) would never list again after its first
/// query: it would not see an overwrite, and it would skip the round trip a
/// Silt scan pays under `always`. So its listings are kept as long as the
/// validation trusts one: never under `always`, the TTL under `ttl=`, until
/// a sweep under `notify` (no notices reach a client), forever under
/// `immutable`. Silt's own clients list through the server either way.
fn client_context(validation: &str) -> anyhow::Result<SessionContext> {
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use silt_cache::Freshness;
    let freshness: Freshness = validation
        .parse()
        .map_err(|e| anyhow::anyhow!("validation {validation:?}: {e}"))?;
    let runtime = match freshness {
        Freshness::Always => RuntimeEnvBuilder::new().with_object_list_cache_limit(0),
        Freshness::Ttl(ttl) | Freshness::Notify { sweep: ttl } => {
            RuntimeEnvBuilder::new().with_object_list_cache_ttl(Some(ttl))
        }
        Freshness::Immutable => RuntimeEnvBuilder::new(),
    };
    Ok(SessionContext::new_with_config_rt(
        datafusion::prelude::SessionConfig::new(),
        runtime.build_arc()?,
    ))
}

impl Session {
    /// Starts `mode` over `suite` with an empty cache.
    pub async fn start(
        mode: Mode,
        suite: &Suite,
        setup: &StoreSetup,
        work: &std::path::Path,
    ) -> anyhow::Result<Session> {
        let server = match mode.server() {
            None => None,
            Some((form, memory)) => {
                let spec = ServerSpec {
                    memory_form: form,
                    memory_budget: if memory { setup.memory_budget } else { 0 },
                    squeeze_share: setup.squeeze_share,
                    store_endpoint: setup.s3.endpoint.clone().unwrap_or_default(),
                    store_latency_ms: setup.latency_ms,
                    store_mbps: setup.mbps,
                    validation: setup.validation.clone(),
                };
                Some(ServerProcess::start(&spec, suite, work).await?)
            }
        };
        Self::connect(mode, suite, setup, server).await
    }

    /// `kill -9`s this session's server, starts it again on the same cache
    /// dir, waits for its recovery, and connects a new client of the same
    /// mode (its compute-side cache, if any, starts empty, as a restarted
    /// client's would). Only for modes with a cache server.
    pub async fn restart(self, suite: &Suite, setup: &StoreSetup) -> anyhow::Result<Session> {
        let Session { mode, server, .. } = self;
        let mut server = server.context("only a mode with a cache server can be restarted")?;
        server.kill_and_restart(Duration::from_secs(300)).await?;
        Self::connect(mode, suite, setup, Some(server)).await
    }

    /// A client of `mode` for `server` (`None` for the modes without one).
    async fn connect(
        mode: Mode,
        suite: &Suite,
        setup: &StoreSetup,
        server: Option<ServerProcess>,
    ) -> anyhow::Result<Session> {
        let ctx = client_context(&setup.validation)?;
        let counters = ClientStoreCounters::default();
        // The client's traffic crosses the link; the harness's own probes
        // (the server's statistics) go to the server directly.
        let link = server.as_ref().and(setup.link.clone());
        let mut proxies = Vec::new();
        let (client_flight_url, client_admin_url) = match (&server, &link) {
            (Some(server), Some(link)) => {
                let (flight, flight_url) = through_link(link, &server.flight_url)?;
                let (admin, admin_url) = through_link(link, &server.admin_url)?;
                proxies.extend([flight, admin]);
                (Some(flight_url), Some(admin_url))
            }
            (Some(server), None) => (Some(server.flight_url.clone()), Some(server.admin_url.clone())),
            (None, _) => (None, None),
        };
        match (mode, &server) {
            (Mode::Direct, _) => {
                let faults = FaultConfig {
                    latency: Duration::from_millis(setup.latency_ms),
                    bytes_per_second: Some((setup.mbps * 1e6) as u64),
                    ..Default::default()
                };
                for bucket in suite.buckets() {
                    // The client's own retries and deadlines, as a server's store has.
                    let raw: Arc<dyn ObjectStore> = Arc::new(RetryingStore::new(
                        TableLocation::parse(&format!("s3://{bucket}/"))?
                            .open(&setup.s3.clone().into(), &Arc::new(InMemory::new()))?,
                        RetryPolicy::default(),
                    ));
                    let store = counters.wrap(Arc::new(FaultyStore::new(raw, faults.clone())));
                    register_store(&ctx, &bucket, store)?;
                }
                run_ddl(&ctx, &suite.ddl(|t| format!("s3://{}/{}", t.bucket, t.prefix))).await?;
            }
            (Mode::Local, _) => {
                let location = |t: &super::suite::TableSpec| {
                    let path = suite.local_path(t);
                    let path = path.display().to_string();
                    if t.prefix.ends_with('/') && !path.ends_with('/') {
                        format!("{path}/")
                    } else {
                        path
                    }
                };
                run_ddl(&ctx, &suite.ddl(location)).await?;
            }
            (Mode::FileServer, Some(_)) => {
                let admin_url = client_admin_url.as_deref().unwrap_or_default();
                // Bucket = table name on Silt's S3 API; keys are relative to the table's prefix.
                for t in &suite.tables {
                    let store = AmazonS3Builder::new()
                        .with_endpoint(format!("{admin_url}/s3"))
                        .with_bucket_name(&t.name)
                        .with_region(silt_bench::local_s3::REGION)
                        .with_allow_http(true)
                        .with_virtual_hosted_style_request(false)
                        .with_skip_signature(true)
                        .build()
                        .with_context(|| format!("opening Silt's S3 API for {}", t.name))?;
                    register_store(&ctx, &t.name, counters.wrap(Arc::new(store)))?;
                }
                let single_file = |t: &super::suite::TableSpec| !t.prefix.ends_with('/');
                run_ddl(
                    &ctx,
                    &suite.ddl(|t| {
                        if single_file(t) {
                            format!("s3://{}/{}", t.name, t.prefix)
                        } else {
                            format!("s3://{}/", t.name)
                        }
                    }),
                )
                .await?;
            }
            (Mode::Hybrid | Mode::HybridLfu | Mode::CachingOnly, Some(_)) => {
                let flight_url = client_flight_url.as_deref().unwrap_or_default();
                let client = silt_client::SiltClient::connect(flight_url).await?;
                let options = silt_client::SiltTableOptions {
                    local_cache_bytes: setup.local_cache,
                    local_cache_policy: match mode {
                        Mode::HybridLfu => silt_client::CachePolicy::Lfu,
                        _ => silt_client::CachePolicy::WeightedLfu,
                    },
                    caching_only: mode == Mode::CachingOnly,
                    local_cache_form: setup.local_cache_form,
                    // Told the simulated link's bandwidth, as `silt query
                    // --link-mbps` would be; the default (10 Gbit/s) otherwise.
                    link_bytes_per_second: link.as_ref().map(|l| l.shape().bits_per_second / 8.0),
                };
                silt_client::register_tables_with_options(&ctx, &client, &options)
                    .await
                    .with_context(|| format!("registering the tables of {flight_url}"))?;
            }
            (Mode::Silt, Some(_)) => {
                let flight_url = client_flight_url.as_deref().unwrap_or_default();
                silt_client::register_tables(&ctx, flight_url)
                    .await
                    .with_context(|| format!("registering the tables of {flight_url}"))?;
            }
            (_, Some(_)) => {
                // A fixed mode: every scan pushed down whole, no compute-side cache.
                let flight_url = client_flight_url.as_deref().unwrap_or_default();
                let client = silt_client::SiltClient::connect(flight_url).await?;
                silt_client::register_tables_with_options(&ctx, &client, &pushdown_only())
                    .await
                    .with_context(|| format!("registering the tables of {flight_url}"))?;
            }
            (_, None) => anyhow::bail!("mode {} needs a server", mode.name()),
        }
        Ok(Session {
            mode,
            ctx,
            server,
            counters,
            link,
            _proxies: proxies,
            client_flight_url,
        })
    }

    /// The Flight SQL address the client uses for this mode's server, if it
    /// has one: through the simulated link when the run has one.
    pub fn flight_url(&self) -> Option<&str> {
        self.client_flight_url.as_deref()
    }

    /// The server's own Flight SQL address, bypassing the link: for the
    /// harness's preparations (preload), not for measured traffic.
    pub fn server_flight_url(&self) -> Option<&str> {
        self.server.as_ref().map(|s| s.flight_url.as_str())
    }

    /// Bytes across the link so far (to the client, to the server), and the
    /// CPU seconds of its proxies' threads; `None` without a link.
    pub fn link_counters(&self) -> Option<silt_bench::link::LinkCounters> {
        self.link.as_ref().map(Link::counters)
    }

    /// This process's CPU seconds, less what the run's link proxies used
    /// (they run in this process but are not the client's work).
    fn client_cpu(&self) -> f64 {
        let proxies = self.link.as_ref().map_or(0.0, |l| l.counters().proxy_cpu_s);
        procfs::own_cpu_seconds() - proxies
    }

    /// Runs `sql` (a script: its last statement is the query) and returns the rows.
    pub async fn run(&self, sql: &str) -> anyhow::Result<Vec<RecordBatch>> {
        Ok(silt_client::script::run_script_last_query(&self.ctx, sql).await?)
    }

    /// The figures now.
    pub async fn probe(&mut self) -> anyhow::Result<Probe> {
        let client_cpu = self.client_cpu();
        let link = self.link_counters().map(|c| (c.to_client, c.to_server));
        let (client_requests, client_bytes) = self.counters.read();
        let Some(server) = self.server.as_mut() else {
            return Ok(Probe {
                server_cpu: None,
                client_cpu,
                link,
                to_client: client_bytes,
                store_requests: client_requests,
                store_bytes: client_bytes,
                stages: None,
                parquet_decodes: 0,
                restored_chunks: 0,
            });
        };
        let server_cpu = server.usage()?.cpu_seconds;
        let stats = server.stats().await?;
        let to_client = match self.mode {
            Mode::FileServer => client_bytes,
            _ => metric(&stats, "silt_flight_bytes_sent_total"),
        };
        Ok(Probe {
            server_cpu: Some(server_cpu),
            client_cpu,
            link,
            to_client,
            store_requests: metric(&stats, "silt_object_store_get_requests_total"),
            store_bytes: metric(&stats, "silt_object_store_get_bytes_total"),
            parquet_decodes: stats["tables"].as_object().map_or(0, |t| {
                t.values().map(|t| t["parquet_decodes"].as_u64().unwrap_or(0)).sum()
            }),
            restored_chunks: stats["tiers"]["memory"]["squeezed"]["restored_chunks"]
                .as_u64()
                .unwrap_or(0),
            stages: (self.mode != Mode::FileServer).then(|| {
                ServerStages::NAMES.map(|stage| {
                    stats["metrics"][format!("silt_query_stage_seconds_sum{{stage=\"{stage}\"}}")]
                        .as_f64()
                        .unwrap_or(0.0)
                })
            }),
        })
    }

    /// Waits for background work (transcoding, then squeezing what it
    /// made) to finish.
    pub async fn settle(&self) -> anyhow::Result<()> {
        match &self.server {
            Some(s) => s.wait_background(Duration::from_secs(300)).await,
            None => Ok(()),
        }
    }

    /// Cache memory by tier and the server's RSS (None without a server).
    pub async fn memory(&mut self, parquet: &ParquetSizes) -> anyhow::Result<Option<silt_bench::results::MemoryUse>> {
        let Some(server) = self.server.as_mut() else {
            return Ok(None);
        };
        let usage = server.usage()?;
        let stats = server.stats().await?;
        let held = held_columns(&stats);
        Ok(Some(silt_bench::results::MemoryUse {
            memory_tier_bytes: tier_bytes(&stats, "memory"),
            memory_tier_arrow_bytes: held.iter().map(|h| h.arrow_bytes).sum(),
            memory_tier_parquet_bytes: parquet.bytes_of(&held),
            page_buffer_bytes: tier_bytes(&stats, "pages"),
            metadata_bytes: tier_bytes(&stats, "metadata"),
            disk_tier_bytes: tier_bytes(&stats, "disk"),
            rss_bytes: usage.rss_bytes,
            peak_rss_bytes: usage.peak_rss_bytes,
        }))
    }
}

/// One (table, column) of the memory tier, from the server's statistics.
pub struct HeldColumn {
    pub table: String,
    pub column: String,
    pub batches: u64,
    pub arrow_bytes: u64,
}

fn held_columns(stats: &serde_json::Value) -> Vec<HeldColumn> {
    stats["tiers"]["memory"]["columns"]
        .as_array()
        .map(|cols| {
            cols.iter()
                .map(|c| HeldColumn {
                    table: c["table"].as_str().unwrap_or_default().to_string(),
                    column: c["column"].as_str().unwrap_or_default().to_string(),
                    batches: c["batches"].as_u64().unwrap_or(0),
                    arrow_bytes: c["arrow_bytes"].as_u64().unwrap_or(0),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Compressed Parquet bytes and 8192-row batches per (table, top-level
/// column), read from the local files' footers: the yardstick for the memory
/// tier's size.
#[derive(Default)]
pub struct ParquetSizes(std::collections::HashMap<(String, String), (u64, u64)>);

impl ParquetSizes {
    /// Reads the footers of every table's local files.
    pub fn of(suite: &Suite) -> anyhow::Result<ParquetSizes> {
        use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
        let mut sizes = std::collections::HashMap::new();
        for t in &suite.tables {
            let path = suite.local_path(t);
            let files = if path.is_dir() {
                silt_bench::files::files_with_extension(&path, "parquet")
            } else {
                vec![path]
            };
            for f in files {
                let file = std::fs::File::open(&f).with_context(|| format!("opening {}", f.display()))?;
                let reader = SerializedFileReader::new(file).with_context(|| format!("reading {}", f.display()))?;
                let meta = reader.metadata();
                let schema = meta.file_metadata().schema_descr();
                for rg in meta.row_groups() {
                    let batches = (rg.num_rows() as u64).div_ceil(8192);
                    let mut seen = std::collections::HashSet::new();
                    for (leaf, chunk) in rg.columns().iter().enumerate() {
                        let root = schema.get_column_root(leaf).name().to_string();
                        let entry = sizes.entry((t.name.clone(), root.clone())).or_insert((0, 0));
                        entry.0 += chunk.compressed_size() as u64;
                        if seen.insert(root) {
                            entry.1 += batches;
                        }
                    }
                }
            }
        }
        Ok(ParquetSizes(sizes))
    }

    /// Parquet bytes of the batches `held`, pro rata per column.
    fn bytes_of(&self, held: &[HeldColumn]) -> u64 {
        held.iter()
            .filter_map(|h| {
                let (bytes, batches) = self.0.get(&(h.table.clone(), h.column.clone()))?;
                (*batches > 0).then(|| bytes * h.batches.min(*batches) / batches)
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    #[test]
    fn through_link_points_the_url_at_a_proxy_that_reaches_the_server() {
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = server.local_addr().unwrap().port();
        let link = "1gbit/0.1ms"
            .parse::<silt_bench::link::LinkSpec>()
            .unwrap()
            .link()
            .unwrap();
        let (proxy, url) = through_link(&link, &format!("http://127.0.0.1:{port}")).unwrap();
        assert_eq!(url, format!("http://{}", proxy.local_addr()));
        assert_ne!(proxy.local_addr().port(), port);
        let mut client = std::net::TcpStream::connect(proxy.local_addr()).unwrap();
        client.write_all(b"ping").unwrap();
        let (mut s, _) = server.accept().unwrap();
        let mut got = [0u8; 4];
        s.read_exact(&mut got).unwrap();
        s.write_all(b"pong!").unwrap();
        let mut back = [0u8; 5];
        client.read_exact(&mut back).unwrap();
        assert_eq!((&got, &back), (b"ping", b"pong!"));
        let c = link.counters();
        assert_eq!((c.to_server, c.to_client), (4, 5));
    }
}
