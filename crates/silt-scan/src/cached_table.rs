//! `CachedParquetTable`: a Parquet table whose scans go through the memory
//! tier of decoded column batches ([`CachedScanExec`]).
//!
//! Listing, schema inference, file statistics and validation stay with
//! DataFusion's `ListingTable` (its LIST or HEAD per query is what validates
//! object versions under `always`); only the reading of row groups is
//! Silt's. Tables with nested columns are read by the `ListingTable` itself
//! (their Parquet-to-Arrow mapping is not one column chunk per root column).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::datasource::listing::ListingTable;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;

use crate::cached_scan::{CachedScanExec, ScanSources, ScanSpec};
use crate::scan_filter::ScanFilter;

#[derive(Debug)]
pub struct CachedParquetTable {
    listing: Arc<ListingTable>,
    sources: ScanSources,
    /// Whether scans read through the memory tier (false: nested columns).
    cached: bool,
}

impl std::fmt::Debug for ScanSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanSources").finish_non_exhaustive()
    }
}

impl CachedParquetTable {
    pub fn new(listing: ListingTable, sources: ScanSources) -> Self {
        let cached = !listing.schema().fields().iter().any(|f| f.data_type().is_nested());
        CachedParquetTable {
            listing: Arc::new(listing),
            sources,
            cached,
        }
    }
}

#[async_trait]
impl TableProvider for CachedParquetTable {
    fn schema(&self) -> SchemaRef {
        self.listing.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    /// Filters are applied in the scan but reported inexact, so DataFusion
    /// re-checks surviving rows: a filter the scan cannot fully decide (say,
    /// on a column a file lacks) never changes an answer.
    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                if self.cached && !f.is_volatile() {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !self.cached {
            return self.listing.scan(state, projection, filters, limit).await;
        }
        let table_schema = self.listing.schema();
        let projection: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..table_schema.fields().len()).collect(),
        };
        let listed = self.listing.list_files_for_scan(state, &[], None).await?;
        let files: Vec<_> = listed
            .file_groups
            .iter()
            .flat_map(|g| g.files().iter().map(|f| f.object_meta.clone()))
            .collect();
        if files.is_empty() {
            return Ok(Arc::new(EmptyExec::new(Arc::new(table_schema.project(&projection)?))));
        }
        // Filters are Inexact: one the scan cannot compile is left to the
        // FilterExec DataFusion keeps above the scan.
        let filter = ScanFilter::try_new(state, &table_schema, filters).unwrap_or_else(|e| {
            tracing::debug!("scan filter not compiled, evaluated above the scan: {e}");
            None
        });
        let mut statistics = listed.statistics.project(Some(&projection));
        if filter.is_some() {
            statistics = statistics.to_inexact();
        }
        let spec = ScanSpec {
            files,
            table_schema,
            projection,
            filter,
            limit,
            statistics,
        };
        let partitions = state.config().target_partitions();
        Ok(Arc::new(CachedScanExec::new(spec, self.sources.clone(), partitions)?))
    }
}
