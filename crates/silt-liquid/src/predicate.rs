//! Predicates a liquid array may evaluate on encoded values.
//!
//! Each variant names the Arrow kernel whose result it must equal, including
//! null semantics: a null element gives a null result (never `false`), which
//! the scan then treats as "row rejected", as SQL does.

use arrow::array::ArrayRef;

/// A comparison operator, as in `arrow::compute::kernels::cmp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `=`: `cmp::eq`
    Eq,
    /// `<>`: `cmp::neq`
    NotEq,
    /// `<`: `cmp::lt`
    Lt,
    /// `<=`: `cmp::lt_eq`
    LtEq,
    /// `>`: `cmp::gt`
    Gt,
    /// `>=`: `cmp::gt_eq`
    GtEq,
}

impl CmpOp {
    /// Whether the operator holds for a comparison that came out `ord`
    /// (element compared with the literal).
    pub fn holds(self, ord: std::cmp::Ordering) -> bool {
        match self {
            CmpOp::Eq => ord.is_eq(),
            CmpOp::NotEq => ord.is_ne(),
            CmpOp::Lt => ord.is_lt(),
            CmpOp::LtEq => ord.is_le(),
            CmpOp::Gt => ord.is_gt(),
            CmpOp::GtEq => ord.is_ge(),
        }
    }
}

/// A predicate over one column.
///
/// Literals are Arrow arrays of length 1 with exactly the column's data type
/// (the caller casts them first). Floats compare with Arrow's total order
/// (NaN is greater than every number and equal to itself; -0.0 < +0.0).
///
/// Equality compares literals by value, so results can be memoized per predicate.
#[derive(Debug, Clone, PartialEq)]
pub enum LiquidPredicate {
    /// `column <op> literal`: `arrow::compute::kernels::cmp::{eq,neq,lt,lt_eq,gt,gt_eq}`
    /// with the literal as a `Scalar`. A null literal gives all nulls.
    Compare {
        /// The operator.
        op: CmpOp,
        /// The literal, length 1.
        literal: ArrayRef,
    },
    /// `column BETWEEN low AND high`: `and_kleene(gt_eq(col, low), lt_eq(col, high))`.
    Between {
        /// Inclusive lower bound, length 1.
        low: ArrayRef,
        /// Inclusive upper bound, length 1.
        high: ArrayRef,
    },
    /// `column [NOT] IN (values)`: for a non-null element, true when it equals
    /// one of `values` (negated: when it equals none); a null element gives
    /// null. `values` has the column's type and holds no nulls (the caller
    /// does not offer lists with nulls).
    InList {
        /// The list, any length, no nulls.
        values: ArrayRef,
        /// `NOT IN`.
        negated: bool,
    },
    /// `column IS NULL`: `arrow::compute::is_null` (never null itself).
    IsNull,
    /// `column IS NOT NULL`: `arrow::compute::is_not_null`.
    IsNotNull,
    /// `column [NOT] [I]LIKE pattern`: `arrow::compute::kernels::comparison::{like,nlike,ilike,nilike}`
    /// with the pattern as a `Scalar`. Encodings evaluate the shapes
    /// `abc`, `abc%`, `%abc`, `%abc%` (no `_`, no escapes) and return `None` for others.
    Like {
        /// The SQL pattern, `%` and `_` wildcards, `\` escape.
        pattern: String,
        /// `NOT LIKE`.
        negated: bool,
        /// `ILIKE`.
        case_insensitive: bool,
    },
}
