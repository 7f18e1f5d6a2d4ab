//! Member back-off: a fleet member that failed in transport is skipped for
//! a while, then tried again. Shared by the client's fleet (scans placed on
//! servers) and the server's S3 API peers (reads forwarded to the owner).

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a member that failed is skipped, by default.
pub const BACKOFF: Duration = Duration::from_secs(15);

/// Whether one member is being skipped after a failure, and until when.
#[derive(Debug, Default)]
pub struct Backoff {
    down_until: Mutex<Option<Instant>>,
}

impl Backoff {
    /// Whether the member is being skipped now.
    pub fn is_down(&self) -> bool {
        self.down_until.lock().is_some_and(|t| Instant::now() < t)
    }

    /// The member failed: skip it for `period` from now.
    pub fn fail_for(&self, period: Duration) {
        *self.down_until.lock() = Some(Instant::now() + period);
    }

    /// The member answered: it is in service again.
    pub fn recover(&self) {
        *self.down_until.lock() = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_member_is_down_for_its_period_then_up() {
        let b = Backoff::default();
        assert!(!b.is_down());
        b.fail_for(Duration::from_secs(60));
        assert!(b.is_down());
        b.recover();
        assert!(!b.is_down());
        b.fail_for(Duration::ZERO);
        assert!(!b.is_down(), "a zero back-off skips nothing");
    }
}
