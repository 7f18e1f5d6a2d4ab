//! Integration tests: a real Silt server reading from a real S3-compatible
//! endpoint on loopback, queried over real Flight connections.

mod bad_input;
mod benchmarks;
mod cloud_stores;
mod common;
mod cost;
mod delta;
mod distributed;
mod fleet;
mod flight_sql;
mod fuzz;
mod hybrid;
mod hybrid_compressed;
mod iceberg;
mod iceberg_rest;
mod jdbc;
mod lakehouse_tpch;
mod load;
mod lookups;
mod notify;
mod operations;
mod plan_aware;
mod pruning;
mod query_validation;
mod s3_api;
mod safety;
mod squeeze;
mod ssb;
mod tiers;
mod versions;
