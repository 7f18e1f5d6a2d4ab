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
use silt_proto::{ObjectSegments, Projection, ScanRequest, SegmentScope};
use silt_scan::chunks::{column_chunk_ranges, root_indices};
use silt_scan::column_loader::Admission;
use silt_scan::footer::pinned_footer;
use silt_scan::scope::ScanScope;
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
    /// Only these row groups of these object versions (as the table's
    /// layout names them); the whole table when absent. A fleet member is
    /// sent the row groups it owns (`silt preload --server a,b,c`). An
    /// object no longer at the version named fails the preload as changed.
    #[serde(default)]
    pub scope: Option<Vec<PreloadObject>>,
}

/// Row groups of one object version to preload ([`PreloadRequest::scope`]).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct PreloadObject {
    pub path: String,
    pub version: String,
    pub row_groups: Vec<u32>,
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
    let (objects, scoped) = match &request.scope {
        None => (objects, None),
        Some(list) => {
            let scope = ScanScope::new(list.iter().map(|o| {
                (
                    o.path.clone(),
                    o.version.clone(),
                    o.row_groups.iter().map(|&g| g as usize).collect(),
                )
            }));
            let (kept, groups) = scope
                .restrict(objects)
                .map_err(|e| ServerError::reading(&request.table, e))?;
            (kept, Some(groups))
        }
    };
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
        let row_groups: Vec<usize> = match &scoped {
            None => (0..parquet.num_row_groups()).collect(),
            Some(groups) => groups
                .get(&meta.location)
                .map(|g| g.keys().copied().filter(|&i| i < parquet.num_row_groups()).collect())
                .unwrap_or_default(),
        };
        let ranges = column_chunk_ranges(&parquet, row_groups, roots.as_deref());
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
    let scope = request.scope.as_ref().map(|list| SegmentScope {
        objects: list
            .iter()
            .map(|o| ObjectSegments {
                path: o.path.clone(),
                version: o.version.clone(),
                row_groups: o.row_groups.clone(),
                selections: Vec::new(),
            })
            .collect(),
    });
    let scan = ScanRequest {
        table: request.table.clone(),
        projection: request.columns.clone().map(|columns| Projection { columns }),
        scope,
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
