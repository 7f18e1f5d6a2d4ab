//! `kill -9` of one of three real `silt serve` processes in the middle of a
//! workload read through the fleet client: every one of 220 queries
//! completes with plain DataFusion's answer (the dead server's row groups
//! fail over to the next server in their rendezvous order), and the server
//! restarted on its port serves again.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use silt_bench::local_s3::LocalS3;
use silt_bench::tpch;

use common::{fleet_client, serve_command, serve_command_on, start, tpch_answers, tpch_problem};

/// Queries each of the two clients runs.
const PER_CLIENT: usize = 110;

async fn wait_for(done: &AtomicUsize, n: usize) {
    let started = Instant::now();
    while done.load(Ordering::Relaxed) < n {
        assert!(started.elapsed() < Duration::from_secs(600), "the workload stalled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_a_fleet_member_mid_workload_fails_no_query() {
    let data = tempfile::tempdir().unwrap();
    // Row groups of 8,192 rows, so every table's row groups spread over the fleet.
    let layout = tpch::ParquetLayout {
        row_group_rows: 8192,
        ..Default::default()
    };
    tpch::generate(&data.path().join("tpch"), 0.01, layout).unwrap();
    let s3 = LocalS3::start(data.path()).await.unwrap();
    let caches: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut servers: Vec<_> = caches
        .iter()
        .map(|c| start(serve_command(&s3, c.path(), &[])))
        .collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    let expected = Arc::new(tpch_answers(&data.path().join("tpch")).await);

    let done = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for c in 0..2 {
        let ctx = fleet_client(&urls).await;
        let (expected, done) = (expected.clone(), done.clone());
        clients.push(tokio::spawn(async move {
            let mut problems = Vec::new();
            for i in 0..PER_CLIENT {
                let n = (i * 2 + c) % 22 + 1;
                problems.extend(tpch_problem(&ctx, n, &expected).await);
                done.fetch_add(1, Ordering::Relaxed);
            }
            problems
        }));
    }

    wait_for(&done, 40).await;
    let victim = servers.remove(1);
    let listen = victim.url.trim_start_matches("http://").to_string();
    victim.stop(); // SIGKILL
    let killed_at = done.load(Ordering::Relaxed);
    wait_for(&done, killed_at + 60).await;
    let restarted = start(serve_command_on(&listen, &s3, caches[1].path(), &[]));
    assert_eq!(restarted.url, urls[1], "back on its port");

    let mut problems = Vec::new();
    for c in clients {
        problems.extend(c.await.unwrap());
    }
    assert!(
        problems.is_empty(),
        "{} of {} queries went wrong:\n{}",
        problems.len(),
        2 * PER_CLIENT,
        problems.join("\n")
    );
    let panics: usize = servers.iter().map(|s| s.log_lines_with("panicked").len()).sum();
    assert_eq!(panics, 0, "no server panicked");
    restarted.stop();
    for s in servers {
        s.stop();
    }
}
