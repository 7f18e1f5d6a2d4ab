//! Shared fixtures: generated data, a loopback S3 server, a Silt server on
//! top of it, a client context, a plain-DataFusion baseline, and result
//! comparison.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use datafusion::prelude::{ParquetReadOptions, SessionContext};
use silt_bench::local_s3::LocalS3;
use silt_bench::tpch;
use silt_server::config::TableConfig;
use silt_server::{ServerConfig, ServerHandle};
use silt_store::S3Settings;

pub const TPCH_SF: f64 = 0.01;

/// `../shared` from the repository root.
pub fn shared_dir() -> PathBuf {
    let dir = silt_bench::files::source_dir(env!("CARGO_MANIFEST_DIR")).join("../../../shared");
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
    s3.s3_settings()
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

    /// A restart: stops the server and starts another with `tweak` on the
    /// same store and cache dir.
    pub async fn restart(self, tweak: impl FnOnce(&mut ServerConfig)) -> Fixture {
        let Fixture {
            _s3: s3,
            server,
            _cache_dir: cache_dir,
        } = self;
        server.shutdown().await.expect("stop server");
        let mut cfg = full_config(&s3, cache_dir.path());
        tweak(&mut cfg);
        let server = silt_server::start(cfg).await.expect("restart server");
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
        metric(&self.server, series)
    }
}

/// A DataFusion context with `server`'s tables registered through Silt's
/// client with `options` (a compute-side cache).
pub async fn client_with(server: &ServerHandle, options: &silt_client::SiltTableOptions) -> SessionContext {
    client_at(&server.flight_url(), options).await
}

/// Like [`client_with`], for the server (or a proxy in front of it) at `url`.
pub async fn client_at(url: &str, options: &silt_client::SiltTableOptions) -> SessionContext {
    let ctx = SessionContext::new();
    let client = silt_client::SiltClient::connect(url).await.expect("connect");
    silt_client::register_tables_with_options(&ctx, &client, options)
        .await
        .expect("register tables");
    ctx
}

/// A DataFusion context with `server`'s tables registered through a
/// client without a compute-side cache: every scan pushed down whole, for
/// tests of what the server does with a scan.
pub async fn pushdown_client(server: &ServerHandle) -> SessionContext {
    let options = silt_client::SiltTableOptions {
        local_cache_bytes: 0,
        ..Default::default()
    };
    client_with(server, &options).await
}

/// A DataFusion context with `server`'s tables registered (Silt's default
/// client: a compute-side cache, the choice per row group).
pub async fn client(server: &ServerHandle) -> SessionContext {
    let ctx = SessionContext::new();
    silt_client::register_tables(&ctx, &server.flight_url())
        .await
        .expect("register tables");
    ctx
}

/// A server with one `file://` table `t` over the folder `dir`, cache pages
/// of `page_size` bytes, everything else default.
pub async fn file_table_server(dir: &Path, cache: &Path, page_size: u64) -> ServerHandle {
    file_table_server_with(dir, cache, page_size, |_| {}).await
}

/// [`file_table_server`] with `configure` applied to the config last.
pub async fn file_table_server_with(
    dir: &Path,
    cache: &Path,
    page_size: u64,
    configure: impl FnOnce(&mut ServerConfig),
) -> ServerHandle {
    let mut cfg = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        cache_dir: cache.to_path_buf(),
        page_size,
        ..Default::default()
    };
    cfg.tables.insert(
        "t".into(),
        TableConfig {
            url: format!("file://{}/", dir.display()),
            ..Default::default()
        },
    );
    configure(&mut cfg);
    silt_server::start(cfg).await.expect("start server")
}

/// The answer to `sql` on `ctx`, an empty result as one empty batch (so it
/// carries its schema for `check_same`).
pub async fn answer(ctx: &SessionContext, sql: &str) -> Vec<datafusion::arrow::array::RecordBatch> {
    silt_client::script::run_script_last_query(ctx, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The current value of a server metric series (0 when absent).
pub fn metric(server: &ServerHandle, series: &str) -> f64 {
    server.engine.metrics().snapshot().get(series).copied().unwrap_or(0.0)
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

pub use silt_bench::compare::{break_ties, check_same, is_ordered};
