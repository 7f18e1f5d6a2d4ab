//! When the server first saw each client query: the start of all its scans.
//!
//! Silt's client runs one query as several pushed scans (one per table,
//! often one after another: a join's build side, then its probe side).
//! Under `validation = "always"` each scan must see versions validated
//! after *the query* started, not after the scan did. So every scan of a
//! client query carries the query's id ([`silt_proto::QueryContext`]); the
//! first one to arrive fixes the query's start here and starts a validation
//! of every table the query reads ([`crate::engine::Engine::prevalidate`]),
//! and every later scan of it is gated from that instant
//! ([`silt_cache::ValidationGate::starting_at`]): it joins validations
//! already answered instead of sending its own and waiting a round trip.
//!
//! A client cannot stretch "started" into the past: the instant is the
//! server's own first sighting, and it is forgotten after [`QUERY_TTL`]
//! (a scan of the query after that starts a fresh one), and the map is
//! bounded ([`MAX_QUERIES`]) against a client that makes up ids.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a query's start is remembered.
pub const QUERY_TTL: Duration = Duration::from_secs(30);
/// Queries remembered at most; beyond, the oldest are forgotten.
pub const MAX_QUERIES: usize = 16_384;

/// First sightings of client queries (see the module docs).
#[derive(Debug, Default)]
pub struct QueryClock {
    seen: Mutex<HashMap<String, Instant>>,
}

impl QueryClock {
    /// When query `id` started, and whether this call is the first sighting.
    pub fn started(&self, id: &str) -> (Instant, bool) {
        let now = Instant::now();
        let mut seen = self.seen.lock();
        if let Some(&at) = seen.get(id)
            && now.duration_since(at) < QUERY_TTL
        {
            return (at, false);
        }
        if seen.len() >= MAX_QUERIES {
            seen.retain(|_, at| now.duration_since(*at) < QUERY_TTL);
            if seen.len() >= MAX_QUERIES {
                // Ids made up faster than they expire: forget them all.
                seen.clear();
            }
        }
        seen.insert(id.to_string(), now);
        (now, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_starts_when_first_seen() {
        let clock = QueryClock::default();
        let (a, first) = clock.started("q");
        assert!(first);
        std::thread::sleep(Duration::from_millis(2));
        let (b, again) = clock.started("q");
        assert!(!again);
        assert_eq!(a, b);
        let (c, other) = clock.started("r");
        assert!(other && c > a);
    }

    #[test]
    fn made_up_ids_do_not_grow_it_without_bound() {
        let clock = QueryClock::default();
        for i in 0..MAX_QUERIES + 10 {
            clock.started(&i.to_string());
        }
        assert!(clock.seen.lock().len() <= MAX_QUERIES);
    }
}
