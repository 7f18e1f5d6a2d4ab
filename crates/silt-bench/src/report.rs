//! `report.md`: the run's tables, readable without the JSON.
//!
//! One table per figure (query x mode), then the ratios the issues' targets
//! are stated in, each against a baseline measured in the same run.

use std::fmt::Write;

use crate::results::{BenchResults, QueryResult, geomean};

/// The whole report.
pub fn render(results: &BenchResults, plots: &[String]) -> String {
    let mut out = String::new();
    let d = &results.data;
    let c = &results.config;
    let _ = writeln!(out, "# {} — {}\n", results.suite, results.name);
    let _ = writeln!(
        out,
        "Data: {} ({} rows, {} files, {:.1} MiB Parquet). Object store throttled to {} ms per request and {} MB/s. \
         Warm = median of {} runs after one warm-up run (min–max in results.json). Build: {}; {} cores, {:.0} GiB.\n",
        d.description,
        d.rows,
        d.files,
        mib(d.parquet_bytes),
        c.store_latency_ms,
        c.store_mbps,
        c.warm_runs,
        results.machine.build,
        results.machine.cores,
        results.machine.memory_bytes as f64 / (1u64 << 30) as f64
    );
    let _ = writeln!(out, "{}\n", link_sentence(c.link.as_ref()));
    let _ = writeln!(out, "{}", MODE_LEGEND);
    section(&mut out, results, "Warm latency (ms, median)", |r| {
        r.warm_ms.as_ref().map(|w| format!("{:.1}", w.median))
    });
    section(&mut out, results, "Cold latency (ms, empty cache)", |r| {
        r.cold_ms.map(|v| format!("{v:.1}"))
    });
    section(&mut out, results, "Cache-server CPU per warm query (ms, mean)", |r| {
        r.server_cpu_s.map(|c| format!("{:.1}", c.warm_mean * 1e3))
    });
    section(&mut out, results, "Client CPU per warm query (ms, mean)", |r| {
        r.client_cpu_s.map(|c| format!("{:.1}", c.warm_mean * 1e3))
    });
    section(
        &mut out,
        results,
        "Where warm time goes (ms, mean): validation / planning / scan / encode / send on the server, \
         then the rest (client and network)",
        |r| {
            let stages = r.server_stages_ms?;
            let warm = crate::results::mean(&r.warm_ms.as_ref()?.runs)?;
            let server: f64 = stages.to_array().iter().sum();
            let parts: Vec<String> = stages.to_array().iter().map(|v| format!("{v:.1}")).collect();
            Some(format!("{} / {:.1}", parts.join(" / "), (warm - server).max(0.0)))
        },
    );
    section(&mut out, results, "Bytes to the client per warm query", |r| {
        r.bytes_to_client.map(|b| human_bytes(b.warm_median))
    });
    if results.results.iter().any(|r| r.link_bytes.is_some()) {
        section(
            &mut out,
            results,
            "Bytes across the client-cache link per warm query (both directions; to the client / to the server)",
            |r| {
                let (all, to_client, to_server) = (r.link_bytes?, r.link_bytes_to_client?, r.link_bytes_to_server?);
                Some(format!(
                    "{} ({} / {})",
                    human_bytes(all.warm_median),
                    human_bytes(to_client.warm_median),
                    human_bytes(to_server.warm_median)
                ))
            },
        );
        section(
            &mut out,
            results,
            "Bytes across the client-cache link, cold run (both directions)",
            |r| r.link_bytes.map(|b| human_bytes(b.cold)),
        );
    }
    section(&mut out, results, "Object-store GETs, cold run", |r| {
        r.object_store.map(|s| s.cold_requests.to_string())
    });
    section(&mut out, results, "Cache memory tier after the query", |r| {
        r.memory.map(|m| human_bytes(m.memory_tier_bytes))
    });
    section(
        &mut out,
        results,
        "Memory tier vs the same batches as Parquet (compressed) and as Arrow: bytes, x Parquet, x Arrow",
        |r| {
            r.memory.filter(|m| m.memory_tier_bytes > 0).map(|m| {
                let x = |d: u64| {
                    if d == 0 {
                        "—".to_string()
                    } else {
                        format!("{:.2}", m.memory_tier_bytes as f64 / d as f64)
                    }
                };
                format!(
                    "{}, {}, {}",
                    human_bytes(m.memory_tier_bytes),
                    x(m.memory_tier_parquet_bytes),
                    x(m.memory_tier_arrow_bytes)
                )
            })
        },
    );
    section(&mut out, results, "Process RSS after the query", |r| {
        r.memory.map(|m| human_bytes(m.rss_bytes))
    });
    section(
        &mut out,
        results,
        "Peak process RSS (cold run included) and its ratio to the memory tier",
        |r| {
            r.memory.filter(|m| m.peak_rss_bytes > 0).map(|m| {
                let ratio = if m.memory_tier_bytes > 0 {
                    format!(", {:.2}x tier", m.peak_rss_bytes as f64 / m.memory_tier_bytes as f64)
                } else {
                    String::new()
                };
                format!("{}{ratio}", human_bytes(m.peak_rss_bytes))
            })
        },
    );
    if results.results.iter().any(|r| r.restart.is_some()) {
        section(
            &mut out,
            results,
            "First run after a kill -9 and a restart on the same cache dir: ms (x warm median), \
             store GETs, Parquet chunks decoded, squeezed chunks read back",
            |r| {
                let restart = r.restart?;
                let warm = r.warm_ms.as_ref().map_or(String::new(), |w| {
                    format!(" ({:.2}x)", restart.ms / w.median.max(f64::MIN_POSITIVE))
                });
                Some(format!(
                    "{:.1}{warm}, {}, {}, {}{}",
                    restart.ms,
                    restart.store_requests,
                    restart.parquet_decodes,
                    restart.restored_chunks,
                    if restart.matches_reference { "" } else { ", WRONG" }
                ))
            },
        );
    }
    ratios(&mut out, results);
    problems(&mut out, results);
    if !plots.is_empty() {
        let _ = writeln!(out, "## Plots\n");
        for p in plots {
            let _ = writeln!(out, "- [{p}]({p})");
        }
    }
    out
}

const MODE_LEGEND: &str = "Modes: `direct` = DataFusion reads the throttled store itself; `file-server` = the cache \
serves Parquet bytes (S3 API), the client decodes and filters; `parquet-pushdown` = the cache holds Parquet bytes and \
filters by decoding them (no memory tier); `arrow-pushdown` = the cache holds decoded Arrow; `liquid` = Silt's default; \
`duckdb` = DuckDB reading the same files from local disk (unthrottled: an outside reference only); `local` = \
DataFusion reading the same files from local disk, no cache, no throttle (what the client could do if the lake were \
local).\n";

/// The client-cache link of a run, in one sentence.
pub fn link_sentence(link: Option<&crate::results::LinkConfig>) -> String {
    match link {
        Some(l) if l.is_shaped() => format!(
            "Client-cache link: `{}` ({} Mbit/s each way, {} ms round trip), one link shared by every connection \
             of the run, simulated by a TCP proxy in the client process; modes without a cache server do not use it.",
            l.given,
            l.bits_per_second.unwrap_or(0.0) / 1e6,
            l.rtt_s.unwrap_or(0.0) * 1e3
        ),
        _ => "Client-cache link: none (loopback).".to_string(),
    }
}

fn find<'a>(results: &'a BenchResults, mode: &str, query: &str) -> Option<&'a QueryResult> {
    results.results.iter().find(|r| r.mode == mode && r.query == query)
}

/// A query x mode table of `cell`; failed runs show their status.
fn section(out: &mut String, results: &BenchResults, title: &str, cell: impl Fn(&QueryResult) -> Option<String>) {
    let modes = &results.config.modes;
    let _ = writeln!(out, "## {title}\n");
    let _ = writeln!(out, "| query | {} |", modes.join(" | "));
    let _ = writeln!(out, "|---|{}", "---:|".repeat(modes.len()));
    for q in &results.queries {
        let cells: Vec<String> = modes
            .iter()
            .map(|m| match find(results, m, &q.id) {
                None => "—".into(),
                Some(r) if r.status != "ok" => r.status.clone(),
                Some(r) => cell(r).unwrap_or_else(|| "—".into()),
            })
            .collect();
        let _ = writeln!(out, "| {} | {} |", q.id, cells.join(" | "));
    }
    let _ = writeln!(out);
}

/// (heading, mode a, modes b, metric): a column of `a / min(b...)`, the
/// ratio of `a` to the best of the `b` modes that ran the query.
type RatioColumn<'a> = (&'a str, &'a str, &'a [&'a str], &'a dyn Fn(&QueryResult) -> Option<f64>);

/// `a / min over bs` of `metric` on one query (where `a` and some `b` ran).
fn ratio_to_best(
    results: &BenchResults,
    q: &str,
    a: &str,
    bs: &[&str],
    metric: &dyn Fn(&QueryResult) -> Option<f64>,
) -> Option<f64> {
    let best = bs
        .iter()
        .filter_map(|b| find(results, b, q).filter(|r| r.status == "ok").and_then(metric))
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))))?;
    let x = find(results, a, q).filter(|r| r.status == "ok").and_then(metric)?;
    (best > 0.0).then(|| x / best)
}

/// The ratios the targets are stated in, where the modes ran, with their
/// geometric mean over the queries.
fn ratios(out: &mut String, results: &BenchResults) {
    let warm = |r: &QueryResult| r.warm_ms.as_ref().map(|w| w.median);
    let cold = |r: &QueryResult| r.cold_ms;
    let cpu = |r: &QueryResult| r.server_cpu_s.map(|c| c.warm_mean);
    let columns: [RatioColumn; 12] = [
        (
            "liquid CPU / parquet-pushdown CPU",
            "liquid",
            &["parquet-pushdown"],
            &cpu,
        ),
        ("liquid CPU / arrow-pushdown CPU", "liquid", &["arrow-pushdown"], &cpu),
        (
            "liquid warm / arrow-pushdown warm",
            "liquid",
            &["arrow-pushdown"],
            &warm,
        ),
        ("direct warm / liquid warm (speed-up)", "direct", &["liquid"], &warm),
        ("liquid cold / direct cold", "liquid", &["direct"], &cold),
        ("file-server warm / liquid warm", "file-server", &["liquid"], &warm),
        (
            "liquid warm / best of file-server, arrow-pushdown warm",
            "liquid",
            &["file-server", "arrow-pushdown"],
            &warm,
        ),
        ("liquid warm / local warm", "liquid", &["local"], &warm),
        ("direct warm / hybrid warm (speed-up)", "direct", &["hybrid"], &warm),
        ("hybrid warm / liquid warm", "hybrid", &["liquid"], &warm),
        (
            "hybrid warm / best of file-server, arrow-pushdown warm",
            "hybrid",
            &["file-server", "arrow-pushdown"],
            &warm,
        ),
        ("hybrid warm / local warm", "hybrid", &["local"], &warm),
    ];
    let ran = |m: &str| results.config.modes.iter().any(|x| x == m);
    let present: Vec<_> = columns
        .iter()
        .filter(|(_, a, bs, _)| ran(a) && bs.iter().all(|b| ran(b)))
        .collect();
    if present.is_empty() {
        return;
    }
    let _ = writeln!(out, "## Ratios (same run)\n");
    let names: Vec<&str> = present.iter().map(|c| c.0).collect();
    let _ = writeln!(out, "| query | {} |", names.join(" | "));
    let _ = writeln!(out, "|---|{}", "---:|".repeat(present.len()));
    let mut per_column = vec![Vec::new(); present.len()];
    for q in &results.queries {
        let cells: Vec<String> = present
            .iter()
            .zip(per_column.iter_mut())
            .map(|((_, a, bs, m), seen)| match ratio_to_best(results, &q.id, a, bs, *m) {
                Some(r) => {
                    seen.push(r);
                    format!("{r:.2}")
                }
                None => "—".into(),
            })
            .collect();
        let _ = writeln!(out, "| {} | {} |", q.id, cells.join(" | "));
    }
    let means: Vec<String> = per_column
        .iter()
        .map(|v| geomean(v).map_or("—".into(), |g| format!("{g:.2}")))
        .collect();
    let _ = writeln!(out, "| **geometric mean** | {} |", means.join(" | "));
    let _ = writeln!(out);
}

/// Errors, skipped modes and wrong answers, so none hides in the tables.
fn problems(out: &mut String, results: &BenchResults) {
    let bad: Vec<&QueryResult> = results
        .results
        .iter()
        .filter(|r| r.status != "ok" || r.matches_reference == Some(false))
        .collect();
    let _ = writeln!(out, "## Correctness and failures\n");
    let compared = results.results.iter().filter(|r| r.matches_reference.is_some()).count();
    let _ = writeln!(
        out,
        "{compared} results compared with plain DataFusion on the local files; {} differ or failed.\n",
        bad.len()
    );
    for r in bad {
        let what = match (&r.error, r.matches_reference) {
            (Some(e), _) => e.clone(),
            (None, Some(false)) => "rows differ from plain DataFusion".into(),
            _ => r.status.clone(),
        };
        let _ = writeln!(
            out,
            "- {} / {}: {}: {}",
            r.mode,
            r.query,
            r.status,
            what.replace('\n', " ")
        );
    }
    let _ = writeln!(out);
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// 1.2 MiB, 340 KiB, 12 B.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// The lookup benchmark's report.
pub fn render_lookup(results: &crate::results::LookupResults, plots: &[String]) -> String {
    let mut out = String::new();
    let c = &results.config;
    let _ = writeln!(out, "# lookup — {}\n", results.name);
    let _ = writeln!(
        out,
        "`{}` with random ids; {} clients in a closed loop, {} s per mode after {} warm-up lookups per client. \
         Data: {} ({:.1} MiB Parquet). Object store throttled to {} ms per request and {} MB/s. Build: {}; {} cores.\n",
        c.sql,
        c.clients,
        c.seconds,
        c.warmup_lookups,
        results.data.description,
        mib(results.data.parquet_bytes),
        c.store_latency_ms,
        c.store_mbps,
        results.machine.build,
        results.machine.cores
    );
    let _ = writeln!(out, "{}\n", link_sentence(c.link.as_ref()));
    let _ = writeln!(
        out,
        "| mode | lookups | wrong | p50 ms | p90 ms | p99 ms | max ms | lookups/s | server CPU ms/lookup | client CPU ms/lookup | link bytes/lookup |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &results.results {
        if r.status != "ok" {
            let _ = writeln!(
                out,
                "| {} | {}: {} | | | | | | | | | |",
                r.mode,
                r.status,
                r.error.as_deref().unwrap_or("").replace('|', "/")
            );
            continue;
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.0} | {} | {:.3} | {} |",
            r.mode,
            r.lookups,
            r.wrong_answers,
            r.p50_ms,
            r.p90_ms,
            r.p99_ms,
            r.max_ms,
            r.lookups_per_s,
            r.server_cpu_s_per_lookup
                .map_or("—".into(), |s| format!("{:.3}", s * 1e3)),
            r.client_cpu_s_per_lookup * 1e3,
            r.link_bytes
                .map_or("—".into(), |b| format!("{:.0}", b as f64 / r.lookups.max(1) as f64))
        );
    }
    let _ = writeln!(out);
    if !plots.is_empty() {
        let _ = writeln!(out, "## Plots\n");
        for p in plots {
            let _ = writeln!(out, "- [{p}]({p})");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_picks_a_unit() {
        assert_eq!(human_bytes(12), "12 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(5 << 20), "5.0 MiB");
    }
}
