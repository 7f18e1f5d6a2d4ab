//! The safe SQL surface: refused statements, auth, per-query limits.

use std::time::Duration;

use silt_client::SiltClient;
use tonic::Code;

use crate::common::Fixture;
use crate::flight_sql::{fetch, flight_sql_client};

async fn good_query_works(client: &SiltClient) {
    let b = client
        .sql("SELECT count(*) FROM nation")
        .await
        .expect("good query after a refused one");
    assert_eq!(b[0].num_rows(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_anything_but_read_only_queries_over_registered_tables() {
    let fx = Fixture::start().await;
    let client = SiltClient::connect(&fx.server.flight_url()).await.unwrap();
    let cases = [
        (
            "CREATE EXTERNAL TABLE x STORED AS PARQUET LOCATION '/etc/'",
            "read-only",
        ),
        ("COPY (SELECT 1) TO '/tmp/silt-copy-test.parquet'", "read-only"),
        ("SELECT * FROM '/etc/passwd'", "unknown table"),
        (
            "SELECT * FROM read_parquet('/etc/passwd')",
            "unknown table 'read_parquet'",
        ),
        ("SELECT * FROM information_schema.tables", "unknown table"),
        ("CREATE TABLE t AS SELECT 1", "read-only"),
        ("INSERT INTO nation VALUES (1, 'x', 1, 'y')", "read-only"),
        ("DROP TABLE nation", "read-only"),
        ("SET datafusion.execution.batch_size = 1", "read-only"),
        ("SELECT 1; SELECT 2", "exactly one"),
        (
            "SELECT * FROM generate_series(1, 10)",
            "unknown table 'generate_series'",
        ),
        ("SELECT * FROM nope", "unknown table 'nope'"),
        ("SELECT no_such_column FROM nation", "no_such_column"),
        ("this is not sql", "parse"),
    ];
    for (sql, expected) in cases {
        let err = client.sql(sql).await.expect_err(sql).to_string();
        assert!(err.to_lowercase().contains(&expected.to_lowercase()), "{sql}: {err}");
        good_query_works(&client).await;
    }
    assert!(!std::path::Path::new("/tmp/silt-copy-test.parquet").exists());
    // The generic client gets a gRPC error too, and the server carries on.
    let mut generic = flight_sql_client(&fx).await;
    let status = generic.execute("DROP TABLE lineitem".into(), None).await.unwrap_err();
    assert!(status.to_string().contains("read-only"), "{status}");
    let info = generic
        .execute("SELECT count(*) FROM lineitem".into(), None)
        .await
        .unwrap();
    // The answer names the request it answers (pyarrow refuses one that does not).
    assert!(info.flight_descriptor.is_some(), "{info:?}");
    assert_eq!(fetch(&mut generic, info).await[0].num_rows(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_is_required_when_configured() {
    let fx = Fixture::start_with(|c| c.auth_token = Some("s3cret".into())).await;
    let anonymous = SiltClient::connect(&fx.server.flight_url()).await.unwrap();
    let err = anonymous.sql("SELECT 1").await.unwrap_err().to_string();
    assert!(err.contains("Unauthenticated"), "{err}");
    let err = anonymous.list_tables().await.unwrap_err().to_string();
    assert!(err.contains("Unauthenticated"), "{err}");
    let wrong = SiltClient::connect(&fx.server.flight_url())
        .await
        .unwrap()
        .with_token(Some("nope".into()));
    assert!(wrong.sql("SELECT 1").await.is_err());
    let good = SiltClient::connect(&fx.server.flight_url())
        .await
        .unwrap()
        .with_token(Some("s3cret".into()));
    good_query_works(&good).await;
    // Pushdown scans through the DataFusion integration carry the token too.
    let ctx = datafusion::prelude::SessionContext::new();
    silt_client::register_tables_with(&ctx, &good).await.unwrap();
    let n = ctx
        .sql("SELECT count(*) FROM region")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(n[0].num_rows(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_over_the_memory_limit_fails_alone() {
    let fx = Fixture::start_with(|c| c.query_memory_limit = 256 * 1024).await;
    let client = SiltClient::connect(&fx.server.flight_url()).await.unwrap();
    let heavy = "SELECT l_orderkey, l_partkey, l_comment, count(*) FROM lineitem GROUP BY 1, 2, 3 ORDER BY 4 DESC, 3";
    let err = client.sql(heavy).await.unwrap_err().to_string();
    assert!(
        err.contains("ResourceExhausted") || err.to_lowercase().contains("resources exhausted"),
        "{err}"
    );
    good_query_works(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_over_the_memory_limit_fails_alone() {
    // No operator above the scan holds memory: only the scan's own
    // accounting (the row group it holds while sending) can refuse it.
    let fx = Fixture::start_with(|c| c.query_memory_limit = 64 * 1024).await;
    let client = SiltClient::connect(&fx.server.flight_url()).await.unwrap();
    let err = client.sql("SELECT * FROM lineitem").await.unwrap_err().to_string();
    assert!(
        err.to_lowercase().contains("resources exhausted") && err.contains("CachedScanExec"),
        "{err}"
    );
    good_query_works(&client).await;
    // With room, the same scan answers.
    let fx = Fixture::start_with(|c| c.query_memory_limit = 256 << 20).await;
    let client = SiltClient::connect(&fx.server.flight_url()).await.unwrap();
    let rows: usize = client
        .sql("SELECT * FROM lineitem")
        .await
        .unwrap()
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert!(rows > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_over_the_time_limit_is_cancelled_alone() {
    let fx = Fixture::start_with(|c| c.query_timeout = Duration::from_secs(2)).await;
    let client = SiltClient::connect(&fx.server.flight_url()).await.unwrap();
    let endless = "SELECT sum(a.l_orderkey * b.l_orderkey) FROM lineitem a, lineitem b";
    let err = client.sql(endless).await.unwrap_err().to_string();
    assert!(err.contains("time limit"), "{err}");
    good_query_works(&client).await;
    // The cancelled query's plan is gone.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(fx.metric("silt_queries_active"), 0.0);
    let _ = Code::DeadlineExceeded;
}

/// Resident memory of this process in KiB (reported, not asserted: the
/// allocator keeps what it freed).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("VmRSS:")?
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
}

/// The file descriptors of this process that belong to `fx`: files under
/// its cache dir, and TCP sockets with an end on its Flight or store port
/// (both ends live in this process). Other tests run beside this one in the
/// same process and open and close their own, so a count of all would
/// measure them too. Each is named by what it points at (a path, or the
/// socket's ports), so a failed leak check says what grew.
fn fixture_fds(fx: &Fixture) -> Vec<String> {
    let ports: Vec<u16> = [fx.server.flight_addr.port(), endpoint_port(&fx._s3.endpoint())].into();
    let sockets = tcp_sockets_by_inode();
    let cache_dir = fx._cache_dir.path().to_path_buf();
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|target| {
            let t = target.display().to_string();
            if let Some(inode) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                let (local, remote) = *sockets.get(inode)?;
                (ports.contains(&local) || ports.contains(&remote)).then(|| format!("tcp {local}->{remote}"))
            } else {
                target.starts_with(&cache_dir).then_some(t)
            }
        })
        .collect()
}

/// The port of an `http://host:port` endpoint.
fn endpoint_port(endpoint: &str) -> u16 {
    let port = endpoint.trim_end_matches('/').rsplit(':').next();
    port.and_then(|p| p.parse().ok()).expect("endpoint with a port")
}

/// This process's TCP sockets (`/proc/self/net/tcp` and `tcp6`): inode to
/// (local port, remote port).
fn tcp_sockets_by_inode() -> std::collections::HashMap<String, (u16, u16)> {
    let port = |addr: &str| {
        let hex = addr.rsplit(':').next().unwrap_or("0");
        u16::from_str_radix(hex, 16).unwrap_or(0)
    };
    ["/proc/self/net/tcp", "/proc/self/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let cols: Vec<&str> = line.split_whitespace().collect();
                    Some((cols.get(9)?.to_string(), (port(cols.get(1)?), port(cols.get(2)?))))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// What `after` holds beyond `before` (sockets by their ports), for the
/// leak check's message.
fn fd_growth(before: &[String], after: &[String]) -> Vec<(String, i64)> {
    let mut counts = std::collections::BTreeMap::<String, i64>::new();
    for t in before {
        *counts.entry(t.clone()).or_default() -= 1;
    }
    for t in after {
        *counts.entry(t.clone()).or_default() += 1;
    }
    counts.into_iter().filter(|(_, n)| *n != 0).collect()
}

/// A bounded soak: hundreds of mixed queries (SQL over Flight, pushdown
/// scans through DataFusion, lookups, a refused one) through one server.
/// After a warm-up, file descriptors stay flat, and when the load stops no
/// query, stream or page fetch is left running. The long run:
/// `SILT_SOAK_ROUNDS=1250 cargo test -p silt-server --test it soak -- --nocapture`
/// (10,080 queries).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soak_of_mixed_queries_leaks_nothing() {
    let fx = Fixture::start().await;
    let client = SiltClient::connect(&fx.server.flight_url()).await.unwrap();
    let ctx = fx.client_ctx().await;
    let ids = datafusion::arrow::array::Int64Array::from(vec![1, 7, 42]);
    let round = |i: usize| {
        let (client, ctx, ids) = (client.clone(), ctx.clone(), ids.clone());
        async move {
            match i % 4 {
                0 => {
                    let q = format!("SELECT count(*) FROM lineitem WHERE l_quantity < {}", i % 50);
                    client.sql(&q).await.map(|_| ()).map_err(|e| e.to_string())
                }
                1 => ctx
                    .sql("SELECT l_returnflag, sum(l_extendedprice) FROM lineitem WHERE l_discount > 0.05 GROUP BY 1")
                    .await
                    .map_err(|e| e.to_string())?
                    .collect()
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                2 => client
                    .lookup("orders", "o_orderkey", std::sync::Arc::new(ids), None)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                _ => match client.sql("DROP TABLE nation").await {
                    Err(e) if e.to_string().contains("read-only") => Ok(()),
                    other => Err(format!("the refused query answered {other:?}")),
                },
            }
        }
    };
    for i in 0..40 {
        round(i).await.unwrap();
    }
    // Eight at a time too: concurrent queries open more pooled connections
    // (to the store and between client and server, both ends in this
    // process), which stay open for reuse: warm, not leaked.
    for chunk in 0..5 {
        let results = futures::future::join_all((0..8).map(|j| round(chunk * 8 + j))).await;
        for r in results {
            r.unwrap();
        }
    }
    // The warm-up's background work done (transcoding, squeezing ahead:
    // the squeeze tier opens its region files as it first writes them).
    let batches = fx.server.engine.tiers().batches().clone();
    tokio::task::spawn_blocking(move || {
        assert!(batches.wait_transcoded(Duration::from_secs(60)));
        if let Some(squeezed) = batches.squeezed() {
            assert!(squeezed.wait_written(Duration::from_secs(60)));
        }
    })
    .await
    .unwrap();
    let warm = fixture_fds(&fx);
    let rss_warm = rss_kib();
    // 40 rounds of 8 in the test command; `SILT_SOAK_ROUNDS` for the long run.
    let rounds: usize = std::env::var("SILT_SOAK_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    for chunk in 0..rounds {
        let results = futures::future::join_all((0..8).map(|j| round(80 + chunk * 8 + j))).await;
        for r in results {
            r.unwrap();
        }
    }
    let after = fixture_fds(&fx);
    let growth = fd_growth(&warm, &after);
    eprintln!(
        "soak: {} queries; fds {} -> {} ({growth:?}); RSS {rss_warm} -> {} KiB",
        80 + rounds * 8,
        warm.len(),
        after.len(),
        rss_kib()
    );
    assert!(
        after.len() <= warm.len() + 16,
        "file descriptors grew from {} to {} over {} queries: {growth:?}",
        warm.len(),
        after.len(),
        rounds * 8
    );
    let pages = fx.server.engine.tiers().pages().clone();
    for _ in 0..50 {
        if fx.metric("silt_queries_active") == 0.0 && pages.pages_in_flight() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(fx.metric("silt_queries_active"), 0.0);
    assert_eq!(pages.pages_in_flight(), 0);
}
