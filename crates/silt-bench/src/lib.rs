//! Data generators, a loopback S3 server and workloads for testing and
//! benchmarking Silt.

pub mod compare;
pub mod consistent_fs;
pub mod files;
pub mod hits;
pub mod hits_model;
pub mod link;
pub mod local_s3;
pub mod lookup;
pub mod plots;
pub mod ports;
pub mod procfs;
pub mod report;
pub mod results;
pub mod ssb;
pub mod ssb_workload;
pub mod tpch;
pub mod traces;
