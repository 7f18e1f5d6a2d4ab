//! What a miss costs: the price cost-aware eviction ranks entries by.
//!
//! FlexPushdownDB (sec. 5.4) weighs each cached segment by the work a miss
//! would cause, measured in time: network transfer, plus scanning and
//! decoding. For Silt's tiers that is `requests x latency + bytes / bandwidth
//! + bytes x decode time` ([`CostModel`]). Two refinements make it useful:
//!
//! - **Measured, not assumed.** [`MeasuredCost`] keeps the store's request
//!   latency and bandwidth as exponentially weighted moving averages of the
//!   GETs the tier really made, so the same policy prices a local MinIO and a
//!   cross-region bucket differently.
//! - **Priced per GET, shared per page.** A GET of `n` pages pays one round
//!   trip for all of them, so each page carries `latency / n` plus its own
//!   transfer and decode ([`CostModel::share_of_request`]). A page that came
//!   alone (a small column chunk, a footer) is dear to lose; a page of a long
//!   sequential run is cheap, because it would come back with its neighbours.
//!   With pages of one size this is what makes `weighted-lfu` order
//!   differently from `lfu`.
//!
//! The same [`CostModel`] prices trace replays (`silt bench replay`), so what
//! the replay reports is what the live tier optimises.

use std::sync::Mutex;
use std::time::Duration;

/// Estimated time to get an entry back after it is evicted:
/// `requests x request_latency + size / bandwidth + size x decode time`.
///
/// A model rather than per-entry timings, so that a cost is known at
/// admission (before the entry has ever been refetched). The defaults are
/// rough figures for an S3-class store read over one connection and Parquet
/// decoding on one core; a live tier replaces latency and bandwidth with what
/// it measures ([`MeasuredCost`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// Time to first byte of one ranged GET.
    pub request_latency: Duration,
    /// Transfer rate of one request, in bytes per second (0 is treated as 1).
    pub bandwidth_bytes_per_sec: u64,
    /// Time to decode one byte into the cached form, in nanoseconds; 0 for a
    /// tier that keeps raw bytes (a hit decodes them just as a refetch would,
    /// so decoding is not saved by caching them).
    pub decode_ns_per_byte: f64,
}

impl Default for CostModel {
    /// 30 ms to first byte, 90 MB/s per request, 1 ns per byte to decode.
    fn default() -> Self {
        CostModel {
            request_latency: Duration::from_millis(30),
            bandwidth_bytes_per_sec: 90_000_000,
            decode_ns_per_byte: 1.0,
        }
    }
}

/// What answering a read by pushdown (filtering where the data lives and
/// shipping only the surviving share) would cost and save, per FlexPushdownDB
/// eq. 1-2: the miss still pays the round trip, but moves only
/// `selectivity x bytes`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pushdown {
    /// Estimated time of the pushed-down read, in nanoseconds.
    pub cost_ns: f64,
    /// Bytes that do not cross the network compared with fetching them all.
    pub bytes_saved: u64,
}

impl CostModel {
    /// Cost in nanoseconds of refetching `size` bytes with one request, the
    /// usual case for a cache entry (one page run, one column chunk).
    pub fn cost(&self, size: u64) -> f64 {
        self.cost_of(1, size)
    }

    /// Cost in nanoseconds of refetching `size` bytes with `requests` requests.
    pub fn cost_of(&self, requests: u32, size: u64) -> f64 {
        f64::from(requests) * self.latency_ns() + self.transfer_and_decode(size)
    }

    /// Cost in nanoseconds of one of the `pages` entries that one request
    /// brought back together, `bytes` long: its share of the request's round
    /// trip (`latency / pages`) plus its own transfer and decode. `pages` of
    /// 0 counts as 1.
    pub fn share_of_request(&self, pages: usize, bytes: u64) -> f64 {
        self.latency_ns() / pages.max(1) as f64 + self.transfer_and_decode(bytes)
    }

    /// The cost and saving of serving `bytes` by pushdown when a filter keeps
    /// `selectivity` (0..=1, clamped) of them. Only where the data can be
    /// filtered remotely: the disk tier holds raw object bytes that are never
    /// pushed down, so it prices misses with [`share_of_request`](Self::share_of_request).
    pub fn pushdown(&self, bytes: u64, selectivity: f64) -> Pushdown {
        let kept = if selectivity.is_nan() {
            1.0
        } else {
            selectivity.clamp(0.0, 1.0)
        };
        let shipped = (bytes as f64 * kept).round() as u64;
        Pushdown {
            cost_ns: self.latency_ns() + self.transfer_ns(shipped),
            bytes_saved: bytes - shipped.min(bytes),
        }
    }

    fn latency_ns(&self) -> f64 {
        self.request_latency.as_nanos() as f64
    }

    fn transfer_ns(&self, bytes: u64) -> f64 {
        bytes as f64 * 1e9 / self.bandwidth_bytes_per_sec.max(1) as f64
    }

    fn transfer_and_decode(&self, bytes: u64) -> f64 {
        self.transfer_ns(bytes) + bytes as f64 * self.decode_ns_per_byte
    }
}

/// Weight of a new sample in the moving averages: about the last 10 GETs
/// count, so a change of store or network shows within seconds of traffic
/// while one slow request (a retry, a GC pause) moves the estimate little.
const ALPHA: f64 = 0.2;

/// The object store's latency and bandwidth as measured on real GETs, and the
/// cost of a fetched page under them.
///
/// One elapsed time per GET mixes latency and transfer; they are separated by
/// which one the current estimate says dominates: a GET whose transfer should
/// take less than the round trip teaches latency (the elapsed time minus the
/// expected transfer), a larger one teaches bandwidth (its bytes over the
/// elapsed time minus the expected latency, at least half the elapsed time).
/// Both start from a prior [`CostModel`], so costs are sensible before the
/// first GET. Thread-safe and cheap: one short lock per GET and per priced run.
#[derive(Debug)]
pub struct MeasuredCost {
    estimate: Mutex<Estimate>,
    decode_ns_per_byte: f64,
}

#[derive(Debug, Clone, Copy)]
struct Estimate {
    latency_ns: f64,
    ns_per_byte: f64,
    samples: u64,
}

impl MeasuredCost {
    /// Starts from `prior`'s latency and bandwidth; its decode time is kept
    /// as is (decoding is not measured here).
    pub fn new(prior: CostModel) -> Self {
        MeasuredCost {
            estimate: Mutex::new(Estimate {
                latency_ns: prior.latency_ns(),
                ns_per_byte: 1e9 / prior.bandwidth_bytes_per_sec.max(1) as f64,
                samples: 0,
            }),
            decode_ns_per_byte: prior.decode_ns_per_byte,
        }
    }

    /// Records one GET that returned `bytes` in `elapsed` (request sent to
    /// last byte read).
    pub fn observe(&self, bytes: u64, elapsed: Duration) {
        let elapsed = elapsed.as_nanos() as f64;
        let mut e = self.lock();
        let transfer = bytes as f64 * e.ns_per_byte;
        if bytes == 0 || transfer <= e.latency_ns {
            let sample = (elapsed - transfer).clamp(0.0, elapsed);
            e.latency_ns += ALPHA * (sample - e.latency_ns);
        } else {
            let moving = (elapsed - e.latency_ns).max(elapsed / 2.0);
            e.ns_per_byte += ALPHA * (moving / bytes as f64 - e.ns_per_byte);
        }
        e.samples += 1;
    }

    /// How many GETs have been observed.
    pub fn samples(&self) -> u64 {
        self.lock().samples
    }

    /// The current estimates as a model.
    pub fn model(&self) -> CostModel {
        let e = *self.lock();
        CostModel {
            request_latency: Duration::from_nanos(e.latency_ns.round() as u64),
            bandwidth_bytes_per_sec: (1e9 / e.ns_per_byte.max(1e-6)).round() as u64,
            decode_ns_per_byte: self.decode_ns_per_byte,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Estimate> {
        self.estimate.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODEL: CostModel = CostModel {
        request_latency: Duration::from_millis(10),
        bandwidth_bytes_per_sec: 1_000_000,
        decode_ns_per_byte: 2.0,
    };

    #[test]
    fn cost_adds_latency_transfer_and_decode() {
        // 10 ms + 1000 B at 1 MB/s (1 ms) + 2 us of decoding.
        assert_eq!(MODEL.cost(1000), 10e6 + 1e6 + 2e3);
        assert_eq!(MODEL.cost_of(3, 0), 30e6);
    }

    #[test]
    fn pages_of_one_get_share_its_round_trip() {
        // Alone, a page pays the whole round trip; one of four pays a quarter.
        assert_eq!(MODEL.share_of_request(1, 1000), MODEL.cost(1000));
        assert_eq!(MODEL.share_of_request(4, 1000), 2.5e6 + 1e6 + 2e3);
        assert_eq!(MODEL.share_of_request(0, 0), 10e6);
        // The four together cost what one GET of their bytes costs.
        let four: f64 = (0..4).map(|_| MODEL.share_of_request(4, 1000)).sum();
        assert!((four - MODEL.cost(4000)).abs() < 1e-6);
    }

    #[test]
    fn pushdown_ships_only_the_surviving_share() {
        let p = MODEL.pushdown(1000, 0.1);
        assert_eq!(p.bytes_saved, 900);
        assert_eq!(p.cost_ns, 10e6 + 0.1e6);
        assert_eq!(MODEL.pushdown(1000, 7.0).bytes_saved, 0);
        assert_eq!(MODEL.pushdown(1000, f64::NAN).bytes_saved, 0);
        assert_eq!(MODEL.pushdown(1000, -1.0).bytes_saved, 1000);
    }

    #[test]
    fn measured_estimates_converge_to_the_store() {
        // The prior is far off: 30 ms and 90 MB/s. The store answers in 2 ms
        // and moves 500 MB/s (2 ns per byte).
        let measured = MeasuredCost::new(CostModel::default());
        let get = |bytes: u64| Duration::from_nanos(2_000_000 + 2 * bytes);
        for i in 0..200 {
            // Small GETs teach latency, large ones bandwidth.
            let bytes = if i % 2 == 0 { 4096 } else { 16 << 20 };
            measured.observe(bytes, get(bytes));
        }
        let m = measured.model();
        let latency_ms = m.request_latency.as_secs_f64() * 1e3;
        assert!((latency_ms - 2.0).abs() < 0.2, "latency {latency_ms} ms");
        let mbps = m.bandwidth_bytes_per_sec as f64 / 1e6;
        assert!((mbps - 500.0).abs() < 25.0, "bandwidth {mbps} MB/s");
        assert_eq!(m.decode_ns_per_byte, 1.0, "decode comes from the prior");
        assert_eq!(measured.samples(), 200);
    }

    #[test]
    fn measured_estimates_stay_finite_on_odd_samples() {
        let measured = MeasuredCost::new(MODEL);
        for (bytes, ns) in [(0, 0), (u64::MAX / 4, 1), (1, u64::MAX / 4), (10, 0)] {
            measured.observe(bytes, Duration::from_nanos(ns));
            let m = measured.model();
            assert!(m.share_of_request(3, 1 << 20).is_finite());
            assert!(m.bandwidth_bytes_per_sec > 0);
        }
    }
}
