//! Operating a real `silt serve`: TLS on both listeners with the Rust client
//! and `silt query`, and OpenTelemetry traces received by a small OTLP/HTTP
//! collector in the test, their trace ids in the server's JSON logs.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use datafusion::prelude::SessionContext;
use prost::Message;
use silt_bench::compare::check_same;
use silt_bench::local_s3::LocalS3;
use silt_bench::tpch;
use silt_client::script::run_script_last_query;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use common::{baseline, query, serve_command, start};

/// TPC-H SF 0.01 in a loopback S3: the folder (kept alive) and the server.
async fn tpch_store() -> (tempfile::TempDir, LocalS3) {
    let data = tempfile::tempdir().unwrap();
    tpch::generate(&data.path().join("tpch"), 0.01, Default::default()).unwrap();
    let s3 = LocalS3::start(data.path()).await.unwrap();
    (data, s3)
}

fn free_port() -> u16 {
    silt_bench::ports::free_addr().port()
}

/// A self-signed certificate for `localhost` and 127.0.0.1, written as
/// `cert.pem` and `key.pem` in `dir`.
fn self_signed(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, Vec<u8>) {
    let key = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    let pem = key.cert.pem().into_bytes();
    std::fs::write(&cert_path, &pem).unwrap();
    std::fs::write(&key_path, key.signing_key.serialize_pem()).unwrap();
    (cert_path, key_path, pem)
}

/// `GET path` over TLS to `addr`, trusting `ca_pem`: status and body.
async fn https_get(addr: SocketAddr, path: &str, ca_pem: &[u8], token: Option<&str>) -> (u16, String) {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    tls.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n{auth}\r\n").as_bytes())
        .await
        .unwrap();
    let mut text = Vec::new();
    let _ = tls.read_to_end(&mut text).await; // a peer may close without close_notify
    let text = String::from_utf8_lossy(&text).to_string();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_flight_and_admin_to_the_rust_client_and_silt_query() {
    let (data, s3) = tpch_store().await;
    let cache = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    let (cert, key, ca_pem) = self_signed(certs.path());
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin_arg = admin.to_string();
    let server = start(serve_command(
        &s3,
        cache.path(),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--auth-token",
            "tls-token",
            "--admin",
            &admin_arg,
        ],
    ));
    assert!(server.url.starts_with("https://localhost:"), "{}", server.url);
    let tls_url = server.url.replacen("https://", "grpc+tls://", 1);

    // The Rust client, trusting the test CA, runs TPC-H q1 with DataFusion's answer.
    silt_client::tls::set_ca_pem(ca_pem.clone());
    let client = silt_client::SiltClient::connect(&tls_url)
        .await
        .expect("TLS connect")
        .with_token(Some("tls-token".into()));
    let ctx = SessionContext::new();
    silt_client::register_tables_with(&ctx, &client).await.unwrap();
    let base = baseline(&data.path().join("tpch")).await;
    let sql = query(1);
    let got = run_script_last_query(&ctx, &sql).await.unwrap();
    let expected = run_script_last_query(&base, &sql).await.unwrap();
    check_same("q01 over TLS", &got, &expected, true).unwrap();

    // Plaintext to the TLS listener fails.
    let plain = server.url.replacen("https://", "http://", 1);
    let ctx = SessionContext::new();
    assert!(
        silt_client::register_tables(&ctx, &plain).await.is_err(),
        "a plaintext client must not get through"
    );

    // `silt query --tls-ca` over grpc+tls://.
    let out = Command::new(env!("CARGO_BIN_EXE_silt"))
        .args(["query", "--server", &tls_url, "--tls-ca"])
        .arg(&cert)
        .args(["--format", "csv", "SELECT count(*) AS n FROM nation"])
        .env("SILT_AUTH_TOKEN", "tls-token")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("25"),
        "silt query over TLS: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Without the CA, the server's certificate is not trusted.
    let out = Command::new(env!("CARGO_BIN_EXE_silt"))
        .args(["query", "--server", &tls_url, "SELECT 1"])
        .env("SILT_AUTH_TOKEN", "tls-token")
        .env_remove("SILT_TLS_CA")
        .output()
        .unwrap();
    assert!(!out.status.success(), "an untrusted certificate must fail");

    // The admin listener speaks HTTPS, and /metrics wants the token.
    let (status, _) = https_get(admin, "/health", &ca_pem, None).await;
    assert_eq!(status, 200);
    let (status, _) = https_get(admin, "/metrics", &ca_pem, None).await;
    assert_eq!(status, 401);
    let (status, body) = https_get(admin, "/metrics", &ca_pem, Some("tls-token")).await;
    assert_eq!(status, 200);
    assert!(body.contains("silt_queries_total"), "{body}");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plaintext_token_off_loopback_needs_allow_insecure() {
    let (_data, s3) = tpch_store().await;
    let cache = tempfile::tempdir().unwrap();
    let listen = format!("0.0.0.0:{}", free_port());
    let out = common::serve_command_on(&listen, &s3, cache.path(), &["--auth-token", "t"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must refuse to start");
    assert!(stderr.contains("--allow-insecure"), "{stderr}");
}

/// One span as the collector received it.
#[derive(Debug, Clone)]
struct ReceivedSpan {
    name: String,
    trace_id: String,
    attributes: HashMap<String, String>,
}

/// A minimal OTLP/HTTP trace receiver: decodes every `POST /v1/traces`
/// body (protobuf `ExportTraceServiceRequest`) and answers 200.
async fn otlp_receiver() -> (SocketAddr, Arc<Mutex<Vec<ReceivedSpan>>>) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let spans = Arc::new(Mutex::new(Vec::new()));
    let sink = spans.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let sink = sink.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    // One request: headers, then Content-Length bytes of body.
                    let header_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        let mut chunk = [0u8; 8192];
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..header_end]).to_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    while buf.len() < header_end + length {
                        let mut chunk = [0u8; 65536];
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body: Vec<u8> = buf.drain(..header_end + length).skip(header_end).collect();
                    if let Ok(request) = ExportTraceServiceRequest::decode(body.as_slice()) {
                        let mut sink = sink.lock().unwrap();
                        for span in request
                            .resource_spans
                            .iter()
                            .flat_map(|r| &r.scope_spans)
                            .flat_map(|s| &s.spans)
                        {
                            let attributes = span
                                .attributes
                                .iter()
                                .map(|kv| (kv.key.clone(), format!("{:?}", kv.value)))
                                .collect();
                            sink.push(ReceivedSpan {
                                name: span.name.clone(),
                                trace_id: span.trace_id.iter().map(|b| format!("{b:02x}")).collect(),
                                attributes,
                            });
                        }
                    }
                    let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if conn.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, spans)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_reach_an_otlp_collector_and_logs_name_them() {
    let (collector, spans) = otlp_receiver().await;
    let (_data, s3) = tpch_store().await;
    let cache = tempfile::tempdir().unwrap();
    let endpoint = format!("http://{collector}");
    let mut cmd = serve_command(
        &s3,
        cache.path(),
        &["--otlp-endpoint", &endpoint, "--log-format", "json"],
    );
    cmd.env("SILT_LOG", "warn,silt::query=debug");
    let server = start(cmd);
    let ctx = common::client(&server.url).await;
    run_script_last_query(&ctx, &query(6)).await.unwrap();

    // The batch exporter sends every few seconds.
    let wanted = ["query", "planning", "scan", "row_group", "tier_read", "store_request"];
    let started = Instant::now();
    let received = loop {
        let received = spans.lock().unwrap().clone();
        let missing: Vec<&str> = wanted
            .iter()
            .copied()
            .filter(|w| !received.iter().any(|s| s.name == *w))
            .collect();
        if missing.is_empty() {
            break received;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "spans never received: {missing:?}; got {:?}",
            received
                .iter()
                .map(|s| &s.name)
                .collect::<std::collections::BTreeSet<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let query_span = received
        .iter()
        .find(|s| s.name == "query" && s.attributes.get("kind").is_some_and(|k| k.contains("scan")))
        .expect("a scan's query span");
    assert!(query_span.attributes.contains_key("text"), "{query_span:?}");
    let store = received.iter().find(|s| s.name == "store_request").unwrap();
    assert!(store.attributes.contains_key("path"), "{store:?}");

    // Its trace id is in the JSON log line the query wrote when it finished.
    let started = Instant::now();
    loop {
        let lines = server.log_lines_with("query finished");
        let traced: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains(&format!("\"trace_id\":\"{}\"", query_span.trace_id)))
            .collect();
        if let Some(line) = traced.first() {
            let parsed: serde_json::Value = serde_json::from_str(line).expect("a JSON log line");
            assert_eq!(parsed["fields"]["message"], "query finished", "{line}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no log line names trace {}: {lines:?}",
            query_span.trace_id
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    server.stop();
}

#[test]
fn print_config_shows_every_setting_and_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("silt.toml");
    std::fs::write(
        &file,
        "[store]\nretries = 2\n[tables.nation]\nurl = \"file:///data/nation/\"\n",
    )
    .unwrap();
    let xdg = dir.path().join("xdg");
    let out = Command::new(env!("CARGO_BIN_EXE_silt"))
        .args(["serve", "--print-config", "--config"])
        .arg(&file)
        .args(["--memory-budget", "3GiB", "--table", "region=file:///data/region/"])
        .env("SILT_AUTH_TOKEN", "secret-token")
        .env("XDG_CACHE_HOME", &xdg)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "admin = \"127.0.0.1:9090\"  # default".to_string(),
        format!("cache_dir = \"{}\"  # default", xdg.join("silt").display()),
        "memory_budget = \"3 GiB\"  # flag".to_string(),
        "store.retries = 2  # file".to_string(),
        "tables.nation.url = \"file:///data/nation/\"  # file".to_string(),
        "tables.region.url = \"file:///data/region/\"  # flag".to_string(),
        "auth_token = \"***\"  # environment SILT_AUTH_TOKEN".to_string(),
        "disk_budget = \"10 GiB\"  # default".to_string(),
    ] {
        assert!(stdout.contains(&format!("{line}\n")), "{line} in:\n{stdout}");
    }
    // Budgets nobody set are shares of this machine's memory.
    let query_limit = stdout.lines().find(|l| l.starts_with("query_memory_limit = ")).unwrap();
    assert!(query_limit.contains("# default: 1/4 of "), "{query_limit}");
    assert!(!stdout.contains("secret-token"), "secrets are masked");
    assert!(!xdg.exists(), "printing the config starts nothing");
}
