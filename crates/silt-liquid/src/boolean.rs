//! Liquid boolean arrays (placeholder: no liquid form yet).

use arrow::array::ArrayRef;
use arrow::datatypes::DataType;

use crate::LiquidArrayRef;

/// Whether `data_type` is handled by this module.
pub fn is_supported(_data_type: &DataType) -> bool {
    false
}

/// The liquid form of `array`, or `None` when its type is not handled here.
pub fn encode(_array: &ArrayRef) -> Option<LiquidArrayRef> {
    None
}
