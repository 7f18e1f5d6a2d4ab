//! What the property tests of every encoding share: the Arrow comparison
//! kernel each [`CmpOp`] must equal.

use arrow::array::{BooleanArray, Datum};
use arrow::compute::kernels::cmp;
use arrow::error::ArrowError;
use silt_liquid::CmpOp;

/// An Arrow comparison kernel.
pub type Kernel = fn(&dyn Datum, &dyn Datum) -> Result<BooleanArray, ArrowError>;

/// Every operator with the kernel that defines it.
pub const OPS: [(CmpOp, Kernel); 6] = [
    (CmpOp::Eq, cmp::eq),
    (CmpOp::NotEq, cmp::neq),
    (CmpOp::Lt, cmp::lt),
    (CmpOp::LtEq, cmp::lt_eq),
    (CmpOp::Gt, cmp::gt),
    (CmpOp::GtEq, cmp::gt_eq),
];
