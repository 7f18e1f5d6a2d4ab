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
//! before plus one round trip.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use object_store::ObjectMeta;
use object_store::path::Path;
use parking_lot::Mutex;

use crate::error::{CacheError, CacheResult};

/// What a validation answered: the objects listed (one for a HEAD).
pub(crate) type Answer = CacheResult<Arc<Vec<ObjectMeta>>>;

type SharedAnswer = Shared<BoxFuture<'static, Answer>>;

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

/// The latest validation of a probe.
struct Generation {
    /// When its request was started (before it was sent).
    sent: Instant,
    answer: SharedAnswer,
}

/// The latest validation per probe of one table's store.
#[derive(Default)]
pub(crate) struct Probes {
    latest: Mutex<HashMap<Probe, Generation>>,
}

impl Probes {
    /// The answer of a validation of `probe` sent at or after `since`: the
    /// one in flight if it qualifies, else a new one (after the one in
    /// flight, if any, has finished). `send` makes the request; it runs on
    /// its own task, so it completes even if every waiter goes away.
    pub(crate) async fn after(
        &self,
        probe: &Probe,
        since: Instant,
        send: impl Fn() -> BoxFuture<'static, Answer>,
    ) -> Answer {
        loop {
            let step = {
                let mut latest = self.latest.lock();
                match latest.get(probe) {
                    Some(g) if g.sent >= since => Ok(g.answer.clone()),
                    Some(g) if g.answer.peek().is_none() => Err(g.answer.clone()),
                    _ => {
                        let sent = Instant::now();
                        let task = tokio::spawn(send());
                        let path = probe.path();
                        let answer = async move { task.await.unwrap_or_else(|e| Err(join_error(path, e))) }
                            .boxed()
                            .shared();
                        latest.insert(
                            probe.clone(),
                            Generation {
                                sent,
                                answer: answer.clone(),
                            },
                        );
                        Ok(answer)
                    }
                }
            };
            match step {
                Ok(answer) => return answer.await,
                // Sent before `since`: let it finish, then start the next.
                Err(older) => {
                    let _ = older.await;
                }
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
