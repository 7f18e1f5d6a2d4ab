//! The lookup path of the server: a `LookupRequest` ticket (or SQL of a
//! lookup's shape, [`super::lookup_shape`]) answered without planning (see
//! [`silt_scan::lookup`]): decoding the request, resolving its columns, and
//! one attempt at the answer. Validation and the restart on a changed
//! version are the runner's, as for every query ([`super::QueryRunner`]).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, new_null_array};
use datafusion::arrow::buffer::Buffer;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::ipc::reader::StreamDecoder;
use datafusion::error::DataFusionError;
use silt_cache::ValidationGate;
use silt_proto::LookupRequest;
use silt_scan::lookup::{KeyLookup, is_lookup_type, lookup};

use crate::engine::Engine;
use crate::error::{IpcError, KeysError, RequestError, ServerError};
use crate::metrics::ServerMetrics;

/// A lookup to run: the table, key column, keys and columns, by name.
#[derive(Debug, Clone)]
pub struct LookupQuery {
    pub table: String,
    pub key_column: String,
    pub keys: ArrayRef,
    /// `None`: every column.
    pub projection: Option<Vec<String>>,
}

impl LookupQuery {
    /// Decodes a [`LookupRequest`] (keys as an Arrow IPC stream of one
    /// one-column batch).
    pub fn from_request(request: &LookupRequest) -> Result<Self, ServerError> {
        let bad = |reason| -> ServerError {
            RequestError::LookupKeys {
                table: request.table.clone(),
                reason,
            }
            .into()
        };
        let batches = decode_ipc_stream(&request.keys).map_err(|e| bad(KeysError::NotIpc(e)))?;
        let mut arrays = Vec::new();
        for batch in batches {
            if batch.num_columns() != 1 {
                return Err(bad(KeysError::Columns {
                    columns: batch.num_columns(),
                }));
            }
            arrays.push(batch.column(0).clone());
        }
        let keys = match arrays.len() {
            0 => return Err(bad(KeysError::NoKeys)),
            1 => arrays.pop().unwrap_or_else(|| new_null_array(&DataType::Null, 0)),
            _ => {
                let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
                datafusion::arrow::compute::concat(&refs).map_err(|e| bad(KeysError::Concat(e)))?
            }
        };
        Ok(LookupQuery {
            table: request.table.clone(),
            key_column: request.key_column.clone(),
            keys,
            projection: request.projection.as_ref().map(|p| p.columns.clone()),
        })
    }
}

/// The batches of an Arrow IPC stream sent by a client, decoded without
/// trusting it: the push decoder allocates only as many bytes as are
/// present (a blocking reader allocates whatever a corrupt length prefix
/// declares: a hostile stream could abort the process), and a panic in a
/// decoder on malformed buffers is an error, not a dead connection.
fn decode_ipc_stream(bytes: &[u8]) -> Result<Vec<RecordBatch>, IpcError> {
    std::panic::catch_unwind(|| {
        let mut decoder = StreamDecoder::new();
        let mut buffer = Buffer::from(bytes);
        let mut batches = Vec::new();
        while !buffer.is_empty() {
            match decoder.decode(&mut buffer)? {
                Some(batch) => batches.push(batch),
                None if buffer.is_empty() => break,
                None => {}
            }
        }
        decoder.finish()?;
        Ok(batches)
    })
    .unwrap_or(Err(IpcError::Malformed))
}

/// Output schema of `query` (what a `GetFlightInfo` reports), checking
/// the table and columns exist.
pub async fn schema(engine: &Engine, query: &LookupQuery) -> Result<SchemaRef, ServerError> {
    let table = engine.resolve_table(&query.table, "lookups read").await?;
    let schema = table.parquet()?.schema_ref();
    let (_, projection) = resolve(&schema, query)?;
    Ok(Arc::new(schema.project(&projection).map_err(DataFusionError::from)?))
}

/// A lookup's answer: its schema and the rows found, with where they came
/// from (counted once the runner has confirmed the answer).
pub struct Found {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
    /// Row groups answered from the memory tier, from pages, and skipped by
    /// a bloom filter.
    row_groups: (usize, usize, usize),
}

impl Found {
    /// Counts where the answer's row groups came from.
    pub fn count(&self, metrics: &ServerMetrics) {
        let (memory, pages, bloom_skipped) = self.row_groups;
        metrics.lookup_row_groups_memory.increment(memory as u64);
        metrics.lookup_row_groups_pages.increment(pages as u64);
        metrics.lookup_row_groups_bloom_skipped.increment(bloom_skipped as u64);
    }
}

/// One attempt at `query` on listings gated by `gate` (under `always` they
/// may be speculative: the runner confirms the gate before the rows go
/// out, and runs the lookup again on a changed version).
pub async fn attempt(engine: &Engine, query: &LookupQuery, gate: Arc<ValidationGate>) -> Result<Found, ServerError> {
    let resolved = engine.resolve_table(&query.table, "lookups read").await?;
    let table = Some(resolved.parquet()?)
        .filter(|t| t.is_cached())
        .ok_or_else(|| RequestError::NestedColumns {
            table: query.table.clone(),
        })?;
    let schema = table.schema_ref();
    let (key_column, projection) = resolve(&schema, query)?;
    let request = KeyLookup {
        key_column,
        keys: query.keys.clone(),
        projection: projection.clone(),
    };
    let outcome = lookup(
        table,
        engine.listing_state(),
        Some(gate),
        engine.lookup_indexes(),
        &request,
    )
    .await
    .map_err(|e| ServerError::reading(&query.table, e))?;
    Ok(Found {
        schema: Arc::new(schema.project(&projection).map_err(DataFusionError::from)?),
        row_groups: (
            outcome.memory_row_groups,
            outcome.page_row_groups,
            outcome.bloom_skipped_row_groups,
        ),
        batches: outcome.batches,
    })
}

/// Table indices of the key column and the projection.
fn resolve(schema: &SchemaRef, query: &LookupQuery) -> Result<(usize, Vec<usize>), ServerError> {
    let index = |name: &str| {
        schema.index_of(name).map_err(|_| RequestError::NoColumn {
            table: query.table.clone(),
            column: name.to_string(),
        })
    };
    let key = index(&query.key_column)?;
    let key_type = schema.field(key).data_type();
    if !is_lookup_type(key_type) {
        return Err(RequestError::LookupKeyType {
            column: query.key_column.clone(),
            data_type: key_type.clone(),
        }
        .into());
    }
    let projection = match &query.projection {
        None => (0..schema.fields().len()).collect(),
        Some(names) if names.is_empty() => {
            return Err(RequestError::EmptyProjection.into());
        }
        Some(names) => names.iter().map(|n| index(n)).collect::<Result<_, _>>()?,
    };
    Ok((key, projection))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;

    fn keys_stream() -> Vec<u8> {
        LookupRequest::encode_keys(Arc::new(Int64Array::from(vec![1, 2, 3]))).unwrap()
    }

    #[test]
    fn hostile_key_streams_are_errors_not_aborts() {
        let good = keys_stream();
        assert_eq!(decode_ipc_stream(&good).unwrap()[0].num_rows(), 3);
        // A length prefix declaring ~2 GiB of metadata (a blocking reader
        // allocates it up front), then a cut stream, then noise.
        let mut huge = good.clone();
        huge[4..8].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
        assert!(decode_ipc_stream(&huge).is_err());
        assert!(decode_ipc_stream(&good[..good.len() / 2]).is_err());
        assert!(decode_ipc_stream(&[0xff; 64]).is_err());
    }
}
