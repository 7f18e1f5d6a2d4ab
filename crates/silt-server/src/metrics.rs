//! The server's metrics, rendered at `/metrics` in Prometheus text format.
//!
//! Each server owns its own recorder (rather than the process-global one), so
//! several servers in one process — tests, the demo — keep separate figures.

use std::collections::BTreeMap;
use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram, Key, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use silt_cache::CacheMetrics;
use silt_scan::ScanMetrics;
use silt_store::StoreMetrics;

use crate::query::stage::Stage;

static METADATA: Metadata<'static> = Metadata::new("silt_server", Level::INFO, None);

/// Handles to every metric the server reports.
pub struct ServerMetrics {
    recorder: PrometheusRecorder,
    /// `silt_queries_total`: SQL statements and pushdown scans run (one per
    /// `DoGet`, however many calls planned it), and lookups.
    pub queries: Counter,
    /// `silt_query_errors_total`: those that failed (planning or mid-stream).
    pub query_errors: Counter,
    /// `silt_query_restarts_total`: queries restarted (once, before any
    /// answer) because an object changed between validation and read.
    pub query_restarts: Counter,
    /// `silt_validations_speculative_total`: query attempts that started on
    /// a speculative listing or version (`always`, warm) and held their
    /// results until a validation confirmed it.
    pub validations_speculative: Counter,
    /// `silt_validation_mismatches_total`: speculative attempts whose
    /// validation found an object added, deleted or overwritten (restarted
    /// once on the new listing, else failed `ABORTED`).
    pub validation_mismatches: Counter,
    /// `silt_validation_notices_total{source="inotify"}`: file-system
    /// events on a `notify` table's folder that marked it changed.
    pub notices_inotify: Counter,
    /// `silt_validation_notices_total{source="s3_event"}`: records of S3
    /// event notifications posted to `/notify/s3` (whether or not they
    /// named a table).
    pub notices_s3_event: Counter,
    /// `silt_validation_sweeps_total`: validations of `notify` tables sent
    /// because the last one outlived the sweep without a notice.
    pub validation_sweeps: Counter,
    /// `silt_queries_active`: queries whose result stream is open.
    pub active_queries: Gauge,
    /// `silt_queries_queued`: planned queries waiting for a slot
    /// (`max_concurrent_queries`).
    pub queued_queries: Gauge,
    /// `silt_memory_pressure_shrinks_total`: times the memory tier's budget
    /// was lowered because the machine ran short of memory.
    pub memory_pressure_shrinks: Counter,
    /// `silt_flight_bytes_sent_total`: Arrow IPC bytes (header + body) sent.
    pub flight_bytes_sent: Counter,
    /// `silt_flight_rows_sent_total`.
    pub flight_rows_sent: Counter,
    /// `silt_s3_requests_total`: requests to the S3-compatible API (`/s3`).
    pub s3_requests: Counter,
    /// `silt_s3_bytes_sent_total`: body bytes the S3 API sent (object bytes,
    /// listings, error documents).
    pub s3_bytes_sent: Counter,
    /// `silt_s3_forwarded_total`: S3 body chunks read from the fleet member
    /// that owns them ([`crate::s3_api`] across a `[cluster]`).
    pub s3_forwarded: Counter,
    /// `silt_s3_forward_failures_total`: forwarded reads that failed (the
    /// chunk was then read locally).
    pub s3_forward_failures: Counter,
    /// Object-store requests and bytes (after the cache).
    pub store: StoreMetrics,
    /// The memory tier of decoded column batches (`tier="memory"`).
    pub memory: CacheMetrics,
    /// The page buffer of object bytes in memory (`tier="pages"`).
    pub pages: CacheMetrics,
    /// The metadata tier (`tier="metadata"`).
    pub metadata: CacheMetrics,
    /// Row groups and pages the scan pruned
    /// (`silt_scan_row_groups_pruned_total{by}`, `silt_scan_pages_pruned_total`).
    pub scan: ScanMetrics,
    /// `silt_plans_total`: SQL statements and pushdown scans planned (a
    /// statement's `GetFlightInfo` plans it; its `DoGet` runs that plan).
    pub plans: Counter,
    /// `silt_partial_aggregates_total`: pushdown scans planned with a
    /// client's partial aggregate on top (only per-group states are sent).
    pub partial_aggregates: Counter,
    /// `silt_lookups_total`: point lookups answered by the lookup path
    /// (`LookupRequest` tickets and SQL of exactly that shape).
    pub lookups: Counter,
    /// `silt_byte_ranges_total`: byte-ranges requests answered (column
    /// chunks as stored, `RangesRequest` tickets).
    pub byte_ranges: Counter,
    /// `silt_byte_ranges_bytes_total`: object bytes they answered with.
    pub byte_ranges_bytes: Counter,
    /// `silt_lookup_row_groups_total{from="memory"}`: row groups a lookup
    /// answered from the memory tier's decoded columns.
    pub lookup_row_groups_memory: Counter,
    /// `silt_lookup_row_groups_total{from="pages"}`: row groups a lookup
    /// answered by reading the candidate pages (page and disk tiers).
    pub lookup_row_groups_pages: Counter,
    /// `silt_lookup_row_groups_total{from="bloom_filter"}`: candidate row
    /// groups a lookup skipped because their bloom filter holds no key.
    pub lookup_row_groups_bloom_skipped: Counter,
    /// `silt_query_stage_seconds{stage}`: per query, the server time in each
    /// stage (validation, planning, scan, encode, send; see
    /// [`crate::query::trace`]), in [`Stage::ALL`] order.
    query_stages: [Histogram; 5],
    /// The queries running and lately finished (not a Prometheus series:
    /// `/stats`, the dashboard and `silt_system.queries` read it).
    pub query_log: crate::query::log::QueryLog,
}

impl ServerMetrics {
    pub fn new() -> Arc<Self> {
        let recorder = PrometheusBuilder::new().build_recorder();
        let counter = |name: &'static str| recorder.register_counter(&Key::from_static_name(name), &METADATA);
        let queries = counter("silt_queries_total");
        let query_errors = counter("silt_query_errors_total");
        let query_restarts = counter("silt_query_restarts_total");
        let validations_speculative = counter("silt_validations_speculative_total");
        let validation_mismatches = counter("silt_validation_mismatches_total");
        let notices = |source: &'static str| {
            recorder.register_counter(
                &Key::from_parts(
                    "silt_validation_notices_total",
                    vec![metrics::Label::new("source", source)],
                ),
                &METADATA,
            )
        };
        let notices_inotify = notices("inotify");
        let notices_s3_event = notices("s3_event");
        let validation_sweeps = counter("silt_validation_sweeps_total");
        let flight_bytes_sent = counter("silt_flight_bytes_sent_total");
        let flight_rows_sent = counter("silt_flight_rows_sent_total");
        let s3_requests = counter("silt_s3_requests_total");
        let s3_bytes_sent = counter("silt_s3_bytes_sent_total");
        let s3_forwarded = counter("silt_s3_forwarded_total");
        let s3_forward_failures = counter("silt_s3_forward_failures_total");
        let active_queries = recorder.register_gauge(&Key::from_static_name("silt_queries_active"), &METADATA);
        let queued_queries = recorder.register_gauge(&Key::from_static_name("silt_queries_queued"), &METADATA);
        let memory_pressure_shrinks = counter("silt_memory_pressure_shrinks_total");
        let store = StoreMetrics::register(&recorder);
        let memory = CacheMetrics::register(&recorder, "memory");
        let pages = CacheMetrics::register(&recorder, "pages");
        let metadata = CacheMetrics::register(&recorder, "metadata");
        let scan = ScanMetrics::register(&recorder);
        let lookups = counter("silt_lookups_total");
        let byte_ranges = counter("silt_byte_ranges_total");
        let byte_ranges_bytes = counter("silt_byte_ranges_bytes_total");
        let plans = counter("silt_plans_total");
        let partial_aggregates = counter("silt_partial_aggregates_total");
        let from = |what: &'static str| {
            recorder.register_counter(
                &Key::from_parts("silt_lookup_row_groups_total", vec![metrics::Label::new("from", what)]),
                &METADATA,
            )
        };
        let lookup_row_groups_memory = from("memory");
        let lookup_row_groups_pages = from("pages");
        let lookup_row_groups_bloom_skipped = from("bloom_filter");
        let query_stages = Stage::ALL.map(|stage| {
            recorder.register_histogram(
                &Key::from_parts(
                    "silt_query_stage_seconds",
                    vec![metrics::Label::new("stage", stage.name())],
                ),
                &METADATA,
            )
        });
        // Touch every counter so it is rendered (as 0) before first use.
        for c in [
            &queries,
            &query_errors,
            &query_restarts,
            &validations_speculative,
            &validation_mismatches,
            &notices_inotify,
            &notices_s3_event,
            &validation_sweeps,
            &flight_bytes_sent,
            &flight_rows_sent,
            &s3_requests,
            &s3_bytes_sent,
            &s3_forwarded,
            &s3_forward_failures,
            &store.get_requests,
            &store.get_bytes,
            &store.head_requests,
            &store.list_requests,
            &store.errors,
            &store.retries,
            &store.failed_requests,
            &memory.hits,
            &memory.misses,
            &memory.evictions,
            &pages.hits,
            &pages.misses,
            &pages.evictions,
            &metadata.hits,
            &metadata.misses,
            &metadata.evictions,
            &lookups,
            &byte_ranges,
            &byte_ranges_bytes,
            &plans,
            &partial_aggregates,
            &lookup_row_groups_memory,
            &lookup_row_groups_pages,
            &lookup_row_groups_bloom_skipped,
        ] {
            c.increment(0);
        }
        active_queries.set(0.0);
        queued_queries.set(0.0);
        memory.reserved_evictions.increment(0);
        memory_pressure_shrinks.increment(0);
        memory.bytes.set(0.0);
        pages.bytes.set(0.0);
        metadata.bytes.set(0.0);
        Arc::new(ServerMetrics {
            recorder,
            queries,
            query_errors,
            query_restarts,
            validations_speculative,
            validation_mismatches,
            notices_inotify,
            notices_s3_event,
            validation_sweeps,
            active_queries,
            queued_queries,
            memory_pressure_shrinks,
            flight_bytes_sent,
            flight_rows_sent,
            s3_requests,
            s3_bytes_sent,
            s3_forwarded,
            s3_forward_failures,
            store,
            memory,
            pages,
            metadata,
            scan,
            lookups,
            byte_ranges,
            byte_ranges_bytes,
            plans,
            partial_aggregates,
            lookup_row_groups_memory,
            lookup_row_groups_pages,
            lookup_row_groups_bloom_skipped,
            query_stages,
            query_log: Default::default(),
        })
    }

    /// The histogram of `stage`'s time per query.
    pub fn query_stage(&self, stage: Stage) -> &Histogram {
        &self.query_stages[stage as usize]
    }

    /// The recorder, for tiers that register their own metrics (the disk tier).
    pub fn recorder(&self) -> &dyn Recorder {
        &self.recorder
    }

    /// Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        self.recorder.handle().render()
    }

    /// Current values keyed by the series as rendered (`name` or
    /// `name{label="v"}`), for `silt stats`, the demo and tests.
    pub fn snapshot(&self) -> BTreeMap<String, f64> {
        parse_exposition(&self.render())
    }
}

/// Parse Prometheus text exposition into `series -> value`.
pub fn parse_exposition(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.trim().to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_and_parse() {
        let m = ServerMetrics::new();
        m.queries.increment(3);
        m.memory.hits.increment(2);
        let snap = m.snapshot();
        assert_eq!(snap["silt_queries_total"], 3.0);
        assert_eq!(snap["silt_query_errors_total"], 0.0);
        assert_eq!(snap["silt_cache_hits_total{tier=\"memory\"}"], 2.0);
        assert_eq!(snap["silt_scan_row_groups_pruned_total{by=\"bloom_filter\"}"], 0.0);
        assert_eq!(snap["silt_scan_pages_pruned_total"], 0.0);
    }
}
