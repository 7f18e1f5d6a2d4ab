//! Liquid boolean arrays: the bitmap itself.
//!
//! Why: a bitmap is already one bit per row and element-addressable, so the
//! liquid form only compacts it (a slice of a larger batch does not pin the
//! batch) and evaluates predicates as whole-bitmap operations: a boolean
//! predicate is a function of one bit, so its result is the bitmap, its
//! negation, or a constant.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, UInt32Array};
use arrow::buffer::{BooleanBuffer, NullBuffer};
use arrow::datatypes::DataType;

use crate::integer::{Evaluate, compact_bits, compact_nulls, constant_bits, evaluate, nulls_heap_size};
use crate::persist::{self, Reader, Writer, tag};
use crate::{CmpOp, LiquidArray, LiquidArrayRef, LiquidPredicate};

/// Whether `data_type` is handled by this module.
pub fn is_supported(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Boolean)
}

/// The liquid form of `array`, or `None` when its type is not handled here.
pub fn encode(array: &ArrayRef) -> Option<LiquidArrayRef> {
    let array = array.as_boolean_opt()?;
    Some(Arc::new(BitmapArray {
        values: compact_bits(array.values()),
        nulls: compact_nulls(array.nulls()),
    }))
}

/// A batch of booleans: values bitmap and validity.
/// A [`BitmapArray`] [`LiquidArray::write`] wrote (after its tag).
pub(crate) fn read_bitmap(r: &mut Reader<'_>) -> persist::Result<LiquidArrayRef> {
    let values = r.bits()?;
    let nulls = r.nulls(values.len())?;
    Ok(Arc::new(BitmapArray { values, nulls }))
}

#[derive(Debug)]
struct BitmapArray {
    values: BooleanBuffer,
    nulls: Option<NullBuffer>,
}

impl BitmapArray {
    fn arrow(&self) -> BooleanArray {
        BooleanArray::new(self.values.clone(), self.nulls.clone())
    }

    /// The bits of `f(value)` per row, from `f`'s truth table.
    fn truth_table(&self, f: impl Fn(bool) -> bool) -> BooleanBuffer {
        match (f(false), f(true)) {
            (false, true) => self.values.clone(),
            (true, false) => !&self.values,
            (constant, _) => constant_bits(self.values.len(), constant),
        }
    }
}

impl LiquidArray for BitmapArray {
    fn data_type(&self) -> &DataType {
        &DataType::Boolean
    }

    fn write(&self, w: &mut Writer<'_>) {
        w.u8(tag::BITMAP);
        w.bits(&self.values);
        w.nulls(self.nulls.as_ref());
    }

    fn len(&self) -> usize {
        self.values.len()
    }

    fn null_count(&self) -> usize {
        self.nulls.as_ref().map_or(0, NullBuffer::null_count)
    }

    fn heap_size(&self) -> usize {
        self.values.inner().capacity() + nulls_heap_size(self.nulls.as_ref())
    }

    fn encoding(&self) -> &'static str {
        "bitmap"
    }

    fn to_arrow(&self) -> ArrayRef {
        Arc::new(self.arrow())
    }

    /// Arrow's kernel on the (zero-copy) bitmap only reads the selected bits.
    fn filter(&self, selection: &BooleanArray) -> ArrayRef {
        let out =
            arrow::compute::filter(&self.arrow(), selection).expect("invariant: the selection has the batch's length");
        Arc::new(out)
    }

    fn take(&self, indices: &UInt32Array) -> ArrayRef {
        arrow::compute::take(&self.arrow(), indices, None).expect("invariant: indices are in bounds")
    }

    fn evaluate(&self, predicate: &LiquidPredicate) -> Option<BooleanArray> {
        evaluate(self, predicate)
    }
}

impl Evaluate for BitmapArray {
    type Value = bool;

    fn shape(&self) -> (usize, Option<&NullBuffer>) {
        (self.values.len(), self.nulls.as_ref())
    }

    fn literal(&self, literal: &ArrayRef) -> Option<Option<bool>> {
        let literal = literal.as_boolean_opt().filter(|l| l.len() == 1)?;
        Some(literal.is_valid(0).then(|| literal.value(0)))
    }

    fn list(&self, values: &ArrayRef) -> Option<Vec<bool>> {
        let values = values.as_boolean_opt().filter(|v| v.null_count() == 0)?;
        Some(values.values().iter().collect())
    }

    fn compare_bits(&self, op: CmpOp, literal: bool) -> BooleanBuffer {
        self.truth_table(|v| op.holds(v.cmp(&literal)))
    }

    fn between_bits(&self, low: bool, high: bool) -> BooleanBuffer {
        self.truth_table(|v| low <= v && v <= high)
    }

    fn in_list_bits(&self, values: Vec<bool>) -> BooleanBuffer {
        self.truth_table(|v| values.contains(&v))
    }
}
