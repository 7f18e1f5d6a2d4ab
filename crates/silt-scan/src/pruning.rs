//! Which parts of a file a scan reads, using everything the file offers:
//! row-group statistics, then the bloom filters of the row groups that
//! survive, then the page index (column index + offset index) within the row
//! groups that are left. Each step only removes rows that cannot match, so
//! answers never change.
//!
//! Counted twice: in the plan's DataFusion metrics (`ParquetFileMetrics`,
//! shown by `EXPLAIN ANALYZE`) and in the server's Prometheus counters
//! ([`crate::scan_metrics::ScanMetrics`]).

use datafusion::arrow::datatypes::Schema;
use datafusion::datasource::physical_plan::parquet::{ParquetFileMetrics, RowGroupAccess};
use datafusion::error::Result;
use datafusion::parquet::arrow::arrow_reader::RowSelection;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use silt_cache::BATCH_ROWS;

use crate::bloom::row_group_bloom_filters;
use crate::cached_scan::ScanSources;
use crate::column_loader::FileContext;
use crate::scan_filter::ScanFilter;

/// One row group to read and the rows of it that may match.
#[derive(Debug, Clone, PartialEq)]
pub struct RowGroupWork {
    pub rg: usize,
    /// The rows the page index does not rule out; `None`: every row.
    pub selection: Option<RowSelection>,
}

impl RowGroupWork {
    /// All rows of `rg`.
    pub fn all(rg: usize) -> Self {
        RowGroupWork { rg, selection: None }
    }

    /// Whether the selection keeps at most half of the row group's `rows`:
    /// then reading only the selected pages beats decoding (and caching) the
    /// whole column chunks.
    pub fn is_selective(&self, rows: usize) -> bool {
        self.selection.as_ref().is_some_and(|s| s.row_count() * 2 <= rows)
    }

    /// For each batch of [`BATCH_ROWS`] rows of a row group of `rows` rows,
    /// whether the selection keeps any of its rows (`None`: no selection).
    pub fn batches_selected(&self, rows: usize) -> Option<Vec<bool>> {
        let selection = self.selection.as_ref()?;
        let mut selected = vec![false; rows.div_ceil(BATCH_ROWS)];
        let mut start = 0usize;
        for run in selection.iter() {
            if !run.skip && run.row_count > 0 {
                let last = (start + run.row_count - 1).min(rows.saturating_sub(1));
                for flag in &mut selected[start / BATCH_ROWS..=last / BATCH_ROWS] {
                    *flag = true;
                }
            }
            start += run.row_count;
        }
        Some(selected)
    }
}

/// Prunes one file for one partition of a scan.
pub struct FilePruner<'a> {
    pub filter: &'a ScanFilter,
    pub table_schema: &'a Schema,
    pub file: &'a FileContext,
    pub sources: &'a ScanSources,
    /// This partition's DataFusion metrics for the file.
    pub file_metrics: &'a ParquetFileMetrics,
}

impl FilePruner<'_> {
    /// The file's row groups that statistics do not rule out.
    ///
    /// Every partition evaluates statistics over the whole file (so all
    /// deal the same survivors), but counts only the pruned row groups
    /// `owned` says are its own, so each is counted once per scan.
    pub fn statistics(&self, owned: impl Fn(usize) -> bool) -> Vec<usize> {
        let metadata = self.file.reader.metadata();
        // DataFusion's counters are fed below, for owned row groups only.
        let scratch = ParquetFileMetrics::new(0, "", &ExecutionPlanMetricsSet::new());
        let survivors = self.filter.row_groups(self.table_schema, metadata, &scratch);
        let (mut pruned, mut matched) = (0, 0);
        let mut next = survivors.iter().peekable();
        for rg in 0..metadata.num_row_groups() {
            let survived = next.next_if(|&&s| s == rg).is_some();
            if owned(rg) {
                if survived {
                    matched += 1;
                } else {
                    pruned += 1;
                }
            }
        }
        self.file_metrics.row_groups_pruned_statistics.add_pruned(pruned);
        self.file_metrics.row_groups_pruned_statistics.add_matched(matched);
        self.sources
            .metrics
            .row_groups_pruned_statistics
            .increment(pruned as u64);
        survivors
    }

    /// Those of `groups` whose bloom filters may hold the literals the
    /// filter compares with (all of them when it compares with none, or
    /// the file has no bloom filters for those columns).
    pub async fn bloom_filters(&self, groups: Vec<usize>) -> Result<Vec<usize>> {
        let columns = self.filter.bloom_columns();
        if columns.is_empty() {
            return Ok(groups);
        }
        let mut kept = Vec::with_capacity(groups.len());
        for rg in groups {
            let filters = row_group_bloom_filters(
                &self.sources.store,
                &self.sources.metadata_cache,
                self.file,
                self.table_schema,
                rg,
                &columns,
            )
            .await?;
            if self.filter.bloom_may_match(&filters, self.file_metrics) {
                kept.push(rg);
            } else {
                self.sources.metrics.row_groups_pruned_bloom_filter.increment(1);
            }
        }
        Ok(kept)
    }

    /// `groups` with the rows the page index does not rule out; a group
    /// none of whose pages can match is dropped.
    pub fn pages(&self, groups: &[usize]) -> Vec<RowGroupWork> {
        let pruned_before = self.file_metrics.page_index_pages_pruned.pruned();
        let access = self.filter.page_selections(
            self.table_schema,
            self.file.reader.metadata(),
            groups,
            self.file_metrics,
        );
        let pruned = self.file_metrics.page_index_pages_pruned.pruned() - pruned_before;
        self.sources.metrics.pages_pruned.increment(pruned as u64);
        groups
            .iter()
            .zip(access)
            .filter_map(|(&rg, access)| match access {
                RowGroupAccess::Skip => None,
                RowGroupAccess::Scan => Some(RowGroupWork::all(rg)),
                RowGroupAccess::Selection(s) if s.row_count() >= self.file.rows(rg) => Some(RowGroupWork::all(rg)),
                RowGroupAccess::Selection(s) => Some(RowGroupWork { rg, selection: Some(s) }),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::parquet::arrow::arrow_reader::RowSelector;

    fn work(runs: Vec<RowSelector>) -> RowGroupWork {
        RowGroupWork {
            rg: 0,
            selection: Some(RowSelection::from(runs)),
        }
    }

    #[test]
    fn batches_selected_marks_batches_holding_selected_rows() {
        let rows = 3 * BATCH_ROWS + 10;
        let w = work(vec![
            RowSelector::skip(BATCH_ROWS + 5),
            RowSelector::select(10),
            RowSelector::skip(2 * BATCH_ROWS - 10),
            RowSelector::select(5),
        ]);
        assert_eq!(w.batches_selected(rows), Some(vec![false, true, false, true]));
        // A run that ends exactly at a batch boundary does not mark the next batch.
        let w = work(vec![
            RowSelector::select(BATCH_ROWS),
            RowSelector::skip(rows - BATCH_ROWS),
        ]);
        assert_eq!(w.batches_selected(rows), Some(vec![true, false, false, false]));
        assert_eq!(RowGroupWork::all(0).batches_selected(rows), None);
    }

    #[test]
    fn selective_means_at_most_half_the_rows() {
        let w = work(vec![RowSelector::skip(50), RowSelector::select(50)]);
        assert!(w.is_selective(100));
        let w = work(vec![RowSelector::skip(49), RowSelector::select(51)]);
        assert!(!w.is_selective(100));
        assert!(!RowGroupWork::all(0).is_selective(100));
    }
}
