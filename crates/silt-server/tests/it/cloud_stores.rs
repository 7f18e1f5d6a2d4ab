//! `gs://` and `az://` tables, read through object_store's own GCS and Azure
//! stores from emulators on loopback (fake-gcs-server, Azurite; installed
//! once by `scripts/emulators-env.sh`, started here for these tests only):
//! a query equals the data written; an object overwritten in the emulator is
//! seen by the next query; a table whose endpoint is down fails with an error
//! naming it while the other tables answer; settings come from the server's
//! `[gcs]`/`[azure]` section or the table's own.
//!
//! Without an emulator (it cannot be installed) the tests say so loudly and
//! pass, unless `CI=true`: then they fail.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use datafusion::arrow::array::Int64Array;
use datafusion::arrow::compute::concat_batches;
use object_store::azure::{AzureAccessKey, AzureAuthorizer, AzureCredential};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use silt_bench::ports::free_addrs;
use silt_server::config::TableConfig;
use silt_server::{ServerConfig, ServerHandle};
use silt_store::CloudSettings;

use crate::common::pushdown_client;
use crate::versions::{ROWS, write_version};

/// Azurite's well-known development account and key.
const AZURITE_ACCOUNT: &str = "devstoreaccount1";
const AZURITE_KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
const BUCKET: &str = "lake";

/// The emulators `scripts/emulators-env.sh` installed (it prints
/// `SILT_FAKE_GCS=path` and `SILT_AZURITE=path`), run once per process.
fn installed_tools() -> &'static Vec<(String, PathBuf)> {
    static TOOLS: OnceLock<Vec<(String, PathBuf)>> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let script = silt_bench::files::source_dir(env!("CARGO_MANIFEST_DIR")).join("../../scripts/emulators-env.sh");
        let out = Command::new("bash")
            .arg(&script)
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), PathBuf::from(v)))
            .collect()
    })
}

/// The emulator `var` names, or `None` (said loudly) when it could not be
/// installed; under `CI=true` a missing emulator fails the test.
fn tool(var: &str) -> Option<PathBuf> {
    let found = installed_tools().iter().find(|(k, _)| k == var).map(|(_, v)| v.clone());
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{var}: scripts/emulators-env.sh could not install this emulator, and CI=true needs it"
        );
        eprintln!("\n*** SKIPPED: {var} is not installed (scripts/emulators-env.sh failed; see above) ***\n");
    }
    found
}

/// An emulator process on loopback, killed on drop.
struct Emulator {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Emulator {
    /// Runs `program` with the arguments `args(addr, dir)` builds, and waits
    /// (bounded) until it accepts connections on `addr`.
    async fn start(program: &Path, args: impl FnOnce(SocketAddr, &Path) -> Vec<String>) -> Emulator {
        let addr = free_addrs(1)[0];
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new(program)
            .args(args(addr, dir.path()))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        let mut emulator = Emulator { child, addr, _dir: dir };
        for _ in 0..600 {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                return emulator;
            }
            if let Ok(Some(status)) = emulator.child.try_wait() {
                panic!("{} exited at start: {status}", program.display());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{} did not listen on {addr} within 60 s", program.display());
    }
}

/// How a test writes objects: object_store's own store (Azure), or
/// fake-gcs-server's JSON upload API (it refuses object_store's XML-API PUT).
enum Writer {
    Store(Arc<dyn ObjectStore>),
    FakeGcs(SocketAddr),
}

/// One cloud store under test: the emulator, a client that writes to it,
/// and the settings a table reads it with.
struct Cloud {
    _emulator: Emulator,
    writer: Writer,
    /// The table URL of `events/` in the bucket or container.
    url: String,
    /// Settings that reach the emulator.
    settings: CloudSettings,
    /// The same settings with the endpoint on a port nothing listens on.
    dead: CloudSettings,
}

impl Cloud {
    /// `events/` in the bucket `lake` of `emulator`, read with the settings
    /// `base` gives for its address; written by object_store's own store for
    /// the URL and those settings (Silt's refuses writes).
    fn new(emulator: Emulator, scheme: &str, base: impl Fn(SocketAddr) -> CloudSettings) -> Cloud {
        let url = format!("{scheme}://{BUCKET}/events/");
        let settings = base(emulator.addr);
        let mut options = settings.0.clone();
        options.insert("allow_http".into(), "true".into());
        let writer = if scheme == "gs" {
            Writer::FakeGcs(emulator.addr)
        } else {
            let (store, _) = object_store::parse_url_opts(&url::Url::parse(&url).unwrap(), options).unwrap();
            Writer::Store(Arc::from(store))
        };
        Cloud {
            dead: base(free_addrs(1)[0]),
            settings,
            writer,
            url,
            _emulator: emulator,
        }
    }
}

fn settings(pairs: &[(&str, String)]) -> CloudSettings {
    CloudSettings(pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
}

/// fake-gcs-server with an empty bucket `lake`, unsigned requests.
async fn gcs() -> Option<Cloud> {
    let program = tool("SILT_FAKE_GCS")?;
    let emulator = Emulator::start(&program, |addr, dir| {
        std::fs::create_dir_all(dir.join("data").join(BUCKET)).unwrap();
        [
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            &addr.port().to_string(),
            "-public-host",
            &addr.to_string(),
            "-backend",
            "memory",
            "-data",
            &dir.join("data").display().to_string(),
            "-log-level",
            "error",
        ]
        .map(String::from)
        .to_vec()
    })
    .await;
    // A service account key with OAuth off: requests carry an empty bearer
    // token and no credential is ever fetched (object_store's writes ignore
    // `skip_signature` and would ask the cloud's metadata server for one).
    let key = r#"{"disable_oauth": true, "client_email": "", "private_key": "", "private_key_id": ""}"#;
    let base = |addr: SocketAddr| {
        settings(&[
            ("base_url", format!("http://{addr}")),
            ("service_account_key", key.into()),
        ])
    };
    Some(Cloud::new(emulator, "gs", base))
}

/// Azurite with a container `lake`, Shared Key signed requests.
async fn azure() -> Option<Cloud> {
    let program = tool("SILT_AZURITE")?;
    let emulator = Emulator::start(&program, |addr, _| {
        [
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            &addr.port().to_string(),
            "--inMemoryPersistence",
            "--skipApiVersionCheck",
            "--silent",
        ]
        .map(String::from)
        .to_vec()
    })
    .await;
    create_container(emulator.addr).await;
    let base = |addr: SocketAddr| {
        settings(&[
            ("account_name", AZURITE_ACCOUNT.into()),
            ("access_key", AZURITE_KEY.into()),
            ("endpoint", format!("http://{addr}/{AZURITE_ACCOUNT}")),
        ])
    };
    Some(Cloud::new(emulator, "az", base))
}

/// Creates the container `lake` in Azurite (object_store creates none): one
/// Shared Key signed `PUT ?restype=container`.
async fn create_container(addr: SocketAddr) {
    let uri = format!("http://{addr}/{AZURITE_ACCOUNT}/{BUCKET}?restype=container");
    let mut request = axum::http::Request::builder()
        .method("PUT")
        .uri(&uri)
        .header("content-length", "0")
        .body(object_store::client::HttpRequestBody::from(Vec::new()))
        .unwrap();
    let credential = AzureCredential::AccessKey(AzureAccessKey::try_new(AZURITE_KEY).unwrap());
    AzureAuthorizer::new(&credential, AZURITE_ACCOUNT).authorize(&mut request);
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
        .collect();
    let target = format!("/{AZURITE_ACCOUNT}/{BUCKET}?restype=container");
    let reply = send(addr, "PUT", &target, &headers, &[]).await;
    assert!(reply.starts_with("HTTP/1.1 201"), "creating the container: {reply}");
}

/// One HTTP/1.1 request to `addr` (headers as given, `Content-Length` of
/// `body` added unless given); the reply's text.
async fn send(addr: SocketAddr, method: &str, target: &str, headers: &[(String, String)], body: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut raw = format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        raw.push_str(&format!("{name}: {value}\r\n"));
    }
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("content-length")) {
        raw.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    raw.push_str("\r\n");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(raw.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).await.unwrap();
    String::from_utf8_lossy(&reply).into_owned()
}

/// Writes version `k` of `events/part-0.parquet` (see [`write_version`]) to the cloud store.
async fn put_version(cloud: &Cloud, k: i64) {
    let file = tempfile::NamedTempFile::new().unwrap();
    write_version(file.path(), k, false);
    let bytes = std::fs::read(file.path()).unwrap();
    let key = "events/part-0.parquet";
    match &cloud.writer {
        Writer::Store(store) => {
            store
                .put(&ObjectPath::from(key), PutPayload::from(bytes))
                .await
                .unwrap();
        }
        Writer::FakeGcs(addr) => {
            let target = format!("/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=events%2Fpart-0.parquet");
            let headers = [("content-type".to_string(), "application/octet-stream".to_string())];
            let reply = send(*addr, "POST", &target, &headers, &bytes).await;
            assert!(reply.starts_with("HTTP/1.1 200"), "uploading {key}: {reply}");
        }
    }
}

/// A server with `events` on the cloud store, its settings set by `place`
/// (server-wide or per table), and `gone`, the same table on an endpoint
/// that is down, with its own per-table settings.
async fn server(
    cloud: &Cloud,
    place: impl FnOnce(&mut ServerConfig, &mut TableConfig),
    dead: impl FnOnce(&mut TableConfig),
) -> (ServerHandle, tempfile::TempDir) {
    let cache = tempfile::tempdir().unwrap();
    let mut cfg = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        cache_dir: cache.path().to_path_buf(),
        registration_wait: Duration::from_secs(30),
        ..Default::default()
    };
    cfg.store.retries = 1;
    let mut events = TableConfig {
        url: cloud.url.clone(),
        ..Default::default()
    };
    place(&mut cfg, &mut events);
    let mut gone = TableConfig {
        url: cloud.url.clone(),
        ..Default::default()
    };
    dead(&mut gone);
    cfg.tables.insert("events".into(), events);
    cfg.tables.insert("gone".into(), gone);
    let server = silt_server::start(cfg).await.unwrap();
    let catalog = server.engine.catalog();
    let events = catalog.iter().find(|(name, _)| *name == "events").map(|(_, e)| e);
    assert!(
        events.is_some_and(|e| e.unavailable.is_none()),
        "events did not register: {:?}",
        events.and_then(|e| e.unavailable.as_ref()).map(|c| c.to_string())
    );
    (server, cache)
}

/// `(count(*), sum(v))` of `events` through the server.
async fn count_and_sum(server: &ServerHandle) -> (i64, i64) {
    let ctx = pushdown_client(server).await;
    let batches = ctx
        .sql("SELECT count(*) AS n, sum(v) AS s FROM events")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let batch = concat_batches(&batches[0].schema(), &batches).unwrap();
    let column = |i: usize| batch.column(i).as_any().downcast_ref::<Int64Array>().unwrap().value(0);
    (column(0), column(1))
}

/// What version `k` of the file holds: `(rows, sum of v)`.
fn expected(k: i64) -> (i64, i64) {
    let rows = ROWS + k * 5000;
    (rows, k * rows)
}

/// Queries equal the data, an overwrite is seen by the next query, a dead
/// endpoint fails its table only, naming it.
async fn serves_a_cloud_table(
    cloud: Cloud,
    place: impl FnOnce(&mut ServerConfig, &mut TableConfig),
    dead: impl FnOnce(&mut TableConfig),
) {
    put_version(&cloud, 1).await;
    let (server, _cache) = server(&cloud, place, dead).await;
    assert_eq!(count_and_sum(&server).await, expected(1));
    assert_eq!(count_and_sum(&server).await, expected(1), "warm");

    put_version(&cloud, 2).await;
    assert_eq!(count_and_sum(&server).await, expected(2), "the overwrite is seen");

    let ctx = pushdown_client(&server).await;
    let err = match ctx.sql("SELECT count(*) FROM gone").await {
        Ok(df) => df.collect().await.unwrap_err().to_string(),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("gone"), "the error names the table: {err}");
    assert_eq!(
        count_and_sum(&server).await,
        expected(2),
        "the other table still answers"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcs_tables_read_fake_gcs_server() {
    let Some(cloud) = gcs().await else { return };
    let (good, dead) = (cloud.settings.clone(), cloud.dead.clone());
    // Server-wide `[gcs]`; the dead table overrides its base URL alone.
    serves_a_cloud_table(cloud, |cfg, _| cfg.gcs = good, |t| t.gcs = dead).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_tables_read_azurite() {
    let Some(cloud) = azure().await else { return };
    let (good, dead) = (cloud.settings.clone(), cloud.dead.clone());
    // Per-table `[tables.events.azure]` only.
    serves_a_cloud_table(cloud, |_, t| t.azure = good, |t| t.azure = dead).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_tables_and_unknown_store_keys_are_refused_at_start() {
    let cache = tempfile::tempdir().unwrap();
    let mut cfg = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        cache_dir: cache.path().to_path_buf(),
        ..Default::default()
    };
    cfg.add_table_arg("scratch=memory:///t/").unwrap();
    let err = silt_server::start(cfg.clone()).await.err().unwrap().to_string();
    assert!(err.contains("scratch") && err.contains("memory://"), "{err}");

    cfg.tables.clear();
    cfg.add_table_arg("events=gs://lake/events/").unwrap();
    cfg.tables.get_mut("events").unwrap().gcs = settings(&[("acount_name", "x".into())]);
    let err = silt_server::start(cfg).await.err().unwrap().to_string();
    assert!(err.contains("events") && err.contains("acount_name"), "{err}");
}
