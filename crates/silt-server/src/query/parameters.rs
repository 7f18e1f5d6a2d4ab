//! The parameters of a prepared statement: placeholders, their types, and
//! the values bound to them.
//!
//! JDBC and ODBC write placeholders as `?`; DataFusion plans `$1`, `$2`, ...
//! So every statement's `?` are numbered in the order they appear in the
//! text ([`number_placeholders`]) before planning. A client learns the
//! types from the planned statement ([`schema`]: DataFusion infers them from
//! what each placeholder is compared with), and binds one row of values;
//! [`bind`] writes them into the statement as SQL literals (on the parsed
//! statement, never by splicing text, so a value cannot change the
//! statement's shape). The bound statement is plain SQL again: it plans,
//! runs, is validated and restarted like any statement, on any server.

use std::collections::HashMap;
use std::convert::Infallible;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, Value, visit_expressions_mut};
use datafusion::sql::unparser::Unparser;

use crate::error::{ParameterError, RequestError, ServerError};
use crate::guard;

/// Numbers `statement`'s `?` placeholders `$1`, `$2`, ... in the order they
/// appear in its text (`$n` placeholders are left as they are).
pub fn number_placeholders(statement: &mut DFStatement) {
    let mut positions = Vec::new();
    let ControlFlow::Continue(()) = visit_placeholders(statement, |name, expr| {
        if name == "?"
            && let SqlExpr::Value(v) = expr
        {
            positions.push((v.span.start.line, v.span.start.column));
        }
        ControlFlow::<Infallible>::Continue(())
    });
    // The visit's order follows the syntax tree's fields; the text's order
    // is what a client numbers by (a stable sort: equal positions, as
    // without spans, keep the visit's order).
    let mut by_position: Vec<usize> = (0..positions.len()).collect();
    by_position.sort_by_key(|&i| positions[i]);
    let mut numbers = vec![0; positions.len()];
    for (rank, &i) in by_position.iter().enumerate() {
        numbers[i] = rank + 1;
    }
    let mut visited = 0;
    let ControlFlow::Continue(()) = visit_placeholders(statement, |name, expr| {
        if name == "?"
            && let SqlExpr::Value(v) = expr
        {
            v.value = Value::Placeholder(format!("${}", numbers[visited]));
            visited += 1;
        }
        ControlFlow::<Infallible>::Continue(())
    });
}

/// `sql` with `values[n - 1]` in place of each placeholder `$n` (or the
/// n-th `?`), as SQL text.
pub fn bind(sql: &str, values: &[ScalarValue]) -> Result<String, ServerError> {
    let mut statement = guard::parse_single_query(sql)?;
    number_placeholders(&mut statement);
    let unparser = Unparser::default();
    let literals = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            unparser
                .expr_to_sql(&Expr::Literal(v.clone(), None))
                .map_err(|source| RequestError::Parameters(ParameterError::Value { index: i + 1, source }))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let flow = visit_placeholders(&mut statement, |name, expr| {
        let Some(index) = placeholder_index(name) else {
            return ControlFlow::Break(ParameterError::Name {
                placeholder: name.to_string(),
            });
        };
        match literals.get(index - 1) {
            Some(literal) => {
                *expr = literal.clone();
                ControlFlow::Continue(())
            }
            None => ControlFlow::Break(ParameterError::Missing {
                placeholder: name.to_string(),
                bound: values.len(),
            }),
        }
    });
    if let ControlFlow::Break(e) = flow {
        return Err(RequestError::Parameters(e).into());
    }
    Ok(statement.to_string())
}

/// The parameters of `plan` as a schema: field `i` is placeholder `$i+1`,
/// of the type DataFusion inferred for it, or `Utf8` where nothing tells
/// (DataFusion coerces a string literal where the statement needs).
pub fn schema(plan: &LogicalPlan) -> Result<SchemaRef, ServerError> {
    let types: HashMap<String, Option<DataType>> = plan.get_parameter_types()?;
    let mut by_index = HashMap::new();
    for (name, data_type) in types {
        let index = placeholder_index(&name).ok_or(RequestError::Parameters(ParameterError::Name {
            placeholder: name.clone(),
        }))?;
        by_index.insert(index, data_type);
    }
    let count = by_index.keys().copied().max().unwrap_or(0);
    let fields: Vec<Field> = (1..=count)
        .map(|i| {
            let data_type = by_index.get(&i).cloned().flatten().unwrap_or(DataType::Utf8);
            Field::new(format!("${i}"), data_type, true)
        })
        .collect();
    Ok(Arc::new(Schema::new(fields)))
}

/// The n of a placeholder `$n` (from 1).
fn placeholder_index(name: &str) -> Option<usize> {
    name.strip_prefix('$')?.parse::<usize>().ok().filter(|n| *n >= 1)
}

/// Calls `f` with each placeholder's name and expression, in the syntax
/// tree's order, until it breaks.
fn visit_placeholders<E>(
    statement: &mut DFStatement,
    mut f: impl FnMut(&str, &mut SqlExpr) -> ControlFlow<E>,
) -> ControlFlow<E> {
    let mut on_expr = |expr: &mut SqlExpr| {
        let name = match expr {
            SqlExpr::Value(v) => match &v.value {
                Value::Placeholder(name) => name.clone(),
                _ => return ControlFlow::Continue(()),
            },
            _ => return ControlFlow::Continue(()),
        };
        f(&name, expr)
    };
    visit_statement(statement, &mut on_expr)
}

fn visit_statement<E>(
    statement: &mut DFStatement,
    on_expr: &mut impl FnMut(&mut SqlExpr) -> ControlFlow<E>,
) -> ControlFlow<E> {
    match statement {
        DFStatement::Statement(s) => visit_expressions_mut(s.as_mut(), on_expr),
        DFStatement::Explain(e) => visit_statement(e.statement.as_mut(), on_expr),
        // Refused by the guard before anything binds or plans them.
        DFStatement::CreateExternalTable(_) | DFStatement::CopyTo(_) | DFStatement::Reset(_) => {
            ControlFlow::Continue(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(sql: &str) -> String {
        let mut statement = guard::parse_single_query(sql).unwrap();
        number_placeholders(&mut statement);
        statement.to_string()
    }

    #[test]
    fn question_marks_are_numbered_in_text_order() {
        assert_eq!(
            numbered("SELECT a FROM t WHERE b = ? AND c IN (SELECT d FROM u WHERE e < ?) LIMIT ?"),
            "SELECT a FROM t WHERE b = $1 AND c IN (SELECT d FROM u WHERE e < $2) LIMIT $3"
        );
        assert_eq!(numbered("SELECT a FROM t WHERE b = $1"), "SELECT a FROM t WHERE b = $1");
    }

    #[test]
    fn values_are_bound_as_literals_not_text() {
        let sql = "SELECT a FROM t WHERE b = ? AND c < ?";
        let bound = bind(
            sql,
            &[
                ScalarValue::Utf8(Some("x' OR '1'='1".into())),
                ScalarValue::Int64(Some(7)),
            ],
        )
        .unwrap();
        assert_eq!(bound, "SELECT a FROM t WHERE b = 'x'' OR ''1''=''1' AND c < 7");
    }

    #[test]
    fn a_missing_value_is_named() {
        let err = bind("SELECT a FROM t WHERE b = ? AND c = ?", &[ScalarValue::Int32(Some(1))]).unwrap_err();
        assert!(
            err.to_string()
                .contains("no value bound to placeholder $2 (1 values bound)"),
            "{err}"
        );
    }
}
