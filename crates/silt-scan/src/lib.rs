//! DataFusion execution of Silt's scans over the cache tiers.
//!
//! * [`table`]: registering a table's Parquet files (through the cache) with
//!   the server's DataFusion context.
//! * [`metadata_tier`]: the shared cache of decoded footers and page
//!   indexes, checked against validated object versions.
//! * [`pushdown`]: turning a pushed-down scan (table, projection, filters,
//!   limit) into a DataFusion plan over those files.

pub mod metadata_tier;
pub mod pushdown;
pub mod table;

pub use metadata_tier::MetadataTier;
pub use pushdown::{PushdownScan, plan_pushdown};
pub use table::{TableOptions, register_parquet_table};
