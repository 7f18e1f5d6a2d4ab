//! The `EXPLAIN ANALYZE` metrics a scan's routes fill in: which path each
//! row group took, and per path what it moved and took against what the
//! [`crate::path_cost`] model expected. A leaf.

use std::time::Duration;

use datafusion::physical_plan::metrics::{Count, Time};

/// Counters of the paths row groups took, for `EXPLAIN ANALYZE`.
#[derive(Debug, Clone, Default)]
pub struct PathCounters {
    pub local: Count,
    pub fetched: Count,
    pub hybrid: Count,
    pub pushed: Count,
    /// Scans pushed down whole, without a layout (partial aggregates).
    pub pushed_whole: Count,
    /// Of the fetched row groups, those fetched as stored (compressed
    /// column chunks decoded here, [`super::bytes`]), and their bytes.
    pub fetched_compressed: Count,
    pub bytes_fetched_compressed: Count,
    /// What each path cost against what the model expected.
    pub local_cost: PathMetrics,
    pub fetched_cost: PathMetrics,
    pub hybrid_cost: PathMetrics,
    pub pushdown_cost: PathMetrics,
}

/// One path's `EXPLAIN ANALYZE` metrics (`<path>_bytes`,
/// `<path>_estimated_time`, `<path>_elapsed_time`): the Flight data its
/// row groups moved on the link, the seconds the [`crate::path_cost`]
/// model expected for them, and the seconds they took: for local, fetched
/// and hybrid row groups their runs' wall time summed (they overlap,
/// [`super::hybrid::FETCH_CONCURRENCY`] at a time), for pushed ones the pushed scan's wall
/// time (its estimate includes one round trip). A scan pushed down whole
/// has no layout: its bytes and time count, nothing is estimated.
/// `<path>_server_scanned_bytes`: the bytes the server reported scanning
/// for the path's scans (uncompressed needed column chunks of the row
/// groups it read; only pushed scans read reports, the other paths count
/// 0), which price trying another placement
/// ([`crate::aggregate_placement`]).
#[derive(Debug, Clone, Default)]
pub struct PathMetrics {
    pub bytes: Count,
    pub estimated: Time,
    pub elapsed: Time,
    pub server_scanned: Count,
}

impl PathMetrics {
    pub(crate) fn estimate(&self, seconds: f64) {
        if seconds.is_finite() && seconds > 0.0 {
            self.estimated.add_duration(Duration::from_secs_f64(seconds));
        }
    }

    /// Adds a measured run: `elapsed`, having moved `bytes`, the server
    /// having scanned `server_scanned` bytes for it.
    pub(crate) fn measured(&self, elapsed: Duration, bytes: u64, server_scanned: u64) {
        self.elapsed.add_duration(elapsed);
        self.bytes.add(usize::try_from(bytes).unwrap_or(usize::MAX));
        self.server_scanned
            .add(usize::try_from(server_scanned).unwrap_or(usize::MAX));
    }
}
