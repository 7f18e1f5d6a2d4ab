//! Decodes in flight: when several scans miss the same column chunk at once,
//! one decodes it into the memory tier and the others wait for it (the
//! `Loading` state of [`crate::SegmentState`]), as [`crate::PageStore`]
//! does for the bytes below. The decoder hands its batches to the waiters
//! ([`DecodeGuard::publish`]): the memory tier may not have admitted them
//! (a first read while the transcoder is behind admits nothing), and a
//! waiter that found them nowhere would decode the chunk again.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::column_cache::CachedColumn;
use crate::key::ObjectKey;

/// One column chunk of the memory tier: (object version, row group, table column).
pub type ChunkId = (ObjectKey, u32, u32);

/// What a decode hands its waiters: its batches, or nothing (it failed or
/// was cancelled).
type Published = Option<Arc<Vec<CachedColumn>>>;

type Chunks = Arc<Mutex<HashMap<ChunkId, watch::Receiver<Published>>>>;

/// What [`DecodeFlights::claim`] gives.
pub enum DecodeClaim {
    /// Nobody is decoding the chunk: decode it, admit its batches, then
    /// [`publish`](DecodeGuard::publish) them (or drop the guard on failure):
    /// either wakes the waiters.
    Decode(DecodeGuard),
    /// Another scan is decoding it: [`wait`](DecodeFlights::wait) for its
    /// batches (and decode only if it gives none: the decoder failed or was
    /// cancelled).
    Wait(watch::Receiver<Published>),
}

/// The right to decode one chunk. Dropped (done, failed or cancelled), it
/// forgets the claim and wakes every waiter.
pub struct DecodeGuard {
    id: ChunkId,
    tx: watch::Sender<Published>,
    chunks: Chunks,
}

impl DecodeGuard {
    /// Hands the decoded `batches` to every waiter, and ends the claim.
    pub fn publish(self, batches: &[CachedColumn]) {
        self.tx.send_replace(Some(Arc::new(batches.to_vec())));
    }
}

impl Drop for DecodeGuard {
    fn drop(&mut self) {
        let mut chunks = self.chunks.lock();
        if chunks
            .get(&self.id)
            .is_some_and(|rx| rx.same_channel(&self.tx.subscribe()))
        {
            chunks.remove(&self.id);
        }
        // Dropping `tx` after this wakes the waiters (their `changed()` ends).
    }
}

/// Column chunks being decoded right now, shared by every scan of a server.
#[derive(Default)]
pub struct DecodeFlights {
    chunks: Chunks,
    decoded: AtomicU64,
    waited: AtomicU64,
}

impl DecodeFlights {
    /// Claims `id`: the first caller decodes, later ones wait.
    pub fn claim(&self, id: ChunkId) -> DecodeClaim {
        let mut chunks = self.chunks.lock();
        if let Some(rx) = chunks.get(&id)
            && rx.has_changed().is_ok()
        {
            self.waited.fetch_add(1, Ordering::Relaxed);
            return DecodeClaim::Wait(rx.clone());
        }
        let (tx, rx) = watch::channel(None);
        chunks.insert(id.clone(), rx);
        self.decoded.fetch_add(1, Ordering::Relaxed);
        DecodeClaim::Decode(DecodeGuard {
            id,
            tx,
            chunks: self.chunks.clone(),
        })
    }

    /// Waits until the decode behind `rx` ended; its batches if it
    /// published them.
    pub async fn wait(mut rx: watch::Receiver<Published>) -> Option<Vec<CachedColumn>> {
        while rx.changed().await.is_ok() {}
        rx.borrow().as_ref().map(|batches| batches.to_vec())
    }

    /// (chunk decodes claimed, waits on another scan's decode) since start.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.decoded.load(Ordering::Relaxed),
            self.waited.load(Ordering::Relaxed),
        )
    }

    /// Chunks being decoded now.
    pub fn in_flight(&self) -> usize {
        self.chunks.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_second_claim_waits_until_the_first_is_dropped() {
        let flights = DecodeFlights::default();
        let id: ChunkId = (ObjectKey::new("t0", "a.parquet", "v1"), 0, 3);
        let DecodeClaim::Decode(guard) = flights.claim(id.clone()) else {
            panic!("first claim must decode")
        };
        let DecodeClaim::Wait(rx) = flights.claim(id.clone()) else {
            panic!("second claim must wait")
        };
        let waiter = tokio::spawn(DecodeFlights::wait(rx));
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(guard);
        assert!(waiter.await.unwrap().is_none(), "a dropped decode publishes nothing");
        assert_eq!((flights.counts(), flights.in_flight()), ((1, 1), 0));
        assert!(matches!(flights.claim(id), DecodeClaim::Decode(_)));
    }

    #[tokio::test]
    async fn waiters_get_the_published_batches() {
        use arrow::array::{ArrayRef, Int32Array};
        let flights = DecodeFlights::default();
        let id: ChunkId = (ObjectKey::new("t0", "a.parquet", "v1"), 0, 3);
        let DecodeClaim::Decode(guard) = flights.claim(id.clone()) else {
            panic!("first claim must decode")
        };
        let waiters: Vec<_> = (0..2)
            .map(|_| match flights.claim(id.clone()) {
                DecodeClaim::Wait(rx) => tokio::spawn(DecodeFlights::wait(rx)),
                DecodeClaim::Decode(_) => panic!("later claims must wait"),
            })
            .collect();
        let array: ArrayRef = Arc::new(Int32Array::from(vec![1, 2, 3]));
        guard.publish(&[CachedColumn::Arrow(array.clone())]);
        for waiter in waiters {
            let got = waiter.await.unwrap().expect("published");
            assert!(matches!(&got[..], [CachedColumn::Arrow(a)] if a == &array));
        }
        assert_eq!(flights.in_flight(), 0);
    }
}
