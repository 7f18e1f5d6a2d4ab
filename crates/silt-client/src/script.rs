//! Running SQL text that may hold several statements (e.g. TPC-H Q15's
//! `CREATE VIEW; SELECT; DROP VIEW`) in a client-side context.

use datafusion::arrow::array::RecordBatch;
use datafusion::error::Result;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::{DFParser, Statement};

/// Result of one statement of a script.
pub struct StatementResult {
    /// The statement's SQL text.
    pub sql: String,
    pub batches: Vec<RecordBatch>,
}

/// Run each statement of `sql` in order and return every statement's result.
/// Statements are split by DataFusion's parser, not by searching for `;`,
/// so semicolons inside string literals are safe. A result without rows is
/// one empty batch, so every result carries its schema.
pub async fn run_script(ctx: &SessionContext, sql: &str) -> Result<Vec<StatementResult>> {
    let mut out = Vec::new();
    for statement in DFParser::parse_sql(sql)? {
        out.push(run_statement(ctx, statement).await?);
    }
    Ok(out)
}

/// Plans and runs one parsed statement, collecting its answer.
pub async fn run_statement(ctx: &SessionContext, statement: Statement) -> Result<StatementResult> {
    let text = statement.to_string();
    let plan = ctx.state().statement_to_plan(statement).await?;
    let df = ctx.execute_logical_plan(plan).await?;
    let schema = std::sync::Arc::new(df.schema().as_arrow().clone());
    let mut batches = df.collect().await?;
    if batches.is_empty() {
        batches.push(RecordBatch::new_empty(schema));
    }
    Ok(StatementResult { sql: text, batches })
}

/// The result of the script's main query: the last statement that returned
/// rows or a schema with columns (DDL results like `DROP VIEW` are skipped).
pub async fn run_script_last_query(ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>> {
    let results = run_script(ctx, sql).await?;
    let main = results
        .into_iter()
        .rev()
        .find(|r| !is_ddl(&r.sql))
        .map(|r| r.batches)
        .unwrap_or_default();
    Ok(main)
}

fn is_ddl(sql: &str) -> bool {
    let head = sql.trim_start().to_ascii_uppercase();
    ["CREATE", "DROP", "SET", "INSERT", "COPY"]
        .iter()
        .any(|k| head.starts_with(k))
}
