//! Distributed queries on `datafusion-distributed` over a fleet: two
//! workers beside two of three Silt servers, the coordinator's scans split
//! into one task per worker ([`silt_client::distributed`]). TPC-H's 22
//! answers are plain DataFusion's, both workers run scan tasks, and every
//! server serves its share.

use std::sync::Arc;

use silt_client::SiltTableOptions;
use silt_client::distributed::{SiltScanCodec, coordinator_context, serve_worker_with, worker_with};
use silt_client::fleet::Fleet;

use crate::benchmarks::compare_suite;
use crate::common::{Fixture, metric};
use crate::fleet::{baseline, start_member};
use crate::hybrid::{RUNS, options, tpch_over_row_groups};

/// A worker on a free loopback port, served until the test's runtime
/// ends, as `silt worker` starts with no options (the default
/// compute-side cache).
async fn start_worker(servers: &[String]) -> (String, Arc<SiltScanCodec>) {
    start_worker_with(servers, &SiltTableOptions::default()).await
}

/// [`start_worker`] with `options` (its compute-side cache).
async fn start_worker_with(servers: &[String], options: &SiltTableOptions) -> (String, Arc<SiltScanCodec>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (worker, codec) = worker_with(None, Some(servers.to_vec()), options);
    tokio::spawn(serve_worker_with(listener, worker, std::future::pending()));
    (url, codec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_through_two_workers_and_three_servers_matches_datafusion() {
    let fx = Fixture::start_with(tpch_over_row_groups).await;
    let (b, _b_dir) = start_member(&fx, None).await;
    let (c, _c_dir) = start_member(&fx, None).await;
    let servers = vec![fx.server.flight_url(), b.flight_url(), c.flight_url()];
    let (w1, w1_codec) = start_worker(&servers).await;
    let (w2, w2_codec) = start_worker(&servers).await;
    let fleet = Arc::new(Fleet::connect(&servers, None).unwrap());
    let ctx = coordinator_context(fleet, &[w1.clone(), w2], None).await.unwrap();

    // The plan is distributed: its scans are split into tasks per worker.
    let text = silt_client::distributed::explain(&ctx, "SELECT l_returnflag, count(*) FROM lineitem GROUP BY 1")
        .await
        .unwrap();
    assert!(text.contains("DistributedExec"), "{text}");
    assert!(text.contains("task=1/2"), "the scan is split into two tasks: {text}");

    let base = baseline().await;
    let tpch: Vec<String> = (1..=22).map(|n| format!("q{n:02}.sql")).collect();
    // Three runs of each (pushed, fetched, local): the workers' default
    // caches answer their shares' row groups by the third.
    let mut failures = compare_suite(&fx, &base, &ctx, "bench/tpch/queries", &tpch, &RUNS).await;
    for (worker, codec) in [("w1", &w1_codec), ("w2", &w2_codec)] {
        assert!(codec.scans_decoded() > 0, "{worker} ran scan tasks");
        let stats = codec.local_cache().expect("a worker keeps a cache by default").stats();
        assert!(
            stats.admitted > 0 && stats.hits > 0,
            "{worker} answered row groups from its cache: {stats:?}"
        );
    }
    // Workers with no cache push every task's share to its owners.
    let (n1, n1_codec) = start_worker_with(&servers, &options(Some(0))).await;
    let (n2, _) = start_worker_with(&servers, &options(Some(0))).await;
    let fleet = Arc::new(Fleet::connect(&servers, None).unwrap());
    let pushing = coordinator_context(fleet, &[n1, n2], None).await.unwrap();
    let found = compare_suite(&fx, &base, &pushing, "bench/tpch/queries", &tpch, &["cold", "warm"]).await;
    failures.extend(found.into_iter().map(|f| format!("[workers without a cache] {f}")));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(n1_codec.local_cache().is_none() && n1_codec.scans_decoded() > 0);
    // A worker reads only from the servers it was started with: a plan
    // naming others (where it would send its token) is refused.
    let (w3, _) = start_worker(&servers[..1]).await;
    let fleet = Arc::new(Fleet::connect(&servers, None).unwrap());
    let elsewhere = coordinator_context(fleet, &[w3, w1], None).await.unwrap();
    let refused = elsewhere
        .sql("SELECT count(*) FROM lineitem")
        .await
        .unwrap()
        .collect()
        .await;
    let message = refused.expect_err("a plan naming other servers is refused").to_string();
    assert!(message.contains("reads only from the servers"), "{message}");
    for server in [&fx.server, &b, &c] {
        assert!(
            metric(server, "silt_queries_total") > 0.0,
            "every server serves its share"
        );
        assert_eq!(metric(server, "silt_query_errors_total"), 0.0);
    }
}
