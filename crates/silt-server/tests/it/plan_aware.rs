//! Plan-aware buffer management through a real server: scan sets are
//! registered at planning and released by the scan or its cancellation,
//! concurrent cold scans decode a column chunk once, and concurrent queries
//! under budgets far below their data keep the budgets and DataFusion's
//! answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use silt_cache::MemoryForm;
use silt_client::SiltClient;
use silt_proto::{Projection, ScanRequest};
use silt_server::Engine;

use crate::benchmarks::compare_suite;
use crate::common::{Fixture, baseline_ctx};

/// Waits (up to 10 s) until no query stream is open, then asserts nothing
/// is reserved, decoding or fetching.
async fn assert_nothing_held(fx: &Fixture) {
    for _ in 0..200 {
        if fx.metric("silt_queries_active") == 0.0 && fx.server.engine.tiers().scan_sets().active_sets() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let tiers = fx.server.engine.tiers();
    let sets = tiers.scan_sets();
    assert_eq!(fx.metric("silt_queries_active"), 0.0);
    assert_eq!(sets.active_sets(), 0, "scan sets left registered: {sets:?}");
    assert_eq!(sets.reserved_entries(), (0, 0), "reservations leaked: {sets:?}");
    assert_eq!(tiers.batches().decodes().in_flight(), 0, "decodes left in flight");
    assert_eq!(tiers.pages().pages_in_flight(), 0, "page fetches left in flight");
}

fn scan(table: &str, columns: &[&str]) -> ScanRequest {
    ScanRequest {
        table: table.into(),
        projection: Some(Projection {
            columns: columns.iter().map(|c| c.to_string()).collect(),
        }),
        ..Default::default()
    }
}

/// 1,000 queries cancelled at every stage: before the server answered
/// (the call dropped after a few hundred microseconds), after the first
/// batch, and after a few batches. Every reservation is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_cancelled_queries_release_every_reservation() {
    let fx = Fixture::start_with(|c| {
        c.memory_budget = 2 << 20;
        c.store.latency = Duration::from_millis(2);
    })
    .await;
    let client = SiltClient::connect(&fx.server.flight_url()).await.unwrap();
    let requests = [
        scan("lineitem", &["l_orderkey", "l_quantity", "l_comment"]),
        scan("orders", &["o_orderkey", "o_comment"]),
        scan("hits_raw", &["URL", "UserID", "SearchPhrase"]),
    ];
    let registered_before = AtomicU64::new(0);
    let sets = fx.server.engine.tiers().scan_sets().clone();
    futures::stream::iter(0..1000u32)
        .for_each_concurrent(8, |i| {
            let (client, request, registered, sets) = (&client, &requests[i as usize % 3], &registered_before, &sets);
            async move {
                match i % 4 {
                    0 => {
                        let started = client.scan(request);
                        let _ =
                            tokio::time::timeout(Duration::from_micros(200 + u64::from(i % 7) * 300), started).await;
                    }
                    stage => {
                        let Ok(mut stream) = client.scan(request).await else {
                            return;
                        };
                        if sets.active_sets() > 0 {
                            registered.fetch_add(1, Ordering::Relaxed);
                        }
                        for _ in 0..stage {
                            if stream.next().await.is_none() {
                                break;
                            }
                        }
                        drop(stream);
                    }
                }
            }
        })
        .await;
    assert!(
        registered_before.load(Ordering::Relaxed) > 0,
        "no scan set was ever seen registered: the test would prove nothing"
    );
    assert_nothing_held(&fx).await;
    // The server still answers.
    let rows: usize = client
        .scan_all(&scan("nation", &["n_name"]))
        .await
        .unwrap()
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert_eq!(rows, 25);
    assert_nothing_held(&fx).await;
}

/// The distinct (object, row group, column) chunks the memory tier holds.
fn chunks_held(engine: &Engine) -> usize {
    let mut chunks: Vec<_> = engine
        .tiers()
        .batches()
        .held_units()
        .into_iter()
        .map(|s| s.held)
        .collect();
    chunks.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    chunks.dedup();
    chunks.len()
}

/// Pairs of scans of the same columns on a cold cache: the second of a pair
/// starts once the first is decoding (the store answers after 1 s, so the
/// first's decode waits on its page fetches that long): each column chunk is
/// decoded once, and both get every row. Whether the second scan reaches its
/// claim while the first still decodes (and waits) or after (and reads the
/// memory tier) still depends on the machine (a loaded one may take longer
/// than the store to plan a scan); over six pairs on fresh columns at least
/// one must have waited, so the sharing path is exercised. (Starting both at
/// once and a 50 ms store made a loaded CI machine miss every pair; a 250 ms
/// store still missed all six once with the whole suite running on 2 cores.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_cold_scans_decode_each_column_chunk_once() {
    let fx = Fixture::start_with(|c| {
        c.store.latency = Duration::from_millis(1000);
        // Arrow batches: no transcoder, so every first read admits. With
        // liquid on a loaded machine the transcoder falls behind, a first
        // read then admits nothing (by design: `column_loader.rs`), and a
        // second scan arriving after the first's decode ended decodes again:
        // not the sharing this test looks at.
        c.memory_form = MemoryForm::Arrow;
    })
    .await;
    let client = SiltClient::connect(&fx.server.flight_url()).await.unwrap();
    let pairs: [(&str, &[&str]); 6] = [
        ("lineitem", &["l_orderkey", "l_comment"]),
        ("lineitem", &["l_quantity", "l_shipdate", "l_shipinstruct"]),
        ("lineitem", &["l_extendedprice", "l_receiptdate", "l_shipmode"]),
        ("orders", &["o_orderkey", "o_comment", "o_clerk"]),
        ("orders", &["o_totalprice", "o_orderdate", "o_orderpriority"]),
        ("partsupp", &["ps_partkey", "ps_comment"]),
    ];
    let decodes = fx.server.engine.tiers().batches().decodes();
    let rows =
        |batches: Vec<datafusion::arrow::array::RecordBatch>| -> usize { batches.iter().map(|b| b.num_rows()).sum() };
    let mut waits = 0;
    for (table, columns) in pairs {
        let request = scan(table, columns);
        let chunks_before = chunks_held(&fx.server.engine);
        let (decoded_before, waited_before) = decodes.counts();
        let first = tokio::spawn({
            let (client, request) = (client.clone(), request.clone());
            async move { client.scan_all(&request).await }
        });
        // Not a timing bound: only how long to look for the first's decode.
        for _ in 0..10_000 {
            if decodes.in_flight() > 0 || first.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let b = client.scan_all(&request).await;
        let a = first.await.unwrap();
        let (a, b) = (rows(a.unwrap()), rows(b.unwrap()));
        assert_eq!(a, b, "{table} {columns:?}");
        assert!(a > 0);
        let (decoded, waited) = decodes.counts();
        let chunks = chunks_held(&fx.server.engine) - chunks_before;
        assert!(chunks >= columns.len(), "{chunks} chunks of {columns:?} held");
        assert_eq!(
            decoded - decoded_before,
            chunks as u64,
            "each of {chunks} column chunks of {table} {columns:?} decoded once"
        );
        waits += waited - waited_before;
    }
    assert!(waits > 0, "no second scan ever waited for the first's decode");
    assert_nothing_held(&fx).await;
}

/// Four clients run TPC-H queries at once, plan-aware, against a memory tier of 3 MiB
/// and a disk tier of 8 MiB (TPC-H SF 0.01 is ~10 MiB of Parquet), two
/// queries executing at a time (the others queue, their scan sets
/// registered): every answer equals plain DataFusion's, and a sampler never
/// sees a tier over its budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_queries_under_tight_budgets_keep_them_and_match_datafusion() {
    let fx = Fixture::start_with(|c| {
        c.memory_budget = 3 << 20;
        c.page_memory_budget = 1 << 20;
        c.disk_budget = 8 << 20;
        c.page_size = 64 << 10;
        c.max_concurrent_queries = 2;
        c.plan_aware = true;
    })
    .await;
    let base = baseline_ctx().await;
    let done = Arc::new(AtomicBool::new(false));
    let engine = fx.server.engine.clone();
    let sampler = {
        let done = done.clone();
        tokio::spawn(async move {
            let (mut samples, mut over) = (0u64, Vec::new());
            while !done.load(Ordering::Relaxed) {
                let batches = engine.tiers().batches();
                let memory = batches.weighted_size();
                if memory > batches.capacity() {
                    over.push(format!("memory {memory} > {}", batches.capacity()));
                }
                if let Some(disk) = engine.disk_tier() {
                    let used = disk.used_bytes();
                    if used > disk.budget_bytes() {
                        over.push(format!("disk {used} > {}", disk.budget_bytes()));
                    }
                }
                samples += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            (samples, over)
        })
    };
    let files: Vec<String> = [1, 3, 5, 6, 10, 12, 14, 19]
        .iter()
        .map(|n| format!("q{n:02}.sql"))
        .collect();
    let mut clients = Vec::new();
    for c in 0..4 {
        let mut order = files.clone();
        order.rotate_left(c * 2);
        clients.push(order);
    }
    let contexts = futures::future::join_all((0..4).map(|_| fx.client_ctx())).await;
    let runs = clients
        .iter()
        .zip(&contexts)
        .map(|(order, silt)| compare_suite(&fx, &base, silt, "bench/tpch/queries", order, &["cold"]));
    let failures: Vec<String> = futures::future::join_all(runs).await.into_iter().flatten().collect();
    done.store(true, Ordering::Relaxed);
    let (samples, over) = sampler.await.unwrap();
    assert!(failures.is_empty(), "answers differ:\n{}", failures.join("\n"));
    assert!(samples > 10, "{samples} samples");
    assert!(over.is_empty(), "budgets exceeded: {over:?}");
    assert!(
        fx.metric("silt_cache_evictions_total{tier=\"memory\"}") > 0.0,
        "the budget never bit"
    );
    assert_nothing_held(&fx).await;
}
