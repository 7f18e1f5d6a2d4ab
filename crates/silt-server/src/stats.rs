//! Server statistics as JSON (the `silt.stats` Flight action, `/stats`, and
//! `silt stats`).
//!
//! Tier figures come from the same counters `/metrics` renders, so the two
//! never disagree; sizes come from the tiers themselves. The dashboard's
//! history samples the same counters ([`spawn_sampler`] fills
//! [`crate::history::History`]).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use silt_cache::hit_ratio;

use crate::engine::Engine;
use crate::history::{INTERVAL, Sample, TIERS};

/// Every metric, each tier's use against its budget, per-table hit ratios,
/// and the catalog.
pub fn stats_json(engine: &Engine) -> Value {
    let snapshot = engine.metrics().snapshot();
    let metrics: serde_json::Map<String, Value> = snapshot.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    let catalog: serde_json::Map<String, Value> = engine
        .catalog()
        .into_iter()
        .map(|(name, e)| {
            (
                name,
                json!({"type": e.type_name(), "unavailable": e.unavailable.as_ref().map(ToString::to_string)}),
            )
        })
        .collect();
    let get = |series: &str| value(&snapshot, series);
    let s3_sent = get("silt_s3_bytes_sent_total");
    let would_read = chunk_bytes(engine) + s3_sent;
    let sent = get("silt_flight_bytes_sent_total") + s3_sent;
    json!({
        "state": if engine.drain().is_draining() { "draining" } else { "serving" },
        "metrics": metrics,
        "tiers": tiers_json(engine, &snapshot),
        "tables": tables_json(engine),
        "catalog": catalog,
        "bytes_saved": {
            "would_read": would_read,
            "sent": sent,
            "saved": would_read.saturating_sub(sent),
        },
        "store": store_json(&snapshot),
        "queries": queries_json(engine),
        "plan_aware": plan_aware_json(engine),
        "history": {
            "interval_seconds": INTERVAL.as_secs(),
            "samples": engine.history().samples(),
        },
    })
}

/// What the squeeze tier did (`null` when chunks are not squeezed), and
/// whether it is still recovering an earlier run's chunks.
fn squeezed_json(squeezed: Option<&std::sync::Arc<silt_cache::Squeezed>>) -> Value {
    let Some(squeezed) = squeezed else {
        return Value::Null;
    };
    let s = squeezed.stats();
    json!({
        "recovering": !squeezed.recovery_done(),
        "squeezed_chunks": s.squeezed_chunks,
        "squeezed_bytes": s.squeezed_bytes,
        "squeezed_parts": s.squeezed_parts,
        "squeezed_part_bytes": s.squeezed_part_bytes,
        "dropped_chunks": s.dropped_chunks,
        "written_here_chunks": s.written_here_chunks,
        "restored_chunks": s.restored_chunks,
        "restored_bytes": s.restored_bytes,
        "unreadable_chunks": s.unreadable_chunks,
        "pending_bytes": s.pending_bytes,
        "disk_bytes": s.disk_bytes,
    })
}

/// Scan sets and decodes in flight: what planned queries hold (all zero
/// when no query is planned or running).
fn plan_aware_json(engine: &Engine) -> Value {
    let tiers = engine.tiers();
    let sets = tiers.scan_sets();
    let (chunks, pages) = sets.reserved_entries();
    let (decoded, waited) = tiers.batches().decodes().counts();
    json!({
        "enabled": engine.config().plan_aware,
        "horizon": engine.config().plan_horizon.as_str(),
        "memory_policy": tiers.batches().policy_name(),
        "scan_sets_active": sets.active_sets(),
        "reserved_chunks": chunks,
        "reserved_pages": pages,
        "decodes_in_flight": tiers.batches().decodes().in_flight(),
        "chunk_decodes": decoded,
        "decode_waits": waited,
        "query_slots_free": engine.query_slots().available(),
    })
}

/// Object-store request latency in milliseconds, from the summary
/// `silt_object_store_request_seconds`.
pub struct StoreLatency {
    pub count: u64,
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl StoreLatency {
    pub fn from_snapshot(snapshot: &BTreeMap<String, f64>) -> Self {
        let ms = |series: &str| snapshot.get(series).map(|s| s * 1e3);
        // The summary's quantiles cover a recent window and read 0 when it
        // holds no request: no request takes 0 ms, so 0 is "none lately".
        let quantile =
            |q: &str| ms(&format!("silt_object_store_request_seconds{{quantile=\"{q}\"}}")).filter(|v| *v > 0.0);
        let count = value(snapshot, "silt_object_store_request_seconds_count");
        let mean = (count > 0)
            .then(|| ms("silt_object_store_request_seconds_sum").map(|sum| sum / count as f64))
            .flatten();
        StoreLatency {
            count,
            mean,
            p50: quantile("0.5"),
            p99: quantile("0.99"),
            max: quantile("1"),
        }
    }
}

/// Object-store requests, bytes, failures and request latency.
fn store_json(snapshot: &BTreeMap<String, f64>) -> Value {
    let get = |series: &str| value(snapshot, series);
    let latency = StoreLatency::from_snapshot(snapshot);
    json!({
        "get_requests": get("silt_object_store_get_requests_total"),
        "get_bytes": get("silt_object_store_get_bytes_total"),
        "head_requests": get("silt_object_store_head_requests_total"),
        "list_requests": get("silt_object_store_list_requests_total"),
        "errors": get("silt_object_store_errors_total"),
        "retries": get("silt_object_store_retries_total"),
        "failed_requests": get("silt_object_store_failed_requests_total"),
        "latency_ms": {
            "count": latency.count,
            "mean": latency.mean,
            "p50": latency.p50,
            "p99": latency.p99,
            "max": latency.max,
        },
    })
}

/// Slowest finished queries shown.
const SLOW_QUERIES: usize = 20;

/// The queries running now and the slowest of the last hour.
fn queries_json(engine: &Engine) -> Value {
    use crate::query::log::unix_ms;
    use crate::query::stage::Stage;
    let log = &engine.metrics().query_log;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let running: Vec<Value> = log
        .running()
        .into_iter()
        .map(|q| {
            json!({
                "id": q.id.to_string(),
                "kind": q.kind,
                "text": q.text.as_ref(),
                "started_ms": unix_ms(q.started),
                "elapsed_ms": ms(q.elapsed),
            })
        })
        .collect();
    let slow: Vec<Value> = log
        .slowest(SLOW_QUERIES)
        .into_iter()
        .map(|q| {
            let stages: serde_json::Map<String, Value> = Stage::ALL
                .iter()
                .map(|&s| (s.name().to_string(), json!(ms(q.stage(s)))))
                .collect();
            json!({
                "id": q.id.to_string(),
                "kind": q.kind,
                "text": q.text.as_ref(),
                "started_ms": unix_ms(q.started),
                "total_ms": ms(q.total),
                "stages_ms": stages,
                "rows": q.rows,
                "bytes": q.bytes,
                "error": q.error,
            })
        })
        .collect();
    json!({"running": running, "slow": slow})
}

/// The value of `series` (as rendered: `name` or `name{label="v"}`) in a
/// metrics snapshot, 0 when absent.
pub(crate) fn value(snapshot: &BTreeMap<String, f64>, series: &str) -> u64 {
    snapshot.get(series).copied().unwrap_or(0.0) as u64
}

/// The value of `name{tier="<tier>"}`.
pub(crate) fn counter(snapshot: &BTreeMap<String, f64>, name: &str, tier: &str) -> u64 {
    value(snapshot, &format!("{name}{{tier=\"{tier}\"}}"))
}

fn tier_json(snapshot: &BTreeMap<String, f64>, tier: &str, used: u64, budget: u64) -> Value {
    json!({
        "hits": counter(snapshot, "silt_cache_hits_total", tier),
        "misses": counter(snapshot, "silt_cache_misses_total", tier),
        "evictions": counter(snapshot, "silt_cache_evictions_total", tier),
        "bytes": used,
        "budget": budget,
    })
}

/// Per tier: hits, misses, evictions, bytes used and budget.
fn tiers_json(engine: &Engine, snapshot: &BTreeMap<String, f64>) -> Value {
    let config = engine.config();
    let cache = engine.tiers();
    let mut tiers = serde_json::Map::new();
    tiers.insert(
        "metadata".into(),
        tier_json(
            snapshot,
            "metadata",
            engine.metadata_tier().used_bytes() as u64,
            config.metadata_budget,
        ),
    );
    let mut memory = tier_json(
        snapshot,
        "memory",
        cache.batches().weighted_size(),
        config.memory_budget,
    );
    memory["form"] = json!(format!("{:?}", cache.batches().form()).to_lowercase());
    memory["transcode_backlog"] = json!(cache.batches().transcode_backlog());
    memory["squeezed"] = squeezed_json(cache.batches().squeezed());
    let usage = cache.batches().usage_by_column();
    let mut forms = serde_json::Map::new();
    for form in ["arrow", "liquid"] {
        let (bytes, arrow_bytes) = usage
            .iter()
            .filter(|u| u.form == form)
            .fold((0, 0), |(b, a), u| (b + u.bytes, a + u.arrow_bytes));
        forms.insert(form.into(), form_json(bytes, arrow_bytes));
    }
    memory["forms"] = Value::Object(forms);
    let table_of: BTreeMap<Arc<str>, String> = engine
        .table_stores()
        .into_iter()
        .map(|(name, store)| (store.store_id().clone(), name))
        .collect();
    memory["columns"] = usage
        .iter()
        .map(|u| {
            let mut c = form_json(u.bytes, u.arrow_bytes);
            c["table"] = json!(table_of.get(&u.store));
            c["column"] = json!(
                u.name
                    .as_deref()
                    .map_or_else(|| format!("#{}", u.column), str::to_string)
            );
            c["form"] = json!(u.form);
            c["batches"] = json!(u.batches);
            c
        })
        .collect();
    tiers.insert("memory".into(), memory);
    tiers.insert(
        "pages".into(),
        tier_json(
            snapshot,
            "pages",
            cache.pages().memory().weighted_size(),
            config.page_memory_budget,
        ),
    );
    if let Some(disk) = engine.disk_tier() {
        let d = disk.stats();
        let mut t = tier_json(snapshot, "disk", d.used_bytes, d.budget_bytes);
        t["pages"] = json!(d.pages);
        t["corrupt_pages"] = json!(d.corrupt_pages);
        t["recovered_pages"] = json!(d.recovered_pages);
        t["read_requests"] = json!(d.read_requests);
        t["recovering"] = json!(!disk.recovery_done());
        tiers.insert("disk".into(), t);
    }
    Value::Object(tiers)
}

/// Per table: memory-tier (column batch) and page lookups, and the hit
/// ratio: the share of lookups a tier answered without the object store
/// (a memory miss is followed by page lookups, so it is not counted twice).
/// Bytes held, what they take as Arrow, and the ratio of the two.
fn form_json(bytes: u64, arrow_bytes: u64) -> Value {
    let ratio = if bytes == 0 {
        Value::Null
    } else {
        json!(arrow_bytes as f64 / bytes as f64)
    };
    json!({"bytes": bytes, "arrow_bytes": arrow_bytes, "compression": ratio})
}

fn tables_json(engine: &Engine) -> Value {
    let tables: serde_json::Map<String, Value> = engine
        .table_stores()
        .into_iter()
        .map(|(name, store)| {
            let c = store.counters();
            let hits = c.hits.load(Ordering::Relaxed);
            let misses = c.misses.load(Ordering::Relaxed);
            let batch_hits = c.batch_hits.load(Ordering::Relaxed);
            let batch_misses = c.batch_misses.load(Ordering::Relaxed);
            let (served, fetched) = c.lookups();
            let ratio = hit_ratio(served, fetched);
            let columns: serde_json::Map<String, Value> = c
                .columns()
                .into_iter()
                .map(|(column, n)| {
                    let ratio = hit_ratio(n.hits, n.misses);
                    (
                        column.to_string(),
                        json!({"hits": n.hits, "misses": n.misses, "hit_ratio": ratio}),
                    )
                })
                .collect();
            (
                name,
                json!({
                    "memory_hits": batch_hits,
                    "memory_misses": batch_misses,
                    "page_hits": hits,
                    "page_misses": misses,
                    "hit_ratio": ratio,
                    "column_chunk_bytes": c.chunk_bytes.load(Ordering::Relaxed),
                    "parquet_decodes": c.parquet_decodes.load(Ordering::Relaxed),
                    "columns": columns,
                }),
            )
        })
        .collect();
    Value::Object(tables)
}

/// The counters of `engine` now.
pub fn take_sample(engine: &Engine) -> Sample {
    let snapshot = engine.metrics().snapshot();
    let get = |series: &str| value(&snapshot, series);
    let per_tier = |name: &str| {
        TIERS
            .iter()
            .map(|&tier| (tier, counter(&snapshot, name, tier)))
            .collect()
    };
    Sample {
        t: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs(),
        hits: per_tier("silt_cache_hits_total"),
        misses: per_tier("silt_cache_misses_total"),
        store_get_requests: get("silt_object_store_get_requests_total"),
        store_get_bytes: get("silt_object_store_get_bytes_total"),
        flight_bytes_sent: get("silt_flight_bytes_sent_total"),
        s3_bytes_sent: get("silt_s3_bytes_sent_total"),
        column_chunk_bytes: chunk_bytes(engine),
        queries: get("silt_queries_total"),
    }
}

/// Samples `engine` every [`INTERVAL`] until it is dropped. The sample is
/// taken on a blocking thread: it renders every metric and walks the
/// per-table counters, which is no work for an async worker.
pub fn spawn_sampler(engine: &Arc<Engine>) -> tokio::task::JoinHandle<()> {
    let weak: Weak<Engine> = Arc::downgrade(engine);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(INTERVAL);
        loop {
            tick.tick().await;
            let Some(engine) = weak.upgrade() else {
                return;
            };
            let sampled = engine.off_worker(|e| e.history().push(take_sample(e))).await;
            if sampled.is_err() {
                return;
            }
        }
    })
}

/// Compressed column-chunk bytes the scans of all tables read.
pub fn chunk_bytes(engine: &Engine) -> u64 {
    engine
        .table_stores()
        .values()
        .map(|s| s.counters().chunk_bytes.load(Ordering::Relaxed))
        .sum()
}
