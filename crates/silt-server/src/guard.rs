//! The safe SQL surface: only read-only queries over registered tables.
//!
//! Checked in three layers, each of which alone refuses the known attacks:
//! 1. the statement: exactly one, and it must be a query (or EXPLAIN of one);
//!    DDL, DML, `COPY`, `SET`, `CREATE EXTERNAL TABLE` are refused by kind;
//! 2. the table references: every table named must be registered (so
//!    `SELECT * FROM '/etc/passwd'` is refused before planning);
//! 3. the logical plan: DataFusion's own `SQLOptions` (no DDL, DML or
//!    statements) and every table scan — including those in subqueries and
//!    those produced by table functions — must read a registered table.

use std::collections::BTreeSet;

use datafusion::common::TableReference;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::context::SQLOptions;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use datafusion::sql::sqlparser::dialect::GenericDialect;

use crate::error::{GuardRefusal, RequestError, ServerError};

/// Parse `sql` and accept it only if it is a single read-only query.
pub fn parse_single_query(sql: &str) -> Result<DFStatement, ServerError> {
    let mut statements = DFParser::parse_sql_with_dialect(sql, &GenericDialect {}).map_err(RequestError::SqlParse)?;
    if statements.len() != 1 {
        return Err(GuardRefusal::StatementCount {
            count: statements.len(),
        }
        .into());
    }
    let statement = statements.pop_front().ok_or(RequestError::EmptySql)?;
    check_read_only(&statement)?;
    Ok(statement)
}

fn check_read_only(statement: &DFStatement) -> Result<(), ServerError> {
    match statement {
        DFStatement::Statement(s) => match s.as_ref() {
            SqlStatement::Query(_) => Ok(()),
            SqlStatement::Explain { statement, .. } if matches!(statement.as_ref(), SqlStatement::Query(_)) => Ok(()),
            other => Err(refuse(&other.to_string())),
        },
        DFStatement::Explain(e) => check_read_only(&e.statement),
        DFStatement::CreateExternalTable(_) => Err(refuse("CREATE EXTERNAL TABLE")),
        DFStatement::CopyTo(_) => Err(refuse("COPY")),
        DFStatement::Reset(_) => Err(refuse("RESET")),
    }
}

fn refuse(statement_text: &str) -> ServerError {
    let kind: Vec<&str> = statement_text.split_whitespace().take(2).collect();
    let kind = kind.join(" ").to_uppercase();
    GuardRefusal::NotReadOnly { kind }.into()
}

/// Check the tables a statement names before planning it.
pub fn check_references(refs: &[TableReference], registered: &BTreeSet<String>) -> Result<(), ServerError> {
    for r in refs {
        if names_system_table(r) {
            continue;
        }
        if registered_ref(r, registered).is_none() {
            return Err(ServerError::UnknownTable {
                name: r.to_string(),
                registered: registered.iter().cloned().collect::<Vec<_>>().join(", "),
            });
        }
    }
    Ok(())
}

/// The registered name the reference `r` reads, if any: a bare or
/// default-qualified name (`t`, `public.t`, `silt.public.t`), or a REST
/// catalog's table by its full name (`catalog.namespace.t`, registered as
/// that).
pub fn registered_ref(r: &TableReference, registered: &BTreeSet<String>) -> Option<String> {
    let default_schema = match r {
        TableReference::Bare { .. } => true,
        TableReference::Partial { schema, .. } => schema.as_ref() == crate::catalog::SCHEMA,
        TableReference::Full { catalog, schema, .. } => {
            catalog.as_ref() == crate::catalog::CATALOG && schema.as_ref() == crate::catalog::SCHEMA
        }
    };
    if default_schema {
        return registered_name(r.table(), registered).map(str::to_string);
    }
    let TableReference::Full { catalog, schema, table } = r else {
        return None;
    };
    let full = format!("{catalog}.{schema}.{table}");
    registered_name(&full, registered).map(str::to_string)
}

/// The registered name `name` reads: itself, or for a lakehouse table at a
/// snapshot (`events@123`, time travel) the table's; `None` when neither is
/// registered.
pub fn registered_name<'a>(name: &'a str, registered: &BTreeSet<String>) -> Option<&'a str> {
    if registered.contains(name) {
        return Some(name);
    }
    // A malformed snapshot after the `@` is left to planning, which says
    // what is wrong with it.
    match silt_scan::lakehouse::split_snapshot(name) {
        Some((table, _)) if registered.contains(table) => Some(table),
        _ => None,
    }
}

/// Whether `r` names a table of `silt_system` (qualified by that schema,
/// and by the catalog `silt` if by any).
pub fn names_system_table(r: &TableReference) -> bool {
    let catalog_ok = r.catalog().is_none_or(|c| c == crate::catalog::CATALOG);
    catalog_ok && crate::system_tables::is_system_table(r.schema(), r.table())
}

/// Check a planned statement: no DDL/DML/statements, and every scan (also in
/// subqueries) reads a registered table or view.
pub fn check_plan(plan: &LogicalPlan, registered: &BTreeSet<String>) -> Result<(), ServerError> {
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false)
        .verify_plan(plan)
        .map_err(GuardRefusal::Plan)?;
    let mut bad: Option<String> = None;
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && registered_ref(&scan.table_name, registered).is_none()
            && !names_system_table(&scan.table_name)
        {
            bad = Some(scan.table_name.to_string());
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(ServerError::DataFusion)?;
    match bad {
        Some(table) => Err(GuardRefusal::Unregistered { table }.into()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_queries() {
        parse_single_query("SELECT 1").unwrap();
        parse_single_query("WITH a AS (SELECT 1) SELECT * FROM a").unwrap();
        parse_single_query("EXPLAIN SELECT * FROM t").unwrap();
        parse_single_query("SELECT 1;").unwrap();
    }

    #[test]
    fn refuses_everything_else() {
        for sql in [
            "CREATE EXTERNAL TABLE x STORED AS PARQUET LOCATION '/etc'",
            "CREATE TABLE x AS SELECT 1",
            "CREATE VIEW v AS SELECT 1",
            "INSERT INTO t VALUES (1)",
            "COPY (SELECT 1) TO '/tmp/x.parquet'",
            "DROP TABLE t",
            "SET datafusion.execution.batch_size = 1",
            "SELECT 1; SELECT 2",
            "EXPLAIN COPY (SELECT 1) TO '/tmp/x'",
            "DELETE FROM t",
        ] {
            let err = parse_single_query(sql).unwrap_err();
            assert!(matches!(err, ServerError::Refused(_)), "{sql}: {err}");
        }
        assert!(matches!(
            parse_single_query("SELEC nonsense"),
            Err(ServerError::InvalidRequest(_))
        ));
    }

    #[test]
    fn refuses_unregistered_references() {
        let registered: BTreeSet<String> = ["lineitem".to_string()].into();
        check_references(&[TableReference::bare("lineitem")], &registered).unwrap();
        assert!(check_references(&[TableReference::bare("/etc/passwd")], &registered).is_err());
        assert!(check_references(&[TableReference::partial("information_schema", "tables")], &registered).is_err());
        assert!(check_references(&[TableReference::partial("public", "lineitem")], &registered).is_ok());
        assert!(check_references(&[TableReference::partial("silt_system", "queries")], &registered).is_ok());
        assert!(check_references(&[TableReference::full("silt", "silt_system", "tables")], &registered).is_ok());
        assert!(check_references(&[TableReference::bare("queries")], &registered).is_err());
        assert!(check_references(&[TableReference::partial("silt_system", "passwd")], &registered).is_err());
        assert!(check_references(&[TableReference::full("other", "silt_system", "tables")], &registered).is_err());
    }
}
