//! Decodes in flight: when several scans miss the same column chunk at once,
//! one decodes it into the memory tier and the others wait for it (the
//! `Loading` state of [`crate::EntryState`]), as [`crate::PageStore`]
//! does for the bytes below, both on one [`SingleFlight`]. The decoder
//! hands its batches to the waiters ([`DecodeGuard::publish`]): the memory
//! tier may not have admitted them
//! (a first read while the transcoder is behind admits nothing), and a
//! waiter that found them nowhere would decode the chunk again.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use silt_core::single_flight::{Claim, Follower, Leader, SingleFlight};

use crate::{CachedColumn, ChunkKey};

/// What a decode hands its waiters: its batches.
type Published = Arc<Vec<CachedColumn>>;

/// What [`DecodeFlights::claim`] gives.
pub enum DecodeClaim<'a> {
    /// Nobody is decoding the chunk: look in the memory tier once more (a
    /// decode that ended between the caller's miss and this claim has
    /// admitted its batches: [`DecodeGuard::share`] them), else decode it,
    /// admit its batches, then [`publish`](DecodeGuard::publish) them (or
    /// drop the guard on failure): each wakes the waiters.
    Decode(DecodeGuard<'a>),
    /// Another scan is decoding it: [`wait`](DecodeFlights::wait) for its
    /// batches (and decode only if it gives none: the decoder failed or was
    /// cancelled).
    Wait(Follower<Published>),
}

/// The right to decode one chunk. Dropped (done, failed or cancelled), it
/// forgets the claim and wakes every waiter.
pub struct DecodeGuard<'a> {
    leader: Leader<ChunkKey, Published>,
    decoded: &'a AtomicU64,
}

impl DecodeGuard<'_> {
    /// Hands the decoded `batches` to every waiter, counts one decode, and
    /// ends the claim.
    pub fn publish(self, batches: &[CachedColumn]) {
        self.decoded.fetch_add(1, Ordering::Relaxed);
        self.leader.publish(Arc::new(batches.to_vec()));
    }

    /// Hands `batches` the memory tier already held to every waiter (no
    /// decode: another scan's ended just before this claim), and ends the
    /// claim.
    pub fn share(self, batches: &[CachedColumn]) {
        self.leader.publish(Arc::new(batches.to_vec()));
    }
}

/// Column chunks being decoded right now, shared by every scan of a server.
#[derive(Default)]
pub struct DecodeFlights {
    chunks: SingleFlight<ChunkKey, Published>,
    decoded: AtomicU64,
    waited: AtomicU64,
}

impl DecodeFlights {
    /// Claims `chunk`: the first caller decodes, later ones wait.
    pub fn claim(&self, chunk: ChunkKey) -> DecodeClaim<'_> {
        match self.chunks.claim(&chunk) {
            Claim::Lead(leader) => DecodeClaim::Decode(DecodeGuard {
                leader,
                decoded: &self.decoded,
            }),
            Claim::Follow(follower) | Claim::LeadBeside { follower, .. } => {
                self.waited.fetch_add(1, Ordering::Relaxed);
                DecodeClaim::Wait(follower)
            }
        }
    }

    /// Waits until the decode behind `rx` ended; its batches if it
    /// published them.
    pub async fn wait(rx: Follower<Published>) -> Option<Vec<CachedColumn>> {
        rx.wait().await.map(|batches| batches.to_vec())
    }

    /// (chunk decodes published, waits on another scan's decode) since
    /// start. A decode that failed or was cancelled is not counted.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.decoded.load(Ordering::Relaxed),
            self.waited.load(Ordering::Relaxed),
        )
    }

    /// Chunks being decoded now.
    pub fn in_flight(&self) -> usize {
        self.chunks.len()
    }

    /// Whether `chunk` is being decoded (or read back) now: its batches are
    /// still being admitted, so those held are not all of it.
    pub fn is_decoding(&self, chunk: &ChunkKey) -> bool {
        self.chunks.in_flight(chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_second_claim_waits_until_the_first_is_dropped() {
        let flights = DecodeFlights::default();
        let id = ChunkKey::new(crate::ObjectKey::new("t0", "a.parquet", "v1"), 0, 3);
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
        assert_eq!((flights.counts(), flights.in_flight()), ((0, 1), 0));
        assert!(matches!(flights.claim(id), DecodeClaim::Decode(_)));
    }

    #[tokio::test]
    async fn waiters_get_the_published_batches() {
        use arrow::array::{ArrayRef, Int32Array};
        let flights = DecodeFlights::default();
        let id = ChunkKey::new(crate::ObjectKey::new("t0", "a.parquet", "v1"), 0, 3);
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
        assert_eq!((flights.counts(), flights.in_flight()), ((1, 2), 0));
    }
}
