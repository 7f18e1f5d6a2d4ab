//! Bad input never crashes the server: each failing request gets a clear
//! error naming the object, and everyone else carries on.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use silt_bench::local_s3::LocalS3;
use silt_client::SiltClient;
use silt_proto::ScanRequest;
use silt_server::config::TableConfig;
use silt_server::{ServerConfig, ServerHandle};

use crate::common::{data_root, s3_settings};

/// A scratch bucket `bad` holding a good copy of `lineitem` as `good.parquet`
/// plus whatever the test writes, behind its own loopback S3 server.
struct Scratch {
    _dir: tempfile::TempDir,
    s3: LocalS3,
    server: ServerHandle,
}

fn lineitem_file() -> std::path::PathBuf {
    data_root().join("tpch/lineitem/lineitem.parquet")
}

impl Scratch {
    async fn start(setup: impl FnOnce(&Path), tables: &[(&str, &str)]) -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let bucket = dir.path().join("s3/bad");
        std::fs::create_dir_all(&bucket).unwrap();
        std::fs::copy(lineitem_file(), bucket.join("good.parquet")).unwrap();
        setup(&bucket);
        let s3 = LocalS3::start(&dir.path().join("s3")).await.unwrap();
        let mut cfg = ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            cache_dir: dir.path().join("cache"),
            s3: s3_settings(&s3),
            ..Default::default()
        };
        cfg.tables.insert(
            "good".into(),
            TableConfig {
                url: "s3://bad/good.parquet".into(),
                ..Default::default()
            },
        );
        for (name, url) in tables {
            cfg.tables.insert(
                name.to_string(),
                TableConfig {
                    url: url.to_string(),
                    ..Default::default()
                },
            );
        }
        let server = silt_server::start(cfg).await.unwrap();
        Scratch { _dir: dir, s3, server }
    }

    async fn client(&self) -> SiltClient {
        SiltClient::connect(&self.server.flight_url()).await.unwrap()
    }

    async fn others_still_served(&self) {
        let b = self
            .client()
            .await
            .sql("SELECT count(*) FROM good")
            .await
            .expect("good table still served");
        assert_eq!(b[0].num_rows(), 1);
    }
}

fn cut_in_half(path: &Path) {
    let bytes = std::fs::read(lineitem_file()).unwrap();
    std::fs::write(path, &bytes[..bytes.len() / 2]).unwrap();
}

/// Flip bytes in the middle of the Parquet footer (the file metadata).
/// Data pages carry no checksums in files written without them, so only
/// corruption of structure is detectable in general; the disk tier's own
/// page checksums cover the cache's copies.
fn flip_footer_bytes(path: &Path) {
    let mut bytes = std::fs::read(lineitem_file()).unwrap();
    let n = bytes.len();
    let meta_len = u32::from_le_bytes(bytes[n - 8..n - 4].try_into().unwrap()) as usize;
    let mid = n - 8 - meta_len / 2;
    for b in &mut bytes[mid - 32..mid + 32] {
        *b ^= 0xA5;
    }
    std::fs::write(path, &bytes).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_parquet_gives_a_clear_error_naming_the_object() {
    let fx = Scratch::start(
        |b| cut_in_half(&b.join("half.parquet")),
        &[("half", "s3://bad/half.parquet")],
    )
    .await;
    let err = fx
        .client()
        .await
        .sql("SELECT count(*) FROM half")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("half.parquet"), "{err}");
    fx.others_still_served().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_after_registration_gives_a_clear_error() {
    let fx = Scratch::start(
        |b| {
            std::fs::copy(lineitem_file(), b.join("later.parquet")).unwrap();
        },
        &[("later", "s3://bad/later.parquet")],
    )
    .await;
    cut_in_half(&fx.s3.object_path("bad", "later.parquet"));
    let err = fx
        .client()
        .await
        .sql("SELECT sum(l_quantity) FROM later")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("later.parquet"), "{err}");
    fx.others_still_served().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_bytes_give_a_clear_error_naming_the_object() {
    let fx = Scratch::start(
        |b| flip_footer_bytes(&b.join("flipped.parquet")),
        &[("flipped", "s3://bad/flipped.parquet")],
    )
    .await;
    let result = fx
        .client()
        .await
        .sql("SELECT sum(l_quantity), max(l_comment) FROM flipped")
        .await;
    let err = result.expect_err("corrupt pages must not decode silently").to_string();
    assert!(err.contains("flipped.parquet"), "{err}");
    fx.others_still_served().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_object_and_unknown_names_give_clear_errors() {
    let fx = Scratch::start(
        |b| {
            std::fs::copy(lineitem_file(), b.join("gone.parquet")).unwrap();
        },
        &[
            ("gone", "s3://bad/gone.parquet"),
            ("never", "s3://bad/never-existed.parquet"),
        ],
    )
    .await;
    std::fs::remove_file(fx.s3.object_path("bad", "gone.parquet")).unwrap();
    let client = fx.client().await;
    let err = client.sql("SELECT count(*) FROM gone").await.unwrap_err().to_string();
    assert!(err.contains("gone.parquet"), "{err}");
    let err = client.sql("SELECT count(*) FROM never").await.unwrap_err().to_string();
    assert!(err.contains("never-existed.parquet"), "{err}");
    let err = client
        .sql("SELECT count(*) FROM nonexistent")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown table 'nonexistent'"), "{err}");
    let err = client.sql("SELECT nope FROM good").await.unwrap_err().to_string();
    assert!(err.contains("nope"), "{err}");
    // A pushdown scan naming an unknown column is refused the same way.
    let scan = ScanRequest {
        table: "good".into(),
        projection: Some(silt_proto::Projection {
            columns: vec!["nope".into()],
        }),
        ..Default::default()
    };
    let err = client.scan_info(&scan).await.unwrap_err().to_string();
    assert!(err.contains("column 'nope' not found"), "{err}");
    // A pushed partial aggregate is checked before it is decoded: garbage,
    // a root that is not a partial aggregate, and an operator outside the
    // allow-list (here an empty source standing for any file scan) are refused.
    for (fragment, message) in hostile_fragments() {
        let scan = ScanRequest {
            table: "good".into(),
            partial_aggregate: Some(fragment),
            ..Default::default()
        };
        let err = client.scan(&scan).await.map(|_| ()).unwrap_err().to_string();
        assert!(err.contains(message), "{message}: {err}");
    }
    fx.others_still_served().await;
}

/// Fragments a hostile client could push, with the error each must get.
fn hostile_fragments() -> Vec<(Vec<u8>, &'static str)> {
    use datafusion_proto::protobuf::physical_plan_node::PhysicalPlanType;
    use datafusion_proto::protobuf::{AggregateExecNode, AggregateMode, EmptyExecNode, PhysicalPlanNode};
    use prost::Message;
    let node = |t: PhysicalPlanType| PhysicalPlanNode {
        physical_plan_type: Some(t),
    };
    let empty = || node(PhysicalPlanType::Empty(EmptyExecNode::default()));
    let aggregate = |mode: AggregateMode, input: PhysicalPlanNode| {
        node(PhysicalPlanType::Aggregate(Box::new(AggregateExecNode {
            mode: mode as i32,
            input: Some(Box::new(input)),
            ..Default::default()
        })))
    };
    vec![
        (vec![0xff, 0xff, 0xff], "not a physical plan"),
        (empty().encode_to_vec(), "the root must be an aggregate"),
        (
            aggregate(AggregateMode::Single, empty()).encode_to_vec(),
            "only a partial aggregate may be pushed",
        ),
        (
            aggregate(AggregateMode::Partial, empty()).encode_to_vec(),
            "operator Empty is not allowed in a pushed fragment",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_object_store_gives_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        cache_dir: dir.path().join("cache"),
        ..Default::default()
    };
    let mut s3 = silt_store::S3Settings {
        endpoint: Some("http://127.0.0.1:9".into()),
        access_key_id: Some("k".into()),
        secret_access_key: Some("s".into()),
        region: Some("us-east-1".into()),
        allow_http: Some(true),
        session_token: None,
    };
    cfg.tables.insert(
        "down".into(),
        TableConfig {
            url: "s3://nowhere/t/".into(),
            s3: s3.clone(),
            ..Default::default()
        },
    );
    s3.endpoint = None;
    cfg.tables.insert(
        "local".into(),
        TableConfig {
            url: format!("file://{}/", data_root().join("tpch/region").display()),
            ..Default::default()
        },
    );
    let server = silt_server::start(cfg).await.unwrap();
    let client = SiltClient::connect(&server.flight_url()).await.unwrap();
    let err = client.sql("SELECT * FROM down").await.unwrap_err().to_string();
    assert!(err.contains("unavailable") && err.contains("s3://nowhere/t/"), "{err}");
    let ok = client.sql("SELECT count(*) FROM local").await.unwrap();
    assert_eq!(ok[0].num_rows(), 1);
}

/// A loopback "object store" that accepts connections and never answers,
/// at `addr` (port 0: any free one); its address.
async fn hang_at(addr: std::net::SocketAddr) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_bucket_does_not_delay_queries_on_other_tables() {
    let dir = tempfile::tempdir().unwrap();
    let dead = hang_at("127.0.0.1:0".parse().unwrap()).await;
    let mut cfg = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        cache_dir: dir.path().join("cache"),
        // Serve after 1 s whatever is still registering.
        registration_wait: Duration::from_secs(1),
        ..Default::default()
    };
    cfg.tables.insert(
        "hung".into(),
        TableConfig {
            url: "s3://hung/t/".into(),
            s3: silt_store::S3Settings {
                endpoint: Some(format!("http://{dead}")),
                access_key_id: Some("k".into()),
                secret_access_key: Some("s".into()),
                region: Some("us-east-1".into()),
                allow_http: Some(true),
                session_token: None,
            },
            ..Default::default()
        },
    );
    cfg.tables.insert(
        "local".into(),
        TableConfig {
            url: format!("file://{}/", data_root().join("tpch/region").display()),
            ..Default::default()
        },
    );
    // The hung table's registration waits on its store for up to a minute
    // (REGISTER_TIMEOUT); nothing else may: not the start, not a query on
    // another table, not a query naming the hung one. The bound below only
    // tells a hang from an answer.
    let bound = Duration::from_secs(30);
    let server = tokio::time::timeout(bound, silt_server::start(cfg))
        .await
        .expect("start waited on the hung bucket")
        .unwrap();
    let client = SiltClient::connect(&server.flight_url()).await.unwrap();
    for _ in 0..3 {
        let ok = tokio::time::timeout(bound, client.sql("SELECT count(*) FROM local"))
            .await
            .expect("a query on another table waited on the hung bucket")
            .unwrap();
        assert_eq!(ok[0].num_rows(), 1);
    }
    let err = tokio::time::timeout(bound, client.sql("SELECT * FROM hung"))
        .await
        .expect("a query on the hung table waited on its registration")
        .unwrap_err()
        .to_string();
    assert!(err.contains("unavailable"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_mid_stream_leaves_no_plan_behind() {
    let fx = Scratch::start(|_| {}, &[]).await;
    let client = fx.client().await;
    // 20 in the test command; `SILT_CANCELLED_SCANS=1000` for the long run.
    let scans: usize = std::env::var("SILT_CANCELLED_SCANS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    for i in 0..scans {
        let scan = ScanRequest {
            table: "good".into(),
            ..Default::default()
        };
        let mut stream = client.scan(&scan).await.unwrap_or_else(|e| panic!("scan {i}: {e}"));
        let first = stream.next().await.unwrap().unwrap();
        assert!(first.num_rows() > 0);
        drop(stream);
    }
    // Dropping the stream cancels the server-side plan.
    let metrics = fx.server.engine.metrics().clone();
    let mut active = f64::NAN;
    for _ in 0..50 {
        active = metrics.snapshot()["silt_queries_active"];
        if active == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(active, 0.0, "plans still running after clients went away");
    // Fetches the cancelled scans had claimed (their read-ahead included)
    // were aborted with them and left no claim behind.
    let pages = fx.server.engine.tiers().pages().clone();
    let mut in_flight = usize::MAX;
    for _ in 0..50 {
        in_flight = pages.pages_in_flight();
        if in_flight == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(in_flight, 0, "claims left behind by cancelled fetches");
    fx.others_still_served().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_hangs_is_bounded_and_cached_tables_still_answer() {
    let dir = tempfile::tempdir().unwrap();
    for t in ["region", "nation"] {
        let to = dir.path().join(format!("s3/lake/{t}"));
        std::fs::create_dir_all(&to).unwrap();
        std::fs::copy(
            data_root().join(format!("tpch/{t}/{t}.parquet")),
            to.join(format!("{t}.parquet")),
        )
        .unwrap();
    }
    let s3 = LocalS3::start(&dir.path().join("s3")).await.unwrap();
    let mut cfg = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        cache_dir: dir.path().join("cache"),
        s3: s3_settings(&s3),
        ..Default::default()
    };
    cfg.store.request_timeout = Duration::from_secs(1);
    cfg.store.total_timeout = Duration::from_secs(3);
    for (name, validation) in [("region", "immutable"), ("nation", "always")] {
        cfg.tables.insert(
            name.into(),
            TableConfig {
                url: format!("s3://lake/{name}/"),
                validation: validation.parse().unwrap(),
                ..Default::default()
            },
        );
    }
    let server = silt_server::start(cfg).await.unwrap();
    let client = SiltClient::connect(&server.flight_url()).await.unwrap();
    let cached = "SELECT r_regionkey, r_name FROM region ORDER BY r_regionkey";
    let live = "SELECT count(*) FROM nation";
    let before = client.sql(cached).await.unwrap();
    client.sql(live).await.unwrap();

    // The store now accepts connections and never answers.
    let addr: std::net::SocketAddr = s3.endpoint().trim_start_matches("http://").parse().unwrap();
    s3.stop_and_wait().await;
    hang_at(addr).await;

    // Bounds that only tell an answer from a hang: the store's deadlines
    // are 1 s per attempt and 3 s per request.
    let bound = Duration::from_secs(30);
    let got = tokio::time::timeout(bound, client.sql(cached))
        .await
        .expect("a cached, immutable table waited on the hung store")
        .unwrap();
    assert_eq!(got, before, "answered from the cache");
    let err = tokio::time::timeout(bound, client.sql(live))
        .await
        .expect("a table validated on every query hung with its store")
        .unwrap_err()
        .to_string();
    assert!(err.contains("timed out"), "{err}");
    let again = tokio::time::timeout(bound, client.sql(cached)).await.unwrap().unwrap();
    assert_eq!(again, before);
}
