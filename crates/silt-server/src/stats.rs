//! Server statistics as JSON (the `silt.stats` Flight action, `/stats`, and
//! `silt stats`).
//!
//! Tier figures come from the same counters `/metrics` renders, so the two
//! never disagree; sizes come from the tiers themselves.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use crate::engine::Engine;

/// Every metric, each tier's use against its budget, per-table hit ratios,
/// and the catalog.
pub fn stats_json(engine: &Engine) -> Value {
    let snapshot = engine.metrics().snapshot();
    let metrics: serde_json::Map<String, Value> = snapshot.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    let catalog: serde_json::Map<String, Value> = engine
        .catalog()
        .into_iter()
        .map(|(name, e)| (name, json!({"type": e.type_name(), "unavailable": e.unavailable})))
        .collect();
    json!({
        "metrics": metrics,
        "tiers": tiers_json(engine, &snapshot),
        "tables": tables_json(engine),
        "catalog": catalog,
    })
}

fn counter(snapshot: &BTreeMap<String, f64>, name: &str, tier: &str) -> u64 {
    snapshot
        .get(&format!("{name}{{tier=\"{tier}\"}}"))
        .copied()
        .unwrap_or(0.0) as u64
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
            let served = hits + batch_hits;
            let ratio = if served + misses == 0 {
                Value::Null
            } else {
                json!(served as f64 / (served + misses) as f64)
            };
            (
                name,
                json!({
                    "memory_hits": batch_hits,
                    "memory_misses": batch_misses,
                    "page_hits": hits,
                    "page_misses": misses,
                    "hit_ratio": ratio,
                }),
            )
        })
        .collect();
    Value::Object(tables)
}
