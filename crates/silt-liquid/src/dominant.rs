//! The dominant-value form: one value (often empty, zero or null) for most
//! rows, the rest kept as exceptions.
//!
//! Why: ClickBench-like tables carry dozens of columns that are almost always
//! empty or default (`MobilePhoneModel`, `UTMSource`, `AdvEngineID`, ...).
//! Parquet stores them in a few bytes with run-length encoding; bit-packing
//! still spends bits on every row, and a dictionary spends a key per row. Here
//! a batch is the dominant value and the exceptions as runs of rows holding
//! one value each (their row ranges, sorted, and a value per run): a
//! 2%-exception column of 8,192 rows costs at most ~1 KiB, a clustered one a
//! few bytes per run. It stays element-addressable (a row is an exception iff
//! a binary search over the runs finds it), so `take` and `filter` cost in
//! proportion to the rows asked for, and a predicate is evaluated once on the
//! dominant value and once per run, then mapped to rows.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, UInt32Array, make_comparator};
use arrow::compute::SortOptions;
use arrow::compute::take;
use arrow::datatypes::DataType;

use crate::persist::{self, Reader, Writer, tag};
use crate::{LiquidArray, LiquidArrayRef, LiquidPredicate};

/// Smallest share of rows the dominant value must hold for the form to be
/// tried (the encoder still keeps whichever form is smaller).
pub const MIN_SHARE: f64 = 0.9;

/// Batches shorter than this are not worth it.
const MIN_ROWS: usize = 64;

/// Rows sampled before looking at every row, and the share of them the
/// sample's majority must hold to go on.
const SAMPLE: usize = 64;
const SAMPLE_SHARE: f64 = 0.75;

/// Boyer-Moore majority vote over `rows`: a row of the value holding more
/// than half of them, if any (otherwise some row; the caller counts).
fn majority(rows: &[usize], cmp: &arrow::array::DynComparator) -> usize {
    let (mut candidate, mut votes) = (rows.first().copied().unwrap_or(0), 0usize);
    for &i in rows {
        if votes == 0 {
            candidate = i;
            votes = 1;
        } else if cmp(i, candidate).is_eq() {
            votes += 1;
        } else {
            votes -= 1;
        }
    }
    candidate
}

/// A batch as its dominant value and exceptions.
#[derive(Debug)]
pub struct DominantArray {
    len: usize,
    null_count: usize,
    /// Element 0: the dominant value (possibly null); element `k + 1`: the
    /// value of the `k`-th run of exceptions.
    values: ArrayRef,
    /// Runs of exceptions: run `k` is rows `starts[k]..ends[k]`, each holding
    /// `values[k + 1]` (ascending, disjoint). Clustered tables put their
    /// exceptions in runs (`MobilePhoneModel` on ClickBench's hits: a few runs
    /// per batch), so a run costs what one exception cost before.
    starts: Vec<u32>,
    ends: Vec<u32>,
}

/// The dominant form of `array`, if one value holds at least [`MIN_SHARE`]
/// of its rows (nulls count as one value). `None` for types without a
/// total order in Arrow's comparator.
pub fn encode(array: &ArrayRef) -> Option<LiquidArrayRef> {
    let len = array.len();
    // Dictionary arrays keep their own form (their predicates take value-typed literals).
    if len < MIN_ROWS || len > u32::MAX as usize || matches!(array.data_type(), DataType::Dictionary(..)) {
        return None;
    }
    let cmp = make_comparator(array.as_ref(), array.as_ref(), SortOptions::default()).ok()?;
    // Most batches have no dominant value: a sample of evenly spaced rows
    // rules them out before the full passes.
    let sample: Vec<usize> = (0..SAMPLE).map(|k| k * len / SAMPLE).collect();
    let candidate = majority(&sample, &cmp);
    let agree = sample.iter().filter(|&&i| cmp(i, candidate).is_eq()).count();
    if (agree as f64) < SAMPLE_SHARE * SAMPLE as f64 {
        return None;
    }
    let most_exceptions = ((1.0 - MIN_SHARE) * len as f64) as usize;
    let (mut exceptions, mut starts, mut ends) = (0, Vec::new(), Vec::<u32>::new());
    for i in 0..len {
        if cmp(i, candidate).is_eq() {
            continue;
        }
        if exceptions == most_exceptions {
            return None;
        }
        exceptions += 1;
        match ends.last_mut() {
            // The previous row was an exception of the same value: its run goes on.
            Some(end) if *end as usize == i && cmp(i, i - 1).is_eq() => *end += 1,
            _ => {
                starts.push(i as u32);
                ends.push(i as u32 + 1);
            }
        }
    }
    starts.shrink_to_fit();
    ends.shrink_to_fit();
    let mut sources = Vec::with_capacity(starts.len() + 1);
    sources.push(candidate as u32);
    sources.extend_from_slice(&starts);
    let values = own_buffers(take(array.as_ref(), &UInt32Array::from(sources), None).ok()?);
    Some(Arc::new(DominantArray {
        len,
        null_count: array.null_count(),
        values,
        starts,
        ends,
    }))
}

/// A [`DominantArray`] [`LiquidArray::write`] wrote (after its tag).
pub(crate) fn read_dominant(r: &mut Reader<'_>) -> persist::Result<LiquidArrayRef> {
    let len = r.count()?;
    let values = r.arrow()?;
    let starts = r.u32s()?;
    let ends = r.u32s()?;
    let runs_fit = starts.len() == ends.len()
        && starts.iter().zip(&ends).all(|(s, e)| s < e)
        && ends.iter().zip(starts.iter().skip(1)).all(|(e, next)| e <= next)
        && ends.last().is_none_or(|&e| e as usize <= len);
    if values.len() != starts.len() + 1 || !runs_fit {
        return persist::bad("a dominant batch whose exceptions do not fit it");
    }
    // Rows take the dominant value (values[0]) but in the runs.
    let run_rows = |k: usize| (ends[k] - starts[k]) as usize;
    let exceptions: usize = (0..starts.len()).map(run_rows).sum();
    let null_runs: usize = (0..starts.len()).filter(|&k| values.is_null(k + 1)).map(run_rows).sum();
    let null_count = null_runs + usize::from(values.is_null(0)) * (len - exceptions);
    Ok(Arc::new(DominantArray {
        len,
        null_count,
        values,
        starts,
        ends,
    }))
}

/// `values` without the source batch's buffers: `take` of a view array keeps
/// every data buffer of its source, so views are garbage-collected.
fn own_buffers(values: ArrayRef) -> ArrayRef {
    use arrow::array::AsArray;
    match values.data_type() {
        DataType::Utf8View => Arc::new(values.as_string_view().gc()),
        DataType::BinaryView => Arc::new(values.as_binary_view().gc()),
        _ => values,
    }
}

impl DominantArray {
    /// Index into `values` of row `row`.
    fn source(&self, row: usize) -> u32 {
        let row = row as u32;
        // Runs starting at or before the row; the last of them may hold it.
        match self.starts.partition_point(|&s| s <= row) {
            k if k > 0 && row < self.ends[k - 1] => k as u32,
            _ => 0,
        }
    }

    /// Index into `values` of every row.
    fn all_sources(&self) -> UInt32Array {
        let mut sources = vec![0u32; self.len];
        for (k, (&s, &e)) in self.starts.iter().zip(&self.ends).enumerate() {
            sources[s as usize..e as usize].fill(k as u32 + 1);
        }
        UInt32Array::from(sources)
    }

    fn gather(&self, sources: &UInt32Array) -> ArrayRef {
        take(self.values.as_ref(), sources, None).expect("sources index the values")
    }
}

impl LiquidArray for DominantArray {
    fn data_type(&self) -> &DataType {
        self.values.data_type()
    }

    fn write(&self, w: &mut Writer<'_>) {
        w.u8(tag::DOMINANT_RUNS);
        w.count(self.len);
        w.arrow(&self.values);
        w.u32s(&self.starts);
        w.u32s(&self.ends);
    }

    fn len(&self) -> usize {
        self.len
    }

    fn null_count(&self) -> usize {
        self.null_count
    }

    fn heap_size(&self) -> usize {
        self.values.get_buffer_memory_size() + (self.starts.capacity() + self.ends.capacity()) * 4
    }

    fn encoding(&self) -> &'static str {
        "dominant"
    }

    fn to_arrow(&self) -> ArrayRef {
        self.gather(&self.all_sources())
    }

    fn filter(&self, selection: &BooleanArray) -> ArrayRef {
        assert_eq!(selection.len(), self.len, "selection length");
        self.take(&crate::selection_to_indices(selection))
    }

    fn take(&self, indices: &UInt32Array) -> ArrayRef {
        let sources: UInt32Array = indices
            .iter()
            .map(|i| {
                i.map(|i| {
                    assert!((i as usize) < self.len, "index {i} out of {}", self.len);
                    self.source(i as usize)
                })
            })
            .collect();
        self.gather(&sources)
    }

    fn evaluate(&self, predicate: &LiquidPredicate) -> Option<BooleanArray> {
        let per_value = evaluate_arrow(&self.values, predicate)?;
        let mapped = take(&per_value, &self.all_sources(), None).ok()?;
        Some(mapped.as_any().downcast_ref::<BooleanArray>()?.clone())
    }

    fn evaluates_per_entry(&self) -> bool {
        true
    }
}

/// `predicate` on a decoded Arrow array, with the kernel each variant of
/// [`LiquidPredicate`] names (`LIKE` on string types here, the rest by
/// [`crate::integer::kernel_evaluate`]); `None` where that declines.
fn evaluate_arrow(values: &ArrayRef, predicate: &LiquidPredicate) -> Option<BooleanArray> {
    use arrow::array::Scalar;
    use arrow::compute::kernels::comparison::{ilike, like, nilike, nlike};
    let LiquidPredicate::Like {
        pattern,
        negated,
        case_insensitive,
    } = predicate
    else {
        return crate::integer::kernel_evaluate(values, predicate);
    };
    let pattern: ArrayRef = match values.data_type() {
        DataType::Utf8 => Arc::new(arrow::array::StringArray::from(vec![pattern.as_str()])),
        DataType::LargeUtf8 => Arc::new(arrow::array::LargeStringArray::from(vec![pattern.as_str()])),
        DataType::Utf8View => Arc::new(arrow::array::StringViewArray::from(vec![pattern.as_str()])),
        _ => return None,
    };
    let pattern = Scalar::new(pattern);
    let v = values.as_ref();
    match (negated, case_insensitive) {
        (false, false) => like(&v, &pattern),
        (true, false) => nlike(&v, &pattern),
        (false, true) => ilike(&v, &pattern),
        (true, true) => nilike(&v, &pattern),
    }
    .ok()
}
