//! Classic Delta checkpoints: a Parquet file (or several parts) holding the
//! table's state at a version as one action per row. Only the columns that
//! say which rows the table holds are read (`add`'s path, size, partition
//! values, deletion vector and statistics as JSON; `metaData`; `protocol` —
//! not `stats_parsed`, which can be large and of any type); each row is
//! turned into the same
//! JSON as a commit's line and parsed by the same code, so both sources of
//! actions agree by construction.

use arrow::json::LineDelimitedWriter;
use bytes::Bytes;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::actions::{Action, parse_commit};
use crate::{LakehouseError, Result};

/// The actions of one checkpoint file (`path` names it in errors).
pub fn parse_checkpoint(path: &str, bytes: Bytes) -> Result<Vec<Action>> {
    let invalid = |reason: String| LakehouseError::Invalid {
        path: path.to_string(),
        what: "Delta checkpoint",
        reason,
    };
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| invalid(e.to_string()))?;
    let leaves: Vec<usize> = builder
        .parquet_schema()
        .columns()
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            let parts = c.path().parts();
            match parts.first().map(String::as_str) {
                Some("metaData" | "protocol") => true,
                Some("add") => matches!(
                    parts.get(1).map(String::as_str),
                    Some("path" | "size" | "partitionValues" | "deletionVector" | "stats")
                ),
                _ => false,
            }
        })
        .map(|(i, _)| i)
        .collect();
    let mask = ProjectionMask::leaves(builder.parquet_schema(), leaves);
    let reader = builder
        .with_projection(mask)
        .build()
        .map_err(|e| invalid(e.to_string()))?;
    let mut actions = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| invalid(e.to_string()))?;
        let mut lines = Vec::new();
        let mut writer = LineDelimitedWriter::new(&mut lines);
        writer.write(&batch).map_err(|e| invalid(e.to_string()))?;
        writer.finish().map_err(|e| invalid(e.to_string()))?;
        actions.extend(parse_commit(path, &lines)?);
    }
    Ok(actions)
}
