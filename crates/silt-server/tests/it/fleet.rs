//! A fleet of three Silt servers over one store, read through the client's
//! rendezvous placement ([`silt_client::fleet`]): the answers are plain
//! DataFusion's, every server serves its share, and a server that stops in
//! the middle of a workload costs no query (its row groups fail over), and
//! gets its share back once it returns.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
use datafusion::prelude::SessionContext;
use silt_client::SiltTableOptions;
use silt_client::fleet::Fleet;
use silt_server::ServerHandle;

use crate::benchmarks::compare_suite;
use crate::common::{Fixture, answer, baseline_ctx, check_same, full_config, is_ordered, metric, shared_dir};
use crate::hybrid::{FourPaths, RUNS, SIZES, options, tpch_over_row_groups, tpch_row_groups_dir};

/// A member beside the fixture's server, on the same store and tables.
pub async fn start_member(fx: &Fixture, listen: Option<SocketAddr>) -> (ServerHandle, tempfile::TempDir) {
    start_member_with(fx, listen, |_| {}).await
}

/// [`start_member`] with `tweak` applied to its configuration.
async fn start_member_with(
    fx: &Fixture,
    listen: Option<SocketAddr>,
    tweak: impl FnOnce(&mut silt_server::config::ServerConfig),
) -> (ServerHandle, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = full_config(&fx._s3, dir.path());
    tpch_over_row_groups(&mut cfg);
    if let Some(addr) = listen {
        cfg.listen = addr;
    }
    tweak(&mut cfg);
    (silt_server::start(cfg).await.expect("start a fleet member"), dir)
}

/// Plain DataFusion over the same files: TPC-H in row groups of 8,192 rows
/// (so a scan has row groups on every member), and ClickBench's hits.
pub async fn baseline() -> SessionContext {
    let ctx = baseline_ctx().await;
    for t in silt_bench::tpch::TABLES {
        ctx.deregister_table(t).unwrap();
        let path = tpch_row_groups_dir().join(t);
        ctx.register_parquet(t, path.to_str().unwrap(), Default::default())
            .await
            .unwrap();
    }
    ctx
}

/// A fleet client of `urls` as a user gets it with no options (the
/// default compute-side cache, the choice per row group).
pub(crate) async fn fleet_ctx(urls: &[String], backoff: Duration) -> SessionContext {
    fleet_ctx_with(urls, backoff, &SiltTableOptions::default()).await
}

/// [`fleet_ctx`] with `options` (a cache of another size, or none).
pub(crate) async fn fleet_ctx_with(urls: &[String], backoff: Duration, options: &SiltTableOptions) -> SessionContext {
    let fleet = Fleet::connect(urls, None).unwrap().with_backoff(backoff);
    let ctx = SessionContext::new();
    silt_client::register_fleet_tables_with_options(&ctx, Arc::new(fleet), options)
        .await
        .unwrap();
    ctx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_answer_tpch_and_clickbench_like_datafusion() {
    let fx = Fixture::start_with(tpch_over_row_groups).await;
    let (b, _b_dir) = start_member(&fx, None).await;
    let (c, _c_dir) = start_member(&fx, None).await;
    let urls = vec![fx.server.flight_url(), b.flight_url(), c.flight_url()];
    let base = baseline().await;
    let tpch: Vec<String> = (1..=22).map(|n| format!("q{n:02}.sql")).collect();
    let clickbench: Vec<String> = (0..=42).map(|n| format!("q{n:02}.sql")).collect();
    // TPC-H with every cache size a user may give (none: every row group
    // pushed to its owner), three runs each (pushed, fetched, local);
    // ClickBench through the default client.
    let mut failures = Vec::new();
    for (label, bytes) in SIZES {
        let ctx = fleet_ctx_with(&urls, Duration::from_secs(5), &options(bytes)).await;
        let found = compare_suite(&fx, &base, &ctx, "bench/tpch/queries", &tpch, &RUNS).await;
        failures.extend(found.into_iter().map(|f| format!("[{label} cache] {f}")));
    }
    let ctx = fleet_ctx(&urls, Duration::from_secs(5)).await;
    failures.extend(compare_suite(&fx, &base, &ctx, "bench/clickbench/queries", &clickbench, &RUNS).await);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for server in [&fx.server, &b, &c] {
        assert!(
            metric(server, "silt_queries_total") > 0.0,
            "every member serves its share"
        );
        assert_eq!(metric(server, "silt_query_errors_total"), 0.0);
    }
    // What `silt stats` shows: every row group has one owner.
    let owned = Fleet::connect(&urls, None).unwrap().owned_row_groups().await.unwrap();
    let row_groups = |path: std::path::PathBuf| {
        let file = std::fs::File::open(path).unwrap();
        let reader = SerializedFileReader::new(file).unwrap();
        reader.metadata().num_row_groups()
    };
    let total: usize = silt_bench::tpch::TABLES
        .iter()
        .map(|t| row_groups(silt_bench::tpch::table_file(tpch_row_groups_dir(), t)))
        .sum::<usize>()
        + row_groups(crate::common::data_root().join("hits/hits.parquet"));
    assert_eq!(owned.iter().sum::<usize>(), total, "{owned:?}");
    assert!(owned.iter().filter(|&&n| n > 0).count() >= 2, "{owned:?}");
}

/// A fleet client with a compute-side cache chooses per row group as a
/// client of one server does: one scan's row groups take all four paths
/// (local, fetched, hybrid, pushed), every request for a row group goes to
/// its owner, and the answer is DataFusion's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_client_takes_all_four_paths_on_the_owners_and_equals_datafusion() {
    let data = FourPaths::write();
    let (a_cache, b_cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = crate::common::file_table_server(&data.dir(), a_cache.path(), 64 << 10).await;
    let b = crate::common::file_table_server(&data.dir(), b_cache.path(), 64 << 10).await;
    let urls = vec![a.flight_url(), b.flight_url()];
    let ctx = fleet_ctx_with(&urls, Duration::from_secs(5), &FourPaths::options()).await;
    data.check(&ctx).await;
    // Each member that owns a row group of `t` was asked for it.
    let owned = Fleet::connect(&urls, None).unwrap().owned_row_groups().await.unwrap();
    assert_eq!(owned.iter().sum::<usize>(), 4, "{owned:?}");
    for (server, owns) in [&a, &b].into_iter().zip(&owned) {
        assert_eq!(metric(server, "silt_query_errors_total"), 0.0);
        if *owns > 0 {
            assert!(metric(server, "silt_queries_total") > 0.0, "an owner was asked");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stopped_mid_workload_costs_no_query_and_gets_its_share_back() {
    let fx = Fixture::start_with(tpch_over_row_groups).await;
    // b restarts on its address: one no `bind(0)` takes while it is down.
    let (b, _b_dir) = start_member(&fx, Some(silt_bench::ports::free_addr())).await;
    let (c, _c_dir) = start_member(&fx, None).await;
    let b_addr = b.flight_addr;
    let urls = vec![fx.server.flight_url(), b.flight_url(), c.flight_url()];
    let backoff = Duration::from_millis(300);
    // A small compute-side cache: row groups take every path (local,
    // fetched from their owner, pushed to it) while B goes and comes back.
    let ctx = fleet_ctx_with(&urls, backoff, &options(SIZES[1].1)).await;
    let base = baseline().await;
    let queries: Vec<(String, String)> = (1..=22)
        .map(|n| {
            let file = format!("q{n:02}.sql");
            let sql = std::fs::read_to_string(shared_dir().join("bench/tpch/queries").join(&file)).unwrap();
            (file, sql)
        })
        .collect();
    let mut expected = Vec::new();
    for (_, sql) in &queries {
        expected.push(answer(&base, sql).await);
    }
    let (queries, expected) = (Arc::new(queries), Arc::new(expected));

    // Two clients run 220 queries between them while B stops and returns.
    let done = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..2 {
        let (ctx, queries, expected, done) = (ctx.clone(), queries.clone(), expected.clone(), done.clone());
        workers.push(tokio::spawn(async move {
            let mut problems = Vec::new();
            for i in 0..110 {
                let q = (i * 2 + w) % queries.len();
                let (file, sql) = &queries[q];
                match silt_client::script::run_script_last_query(&ctx, sql).await {
                    Err(e) => problems.push(format!("{file}: failed: {e}")),
                    Ok(got) => {
                        if let Err(diff) = check_same(file, &got, &expected[q], is_ordered(sql)) {
                            problems.push(diff);
                        }
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            problems
        }));
    }
    while done.load(Ordering::Relaxed) < 40 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.shutdown().await.unwrap();
    let stopped_at = done.load(Ordering::Relaxed);
    while done.load(Ordering::Relaxed) < stopped_at + 60 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (b, _b_dir2) = start_member(&fx, Some(b_addr)).await;
    let mut problems = Vec::new();
    for w in workers {
        problems.extend(w.await.unwrap());
    }
    assert!(
        problems.is_empty(),
        "{} of 220 queries went wrong:\n{}",
        problems.len(),
        problems.join("\n")
    );

    // Back after its back-off: B serves its row groups again.
    tokio::time::sleep(backoff * 2).await;
    for (_, sql) in queries.iter().take(6) {
        silt_client::script::run_script_last_query(&ctx, sql).await.unwrap();
    }
    assert!(
        metric(&b, "silt_queries_total") > 0.0,
        "the returned member gets its segments back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_preload_warms_each_row_group_on_its_owner_only() {
    let fx = Fixture::start_with(tpch_over_row_groups).await;
    let (b, _b_dir) = start_member(&fx, None).await;
    let (c, _c_dir) = start_member(&fx, None).await;
    let members = [&fx.server, &b, &c];
    let urls: Vec<String> = members.iter().map(|s| s.flight_url()).collect();
    let fleet = Arc::new(Fleet::connect(&urls, None).unwrap());
    let get_bytes = || -> Vec<f64> {
        members
            .iter()
            .map(|s| metric(s, "silt_object_store_get_bytes_total"))
            .collect()
    };
    let before = get_bytes();
    let answers = fleet.preload("lineitem", None, false).await.unwrap();
    let fetched: Vec<f64> = get_bytes().iter().zip(&before).map(|(a, b)| a - b).collect();
    // Members listen on random ports, so which own lineitem's few row
    // groups varies: at least two do, and only those are asked.
    assert!(
        answers.len() >= 2,
        "lineitem's row groups spread over the members: {answers:?}"
    );
    let mut preloaded = 0;
    for (url, answer) in &answers {
        let p = answer.as_ref().unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(p["done"], true);
        preloaded += p["bytes_done"].as_u64().unwrap();
    }
    // Together the members warmed the table once: what one server warms alone.
    let (alone, _alone_dir) = start_member(&fx, None).await;
    let whole = silt_client::SiltClient::connect(&alone.flight_url())
        .await
        .unwrap()
        .preload("lineitem", None, false, |_| {})
        .await
        .unwrap();
    assert_eq!(preloaded, whole["bytes_done"].as_u64().unwrap());
    // A member not asked fetches nothing; one asked fetches at most its
    // share (less when its footer read already brought a row group's tail).
    assert!(
        fetched.iter().sum::<f64>() > 0.0,
        "the preload read the store: {fetched:?}"
    );
    for (member, f) in urls.iter().zip(&fetched) {
        let asked = answers.iter().any(|(url, _)| url == member);
        assert!(asked || *f == 0.0, "{member} was not asked yet fetched {f} bytes");
        assert!(
            *f < preloaded as f64 * 0.8,
            "each member fetched only its share: {fetched:?} of {preloaded}"
        );
    }

    // A scan through the fleet then finds every row group warm on its owner.
    let gets: Vec<f64> = members
        .iter()
        .map(|s| metric(s, "silt_object_store_get_requests_total"))
        .collect();
    let ctx = fleet_ctx(&urls, Duration::from_secs(5)).await;
    let sql = "SELECT l_returnflag, sum(l_quantity), count(*) FROM lineitem GROUP BY 1 ORDER BY 1";
    let got = answer(&ctx, sql).await;
    let expected = answer(&baseline().await, sql).await;
    check_same("lineitem after a fleet preload", &got, &expected, true).unwrap();
    let after: Vec<f64> = members
        .iter()
        .map(|s| metric(s, "silt_object_store_get_requests_total"))
        .collect();
    assert_eq!(after, gets, "no member went to the store");
}

/// A member's `[cluster]`: every one of `servers`, itself the `me`-th.
fn in_cluster(servers: &[String], me: usize) -> impl FnOnce(&mut silt_server::config::ServerConfig) {
    let servers = servers.to_vec();
    move |cfg| {
        cfg.cluster.self_url = Some(servers[me].clone());
        cfg.cluster.servers = servers;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_member_shows_every_member_of_the_fleet() {
    let addrs = silt_bench::ports::free_addrs(3);
    let servers: Vec<String> = addrs.iter().map(|a| format!("http://{a}")).collect();
    let fx = Fixture::start_with(|cfg| {
        tpch_over_row_groups(cfg);
        cfg.listen = addrs[0];
        in_cluster(&servers, 0)(cfg);
    })
    .await;
    let (b, _b_dir) = start_member_with(&fx, Some(addrs[1]), in_cluster(&servers, 1)).await;
    let (c, _c_dir) = start_member_with(&fx, Some(addrs[2]), in_cluster(&servers, 2)).await;
    let ctx = fleet_ctx(&servers, Duration::from_secs(5)).await;
    answer(&ctx, "SELECT count(*) FROM lineitem WHERE l_quantity < 10").await;

    let view = |url: &str| {
        let url = url.to_string();
        async move {
            let client = silt_client::SiltClient::connect(&url).await.unwrap();
            let text = client.fleet_json().await.unwrap();
            serde_json::from_str::<serde_json::Value>(&text).unwrap()["members"]
                .as_array()
                .unwrap()
                .clone()
        }
    };
    // Member b, asked alone, shows all three, itself marked, each with its tiers and queries.
    let members = view(&servers[1]).await;
    assert_eq!(members.len(), 3, "{members:?}");
    for (i, m) in members.iter().enumerate() {
        assert_eq!(m["url"], servers[i].as_str());
        assert_eq!(m["self"], i == 1);
        assert_eq!(m["state"], "serving", "{m}");
        assert!(m["tiers"]["memory"]["budget"].as_u64().unwrap() > 0, "{m}");
        assert!(m["queries"]["total"].as_f64().is_some(), "{m}");
    }
    let served: f64 = members.iter().map(|m| m["queries"]["total"].as_f64().unwrap()).sum();
    assert!(served > 0.0, "the fleet's query shows in the members' counts");
    // A draining member says so; a stopped one is down, and the view still answers.
    c.engine.drain().begin();
    let members = view(&servers[0]).await;
    assert_eq!(members[2]["state"], "draining");
    c.shutdown().await.unwrap();
    let members = view(&servers[0]).await;
    assert_eq!(members[2]["state"], "down");
    assert!(members[2]["error"].as_str().is_some_and(|e| !e.is_empty()));
    assert_eq!(members[1]["state"], "serving");
    b.shutdown().await.unwrap();
}
