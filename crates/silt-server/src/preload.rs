//! Preload: warm the metadata and disk tiers (and optionally memory) with a
//! table's footers and column chunks before queries need them. With
//! `memory`, the columns are then scanned once, which decodes them into the
//! memory tier (the scan admits every batch it decodes).
//!
//! Runs as the `silt.preload` Flight action; the action's result stream
//! carries progress, so `silt preload` can draw a bar with rate and ETA.

use std::sync::Arc;

use datafusion::error::DataFusionError;
use datafusion::execution::cache::cache_manager::FileMetadataCache;
use futures::TryStreamExt;
use object_store::ObjectMeta;
use serde::{Deserialize, Serialize};
use silt_cache::CachedStore;
use silt_proto::{Projection, ScanRequest};
use silt_scan::chunks::{column_chunk_ranges, root_indices};
use silt_scan::column_loader::Admission;
use silt_scan::footer::pinned_footer;
use tokio::sync::mpsc;

use crate::engine::Engine;
use crate::error::{RequestError, ServerError};

/// What to preload (the action's JSON body).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct PreloadRequest {
    pub table: String,
    /// Top-level columns to load; all when absent.
    #[serde(default)]
    pub columns: Option<Vec<String>>,
    /// Also decode the columns into the memory tier.
    #[serde(default)]
    pub memory: bool,
}

/// One progress report (each result message of the action).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct PreloadProgress {
    pub files_total: u64,
    pub files_done: u64,
    pub bytes_total: u64,
    pub bytes_done: u64,
    pub done: bool,
}

/// The table's store and the objects it reads (as its scans list them).
async fn objects_of(engine: &Engine, table: &str) -> Result<(Arc<CachedStore>, Vec<ObjectMeta>), ServerError> {
    let resolved = engine.resolve_table(table, "preload reads").await?;
    let objects = resolved.objects(engine).await?;
    Ok((resolved.store, objects))
}

/// Runs a preload, sending progress to `progress` as it goes.
pub async fn run(
    engine: Arc<Engine>,
    request: PreloadRequest,
    progress: mpsc::Sender<PreloadProgress>,
) -> Result<PreloadProgress, ServerError> {
    let (store, objects) = objects_of(&engine, &request.table).await?;
    let metadata_cache: Arc<FileMetadataCache> = engine.metadata_tier().clone();
    let mut report = PreloadProgress {
        files_total: objects.len() as u64,
        ..Default::default()
    };
    // Footers first (into the metadata tier), so the total is known up front.
    let mut plan = Vec::with_capacity(objects.len());
    for meta in &objects {
        let (object, parquet) = pinned_footer(&store, &metadata_cache, meta)
            .await
            .map_err(|e| ServerError::reading(meta.location.as_ref(), e))?;
        if let Some(cols) = &request.columns {
            let schema = parquet.file_metadata().schema_descr();
            if let Some(missing) = cols
                .iter()
                .find(|c| !schema.columns().iter().any(|d| d.path().parts().first() == Some(c)))
            {
                return Err(RequestError::NoColumn {
                    table: request.table.clone(),
                    column: missing.clone(),
                }
                .into());
            }
        }
        let roots = request.columns.as_deref().map(|names| root_indices(&parquet, names));
        let ranges = column_chunk_ranges(&parquet, 0..parquet.num_row_groups(), roots.as_deref());
        report.bytes_total += ranges.iter().map(|r| r.end - r.start).sum::<u64>();
        plan.push((meta.location.clone(), object, ranges));
    }
    let _ = progress.send(report.clone()).await;
    for (location, object, ranges) in plan {
        for range in ranges {
            let len = range.end - range.start;
            store
                .warm(&object, range, false)
                .await
                .map_err(|e| ServerError::reading(location.as_ref(), DataFusionError::External(Box::new(e))))?;
            report.bytes_done += len;
            let _ = progress.try_send(report.clone());
        }
        report.files_done += 1;
        let _ = progress.send(report.clone()).await;
    }
    if request.memory {
        decode_into_memory(&engine, &request).await?;
    }
    report.done = true;
    Ok(report)
}

/// Scans the preloaded columns once, discarding the rows: every batch the
/// scan decodes is admitted to the memory tier ([`Admission::Every`]: even
/// while the transcoder is behind, when a query's scan admits a chunk only
/// on its second read).
async fn decode_into_memory(engine: &Engine, request: &PreloadRequest) -> Result<(), ServerError> {
    let scan = ScanRequest {
        table: request.table.clone(),
        projection: request.columns.clone().map(|columns| Projection { columns }),
        ..Default::default()
    };
    let mut stream = crate::query::plan::scan(engine, &scan, None)
        .await?
        .with_admission(Admission::Every)
        .execute()
        .await?;
    while stream
        .try_next()
        .await
        .map_err(|e| ServerError::reading(&request.table, e))?
        .is_some()
    {}
    Ok(())
}
