//! The liquid encoding: compressed, element-addressable in-memory columns.
//!
//! Why: on a pushdown cache the CPU goes to decoding Parquet, not to
//! evaluating filters, and keeping decoded Arrow costs ~4x the memory of
//! Parquet. A liquid array stays close to Parquet's size, yet every element
//! can be decoded on its own (no run-length or delta chains), so the server
//! can evaluate predicates on encoded values ([`LiquidArray::evaluate`]) and
//! decode only the rows that survive ([`LiquidArray::filter`],
//! [`LiquidArray::take`]).
//!
//! The crate is pure: no I/O, no async. The server's transcoder turns Arrow
//! batches into liquid ones with a [`ColumnEncoder`] per column of a file (string
//! columns share one FSST symbol table and, when it pays, one dictionary).
//!
//! Every operation's result is defined as the result of the matching Arrow
//! kernel on the decoded array, with Arrow's null semantics; the property
//! tests in `tests/` hold each encoding to exactly that.

pub mod bitpack;
pub mod boolean;
pub mod bytes;
pub mod dominant;
pub mod encoder;
pub mod float;
pub mod integer;
pub mod persist;
pub mod predicate;
mod row_keys;
pub mod segment_memo;
pub mod shared_dict;

use std::fmt::Debug;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, UInt32Array};
use arrow::datatypes::DataType;

pub use encoder::{ColumnEncoder, ValueUse, is_supported};
pub use predicate::{CmpOp, LiquidPredicate};

/// A column batch in the liquid encoding.
///
/// Implementations must keep every element independently decodable: `filter`
/// and `take` cost time in proportion to the rows they return, not to the
/// batch.
pub trait LiquidArray: Debug + Send + Sync {
    /// The Arrow type [`LiquidArray::to_arrow`] returns (the type that was encoded).
    fn data_type(&self) -> &DataType;

    /// Number of elements.
    fn len(&self) -> usize;

    /// Whether the batch has no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of null elements.
    fn null_count(&self) -> usize;

    /// Exact heap bytes held by this array (all buffers, as allocated), so
    /// the memory tier's budget is honest.
    fn heap_size(&self) -> usize;

    /// A short name of the encoding chosen for this batch ("for-bitpack",
    /// "alp", "plain", "dict-fsst", ...), shown by `silt stats`.
    fn encoding(&self) -> &'static str;

    /// Decodes the whole batch. Equals the array that was encoded.
    fn to_arrow(&self) -> ArrayRef;

    /// Decodes only the selected rows: equals
    /// `arrow::compute::filter(&self.to_arrow(), selection)` (a null in
    /// `selection` does not select). `selection.len()` must equal `self.len()`.
    fn filter(&self, selection: &BooleanArray) -> ArrayRef;

    /// Decodes only the rows at `indices` (in that order): equals
    /// `arrow::compute::take(&self.to_arrow(), indices, None)`; a null index
    /// gives a null row.
    fn take(&self, indices: &UInt32Array) -> ArrayRef;

    /// [`LiquidArray::take`] for a scan that reads many batches: encodings
    /// with a dictionary shared across batches decode it once per scan into
    /// `decoded` instead of once per batch. Same result as `take`.
    fn take_reusing(&self, indices: &UInt32Array, _decoded: &mut shared_dict::DecodedDictionaries) -> ArrayRef {
        self.take(indices)
    }

    /// Evaluates `predicate` on the encoded values, without decoding the batch.
    /// Returns `None` when this encoding cannot evaluate it (the caller then
    /// decodes and uses Arrow's kernels); otherwise exactly what the Arrow
    /// kernel named in [`LiquidPredicate`] returns on the decoded array.
    fn evaluate(&self, predicate: &LiquidPredicate) -> Option<BooleanArray>;

    /// Whether [`LiquidArray::evaluate`] works once per dictionary entry and
    /// then only maps keys, so it costs little even when a scan needs few of
    /// the rows (decoding those rows instead would cost more).
    fn evaluates_per_entry(&self) -> bool {
        false
    }

    /// Writes the batch as bytes for the disk tier ([`persist`]): its form's
    /// tag, then its fields, objects it shares with other batches as parts.
    /// [`persist::PartCatalog::read`] gives back an equal batch.
    fn write(&self, w: &mut persist::Writer<'_>);
}

/// A shared liquid array, as the memory tier holds it.
pub type LiquidArrayRef = Arc<dyn LiquidArray>;

/// The default `filter` for encodings that can only `take`: turns the
/// selection into row indices.
pub fn selection_to_indices(selection: &BooleanArray) -> UInt32Array {
    let mask = match selection.nulls() {
        Some(n) => selection.values() & n.inner(),
        None => selection.values().clone(),
    };
    UInt32Array::from_iter_values(mask.set_indices().map(|i| i as u32))
}
