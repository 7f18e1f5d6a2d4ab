//! A hash join's build side, summarized and pushed to the probe side's scan.
//!
//! DataFusion's `HashJoinExec` publishes a *dynamic filter* on its probe
//! side once its build side is collected: the join keys' bounds
//! (`key >= min AND key <= max`) and, for a small build side, the keys
//! themselves (`key IN (...)`). It is always a superset filter — a row it
//! drops cannot join — so applying any part of it anywhere below the join
//! leaves the answer unchanged. `SiltScanExec` accepts these filters
//! (reporting them as not pushed, so the join still checks every key) and,
//! when its stream starts — after the build side is complete, since the
//! join polls its probe side only then — sends what [`server_conjuncts`]
//! can express exactly to the server as extra filters: the server prunes
//! row groups by the bounds and ships only the rows the keys can match.
//! A filter that is not final when the scan starts (a `TopK`'s, a
//! partitioned join still building) is just `true`, so nothing is lost.

use std::sync::Arc;

use datafusion::common::Column;
use datafusion::logical_expr::expr::InList;
use datafusion::logical_expr::{BinaryExpr, Cast, Expr, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{
    BinaryExpr as PhysicalBinary, CastExpr, Column as PhysicalColumn, DynamicFilterPhysicalExpr, InListExpr,
    IsNotNullExpr, IsNullExpr, Literal, NotExpr,
};

use crate::pushable::is_exact_on_server;

/// Build sides with up to this many distinct keys are published as an
/// `IN` list (which the server evaluates and prunes with) rather than a
/// hash-table lookup (which stays on the client). DataFusion's default,
/// 150, suits a local scan; for a scan across the network an `IN` list of a
/// few thousand keys (tens of KiB in the request) saves far more than it
/// costs: SSB's dimension filters keep 1,000-8,000 keys at SF 1. The byte
/// limit `hash_join_inlist_pushdown_max_size` (128 KiB) still applies.
pub const INLIST_MAX_DISTINCT_KEYS: usize = 16_384;

/// Raises `ctx`'s `hash_join_inlist_pushdown_max_distinct_values` to
/// [`INLIST_MAX_DISTINCT_KEYS`] unless the user has changed it from
/// DataFusion's default.
pub fn tune(ctx: &datafusion::prelude::SessionContext) {
    let state = ctx.state_ref();
    let mut state = state.write();
    let optimizer = &mut state.config_mut().options_mut().optimizer;
    let default = datafusion::common::config::OptimizerOptions::default().hash_join_inlist_pushdown_max_distinct_values;
    if optimizer.hash_join_inlist_pushdown_max_distinct_values == default {
        optimizer.hash_join_inlist_pushdown_max_distinct_values = INLIST_MAX_DISTINCT_KEYS;
    }
}

/// Whether `expr` is a dynamic filter the scan should keep.
pub fn is_dynamic(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.downcast_ref::<DynamicFilterPhysicalExpr>().is_some()
}

/// The dynamic filters' current values (a filter not yet computable is
/// left out: it keeps every row).
fn current(filters: &[Arc<dyn PhysicalExpr>]) -> Vec<Arc<dyn PhysicalExpr>> {
    filters
        .iter()
        .filter_map(|filter| match filter.downcast_ref::<DynamicFilterPhysicalExpr>() {
            Some(dynamic) => dynamic.current().ok(),
            None => Some(filter.clone()),
        })
        .collect()
}

/// The conjuncts of the dynamic filters' current values that the server
/// evaluates exactly, as logical expressions over the scan's columns. A
/// conjunct that cannot be expressed (a hash-table lookup, a struct of
/// several keys, a partitioned join's routing) is left out: the rest is
/// still a superset filter.
pub fn server_conjuncts(filters: &[Arc<dyn PhysicalExpr>]) -> Vec<Expr> {
    let mut out = Vec::new();
    for current in current(filters) {
        let mut conjuncts = Vec::new();
        split_and(&current, &mut conjuncts);
        for conjunct in conjuncts {
            if let Some(expr) = to_logical(&conjunct).filter(|e| !is_true(e) && is_exact_on_server(e)) {
                out.push(expr);
            }
        }
    }
    out
}

/// Whether `conjunct` (one of [`server_conjuncts`]) is a join's key set
/// (`k IN (...)`, up to [`INLIST_MAX_DISTINCT_KEYS`] values) rather than its
/// bounds: worth sending with a scan, not with a layout request, where
/// statistics prune by the bounds alone and the set only costs bytes and
/// planning.
pub fn is_key_set(conjunct: &Expr) -> bool {
    matches!(conjunct, Expr::InList(_))
}

/// Pushes the AND-ed parts of `expr` onto `out`.
fn split_and(expr: &Arc<dyn PhysicalExpr>, out: &mut Vec<Arc<dyn PhysicalExpr>>) {
    match expr.downcast_ref::<PhysicalBinary>() {
        Some(b) if *b.op() == Operator::And => {
            split_and(b.left(), out);
            split_and(b.right(), out);
        }
        _ => out.push(expr.clone()),
    }
}

fn is_true(expr: &Expr) -> bool {
    matches!(
        expr,
        Expr::Literal(datafusion::common::ScalarValue::Boolean(Some(true)), _)
    )
}

/// The logical form of a physical expression built of columns, literals,
/// comparisons, boolean logic, `IN` lists, null tests and casts; `None` for
/// anything else.
fn to_logical(expr: &Arc<dyn PhysicalExpr>) -> Option<Expr> {
    if let Some(c) = expr.downcast_ref::<PhysicalColumn>() {
        return Some(Expr::Column(Column::new_unqualified(c.name())));
    }
    if let Some(l) = expr.downcast_ref::<Literal>() {
        return Some(Expr::Literal(l.value().clone(), None));
    }
    if let Some(b) = expr.downcast_ref::<PhysicalBinary>() {
        let (left, right) = (to_logical(b.left())?, to_logical(b.right())?);
        return Some(Expr::BinaryExpr(BinaryExpr::new(
            Box::new(left),
            *b.op(),
            Box::new(right),
        )));
    }
    if let Some(i) = expr.downcast_ref::<InListExpr>() {
        let list = i.list().iter().map(to_logical).collect::<Option<Vec<_>>>()?;
        return Some(Expr::InList(InList::new(
            Box::new(to_logical(i.expr())?),
            list,
            i.negated(),
        )));
    }
    if let Some(n) = expr.downcast_ref::<IsNullExpr>() {
        return Some(Expr::IsNull(Box::new(to_logical(n.arg())?)));
    }
    if let Some(n) = expr.downcast_ref::<IsNotNullExpr>() {
        return Some(Expr::IsNotNull(Box::new(to_logical(n.arg())?)));
    }
    if let Some(n) = expr.downcast_ref::<NotExpr>() {
        return Some(Expr::Not(Box::new(to_logical(n.arg())?)));
    }
    if let Some(c) = expr.downcast_ref::<CastExpr>() {
        return Some(Expr::Cast(Cast::new(
            Box::new(to_logical(c.expr())?),
            c.cast_type().clone(),
        )));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::ScalarValue;
    use datafusion::physical_expr::expressions::{col, lit};

    #[test]
    fn bounds_and_key_lists_become_server_filters_and_the_rest_is_dropped() {
        let schema = Schema::new(vec![Field::new("k", DataType::Int64, true)]);
        let k = col("k", &schema).unwrap();
        let bounds: Arc<dyn PhysicalExpr> = Arc::new(PhysicalBinary::new(
            Arc::new(PhysicalBinary::new(
                k.clone(),
                Operator::GtEq,
                lit(ScalarValue::Int64(Some(3))),
            )),
            Operator::And,
            Arc::new(PhysicalBinary::new(
                k.clone(),
                Operator::LtEq,
                lit(ScalarValue::Int64(Some(9))),
            )),
        ));
        let keys: Arc<dyn PhysicalExpr> =
            Arc::new(InListExpr::try_new(k.clone(), vec![lit(3i64), lit(9i64)], false, &schema).unwrap());
        // A conjunct with no logical form here (a nested dynamic filter) is dropped.
        let opaque: Arc<dyn PhysicalExpr> = Arc::new(DynamicFilterPhysicalExpr::new(vec![k.clone()], lit(true)));
        let whole: Arc<dyn PhysicalExpr> = Arc::new(PhysicalBinary::new(
            Arc::new(PhysicalBinary::new(bounds, Operator::And, keys)),
            Operator::And,
            opaque,
        ));
        let dynamic: Arc<dyn PhysicalExpr> = Arc::new(DynamicFilterPhysicalExpr::new(vec![k], whole));
        assert!(is_dynamic(&dynamic));
        let got: Vec<String> = server_conjuncts(&[dynamic]).iter().map(|e| e.to_string()).collect();
        assert_eq!(got, ["k >= Int64(3)", "k <= Int64(9)", "k IN ([Int64(3), Int64(9)])"]);
        // The placeholder before the build side is done pushes nothing.
        let schema = Schema::new(vec![Field::new("k", DataType::Int64, true)]);
        let placeholder: Arc<dyn PhysicalExpr> = Arc::new(DynamicFilterPhysicalExpr::new(
            vec![col("k", &schema).unwrap()],
            lit(true),
        ));
        assert!(server_conjuncts(&[placeholder]).is_empty());
    }
}
