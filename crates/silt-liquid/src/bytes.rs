//! Liquid string and binary arrays (placeholder: no liquid form yet).

use arrow::array::ArrayRef;
use arrow::datatypes::DataType;

use crate::LiquidArrayRef;

/// Whether `data_type` is handled by this module.
pub fn is_supported(_data_type: &DataType) -> bool {
    false
}

/// Per column chunk state for string and binary batches.
#[derive(Debug, Default)]
pub struct BytesEncoder {}

impl BytesEncoder {
    /// A fresh encoder for one column chunk.
    pub fn new() -> Self {
        BytesEncoder {}
    }

    /// The liquid form of `array`, or `None` when its type is not handled here.
    pub fn encode(&mut self, _array: &ArrayRef) -> Option<LiquidArrayRef> {
        None
    }
}
