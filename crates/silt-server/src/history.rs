//! A small ring of counter samples, so the dashboard can draw the last hour
//! (hit ratios, bytes fetched and sent) without a time-series database.
//!
//! A task started with the server takes a [`Sample`] of cumulative counters
//! every [`INTERVAL`] (the first at start-up) and keeps the last [`KEEP`]: an
//! hour. Ratios per interval are the page's business (deltas of consecutive
//! samples), so a sample is only numbers the server already keeps.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::Serialize;

use crate::engine::Engine;

/// Time between samples.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// Samples kept: one hour.
pub const KEEP: usize = 360;

/// The tiers sampled, in the order of their maps.
pub const TIERS: [&str; 4] = ["metadata", "memory", "pages", "disk"];

/// Cumulative counters at one instant.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Unix seconds.
    pub t: u64,
    /// Per tier, lookups answered and not.
    pub hits: BTreeMap<&'static str, u64>,
    pub misses: BTreeMap<&'static str, u64>,
    pub store_get_requests: u64,
    pub store_get_bytes: u64,
    pub flight_bytes_sent: u64,
    pub s3_bytes_sent: u64,
    /// Compressed bytes of the column chunks scans read (all tables).
    pub column_chunk_bytes: u64,
    pub queries: u64,
}

/// The last hour of samples.
#[derive(Default)]
pub struct History {
    samples: Mutex<VecDeque<Sample>>,
}

impl History {
    /// Adds `sample`, dropping the oldest beyond [`KEEP`].
    pub fn push(&self, sample: Sample) {
        let mut samples = self.samples.lock();
        samples.push_back(sample);
        while samples.len() > KEEP {
            samples.pop_front();
        }
    }

    /// The samples kept, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().iter().cloned().collect()
    }
}

/// The counters of `engine` now.
pub fn take_sample(engine: &Engine) -> Sample {
    use crate::stats::{counter, value};
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
