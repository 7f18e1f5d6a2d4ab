//! Where a scan runs, pushed whole or per row group, decided by what each
//! placement was measured to cost.
//!
//! A partial aggregate pushed into a scan ([`crate::partial_aggregate`])
//! can run in two places: *pushed whole* (one scan, the server aggregates
//! every row group on all its cores and sends states), or *per row group*
//! like any scan with a compute-side cache ([`crate::scan::hybrid`]): row groups
//! the cache holds are aggregated here, the rest on the server. With few
//! groups the states are next to nothing and pushing whole usually wins
//! (TPC-H Q1, Q6), so such a scan starts pushed. With many groups
//! ([`MANY_GROUPS`]) the states are about as many as the rows, and which
//! side is faster depends on the keys and the machines: TPC-H Q18
//! (`GROUP BY l_orderkey`, a state per 4 rows) aggregated faster on the
//! server, ClickBench q33 (`GROUP BY URL`, a state per 4 rows too) 50x
//! faster here; such a scan starts per row group. So no threshold on the
//! groups decides for good: the faster of the two measured placements does.
//!
//! A plain scan's placement is decided the same way
//! ([`PlacementTimes::push_scan_whole`]): one that keeps next to nothing
//! ([`PUSH_WHOLE_BELOW`]) starts pushed whole, any other per row group.
//!
//! Both ways, whichever placement the rule of thumb did not start with is
//! tried too, once the other was timed: a partial aggregate with few
//! groups is tried here (ClickBench q39, `CounterID = 62` grouped by URL
//! and Referer: 335 ms pushed to liquid, 145 ms here), and a scan run here
//! that keeps under [`EXPLORE_PUSH_BELOW`] of its rows is tried pushed
//! (q22, `Title LIKE '%Google%' AND URL NOT LIKE '%.google.%'`: 399 ms
//! here, 63 ms on liquid, which matches each pattern once per dictionary
//! value). The first pushed runs of a scan nothing ran before may find
//! the server cold (reading the store, transcoding in the background): a
//! pushed time is compared only from the third such run on (at once for a
//! scan that ran here before: the server served its data then). Each
//! placement's latest time counts, so one taken while the server warmed up
//! does not linger.
//! Trying here stops as soon as the cache refuses part of the scan (full
//! of what scores higher: a run sent row groups to the server), or after
//! [`TRIES_HERE`] runs that never answered wholly from the cache.

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

/// A plain scan timed here that kept fewer rows than this share is tried
/// pushed whole once: pushing sends at most this share of its rows, and
/// the server may filter them much faster (on encoded data, with its
/// indexes). One keeping more would send most of what it reads.
pub const EXPLORE_PUSH_BELOW: f64 = 0.1;

/// Runs tried here (after pushed whole was timed) that did not answer
/// wholly from the cache after which a scan stops trying here: the cache
/// does not keep it.
pub const TRIES_HERE: u32 = 3;

/// Pushed runs of a scan nothing ran before whose times are not compared:
/// the first reads the store, the next may find the server still
/// transcoding what the first read.
pub const WARMING_RUNS: u32 = 2;

/// The measured wall time of one scan's two placements (the latest run of
/// each, `None` until one was timed).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct PlacementTimes {
    /// Pushed whole.
    pub pushed: Option<f64>,
    /// Per row group, every row group answered from the cache.
    pub local: Option<f64>,
    /// Pushed runs still to come before `pushed` is compared: a scan's
    /// first runs may find the server cold ([`WARMING_RUNS`]).
    pub pushed_warming: u32,
    /// Runs tried here (pushed whole timed, here not yet) that were not
    /// answered wholly from the cache.
    pub tries_here: u32,
    /// Whether a run tried here sent row groups to the server: the cache
    /// would not take them all.
    pub refused_here: bool,
    /// Whether a run went per row group before (the server read the scan's
    /// data then: a pushed run after it is not cold).
    pub ran_here: bool,
}

/// Which placement a run was, for [`PlacementTimes::observe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    PushedWhole,
    Local,
    /// Per row group, every row group here but some fetched first (not
    /// timed: the next run is the one answered from the cache).
    Fetched,
    /// Per row group, some row groups on the server (not timed).
    PartlyLocal,
}

impl PlacementTimes {
    /// Whether the next run pushes the aggregate whole, given the states per
    /// row its pushed runs sent (`None`: never pushed yet): few groups are
    /// pushed first, many tried here first; the other placement is tried
    /// once the first was timed, then the faster wins.
    pub fn push_whole(&self, states_per_row: Option<f64>) -> bool {
        self.decide(states_per_row.is_none_or(|s| s < MANY_GROUPS), true)
    }

    /// Whether the next run of a plain scan (no partial aggregate) goes to
    /// the server whole, given the share of the rows read its pushed runs
    /// sent and the share its runs anywhere kept (`None`: not seen). A scan
    /// that keeps next to nothing ([`PUSH_WHOLE_BELOW`]) is pushed whole
    /// first, any other runs per row group first; the other placement is
    /// tried once the first was timed (pushing only a scan that keeps under
    /// [`EXPLORE_PUSH_BELOW`]), then the faster wins. So no selectivity
    /// decides for good: TPC-H SF 1 Q3's `lineitem` keeps 0.5% under its
    /// join filter yet runs 3x faster here, Q17's keeps 0.1% and runs
    /// faster pushed.
    pub fn push_scan_whole(&self, pushed_selectivity: Option<f64>, selectivity: Option<f64>) -> bool {
        let start = pushed_selectivity.is_some_and(|s| s < PUSH_WHOLE_BELOW);
        let worth_pushing = selectivity
            .or(pushed_selectivity)
            .is_some_and(|s| s < EXPLORE_PUSH_BELOW);
        self.decide(start, worth_pushing)
    }

    /// The placement of the next run: by the measured times once both are
    /// known; the one not yet timed once the other is (pushing only if
    /// `worth_pushing`; here unless the cache refused it or [`TRIES_HERE`]
    /// runs never got it whole); `start_pushed` before either.
    fn decide(&self, start_pushed: bool, worth_pushing: bool) -> bool {
        let pushed = self.pushed.filter(|_| self.pushed_warming == 0);
        match (pushed, self.local) {
            (Some(pushed), Some(local)) => pushed <= local,
            (Some(_), None) => !self.trying_here(),
            (None, Some(_)) => worth_pushing,
            (None, None) => start_pushed,
        }
    }

    /// Whether the next run per row group tries the scan here on purpose
    /// (pushed whole was timed, here not yet): it fetches what it lacks at
    /// once rather than after repeated uses, so that the next run is timed.
    pub fn trying_here(&self) -> bool {
        self.pushed.is_some()
            && self.pushed_warming == 0
            && self.local.is_none()
            && !self.refused_here
            && self.tries_here < TRIES_HERE
    }

    /// Records a run of `placement` that took `elapsed`.
    pub fn observe(&mut self, placement: Placement, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        match placement {
            Placement::PushedWhole => {
                self.pushed_warming = if self.ran_here || self.local.is_some() {
                    0 // the server has served the scan's data since
                } else if self.pushed.is_none() {
                    WARMING_RUNS
                } else {
                    self.pushed_warming.saturating_sub(1)
                };
                self.pushed = Some(seconds);
            }
            Placement::Local => self.local = Some(seconds),
            Placement::Fetched | Placement::PartlyLocal => {
                if self.trying_here() {
                    self.tries_here += 1;
                    self.refused_here |= placement == Placement::PartlyLocal;
                }
                self.ran_here = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// Times pushed whole past its warming runs.
    fn pushed_warm(ms: u64) -> PlacementTimes {
        let mut times = PlacementTimes::default();
        for _ in 0..=WARMING_RUNS {
            times.observe(Placement::PushedWhole, MS(ms));
        }
        times
    }

    #[test]
    fn few_groups_are_pushed_then_tried_here_many_groups_the_other_way_then_the_faster_wins() {
        let mut times = PlacementTimes::default();
        assert!(times.push_whole(None), "never seen: pushed");
        times.observe(Placement::PushedWhole, MS(3000));
        assert!(times.push_whole(Some(0.001)), "the first run may be cold: pushed again");
        times.observe(Placement::PushedWhole, MS(900));
        assert!(
            times.push_whole(Some(0.001)),
            "the server may still transcode: pushed again"
        );
        times.observe(Placement::PushedWhole, MS(300));
        assert_eq!(times.pushed, Some(0.3), "the latest run counts");
        assert!(
            !times.push_whole(Some(0.001)),
            "few groups, pushed was timed: tried here"
        );
        times.observe(Placement::Fetched, MS(900));
        assert!(!times.push_whole(Some(0.001)), "fetched, not yet timed here");
        times.observe(Placement::Local, MS(100));
        assert!(!times.push_whole(Some(0.001)), "here was faster (ClickBench q39)");
        times.observe(Placement::Local, MS(900));
        assert!(times.push_whole(Some(0.001)), "here got slower: pushed again");

        // Many groups: tried here first, then pushed again (warm), then the faster.
        let mut q33 = PlacementTimes::default();
        q33.observe(Placement::PushedWhole, MS(5000));
        assert!(!q33.push_whole(Some(0.25)), "many groups: tried per row group");
        q33.observe(Placement::PartlyLocal, MS(2000));
        q33.observe(Placement::Fetched, MS(2000));
        q33.observe(Placement::Local, MS(30));
        assert!(
            q33.push_whole(Some(0.25)),
            "the cold pushed run is not compared: pushed again"
        );
        q33.observe(Placement::PushedWhole, MS(300));
        assert_eq!(q33.pushed_warming, 0, "after runs here the server is warm");
        assert!(!q33.push_whole(Some(0.25)), "here was faster (ClickBench q33)");
        // Q18's shape: pushed warm is faster.
        let mut q18 = PlacementTimes::default();
        q18.observe(Placement::Local, MS(180));
        q18.observe(Placement::PushedWhole, MS(100));
        assert_eq!(q18.pushed_warming, 0, "a pushed run after one here reads a warm server");
        assert!(q18.push_whole(Some(0.25)));
    }

    #[test]
    fn a_cache_that_refuses_the_scan_or_never_keeps_it_stops_trying_here() {
        let mut refused = pushed_warm(300);
        assert!(refused.trying_here() && !refused.push_whole(Some(0.001)));
        refused.observe(Placement::PartlyLocal, MS(900));
        assert!(
            refused.push_whole(Some(0.001)),
            "some row groups went to the server: pushed"
        );
        let mut evicted = pushed_warm(300);
        for _ in 0..TRIES_HERE {
            assert!(!evicted.push_whole(Some(0.001)));
            evicted.observe(Placement::Fetched, MS(900));
        }
        assert!(evicted.push_whole(Some(0.001)), "fetched but never kept: pushed");
    }

    #[test]
    fn a_selective_scan_is_pushed_whole_then_tried_here_then_the_faster_wins() {
        let mut times = PlacementTimes::default();
        assert!(!times.push_scan_whole(None, None), "never pushed: per row group");
        assert!(
            !times.push_scan_whole(Some(0.3), Some(0.3)),
            "keeps much: per row group"
        );
        assert!(
            times.push_scan_whole(Some(0.005), None),
            "keeps next to nothing: pushed whole first"
        );
        for _ in 0..WARMING_RUNS {
            times.observe(Placement::PushedWhole, MS(150));
            assert!(times.push_scan_whole(Some(0.005), None), "warming up: pushed again");
        }
        times.observe(Placement::PushedWhole, MS(150));
        assert!(!times.push_scan_whole(Some(0.005), None), "then tried here");
        times.observe(Placement::Local, MS(50));
        assert!(!times.push_scan_whole(Some(0.005), None), "here was faster (TPC-H Q3)");
        let mut q17 = PlacementTimes::default();
        q17.observe(Placement::Local, MS(90));
        q17.observe(Placement::PushedWhole, MS(40));
        assert!(q17.push_scan_whole(Some(0.001), None), "pushed was faster (TPC-H Q17)");
    }

    #[test]
    fn a_scan_run_here_is_tried_pushed_only_when_it_keeps_little() {
        let mut times = PlacementTimes::default();
        times.observe(Placement::PartlyLocal, MS(900));
        times.observe(Placement::Fetched, MS(900));
        times.observe(Placement::Local, MS(400));
        assert!(!times.push_scan_whole(None, Some(0.5)), "keeps half: stays here");
        assert!(!times.push_scan_whole(None, None), "selectivity unknown: stays here");
        assert!(times.push_scan_whole(None, Some(0.02)), "keeps 2%: tried pushed");
        times.observe(Placement::PushedWhole, MS(60));
        assert_eq!(times.pushed_warming, 0, "after runs here the server is warm");
        assert!(
            times.push_scan_whole(Some(0.02), Some(0.02)),
            "pushed was faster (ClickBench q22)"
        );
    }
}
