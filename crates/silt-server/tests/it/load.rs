//! A bounded load test: 32 concurrent clients run a mix of TPC-H and
//! ClickBench queries through one server whose budgets are far below the
//! working set, so every tier evicts all the time. Every answer must equal
//! plain DataFusion's, no query may fail, and no tier may ever hold more
//! than its budget (sampled throughout). The latencies' p50/p99 are printed,
//! never asserted. (The long version is `silt bench` at real sizes.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use datafusion::arrow::array::RecordBatch;
use silt_client::script::run_script_last_query;

use crate::common::{Fixture, baseline_ctx, break_ties, check_same, is_ordered, shared_dir};

/// The mix: (suite folder, query file).
const MIX: [(&str, &str); 8] = [
    ("bench/tpch/queries", "q01.sql"),
    ("bench/tpch/queries", "q03.sql"),
    ("bench/tpch/queries", "q06.sql"),
    ("bench/tpch/queries", "q12.sql"),
    ("bench/tpch/queries", "q14.sql"),
    ("bench/clickbench/queries", "q10.sql"),
    ("bench/clickbench/queries", "q19.sql"),
    ("bench/clickbench/queries", "q31.sql"),
];

const CLIENTS: usize = 32;
const QUERIES_PER_CLIENT: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_clients_under_tight_budgets_get_right_answers() {
    let (memory, pages, disk) = (2u64 << 20, 1u64 << 20, 4u64 << 20);
    let fx = Fixture::start_with(|c| {
        c.memory_budget = memory;
        c.page_memory_budget = pages;
        c.disk_budget = disk;
        c.page_size = 64 << 10;
    })
    .await;
    let base = baseline_ctx().await;
    let mut queries: Vec<(String, String, Vec<RecordBatch>)> = Vec::new();
    for (dir, file) in MIX {
        let text = std::fs::read_to_string(shared_dir().join(dir).join(file)).unwrap();
        let probe = run_script_last_query(&base, &text).await.unwrap();
        let sql = break_ties(&text, probe.first().map_or(0, |b| b.num_columns()));
        let expected = run_script_last_query(&base, &sql).await.unwrap();
        queries.push((format!("{dir}/{file}"), sql, expected));
    }
    let queries = Arc::new(queries);

    // Sample the tiers while the load runs: never over budget.
    let tiers = fx.server.engine.tiers().clone();
    let disk_tier = fx.server.engine.disk_tier().cloned();
    let running = Arc::new(AtomicBool::new(true));
    let sampler = {
        let running = running.clone();
        tokio::task::spawn_blocking(move || {
            let mut worst = (0u64, 0u64);
            while running.load(Ordering::Relaxed) {
                worst.0 = worst.0.max(tiers.batches().weighted_size());
                if let Some(d) = &disk_tier {
                    worst.1 = worst.1.max(d.stats().used_bytes);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            worst
        })
    };

    let clients = (0..CLIENTS).map(|c| {
        let queries = queries.clone();
        let fx_ctx = fx.client_ctx();
        async move {
            let ctx = fx_ctx.await;
            let mut outcomes = Vec::new();
            for k in 0..QUERIES_PER_CLIENT {
                let (name, sql, expected) = &queries[(c * QUERIES_PER_CLIENT + k) % queries.len()];
                let start = Instant::now();
                let got = run_script_last_query(&ctx, sql).await;
                let ms = start.elapsed().as_secs_f64() * 1e3;
                let verdict = match got {
                    Err(e) => Err(format!("{name}: failed: {e}")),
                    Ok(got) => check_same(name, &got, expected, is_ordered(sql)),
                };
                outcomes.push((ms, verdict));
            }
            outcomes
        }
    });
    let outcomes: Vec<(f64, Result<(), String>)> =
        futures::future::join_all(clients).await.into_iter().flatten().collect();
    running.store(false, Ordering::Relaxed);
    let (worst_memory, worst_disk) = sampler.await.unwrap();

    let failures: Vec<&String> = outcomes.iter().filter_map(|(_, v)| v.as_ref().err()).collect();
    assert!(
        failures.is_empty(),
        "{} of {} queries wrong or failed:\n{failures:#?}",
        failures.len(),
        outcomes.len()
    );
    assert_eq!(outcomes.len(), CLIENTS * QUERIES_PER_CLIENT);
    assert!(
        worst_memory <= memory,
        "memory tier held {worst_memory} bytes over its {memory}"
    );
    assert!(worst_disk <= disk, "disk tier held {worst_disk} bytes over its {disk}");
    assert!(
        fx.metric("silt_cache_evictions_total{tier=\"memory\"}") > 0.0,
        "the budgets were not tight"
    );
    assert_eq!(fx.metric("silt_query_errors_total"), 0.0);

    let mut ms: Vec<f64> = outcomes.iter().map(|(ms, _)| *ms).collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    eprintln!(
        "load: {} queries from {CLIENTS} clients, p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (debug build)",
        ms.len(),
        at(0.5),
        at(0.99),
        ms[ms.len() - 1]
    );
}
