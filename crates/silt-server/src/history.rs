//! A small ring of counter samples, so the dashboard can draw the last hour
//! (hit ratios, bytes fetched and sent) without a time-series database.
//!
//! A task started with the server ([`crate::stats::spawn_sampler`]) takes a
//! [`Sample`] of cumulative counters every [`INTERVAL`] (the first at
//! start-up) and keeps the last [`KEEP`]: an hour. This module only keeps
//! them: it knows nothing of the engine they come from. Ratios per interval are the page's business (deltas of consecutive
//! samples), so a sample is only numbers the server already keeps.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;

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
