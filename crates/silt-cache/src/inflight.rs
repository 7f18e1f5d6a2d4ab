//! Deduplication of concurrent misses: when several queries miss the same
//! page at once, one of them fetches it and the others wait for its result
//! (when the part it fetches holds what they need).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::error::CacheError;
use crate::page_cache::{Page, PageKey};

/// What a fetch of a page ended with, as seen by those waiting for it. The
/// error is the fetcher's own, typed (a waiter on a deleted object gets
/// `NotFound`, on an overwritten one `Changed`, like the fetcher).
pub(crate) type Outcome = Result<Page, CacheError>;

/// A claim on a missing page.
pub(crate) enum Claim {
    /// Nobody is fetching this page: the caller must, then
    /// [`FetchClaim::finish`].
    Fetch(FetchClaim),
    /// Another request is fetching it: wait on this.
    Wait(watch::Receiver<Option<Outcome>>),
    /// Another request is fetching `part` of the page (page coordinates),
    /// which will not hold all the caller needs (the neighbouring column
    /// chunk's end, say): the caller fetches what it lacks alongside, without
    /// a claim, rather than wait for that fetch and then make a second round
    /// trip; where `part` holds one end of its need, it takes that end from
    /// `rx` instead of fetching it again.
    Alongside {
        part: Range<u64>,
        rx: watch::Receiver<Option<Outcome>>,
    },
}

/// A page being fetched: the part (page coordinates) its fetcher will
/// publish, and where the outcome appears.
struct Fetching {
    part: Range<u64>,
    rx: watch::Receiver<Option<Outcome>>,
}

type Pages = Arc<Mutex<HashMap<PageKey, Fetching>>>;

/// The right and duty to fetch one page. Dropped without
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
        if pages.get(&self.key).is_some_and(|f| f.rx.same_channel(&tx.subscribe())) {
            pages.remove(&self.key);
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
    /// would publish `part` of it: the first caller fetches, later ones wait
    /// if the part being fetched holds what they need, else fetch alongside.
    pub(crate) fn claim(&self, key: &PageKey, part: Range<u64>, need: &Range<u64>) -> Claim {
        let mut pages = self.pages.lock();
        if let Some(f) = pages.get(key)
            && f.rx.has_changed().is_ok()
        {
            return if f.part.start <= need.start && need.end <= f.part.end {
                Claim::Wait(f.rx.clone())
            } else {
                Claim::Alongside {
                    part: f.part.clone(),
                    rx: f.rx.clone(),
                }
            };
        }
        let (tx, rx) = watch::channel(None);
        pages.insert(key.clone(), Fetching { part, rx });
        Claim::Fetch(FetchClaim {
            key: key.clone(),
            tx: Some(tx),
            pages: self.pages.clone(),
        })
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
        let Claim::Fetch(_tx) = f.claim(&key(1), 0..10, &(0..10)) else {
            panic!()
        };
        assert!(matches!(f.claim(&key(1), 0..64, &(2..8)), Claim::Wait(_)));
        assert!(matches!(f.claim(&key(1), 10..64, &(10..64)), Claim::Alongside { part, .. } if part == (0..10)));
        assert!(matches!(f.claim(&key(1), 0..64, &(5..20)), Claim::Alongside { .. }));
        assert_eq!(f.len(), 1, "alongside fetches are not claims");
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
