//! What a lakehouse snapshot deletes from one file, as a lookup applies it:
//! rows deleted by position are left out of the matching rows before any
//! column is read; rows deleted by value (Iceberg equality deletes) are
//! dropped once their key columns are read with the found rows. So a
//! lookup never returns a row the snapshot deleted, as the scan never does
//! ([`crate::cached_scan`]).

use std::sync::Arc;

use datafusion::arrow::array::{BooleanArray, RecordBatch};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::Schema;
use datafusion::error::{DataFusionError, Result};

use crate::column_loader::FileContext;
use crate::lakehouse::equality::{KeySet, key_columns};
use crate::lakehouse::{PositionDeletes, TableFiles};

/// The deletes of one file of a snapshot.
pub(super) struct FileDeletes<'a> {
    file: &'a FileContext,
    positions: &'a PositionDeletes,
    /// Each equality delete set that applies, with its key columns (table
    /// column indices).
    sets: Vec<(Arc<KeySet>, Vec<usize>)>,
}

impl<'a> FileDeletes<'a> {
    /// What `snapshot` deletes from `file` (a file of it), its columns
    /// those of `schema`.
    pub(super) fn of(snapshot: &'a TableFiles, file: &'a FileContext, schema: &Schema) -> Result<Self> {
        let sets = snapshot
            .equality
            .of(&file.meta.location)
            .iter()
            .map(|keys| Ok((keys.clone(), key_columns(keys, schema)?)))
            .collect::<Result<_>>()?;
        Ok(FileDeletes {
            file,
            positions: &snapshot.deletes,
            sets,
        })
    }

    /// Whether equality deletes apply ([`Self::values_live`] drops rows).
    pub(super) fn by_value(&self) -> bool {
        !self.sets.is_empty()
    }

    /// The table columns equality deletes compare (read with the rows).
    pub(super) fn value_columns(&self) -> impl Iterator<Item = usize> + '_ {
        self.sets.iter().flat_map(|(_, columns)| columns.iter().copied())
    }

    /// Which rows of row group `rg` are not deleted by position; `None`
    /// when none is.
    pub(super) fn live_positions(&self, rg: usize) -> Option<BooleanBuffer> {
        self.positions.live_rows(self.file, rg)
    }

    /// `batch` (rows found, its columns the table columns `projection`,
    /// which include [`Self::value_columns`]) without the rows an equality
    /// delete removes.
    pub(super) fn values_live(&self, batch: RecordBatch, projection: &[usize]) -> Result<RecordBatch> {
        let mut live: Option<BooleanBuffer> = None;
        for (keys, columns) in &self.sets {
            let arrays = columns
                .iter()
                .map(|c| {
                    let slot = projection.iter().position(|p| p == c).ok_or_else(|| {
                        DataFusionError::Internal(format!("equality delete column #{c} not read by the lookup"))
                    })?;
                    Ok(batch.column(slot).clone())
                })
                .collect::<Result<Vec<_>>>()?;
            let kept = keys.live(&arrays)?;
            live = Some(match live {
                Some(l) => &l & &kept,
                None => kept,
            });
        }
        match live {
            Some(live) => Ok(filter_record_batch(&batch, &BooleanArray::from(live))?),
            None => Ok(batch),
        }
    }
}
