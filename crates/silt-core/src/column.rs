//! The forms a cached column batch is kept in, shared by the server's
//! memory tier and a client's compute-side cache: decoded Arrow, or the
//! liquid encoding (compressed, filterable without decoding).

use arrow::array::{Array, ArrayRef, BooleanArray, UInt32Array};
use arrow::error::ArrowError;
use silt_liquid::shared_dict::DecodedDictionaries;
use silt_liquid::{ColumnEncoder, LiquidArrayRef};

/// One cached column batch: decoded Arrow as admitted, or its liquid form
/// once encoded. Queries use whichever is there.
#[derive(Debug, Clone)]
pub enum CachedColumn {
    /// Plain decoded Arrow.
    Arrow(ArrayRef),
    /// The liquid encoding (compressed, filterable without decoding).
    Liquid {
        /// The encoded batch.
        array: LiquidArrayRef,
        /// Heap bytes of the Arrow form it replaced (for the compression ratio).
        arrow_bytes: usize,
    },
}

impl CachedColumn {
    /// `array` in `form`, encoded with an encoder of its own: liquid when
    /// asked for and smaller than the Arrow, else Arrow (types liquid
    /// cannot encode stay Arrow).
    pub fn encode(array: ArrayRef, form: MemoryForm) -> CachedColumn {
        if form == MemoryForm::Liquid && silt_liquid::is_supported(array.data_type()) {
            let arrow_bytes = array.get_array_memory_size();
            let liquid = ColumnEncoder::new(array.data_type()).encode(&array);
            if let Some(liquid) = liquid.filter(|l| l.heap_size() < arrow_bytes) {
                return CachedColumn::Liquid {
                    array: liquid,
                    arrow_bytes,
                };
            }
        }
        CachedColumn::Arrow(array)
    }

    /// Rows in the batch.
    pub fn len(&self) -> usize {
        match self {
            CachedColumn::Arrow(a) => a.len(),
            CachedColumn::Liquid { array, .. } => array.len(),
        }
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes the entry holds (the sizes of its buffers, as allocated).
    pub fn heap_size(&self) -> usize {
        match self {
            CachedColumn::Arrow(a) => a.get_array_memory_size(),
            CachedColumn::Liquid { array, .. } => array.heap_size(),
        }
    }

    /// Heap bytes the same batch takes as Arrow (its own size when Arrow).
    pub fn arrow_bytes(&self) -> usize {
        match self {
            CachedColumn::Arrow(a) => a.get_array_memory_size(),
            CachedColumn::Liquid { arrow_bytes, .. } => *arrow_bytes,
        }
    }

    /// The column as Arrow (decoding the liquid form).
    pub fn to_arrow(&self) -> ArrayRef {
        match self {
            CachedColumn::Arrow(a) => a.clone(),
            CachedColumn::Liquid { array, .. } => array.to_arrow(),
        }
    }

    /// Only the rows `selection` selects (a null does not select), as
    /// Arrow: the liquid form decodes just those rows.
    pub fn filter(&self, selection: &BooleanArray) -> Result<ArrayRef, ArrowError> {
        match self {
            CachedColumn::Arrow(a) => arrow::compute::filter(a, selection),
            CachedColumn::Liquid { array, .. } => Ok(array.filter(selection)),
        }
    }

    /// [`CachedColumn::filter`] given the selected rows' `indices` too
    /// (`selection`'s set rows, ascending), so a scan projecting several
    /// columns finds them once per batch: the liquid form takes by index,
    /// Arrow's filter kernel is faster with the mask.
    /// `decoded` keeps the dictionaries a scan's earlier batches of this
    /// column decoded ([`LiquidArray::take_reusing`](silt_liquid::LiquidArray::take_reusing)).
    pub fn filter_rows(
        &self,
        selection: &BooleanArray,
        indices: &UInt32Array,
        decoded: &mut DecodedDictionaries,
    ) -> Result<ArrayRef, ArrowError> {
        match self {
            CachedColumn::Arrow(a) => arrow::compute::filter(a, selection),
            CachedColumn::Liquid { array, .. } => Ok(array.take_reusing(indices, decoded)),
        }
    }

    /// Which form the entry is in: `"arrow"` or `"liquid"`.
    pub fn form(&self) -> &'static str {
        match self {
            CachedColumn::Arrow(_) => "arrow",
            CachedColumn::Liquid { .. } => "liquid",
        }
    }

    /// Whether it is kept in the liquid encoding.
    pub fn is_liquid(&self) -> bool {
        matches!(self, CachedColumn::Liquid { .. })
    }
}

impl From<ArrayRef> for CachedColumn {
    fn from(array: ArrayRef) -> Self {
        CachedColumn::Arrow(array)
    }
}

/// The form a cache keeps columns in (the server's `--memory-form`, the
/// client's `--local-cache-form`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryForm {
    /// Decoded Arrow only: no decoding on use, ~4x the memory.
    Arrow,
    /// The liquid encoding (`silt-liquid`), Arrow for types it lacks.
    #[default]
    Liquid,
}

impl std::str::FromStr for MemoryForm {
    type Err = String;

    /// `arrow` or `liquid`, case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "arrow" => Ok(MemoryForm::Arrow),
            "liquid" => Ok(MemoryForm::Liquid),
            _ => Err(format!("unknown memory form {s:?}: expected arrow or liquid")),
        }
    }
}
