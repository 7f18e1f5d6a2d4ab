//! Decodes in flight: when several scans miss the same column chunk at once,
//! one decodes it into the memory tier and the others wait for it (the
//! `Loading` state of [`crate::SegmentState`]), as [`crate::PageStore`]
//! does for the bytes below.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::key::ObjectKey;

/// One column chunk of the memory tier: (object version, row group, table column).
pub type ChunkId = (ObjectKey, u32, u32);

type Chunks = Arc<Mutex<HashMap<ChunkId, watch::Receiver<()>>>>;

/// What [`DecodeFlights::claim`] gives.
pub enum DecodeClaim {
    /// Nobody is decoding the chunk: decode it, admit its batches, then drop
    /// the guard (which wakes the waiters).
    Decode(DecodeGuard),
    /// Another scan is decoding it: [`wait`](DecodeFlights::wait) for it,
    /// then read the memory tier (and decode only if the batches are not
    /// there: the decoder failed, was cancelled, or they were evicted).
    Wait(watch::Receiver<()>),
}

/// The right to decode one chunk. Dropped (done, failed or cancelled), it
/// forgets the claim and wakes every waiter.
pub struct DecodeGuard {
    id: ChunkId,
    tx: watch::Sender<()>,
    chunks: Chunks,
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
        let (tx, rx) = watch::channel(());
        chunks.insert(id.clone(), rx);
        self.decoded.fetch_add(1, Ordering::Relaxed);
        DecodeClaim::Decode(DecodeGuard {
            id,
            tx,
            chunks: self.chunks.clone(),
        })
    }

    /// Waits until the decode behind `rx` ended (however it ended).
    pub async fn wait(mut rx: watch::Receiver<()>) {
        while rx.changed().await.is_ok() {}
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
        waiter.await.unwrap();
        assert_eq!((flights.counts(), flights.in_flight()), ((1, 1), 0));
        assert!(matches!(flights.claim(id), DecodeClaim::Decode(_)));
    }
}
