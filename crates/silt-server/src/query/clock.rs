//! When the server first saw each client query: the start of all its scans.
//!
//! Silt's client runs one query as several pushed scans (one per table,
//! often one after another: a join's build side, then its probe side).
//! Under `validation = "always"` each scan must see versions validated
//! after *the query* started, not after the scan did. So every scan of a
//! client query carries the query's id ([`silt_proto::QueryContext`]); the
//! first one to arrive fixes the query's start here and starts a validation
//! of every table the query reads ([`prevalidate`]),
//! and every later scan of it is gated from that instant
//! ([`silt_cache::ValidationGate::starting_at`]): it joins validations
//! already answered instead of sending its own and waiting a round trip.
//!
//! A client cannot stretch "started" into the past: the instant is the
//! server's own first sighting, and it is forgotten after [`QUERY_TTL`]
//! (a scan of the query after that starts a fresh one), and the map is
//! bounded ([`MAX_QUERIES`]) against a client that makes up ids.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use silt_cache::ValidationGate;
use silt_proto::QueryContext;

use crate::engine::Engine;

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

/// Table names of one query validated at its start, at most (a bound
/// against a hostile list; real queries name a few).
const MAX_PREVALIDATED_NAMES: usize = 64;

impl QueryClock {
    /// When the client query `query` started: its first scan's arrival. On
    /// that first sighting, every table it names (a view: the tables under
    /// it) is validated in the background from that instant, so its later
    /// scans find their validations done.
    pub fn query_started(&self, engine: &Arc<Engine>, query: &QueryContext) -> Instant {
        let (at, first) = self.started(&query.id);
        if first {
            let catalog = engine.catalog();
            let tables: BTreeSet<String> = query
                .tables
                .iter()
                .take(MAX_PREVALIDATED_NAMES)
                .filter_map(|n| catalog.get(n))
                .flat_map(|e| e.tables.iter().cloned())
                .collect();
            let engine = engine.clone();
            tokio::spawn(async move { prevalidate(&engine, tables, at).await });
        }
        at
    }
}

/// Lists `tables` as a query that started at `since` would (so under
/// `always` the LISTs and HEADs sent now confirm that query), dropping the
/// answers: a scan that needs them joins them.
async fn prevalidate(engine: &Engine, tables: BTreeSet<String>, since: Instant) {
    let gate = ValidationGate::starting_at(since);
    let Ok(ctx) = super::plan::query_context(engine, Some(&gate)) else {
        return;
    };
    let state = ctx.state();
    let lists = tables.iter().map(|t| {
        let state = &state;
        async move {
            if let Ok(table) = engine.resolve_table(t, "validations are of").await
                && let Ok(parquet) = table.parquet()
                && let Err(e) = parquet.list_files(state).await
            {
                tracing::debug!(table = %t, error = %e, "validating at a query's start failed; its scan will say why");
            }
        }
    });
    futures::future::join_all(lists).await;
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
