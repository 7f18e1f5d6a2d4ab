//! A cache server of one mode as a child `silt serve` process: its config,
//! its statistics over Flight, and its CPU and memory from `/proc`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;
use silt_bench::procfs::{self, ProcessUsage};
use silt_client::SiltClient;

use super::child::{ChildGuard, spawn_and_wait};
use super::suite::Suite;

/// How to configure one server.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    /// `liquid` or `arrow`.
    pub memory_form: &'static str,
    pub memory_budget: u64,
    /// `squeeze_share` of the server's config (`None`: its default).
    pub squeeze_share: Option<f64>,
    pub store_endpoint: String,
    pub store_latency_ms: u64,
    pub store_mbps: f64,
    /// Per-table validation (`always`, `ttl=..`, `immutable`).
    pub validation: String,
}

/// A running server. Killed when dropped.
pub struct ServerProcess {
    guard: ChildGuard,
    pub flight_url: String,
    pub admin_url: String,
    client: SiltClient,
    /// Its config file (in `cache_dir`), to start it again.
    config: PathBuf,
    _cache_dir: tempfile::TempDir,
}

/// The server's TOML config: every table of `suite` from the loopback store, its views.
fn config_toml(spec: &ServerSpec, suite: &Suite, cache_dir: &Path) -> anyhow::Result<String> {
    use toml::{Table, Value as T};
    let mut top = Table::new();
    top.insert("listen".into(), T::String("127.0.0.1:0".into()));
    top.insert("admin".into(), T::String("127.0.0.1:0".into()));
    top.insert("cache_dir".into(), T::String(cache_dir.display().to_string()));
    top.insert("memory_budget".into(), T::String(spec.memory_budget.to_string()));
    top.insert("memory_form".into(), T::String(spec.memory_form.into()));
    if let Some(share) = spec.squeeze_share {
        top.insert("squeeze_share".into(), T::Float(share));
    }
    let mut s3 = Table::new();
    s3.insert("endpoint".into(), T::String(spec.store_endpoint.clone()));
    s3.insert(
        "access_key_id".into(),
        T::String(silt_bench::local_s3::ACCESS_KEY.into()),
    );
    s3.insert(
        "secret_access_key".into(),
        T::String(silt_bench::local_s3::SECRET_KEY.into()),
    );
    s3.insert("region".into(), T::String(silt_bench::local_s3::REGION.into()));
    s3.insert("allow_http".into(), T::Boolean(true));
    top.insert("s3".into(), T::Table(s3));
    let mut store = Table::new();
    store.insert("latency".into(), T::String(format!("{}ms", spec.store_latency_ms)));
    store.insert("mbps".into(), T::Float(spec.store_mbps));
    top.insert("store".into(), T::Table(store));
    let mut tables = Table::new();
    for t in &suite.tables {
        let mut table = Table::new();
        table.insert("url".into(), T::String(format!("s3://{}/{}", t.bucket, t.prefix)));
        table.insert("binary_as_string".into(), T::Boolean(t.binary_as_string));
        table.insert("validation".into(), T::String(spec.validation.clone()));
        tables.insert(t.name.clone(), T::Table(table));
    }
    top.insert("tables".into(), T::Table(tables));
    let views: Table = suite
        .views
        .iter()
        .map(|(name, sql)| (name.clone(), T::String(sql.clone())))
        .collect();
    top.insert("views".into(), T::Table(views));
    toml::to_string(&top).context("writing the server config")
}

impl ServerProcess {
    /// Starts a server with an empty cache and waits until it answers.
    pub async fn start(spec: &ServerSpec, suite: &Suite, work: &Path) -> anyhow::Result<ServerProcess> {
        let cache_dir = tempfile::Builder::new()
            .prefix("silt-bench-cache-")
            .tempdir_in(work)
            .with_context(|| format!("creating a cache dir under {}", work.display()))?;
        let config: PathBuf = cache_dir.path().join("silt.toml");
        std::fs::write(&config, config_toml(spec, suite, &cache_dir.path().join("cache"))?)
            .with_context(|| format!("writing {}", config.display()))?;
        let (guard, flight_url, admin_url, client) = serve(&config).await?;
        Ok(ServerProcess {
            guard,
            flight_url,
            admin_url,
            client,
            config,
            _cache_dir: cache_dir,
        })
    }

    /// Once its background work is done (transcoding, chunks waiting to be
    /// squeezed), `kill -9`s the server and starts it again on the same
    /// config and cache dir (new addresses); returns once it answers and
    /// has recovered its disk tiers (pages and squeezed chunks), so what is
    /// measured next is a restarted server's first queries, not recovery.
    pub async fn kill_and_restart(&mut self, timeout: Duration) -> anyhow::Result<()> {
        self.wait_background(timeout).await?;
        self.guard.kill()?;
        let (guard, flight_url, admin_url, client) = serve(&self.config).await?;
        (self.guard, self.flight_url, self.admin_url, self.client) = (guard, flight_url, admin_url, client);
        let start = Instant::now();
        loop {
            let stats = self.stats().await?;
            let recovering = |tier: &Value| tier["recovering"].as_bool().unwrap_or(false);
            if !recovering(&stats["tiers"]["disk"]) && !recovering(&stats["tiers"]["memory"]["squeezed"]) {
                return Ok(());
            }
            anyhow::ensure!(
                start.elapsed() < timeout,
                "the restarted server was still recovering after {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// CPU time and RSS of the server process now.
    pub fn usage(&mut self) -> anyhow::Result<ProcessUsage> {
        self.guard.check_alive()?;
        Ok(procfs::usage(self.guard.pid())?)
    }

    /// The server's statistics (`silt stats --json`).
    pub async fn stats(&self) -> anyhow::Result<Value> {
        let text = self
            .client
            .stats_json()
            .await
            .context("reading the server's statistics")?;
        serde_json::from_str(&text).context("the server sent malformed statistics")
    }

    /// Waits until the background transcoder has converted every admitted
    /// batch, so warm runs measure the steady state.
    async fn wait_transcoded(&self, timeout: Duration) -> anyhow::Result<()> {
        self.wait_until_none(timeout, "batches still queued for the transcoder", |s| {
            s["tiers"]["memory"]["transcode_backlog"].as_u64()
        })
        .await
    }

    /// Waits until the transcoder, then the squeeze tier's writer (which
    /// the transcoder feeds, squeezing ahead), are idle.
    pub async fn wait_background(&self, timeout: Duration) -> anyhow::Result<()> {
        self.wait_transcoded(timeout).await?;
        self.wait_squeezed(timeout).await
    }

    /// Waits until no chunk waits for the squeeze tier's writer.
    async fn wait_squeezed(&self, timeout: Duration) -> anyhow::Result<()> {
        self.wait_until_none(timeout, "bytes still waiting to be squeezed", |s| {
            s["tiers"]["memory"]["squeezed"]["pending_bytes"].as_u64()
        })
        .await
    }

    /// Polls the statistics until `count` of them is 0 (or absent); after
    /// `timeout`, an error quoting the count and `what` it counts.
    async fn wait_until_none(
        &self,
        timeout: Duration,
        what: &str,
        count: impl Fn(&Value) -> Option<u64>,
    ) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            let left = count(&self.stats().await?).unwrap_or(0);
            if left == 0 {
                return Ok(());
            }
            anyhow::ensure!(start.elapsed() < timeout, "{left} {what} after {timeout:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Starts `silt serve --config config` and waits until it answers: the
/// process, its Flight SQL and admin URLs, and a client.
async fn serve(config: &Path) -> anyhow::Result<(ChildGuard, String, String, SiltClient)> {
    let exe = std::env::current_exe().context("locating the silt executable")?;
    let mut cmd = Command::new(exe);
    cmd.args(["serve", "--config"]).arg(config);
    let (guard, found) = spawn_and_wait(
        cmd,
        "silt serve",
        &["silt: Flight SQL on grpc://", "silt: admin on http://"],
        Duration::from_secs(120),
    )?;
    let flight_url = format!("http://{}", found[0]);
    let admin_url = format!("http://{}", found[1].split_whitespace().next().unwrap_or_default());
    let client = connect(&flight_url).await?;
    Ok((guard, flight_url, admin_url, client))
}

/// A Flight client, retried briefly: the server prints its address once bound,
/// and the first call on a loaded machine can still be refused.
async fn connect(url: &str) -> anyhow::Result<SiltClient> {
    let start = Instant::now();
    loop {
        match SiltClient::connect(url).await {
            Ok(c) => match c.stats_json().await {
                Ok(_) => return Ok(c),
                Err(e) if start.elapsed() > Duration::from_secs(30) => {
                    return Err(e).with_context(|| format!("the server at {url} does not answer"));
                }
                Err(_) => {}
            },
            Err(e) if start.elapsed() > Duration::from_secs(30) => {
                return Err(e).with_context(|| format!("connecting to {url}"));
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A counter from the statistics' `metrics` map (0 when absent).
pub fn metric(stats: &Value, name: &str) -> u64 {
    stats["metrics"][name].as_f64().unwrap_or(0.0) as u64
}

/// A tier's bytes in use from the statistics.
pub fn tier_bytes(stats: &Value, tier: &str) -> u64 {
    stats["tiers"][tier]["bytes"].as_u64().unwrap_or(0)
}
