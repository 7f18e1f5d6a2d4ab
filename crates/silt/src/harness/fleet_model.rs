//! The scale model of `silt bench fleet`: throughput and latency of fleets
//! of 10, 50 and 100 members, from what the runs here measured per member
//! and the placement's balance over the data's real row groups. The method
//! and its limits are written down in `docs/fleet-scale-model.md`.
//!
//! - **Cost per query**: the servers' CPU milliseconds per query, measured
//!   at each fleet size here, fitted as `a + b·N` (`b`: what each member
//!   adds to a query: its layout and scoped-scan requests, their planning).
//! - **Balance**: the busiest member's share of the row groups' bytes
//!   over the mean share, by rendezvous hashing over `N` members.
//! - **Throughput**: the busiest member saturates first, so with `k` cores
//!   per member the fleet answers `k · 1000 / (cost(N) / N · balance(N))`
//!   queries per second (the model is CPU-bound, as the runs here are warm).
//! - **Latency** at low load: the p50 measured here, fitted as
//!   `α + β / N` (a fixed part, and a part the members share), then
//!   `α + β · balance(N) / N`.

use serde::Serialize;
use silt_client::fleet::rendezvous_order;

/// Fleet sizes the model predicts.
pub const MODELLED: [usize; 3] = [10, 50, 100];

/// Cores per member the model's throughput is quoted for (a production
/// cache node), beside the per-core figure.
pub const CORES_PER_MEMBER: f64 = 16.0;

/// One measured fleet size: the model's input.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    pub servers: usize,
    pub cpu_ms_per_query: f64,
    pub p50_ms: f64,
    /// Requests all members answered per query.
    pub requests_per_query: f64,
}

/// One predicted fleet size.
#[derive(Debug, Serialize)]
pub struct Predicted {
    pub members: usize,
    /// The busiest member's bytes over the mean member's.
    pub balance: f64,
    pub cpu_ms_per_query: f64,
    pub queries_per_second_per_core: f64,
    pub queries_per_second: f64,
    pub p50_ms: f64,
    /// Requests per second each member answers at that throughput.
    pub requests_per_second_per_member: f64,
}

/// Least squares `y = a + b·x` over `points`; `None` with fewer than two
/// distinct `x`.
fn fit(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    let (sx, sy) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    if points.len() < 2 || sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let b = sxy / sxx;
    Some((my - b * mx, b))
}

/// The busiest member's share of `groups`' bytes over the mean share, with
/// `n` members placed by rendezvous hashing.
pub fn balance(groups: &[(String, u64)], n: usize) -> f64 {
    let names = super::fleet::member_names(n);
    let members: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut owned = vec![0u64; n];
    for (name, bytes) in groups {
        owned[rendezvous_order(&members, name)[0]] += bytes;
    }
    let total: u64 = owned.iter().sum();
    let max = owned.iter().copied().max().unwrap_or(0);
    if total == 0 {
        return 1.0;
    }
    max as f64 / (total as f64 / n as f64)
}

/// The model's predictions for [`MODELLED`] sizes, or `None` when fewer
/// than two fleet sizes were measured.
pub fn predict(measured: &[Measured], groups: &[(String, u64)]) -> Option<Vec<Predicted>> {
    let cost = fit(&measured
        .iter()
        .map(|m| (m.servers as f64, m.cpu_ms_per_query))
        .collect::<Vec<_>>())?;
    let requests = fit(&measured
        .iter()
        .map(|m| (m.servers as f64, m.requests_per_query))
        .collect::<Vec<_>>())?;
    let latency = fit(&measured
        .iter()
        .map(|m| (1.0 / m.servers as f64, m.p50_ms))
        .collect::<Vec<_>>())?;
    Some(
        MODELLED
            .iter()
            .map(|&n| {
                let nf = n as f64;
                let balance = balance(groups, n);
                let cpu = (cost.0 + cost.1 * nf).max(0.0);
                let busiest_ms = (cpu / nf * balance).max(1e-9);
                let per_core = 1000.0 / busiest_ms;
                let qps = per_core * CORES_PER_MEMBER;
                let requests_per_query = (requests.0 + requests.1 * nf).max(0.0);
                Predicted {
                    members: n,
                    balance,
                    cpu_ms_per_query: cpu,
                    queries_per_second_per_core: per_core,
                    queries_per_second: qps,
                    p50_ms: (latency.0 + latency.1 * balance / nf).max(0.0),
                    requests_per_second_per_member: qps * requests_per_query / nf,
                }
            })
            .collect(),
    )
}

/// The model as a report section.
pub fn render(predicted: &[Predicted]) -> String {
    let mut s = format!(
        "\n## Scale model (from the runs above; method in docs/fleet-scale-model.md)\n\nThroughput when the busiest member's CPU saturates, per core of each member and for {CORES_PER_MEMBER:.0} cores per member; p50 at low load. Alluxio's published figure for comparison: 50 workers, 1M requests/s (about 20k small reads per second per worker).\n\n| members | balance (max/mean bytes) | server CPU ms/query | queries/s per core | queries/s ({CORES_PER_MEMBER:.0} cores each) | p50 (ms) | requests/s per member |\n|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    for p in predicted {
        s.push_str(&format!(
            "| {} | {:.2} | {:.0} | {:.1} | {:.0} | {:.0} | {:.0} |\n",
            p.members,
            p.balance,
            p.cpu_ms_per_query,
            p.queries_per_second_per_core,
            p.queries_per_second,
            p.p50_ms,
            p.requests_per_second_per_member
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_fitted_exactly_and_a_single_point_is_not_fitted() {
        let (a, b) = fit(&[(1.0, 12.0), (2.0, 14.0), (4.0, 18.0)]).unwrap();
        assert!((a - 10.0).abs() < 1e-9 && (b - 2.0).abs() < 1e-9);
        assert!(fit(&[(1.0, 3.0)]).is_none());
        assert!(fit(&[(2.0, 3.0), (2.0, 5.0)]).is_none());
    }

    #[test]
    fn many_equal_row_groups_balance_near_one_and_the_prediction_follows_the_fit() {
        let groups: Vec<(String, u64)> = (0..20_000)
            .map(|i| (format!("t/f{}.parquet#{}", i / 16, i % 16), 100))
            .collect();
        let ten = balance(&groups, 10);
        assert!((1.0..1.1).contains(&ten), "{ten}");
        // Fewer row groups per member: a worse balance.
        assert!(balance(&groups[..500], 100) > ten);
        let measured = [
            Measured {
                servers: 1,
                cpu_ms_per_query: 100.0,
                p50_ms: 50.0,
                requests_per_query: 10.0,
            },
            Measured {
                servers: 2,
                cpu_ms_per_query: 110.0,
                p50_ms: 30.0,
                requests_per_query: 12.0,
            },
            Measured {
                servers: 4,
                cpu_ms_per_query: 130.0,
                p50_ms: 20.0,
                requests_per_query: 16.0,
            },
        ];
        let predicted = predict(&measured, &groups).unwrap();
        assert_eq!(predicted.len(), 3);
        let p10 = &predicted[0];
        assert!((p10.cpu_ms_per_query - 190.0).abs() < 1e-6, "{p10:?}");
        // The busiest of 10 members spends 19 ms × balance per query.
        assert!((p10.queries_per_second_per_core - 1000.0 / (19.0 * p10.balance)).abs() < 1e-6);
        assert!(predicted[2].p50_ms < predicted[0].p50_ms + 1e-9);
    }
}
