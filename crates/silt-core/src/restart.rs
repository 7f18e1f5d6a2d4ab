//! The one restart policy for a read that meets a changed object version.
//!
//! A read plans on one listing of a table's object versions and never
//! mixes versions: when an object is overwritten, added or deleted between
//! the listing and the read, the read fails with a "changed" error (the
//! server's `CacheError::Changed`, `ABORTED` on the wire) or its
//! validation says so. Such a read is run again, from a fresh listing,
//! **once** ([`restart_once_on_change`]).
//!
//! Why once: one overwrite between a listing and its read is the normal
//! case of a table being written while it is read, and a fresh listing
//! answers it. A second change during the restart means the object is
//! rewritten faster than one read takes; restarting again could go on
//! forever (each attempt costs a listing, a plan and a partial read), so
//! the second attempt's answer, changed error included, is the caller's.
//! Rows of two versions never meet in one answer either way.
//!
//! Used by every read that plans on a listing: the server's Flight
//! queries, lookups and byte-range reads (its query runner confirms each
//! attempt) and the client's hybrid scan route (a scoped scan or a fetch
//! refused under it).

use std::future::Future;

/// Runs `attempt(false)`; when `changed` says its outcome met a changed
/// object version, runs `attempt(true)` (`true`: this is the restart) and
/// returns that outcome, whatever it is (module docs: why once).
pub async fn restart_once_on_change<T, F, Fut>(mut attempt: F, changed: impl Fn(&T) -> bool) -> T
where
    F: FnMut(bool) -> Fut,
    Fut: Future<Output = T>,
{
    let first = attempt(false).await;
    if !changed(&first) {
        return first;
    }
    attempt(true).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_change_restarts_once_and_the_restart_is_final() {
        let mut calls = Vec::new();
        let out = restart_once_on_change(
            |restarted| {
                calls.push(restarted);
                async move { Err::<u32, &str>("changed") }
            },
            |r| *r == Err("changed"),
        )
        .await;
        assert_eq!(out, Err("changed"));
        assert_eq!(calls, vec![false, true]);
    }

    #[tokio::test]
    async fn an_answer_or_another_error_is_not_restarted() {
        for first in [Ok(7), Err("bad filter")] {
            let mut calls = 0;
            let out = restart_once_on_change(
                |_| {
                    calls += 1;
                    async move { first }
                },
                |r| *r == Err("changed"),
            )
            .await;
            assert_eq!(out, first);
            assert_eq!(calls, 1);
        }
    }
}
