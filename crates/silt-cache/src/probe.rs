//! Validations in flight: one LIST per prefix (one HEAD per object) at a
//! time, shared by every query that may use it.
//!
//! A query may only be confirmed by a validation sent at or after the query
//! started ([`ValidationGate::started`](crate::ValidationGate::started)).
//! So [`Probes::after`] joins the validation in flight if it was sent late
//! enough; if it was sent earlier, it waits for it to finish and then starts
//! the next one, which every query that arrived meanwhile joins. With
//! queries arriving continuously there is therefore at most one request in
//! flight per probe, and each query waits at most for the end of the one
//! before plus one round trip. The requests in flight are a
//! [`SingleFlight`] keyed by probe.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use object_store::ObjectMeta;
use object_store::path::Path;
use parking_lot::Mutex;
use silt_core::single_flight::{Claim, Decision, SingleFlight};

use crate::error::{CacheError, CacheResult};

/// What a validation answered: the objects listed (one for a HEAD).
pub(crate) type Answer = CacheResult<Arc<Vec<ObjectMeta>>>;

/// What is validated: a LIST of a prefix or a HEAD of one object
/// (namespaced paths).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Probe {
    List(Option<Path>),
    Head(Path),
}

impl Probe {
    /// The path errors about this probe name.
    pub(crate) fn path(&self) -> String {
        match self {
            Probe::List(p) => p.as_ref().map(|p| p.to_string()).unwrap_or_default(),
            Probe::Head(p) => p.to_string(),
        }
    }
}

/// The validations of one table's store: per probe, the one in flight (its
/// part: when its request was started, before it was sent) and the latest
/// answered one.
#[derive(Default)]
pub(crate) struct Probes {
    in_flight: SingleFlight<Probe, Answer, Instant>,
    answered: Arc<Mutex<HashMap<Probe, (Instant, Answer)>>>,
}

impl Probes {
    /// The answer of a validation of `probe` sent at or after `since`: the
    /// latest answered or the one in flight if it qualifies, else a new one
    /// (after the one in flight, if any, has finished). `send` makes the
    /// request; it runs on its own task, so it completes even if every
    /// waiter goes away.
    pub(crate) async fn after(
        &self,
        probe: &Probe,
        since: Instant,
        send: impl Fn() -> BoxFuture<'static, Answer>,
    ) -> Answer {
        loop {
            if let Some((sent, answer)) = self.answered.lock().get(probe)
                && *sent >= since
            {
                return answer.clone();
            }
            let mut sent = since;
            let claim = self.in_flight.claim_by(probe, |live| match live.first() {
                Some(&flying) => {
                    sent = flying;
                    Decision::Follow(0)
                }
                None => {
                    sent = Instant::now();
                    Decision::Lead(sent)
                }
            });
            let follower = match claim {
                Claim::Follow(follower) | Claim::LeadBeside { follower, .. } => follower,
                Claim::Lead(leader) => {
                    let follower = leader.follower();
                    let task = tokio::spawn(send());
                    let (probe, answered) = (probe.clone(), self.answered.clone());
                    tokio::spawn(async move {
                        let answer = task.await.unwrap_or_else(|e| Err(join_error(probe.path(), e)));
                        // Recorded before it is published: a query arriving
                        // between the two finds it here.
                        answered.lock().insert(probe, (sent, answer.clone()));
                        leader.publish(answer);
                    });
                    follower
                }
            };
            // The validation's task went away unanswered (only a runtime
            // shutting down drops it): an error, not another round, which
            // would spawn into the dying runtime again and again.
            let Some(answer) = follower.wait().await else {
                return Err(unanswered(probe.path()));
            };
            // Sent before `since`: it has finished, start the next.
            if sent >= since {
                return answer;
            }
        }
    }
}

fn join_error(path: String, e: tokio::task::JoinError) -> CacheError {
    CacheError::Store {
        path,
        source: Arc::new(object_store::Error::Generic {
            store: "CachedStore",
            source: Box::new(e),
        }),
    }
}

/// The error of a validation whose task ended without an answer.
fn unanswered(path: String) -> CacheError {
    CacheError::Store {
        path,
        source: Arc::new(object_store::Error::Generic {
            store: "CachedStore",
            source: "the validation's task ended without an answer (the runtime is shutting down)".into(),
        }),
    }
}
