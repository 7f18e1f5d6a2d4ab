//! Where a scan's partial aggregate runs, decided by what it was measured
//! to cost.
//!
//! A partial aggregate pushed into a scan ([`crate::partial_aggregate`])
//! can run in two places: *pushed whole* (one scan, the server aggregates
//! every row group on all its cores and sends states), or *per row group*
//! like any scan with a compute-side cache ([`crate::scan::hybrid`]): row groups
//! the cache holds are aggregated here, the rest on the server. With few
//! groups the states are next to nothing and pushing whole wins (TPC-H Q1,
//! Q6). With many groups the states are about as many as the rows, and
//! which side is faster depends on the keys and the machines: TPC-H Q18
//! (`GROUP BY l_orderkey`, a state per 4 rows) aggregated faster on the
//! server, ClickBench q33 (`GROUP BY URL`, a state per 4 rows too) 50x
//! faster here. So no threshold on the groups decides it: once a pushed
//! run shows many groups ([`MANY_GROUPS`]), the scan runs per row group
//! until a run answered wholly from the cache is timed, and from then on
//! the faster of the two measured placements is taken.
//!
//! A plain scan's placement is decided the same way
//! ([`PlacementTimes::push_scan_whole`]): one that keeps next to nothing is
//! pushed whole first, then tried per row group, then the faster wins.

use std::time::Duration;

/// States sent per row read above which the aggregate is worth trying per
/// row group: below it the states cost nothing to send and the server's
/// cores win.
pub const MANY_GROUPS: f64 = 0.05;

/// A plain scan whose pushed runs sent fewer rows than this share of the
/// rows they read is pushed down whole until both placements were timed
/// ([`PlacementTimes::push_scan_whole`]): its filters (with a join's keys)
/// keep next to nothing, and the server filters on every core it has, with
/// the page index and bloom filters.
pub const PUSH_WHOLE_BELOW: f64 = 0.01;

/// The measured wall time of one scan's two placements (a moving average
/// of runs, `None` until one was timed).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct PlacementTimes {
    /// Pushed whole.
    pub pushed: Option<f64>,
    /// Per row group, every row group answered from the cache.
    pub local: Option<f64>,
}

/// Which placement a run was, for [`PlacementTimes::observe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    PushedWhole,
    Local,
}

impl PlacementTimes {
    /// Whether the next run pushes the aggregate whole, given the states per
    /// row its pushed runs sent (`None`: never pushed yet).
    pub fn push_whole(&self, states_per_row: Option<f64>) -> bool {
        match (self.pushed, self.local) {
            (Some(pushed), Some(local)) => pushed <= local,
            (_, Some(_)) => false,
            (_, None) => states_per_row.is_none_or(|s| s < MANY_GROUPS),
        }
    }

    /// Whether the next run of a plain scan (no partial aggregate) goes to
    /// the server whole, given the share of the rows read its pushed runs
    /// sent (`None`: never pushed yet). A scan that keeps next to nothing
    /// ([`PUSH_WHOLE_BELOW`]) is pushed whole first; once that was timed,
    /// the next run goes per row group (filling the cache), and once a run
    /// answered wholly from the cache is timed, the faster placement wins.
    /// So no selectivity decides for good: TPC-H SF 1 Q3's `lineitem`
    /// keeps 0.5% under its join filter yet runs 3x faster here, Q17's
    /// keeps 0.1% and runs faster pushed.
    pub fn push_scan_whole(&self, pushed_selectivity: Option<f64>) -> bool {
        match (self.pushed, self.local) {
            (Some(pushed), Some(local)) => pushed <= local,
            (Some(_), None) | (None, Some(_)) => false,
            (None, None) => pushed_selectivity.is_some_and(|s| s < PUSH_WHOLE_BELOW),
        }
    }

    /// Folds a run of `placement` that took `elapsed` into the averages.
    pub fn observe(&mut self, placement: Placement, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let slot = match placement {
            Placement::PushedWhole => &mut self.pushed,
            Placement::Local => &mut self.local,
        };
        *slot = Some(slot.map_or(seconds, |s| 0.5 * s + 0.5 * seconds));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_groups_stay_pushed_many_groups_are_tried_here_then_the_faster_wins() {
        let mut times = PlacementTimes::default();
        assert!(times.push_whole(None), "never seen: pushed");
        assert!(times.push_whole(Some(0.001)), "few groups: pushed");
        times.observe(Placement::PushedWhole, Duration::from_millis(300));
        assert!(!times.push_whole(Some(0.25)), "many groups: tried per row group");
        times.observe(Placement::Local, Duration::from_millis(30));
        assert!(!times.push_whole(Some(0.25)), "here was faster");
        // The server gets faster (or here slower): back to pushing whole.
        for _ in 0..4 {
            times.observe(Placement::Local, Duration::from_millis(900));
        }
        assert!(times.push_whole(Some(0.25)));
        // Q18's shape: timed here once, slower, so pushed from then on.
        let mut q18 = PlacementTimes::default();
        q18.observe(Placement::PushedWhole, Duration::from_millis(100));
        q18.observe(Placement::Local, Duration::from_millis(180));
        assert!(q18.push_whole(Some(0.25)));
    }

    #[test]
    fn a_selective_scan_is_pushed_whole_then_tried_here_then_the_faster_wins() {
        let mut times = PlacementTimes::default();
        assert!(!times.push_scan_whole(None), "never pushed: per row group");
        assert!(!times.push_scan_whole(Some(0.3)), "keeps much: per row group");
        assert!(
            times.push_scan_whole(Some(0.005)),
            "keeps next to nothing: pushed whole first"
        );
        times.observe(Placement::PushedWhole, Duration::from_millis(150));
        assert!(!times.push_scan_whole(Some(0.005)), "then tried here");
        times.observe(Placement::Local, Duration::from_millis(50));
        assert!(!times.push_scan_whole(Some(0.005)), "here was faster (TPC-H Q3)");
        let mut q17 = PlacementTimes::default();
        q17.observe(Placement::PushedWhole, Duration::from_millis(40));
        q17.observe(Placement::Local, Duration::from_millis(90));
        assert!(q17.push_scan_whole(Some(0.001)), "pushed was faster (TPC-H Q17)");
    }
}
