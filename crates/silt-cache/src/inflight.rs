//! Deduplication of concurrent misses: when several queries miss the same
//! page at once, one of them fetches it and the others wait for its result
//! (when the part it fetches holds what they need).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::error::CacheError;
use crate::page_cache::{Page, PageKey, still_needed};

/// What a fetch of a page ended with, as seen by those waiting for it. The
/// error is the fetcher's own, typed (a waiter on a deleted object gets
/// `NotFound`, on an overwritten one `Changed`, like the fetcher).
pub(crate) type Outcome = Result<Page, CacheError>;

/// A claim on a missing page.
pub(crate) enum Claim {
    /// Nobody is fetching what the caller needs of this page: the caller
    /// must, then [`FetchClaim::finish`]. Another request may be fetching
    /// another part of it alongside (one that holds neither end of the need).
    Fetch(FetchClaim),
    /// Another request is fetching a part that holds what the caller
    /// needs: wait on this.
    Wait(watch::Receiver<Option<Outcome>>),
    /// Another request is fetching a part of the page that holds one end of
    /// what the caller needs (the neighbouring column chunk's, say): the
    /// caller fetches the `rest` alongside, under `claim` (so later requests
    /// can wait for it), and joins it to that part from `rx`, rather than
    /// wait for that fetch and then make a second round trip.
    Alongside {
        rest: Range<u64>,
        rx: watch::Receiver<Option<Outcome>>,
        claim: FetchClaim,
    },
}

/// A part of a page being fetched: the part (page coordinates) its fetcher
/// will publish, and where the outcome appears.
struct Fetching {
    part: Range<u64>,
    rx: watch::Receiver<Option<Outcome>>,
}

/// Per page, the parts being fetched (usually one).
type Pages = Arc<Mutex<HashMap<PageKey, Vec<Fetching>>>>;

/// The right and duty to fetch one part of a page. Dropped without
/// [`FetchClaim::finish`] (its query was cancelled mid-fetch), it forgets the
/// claim at once: its waiters fetch the page themselves, and no entry is
/// left behind.
pub(crate) struct FetchClaim {
    key: PageKey,
    tx: Option<watch::Sender<Option<Outcome>>>,
    pages: Pages,
}

impl FetchClaim {
    /// Publishes the outcome of the fetch to its waiters and forgets the claim.
    pub(crate) fn finish(mut self, outcome: Outcome) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Some(outcome));
            self.forget(&tx);
        }
    }

    fn forget(&self, tx: &watch::Sender<Option<Outcome>>) {
        let mut pages = self.pages.lock();
        if let Some(parts) = pages.get_mut(&self.key) {
            parts.retain(|f| !f.rx.same_channel(&tx.subscribe()));
            if parts.is_empty() {
                pages.remove(&self.key);
            }
        }
    }
}

impl Drop for FetchClaim {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            // Forget first: a waiter woken by the drop must not find this claim.
            self.forget(&tx);
        }
    }
}

/// Pages being fetched right now, shared by every store of a server.
#[derive(Default)]
pub(crate) struct InFlight {
    pages: Pages,
}

impl InFlight {
    /// Claims `key` for a caller that needs bytes `need` of the page and
    /// would publish `part` of it: the first caller fetches; a later one
    /// waits if a part being fetched holds what it needs, fetches the rest
    /// alongside if one holds an end of it, else fetches it all alongside.
    pub(crate) fn claim(&self, key: &PageKey, part: Range<u64>, need: &Range<u64>) -> Claim {
        let mut pages = self.pages.lock();
        let parts = pages.entry(key.clone()).or_default();
        // Parts whose fetcher went away are taken over.
        parts.retain(|f| f.rx.has_changed().is_ok());
        if let Some(f) = parts
            .iter()
            .find(|f| f.part.start <= need.start && need.end <= f.part.end)
        {
            return Claim::Wait(f.rx.clone());
        }
        let end = parts
            .iter()
            .map(|f| (still_needed(need, Some(f.part.clone())), f))
            .find(|(rest, _)| rest != need)
            .map(|(rest, f)| (rest, f.rx.clone()));
        let (tx, rx) = watch::channel(None);
        let part = end.as_ref().map_or(part, |(rest, _)| rest.clone());
        parts.push(Fetching { part, rx });
        let claim = FetchClaim {
            key: key.clone(),
            tx: Some(tx),
            pages: self.pages.clone(),
        };
        match end {
            Some((rest, rx)) => Claim::Alongside { rest, rx, claim },
            None => Claim::Fetch(claim),
        }
    }

    /// Pages claimed and not yet fetched (0 when nothing is in flight).
    pub(crate) fn len(&self) -> usize {
        self.pages.lock().len()
    }

    /// Waits for another request's fetch. `None` when that request went away
    /// without finishing (the caller then fetches the page itself).
    pub(crate) async fn wait(mut rx: watch::Receiver<Option<Outcome>>) -> Option<Outcome> {
        rx.wait_for(|o| o.is_some()).await.ok().and_then(|o| o.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(page: u64) -> PageKey {
        PageKey::new(crate::ObjectKey::new("s", "p", "v"), page)
    }

    #[tokio::test]
    async fn second_claim_waits_for_the_first() {
        let f = InFlight::default();
        let Claim::Fetch(tx) = f.claim(&key(1), 0..64, &(0..64)) else {
            panic!("first claim must fetch")
        };
        let Claim::Wait(rx) = f.claim(&key(1), 0..64, &(0..64)) else {
            panic!("second claim must wait")
        };
        let Claim::Fetch(_other) = f.claim(&key(2), 0..64, &(0..64)) else {
            panic!("other page must fetch")
        };
        tx.finish(Ok(Page::whole(bytes::Bytes::from_static(b"x"))));
        assert_eq!(InFlight::wait(rx).await.unwrap().unwrap().bytes, &b"x"[..]);
        assert!(
            matches!(f.claim(&key(1), 0..64, &(0..64)), Claim::Fetch(_)),
            "finished claims are forgotten"
        );
    }

    #[test]
    fn a_claim_for_bytes_the_fetch_will_not_hold_fetches_alongside() {
        let f = InFlight::default();
        let Claim::Fetch(_a) = f.claim(&key(1), 0..10, &(0..10)) else {
            panic!()
        };
        assert!(matches!(f.claim(&key(1), 0..64, &(2..8)), Claim::Wait(_)));
        // Touching, not overlapping: all of it is fetched, under a claim of its own.
        let Claim::Fetch(_b) = f.claim(&key(1), 10..64, &(10..64)) else {
            panic!()
        };
        assert!(
            matches!(f.claim(&key(1), 0..64, &(12..20)), Claim::Wait(_)),
            "waits for the second"
        );
        // Overlapping one end: only the rest is fetched.
        let Claim::Fetch(_c) = f.claim(&key(2), 0..40, &(0..40)) else {
            panic!()
        };
        let Claim::Alongside { rest, .. } = f.claim(&key(2), 0..64, &(20..64)) else {
            panic!()
        };
        assert_eq!(rest, 40..64);
        assert_eq!(f.len(), 2);
    }

    #[tokio::test]
    async fn waiters_get_the_fetchers_typed_error() {
        let f = InFlight::default();
        let Claim::Fetch(tx) = f.claim(&key(1), 0..64, &(0..64)) else {
            panic!()
        };
        let Claim::Wait(rx) = f.claim(&key(1), 0..64, &(0..64)) else {
            panic!()
        };
        let gone = CacheError::NotFound {
            path: "p".into(),
            source: None,
        };
        tx.finish(Err(gone));
        assert!(InFlight::wait(rx).await.unwrap().unwrap_err().is_not_found());
    }

    #[tokio::test]
    async fn abandoned_claim_is_taken_over() {
        let f = InFlight::default();
        let Claim::Fetch(tx) = f.claim(&key(1), 0..64, &(0..64)) else {
            panic!()
        };
        let Claim::Wait(rx) = f.claim(&key(1), 0..64, &(0..64)) else {
            panic!()
        };
        drop(tx);
        assert_eq!(f.len(), 0, "a dropped claim leaves no entry");
        assert!(InFlight::wait(rx).await.is_none());
        assert!(matches!(f.claim(&key(1), 0..64, &(0..64)), Claim::Fetch(_)));
    }
}
