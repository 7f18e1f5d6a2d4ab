//! What a `notify` table's store may trust without asking the store again:
//! the LISTs and HEADs validated since the last change notice, each for at
//! most the sweep.
//!
//! A change notice (an inotify event on the table's folder, an S3 event
//! notification naming one of its keys) says "something of this table may
//! have changed", not what it changed to, so it drops the table's trust
//! whole and the next query validates once, as under `always`. A notice
//! never drops cached bytes itself: that new validation records the new
//! versions (`CachedStore::remember`), and a running query keeps the
//! versions it pinned at its start.
//!
//! **Why a generation.** A validation sent before a notice may answer after
//! it, with the old version; recording it as trusted would hide the change
//! until the sweep. So a validation takes a [`Ticket`] before it is sent,
//! and its answer is trusted only if no notice arrived since that ticket.
//! The store's change happened before its notice arrived, so a validation
//! sent after the notice arrived sees it (the stores are read-after-write
//! consistent).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use metrics::Counter;
use parking_lot::Mutex;

use crate::probe::Probe;

/// One table's change notices and the validations they have not voided.
/// Shared by the clones of the table's `CachedStore`.
pub struct ChangeNotices {
    state: Mutex<State>,
    /// `silt_validation_sweeps_total`: trusted validations that expired by
    /// age (the sweep), so a query validated again without a notice.
    sweeps: Counter,
}

#[derive(Default)]
struct State {
    /// Bumped by every notice.
    generation: u64,
    /// Validations trusted now, by probe: when each was sent.
    trusted: HashMap<Probe, Instant>,
}

/// Taken before a validation is sent: the notices seen by then.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket {
    generation: u64,
    sent: Instant,
}

impl Default for ChangeNotices {
    fn default() -> Self {
        ChangeNotices::new(Counter::noop())
    }
}

impl ChangeNotices {
    /// Notices counting expired validations on `sweeps`.
    pub fn new(sweeps: Counter) -> Self {
        ChangeNotices {
            state: Mutex::default(),
            sweeps,
        }
    }

    /// A change notice: nothing validated before now is trusted any more,
    /// nor is a validation in flight now when it answers.
    pub fn changed(&self) {
        let mut state = self.state.lock();
        state.generation += 1;
        state.trusted.clear();
    }

    /// Before sending a validation.
    pub(crate) fn ticket(&self) -> Ticket {
        Ticket {
            generation: self.state.lock().generation,
            sent: Instant::now(),
        }
    }

    /// A validation of `probe` sent with `ticket` answered: trusted from
    /// now on, unless a notice arrived since it was sent.
    pub(crate) fn validated(&self, probe: &Probe, ticket: Ticket) {
        let mut state = self.state.lock();
        if state.generation == ticket.generation {
            state.trusted.insert(probe.clone(), ticket.sent);
        }
    }

    /// Whether the last validation of `probe` may be used without asking
    /// the store: no notice since it was sent, and sent less than `sweep`
    /// ago. The first caller to find it expired counts a sweep.
    pub(crate) fn trusts(&self, probe: &Probe, sweep: Duration) -> bool {
        let mut state = self.state.lock();
        match state.trusted.get(probe) {
            Some(sent) if sent.elapsed() < sweep => true,
            Some(_) => {
                state.trusted.remove(probe);
                self.sweeps.increment(1);
                false
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use object_store::path::Path;

    use super::*;

    const LONG: Duration = Duration::from_secs(3600);

    #[test]
    fn a_validation_is_trusted_until_a_notice() {
        let notices = ChangeNotices::default();
        let list = Probe::List(Some(Path::from("t0/x")));
        let head = Probe::Head(Path::from("t0/x/a.parquet"));
        assert!(!notices.trusts(&list, LONG), "nothing validated yet");
        notices.validated(&list, notices.ticket());
        notices.validated(&head, notices.ticket());
        assert!(notices.trusts(&list, LONG) && notices.trusts(&head, LONG));
        notices.changed();
        assert!(!notices.trusts(&list, LONG) && !notices.trusts(&head, LONG));
        notices.validated(&list, notices.ticket());
        assert!(notices.trusts(&list, LONG), "validated again after the notice");
    }

    #[test]
    fn a_validation_sent_before_a_notice_is_not_trusted() {
        let notices = ChangeNotices::default();
        let list = Probe::List(None);
        let ticket = notices.ticket();
        // The notice lands while the LIST is in flight: its answer may
        // predate the change.
        notices.changed();
        notices.validated(&list, ticket);
        assert!(!notices.trusts(&list, LONG));
    }

    #[test]
    fn the_sweep_ends_trust_and_is_counted_once() {
        let sweeps = Arc::new(AtomicU64::new(0));
        let notices = ChangeNotices::new(Counter::from_arc(sweeps.clone()));
        let list = Probe::List(None);
        notices.validated(&list, notices.ticket());
        assert!(notices.trusts(&list, LONG));
        std::thread::sleep(Duration::from_millis(5));
        assert!(!notices.trusts(&list, Duration::from_millis(1)));
        assert!(!notices.trusts(&list, Duration::from_millis(1)));
        assert_eq!(sweeps.load(Ordering::Relaxed), 1);
    }
}
