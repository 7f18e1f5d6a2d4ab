//! Draining: how a server stops without failing what runs.
//!
//! `silt serve` drains on SIGTERM (and on a first Ctrl-C): [`Drain::begin`]
//! makes the server refuse new queries with `UNAVAILABLE` ("draining"), the
//! code every Silt client treats as a member that is down, so a fleet
//! client sends the row groups to their next owners and comes back once its
//! backoff ends and the member answers again; `/health` answers 503 with
//! `"status": "draining"`. What already runs finishes: every running
//! request holds a [`Running`] guard until its answer stream ends, and the
//! server stops when none is left or the drain timeout passes
//! ([`crate::ServerHandle::drain`]).
//!
//! "What runs" includes the later requests of a client query that started
//! before the drain: a join's scans arrive as separate requests, and a
//! hybrid scan asks for a layout, then for scoped scans. Requests carry
//! their client query's id ([`silt_proto::QueryContext`]); ids seen before
//! the drain began are still admitted during it. A statement whose plan its
//! `GetFlightInfo` kept before the drain is admitted at its `DoGet` too.
//! Requests without an id (SQL from generic Flight SQL clients, S3 reads)
//! are new queries.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::error::ServerError;

/// Client query ids remembered at most; past that, those not seen for
/// [`FORGET_AFTER`] are forgotten.
const MAX_REMEMBERED: usize = 16_384;

/// How long a client query id is remembered since its last request.
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// The server's drain state and its running requests.
#[derive(Debug, Default)]
pub struct Drain {
    draining: AtomicBool,
    running: AtomicUsize,
    /// Signalled whenever a running request ends.
    ended: Notify,
    /// Client query ids with the last time a request of theirs was admitted.
    seen: Mutex<HashMap<String, Instant>>,
}

impl Drain {
    pub fn new() -> Arc<Self> {
        Arc::new(Drain::default())
    }

    /// Whether the server is draining (new queries refused).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Refuse new queries from now on.
    pub fn begin(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Requests running now (their answers not yet ended).
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Whether a request may start: always while serving; while draining,
    /// only one of a client query `query_id` seen before the drain, or one
    /// that `continues` a query started before it (a kept plan's `DoGet`).
    pub fn check(&self, query_id: Option<&str>, continues: bool) -> Result<(), ServerError> {
        let query_id = query_id.filter(|id| !id.is_empty());
        if !self.is_draining() {
            if let Some(id) = query_id {
                self.remember(id);
            }
            return Ok(());
        }
        if continues || query_id.is_some_and(|id| self.seen.lock().contains_key(id)) {
            return Ok(());
        }
        Err(ServerError::Draining)
    }

    /// [`Drain::check`], and the request counted as running until the
    /// returned guard is dropped (with its answer stream).
    pub fn admit(self: &Arc<Self>, query_id: Option<&str>, continues: bool) -> Result<Running, ServerError> {
        self.check(query_id, continues)?;
        self.running.fetch_add(1, Ordering::SeqCst);
        Ok(Running(self.clone()))
    }

    fn remember(&self, id: &str) {
        let now = Instant::now();
        let mut seen = self.seen.lock();
        if seen.len() >= MAX_REMEMBERED && !seen.contains_key(id) {
            seen.retain(|_, at| now.duration_since(*at) < FORGET_AFTER);
        }
        seen.insert(id.to_string(), now);
    }

    /// Waits until no request runs or `timeout` passes; whether none runs.
    pub async fn until_idle(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before the check, so an end between the two is not missed.
            ended.as_mut().enable();
            if self.running() == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return self.running() == 0;
            }
        }
    }
}

/// One running request; it ends when this is dropped.
#[derive(Debug)]
pub struct Running(Arc<Drain>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
        self.0.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_drain_refuses_new_queries_admits_started_ones_and_waits_for_the_running() {
        let drain = Drain::new();
        let before = drain.admit(Some("q1"), false).unwrap();
        drain.check(None, false).unwrap();
        drain.begin();
        assert!(matches!(drain.check(None, false), Err(ServerError::Draining)));
        assert!(matches!(drain.check(Some("q2"), false), Err(ServerError::Draining)));
        // Empty ids are no ids.
        assert!(matches!(drain.check(Some(""), false), Err(ServerError::Draining)));
        let later_scan = drain.admit(Some("q1"), false).unwrap();
        drain.check(None, true).unwrap();
        assert_eq!(drain.running(), 2);
        assert!(!drain.until_idle(Duration::from_millis(20)).await);
        drop(before);
        let waiting = tokio::spawn({
            let drain = drain.clone();
            async move { drain.until_idle(Duration::from_secs(30)).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        drop(later_scan);
        assert!(waiting.await.unwrap());
        assert_eq!(drain.running(), 0);
    }
}
