//! What a point lookup needs to know about one object version and one key
//! column, decoded once and kept: row-group and page min/max of the key, the
//! row ranges of the pages, and whether the file is sorted on the key.
//!
//! Finding the candidate pages of a key is then a comparison per page (a
//! binary search when the file is sorted on the key), with nothing read.

use std::cmp::Ordering;
use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, make_comparator};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::parquet::arrow::arrow_reader::statistics::StatisticsConverter;

use silt_liquid::integer::partition_point;

use crate::column_loader::FileContext;

/// One unit of the key column's index: a page, or a whole row group when
/// the file has no page index.
#[derive(Debug, Clone)]
struct Unit {
    row_group: usize,
    /// Rows of the row group the unit covers.
    rows: Range<usize>,
}

/// The lookup index of one file version's key column.
#[derive(Debug)]
pub struct KeyIndex {
    /// The pinned file: every read of a lookup through this index is of
    /// this version.
    pub file: FileContext,
    /// The key column as the file's reader produces it (the table's type).
    pub field: FieldRef,
    /// Table index of the key column.
    pub column: usize,
    units: Vec<Unit>,
    /// Per unit: smallest and largest key (null: unknown).
    mins: ArrayRef,
    maxes: ArrayRef,
    /// Units ordered on the key with disjoint ranges: a key's units are
    /// found by binary search.
    sorted: bool,
}

/// Key types the lookup path serves; others take the general path.
pub fn is_lookup_type(data_type: &DataType) -> bool {
    data_type.is_integer()
        || matches!(
            data_type,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Date32 | DataType::Date64
        )
}

impl KeyIndex {
    /// Builds the index of table column `column` of `file`; `None` when the
    /// file lacks the column (no row of it can match).
    pub fn build(file: FileContext, column: usize, name: &str) -> Result<Option<Self>> {
        let schema = file.reader.schema().clone();
        let Ok(field) = schema.field_with_name(name) else {
            return Ok(None);
        };
        let field = Arc::new(field.clone());
        let metadata = file.reader.metadata().clone();
        let parquet_schema = metadata.file_metadata().schema_descr();
        let converter = StatisticsConverter::try_new(name, &schema, parquet_schema)?;
        let groups: Vec<usize> = (0..metadata.num_row_groups()).collect();
        let pages = match (
            metadata.column_index(),
            metadata.offset_index(),
            converter.parquet_column_index(),
        ) {
            (Some(index), Some(offsets), Some(leaf)) if !groups.is_empty() => {
                let mins = converter.data_page_mins(index, offsets, &groups)?;
                let maxes = converter.data_page_maxes(index, offsets, &groups)?;
                let mut units = Vec::with_capacity(mins.len());
                for &rg in &groups {
                    let total = file.rows(rg);
                    let locations = offsets[rg][leaf].page_locations();
                    for (i, page) in locations.iter().enumerate() {
                        let start = usize::try_from(page.first_row_index).unwrap_or(0);
                        let end = locations
                            .get(i + 1)
                            .map_or(total, |next| usize::try_from(next.first_row_index).unwrap_or(total));
                        units.push(Unit {
                            row_group: rg,
                            rows: start..end,
                        });
                    }
                }
                (units.len() == mins.len()).then_some((units, mins, maxes))
            }
            _ => None,
        };
        let (units, mins, maxes) = match pages {
            Some(p) => p,
            None => {
                let row_groups = metadata.row_groups();
                let units = groups
                    .iter()
                    .map(|&rg| Unit {
                        row_group: rg,
                        rows: 0..file.rows(rg),
                    })
                    .collect();
                (
                    units,
                    converter.row_group_mins(row_groups)?,
                    converter.row_group_maxes(row_groups)?,
                )
            }
        };
        let sorted = is_sorted(&mins, &maxes)?;
        Ok(Some(KeyIndex {
            file,
            field,
            column,
            units,
            mins,
            maxes,
            sorted,
        }))
    }

    /// Rows that may hold one of `keys` (already of the key column's type,
    /// nulls ignored): per row group, ascending and merged row ranges.
    pub fn candidates(&self, keys: &ArrayRef) -> Result<Vec<(usize, Vec<Range<usize>>)>> {
        let options = SortOptions::default();
        let cmp_min = make_comparator(self.mins.as_ref(), keys, options).map_err(DataFusionError::from)?;
        let cmp_max = make_comparator(self.maxes.as_ref(), keys, options).map_err(DataFusionError::from)?;
        // Whether unit `u` may hold key `k`: min <= k <= max, unknown bounds admitting.
        let may_hold = |u: usize, k: usize| {
            (self.mins.is_null(u) || cmp_min(u, k) != Ordering::Greater)
                && (self.maxes.is_null(u) || cmp_max(u, k) != Ordering::Less)
        };
        let mut chosen = vec![false; self.units.len()];
        for k in (0..keys.len()).filter(|&k| keys.is_valid(k)) {
            if self.sorted {
                // First unit whose max is not below the key; units from there on while min <= key.
                let first = partition_point(self.units.len(), |u| cmp_max(u, k) == Ordering::Less);
                for (u, c) in chosen.iter_mut().enumerate().skip(first) {
                    if cmp_min(u, k) == Ordering::Greater {
                        break;
                    }
                    *c = true;
                }
            } else {
                for (u, c) in chosen.iter_mut().enumerate() {
                    *c = *c || may_hold(u, k);
                }
            }
        }
        let mut out: Vec<(usize, Vec<Range<usize>>)> = Vec::new();
        for (unit, _) in self.units.iter().zip(&chosen).filter(|(_, c)| **c) {
            match out.last_mut() {
                Some((rg, ranges)) if *rg == unit.row_group => match ranges.last_mut() {
                    Some(last) if last.end == unit.rows.start => last.end = unit.rows.end,
                    _ => ranges.push(unit.rows.clone()),
                },
                _ => out.push((unit.row_group, vec![unit.rows.clone()])),
            }
        }
        Ok(out)
    }

    /// Bytes this index holds (for the cache's weigher).
    pub fn heap_size(&self) -> usize {
        self.mins.get_array_memory_size()
            + self.maxes.get_array_memory_size()
            + self.units.len() * std::mem::size_of::<Unit>()
    }
}

/// Whether units are in key order with disjoint ranges (every bound known):
/// `max[i] < min[i + 1]`. Equal boundaries (a key spanning two pages) count
/// as unsorted only in the strict sense; the search handles them because it
/// walks forward from the first unit whose max reaches the key.
fn is_sorted(mins: &ArrayRef, maxes: &ArrayRef) -> Result<bool> {
    if mins.null_count() > 0 || maxes.null_count() > 0 {
        return Ok(false);
    }
    let cmp = make_comparator(maxes.as_ref(), mins.as_ref(), SortOptions::default()).map_err(DataFusionError::from)?;
    let within =
        make_comparator(mins.as_ref(), maxes.as_ref(), SortOptions::default()).map_err(DataFusionError::from)?;
    Ok((0..mins.len()).all(|i| within(i, i) != Ordering::Greater)
        && (1..mins.len()).all(|i| cmp(i - 1, i) != Ordering::Greater))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;

    #[test]
    fn sortedness_allows_shared_boundaries_but_not_overlap() {
        let a = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as ArrayRef;
        assert!(is_sorted(&a(vec![0, 10, 20]), &a(vec![9, 19, 29])).unwrap());
        assert!(is_sorted(&a(vec![0, 10, 10]), &a(vec![10, 10, 29])).unwrap());
        assert!(!is_sorted(&a(vec![0, 5]), &a(vec![9, 19])).unwrap());
        assert!(!is_sorted(&a(vec![20, 0]), &a(vec![29, 9])).unwrap());
    }

    #[test]
    fn partition_point_finds_the_first_false() {
        assert_eq!(partition_point(5, |i| i < 3), 3);
        assert_eq!(partition_point(5, |_| true), 5);
        assert_eq!(partition_point(0, |_| true), 0);
    }
}
