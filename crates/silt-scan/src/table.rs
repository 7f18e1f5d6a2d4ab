//! Registering Parquet tables whose bytes are read through the cache.

use std::sync::Arc;

use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::error::{DataFusionError, Result};
use datafusion::prelude::SessionContext;
use silt_cache::{BatchCache, CachedStore};

use crate::cached_scan::ScanSources;
use crate::cached_table::CachedParquetTable;
use crate::scan_metrics::ScanMetrics;
use silt_store::TableLocation;
use url::Url;

/// What the scans of every table of a server share.
#[derive(Clone)]
pub struct ScanShared {
    /// The memory tier of decoded column batches.
    pub batches: Arc<BatchCache>,
    /// The pruning counters the server exports.
    pub metrics: ScanMetrics,
}

/// Per-table read options.
#[derive(Debug, Clone, Default)]
pub struct TableOptions {
    /// Read Parquet BINARY columns as strings (ClickBench's `hits.parquet`
    /// stores its text columns as BINARY).
    pub binary_as_string: bool,
}

/// Register `location` as table `name`, reading through `store`.
///
/// The store is registered under a URL of its own (`silt://t<N>`) so that
/// tables in the same bucket may still use different credentials, and its
/// objects appear under the store's namespace (`silt://t<N>/<namespace>/...`)
/// so that object paths are unique across the server. A directory or prefix
/// means every `*.parquet` object under it. Scans keep decoded column
/// batches in `shared.batches` (the memory tier) and count pruning in
/// `shared.metrics`.
pub async fn register_parquet_table(
    ctx: &SessionContext,
    name: &str,
    store_index: usize,
    location: &TableLocation,
    store: Arc<CachedStore>,
    shared: &ScanShared,
    options: &TableOptions,
) -> Result<()> {
    let base = format!("silt://t{store_index}");
    let base_url = Url::parse(&base).map_err(|e| DataFusionError::External(Box::new(e)))?;
    let namespace = store.namespace().to_string();
    ctx.runtime_env().register_object_store(&base_url, store.clone());
    let mut table_url = format!("{base}/{namespace}/{}", location.path);
    if location.is_prefix && !table_url.ends_with('/') {
        table_url.push('/');
    }
    let table_path = ListingTableUrl::parse(&table_url)?;

    let state = ctx.state();
    let mut parquet = state.table_options().parquet.clone();
    parquet.global.binary_as_string = options.binary_as_string;
    let format = ParquetFormat::default().with_options(parquet);
    let listing = ListingOptions::new(Arc::new(format)).with_file_extension(".parquet");
    let schema = listing.infer_schema(&state, &table_path).await.map_err(|e| {
        DataFusionError::Plan(format!(
            "cannot read the schema of table '{name}' at {}: {e}",
            location.url
        ))
    })?;
    let config = ListingTableConfig::new(table_path)
        .with_listing_options(listing)
        .with_schema(schema);
    let listing = ListingTable::try_new(config)?;
    let sources = ScanSources {
        store,
        batches: shared.batches.clone(),
        metadata_cache: ctx.runtime_env().cache_manager.get_file_metadata_cache(),
        metrics: shared.metrics.clone(),
    };
    ctx.register_table(name, Arc::new(CachedParquetTable::new(listing, sources)))?;
    Ok(())
}
