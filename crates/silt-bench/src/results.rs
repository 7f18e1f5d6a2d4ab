//! `results.json`: what one `silt bench clickbench|tpch|smoke` run measured.
//!
//! The schema is documented field by field in `docs/bench-results.md`; these
//! types are its single definition (the report and the plots read them back).
//! Every figure is a raw measurement of this run; ratios are computed by the
//! report, against baselines measured in the same run.

use serde::{Deserialize, Serialize};

/// Bumped on any incompatible change of the file.
pub const SCHEMA_VERSION: u32 = 1;

/// One run of a suite over several modes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchResults {
    pub schema_version: u32,
    /// The run's name: its folder under `bench-results/`.
    pub name: String,
    /// `clickbench`, `tpch` or `smoke`.
    pub suite: String,
    /// Seconds since the Unix epoch when the run started.
    pub started_unix: u64,
    pub machine: Machine,
    pub config: RunConfig,
    pub data: DataSet,
    pub queries: Vec<QuerySpec>,
    /// One per (mode, query), modes in the order they ran.
    pub results: Vec<QueryResult>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    pub cores: usize,
    pub memory_bytes: u64,
    /// `release` or `debug`: debug timings are not comparable with anything.
    pub build: String,
}

/// The knobs of the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunConfig {
    pub modes: Vec<String>,
    /// Latency added to every object-store request (direct mode and the cache servers' misses).
    pub store_latency_ms: u64,
    /// Bandwidth cap of the link to the object store, MB/s.
    pub store_mbps: f64,
    /// Timed warm runs per query (after one untimed warm-up run).
    pub warm_runs: usize,
    /// Memory-tier budget of the cache servers, bytes.
    pub memory_budget: u64,
    /// The simulated network between the client and the cache servers
    /// (`--link`); absent in files written before it existed (loopback).
    #[serde(default)]
    pub link: Option<LinkConfig>,
}

/// The simulated link between compute and cache (`--link`, see
/// [`crate::link`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkConfig {
    /// As given: `1gbit/0.5ms`, or `none` (loopback, no proxy).
    pub given: String,
    /// Bits per second in each direction; `null` for `none`.
    pub bits_per_second: Option<f64>,
    /// Round-trip time in seconds; `null` for `none`.
    pub rtt_s: Option<f64>,
}

impl LinkConfig {
    /// Whether a link was simulated (not `none`).
    pub fn is_shaped(&self) -> bool {
        self.bits_per_second.is_some()
    }
}

/// The data the queries read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DataSet {
    pub description: String,
    /// Rows of the main table (hits) or the TPC-H scale factor's lineitem rows.
    pub rows: u64,
    pub files: usize,
    /// Parquet bytes of all files.
    pub parquet_bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuerySpec {
    /// e.g. `q10` (ClickBench, 0-based as in its queries folder) or `q06` (TPC-H).
    pub id: String,
    /// The text every mode ran (ties of LIMIT queries broken on every output column).
    pub sql: String,
}

/// How one mode did on one query.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct QueryResult {
    pub mode: String,
    pub query: String,
    /// `ok`, `error` (see `error`), or `skipped` (the mode cannot run here; see `error`).
    pub status: String,
    pub error: Option<String>,
    /// Rows returned.
    pub rows: Option<u64>,
    /// Whether the rows equal plain DataFusion's on the local files; `null` when not compared (duckdb).
    pub matches_reference: Option<bool>,
    /// First run on an empty cache (for direct and duckdb: a fresh context).
    pub cold_ms: Option<f64>,
    pub warm_ms: Option<Spread>,
    /// CPU seconds of the cache server process; `null` for modes without one.
    pub server_cpu_s: Option<CpuPhases>,
    /// CPU seconds of the client process (the harness itself; duckdb: its Python process).
    pub client_cpu_s: Option<CpuPhases>,
    /// Bytes that reached the client: Flight IPC bytes from a pushdown server, object bytes otherwise.
    pub bytes_to_client: Option<PhasesU64>,
    /// Requests and bytes the object store served, cold and per warm run.
    pub object_store: Option<StoreTraffic>,
    /// Cache memory and server RSS after the warm runs.
    pub memory: Option<MemoryUse>,
    /// Where a warm query's server time went (mean over the warm runs), from
    /// the server's `silt_query_stage_seconds` histograms; `null` for modes
    /// without a pushdown server.
    #[serde(default)]
    pub server_stages_ms: Option<ServerStages>,
    /// Bytes that crossed the simulated link (`--link`), both directions
    /// summed; `null` without a link or for modes without a cache server.
    #[serde(default)]
    pub link_bytes: Option<PhasesU64>,
    /// Of those, server to client.
    #[serde(default)]
    pub link_bytes_to_client: Option<PhasesU64>,
    /// Of those, client to server.
    #[serde(default)]
    pub link_bytes_to_server: Option<PhasesU64>,
    /// The first run after the server was killed (`kill -9`) and restarted
    /// on the same cache dir (`--restart`); `null` without it or without a
    /// cache server.
    #[serde(default)]
    pub restart: Option<RestartRun>,
}

/// The first run of a query on a server restarted after a `kill -9` of
/// the warm one, on the same cache dir, once its recovery ended.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct RestartRun {
    pub ms: f64,
    /// Whether its rows equal plain DataFusion's.
    pub matches_reference: bool,
    /// Object-store GETs and bytes of the run (0: everything came from disk).
    pub store_requests: u64,
    pub store_bytes: u64,
    /// Column chunks decoded from Parquet during the run (0: none).
    pub parquet_decodes: u64,
    /// Column chunks read back from the squeeze tier during the run.
    pub restored_chunks: u64,
    /// CPU seconds of the restarted server during the run.
    pub server_cpu_s: f64,
}

/// Server time of one query by stage, in milliseconds (see
/// `silt_server::query::trace`): exclusive, so their sum is the server's
/// share of the latency and the rest is the client and the network.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct ServerStages {
    pub validation: f64,
    pub planning: f64,
    pub scan: f64,
    pub encode: f64,
    pub send: f64,
}

impl ServerStages {
    /// The stages' names, as the server labels them, in field order.
    pub const NAMES: [&'static str; 5] = ["validation", "planning", "scan", "encode", "send"];

    /// From values in [`ServerStages::NAMES`] order.
    pub fn from_array(v: [f64; 5]) -> Self {
        ServerStages {
            validation: v[0],
            planning: v[1],
            scan: v[2],
            encode: v[3],
            send: v[4],
        }
    }

    /// Values in [`ServerStages::NAMES`] order.
    pub fn to_array(&self) -> [f64; 5] {
        [self.validation, self.planning, self.scan, self.encode, self.send]
    }
}

/// Median, min and max of the warm runs, and the runs themselves.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub runs: Vec<f64>,
}

impl Spread {
    /// `None` for no runs.
    pub fn of(runs: Vec<f64>) -> Option<Spread> {
        let mut sorted = runs.clone();
        sorted.sort_by(f64::total_cmp);
        Some(Spread {
            median: median_sorted(&sorted)?,
            min: *sorted.first()?,
            max: *sorted.last()?,
            runs,
        })
    }
}

fn median_sorted(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// The mean of `values` (`None` when empty).
pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Geometric mean of the positive `values` (`None` when there are none).
pub fn geomean(values: &[f64]) -> Option<f64> {
    let logs: Vec<f64> = values.iter().filter(|v| **v > 0.0).map(|v| v.ln()).collect();
    (!logs.is_empty()).then(|| (logs.iter().sum::<f64>() / logs.len() as f64).exp())
}

/// The median of `values` (`None` when empty).
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    median_sorted(&sorted)
}

/// CPU seconds of the cold run and per warm run. The warm figure is the
/// mean over the warm runs (total CPU / runs): `/proc` counts CPU in 10 ms
/// ticks, too coarse for one fast query, so a median of single runs would
/// be mostly rounding.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct CpuPhases {
    pub cold: f64,
    pub warm_mean: f64,
}

/// A count for the cold run and the median of the warm runs.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct PhasesU64 {
    pub cold: u64,
    pub warm_median: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct StoreTraffic {
    pub cold_requests: u64,
    pub cold_bytes: u64,
    pub warm_requests: u64,
    pub warm_bytes: u64,
}

/// Bytes held, read from the server's statistics and `/proc`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct MemoryUse {
    pub memory_tier_bytes: u64,
    /// What the memory tier's batches would take as Arrow (equal to
    /// `memory_tier_bytes` in the arrow form).
    pub memory_tier_arrow_bytes: u64,
    /// Compressed Parquet bytes of the same column batches (each column
    /// chunk's compressed size, pro rata of the batches held).
    pub memory_tier_parquet_bytes: u64,
    pub page_buffer_bytes: u64,
    pub metadata_bytes: u64,
    pub disk_tier_bytes: u64,
    /// Resident memory of the process that held the data (server; duckdb: its process).
    pub rss_bytes: u64,
    /// Its largest resident memory over the query's runs, cold included
    /// (`VmHWM`; a fresh server per query); 0 when not measured.
    #[serde(default)]
    pub peak_rss_bytes: u64,
}

impl BenchResults {
    /// What is missing for the file to be complete: every (mode, query) pair
    /// present, and each `ok` one carrying every figure its mode produces.
    /// Empty when complete. `silt bench smoke` fails on a non-empty answer.
    pub fn missing(&self) -> Vec<String> {
        let mut missing = Vec::new();
        for mode in &self.config.modes {
            for q in &self.queries {
                let Some(r) = self.results.iter().find(|r| &r.mode == mode && r.query == q.id) else {
                    missing.push(format!("{mode}/{}: no result", q.id));
                    continue;
                };
                let linked = self.config.link.as_ref().is_some_and(LinkConfig::is_shaped);
                missing.extend(
                    r.missing_figures(linked)
                        .into_iter()
                        .map(|f| format!("{mode}/{}: {f}", q.id)),
                );
            }
        }
        missing
    }
}

impl QueryResult {
    /// Whether this is a DuckDB mode (`duckdb`, `duckdb-s3`): an outside
    /// reference, with no server and no answer comparison.
    pub fn is_duckdb(&self) -> bool {
        matches!(self.mode.as_str(), "duckdb" | "duckdb-s3")
    }

    /// Whether this mode's client reaches a cache server over the simulated
    /// link when a run has one (`liquidcache` runs outside the harness's
    /// sessions and gets none).
    pub fn crosses_link(&self) -> bool {
        !self.is_duckdb() && !matches!(self.mode.as_str(), "direct" | "local" | "liquidcache")
    }

    /// The figures an `ok` result of this mode must carry and does not;
    /// `linked`: the run had a simulated link.
    fn missing_figures(&self, linked: bool) -> Vec<&'static str> {
        let mut missing = Vec::new();
        match self.status.as_str() {
            "ok" => {}
            "error" | "skipped" => {
                if self.error.is_none() {
                    missing.push("status without an error message");
                }
                return missing;
            }
            _ => return vec!["unknown status"],
        }
        let has_server = !self.is_duckdb() && !matches!(self.mode.as_str(), "direct" | "local");
        let checks: [(bool, &'static str); 9] = [
            (self.rows.is_some(), "rows"),
            (self.cold_ms.is_some(), "cold_ms"),
            (self.warm_ms.is_some(), "warm_ms"),
            (self.client_cpu_s.is_some(), "client_cpu_s"),
            (!has_server || self.server_cpu_s.is_some(), "server_cpu_s"),
            (self.is_duckdb() || self.bytes_to_client.is_some(), "bytes_to_client"),
            (self.is_duckdb() || self.object_store.is_some(), "object_store"),
            (
                self.memory.is_some() || matches!(self.mode.as_str(), "direct" | "local"),
                "memory",
            ),
            (
                !linked || !self.crosses_link() || self.link_bytes.is_some(),
                "link_bytes",
            ),
        ];
        missing.extend(checks.iter().filter(|(ok, _)| !ok).map(|(_, name)| *name));
        missing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_and_median() {
        let s = Spread::of(vec![3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.5, 1.0, 10.0));
        assert_eq!(s.runs, vec![3.0, 1.0, 2.0, 10.0]);
        assert!(Spread::of(vec![]).is_none());
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
    }

    #[test]
    fn missing_names_absent_pairs_and_figures() {
        let results = BenchResults {
            schema_version: SCHEMA_VERSION,
            name: "t".into(),
            suite: "smoke".into(),
            started_unix: 0,
            machine: Machine {
                cores: 2,
                memory_bytes: 1,
                build: "debug".into(),
            },
            config: RunConfig {
                modes: vec!["liquid".into(), "direct".into()],
                store_latency_ms: 0,
                store_mbps: 1.0,
                warm_runs: 1,
                memory_budget: 1,
                link: Some(LinkConfig {
                    given: "1gbit/1ms".into(),
                    bits_per_second: Some(1e9),
                    rtt_s: Some(1e-3),
                }),
            },
            data: DataSet {
                description: String::new(),
                rows: 0,
                files: 0,
                parquet_bytes: 0,
            },
            queries: vec![QuerySpec {
                id: "q1".into(),
                sql: String::new(),
            }],
            results: vec![QueryResult {
                mode: "liquid".into(),
                query: "q1".into(),
                status: "ok".into(),
                rows: Some(1),
                cold_ms: Some(1.0),
                ..Default::default()
            }],
        };
        let missing = results.missing();
        assert!(missing.contains(&"direct/q1: no result".to_string()), "{missing:?}");
        assert!(missing.contains(&"liquid/q1: server_cpu_s".to_string()), "{missing:?}");
        assert!(!missing.iter().any(|m| m.contains("cold_ms")), "{missing:?}");
        assert!(missing.contains(&"liquid/q1: link_bytes".to_string()), "{missing:?}");
    }

    #[test]
    fn files_without_a_link_still_read() {
        let config: RunConfig = serde_json::from_str(
            r#"{"modes":["liquid"],"store_latency_ms":20,"store_mbps":100.0,"warm_runs":5,"memory_budget":1}"#,
        )
        .unwrap();
        assert_eq!(config.link, None);
        let result: QueryResult = serde_json::from_str(
            r#"{"mode":"liquid","query":"q1","status":"ok","error":null,"rows":1,"matches_reference":true,
                "cold_ms":1.0,"warm_ms":null,"server_cpu_s":null,"client_cpu_s":null,
                "bytes_to_client":null,"object_store":null,"memory":null}"#,
        )
        .unwrap();
        assert!(result.link_bytes.is_none() && result.link_bytes_to_client.is_none());
        let lookup: LookupConfig = serde_json::from_str(
            r#"{"modes":["liquid"],"clients":1,"seconds":1.0,"warmup_lookups":1,"store_latency_ms":0,
                "store_mbps":1.0,"sql":""}"#,
        )
        .unwrap();
        assert_eq!(lookup.link, None);
    }
}

/// `silt bench lookup`'s `results.json`: point lookups in a closed loop.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LookupResults {
    pub schema_version: u32,
    pub name: String,
    /// Always `lookup`.
    pub suite: String,
    pub started_unix: u64,
    pub machine: Machine,
    pub config: LookupConfig,
    pub data: DataSet,
    /// One per mode.
    pub results: Vec<LookupResult>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LookupConfig {
    pub modes: Vec<String>,
    /// Concurrent clients, each waiting for its answer before asking again.
    pub clients: usize,
    /// Seconds each mode is measured (after its warm-up).
    pub seconds: f64,
    /// Untimed lookups per client before measuring.
    pub warmup_lookups: usize,
    pub store_latency_ms: u64,
    pub store_mbps: f64,
    /// The query, `?` standing for the random id.
    pub sql: String,
    /// The simulated link between clients and server (`--link`).
    #[serde(default)]
    pub link: Option<LinkConfig>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LookupResult {
    pub mode: String,
    /// `ok`, `error` or `skipped`, as for queries.
    pub status: String,
    pub error: Option<String>,
    /// Lookups answered in the measured window (all clients).
    pub lookups: u64,
    /// Answers that were not exactly the row asked for (must be 0).
    pub wrong_answers: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub lookups_per_s: f64,
    /// Server CPU seconds per lookup (`null` without a server).
    pub server_cpu_s_per_lookup: Option<f64>,
    /// Client CPU seconds per lookup.
    pub client_cpu_s_per_lookup: f64,
    /// Bytes that crossed the simulated link in the measured window, both
    /// directions; `null` without a link or a server.
    #[serde(default)]
    pub link_bytes: Option<u64>,
    /// Of those, server to client.
    #[serde(default)]
    pub link_bytes_to_client: Option<u64>,
}

/// The `q`-quantile (0..=1) of `sorted` by nearest rank (0 when empty).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod lookup_tests {
    use super::quantile;

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }
}
