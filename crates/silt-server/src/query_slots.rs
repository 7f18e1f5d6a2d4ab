//! Admission: at most `max_concurrent_queries` queries execute at once; the
//! rest wait for a slot (`silt_queries_queued`).
//!
//! A query registers its scan set when it is planned, before it waits here
//! (`silt_scan::scan_set`), so what a queued query will read is already
//! protected from eviction. The scans of one client query (one
//! `QueryContext.id`: a join's scans arrive as separate `DoGet`s) share one
//! slot while any of them runs: a join whose probe scan waited for a slot
//! held by other joins' probe scans, each waiting for its own build side,
//! could otherwise never finish.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use metrics::Gauge;
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One running query's right to execute; released when dropped (its
/// stream ended, failed or was dropped).
#[derive(Debug)]
pub struct Slot(#[allow(dead_code)] OwnedSemaphorePermit);

/// The slots of one server.
pub struct QuerySlots {
    /// `None`: unbounded.
    slots: Option<Arc<Semaphore>>,
    /// Slots held per client query id.
    by_query: Mutex<HashMap<String, Weak<Slot>>>,
    queued: Gauge,
}

impl QuerySlots {
    /// `max` queries at once; 0 admits every query at once.
    pub fn new(max: usize, queued: Gauge) -> Self {
        QuerySlots {
            slots: (max > 0).then(|| Arc::new(Semaphore::new(max))),
            by_query: Mutex::new(HashMap::new()),
            queued,
        }
    }

    /// Waits for a slot (or joins the one a scan of the same client query
    /// `query_id` holds). `None` when admission is unbounded.
    pub async fn acquire(&self, query_id: Option<&str>) -> Option<Arc<Slot>> {
        let slots = self.slots.as_ref()?;
        if let Some(held) = query_id.and_then(|id| self.by_query.lock().get(id).and_then(Weak::upgrade)) {
            return Some(held);
        }
        self.queued.increment(1.0);
        let permit = slots.clone().acquire_owned().await;
        self.queued.decrement(1.0);
        let slot = Arc::new(Slot(permit.ok()?));
        if let Some(id) = query_id {
            let mut by_query = self.by_query.lock();
            by_query.retain(|_, slot| slot.strong_count() > 0);
            by_query.insert(id.to_string(), Arc::downgrade(&slot));
        }
        Some(slot)
    }

    /// Slots free now (`None`: unbounded).
    pub fn available(&self) -> Option<usize> {
        self.slots.as_ref().map(|s| s.available_permits())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn queries_queue_for_slots_and_scans_of_one_query_share_one() {
        let slots = QuerySlots::new(1, Gauge::noop());
        let a = slots.acquire(Some("q1")).await.unwrap();
        let a2 = slots.acquire(Some("q1")).await.unwrap();
        assert!(Arc::ptr_eq(&a, &a2));
        assert_eq!(slots.available(), Some(0));
        let waiting = tokio::spawn(async move {
            let slots = slots;
            let b = slots.acquire(Some("q2")).await;
            (b.is_some(), slots.available())
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop((a, a2));
        assert_eq!(waiting.await.unwrap(), (true, Some(0)));
        assert!(QuerySlots::new(0, Gauge::noop()).acquire(None).await.is_none());
    }
}
