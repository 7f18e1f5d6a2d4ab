//! Shared fixtures: generated data, a loopback S3 server, a Silt server on
//! top of it, a client context, a plain-DataFusion baseline, and result
//! comparison.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use silt_bench::local_s3::{ACCESS_KEY, LocalS3, REGION, SECRET_KEY};
use silt_bench::tpch;
use silt_server::config::TableConfig;
use silt_server::{ServerConfig, ServerHandle};
use silt_store::S3Settings;

pub const TPCH_SF: f64 = 0.01;

/// `../shared` from the repository root.
pub fn shared_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared");
    assert!(
        dir.join("data/nano_hits.parquet").exists(),
        "the shared benchmark folder must sit beside the repository (expected {})",
        dir.display()
    );
    dir
}

/// Folder with the data every test in this binary reads: a bucket `tpch`
/// (one folder per table) and a bucket `hits` (nano_hits.parquet).
/// Generated once per test process.
pub fn data_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("silt-it-data-{}", std::process::id()));
        tpch::generate(&dir.join("tpch"), TPCH_SF, tpch::ParquetLayout::default()).expect("generate TPC-H");
        let hits = dir.join("hits");
        std::fs::create_dir_all(&hits).expect("mkdir hits");
        std::fs::copy(shared_dir().join("data/nano_hits.parquet"), hits.join("hits.parquet")).expect("copy nano_hits");
        dir
    })
}

/// The SELECT of ClickBench's `hits` view, from `datafusion_create.sql`.
pub fn hits_view_sql() -> String {
    let text =
        std::fs::read_to_string(shared_dir().join("bench/clickbench/datafusion_create.sql")).expect("read create sql");
    let start = text.find("CREATE VIEW hits AS").expect("view in create sql") + "CREATE VIEW hits AS".len();
    text[start..].trim().trim_end_matches(';').to_string()
}

pub fn s3_settings(s3: &LocalS3) -> S3Settings {
    S3Settings {
        endpoint: Some(s3.endpoint()),
        access_key_id: Some(ACCESS_KEY.into()),
        secret_access_key: Some(SECRET_KEY.into()),
        region: Some(REGION.into()),
        allow_http: Some(true),
        session_token: None,
    }
}

/// A server config with every TPC-H table, `hits_raw` and the `hits` view,
/// all read from `s3` over HTTP.
pub fn full_config(s3: &LocalS3, cache_dir: &Path) -> ServerConfig {
    let mut cfg = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: Some("127.0.0.1:0".parse().unwrap()),
        cache_dir: cache_dir.to_path_buf(),
        s3: s3_settings(s3),
        ..Default::default()
    };
    for t in tpch::TABLES {
        cfg.tables.insert(
            t.into(),
            TableConfig {
                url: format!("s3://tpch/{t}/"),
                ..Default::default()
            },
        );
    }
    cfg.tables.insert(
        "hits_raw".into(),
        TableConfig {
            url: "s3://hits/".into(),
            binary_as_string: true,
            ..Default::default()
        },
    );
    cfg.views.insert("hits".into(), hits_view_sql());
    cfg
}

/// A loopback S3 server over [`data_root`] and a Silt server on it.
pub struct Fixture {
    pub _s3: LocalS3,
    pub server: ServerHandle,
    pub _cache_dir: tempfile::TempDir,
}

impl Fixture {
    pub async fn start() -> Fixture {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut ServerConfig)) -> Fixture {
        let s3 = LocalS3::start(data_root()).await.expect("start S3");
        let cache_dir = tempfile::tempdir().unwrap();
        let mut cfg = full_config(&s3, cache_dir.path());
        tweak(&mut cfg);
        let server = silt_server::start(cfg).await.expect("start server");
        Fixture {
            _s3: s3,
            server,
            _cache_dir: cache_dir,
        }
    }

    /// A client-side context with the server's tables registered.
    pub async fn client_ctx(&self) -> SessionContext {
        let ctx = SessionContext::new();
        silt_client::register_tables(&ctx, &self.server.flight_url())
            .await
            .expect("register tables");
        ctx
    }

    pub fn metric(&self, series: &str) -> f64 {
        self.server
            .engine
            .metrics()
            .snapshot()
            .get(series)
            .copied()
            .unwrap_or(0.0)
    }
}

/// Plain DataFusion reading the same files from local disk.
pub async fn baseline_ctx() -> SessionContext {
    let ctx = SessionContext::new();
    let root = data_root();
    for t in tpch::TABLES {
        let path = root.join("tpch").join(t);
        ctx.register_parquet(t, path.to_str().unwrap(), ParquetReadOptions::default())
            .await
            .expect("register baseline table");
    }
    let create = std::fs::read_to_string(shared_dir().join("bench/clickbench/datafusion_create.sql"))
        .unwrap()
        .replace(
            "LOCATION 'hits.parquet'",
            &format!("LOCATION '{}'", root.join("hits/hits.parquet").display()),
        );
    silt_client::script::run_script(&ctx, &create)
        .await
        .expect("create hits view");
    ctx
}

/// One value of a result row, for comparison.
#[derive(Debug, Clone)]
enum Cell {
    Null,
    Float(f64),
    Text(String),
}

impl Cell {
    fn sort_key(&self) -> String {
        match self {
            Cell::Null => "\u{0}NULL".into(),
            Cell::Float(f) => format!("{:.6e}", f),
            Cell::Text(s) => s.clone(),
        }
    }

    fn matches(&self, other: &Cell) -> bool {
        match (self, other) {
            (Cell::Null, Cell::Null) => true,
            (Cell::Text(a), Cell::Text(b)) => a == b,
            (Cell::Float(a), Cell::Float(b)) => {
                if a.is_nan() || b.is_nan() {
                    return a.is_nan() && b.is_nan();
                }
                let scale = a.abs().max(b.abs()).max(1e-300);
                a == b || (a - b).abs() / scale <= 1e-9
            }
            _ => false,
        }
    }
}

fn rows(batches: &[RecordBatch]) -> Vec<Vec<Cell>> {
    let mut out = Vec::new();
    let options = FormatOptions::default().with_null("");
    for b in batches {
        let cols: Vec<Box<dyn Fn(usize) -> Cell>> = b
            .columns()
            .iter()
            .map(|c| -> Box<dyn Fn(usize) -> Cell> {
                let c = c.clone();
                match c.data_type() {
                    DataType::Float16 | DataType::Float32 | DataType::Float64 => {
                        let f = datafusion::arrow::compute::cast(&c, &DataType::Float64).unwrap();
                        Box::new(move |i| {
                            if f.is_null(i) {
                                Cell::Null
                            } else {
                                let a = f
                                    .as_any()
                                    .downcast_ref::<datafusion::arrow::array::Float64Array>()
                                    .unwrap();
                                Cell::Float(a.value(i))
                            }
                        })
                    }
                    _ => {
                        let options = options.clone();
                        Box::new(move |i| {
                            if c.is_null(i) {
                                Cell::Null
                            } else {
                                let fmt = ArrayFormatter::try_new(c.as_ref(), &options).unwrap();
                                Cell::Text(fmt.value(i).to_string())
                            }
                        })
                    }
                }
            })
            .collect();
        for i in 0..b.num_rows() {
            out.push(cols.iter().map(|f| f(i)).collect());
        }
    }
    out
}

fn same_rows(a: &[Vec<Cell>], b: &[Vec<Cell>]) -> Option<String> {
    if a.len() != b.len() {
        return Some(format!("row counts differ: {} vs {}", a.len(), b.len()));
    }
    for (i, (ra, rb)) in a.iter().zip(b).enumerate() {
        if ra.len() != rb.len() || !ra.iter().zip(rb).all(|(x, y)| x.matches(y)) {
            return Some(format!("row {i} differs:\n  silt:     {ra:?}\n  baseline: {rb:?}"));
        }
    }
    None
}

/// Compare Silt's result with the baseline's: same column names and types,
/// same rows (in order when `ordered`, else as multisets), floats to 1e-9
/// relative. An ordered query may still differ in the order of rows that tie
/// on its sort keys; such a result is accepted only if the multisets match.
pub fn check_same(name: &str, silt: &[RecordBatch], baseline: &[RecordBatch], ordered: bool) -> Result<(), String> {
    let schema_of = |b: &[RecordBatch]| {
        b.first().map(|b| {
            b.schema()
                .fields()
                .iter()
                .map(|f| (f.name().clone(), f.data_type().clone()))
                .collect::<Vec<_>>()
        })
    };
    if let (Some(a), Some(b)) = (schema_of(silt), schema_of(baseline))
        && a != b
    {
        return Err(format!("{name}: schemas differ:\n  silt:     {a:?}\n  baseline: {b:?}"));
    }
    let (mut a, mut b) = (rows(silt), rows(baseline));
    if ordered && same_rows(&a, &b).is_none() {
        return Ok(());
    }
    let key = |r: &Vec<Cell>| r.iter().map(Cell::sort_key).collect::<Vec<_>>();
    a.sort_by_cached_key(key);
    b.sort_by_cached_key(key);
    match same_rows(&a, &b) {
        None => Ok(()),
        Some(diff) => Err(format!("{name}: {diff}")),
    }
}

/// Make a `... [ORDER BY k] LIMIT n [OFFSET m]` query deterministic by breaking
/// ties on every output column (`ORDER BY k, 1, 2, .., columns`). Rows that
/// tie on the query's own keys may legally come in any order, and a LIMIT
/// may legally keep any of them; both engines get the same rewritten query,
/// so the comparison stays exact. Queries without LIMIT are returned as is.
pub fn break_ties(sql: &str, columns: usize) -> String {
    let body = sql.trim().trim_end_matches(';').trim_end();
    let lower = body.to_ascii_lowercase();
    if columns == 0 {
        return sql.to_string();
    }
    let Some(limit_at) = lower.rfind("limit ") else {
        return sql.to_string();
    };
    let tail = &lower[limit_at..];
    if !tail
        .split_whitespace()
        .all(|w| w == "limit" || w == "offset" || w.chars().all(|c| c.is_ascii_digit()))
    {
        return sql.to_string();
    }
    let head = body[..limit_at].trim_end();
    let positions: Vec<String> = (1..=columns).map(|i| i.to_string()).collect();
    let order = if lower[..limit_at].contains("order by") {
        format!("{head}, {}", positions.join(", "))
    } else {
        format!("{head} ORDER BY {}", positions.join(", "))
    };
    format!("{order} {}", &body[limit_at..])
}

/// True when the query's outermost statement sorts its result.
pub fn is_ordered(sql: &str) -> bool {
    sql.to_ascii_lowercase().contains("order by")
}
