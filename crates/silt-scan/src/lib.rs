//! DataFusion execution of Silt's scans over the cache tiers.
//!
//! * [`table`]: registering a table's Parquet files (through the cache) with
//!   the server's DataFusion context.
//! * [`pushdown`]: turning a pushed-down scan (table, projection, filters,
//!   limit) into a DataFusion plan over those files.

pub mod pushdown;
pub mod table;

pub use pushdown::{PushdownScan, plan_pushdown};
pub use table::{TableOptions, register_parquet_table};
