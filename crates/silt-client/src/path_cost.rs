//! The cost model that picks between pushing a row group down and the
//! *hybrid* path (filter on the compute side, fetch only the surviving rows
//! of the columns it lacks).
//!
//! Costs are seconds of the query's critical path per row group:
//!
//! - **pushdown**: the server scans the filter's columns and decodes the
//!   surviving rows of every projected column; those rows travel:
//!   `F·scan + s·P·(scan + link)`;
//! - **hybrid**: the client scans the filter's columns from its cache and
//!   decodes the surviving rows of the projected columns it holds; it sends
//!   the row bitmap (`rows / 8` bytes) in one more request, and the server
//!   decodes and sends the surviving rows of the missing ones:
//!   `round trip + F·scan + rows/8·link + s·Pₗ·scan + s·Pₘ·(scan + link)`;
//!
//! where `F` is the filter-only columns' bytes, `P = Pₗ + Pₘ` the projected
//! columns' bytes (held locally, missing), `s` the scan's selectivity. A
//! byte scanned costs the same on either side (one core decodes about as
//! fast there as here), so the difference is what travels: hybrid wins when
//! the local projected columns' surviving bytes outweigh the bitmap and a
//! round trip. Local (everything cached) always beats both, and fetching a
//! row group whole is an investment the cache's admission policy decides
//! ([`crate::local_cache`]), not this model.

/// Bytes per second between client and server: 10 Gbit/s, a cache server
/// in the compute's rack. [`crate::SiltTableOptions::link_bytes_per_second`]
/// overrides it.
pub const DEFAULT_LINK_BYTES_PER_SECOND: f64 = 1.25e9;

/// Seconds to scan (decode, filter) a byte of a column, on either side.
const SCAN_SECONDS_PER_BYTE: f64 = 1.0 / 2.0e9;

/// The fixed cost of one more Flight request (ticket, plan, first batch)
/// with a few in flight at once: ~0.25 ms warm on a local link.
const ROUND_TRIP_SECONDS: f64 = 250e-6;

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

/// The path cost model of one scan: the link and the scan's observed
/// selectivity. (Not the eviction policies' `silt_core::policy::CostModel`,
/// which prices a cache miss.)
#[derive(Debug, Clone, Copy)]
pub struct PathCost {
    pub link_bytes_per_second: f64,
    pub selectivity: f64,
}

impl PathCost {
    fn link(&self, bytes: f64) -> f64 {
        bytes / self.link_bytes_per_second.max(1.0)
    }

    /// Seconds to push the row group down.
    pub fn pushdown(&self, g: &RowGroupSizes) -> f64 {
        let projected = (g.projected_local + g.projected_missing) as f64 * self.selectivity;
        g.filter_only as f64 * SCAN_SECONDS_PER_BYTE + projected * SCAN_SECONDS_PER_BYTE + self.link(projected)
    }

    /// Seconds to filter it here and fetch the missing columns' surviving rows.
    pub fn hybrid(&self, g: &RowGroupSizes) -> f64 {
        let local = g.projected_local as f64 * self.selectivity;
        let missing = g.projected_missing as f64 * self.selectivity;
        ROUND_TRIP_SECONDS
            + g.filter_only as f64 * SCAN_SECONDS_PER_BYTE
            + self.link(g.rows as f64 / 8.0)
            + local * SCAN_SECONDS_PER_BYTE
            + missing * SCAN_SECONDS_PER_BYTE
            + self.link(missing)
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
            link_bytes_per_second: DEFAULT_LINK_BYTES_PER_SECOND,
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
            link_bytes_per_second: 1e12,
            selectivity: 0.2,
        };
        let slow = PathCost {
            link_bytes_per_second: 1e8,
            selectivity: 0.2,
        };
        assert!(!fast.prefers_hybrid(&g));
        assert!(slow.prefers_hybrid(&g));
    }
}
