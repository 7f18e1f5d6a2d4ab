//! The scan's pruning counters, as the server reports them in Prometheus
//! format. They live beside the scan (not in the server) because the scan
//! is what prunes; the server only registers them with its own recorder.

use metrics::{Counter, Key, Label, Level, Metadata, Recorder};

static METADATA: Metadata<'static> = Metadata::new("silt_scan", Level::INFO, None);

/// Handles to the pruning counters, shared by every scan of a server.
#[derive(Clone)]
pub struct ScanMetrics {
    /// `silt_scan_row_groups_pruned_total{by="statistics"}`: row groups
    /// whose min/max/null-count statistics rule the filter out.
    pub row_groups_pruned_statistics: Counter,
    /// `silt_scan_row_groups_pruned_total{by="bloom_filter"}`: row groups
    /// that survived statistics but whose bloom filters hold none of the
    /// filter's `=`/`IN` literals.
    pub row_groups_pruned_bloom_filter: Counter,
    /// `silt_scan_pages_pruned_total`: data pages the page index rules out
    /// in row groups that survived statistics and bloom filters.
    pub pages_pruned: Counter,
}

impl ScanMetrics {
    /// Registers the counters with `recorder` (and renders them as 0).
    pub fn register(recorder: &dyn Recorder) -> Self {
        let by =
            |what: &'static str| Key::from_parts("silt_scan_row_groups_pruned_total", vec![Label::new("by", what)]);
        let metrics = ScanMetrics {
            row_groups_pruned_statistics: recorder.register_counter(&by("statistics"), &METADATA),
            row_groups_pruned_bloom_filter: recorder.register_counter(&by("bloom_filter"), &METADATA),
            pages_pruned: recorder.register_counter(&Key::from_static_name("silt_scan_pages_pruned_total"), &METADATA),
        };
        for c in [
            &metrics.row_groups_pruned_statistics,
            &metrics.row_groups_pruned_bloom_filter,
            &metrics.pages_pruned,
        ] {
            c.increment(0);
        }
        metrics
    }

    /// Counters that count nothing (embedders without a recorder, tests).
    pub fn noop() -> Self {
        ScanMetrics {
            row_groups_pruned_statistics: Counter::noop(),
            row_groups_pruned_bloom_filter: Counter::noop(),
            pages_pruned: Counter::noop(),
        }
    }
}
