//! `ValidationGate`: one query's pending confirmations of the versions it
//! read speculatively.
//!
//! Under `validation = "always"` a warm query does not wait for its LIST or
//! HEAD: [`CachedStore`](crate::CachedStore) hands it the last validated
//! listing at once and registers, on the query's gate, a confirmation that
//! resolves when a validation *started after the query started* answers (see
//! [`ValidationGate::started`]). The query runs meanwhile; whoever releases its
//! results (the Flight service, before the first batch or the end of an empty
//! result) awaits [`ValidationGate::confirm`] first. A mismatch is
//! [`CacheError::Changed`]: nothing has been sent, so the query is planned
//! again on the new listing.
//!
//! Why a gate object in the query's `SessionConfig` rather than a task-local:
//! DataFusion may plan and execute on tasks it spawns, where a task-local set
//! by the Flight service would be invisible; the session config travels with
//! the query wherever it runs (`CachedParquetTable::list_files` reads it and
//! hands it to the store it lists through, [`CachedStore::gated`](crate::CachedStore::gated)).

use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use parking_lot::Mutex;

use crate::error::{CacheError, CacheResult};

/// The confirmations one query (one attempt of it) waits for before
/// releasing results. Shared as `Arc<ValidationGate>`.
pub struct ValidationGate {
    started: Instant,
    pending: Mutex<Vec<BoxFuture<'static, CacheResult<()>>>>,
    speculative: Mutex<bool>,
    /// Whether reads may be speculative at all (false for the restart of a
    /// query whose speculation failed: it reads what is current).
    may_speculate: bool,
    /// Wall time the query waited on validations it could not speculate
    /// past (a first listing, or one under another freshness).
    inline: Mutex<InlineWaits>,
}

/// Inline waits that may overlap (a plan lists its tables concurrently):
/// the wall time during which at least one was running, not their sum.
#[derive(Default)]
struct InlineWaits {
    running: usize,
    since: Option<Instant>,
    total: std::time::Duration,
}

/// One inline wait in progress; ends when dropped.
pub(crate) struct InlineWait<'a>(&'a ValidationGate);

impl Drop for InlineWait<'_> {
    fn drop(&mut self) {
        let mut w = self.0.inline.lock();
        w.running -= 1;
        if w.running == 0
            && let Some(since) = w.since.take()
        {
            w.total += since.elapsed();
        }
    }
}

impl std::fmt::Debug for ValidationGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValidationGate")
            .field("started", &self.started)
            .field("speculative", &self.is_speculative())
            .finish_non_exhaustive()
    }
}

impl ValidationGate {
    /// A gate for a query starting now.
    pub fn new() -> Arc<Self> {
        Self::starting_at(Instant::now())
    }

    /// A gate for a query that started at `started` (not in the future):
    /// a scan that is one of several of a client's query takes the instant
    /// the server first saw that query, so validations sent for an earlier
    /// scan of it (or at its start, for all its tables) confirm it too.
    pub fn starting_at(started: Instant) -> Arc<Self> {
        Arc::new(ValidationGate {
            started: started.min(Instant::now()),
            pending: Mutex::default(),
            speculative: Mutex::new(false),
            may_speculate: true,
            inline: Mutex::default(),
        })
    }

    /// A gate for the restart of a query whose speculative reads were not
    /// confirmed: it starts now and reads whatever it reads as current
    /// ([`ValidationGate::may_speculate`] is false), so a table committed to
    /// often cannot fail it twice.
    pub fn without_speculation() -> Arc<Self> {
        Arc::new(ValidationGate {
            started: Instant::now(),
            pending: Mutex::default(),
            speculative: Mutex::new(false),
            may_speculate: false,
            inline: Mutex::default(),
        })
    }

    /// Whether this query's reads may be speculative (see
    /// [`ValidationGate::without_speculation`]).
    pub fn may_speculate(&self) -> bool {
        self.may_speculate
    }

    /// When the query started. Only a validation whose request was sent at
    /// or after this instant may confirm what the query read: one already in
    /// flight before may have been answered before an overwrite that
    /// completed before the query began.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Registers a confirmation: it resolves `Ok` if the versions the query
    /// used are still current, [`CacheError::Changed`] if not, or the
    /// validation's own error. The future should already be running (spawned)
    /// so the validation proceeds while the query does.
    pub fn register(&self, confirmation: BoxFuture<'static, CacheResult<()>>) {
        *self.speculative.lock() = true;
        self.pending.lock().push(confirmation);
    }

    /// Starts an inline wait on a validation (the query cannot go on
    /// before it answers); it ends when the returned guard is dropped.
    pub(crate) fn inline_wait_begins(&self) -> InlineWait<'_> {
        let mut w = self.inline.lock();
        if w.running == 0 {
            w.since = Some(Instant::now());
        }
        w.running += 1;
        InlineWait(self)
    }

    /// Wall time the query has waited on validations inline (during
    /// planning: what a trace counts as validation rather than planning),
    /// overlapping waits counted once; a wait in progress counts so far.
    pub fn inline_wait(&self) -> std::time::Duration {
        let w = self.inline.lock();
        w.total + w.since.map_or(std::time::Duration::ZERO, |s| s.elapsed())
    }

    /// Whether the query used any listing or version speculatively.
    pub fn is_speculative(&self) -> bool {
        *self.speculative.lock()
    }

    /// Waits for every registered confirmation. A store error wins over a
    /// mismatch (the query fails with it, as a failed validation did before
    /// speculation); otherwise any mismatch is [`CacheError::Changed`].
    pub async fn confirm(&self) -> CacheResult<()> {
        let pending = std::mem::take(&mut *self.pending.lock());
        let mut changed: Option<CacheError> = None;
        for outcome in futures::future::join_all(pending).await {
            match outcome {
                Ok(()) => {}
                Err(e) if e.is_changed() => {
                    changed.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        changed.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn overlapping_inline_waits_count_their_wall_time_once() {
        let gate = ValidationGate::new();
        let window = Instant::now();
        let a = gate.inline_wait_begins();
        let b = gate.inline_wait_begins();
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(a);
        drop(b);
        let window = window.elapsed();
        let waited = gate.inline_wait();
        // Counted as wall time, two waits side by side fit in the window
        // they ran in (their sum would be about twice it).
        assert!(
            waited <= window && waited > std::time::Duration::ZERO,
            "{waited:?} in {window:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(gate.inline_wait(), waited, "nothing waits any more");
    }

    #[tokio::test]
    async fn confirms_all_and_prefers_store_errors() {
        let gate = ValidationGate::new();
        assert!(!gate.is_speculative());
        assert!(gate.confirm().await.is_ok());
        gate.register(async { Err(CacheError::changed("p", "v")) }.boxed());
        gate.register(async { Ok(()) }.boxed());
        assert!(gate.is_speculative());
        assert!(gate.confirm().await.unwrap_err().is_changed());
        gate.register(async { Err(CacheError::changed("p", "v")) }.boxed());
        gate.register(
            async {
                Err(CacheError::Corrupt {
                    path: "p".into(),
                    detail: "x".into(),
                })
            }
            .boxed(),
        );
        assert!(matches!(gate.confirm().await, Err(CacheError::Corrupt { .. })));
    }
}
