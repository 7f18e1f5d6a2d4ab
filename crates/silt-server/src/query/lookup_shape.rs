//! Recognizing a lookup in SQL: a statement of exactly the shape
//! `SELECT cols FROM t WHERE key = literal` (or `key IN (literals)`) is
//! answered by the lookup path, without planning ([`super::lookup`]).
//!
//! The shape is recognized on the parsed statement: the parts are
//! extracted, put back together as canonical text and compared with the
//! whole statement as the parser prints it, so any other clause (DISTINCT,
//! ORDER BY, LIMIT, an alias, a second table...) makes it not a lookup, and
//! the statement takes the general path. So does a literal whose type is not
//! the key column's kind (DataFusion's coercion decides those).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Date32Array, Int64Array, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, DataType as SqlType, Expr as SqlExpr, Ident, SelectItem, SetExpr, Statement, TableFactor,
    UnaryOperator, Value,
};

use super::lookup::LookupQuery;
use crate::catalog::{CATALOG, SCHEMA};
use crate::engine::Engine;

/// The lookup `statement` is, if it is exactly one; `None` sends it down
/// the general path.
pub async fn lookup_shape(engine: &Engine, statement: &DFStatement) -> Option<LookupQuery> {
    let DFStatement::Statement(statement) = statement else {
        return None;
    };
    let Statement::Query(query) = statement.as_ref() else {
        return None;
    };
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let [from] = select.from.as_slice() else {
        return None;
    };
    let TableFactor::Table {
        name,
        alias: None,
        args: None,
        ..
    } = &from.relation
    else {
        return None;
    };
    let parts: Vec<&Ident> = name.0.iter().map(|p| p.as_ident()).collect::<Option<_>>()?;
    let table = match parts.as_slice() {
        [t] => t,
        [s, t] if normalize(s) == SCHEMA => t,
        [c, s, t] if normalize(c) == CATALOG && normalize(s) == SCHEMA => t,
        _ => return None,
    };
    let table = normalize(table);
    let (key, literals) = match select.selection.as_ref()? {
        SqlExpr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } => match (left.as_ref(), right.as_ref()) {
            (SqlExpr::Identifier(k), lit) | (lit, SqlExpr::Identifier(k)) => (k, vec![lit]),
            _ => return None,
        },
        SqlExpr::InList {
            expr,
            list,
            negated: false,
        } => match expr.as_ref() {
            SqlExpr::Identifier(k) => (k, list.iter().collect()),
            _ => return None,
        },
        _ => return None,
    };
    let mut projection = Some(Vec::new());
    for item in &select.projection {
        match (item, &mut projection) {
            (SelectItem::UnnamedExpr(SqlExpr::Identifier(c)), Some(cols)) => cols.push(normalize(c)),
            (SelectItem::Wildcard(_), p) if select.projection.len() == 1 => *p = None,
            _ => return None,
        }
    }
    // Nothing but these parts: the canonical text must be the statement's.
    let items: Vec<String> = select.projection.iter().map(ToString::to_string).collect();
    let canonical = format!(
        "SELECT {} FROM {} WHERE {}",
        items.join(", "),
        from.relation,
        select.selection.as_ref()?
    );
    if canonical != query.to_string() {
        return None;
    }
    let provider = engine
        .base_context()
        .table_provider(crate::catalog::table_reference(&table))
        .await
        .ok()?;
    let schema = provider.schema();
    let key_column = normalize(key);
    let key_type = schema.field_with_name(&key_column).ok()?.data_type().clone();
    if provider
        .downcast_ref::<silt_scan::CachedParquetTable>()
        .is_some_and(|t| t.keeps_outside_files(&key_column))
    {
        return None; // not a lookup: a filter on a partition
    }
    if let Some(cols) = &projection
        && cols.iter().any(|c| schema.field_with_name(c).is_err())
    {
        return None;
    }
    let keys = literal_keys(&literals, &key_type)?;
    // A literal the column cannot hold exactly (say 300 for an Int8 key) is
    // DataFusion's to judge.
    let exact = datafusion::arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    datafusion::arrow::compute::cast_with_options(&keys, &key_type, &exact).ok()?;
    Some(LookupQuery {
        table,
        key_column,
        keys,
        projection,
    })
}

/// An identifier as DataFusion resolves it: unquoted ones are lower-cased.
fn normalize(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_ascii_lowercase(),
    }
}

/// The literals as an array, when each is of the key column's kind
/// (integers for an integer column, strings for a string column, dates or
/// date strings for a date column); `NULL` is accepted and matches nothing.
fn literal_keys(literals: &[&SqlExpr], key_type: &DataType) -> Option<ArrayRef> {
    enum Lit {
        Int(i64),
        Str(String),
        Date(String),
        Null,
    }
    let parse = |e: &SqlExpr| -> Option<Lit> {
        match e {
            SqlExpr::Value(v) => match &v.value {
                Value::Number(n, _) => n.parse().ok().map(Lit::Int),
                Value::SingleQuotedString(s) => Some(Lit::Str(s.clone())),
                Value::Null => Some(Lit::Null),
                _ => None,
            },
            SqlExpr::UnaryOp {
                op: UnaryOperator::Minus,
                expr,
            } => match expr.as_ref() {
                SqlExpr::Value(v) => match &v.value {
                    Value::Number(n, _) => n.parse::<i64>().ok().and_then(i64::checked_neg).map(Lit::Int),
                    _ => None,
                },
                _ => None,
            },
            SqlExpr::TypedString(t) if t.data_type == SqlType::Date => match &t.value.value {
                Value::SingleQuotedString(s) => Some(Lit::Date(s.clone())),
                _ => None,
            },
            _ => None,
        }
    };
    let lits: Vec<Lit> = literals.iter().map(|e| parse(e)).collect::<Option<_>>()?;
    let array: ArrayRef = if key_type.is_integer() {
        Arc::new(Int64Array::from(
            lits.iter()
                .map(|l| match l {
                    Lit::Int(i) => Some(Some(*i)),
                    Lit::Null => Some(None),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?,
        ))
    } else if matches!(key_type, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) {
        Arc::new(StringArray::from(
            lits.iter()
                .map(|l| match l {
                    Lit::Str(s) => Some(Some(s.clone())),
                    Lit::Null => Some(None),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?,
        ))
    } else if matches!(key_type, DataType::Date32 | DataType::Date64) {
        let strings = lits
            .iter()
            .map(|l| match l {
                Lit::Str(s) | Lit::Date(s) => Some(Some(s.as_str())),
                Lit::Null => Some(None),
                Lit::Int(_) => None,
            })
            .collect::<Option<Vec<_>>>()?;
        let cast = datafusion::arrow::compute::cast(&StringArray::from(strings), &DataType::Date32).ok()?;
        // A string that is not a date: let the general path report it.
        let dates = cast.as_any().downcast_ref::<Date32Array>()?;
        if dates.null_count() != lits.iter().filter(|l| matches!(l, Lit::Null)).count() {
            return None;
        }
        cast
    } else {
        return None;
    };
    Some(array)
}
