//! Compacts view arrays before they are sent.
//!
//! A `Utf8View` / `BinaryView` array made by a filter, a slice or an
//! aggregate's emitted groups keeps pointing into the data buffers of the
//! arrays it came from, which may hold far more bytes than its views use.
//! Arrow IPC writes a view array's data buffers whole, and arrow-flight's
//! encoder splits a large batch into zero-copy slices that each carry every
//! buffer again: a partial aggregate's 260 K `GROUP BY URL` states (38 MB of
//! strings) went out as 3.3 GB over the wire (ClickBench q33, 1 M rows,
//! 7.1 s on loopback). So a view column whose buffers hold much more than
//! it references is copied into fresh, tight buffers first ([`compact`]).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{ByteViewType, DataType};
use datafusion::arrow::error::ArrowError;

/// Buffers holding more than this many times the bytes their views use
/// (plus [`SLACK_BYTES`]) are compacted: a copy of the used bytes costs
/// less than sending the rest.
const WASTE_RATIO: usize = 2;

/// Waste below this is never worth a copy.
const SLACK_BYTES: usize = 64 * 1024;

/// `batch` with each top-level view column compacted when its data buffers
/// hold much more than its views reference; other columns untouched.
pub fn compact(batch: RecordBatch) -> Result<RecordBatch, ArrowError> {
    let wasteful: Vec<bool> = batch.columns().iter().map(|c| needs_compaction(c.as_ref())).collect();
    if !wasteful.contains(&true) {
        return Ok(batch);
    }
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .zip(wasteful)
        .map(|(c, wasteful)| match (wasteful, c.data_type()) {
            (true, DataType::Utf8View) => Arc::new(c.as_string_view().gc()) as ArrayRef,
            (true, DataType::BinaryView) => Arc::new(c.as_binary_view().gc()) as ArrayRef,
            _ => c.clone(),
        })
        .collect();
    RecordBatch::try_new(batch.schema(), columns)
}

fn needs_compaction(array: &dyn Array) -> bool {
    match array.data_type() {
        DataType::Utf8View => wasteful(array.as_string_view()),
        DataType::BinaryView => wasteful(array.as_binary_view()),
        _ => false,
    }
}

fn wasteful<T: ByteViewType + ?Sized>(array: &datafusion::arrow::array::GenericByteViewArray<T>) -> bool {
    let held: usize = array.data_buffers().iter().map(|b| b.len()).sum();
    // Small buffers first: no pass over the views for them.
    held > SLACK_BYTES && held > WASTE_RATIO * array.total_buffer_bytes_used() + SLACK_BYTES
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{BinaryViewArray, Int32Array, StringViewArray};
    use datafusion::arrow::datatypes::{Field, Schema};

    use super::*;

    fn held(array: &ArrayRef) -> usize {
        match array.data_type() {
            DataType::Utf8View => array.as_string_view().data_buffers().iter().map(|b| b.len()).sum(),
            DataType::BinaryView => array.as_binary_view().data_buffers().iter().map(|b| b.len()).sum(),
            _ => 0,
        }
    }

    fn batch(strings: StringViewArray, binaries: BinaryViewArray) -> RecordBatch {
        let ints = Int32Array::from_iter_values(0..strings.len() as i32);
        let schema = Schema::new(vec![
            Field::new("s", DataType::Utf8View, true),
            Field::new("b", DataType::BinaryView, true),
            Field::new("i", DataType::Int32, false),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![Arc::new(strings), Arc::new(binaries), Arc::new(ints)],
        )
        .unwrap()
    }

    #[test]
    fn a_small_slice_of_big_buffers_is_copied_tight_with_equal_values() {
        let values: Vec<Option<String>> = (0..20_000)
            .map(|i| (i % 7 != 0).then(|| format!("https://example.com/a/long/path/{i}")))
            .collect();
        let strings = StringViewArray::from_iter(values.iter().map(|v| v.as_deref()));
        let binaries = BinaryViewArray::from_iter(values.iter().map(|v| v.as_ref().map(|s| s.as_bytes())));
        let whole = batch(strings, binaries);
        let slice = whole.slice(100, 50);
        let compacted = compact(slice.clone()).unwrap();
        assert_eq!(compacted, slice, "the same values");
        for c in 0..2 {
            assert!(held(slice.column(c)) > 500_000, "the slice holds the whole buffers");
            assert!(
                held(compacted.column(c)) < 4_096,
                "compacted: {}",
                held(compacted.column(c))
            );
        }
    }

    #[test]
    fn tight_arrays_are_left_as_they_are() {
        let strings = StringViewArray::from_iter_values((0..1_000).map(|i| format!("a value longer than twelve {i}")));
        let binaries = BinaryViewArray::from_iter_values((0..1_000).map(|i| format!("bytes longer than twelve {i}")));
        let tight = batch(strings, binaries);
        let same = compact(tight.clone()).unwrap();
        for c in 0..3 {
            assert!(Arc::ptr_eq(tight.column(c), same.column(c)), "column {c} untouched");
        }
        // A small slice of small buffers: the waste is under the slack.
        let slice = tight.slice(0, 10);
        let kept = compact(slice.clone()).unwrap();
        assert!(Arc::ptr_eq(slice.column(0), kept.column(0)));
    }
}
