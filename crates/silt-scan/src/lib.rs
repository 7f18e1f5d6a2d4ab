//! DataFusion execution of Silt's scans over the cache tiers.
//!
//! * [`table`]: registering a table's Parquet files (through the cache) with
//!   the server's DataFusion context.
//! * [`cached_table`], [`cached_scan`], [`column_loader`], [`scan_filter`]:
//!   the scan of a table's row groups over the memory tier of decoded
//!   column batches, with statistics pruning and late materialization;
//!   [`file_columns`]: which file column is which table column (by name,
//!   or by field id for Iceberg tables).
//! * [`pruning`], [`bloom`]: what of a file a scan reads — row groups by
//!   statistics and bloom filters, rows by the page index — and the bloom
//!   filters themselves, cached per object version; [`scan_metrics`]: the
//!   pruning counters the server exports.
//! * [`metadata_tier`]: the shared cache of decoded footers, page indexes
//!   and bloom filters, checked against validated object versions.
//! * [`lakehouse`]: Iceberg tables — the files of the snapshot a query
//!   reads, and the rows position deletes remove from them.
//! * [`lookup`]: point lookups by key, answered from per-version page
//!   indexes without planning.
//! * [`pushdown`]: turning a pushed-down scan (table, projection, filters,
//!   limit) into a DataFusion plan over those files.

pub mod bloom;
pub mod cached_scan;
pub mod cached_table;
pub mod chunks;
pub mod column_loader;
pub mod file_columns;
pub mod file_reader;
pub mod footer;
pub mod lakehouse;
pub mod liquid_predicate;
pub mod lookup;
pub mod metadata_tier;
pub mod pruning;
pub mod pushdown;
pub mod scan_filter;
pub mod scan_metrics;
pub mod scan_set;
pub mod scope;
pub mod table;

pub use cached_table::CachedParquetTable;
pub use metadata_tier::MetadataTier;
pub use pushdown::{PushdownScan, plan_pushdown};
pub use scan_metrics::ScanMetrics;
pub use table::{ParquetTable, ScanShared, TableOptions, register_parquet_table};
