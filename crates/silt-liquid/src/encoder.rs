//! Choosing and applying an encoding for a column batch.

use arrow::array::ArrayRef;
use arrow::datatypes::DataType;

use crate::LiquidArrayRef;
use crate::bytes::{BytesEncoder, Compaction};
use crate::shared_dict::{FlatForm, SharedDictionary};

/// Whether batches of `data_type` have a liquid form. Other types stay Arrow
/// in the memory tier.
pub fn is_supported(data_type: &DataType) -> bool {
    crate::integer::is_supported(data_type)
        || crate::float::is_supported(data_type)
        || crate::boolean::is_supported(data_type)
        || crate::bytes::is_supported(data_type)
}

/// How scans read a column's values, as the memory tier observed it: what
/// its shared-dictionary segments are built for ([`FlatForm::Segment`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ValueUse {
    /// Some scan projects the column without filtering on it, taking
    /// entries one by one from any row (or nothing has said otherwise):
    /// segments stay value by value (FSST), which a take reads directly.
    #[default]
    Taken,
    /// Every scan so far filters on the column and takes only the few rows
    /// its filter kept (DataFusion's re-check of an inexact filter): predicates
    /// run once per entry and are memoized, and the takes are of entries
    /// a predicate matched (kept decoded by the memo,
    /// [`crate::segment_memo`]), so segments may take zstd blocks when
    /// clearly smaller (ClickBench's `URL`: 1.75x Parquet's bytes as FSST,
    /// 0.91x with zstd segments on the `LIKE` queries).
    Filtered,
}

/// Encodes the batches of one column of one file (every row group's batches
/// of that column, in any order).
///
/// Holds what those batches share: string columns train one FSST symbol
/// table on the first batch and reuse it for the rest, so the table's cost is
/// paid once, not per 8192 rows; strings and integers share one dictionary
/// when it pays ([`crate::shared_dict`]).
#[derive(Debug)]
pub struct ColumnEncoder {
    data_type: DataType,
    bytes: Option<BytesEncoder>,
    dictionary: Option<SharedDictionary>,
    value_use: ValueUse,
}

impl ColumnEncoder {
    /// An encoder for batches of `data_type`.
    pub fn new(data_type: &DataType) -> Self {
        Self::with_compaction(data_type, Compaction::default())
    }

    /// An encoder for batches of `data_type` whose strings take the zstd
    /// block form as `compaction` says ([`Compaction`]).
    pub fn with_compaction(data_type: &DataType, compaction: Compaction) -> Self {
        ColumnEncoder {
            data_type: data_type.clone(),
            bytes: crate::bytes::is_supported(data_type).then(|| BytesEncoder::with_compaction(compaction)),
            dictionary: crate::shared_dict::is_eligible(data_type).then(SharedDictionary::default),
            value_use: ValueUse::default(),
        }
    }

    /// How scans read the column, for the segments of the batches encoded
    /// from now on (earlier batches keep their form).
    pub fn set_use(&mut self, value_use: ValueUse) {
        self.value_use = value_use;
    }

    /// Approximate heap bytes the encoder holds between batches (the shared
    /// dictionary's index of its values; the FSST table is a few KiB).
    pub fn heap_size(&self) -> usize {
        self.dictionary.as_ref().map_or(0, SharedDictionary::heap_size)
    }

    /// The liquid form of `array`, with the encoding chosen from its data, or
    /// `None` when its type has no liquid form. `array.data_type()` must be
    /// the encoder's type.
    pub fn encode(&mut self, array: &ArrayRef) -> Option<LiquidArrayRef> {
        debug_assert_eq!(array.data_type(), &self.data_type);
        let Some(dominant) = crate::dominant::encode(array) else {
            return self.encode_by_type(array);
        };
        if self.dictionary.is_some() {
            // Encoding by type would commit the batch's values to the shared
            // dictionary, owned (and charged) by the batch that adds them:
            // so decide without it. A dominant form under an eighth of the
            // Arrow batch is kept; otherwise the dictionary's form is.
            return if dominant.heap_size() * 8 <= array.get_array_memory_size() {
                Some(dominant)
            } else {
                self.encode_by_type(array)
            };
        }
        // A mostly-default batch: the dominant form, when it is smaller.
        match self.encode_by_type(array) {
            Some(chosen) if chosen.heap_size() <= dominant.heap_size() => Some(chosen),
            _ => Some(dominant),
        }
    }

    /// The encoding chosen by the column's type and data.
    fn encode_by_type(&mut self, array: &ArrayRef) -> Option<LiquidArrayRef> {
        if let Some(dictionary) = self.dictionary.as_mut() {
            let bytes = &mut self.bytes;
            let blocks = self.value_use == ValueUse::Filtered;
            let mut flat = |a: &ArrayRef, form: FlatForm| match (bytes.as_mut(), form) {
                (Some(b), FlatForm::ValueByValue) => b.encode_flat(a, false),
                (Some(b), FlatForm::Segment) => b.encode_flat(a, blocks),
                (Some(b), FlatForm::Smallest) => b.encode(a),
                (None, _) => crate::integer::encode(a),
            };
            return dictionary.encode(array, &mut flat);
        }
        if let Some(bytes) = self.bytes.as_mut() {
            return bytes.encode(array);
        }
        crate::integer::encode(array)
            .or_else(|| crate::float::encode(array))
            .or_else(|| crate::boolean::encode(array))
    }
}
