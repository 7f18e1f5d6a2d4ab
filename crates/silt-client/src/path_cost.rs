//! The cost model that picks between pushing a row group down and the
//! *hybrid* path (filter on the compute side, fetch only the surviving rows
//! of the columns it lacks), and decides when a scan's answer should come
//! compressed; with the estimates it runs on, learned per server from the
//! client's own transfers ([`Calibration`]).
//!
//! Costs are seconds of the query's critical path per row group:
//!
//! - **pushdown**: the server scans the filter's columns and decodes the
//!   surviving rows of every projected column; those rows travel:
//!   `F·σ + s·P·(σ + λ)`;
//! - **hybrid**: the client scans the filter's columns from its cache and
//!   decodes the surviving rows of the projected columns it holds; it sends
//!   the row bitmap (`rows / 8` bytes) in one more request, and the server
//!   decodes and sends the surviving rows of the missing ones:
//!   `ρ + F·κ + rows/8·λ + s·Pₗ·κ + s·Pₘ·(σ + λ)`;
//! - **local** (everything cached): `F·κ + s·P·κ`;
//! - **fetch** (the row group whole, then local): `ρ + (F + P)·(σ + λ) + F·κ + s·P·κ`;
//!
//! where `F` is the filter-only columns' bytes, `P = Pₗ + Pₘ` the projected
//! columns' bytes (held locally, missing; uncompressed, as the layout gives
//! them), `s` the scan's observed selectivity, and the four estimates
//! ([`Estimates`]): `ρ` the link's round trip, `λ` the link's seconds per
//! byte, `σ` the server's scan seconds per byte, `κ` the client's own scan
//! (decode + filter) seconds per byte. Hybrid wins when the local projected
//! columns' surviving bytes, moved and scanned, outweigh the bitmap and a
//! round trip. Fetching a row group whole is an investment the cache's
//! admission policy decides ([`crate::local_cache`]); local always wins when
//! everything is cached; local and fetch are priced for `EXPLAIN ANALYZE`.
//!
//! **Compression** ([`Calibration::compression`]): an answer of `b` bytes
//! comes compressed with codec `c` when `b·(1 − r_c)·λ > b/C_c + b/D_c`,
//! the link seconds saved above the seconds compressing (server) and
//! decompressing (client), with `r_c` the expected compressed/uncompressed
//! ratio and `C_c`, `D_c` the codec's rates; the codec saving most wins,
//! and answers expected under [`MIN_COMPRESSED_BYTES`] never are.
//!
//! **What is learned.** Every scan the client runs on a server
//! ([`crate::client::ScanStream`]) asks for the server's
//! [`silt_proto::ScanReport`] and ends in a [`Transfer`]; each estimate is a
//! moving average (weight [`ALPHA`] per sample) that starts at its prior:
//!
//! - `ρ` ← time to the first message − the server's time to its first
//!   message (planning, validation, first batch);
//! - `λ` ← (elapsed − ρ − the server's planning, scan and encode seconds) /
//!   bytes received, from answers of at least [`MIN_LINK_BYTES`]; when that
//!   remainder is under a tenth of the transfer (the server, not the link,
//!   was the bottleneck), `(elapsed − ρ) / bytes` is only a bound the link
//!   is at least as fast as, fed only when the estimate is slower than it;
//! - `σ` ← the server's scan seconds / its bytes scanned (uncompressed
//!   bytes of the needed column chunks of the row groups it read), from
//!   scans of at least [`MIN_MEASURED_BYTES`];
//! - `κ` ← the seconds of a local or hybrid row group's run here (filter,
//!   decode, assemble; not its fetch) / its needed bytes;
//! - `r_c` ← bytes sent / uncompressed Arrow bytes of compressed answers.
//!
//! Every sample is clamped to a plausible range (a rate between 1 MB/s and
//! 100 GB/s for `λ`, 1 MB/s and 1 TB/s for `σ` and `κ`; `ρ` up to 10 s), no
//! division is by less than a microsecond or a kilobyte, and samples from
//! transfers too small to measure are dropped. The priors are the constants
//! below; [`crate::SiltTableOptions::link_bytes_per_second`] replaces the
//! link's prior only: the link is still learned from there.
//! [`Calibration::pin`] runs the model on given estimates instead (a test
//! or benchmark that needs one model's choices on any machine).

use std::time::Duration;

use silt_proto::{IpcCompression, ScanReport};
use std::sync::{Mutex, MutexGuard};

/// The link's prior, bytes per second between client and server: 10
/// Gbit/s, a cache server in the compute's rack.
/// [`crate::SiltTableOptions::link_bytes_per_second`] overrides it.
pub const DEFAULT_LINK_BYTES_PER_SECOND: f64 = 1.25e9;

/// Prior of the seconds to scan (decode, filter) a byte of a column, on
/// either side.
pub const SCAN_SECONDS_PER_BYTE: f64 = 1.0 / 2.0e9;

/// Prior of the fixed cost of one more Flight request (ticket, plan, first
/// batch) with a few in flight at once: ~0.25 ms warm on a local link.
pub const ROUND_TRIP_SECONDS: f64 = 250e-6;

/// The weight of each new sample in a moving estimate.
pub const ALPHA: f64 = 0.2;

/// Answers smaller than this teach nothing about the link's bandwidth.
pub const MIN_LINK_BYTES: u64 = 1 << 20;

/// Scans of fewer bytes than this teach nothing about a scan rate.
pub const MIN_MEASURED_BYTES: u64 = 64 << 10;

/// Answers expected smaller than this are never compressed.
pub const MIN_COMPRESSED_BYTES: f64 = 64.0 * 1024.0;

/// A compression codec's priors: bytes per second compressing (one core of
/// the server) and decompressing (the client), and the ratio expected
/// (compressed / uncompressed) until observed.
#[derive(Debug, Clone, Copy)]
pub struct CodecPrior {
    pub codec: IpcCompression,
    pub compress_bytes_per_second: f64,
    pub decompress_bytes_per_second: f64,
    pub ratio: f64,
}

/// LZ4 (frame): fast both ways, half the size of typical columns.
pub const LZ4: CodecPrior = CodecPrior {
    codec: IpcCompression::Lz4Frame,
    compress_bytes_per_second: 600e6,
    decompress_bytes_per_second: 2e9,
    ratio: 0.5,
};

/// Zstandard (Arrow's default level): slower, smaller.
pub const ZSTD: CodecPrior = CodecPrior {
    codec: IpcCompression::Zstd,
    compress_bytes_per_second: 200e6,
    decompress_bytes_per_second: 800e6,
    ratio: 0.35,
};

/// The estimates the model runs on (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct Estimates {
    /// `ρ`: seconds of one more request's round trip.
    pub round_trip_seconds: f64,
    /// `λ`: the link's seconds per byte.
    pub link_seconds_per_byte: f64,
    /// `σ`: the server's scan seconds per (uncompressed) byte.
    pub server_scan_seconds_per_byte: f64,
    /// `κ`: this client's scan seconds per byte.
    pub client_scan_seconds_per_byte: f64,
    /// `r_c` of [`LZ4`] and [`ZSTD`].
    pub lz4_ratio: f64,
    pub zstd_ratio: f64,
}

impl Estimates {
    /// The priors, with a link of `link_bytes_per_second`.
    pub fn priors(link_bytes_per_second: f64) -> Self {
        Estimates {
            round_trip_seconds: ROUND_TRIP_SECONDS,
            link_seconds_per_byte: 1.0 / link_bytes_per_second.max(1.0),
            server_scan_seconds_per_byte: SCAN_SECONDS_PER_BYTE,
            client_scan_seconds_per_byte: SCAN_SECONDS_PER_BYTE,
            lz4_ratio: LZ4.ratio,
            zstd_ratio: ZSTD.ratio,
        }
    }

    /// Seconds saved per uncompressed byte by answering with `codec`: link
    /// time saved minus compressing and decompressing (negative: it costs).
    pub fn compression_saving_per_byte(&self, codec: &CodecPrior) -> f64 {
        let ratio = match codec.codec {
            IpcCompression::Zstd => self.zstd_ratio,
            _ => self.lz4_ratio,
        };
        (1.0 - ratio) * self.link_seconds_per_byte
            - 1.0 / codec.compress_bytes_per_second
            - 1.0 / codec.decompress_bytes_per_second
    }

    /// The compression for an answer of about `expected_bytes` (`None`:
    /// unknown): the codec saving the most seconds, if any saves some.
    pub fn compression(&self, expected_bytes: Option<f64>) -> IpcCompression {
        if expected_bytes.is_some_and(|b| b < MIN_COMPRESSED_BYTES) {
            return IpcCompression::None;
        }
        [LZ4, ZSTD]
            .iter()
            .map(|c| (c.codec, self.compression_saving_per_byte(c)))
            .filter(|(_, saving)| *saving > 0.0)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map_or(IpcCompression::None, |(codec, _)| codec)
    }
}

/// A moving average whose prior is given when it is read: after samples
/// `x₁..xₙ` it is `(1 − α)ⁿ·prior + Σ α(1 − α)ⁿ⁻ᵏ·xₖ`, exactly the
/// exponentially weighted average started at the prior.
#[derive(Debug, Clone, Copy)]
struct Moving {
    sum: f64,
    prior_weight: f64,
    samples: u64,
}

impl Default for Moving {
    fn default() -> Self {
        Moving {
            sum: 0.0,
            prior_weight: 1.0,
            samples: 0,
        }
    }
}

impl Moving {
    fn observe(&mut self, x: f64) {
        if !x.is_finite() {
            return;
        }
        self.sum = (1.0 - ALPHA) * self.sum + ALPHA * x;
        self.prior_weight *= 1.0 - ALPHA;
        self.samples += 1;
    }

    fn value(&self, prior: f64) -> f64 {
        self.prior_weight * prior + self.sum
    }
}

/// What one scan's transfer showed: the client's clock and the server's
/// report.
#[derive(Debug, Clone, Default)]
pub struct Transfer {
    /// From sending the request to the first message.
    pub first_message: Option<Duration>,
    /// From sending the request to the end of the answer.
    pub elapsed: Duration,
    /// Of `elapsed`, the time the consumer was blocked waiting for the
    /// answer (not its own work between batches, which on loopback is most
    /// of a transfer and would read as a slow link).
    pub waited: Duration,
    /// Flight data received (IPC headers and bodies of the schema and
    /// batches, as they travelled: compressed when asked).
    pub bytes_received: u64,
    /// The server's account, when it sent one.
    pub report: Option<ScanReport>,
}

/// Learned estimates of one server and the link to it (one per
/// [`crate::SiltClient`], shared by its clones and so by every table of
/// that server). See the module docs.
#[derive(Debug, Default)]
pub struct Calibration {
    learned: Mutex<Learned>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Learned {
    /// The link's prior, bytes per second (`None`: [`DEFAULT_LINK_BYTES_PER_SECOND`]).
    link_prior: Option<f64>,
    /// Estimates the model uses instead of the learned ones ([`Calibration::pin`]).
    pinned: Option<Estimates>,
    round_trip: Moving,
    link: Moving,
    server_scan: Moving,
    client_scan: Moving,
    lz4_ratio: Moving,
    zstd_ratio: Moving,
}

/// How many samples each estimate has taken (for tests and `Debug`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleCounts {
    pub round_trip: u64,
    pub link: u64,
    pub server_scan: u64,
    pub client_scan: u64,
    pub compression_ratio: u64,
}

/// Seconds per byte of 1 MB/s, 100 GB/s, 1 TB/s.
const SLOWEST: f64 = 1e-6;
const FASTEST_LINK: f64 = 1e-11;
const FASTEST_SCAN: f64 = 1e-12;

impl Calibration {
    fn lock(&self) -> MutexGuard<'_, Learned> {
        self.learned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the link's prior, bytes per second (the user's
    /// [`crate::SiltTableOptions::link_bytes_per_second`]): the estimate
    /// starts there and is still learned.
    pub fn set_link_prior(&self, bytes_per_second: f64) {
        if bytes_per_second.is_finite() && bytes_per_second > 0.0 {
            self.lock().link_prior = Some(bytes_per_second);
        }
    }

    /// Makes the model run on `estimates` (`None`: on the learned ones
    /// again), for a benchmark or a test that needs the choices of a known
    /// model on any machine. Learning goes on underneath ([`Self::learned`]).
    pub fn pin(&self, estimates: Option<Estimates>) {
        self.lock().pinned = estimates;
    }

    /// The estimates the model runs on: the pinned ones, else the learned.
    pub fn estimates(&self) -> Estimates {
        let pinned = self.lock().pinned;
        pinned.unwrap_or_else(|| self.learned())
    }

    /// The learned estimates (the priors moved by what was measured).
    pub fn learned(&self) -> Estimates {
        let l = *self.lock();
        let prior = Estimates::priors(l.link_prior.unwrap_or(DEFAULT_LINK_BYTES_PER_SECOND));
        Estimates {
            round_trip_seconds: l.round_trip.value(prior.round_trip_seconds),
            link_seconds_per_byte: l.link.value(prior.link_seconds_per_byte),
            server_scan_seconds_per_byte: l.server_scan.value(prior.server_scan_seconds_per_byte),
            client_scan_seconds_per_byte: l.client_scan.value(prior.client_scan_seconds_per_byte),
            lz4_ratio: l.lz4_ratio.value(prior.lz4_ratio),
            zstd_ratio: l.zstd_ratio.value(prior.zstd_ratio),
        }
    }

    /// How many samples each estimate took so far.
    pub fn samples(&self) -> SampleCounts {
        let l = self.lock();
        SampleCounts {
            round_trip: l.round_trip.samples,
            link: l.link.samples,
            server_scan: l.server_scan.samples,
            client_scan: l.client_scan.samples,
            compression_ratio: l.lz4_ratio.samples + l.zstd_ratio.samples,
        }
    }

    /// Learns from one finished scan (module docs). Without the server's
    /// report nothing is learned: the client's clock alone cannot tell the
    /// link from the server.
    pub fn observe_transfer(&self, t: &Transfer) {
        let Some(report) = &t.report else {
            return;
        };
        let mut l = self.lock();
        let mut round_trip = None;
        if let Some(first) = t.first_message
            && report.first_message_seconds > 0.0
        {
            let rtt = (first.as_secs_f64() - report.first_message_seconds).clamp(1e-6, 10.0);
            l.round_trip.observe(rtt);
            round_trip = Some(rtt);
        }
        if report.bytes_scanned >= MIN_MEASURED_BYTES && report.scan_seconds > 0.0 {
            let spb = report.scan_seconds / report.bytes_scanned as f64;
            l.server_scan.observe(spb.clamp(FASTEST_SCAN, SLOWEST));
        }
        if t.bytes_received >= MIN_LINK_BYTES {
            let bytes = t.bytes_received as f64;
            let rtt = round_trip.unwrap_or(l.round_trip.value(ROUND_TRIP_SECONDS));
            // Only the time the consumer waited: the rest was its own work.
            let waited = if t.waited.is_zero() { t.elapsed } else { t.waited };
            let on_link = (waited.as_secs_f64() - rtt).max(1e-6);
            let server = report.planning_seconds + report.scan_seconds + report.encode_seconds;
            let link = on_link - server;
            if link >= 0.1 * on_link && link >= 1e-3 {
                l.link.observe((link / bytes).clamp(FASTEST_LINK, SLOWEST));
            } else {
                // The server was the bottleneck: the link is at least this fast.
                let bound = (on_link / bytes).clamp(FASTEST_LINK, SLOWEST);
                let prior = 1.0 / l.link_prior.unwrap_or(DEFAULT_LINK_BYTES_PER_SECOND);
                if l.link.value(prior) > bound {
                    l.link.observe(bound);
                }
            }
        }
        let codec = IpcCompression::try_from(report.compression).unwrap_or_default();
        if codec != IpcCompression::None && report.arrow_bytes_sent >= MIN_MEASURED_BYTES {
            let ratio = (report.bytes_sent as f64 / report.arrow_bytes_sent as f64).clamp(0.01, 1.5);
            match codec {
                IpcCompression::Zstd => l.zstd_ratio.observe(ratio),
                _ => l.lz4_ratio.observe(ratio),
            }
        }
    }

    /// Learns this client's scan rate from a row group run here: `seconds`
    /// filtering and decoding `bytes` (its needed columns, uncompressed).
    pub fn observe_client_scan(&self, seconds: f64, bytes: u64) {
        if bytes < MIN_MEASURED_BYTES || seconds <= 0.0 {
            return;
        }
        let spb = (seconds / bytes as f64).clamp(FASTEST_SCAN, SLOWEST);
        self.lock().client_scan.observe(spb);
    }
}

/// The sizes of one row group's needed columns, as the layout gives them
/// (uncompressed bytes), split by where they are.
#[derive(Debug, Clone, Copy, Default)]
pub struct RowGroupSizes {
    pub rows: usize,
    /// Columns only the filter reads.
    pub filter_only: usize,
    /// Projected columns held in the compute-side cache.
    pub projected_local: usize,
    /// Projected columns it lacks.
    pub projected_missing: usize,
}

impl RowGroupSizes {
    /// Every needed column's bytes: what fetching the row group whole moves.
    pub fn total(&self) -> usize {
        self.filter_only + self.projected_local + self.projected_missing
    }
}

/// The path cost model of one scan: the estimates and the scan's observed
/// selectivity. (Not the eviction policies' `silt_core::policy::CostModel`,
/// which prices a cache miss.)
#[derive(Debug, Clone, Copy)]
pub struct PathCost {
    pub estimates: Estimates,
    pub selectivity: f64,
}

impl PathCost {
    fn link(&self, bytes: f64) -> f64 {
        bytes * self.estimates.link_seconds_per_byte
    }

    fn server(&self, bytes: f64) -> f64 {
        bytes * self.estimates.server_scan_seconds_per_byte
    }

    fn client(&self, bytes: f64) -> f64 {
        bytes * self.estimates.client_scan_seconds_per_byte
    }

    /// The bytes pushdown sends for the row group: the surviving rows of
    /// its projected columns.
    pub fn pushdown_bytes(&self, g: &RowGroupSizes) -> f64 {
        (g.projected_local + g.projected_missing) as f64 * self.selectivity
    }

    /// Seconds to push the row group down.
    pub fn pushdown(&self, g: &RowGroupSizes) -> f64 {
        let projected = self.pushdown_bytes(g);
        self.server(g.filter_only as f64) + self.server(projected) + self.link(projected)
    }

    /// Seconds to filter it here and fetch the missing columns' surviving rows.
    pub fn hybrid(&self, g: &RowGroupSizes) -> f64 {
        let local = g.projected_local as f64 * self.selectivity;
        let missing = g.projected_missing as f64 * self.selectivity;
        self.estimates.round_trip_seconds
            + self.client(g.filter_only as f64)
            + self.link(g.rows as f64 / 8.0)
            + self.client(local)
            + self.server(missing)
            + self.link(missing)
    }

    /// Seconds to run it here from the cache.
    pub fn local(&self, g: &RowGroupSizes) -> f64 {
        self.client(g.filter_only as f64) + self.client(self.pushdown_bytes(g))
    }

    /// Seconds to fetch it whole, then run it here.
    pub fn fetch(&self, g: &RowGroupSizes) -> f64 {
        let all = g.total() as f64;
        self.estimates.round_trip_seconds + self.server(all) + self.link(all) + self.local(g)
    }

    /// Whether the hybrid path costs less than pushdown.
    pub fn prefers_hybrid(&self, g: &RowGroupSizes) -> bool {
        g.projected_missing > 0 && self.hybrid(g) < self.pushdown(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(selectivity: f64) -> PathCost {
        PathCost {
            estimates: Estimates::priors(DEFAULT_LINK_BYTES_PER_SECOND),
            selectivity,
        }
    }

    #[test]
    fn hybrid_pays_when_local_projected_bytes_outweigh_a_round_trip() {
        // A wide local column (a million rows of strings) and a narrow missing one.
        let wide = RowGroupSizes {
            rows: 1_000_000,
            filter_only: 4_000_000,
            projected_local: 60_000_000,
            projected_missing: 8_000_000,
        };
        assert!(model(0.5).prefers_hybrid(&wide));
        // Nothing survives: both paths move next to nothing, the round trip decides.
        assert!(!model(0.0).prefers_hybrid(&wide));
        // A small row group: the bitmap and the round trip cost more than the bytes saved.
        let small = RowGroupSizes {
            rows: 8192,
            filter_only: 32_768,
            projected_local: 65_536,
            projected_missing: 65_536,
        };
        assert!(!model(0.5).prefers_hybrid(&small));
        // Nothing missing: that is the local path, not this choice.
        let none_missing = RowGroupSizes {
            projected_missing: 0,
            ..wide
        };
        assert!(!model(1.0).prefers_hybrid(&none_missing));
    }

    #[test]
    fn a_slower_link_favours_hybrid() {
        let g = RowGroupSizes {
            rows: 100_000,
            filter_only: 400_000,
            projected_local: 400_000,
            projected_missing: 400_000,
        };
        let fast = PathCost {
            estimates: Estimates::priors(1e12),
            selectivity: 0.2,
        };
        let slow = PathCost {
            estimates: Estimates::priors(1e8),
            selectivity: 0.2,
        };
        assert!(!fast.prefers_hybrid(&g));
        assert!(slow.prefers_hybrid(&g));
    }

    #[test]
    fn a_slow_client_favours_pushdown() {
        let g = RowGroupSizes {
            rows: 1_000_000,
            filter_only: 4_000_000,
            projected_local: 60_000_000,
            projected_missing: 8_000_000,
        };
        let mut estimates = Estimates::priors(DEFAULT_LINK_BYTES_PER_SECOND);
        assert!(
            PathCost {
                estimates,
                selectivity: 0.5
            }
            .prefers_hybrid(&g)
        );
        estimates.client_scan_seconds_per_byte *= 100.0;
        assert!(
            !PathCost {
                estimates,
                selectivity: 0.5
            }
            .prefers_hybrid(&g)
        );
    }

    #[test]
    fn compression_is_asked_for_only_when_the_link_is_slower_than_compressing() {
        // A rack-local 10 Gbit/s link: compressing costs more than it saves.
        assert_eq!(Estimates::priors(1.25e9).compression(None), IpcCompression::None);
        // 100 MB/s: LZ4 pays (0.5 × 10 ns saved > 1.67 + 0.5 ns), zstd not yet.
        assert_eq!(Estimates::priors(1e8).compression(None), IpcCompression::Lz4Frame);
        // 10 MB/s: zstd's smaller answers save the most.
        assert_eq!(Estimates::priors(1e7).compression(None), IpcCompression::Zstd);
        // Never for small answers.
        assert_eq!(Estimates::priors(1e7).compression(Some(1000.0)), IpcCompression::None);
        // Data that does not compress (ratio observed ~1) is not compressed.
        let mut incompressible = Estimates::priors(1e8);
        incompressible.lz4_ratio = 0.98;
        incompressible.zstd_ratio = 0.97;
        assert_eq!(incompressible.compression(None), IpcCompression::None);
    }

    fn report(scan_seconds: f64, bytes_scanned: u64, first: f64) -> ScanReport {
        ScanReport {
            version: silt_proto::SCAN_REPORT_VERSION,
            scan_seconds,
            first_message_seconds: first,
            bytes_scanned,
            ..Default::default()
        }
    }

    #[test]
    fn estimates_start_at_the_priors_and_move_toward_what_is_measured() {
        let c = Calibration::default();
        c.set_link_prior(1e8);
        let prior = c.estimates();
        assert_eq!(prior.link_seconds_per_byte, 1e-8);
        assert_eq!(prior.round_trip_seconds, ROUND_TRIP_SECONDS);
        // A link of 10 MB/s with a 20 ms round trip and a server at 100 MB/s.
        let transfer = Transfer {
            first_message: Some(Duration::from_millis(25)),
            elapsed: Duration::from_secs_f64(0.02 + 0.005 + 0.1 + 1.0),
            waited: Duration::ZERO,
            bytes_received: 10_000_000,
            report: Some(ScanReport {
                planning_seconds: 0.005,
                ..report(0.1, 10_000_000, 0.005)
            }),
        };
        for _ in 0..50 {
            c.observe_transfer(&transfer);
        }
        let learned = c.estimates();
        assert!((learned.round_trip_seconds - 0.02).abs() < 1e-4, "{learned:?}");
        assert!((learned.link_seconds_per_byte - 1e-7).abs() < 1e-9, "{learned:?}");
        assert!(
            (learned.server_scan_seconds_per_byte - 1e-8).abs() < 1e-10,
            "{learned:?}"
        );
        // Still unmeasured: the client's own rate keeps its prior.
        assert_eq!(learned.client_scan_seconds_per_byte, SCAN_SECONDS_PER_BYTE);
        // The prior given when read still weighs in after a single sample.
        let once = Calibration::default();
        once.set_link_prior(1e8);
        once.observe_transfer(&transfer);
        let e = once.estimates();
        let expected = (1.0 - ALPHA) * 1e-8 + ALPHA * 1e-7;
        assert!((e.link_seconds_per_byte - expected).abs() < 1e-12, "{e:?}");
    }

    #[test]
    fn tiny_transfers_and_missing_reports_teach_nothing_and_nothing_divides_by_zero() {
        let c = Calibration::default();
        // No report: the client's clock alone cannot tell link from server.
        c.observe_transfer(&Transfer {
            first_message: Some(Duration::from_millis(1)),
            elapsed: Duration::from_secs(1),
            waited: Duration::ZERO,
            bytes_received: 1 << 30,
            report: None,
        });
        // A tiny answer with zero times and zero bytes scanned.
        c.observe_transfer(&Transfer {
            first_message: Some(Duration::ZERO),
            elapsed: Duration::ZERO,
            waited: Duration::ZERO,
            bytes_received: 10,
            report: Some(report(0.0, 0, 0.0)),
        });
        c.observe_client_scan(0.0, 0);
        c.observe_client_scan(1.0, 10);
        assert_eq!(
            c.samples(),
            SampleCounts {
                round_trip: 0,
                link: 0,
                server_scan: 0,
                client_scan: 0,
                compression_ratio: 0
            }
        );
        // Absurd measurements are clamped, not believed.
        c.observe_transfer(&Transfer {
            first_message: Some(Duration::from_secs(1)),
            elapsed: Duration::from_secs(3600),
            waited: Duration::ZERO,
            bytes_received: MIN_LINK_BYTES,
            report: Some(report(1e-12, MIN_MEASURED_BYTES, 2.0)),
        });
        let e = c.estimates();
        assert!(e.round_trip_seconds > 0.0 && e.round_trip_seconds.is_finite());
        assert!(e.link_seconds_per_byte <= SLOWEST && e.link_seconds_per_byte > 0.0);
        assert!(e.server_scan_seconds_per_byte >= FASTEST_SCAN * ALPHA);
    }

    #[test]
    fn a_server_bound_transfer_only_bounds_the_link_from_below() {
        let c = Calibration::default();
        // 100 MB in 1 s, all of it the server scanning: the link is at least 100 MB/s.
        let transfer = Transfer {
            first_message: Some(Duration::from_millis(1)),
            elapsed: Duration::from_secs(1),
            waited: Duration::ZERO,
            bytes_received: 100_000_000,
            report: Some(report(1.0, 100_000_000, 0.0005)),
        };
        // A prior of 10 MB/s is slower than the bound: it moves up.
        c.set_link_prior(1e7);
        c.observe_transfer(&transfer);
        assert!(c.estimates().link_seconds_per_byte < 1e-7);
        // A prior of 10 Gbit/s is already faster than the bound: unchanged.
        let fast = Calibration::default();
        fast.observe_transfer(&transfer);
        assert_eq!(fast.samples().link, 0);
    }

    #[test]
    fn pinned_estimates_are_used_while_learning_goes_on() {
        let c = Calibration::default();
        let pinned = Estimates::priors(1e6);
        c.pin(Some(pinned));
        c.observe_client_scan(1.0, 1 << 20);
        assert_eq!(c.estimates().link_seconds_per_byte, 1e-6);
        assert_eq!(c.estimates().client_scan_seconds_per_byte, SCAN_SECONDS_PER_BYTE);
        assert_eq!(c.samples().client_scan, 1);
        c.pin(None);
        assert!(c.estimates().client_scan_seconds_per_byte > SCAN_SECONDS_PER_BYTE);
    }

    #[test]
    fn the_compression_ratio_is_learned_per_codec() {
        let c = Calibration::default();
        c.observe_transfer(&Transfer {
            bytes_received: 1000,
            report: Some(ScanReport {
                compression: IpcCompression::Lz4Frame as i32,
                bytes_sent: 100_000,
                arrow_bytes_sent: 1_000_000,
                ..Default::default()
            }),
            ..Default::default()
        });
        let e = c.estimates();
        assert!((e.lz4_ratio - ((1.0 - ALPHA) * LZ4.ratio + ALPHA * 0.1)).abs() < 1e-12);
        assert_eq!(e.zstd_ratio, ZSTD.ratio);
    }

    #[test]
    fn a_consumer_busy_between_batches_does_not_read_as_a_slow_link() {
        let c = Calibration::default();
        let before = c.estimates().link_seconds_per_byte;
        // 100 MB over 10 s, of which the consumer waited only 20 ms (on
        // loopback a join or an aggregate pulls the answer slowly).
        for _ in 0..20 {
            c.observe_transfer(&Transfer {
                first_message: Some(Duration::from_millis(1)),
                elapsed: Duration::from_secs(10),
                waited: Duration::from_millis(20),
                bytes_received: 100_000_000,
                report: Some(report(0.001, 100_000_000, 0.0005)),
            });
        }
        let after = c.estimates().link_seconds_per_byte;
        assert!(after <= before * 1.5, "the link looked slower: {before} -> {after}");
    }
}
