//! Which conjuncts of a scan's filter the liquid encoding can evaluate, as
//! [`LiquidPredicate`]s over one column.
//!
//! Only the shapes whose meaning is unambiguous are translated: a column
//! compared with a literal of exactly its type (or its dictionary's value
//! type), `IN` lists of such literals without nulls, `IS [NOT] NULL`, and
//! `[NOT] [I]LIKE` with a literal pattern. Anything else (casts of the
//! column, expressions over several columns, functions) is evaluated by
//! DataFusion on decoded rows, transparently.

use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{
    BinaryExpr, Column, InListExpr, IsNotNullExpr, IsNullExpr, LikeExpr, Literal,
};
use silt_liquid::{CmpOp, LiquidPredicate};

/// `expr` (bound to `schema`) as a predicate on one of its columns: the
/// column's index in `schema` and the predicate, or `None`.
pub fn to_liquid(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Option<(usize, LiquidPredicate)> {
    let any = expr.as_ref();
    if let Some(b) = any.downcast_ref::<BinaryExpr>() {
        let (col, lit, op) = match (column(b.left()), literal(b.right())) {
            (Some(c), Some(l)) => (c, l, cmp_op(b.op())?),
            _ => (column(b.right())?, literal(b.left())?, flip(cmp_op(b.op())?)),
        };
        let literal = literal_array(lit, schema.field(col).data_type())?;
        return Some((col, LiquidPredicate::Compare { op, literal }));
    }
    if let Some(i) = any.downcast_ref::<InListExpr>() {
        let col = column(i.expr())?;
        let ty = schema.field(col).data_type();
        let scalars: Vec<ScalarValue> = i
            .list()
            .iter()
            .map(|e| literal(e).filter(|v| !v.is_null()).and_then(|v| matching(v, ty)))
            .collect::<Option<_>>()?;
        let values = ScalarValue::iter_to_array(scalars).ok()?;
        return Some((
            col,
            LiquidPredicate::InList {
                values,
                negated: i.negated(),
            },
        ));
    }
    if let Some(n) = any.downcast_ref::<IsNullExpr>() {
        return Some((column(n.arg())?, LiquidPredicate::IsNull));
    }
    if let Some(n) = any.downcast_ref::<IsNotNullExpr>() {
        return Some((column(n.arg())?, LiquidPredicate::IsNotNull));
    }
    if let Some(l) = any.downcast_ref::<LikeExpr>() {
        let col = column(l.expr())?;
        let pattern = match literal(l.pattern())? {
            ScalarValue::Utf8(Some(p)) | ScalarValue::LargeUtf8(Some(p)) | ScalarValue::Utf8View(Some(p)) => p.clone(),
            _ => return None,
        };
        return Some((
            col,
            LiquidPredicate::Like {
                pattern,
                negated: l.negated(),
                case_insensitive: l.case_insensitive(),
            },
        ));
    }
    None
}

/// A rough cost rank for ordering conjuncts: cheap and usually selective first.
pub fn rank(predicate: &LiquidPredicate) -> u8 {
    match predicate {
        LiquidPredicate::Compare { op: CmpOp::Eq, .. } | LiquidPredicate::IsNull => 0,
        LiquidPredicate::InList { negated: false, .. } => 1,
        LiquidPredicate::Compare { .. } | LiquidPredicate::Between { .. } | LiquidPredicate::IsNotNull => 2,
        LiquidPredicate::InList { .. } => 3,
        LiquidPredicate::Like { .. } => 4,
    }
}

fn column(e: &Arc<dyn PhysicalExpr>) -> Option<usize> {
    e.downcast_ref::<Column>().map(Column::index)
}

fn literal(e: &Arc<dyn PhysicalExpr>) -> Option<&ScalarValue> {
    e.downcast_ref::<Literal>().map(Literal::value)
}

fn cmp_op(op: &Operator) -> Option<CmpOp> {
    Some(match op {
        Operator::Eq => CmpOp::Eq,
        Operator::NotEq => CmpOp::NotEq,
        Operator::Lt => CmpOp::Lt,
        Operator::LtEq => CmpOp::LtEq,
        Operator::Gt => CmpOp::Gt,
        Operator::GtEq => CmpOp::GtEq,
        _ => return None,
    })
}

/// The operator with its operands swapped (`5 < x` is `x > 5`).
fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::LtEq => CmpOp::GtEq,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::GtEq => CmpOp::LtEq,
        other => other,
    }
}

/// The literal as the column's type (its value type for a dictionary
/// column), only when no conversion is needed: a cast could change the
/// comparison's meaning.
fn matching(v: &ScalarValue, column_type: &DataType) -> Option<ScalarValue> {
    let v = match v {
        ScalarValue::Dictionary(_, inner) => inner.as_ref(),
        other => other,
    };
    let wanted = match column_type {
        DataType::Dictionary(_, value) => value.as_ref(),
        other => other,
    };
    (&v.data_type() == wanted).then(|| v.clone())
}

fn literal_array(v: &ScalarValue, column_type: &DataType) -> Option<ArrayRef> {
    matching(v, column_type)?.to_array_of_size(1).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::{cast, col, in_list, lit};

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
        ])
    }

    fn binary(l: Arc<dyn PhysicalExpr>, op: Operator, r: Arc<dyn PhysicalExpr>) -> Arc<dyn PhysicalExpr> {
        Arc::new(BinaryExpr::new(l, op, r))
    }

    #[test]
    fn literal_on_the_left_flips_the_operator() {
        let s = schema();
        let e = binary(lit(5i32), Operator::Lt, col("a", &s).unwrap());
        let (c, p) = to_liquid(&e, &s).unwrap();
        assert_eq!(c, 0);
        assert!(matches!(p, LiquidPredicate::Compare { op: CmpOp::Gt, .. }));
    }

    #[test]
    fn a_literal_of_another_type_or_a_cast_column_is_left_to_datafusion() {
        let s = schema();
        assert!(to_liquid(&binary(col("a", &s).unwrap(), Operator::Eq, lit(5i64)), &s).is_none());
        let cast_a = cast(col("a", &s).unwrap(), &s, DataType::Int64).unwrap();
        assert!(to_liquid(&binary(cast_a, Operator::Eq, lit(5i64)), &s).is_none());
        assert!(to_liquid(&binary(col("a", &s).unwrap(), Operator::Plus, lit(5i32)), &s).is_none());
    }

    #[test]
    fn in_lists_with_a_null_are_left_to_datafusion() {
        let s = schema();
        let ok = in_list(col("s", &s).unwrap(), vec![lit("x"), lit("y")], &false, &s).unwrap();
        assert!(matches!(to_liquid(&ok, &s), Some((1, LiquidPredicate::InList { .. }))));
        let with_null = in_list(
            col("s", &s).unwrap(),
            vec![lit("x"), lit(ScalarValue::Utf8(None))],
            &false,
            &s,
        )
        .unwrap();
        assert!(to_liquid(&with_null, &s).is_none());
    }
}
