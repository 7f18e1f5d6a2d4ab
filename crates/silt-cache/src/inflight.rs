//! Deduplication of concurrent misses: when several queries miss the same
//! page at once, one of them fetches it and the others wait for its result
//! (when the part it fetches holds what they need). Built on the generic
//! [`SingleFlight`], each flight of a page being the part it fetches.

use std::ops::Range;

use silt_core::single_flight::{self, Decision, Follower, Leader, SingleFlight};

use crate::PageKey;
use crate::error::CacheError;
use crate::page_cache::{Page, still_needed};

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
    Wait(Follower<Outcome>),
    /// Another request is fetching a part of the page that holds one end of
    /// what the caller needs (the neighbouring column chunk's, say): the
    /// caller fetches the `rest` alongside, under `claim` (so later requests
    /// can wait for it), and joins it to that part from `rx`, rather than
    /// wait for that fetch and then make a second round trip.
    Alongside {
        rest: Range<u64>,
        rx: Follower<Outcome>,
        claim: FetchClaim,
    },
}

/// The right and duty to fetch one part (page coordinates) of a page.
/// Dropped without [`FetchClaim::finish`] (its query was cancelled
/// mid-fetch), it forgets the claim at once: its waiters fetch the page
/// themselves, and no entry is left behind.
pub(crate) struct FetchClaim(Leader<PageKey, Outcome, Range<u64>>);

impl FetchClaim {
    /// Publishes the outcome of the fetch to its waiters and forgets the claim.
    pub(crate) fn finish(self, outcome: Outcome) {
        self.0.publish(outcome);
    }
}

/// Pages being fetched right now (per page, the parts being fetched,
/// usually one), shared by every store of a server.
#[derive(Default)]
pub(crate) struct InFlight {
    pages: SingleFlight<PageKey, Outcome, Range<u64>>,
}

impl InFlight {
    /// Claims `key` for a caller that needs bytes `need` of the page and
    /// would publish `part` of it: the first caller fetches; a later one
    /// waits if a part being fetched holds what it needs, fetches the rest
    /// alongside if one holds an end of it, else fetches it all alongside.
    pub(crate) fn claim(&self, key: &PageKey, part: Range<u64>, need: &Range<u64>) -> Claim {
        let mut rest = None;
        let claim = self.pages.claim_by(key, |parts| {
            if let Some(i) = parts.iter().position(|p| p.start <= need.start && need.end <= p.end) {
                return Decision::Follow(i);
            }
            let end = parts
                .iter()
                .map(|p| still_needed(need, Some(p.clone())))
                .position(|r| r != *need);
            match end {
                Some(i) => {
                    let r = still_needed(need, Some(parts[i].clone()));
                    rest = Some(r.clone());
                    Decision::LeadBeside(i, r)
                }
                None => Decision::Lead(part),
            }
        });
        match claim {
            single_flight::Claim::Lead(leader) => Claim::Fetch(FetchClaim(leader)),
            single_flight::Claim::Follow(rx) => Claim::Wait(rx),
            single_flight::Claim::LeadBeside { leader, follower } => Claim::Alongside {
                rest: rest.expect("fetched alongside a part"),
                rx: follower,
                claim: FetchClaim(leader),
            },
        }
    }

    /// Pages claimed and not yet fetched (0 when nothing is in flight).
    pub(crate) fn len(&self) -> usize {
        self.pages.len()
    }

    /// Waits for another request's fetch. `None` when that request went away
    /// without finishing (the caller then fetches the page itself).
    pub(crate) async fn wait(rx: Follower<Outcome>) -> Option<Outcome> {
        rx.wait().await
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
