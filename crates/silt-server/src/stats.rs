//! Server statistics as JSON (the `silt.stats` Flight action and `/stats`).

use serde_json::{Value, json};

use crate::engine::Engine;

/// Every metric, the page cache's size against its budget, and the catalog.
pub fn stats_json(engine: &Engine) -> Value {
    let metrics: serde_json::Map<String, Value> = engine
        .metrics()
        .snapshot()
        .into_iter()
        .map(|(k, v)| (k, json!(v)))
        .collect();
    let tables: serde_json::Map<String, Value> = engine
        .catalog()
        .into_iter()
        .map(|(name, e)| (name, json!({"type": e.type_name(), "unavailable": e.unavailable})))
        .collect();
    json!({
        "metrics": metrics,
        "page_cache": {
            "bytes": engine.page_cache_bytes(),
            "budget": engine.config().memory_budget,
            "page_size": engine.config().page_size,
        },
        "tables": tables,
    })
}
