//! Single-flight: when several callers need the same thing at once, one of
//! them (the *leader*) loads it and the others (*followers*) wait for what
//! it publishes, instead of each loading it again.
//!
//! One generic [`SingleFlight`] serves every place that de-duplicates
//! concurrent loads: page fetches (`silt_cache`'s in-flight pages, where a
//! page may be fetched in several parts at once), column chunk decodes
//! (`silt_cache::DecodeFlights`) and validations (`silt_cache`'s probes).
//! A flight lives from its claim until its leader publishes or is dropped
//! (done, failed or cancelled): either forgets the flight and wakes the
//! followers, so no entry outlives its leader and a follower whose leader
//! went away gets `None` and may load the thing itself.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

/// One load in flight: what part of the key it loads (`()` when a load is
/// always of the whole thing), and where its outcome appears.
struct Flight<V, P> {
    part: P,
    rx: watch::Receiver<Option<V>>,
}

impl<V, P> Flight<V, P> {
    /// Whether its leader is still there (a leader gone without publishing
    /// drops the sender).
    fn is_live(&self) -> bool {
        self.rx.has_changed().is_ok()
    }
}

/// Per key, the loads in flight (usually one).
type Flights<K, V, P> = Arc<Mutex<HashMap<K, Vec<Flight<V, P>>>>>;

/// What a claimer decides, given the parts of the key in flight (see
/// [`SingleFlight::claim_by`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision<P> {
    /// Load part `P` (nothing in flight serves the caller).
    Lead(P),
    /// Wait for the flight at this index.
    Follow(usize),
    /// Load part `P` alongside the flight at this index, and wait for that
    /// one too (it holds the rest of what the caller needs).
    LeadBeside(usize, P),
}

/// What [`SingleFlight::claim_by`] gives.
pub enum Claim<K: Hash + Eq + Clone, V: Clone, P = ()> {
    /// The caller loads: then [`Leader::publish`] (or drop the leader on
    /// failure).
    Lead(Leader<K, V, P>),
    /// Another caller is loading: [`Follower::wait`] for it.
    Follow(Follower<V>),
    /// The caller loads its part and waits for another caller's.
    LeadBeside {
        /// The caller's own load.
        leader: Leader<K, V, P>,
        /// The other load it joins.
        follower: Follower<V>,
    },
}

/// Loads in flight per key `K`, each publishing a `V`, each of a part `P`
/// of its key. Cheap to share: callers hold it by reference.
pub struct SingleFlight<K, V, P = ()> {
    flights: Flights<K, V, P>,
}

impl<K, V, P> Default for SingleFlight<K, V, P> {
    fn default() -> Self {
        SingleFlight {
            flights: Arc::default(),
        }
    }
}

impl<K: Hash + Eq + Clone, V: Clone, P: Clone> SingleFlight<K, V, P> {
    /// Claims `key`: `decide` is given the parts of it in flight (flights
    /// whose leader went away are dropped first) and says whether the
    /// caller leads a load of its own, follows one of them, or both.
    pub fn claim_by(&self, key: &K, decide: impl FnOnce(&[P]) -> Decision<P>) -> Claim<K, V, P> {
        let mut flights = self.flights.lock();
        let live = flights.entry(key.clone()).or_default();
        live.retain(Flight::is_live);
        let parts: Vec<P> = live.iter().map(|f| f.part.clone()).collect();
        let (lead, follow) = match decide(&parts) {
            Decision::Lead(part) => (Some(part), None),
            Decision::Follow(i) => (None, Some(i)),
            Decision::LeadBeside(i, part) => (Some(part), Some(i)),
        };
        let follower = follow.map(|i| Follower(live[i].rx.clone()));
        let leader = lead.map(|part| {
            let (tx, rx) = watch::channel(None);
            live.push(Flight { part, rx });
            Leader {
                key: key.clone(),
                tx: Some(tx),
                flights: self.flights.clone(),
            }
        });
        if live.is_empty() {
            flights.remove(key);
        }
        match (leader, follower) {
            (Some(leader), None) => Claim::Lead(leader),
            (None, Some(follower)) => Claim::Follow(follower),
            (Some(leader), Some(follower)) => Claim::LeadBeside { leader, follower },
            (None, None) => unreachable!("every decision leads or follows"),
        }
    }

    /// Whether a load of `key` is in flight (its leader still there).
    pub fn in_flight(&self, key: &K) -> bool {
        self.flights
            .lock()
            .get(key)
            .is_some_and(|live| live.iter().any(Flight::is_live))
    }

    /// Keys with a load in flight.
    pub fn len(&self) -> usize {
        self.flights.lock().len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Hash + Eq + Clone, V: Clone> SingleFlight<K, V> {
    /// Claims `key`, loaded whole: the first caller leads, later ones
    /// follow it until it publishes or goes away.
    pub fn claim(&self, key: &K) -> Claim<K, V> {
        self.claim_by(key, |live| {
            if live.is_empty() {
                Decision::Lead(())
            } else {
                Decision::Follow(0)
            }
        })
    }
}

/// The right and duty to load one part of a key. Dropped without
/// [`publish`](Self::publish) (failed or cancelled), it forgets its flight
/// at once and its followers get `None`.
pub struct Leader<K: Hash + Eq + Clone, V: Clone, P = ()> {
    key: K,
    tx: Option<watch::Sender<Option<V>>>,
    flights: Flights<K, V, P>,
}

impl<K: Hash + Eq + Clone, V: Clone, P> Leader<K, V, P> {
    /// Hands `value` to every follower and forgets the flight.
    pub fn publish(mut self, value: V) {
        if let Some(tx) = self.tx.take() {
            tx.send_replace(Some(value));
            self.forget(&tx);
        }
    }

    /// A follower of this leader's own flight (for a leader that loads on
    /// another task and waits like everyone else).
    pub fn follower(&self) -> Follower<V> {
        Follower(self.tx.as_ref().expect("a leader holds its sender").subscribe())
    }

    fn forget(&self, tx: &watch::Sender<Option<V>>) {
        let mut flights = self.flights.lock();
        if let Some(live) = flights.get_mut(&self.key) {
            live.retain(|f| !f.rx.same_channel(&tx.subscribe()));
            if live.is_empty() {
                flights.remove(&self.key);
            }
        }
    }
}

impl<K: Hash + Eq + Clone, V: Clone, P> Drop for Leader<K, V, P> {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            // Forget first: a follower woken by the drop must not find this flight.
            self.forget(&tx);
        }
    }
}

/// A wait on another caller's load.
pub struct Follower<V>(watch::Receiver<Option<V>>);

impl<V: Clone> Follower<V> {
    /// What the leader published; `None` when it went away without
    /// publishing (the caller then loads the thing itself).
    pub async fn wait(mut self) -> Option<V> {
        self.0.wait_for(Option::is_some).await.ok().and_then(|v| v.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn followers_get_what_the_leader_publishes() {
        let flights: SingleFlight<u32, &'static str> = SingleFlight::default();
        let Claim::Lead(leader) = flights.claim(&1) else {
            panic!("first claim leads")
        };
        let Claim::Follow(follower) = flights.claim(&1) else {
            panic!("second claim follows")
        };
        assert!(matches!(flights.claim(&2), Claim::Lead(_)), "another key leads");
        leader.publish("x");
        assert_eq!(follower.wait().await, Some("x"));
        assert!(flights.is_empty(), "a published flight is forgotten");
    }

    #[tokio::test]
    async fn a_dropped_leader_leaves_nothing_and_wakes_its_followers() {
        let flights: SingleFlight<u32, u32> = SingleFlight::default();
        let Claim::Lead(leader) = flights.claim(&1) else {
            panic!()
        };
        let Claim::Follow(follower) = flights.claim(&1) else {
            panic!()
        };
        let own = leader.follower();
        drop(leader);
        assert_eq!(flights.len(), 0);
        assert_eq!(follower.wait().await, None);
        assert_eq!(own.wait().await, None);
        assert!(matches!(flights.claim(&1), Claim::Lead(_)));
    }

    #[test]
    fn parts_of_a_key_fly_side_by_side() {
        let flights: SingleFlight<u32, u32, u32> = SingleFlight::default();
        let Claim::Lead(_a) = flights.claim_by(&1, |_| Decision::Lead(10)) else {
            panic!()
        };
        let mut seen = Vec::new();
        let Claim::LeadBeside { .. } = flights.claim_by(&1, |live| {
            seen = live.to_vec();
            Decision::LeadBeside(0, 20)
        }) else {
            panic!()
        };
        assert_eq!(seen, vec![10]);
        assert_eq!(flights.len(), 1, "one key, two parts");
    }
}
