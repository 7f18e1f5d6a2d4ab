//! The scan set of a planned scan: which column chunks of which object
//! versions it will read, registered with the server's
//! [`ScanSets`](silt_cache::ScanSets) when the scan is planned (so a query
//! queued for a slot already protects what it will read) and released by
//! the scan as it passes each row group ([`silt_cache::ScanSet::passed`]).

use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::datasource::physical_plan::parquet::ParquetFileMetrics;
use datafusion::parquet::file::metadata::ParquetMetaData;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use object_store::ObjectMeta;
use silt_cache::{ChunkKey, PinnedObject, ReservedChunk};

use crate::chunks::column_chunk_ranges;
use crate::file_columns::file_columns;
use crate::scan_filter::ScanFilter;
use crate::scope::ScopedRowGroups;

/// One listed file of a scan, pinned, with its footer.
pub struct PinnedFile {
    pub meta: ObjectMeta,
    pub object: PinnedObject,
    pub metadata: Arc<ParquetMetaData>,
}

/// The column chunks a scan of `files` reads: per file, the row groups
/// statistics keep (and the scope names, if scoped), times the `needed`
/// table columns the file has. Bloom filters and the page index may prune
/// more when the scan runs; those row groups are released as passed.
pub fn scan_set_chunks(
    files: &[PinnedFile],
    table_schema: &Schema,
    needed: &[usize],
    filter: Option<&ScanFilter>,
    scoped: Option<&ScopedRowGroups>,
) -> Vec<ReservedChunk> {
    let scratch = ParquetFileMetrics::new(0, "", &ExecutionPlanMetricsSet::new());
    let mut chunks = Vec::new();
    for file in files {
        let metadata = file.metadata.as_ref();
        let groups = match filter {
            Some(f) => f.row_groups(table_schema, metadata, &scratch),
            None => (0..metadata.num_row_groups()).collect(),
        };
        let wanted = scoped.map(|s| s.get(&file.meta.location));
        let roots = file_columns(table_schema, metadata);
        for rg in groups {
            if wanted.is_some_and(|w| w.is_none_or(|w| !w.contains_key(&rg))) {
                continue;
            }
            for &column in needed {
                let Some(root) = roots[column] else {
                    continue; // the file lacks it: read as nulls, nothing to hold
                };
                chunks.push(ReservedChunk {
                    chunk: ChunkKey::new(file.object.key.clone(), rg as u32, column as u32),
                    bytes: column_chunk_ranges(metadata, [rg], Some(&[root])),
                    batches: batches(metadata, rg),
                });
            }
        }
    }
    chunks
}

/// Memory-tier batches in row group `rg`: how many entries hold a whole chunk.
fn batches(metadata: &ParquetMetaData, rg: usize) -> u32 {
    let rows = usize::try_from(metadata.row_group(rg).num_rows()).unwrap_or(0);
    u32::try_from(rows.div_ceil(silt_cache::BATCH_ROWS)).unwrap_or(u32::MAX)
}
