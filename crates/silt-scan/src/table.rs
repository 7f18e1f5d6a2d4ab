//! Registering Parquet tables whose bytes are read through the cache.

use silt_lakehouse::iceberg::rest::RestTable;
use std::sync::Arc;

use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::error::{DataFusionError, Result};
use datafusion::prelude::SessionContext;
use silt_cache::{CachedStore, ColumnCache};

use crate::cached_scan::ScanSources;
use crate::cached_table::CachedParquetTable;
use crate::lakehouse::delta::DeltaSnapshots;
use crate::lakehouse::iceberg::IcebergSnapshots;
use crate::lakehouse::{LakehouseFiles, SnapshotSource};
use crate::scan_metrics::ScanMetrics;
use object_store::path::Path;
use silt_lakehouse::ObjectLocator;
use silt_store::{TableFormat, TableLocation};
use url::Url;

/// What the scans of every table of a server share.
#[derive(Clone)]
pub struct ScanShared {
    /// The memory tier of decoded column batches.
    pub batches: Arc<ColumnCache>,
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

/// A Parquet table to register with [`register_parquet_table`].
pub struct ParquetTable<'a> {
    /// The table's name in the catalog.
    pub name: &'a str,
    /// Where its objects are: one object, or every `*.parquet` under a prefix.
    pub location: &'a TableLocation,
    /// The cached store its bytes are read through.
    pub store: Arc<CachedStore>,
    pub options: TableOptions,
    /// For an Iceberg table of a REST catalog: the catalog's table, whose
    /// answer is its current metadata file (`location` names the one it
    /// gave at registration).
    pub catalog: Option<RestTable>,
}

/// Registers `table` on `ctx`, reading through its store.
///
/// The store is registered under a URL of its own (`silt://<store id>`) so that
/// tables in the same bucket may still use different credentials, and its
/// objects appear under the store's namespace (`silt://<store id>/<namespace>/...`)
/// so that object paths are unique across the server. A directory or prefix
/// means every `*.parquet` object under it. Scans keep decoded column
/// batches in `shared.batches` (the memory tier) and count pruning in
/// `shared.metrics`.
///
/// An `iceberg+` or `delta+` location registers a lakehouse table instead
/// ([`crate::lakehouse`]): its schema is the current snapshot's, its files
/// those of the snapshot each query resolves.
pub async fn register_parquet_table(ctx: &SessionContext, table: ParquetTable<'_>, shared: &ScanShared) -> Result<()> {
    let ParquetTable {
        name,
        location,
        store,
        options,
        catalog,
    } = table;
    let base = format!("silt://{}", store.store_id());
    let base_url = Url::parse(&base).map_err(|e| DataFusionError::External(Box::new(e)))?;
    let namespace = store.namespace().to_string();
    ctx.runtime_env().register_object_store(&base_url, store.clone());
    let sources = ScanSources {
        store: store.clone(),
        batches: shared.batches.clone(),
        metadata_cache: ctx.runtime_env().cache_manager.get_file_metadata_cache(),
        metrics: shared.metrics.clone(),
    };
    match location.format {
        TableFormat::Parquet => {}
        TableFormat::Iceberg | TableFormat::Delta => {
            let provider = lakehouse_table(ctx, location, sources, catalog).await.map_err(|e| {
                let format = if location.format == TableFormat::Iceberg {
                    "Iceberg"
                } else {
                    "Delta"
                };
                DataFusionError::Plan(format!("cannot read {format} table '{name}' at {}: {e}", location.url))
            })?;
            ctx.register_table(name, Arc::new(provider))?;
            return Ok(());
        }
    }
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
    ctx.register_table(name, Arc::new(CachedParquetTable::new(listing, sources)))?;
    Ok(())
}

/// The lakehouse table at `location`, read through `sources`; its current
/// snapshot resolved now (its schema is the table's until the next).
async fn lakehouse_table(
    ctx: &SessionContext,
    location: &TableLocation,
    sources: ScanSources,
    catalog: Option<RestTable>,
) -> Result<CachedParquetTable> {
    let root = Url::parse(&format!("{}/", location.store_key())).map_err(|e| DataFusionError::External(Box::new(e)))?;
    let view_types = ctx.state().config_options().execution.parquet.schema_force_view_types;
    let path = Path::from(location.path.as_str());
    let source = match location.format {
        TableFormat::Delta => SnapshotSource::Delta(DeltaSnapshots::new(path, ObjectLocator::new(root.clone()))),
        _ => SnapshotSource::Iceberg(match catalog {
            Some(catalog) => IcebergSnapshots::in_catalog(path, catalog),
            None => IcebergSnapshots::new(path),
        }),
    };
    let files = Arc::new(LakehouseFiles::new(
        source,
        sources.store.clone(),
        sources.metadata_cache.clone(),
        root,
        view_types,
    ));
    files.schema().await?;
    Ok(CachedParquetTable::lakehouse(files, sources))
}
