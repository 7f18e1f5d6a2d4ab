//! Which filters the client hands to the server.
//!
//! A pushed filter is declared `Exact`: DataFusion drops it on the client,
//! so the server's evaluation must be the client's, row for row. The server
//! decodes the filter with its own function registry and session config, so
//! only what evaluates the same everywhere may go: columns, literals,
//! comparisons, boolean logic, arithmetic, `LIKE`, `IN`, `BETWEEN`, null
//! tests, casts to types whose parsing does not depend on a time zone, and an
//! allow-list of built-in functions that are deterministic and read no
//! session setting. Anything else — a UDF the client registered (the server
//! does not have it), a function whose result depends on the session's time
//! zone or clock, a subquery — stays on the client, which evaluates it on
//! the rows the server sends (`Unsupported`). There is no `Inexact` middle
//! ground: a server evaluation that may differ could drop rows the client
//! would keep, so it is not used even as a pre-filter.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::Column;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion_proto::bytes::Serializeable;
use std::sync::Arc;

/// Built-in scalar functions whose result depends only on their arguments
/// (no session time zone, no clock, no randomness).
const FUNCTIONS: &[&str] = &[
    "abs",
    "ceil",
    "floor",
    "trunc",
    "round",
    "signum",
    "lower",
    "upper",
    "length",
    "char_length",
    "character_length",
    "octet_length",
    "bit_length",
    "btrim",
    "ltrim",
    "rtrim",
    "trim",
    "substr",
    "substring",
    "left",
    "right",
    "starts_with",
    "ends_with",
    "strpos",
    "instr",
    "concat",
    "concat_ws",
    "coalesce",
    "nullif",
    "reverse",
    "replace",
    "lpad",
    "rpad",
    "split_part",
    "regexp_like",
    "date_part",
];

/// Operators whose evaluation is the same on any DataFusion.
fn operator_allowed(op: &Operator) -> bool {
    use Operator::*;
    matches!(
        op,
        Eq | NotEq
            | Lt
            | LtEq
            | Gt
            | GtEq
            | And
            | Or
            | Plus
            | Minus
            | Multiply
            | Divide
            | Modulo
            | IsDistinctFrom
            | IsNotDistinctFrom
            | LikeMatch
            | ILikeMatch
            | NotLikeMatch
            | NotILikeMatch
            | RegexMatch
            | RegexIMatch
            | RegexNotMatch
            | RegexNotIMatch
            | StringConcat
    )
}

/// Whether a cast to `to` reads no session setting (a string cast to a
/// timestamp with a time zone is interpreted in the session's zone).
fn cast_allowed(to: &DataType) -> bool {
    !matches!(to, DataType::Timestamp(_, Some(_)))
}

/// Whether `ok` holds for every node of `tree` (stops at the first that fails).
fn every_node<N: TreeNode>(tree: &N, mut ok: impl FnMut(&N) -> bool) -> bool {
    let mut allowed = true;
    let _ = tree.apply(|node| {
        if ok(node) {
            Ok(TreeNodeRecursion::Continue)
        } else {
            allowed = false;
            Ok(TreeNodeRecursion::Stop)
        }
    });
    allowed
}

/// Whether `expr` may be pushed to the server as an exact filter.
pub fn is_exact_on_server(expr: &Expr) -> bool {
    if expr.is_volatile() {
        return false;
    }
    every_node(expr, |e| match e {
        Expr::Column(_) | Expr::Literal(..) | Expr::Not(_) | Expr::Negative(_) => true,
        Expr::IsNull(_)
        | Expr::IsNotNull(_)
        | Expr::IsTrue(_)
        | Expr::IsFalse(_)
        | Expr::IsNotTrue(_)
        | Expr::IsNotFalse(_)
        | Expr::IsUnknown(_)
        | Expr::IsNotUnknown(_) => true,
        Expr::Between(_) | Expr::InList(_) | Expr::Like(_) | Expr::SimilarTo(_) => true,
        Expr::BinaryExpr(b) => operator_allowed(&b.op),
        Expr::Cast(c) => cast_allowed(c.field.data_type()),
        Expr::TryCast(c) => cast_allowed(c.field.data_type()),
        Expr::ScalarFunction(f) => FUNCTIONS.contains(&f.name()),
        Expr::Case(_) => true,
        _ => false,
    })
}

/// Whether a *physical* expression evaluates on the server exactly as here:
/// the same allow-list as [`is_exact_on_server`], over the physical forms
/// (used for the expressions of a partial aggregate pushed to the server,
/// which DataFusion has already planned).
pub fn is_exact_physical(expr: &Arc<dyn PhysicalExpr>) -> bool {
    use datafusion::physical_expr::ScalarFunctionExpr;
    use datafusion::physical_expr::expressions::{
        BinaryExpr, CaseExpr, CastExpr, Column, InListExpr, IsNotNullExpr, IsNullExpr, LikeExpr, Literal, NegativeExpr,
        NotExpr, TryCastExpr,
    };
    every_node(expr, |e| {
        let e: &dyn PhysicalExpr = e.as_ref();
        e.is::<Column>()
            || e.is::<Literal>()
            || e.is::<NotExpr>()
            || e.is::<NegativeExpr>()
            || e.is::<IsNullExpr>()
            || e.is::<IsNotNullExpr>()
            || e.is::<InListExpr>()
            || e.is::<LikeExpr>()
            || e.is::<CaseExpr>()
            || e.downcast_ref::<BinaryExpr>().is_some_and(|b| operator_allowed(b.op()))
            || e.downcast_ref::<CastExpr>()
                .is_some_and(|c| cast_allowed(c.cast_type()))
            || e.downcast_ref::<TryCastExpr>()
                .is_some_and(|c| cast_allowed(c.cast_type()))
            || e.downcast_ref::<ScalarFunctionExpr>()
                .is_some_and(|f| FUNCTIONS.contains(&f.name()))
    })
}

/// The filter as the server decodes it, when it may be pushed (see
/// [`crate::pushable`]).
pub(crate) fn serialize_filter(expr: &Expr) -> Option<Vec<u8>> {
    if !is_exact_on_server(expr) {
        return None;
    }
    let bare = unqualify(expr).ok()?;
    bare.to_bytes().ok().map(|b| b.to_vec())
}

/// Columns in filters are qualified by the client's table name or alias; the
/// server resolves them against its own table, so send bare names.
pub(crate) fn unqualify(expr: &Expr) -> Result<Expr> {
    expr.clone()
        .transform(|e| {
            Ok(match e {
                Expr::Column(c) if c.relation.is_some() => {
                    Transformed::yes(Expr::Column(Column::new_unqualified(c.name)))
                }
                other => Transformed::no(other),
            })
        })
        .map(|t| t.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::TimeUnit;
    use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Volatility, cast, col, create_udf, lit};
    use std::sync::Arc;

    fn udf() -> ScalarUDF {
        create_udf(
            "my_udf",
            vec![DataType::Int64],
            DataType::Int64,
            Volatility::Immutable,
            Arc::new(|args: &[ColumnarValue]| Ok(args[0].clone())),
        )
    }

    #[test]
    fn plain_predicates_are_exact_and_the_rest_stays_local() {
        let exact = [
            col("a").gt(lit(5)).and(col("b").eq(lit("x"))),
            col("s").like(lit("%google%")),
            col("a").in_list(vec![lit(1), lit(2)], false),
            col("a").between(lit(1), lit(9)),
            col("a").is_null().or(col("a").lt_eq(lit(0))),
            cast(col("d"), DataType::Date32).gt_eq(lit("2013-07-01")),
            datafusion::functions::expr_fn::lower(col("s")).eq(lit("a")),
        ];
        for e in exact {
            assert!(is_exact_on_server(&e), "{e}");
        }
        let local = [
            udf().call(vec![col("a")]).gt(lit(1)),
            cast(
                col("s"),
                DataType::Timestamp(TimeUnit::Nanosecond, Some("+00:00".into())),
            )
            .gt(lit(1)),
            datafusion::functions::expr_fn::now().gt(col("t")),
            datafusion::functions::expr_fn::random().gt(lit(0.5)),
        ];
        for e in local {
            assert!(!is_exact_on_server(&e), "{e}");
        }
    }
}
