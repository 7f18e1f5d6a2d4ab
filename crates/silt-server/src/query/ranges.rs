//! Byte ranges of one object of a table at one version, as stored
//! ([`silt_proto::RangesRequest`]): the column chunks a client decodes
//! itself when its link is slower than its decoder.
//!
//! The object is checked the way a scoped scan checks its scope
//! ([`silt_scan::scope::ScanScope::restrict`]): the table is listed through
//! the attempt's validation gate (the same validated listing a scan gets),
//! and an object missing from it or at another version than the request
//! names fails as [`CacheError::Changed`] (`ABORTED`), which the client
//! answers by planning again from a new layout. The bytes are then read at
//! exactly the listed version through the table's `CachedStore` (page
//! buffer, disk tier, object store with `If-Match`), so they are never of
//! another version; a version gone between the listing and the read fails
//! the same way. Validation and the one restart are the runner's, as for
//! every query ([`super::QueryRunner`]).

use std::sync::Arc;

use datafusion::arrow::array::{BinaryArray, RecordBatch, UInt64Array};
use datafusion::error::DataFusionError;
use object_store::path::Path;
use silt_cache::{CacheError, ObjectVersion, ValidationGate};
use silt_proto::{MAX_RANGES, MAX_RANGES_BYTES, MAX_TAIL_BYTES, RANGE_PIECE_BYTES, RangesRequest};

use crate::engine::Engine;
use crate::error::{RangesError, RequestError, ServerError};

/// The bytes read for one request, as the answer's batches.
pub struct Read {
    pub batches: Vec<RecordBatch>,
    /// Bytes of the object in them.
    pub bytes: u64,
}

/// What the query log shows of `request`.
pub fn text(request: &RangesRequest) -> String {
    format!(
        "byte ranges of {} ({} ranges, tail {}) of {}",
        request.path,
        request.ranges.len(),
        request.tail,
        request.table
    )
}

/// The refusal of `request` for `reason`.
fn refused(request: &RangesRequest, reason: RangesError) -> ServerError {
    RequestError::Ranges {
        table: request.table.clone(),
        path: request.path.clone(),
        reason,
    }
    .into()
}

/// The request's limits that need no listing: counts and sizes.
fn check_sizes(request: &RangesRequest) -> Result<(), ServerError> {
    if request.ranges.len() > MAX_RANGES {
        return Err(refused(
            request,
            RangesError::TooManyRanges {
                ranges: request.ranges.len(),
            },
        ));
    }
    if request.tail > MAX_TAIL_BYTES {
        return Err(refused(request, RangesError::TailTooLarge { tail: request.tail }));
    }
    let bytes: u128 = request.ranges.iter().map(|r| u128::from(r.length)).sum::<u128>() + u128::from(request.tail);
    if bytes > u128::from(MAX_RANGES_BYTES) {
        return Err(refused(request, RangesError::TooManyBytes { bytes }));
    }
    Ok(())
}

/// One attempt at `request`: list through `gate`, check, read.
pub async fn attempt(engine: &Engine, request: &RangesRequest, gate: Arc<ValidationGate>) -> Result<Read, ServerError> {
    check_sizes(request)?;
    let resolved = engine.resolve_table(&request.table, "byte ranges are read of").await?;
    let table = resolved.parquet()?;
    // Never a path outside the table's own (another table's object, or a
    // path that walks out of the table's folder).
    let location = Path::parse(&request.path).map_err(|_| refused(request, RangesError::NotInTable))?;
    if location.as_ref() != request.path || !resolved.holds(&location) {
        return Err(refused(request, RangesError::NotInTable));
    }
    let sources = format!("{}={}", resolved.name, resolved.config.url);
    let changed = || {
        let e = CacheError::changed(&request.path, &request.version);
        ServerError::reading(&sources, DataFusionError::External(Box::new(e)))
    };
    let files = table
        .list_files_gated(engine.listing_state(), Some(gate))
        .await
        .map_err(|e| ServerError::reading(&sources, e))?;
    let meta = files.into_iter().find(|m| m.location == location).ok_or_else(changed)?;
    if ObjectVersion::wire_token_of(&meta) != request.version {
        return Err(changed());
    }
    let size = meta.size;
    let mut ranges = Vec::with_capacity(request.ranges.len() + 1);
    for r in &request.ranges {
        match r.offset.checked_add(r.length) {
            Some(end) if end <= size => ranges.push(r.offset..end),
            _ => {
                let reason = RangesError::PastEnd {
                    offset: r.offset,
                    length: r.length,
                    size,
                };
                return Err(refused(request, reason));
            }
        }
    }
    if request.tail > 0 {
        ranges.push(size.saturating_sub(request.tail)..size);
    }
    let object = resolved
        .store
        .pin(&meta)
        .map_err(|e| ServerError::reading(&sources, e.into()))?;
    let read = resolved
        .store
        .read_pinned(&object, &ranges)
        .await
        .map_err(|e| ServerError::reading(&sources, DataFusionError::External(Box::new(e))))?;
    let mut batches = Vec::new();
    let mut bytes = 0;
    for (range, data) in ranges.iter().zip(read) {
        bytes += data.len() as u64;
        for (i, piece) in data.chunks(RANGE_PIECE_BYTES).enumerate() {
            let batch = RecordBatch::try_new(
                silt_proto::ranges_schema(),
                vec![
                    Arc::new(UInt64Array::from(vec![range.start + (i * RANGE_PIECE_BYTES) as u64])),
                    Arc::new(BinaryArray::from(vec![piece])),
                ],
            )
            .map_err(DataFusionError::from)?;
            batches.push(batch);
        }
    }
    Ok(Read { batches, bytes })
}
