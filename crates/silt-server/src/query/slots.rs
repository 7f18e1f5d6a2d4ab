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

/// The slot of one client query: held (weakly) once granted; its lock is
/// held while a scan of the query waits for the grant, so the query's other
/// scans wait for that one grant instead of queueing for slots of their own.
type QuerySlot = Arc<tokio::sync::Mutex<Weak<Slot>>>;

/// The slots of one server.
pub struct QuerySlots {
    /// `None`: unbounded.
    slots: Option<Arc<Semaphore>>,
    /// The slot per client query id.
    by_query: Mutex<HashMap<String, QuerySlot>>,
    queued: Gauge,
}

/// Counts one waiter in `silt_queries_queued` for as long as it lives (a
/// wait abandoned by a timeout or a client leaving is uncounted too).
struct Queued<'a>(&'a Gauge);

impl<'a> Queued<'a> {
    fn new(gauge: &'a Gauge) -> Self {
        gauge.increment(1.0);
        Queued(gauge)
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
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
        let Some(id) = query_id else {
            return self.grant(slots).await;
        };
        let shared: QuerySlot = {
            let mut by_query = self.by_query.lock();
            // Forget queries whose slot is gone and that no scan is waiting for.
            by_query.retain(|_, s| Arc::strong_count(s) > 1 || s.try_lock().is_ok_and(|w| w.strong_count() > 0));
            by_query.entry(id.to_string()).or_default().clone()
        };
        let mut held = shared.lock().await;
        if let Some(slot) = held.upgrade() {
            return Some(slot);
        }
        let slot = self.grant(slots).await?;
        *held = Arc::downgrade(&slot);
        Some(slot)
    }

    /// Waits for a permit of `slots`, counted as queued meanwhile.
    async fn grant(&self, slots: &Arc<Semaphore>) -> Option<Arc<Slot>> {
        let _queued = Queued::new(&self.queued);
        let permit = slots.clone().acquire_owned().await.ok()?;
        Some(Arc::new(Slot(permit)))
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

    /// Two scans of one query that both queue behind another query get the
    /// same slot once it is free (neither waits for a second one).
    #[tokio::test]
    async fn scans_of_one_query_queued_together_share_the_slot_they_get() {
        let slots = Arc::new(QuerySlots::new(1, Gauge::noop()));
        let other = slots.acquire(Some("q2")).await.unwrap();
        let scan = |slots: Arc<QuerySlots>| tokio::spawn(async move { slots.acquire(Some("q1")).await.unwrap() });
        let (probe, build) = (scan(slots.clone()), scan(slots.clone()));
        tokio::task::yield_now().await;
        drop(other);
        let (probe, build) = (probe.await.unwrap(), build.await.unwrap());
        assert!(Arc::ptr_eq(&probe, &build));
        assert_eq!(slots.available(), Some(0));
    }
}
