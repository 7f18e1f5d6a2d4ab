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
//!
//! **A try waits until the scan has paid for it** (the ski-rental rule):
//! trying the other placement costs more than a run in the current one (a
//! try here fetches the scan's columns first; a pushed try may be slower),
//! and only a scan that keeps being run repays it. So the other placement
//! is tried once the runs timed in the current one add up to what the try
//! is expected to cost above a run: `n·t ≥ b·r − t`, with `t` the current
//! placement's latest time, `n` its timed runs, `b` the bytes the scan
//! needs (the server's report of a pushed run, the layout's sizes of a run
//! here) and `r` the seconds per byte such a try took ([`TryRates`],
//! learned from this client's own fetching and pushed runs, starting at
//! [`FETCH_SECONDS_PER_BYTE`] and [`PUSH_SECONDS_PER_BYTE`]). A scan run a
//! few times never pays for a try it would not repay (the guard's 3 warm
//! runs of ClickBench q20, 25 ms pushed against a 600 ms fetch, once made
//! its median 1.5x); one run all day tries within a few runs. Whatever the
//! outcome, the time spent learning is at most what the runs so far took.

use std::time::Duration;

/// States sent per row read above which the aggregate is worth trying per
/// row group: below it the states cost nothing to send and the server's
/// cores win.
pub const MANY_GROUPS: f64 = 0.05;

/// A plain scan whose pushed runs sent fewer rows than this share of the
/// rows they read starts pushed down whole, until a try per row group has
/// been repaid and timed ([`PlacementTimes::push_scan_whole`]): its filters (with a join's keys)
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

/// Prior of the seconds per needed byte of a run that fetches a scan's
/// columns into the cache (the server reads them, they cross the link as
/// Arrow or as stored, the client decodes, admits and runs them): 200 MB/s,
/// ClickBench's URL scans on this project's 2-core machines.
pub const FETCH_SECONDS_PER_BYTE: f64 = 5e-9;

/// Prior of the seconds per needed byte of a scan pushed whole (the server
/// scans on all its cores and sends what survives): 1 GB/s.
pub const PUSH_SECONDS_PER_BYTE: f64 = 1e-9;

/// Timed runs in one placement before the other is tried when what the
/// scan needs is unknown (no report: a fleet's pushed runs).
pub const RUNS_WHEN_COST_UNKNOWN: u32 = 4;

/// Runs that moved fewer bytes than this teach no rate.
pub const MIN_RATE_BYTES: u64 = 1 << 20;

/// The weight of each new sample in [`TryRates`].
const RATE_ALPHA: f64 = 0.3;

/// What one run of a scan read, which prices a try of the other placement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunBytes {
    /// The needed columns' bytes of the row groups the run read
    /// (uncompressed, as the layout and the server's report count them; 0:
    /// unknown).
    pub needed: u64,
    /// Of them, the bytes of the row groups it fetched into the cache (the
    /// layout's sizes, as `needed`).
    pub fetched: u64,
}

/// Seconds per needed byte of the runs that try each placement, learned
/// from this client's runs (one estimate per client cache: they measure
/// the link, the server and this machine, not a scan).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TryRates {
    /// A run that fetches what it needs (the start of a try here).
    pub fetch_seconds_per_byte: f64,
    /// A scan pushed whole.
    pub push_seconds_per_byte: f64,
}

impl Default for TryRates {
    fn default() -> Self {
        TryRates {
            fetch_seconds_per_byte: FETCH_SECONDS_PER_BYTE,
            push_seconds_per_byte: PUSH_SECONDS_PER_BYTE,
        }
    }
}

impl TryRates {
    /// Learns from a run of `placement` that took `elapsed` and read
    /// `bytes`, per byte it needed (the unit a try is priced in): a run
    /// that fetched at least half of what it needed (and pushed nothing)
    /// teaches the fetch rate, a warm pushed-whole run (`warm`) the push
    /// rate. A run answered mostly from the cache would make fetching look
    /// free, one timed against only its few fetched bytes ruinous; small
    /// runs teach nothing.
    pub fn observe(&mut self, placement: Placement, warm: bool, elapsed: Duration, bytes: RunBytes) {
        let slot = match placement {
            Placement::Fetched if bytes.fetched.saturating_mul(2) >= bytes.needed => &mut self.fetch_seconds_per_byte,
            Placement::PushedWhole if warm => &mut self.push_seconds_per_byte,
            _ => return,
        };
        if bytes.needed < MIN_RATE_BYTES {
            return;
        }
        let sample = (elapsed.as_secs_f64() / bytes.needed as f64).clamp(1e-12, 1e-6);
        *slot = (1.0 - RATE_ALPHA) * *slot + RATE_ALPHA * sample;
    }
}

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
    /// Pushed runs timed past the warming runs, and runs timed here: the
    /// rent each placement has paid towards a try of the other.
    pub pushed_runs: u32,
    pub local_runs: u32,
    /// The bytes the scan's latest run reported needing (0: unknown).
    pub needed_bytes: u64,
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
    /// row its pushed runs sent (`None`: never pushed yet) and the client's
    /// `rates`: few groups are pushed first, many tried here first; the
    /// other placement is tried once the first was timed and has repaid
    /// the try (module docs), then the faster wins.
    pub fn push_whole(&self, states_per_row: Option<f64>, rates: &TryRates) -> bool {
        self.decide(states_per_row.is_none_or(|s| s < MANY_GROUPS), true, rates)
    }

    /// Whether the next run of a plain scan (no partial aggregate) goes to
    /// the server whole, given the share of the rows read its pushed runs
    /// sent and the share its runs anywhere kept (`None`: not seen). A scan
    /// that keeps next to nothing ([`PUSH_WHOLE_BELOW`]) is pushed whole
    /// first, any other runs per row group first; the other placement is
    /// tried once the first was timed and has repaid the try (pushing only
    /// a scan that keeps under [`EXPLORE_PUSH_BELOW`]), then the faster
    /// wins. So no selectivity decides for good: TPC-H SF 1 Q3's
    /// `lineitem` keeps 0.5% under its join filter yet runs 3x faster
    /// here, Q17's keeps 0.1% and runs faster pushed.
    pub fn push_scan_whole(&self, pushed_selectivity: Option<f64>, selectivity: Option<f64>, rates: &TryRates) -> bool {
        let start = pushed_selectivity.is_some_and(|s| s < PUSH_WHOLE_BELOW);
        let worth_pushing = selectivity
            .or(pushed_selectivity)
            .is_some_and(|s| s < EXPLORE_PUSH_BELOW);
        self.decide(start, worth_pushing, rates)
    }

    /// The placement of the next run: by the measured times once both are
    /// known; the one not yet timed once the other is and has repaid the
    /// try (pushing only if `worth_pushing`; here unless the cache refused
    /// it or [`TRIES_HERE`] runs never got it whole); `start_pushed` before
    /// either.
    fn decide(&self, start_pushed: bool, worth_pushing: bool, rates: &TryRates) -> bool {
        let pushed = self.pushed.filter(|_| self.pushed_warming == 0);
        match (pushed, self.local) {
            (Some(pushed), Some(local)) => pushed <= local,
            (Some(_), None) => !self.trying_here(rates),
            (None, Some(local)) => worth_pushing && self.repaid(local, self.local_runs, rates.push_seconds_per_byte),
            (None, None) => start_pushed,
        }
    }

    /// Whether the runs timed in one placement (`runs`, the latest taking
    /// `current` seconds) add up to what a try of the other is expected to
    /// cost above a run: the scan's needed bytes at `seconds_per_byte`
    /// (module docs); [`RUNS_WHEN_COST_UNKNOWN`] runs when its bytes are
    /// unknown.
    fn repaid(&self, current: f64, runs: u32, seconds_per_byte: f64) -> bool {
        if self.needed_bytes == 0 {
            return runs >= RUNS_WHEN_COST_UNKNOWN;
        }
        let extra = self.needed_bytes as f64 * seconds_per_byte - current;
        f64::from(runs) * current >= extra
    }

    /// Whether the scan is being tried here (pushed whole was timed, here
    /// not yet, the cache neither refused it nor failed to keep it
    /// [`TRIES_HERE`] times): a run per row group now is a try.
    fn exploring_here(&self) -> bool {
        self.pushed.is_some()
            && self.pushed_warming == 0
            && self.local.is_none()
            && !self.refused_here
            && self.tries_here < TRIES_HERE
    }

    /// Whether the next run per row group tries the scan here on purpose
    /// (pushed whole was timed and has repaid the try, here not yet): it
    /// fetches what it lacks at once rather than after repeated uses, so
    /// that the next run is timed.
    ///
    /// Once a try has begun (a run fetched for it) it goes on whatever the
    /// rates learned since: its fetch is paid, and what it fetched would be
    /// the first evicted.
    pub fn trying_here(&self, rates: &TryRates) -> bool {
        self.exploring_here()
            && (self.tries_here > 0
                || self
                    .pushed
                    .is_some_and(|p| self.repaid(p, self.pushed_runs, rates.fetch_seconds_per_byte)))
    }

    /// Records a run of `placement` that took `elapsed` and read `bytes`;
    /// returns whether it was a warm pushed run (one whose time counts).
    pub fn observe(&mut self, placement: Placement, elapsed: Duration, bytes: RunBytes) -> bool {
        let seconds = elapsed.as_secs_f64();
        if bytes.needed > 0 {
            self.needed_bytes = bytes.needed;
        }
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
                if self.pushed_warming == 0 {
                    self.pushed_runs = self.pushed_runs.saturating_add(1);
                }
                return self.pushed_warming == 0;
            }
            Placement::Local => {
                self.local = Some(seconds);
                self.local_runs = self.local_runs.saturating_add(1);
            }
            Placement::Fetched | Placement::PartlyLocal => {
                if self.exploring_here() {
                    self.tries_here += 1;
                    self.refused_here |= placement == Placement::PartlyLocal;
                }
                self.ran_here = true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;
    /// A scan whose needed bytes are unknown (tries wait for
    /// [`RUNS_WHEN_COST_UNKNOWN`] runs).
    const UNKNOWN: RunBytes = RunBytes { needed: 0, fetched: 0 };

    fn rates() -> TryRates {
        TryRates::default()
    }

    /// A scan needing `mb` MB.
    fn needs(mb: u64) -> RunBytes {
        RunBytes {
            needed: mb << 20,
            fetched: 0,
        }
    }

    /// Times pushed whole past its warming runs, each run `ms`, needing
    /// so few bytes that a try is repaid at once.
    fn pushed_warm(ms: u64) -> PlacementTimes {
        let mut times = PlacementTimes::default();
        for _ in 0..=WARMING_RUNS {
            times.observe(Placement::PushedWhole, MS(ms), needs(1));
        }
        times
    }

    #[test]
    fn few_groups_are_pushed_then_tried_here_many_groups_the_other_way_then_the_faster_wins() {
        let r = rates();
        let mut times = PlacementTimes::default();
        assert!(times.push_whole(None, &r), "never seen: pushed");
        times.observe(Placement::PushedWhole, MS(3000), needs(10));
        assert!(
            times.push_whole(Some(0.001), &r),
            "the first run may be cold: pushed again"
        );
        times.observe(Placement::PushedWhole, MS(900), needs(10));
        assert!(
            times.push_whole(Some(0.001), &r),
            "the server may still transcode: pushed again"
        );
        times.observe(Placement::PushedWhole, MS(300), needs(10));
        assert_eq!(times.pushed, Some(0.3), "the latest run counts");
        assert!(
            !times.push_whole(Some(0.001), &r),
            "few groups, pushed was timed, a fetch of 10 MB is repaid: tried here"
        );
        times.observe(Placement::Fetched, MS(900), needs(10));
        assert!(!times.push_whole(Some(0.001), &r), "fetched, not yet timed here");
        times.observe(Placement::Local, MS(100), needs(10));
        assert!(!times.push_whole(Some(0.001), &r), "here was faster (ClickBench q39)");
        times.observe(Placement::Local, MS(900), needs(10));
        assert!(times.push_whole(Some(0.001), &r), "here got slower: pushed again");

        // Many groups: tried here first, then pushed again (warm), then the faster.
        let mut q33 = PlacementTimes::default();
        q33.observe(Placement::PushedWhole, MS(5000), UNKNOWN);
        assert!(!q33.push_whole(Some(0.25), &r), "many groups: tried per row group");
        q33.observe(Placement::PartlyLocal, MS(2000), needs(10));
        q33.observe(Placement::Fetched, MS(2000), needs(10));
        q33.observe(Placement::Local, MS(30), needs(10));
        assert!(
            q33.push_whole(Some(0.25), &r),
            "the cold pushed run is not compared: pushed again"
        );
        q33.observe(Placement::PushedWhole, MS(300), needs(10));
        assert_eq!(q33.pushed_warming, 0, "after runs here the server is warm");
        assert!(!q33.push_whole(Some(0.25), &r), "here was faster (ClickBench q33)");
        // Q18's shape: pushed warm is faster.
        let mut q18 = PlacementTimes::default();
        q18.observe(Placement::Local, MS(180), needs(10));
        q18.observe(Placement::PushedWhole, MS(100), needs(10));
        assert_eq!(q18.pushed_warming, 0, "a pushed run after one here reads a warm server");
        assert!(q18.push_whole(Some(0.25), &r));
    }

    #[test]
    fn a_try_here_waits_until_the_pushed_runs_have_paid_for_its_fetch() {
        let r = rates();
        // ClickBench q20 on 1M rows: 25 ms pushed, ~100 MB to fetch (0.5 s
        // at the prior rate): tried only after ~20 warm runs.
        let mut q20 = PlacementTimes::default();
        let mut runs = 0;
        while q20.push_scan_whole(Some(0.001), None, &r) {
            q20.observe(Placement::PushedWhole, MS(25), needs(100));
            runs += 1;
            assert!(runs < 100, "never tried here");
        }
        let warm = runs - WARMING_RUNS;
        let expected = (100u64 << 20) as f64 * FETCH_SECONDS_PER_BYTE / 0.025 - 1.0;
        assert_eq!(f64::from(warm), expected.ceil(), "n·t ≥ b·r − t after {runs} runs");
        assert!(q20.trying_here(&r), "the next run per row group fetches at once");

        // Unknown bytes: RUNS_WHEN_COST_UNKNOWN warm runs.
        let mut unknown = PlacementTimes::default();
        for _ in 0..WARMING_RUNS + RUNS_WHEN_COST_UNKNOWN {
            assert!(unknown.push_whole(Some(0.001), &r));
            unknown.observe(Placement::PushedWhole, MS(25), UNKNOWN);
        }
        assert!(
            !unknown.push_whole(Some(0.001), &r),
            "tried after {RUNS_WHEN_COST_UNKNOWN} warm runs"
        );

        // A slower fetch rate learned from this client's fetches delays it.
        let mut slow = r;
        slow.fetch_seconds_per_byte *= 4.0;
        let mut times = pushed_warm(25);
        times.needed_bytes = 4 << 20;
        assert!(times.trying_here(&r), "a 21 ms fetch is repaid by one 25 ms run");
        assert!(!times.trying_here(&slow), "an 84 ms one is not");
        // Once begun, a try goes on though its fetch taught a slower rate.
        times.observe(Placement::Fetched, MS(90), needs(4));
        assert!(times.trying_here(&slow), "the fetch is paid: the try is finished");
        assert!(!times.push_whole(Some(0.001), &slow));
    }

    #[test]
    fn a_pushed_try_waits_until_the_runs_here_have_paid_for_it() {
        let r = rates();
        let mut times = PlacementTimes::default();
        times.observe(Placement::Fetched, MS(900), needs(200));
        // 200 MB at 1 ns/B is ~0.21 s: runs of 40 ms here repay it after 5.
        let mut runs = 0;
        while !times.push_scan_whole(None, Some(0.02), &r) {
            times.observe(Placement::Local, MS(40), needs(200));
            runs += 1;
            assert!(runs < 100, "never tried pushed");
        }
        let expected = (200u64 << 20) as f64 * PUSH_SECONDS_PER_BYTE / 0.040 - 1.0;
        assert_eq!(f64::from(runs), expected.ceil());
    }

    #[test]
    fn rates_are_learned_from_fetching_and_warm_pushed_runs_only() {
        let mut r = TryRates::default();
        let fetched = RunBytes {
            needed: 100 << 20,
            fetched: 100 << 20,
        };
        for _ in 0..30 {
            r.observe(Placement::Fetched, false, MS(1000), fetched);
        }
        let learned = 1.0 / (100u64 << 20) as f64;
        assert!((r.fetch_seconds_per_byte - learned).abs() < learned * 0.01, "{r:?}");
        let before = r;
        r.observe(Placement::PushedWhole, false, MS(5000), needs(100));
        r.observe(Placement::Local, false, MS(5000), fetched);
        r.observe(Placement::Fetched, false, MS(5000), RunBytes::default());
        r.observe(Placement::Fetched, false, Duration::ZERO, needs(100));
        let mostly_cached = RunBytes {
            needed: 100 << 20,
            fetched: 1 << 20,
        };
        r.observe(Placement::Fetched, false, MS(5000), mostly_cached);
        assert_eq!(
            r, before,
            "cold pushed, local, empty, tiny and mostly cached runs teach nothing"
        );
        r.observe(Placement::PushedWhole, true, MS(500), needs(100));
        assert!(
            r.push_seconds_per_byte > PUSH_SECONDS_PER_BYTE,
            "a warm pushed run does"
        );
        r.observe(Placement::Fetched, false, Duration::from_secs(1_000_000), fetched);
        assert!(r.fetch_seconds_per_byte <= 1e-6, "samples are clamped");
    }

    #[test]
    fn a_cache_that_refuses_the_scan_or_never_keeps_it_stops_trying_here() {
        let r = rates();
        let mut refused = pushed_warm(300);
        assert!(refused.trying_here(&r) && !refused.push_whole(Some(0.001), &r));
        refused.observe(Placement::PartlyLocal, MS(900), needs(1));
        assert!(
            refused.push_whole(Some(0.001), &r),
            "some row groups went to the server: pushed"
        );
        let mut evicted = pushed_warm(300);
        for _ in 0..TRIES_HERE {
            assert!(!evicted.push_whole(Some(0.001), &r));
            evicted.observe(Placement::Fetched, MS(900), needs(1));
        }
        assert!(evicted.push_whole(Some(0.001), &r), "fetched but never kept: pushed");
    }

    #[test]
    fn a_selective_scan_is_pushed_whole_then_tried_here_then_the_faster_wins() {
        let r = rates();
        let mut times = PlacementTimes::default();
        assert!(!times.push_scan_whole(None, None, &r), "never pushed: per row group");
        assert!(
            !times.push_scan_whole(Some(0.3), Some(0.3), &r),
            "keeps much: per row group"
        );
        assert!(
            times.push_scan_whole(Some(0.005), None, &r),
            "keeps next to nothing: pushed whole first"
        );
        for _ in 0..WARMING_RUNS {
            times.observe(Placement::PushedWhole, MS(150), needs(10));
            assert!(times.push_scan_whole(Some(0.005), None, &r), "warming up: pushed again");
        }
        times.observe(Placement::PushedWhole, MS(150), needs(10));
        assert!(!times.push_scan_whole(Some(0.005), None, &r), "then tried here");
        times.observe(Placement::Local, MS(50), needs(10));
        assert!(
            !times.push_scan_whole(Some(0.005), None, &r),
            "here was faster (TPC-H Q3)"
        );
        let mut q17 = PlacementTimes::default();
        q17.observe(Placement::Local, MS(90), needs(10));
        q17.observe(Placement::PushedWhole, MS(40), needs(10));
        assert!(
            q17.push_scan_whole(Some(0.001), None, &r),
            "pushed was faster (TPC-H Q17)"
        );
    }

    #[test]
    fn a_scan_run_here_is_tried_pushed_only_when_it_keeps_little() {
        let r = rates();
        let mut times = PlacementTimes::default();
        times.observe(Placement::PartlyLocal, MS(900), needs(10));
        times.observe(Placement::Fetched, MS(900), needs(10));
        times.observe(Placement::Local, MS(400), needs(10));
        assert!(!times.push_scan_whole(None, Some(0.5), &r), "keeps half: stays here");
        assert!(
            !times.push_scan_whole(None, None, &r),
            "selectivity unknown: stays here"
        );
        assert!(times.push_scan_whole(None, Some(0.02), &r), "keeps 2%: tried pushed");
        times.observe(Placement::PushedWhole, MS(60), needs(10));
        assert_eq!(times.pushed_warming, 0, "after runs here the server is warm");
        assert!(
            times.push_scan_whole(Some(0.02), Some(0.02), &r),
            "pushed was faster (ClickBench q22)"
        );
    }
}
