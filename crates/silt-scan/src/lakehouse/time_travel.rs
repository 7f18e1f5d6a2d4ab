//! Time travel by name: `"events@8113270095525607280"` reads the Iceberg
//! table `events` at that snapshot id, `"events@2026-11-27T10:00:00Z"` at
//! the snapshot that was current then (the snapshot log). A quoted table
//! name is plain SQL every client sends unchanged — Flight SQL, JDBC,
//! DataFusion — where `AT SNAPSHOT n` or `FOR SYSTEM_TIME AS OF` are
//! dialects DataFusion does not parse.
//!
//! [`TimeTravelSchema`] wraps the schema the server's tables are registered
//! in. A lakehouse table it holds is handed to each query's planning as a
//! provider whose schema is fixed ([`CachedParquetTable::for_query`]); a name it does not hold, of the form `TABLE@SPEC` where `TABLE` is a
//! lakehouse table, becomes a provider of that table pinned to that
//! snapshot, in that snapshot's schema, built per query and never stored.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::compute::kernels::cast_utils::string_to_timestamp_nanos;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::error::{DataFusionError, Result};
use silt_lakehouse::SnapshotChoice;

use crate::CachedParquetTable;

/// Splits `name` into the table and the snapshot it names: `None` when it
/// has no `@`; an error when what follows the `@` is neither a snapshot id
/// nor a time.
pub fn parse_time_travel(name: &str) -> Option<Result<(&str, SnapshotChoice)>> {
    let (table, spec) = split_snapshot(name)?;
    if let Ok(id) = spec.parse::<i64>() {
        return Some(Ok((table, SnapshotChoice::Id(id))));
    }
    Some(match string_to_timestamp_nanos(spec) {
        Ok(nanos) => Ok((table, SnapshotChoice::AsOf(nanos.div_euclid(1_000_000)))),
        Err(_) => Err(DataFusionError::Plan(format!(
            "{name}: after '@' comes a snapshot id or a time (e.g. {table}@2026-11-27T10:00:00Z), not {spec:?}"
        ))),
    })
}

/// `name` as `(table, what follows the '@')` when it names a table at a
/// snapshot, however well-formed the snapshot part: the one rule of the
/// spelling, for the SQL guard (which checks the table) and for planning
/// (which parses the snapshot).
pub fn split_snapshot(name: &str) -> Option<(&str, &str)> {
    name.rsplit_once('@').filter(|(table, _)| !table.is_empty())
}

/// A schema whose tables may be named at a snapshot (module doc).
#[derive(Debug)]
pub struct TimeTravelSchema {
    inner: Arc<dyn SchemaProvider>,
}

impl TimeTravelSchema {
    /// Wraps `inner`, which keeps holding (and registering) the tables.
    pub fn new(inner: Arc<dyn SchemaProvider>) -> Self {
        TimeTravelSchema { inner }
    }
}

#[async_trait]
impl SchemaProvider for TimeTravelSchema {
    fn owner_name(&self) -> Option<&str> {
        self.inner.owner_name()
    }

    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if let Some(table) = self.inner.table(name).await? {
            // A lakehouse table is planned with a schema of its own per query.
            if let Some(planned) = table.downcast_ref::<CachedParquetTable>().and_then(|t| t.for_query()) {
                return Ok(Some(Arc::new(planned)));
            }
            return Ok(Some(table));
        }
        let Some(parsed) = parse_time_travel(name) else {
            return Ok(None);
        };
        let (base, choice) = parsed?;
        let Some(table) = self.inner.table(base).await? else {
            return Ok(None);
        };
        let pinned = table
            .downcast_ref::<CachedParquetTable>()
            .ok_or_else(|| {
                DataFusionError::Plan(format!("{name}: only lakehouse tables have snapshots; {base} does not"))
            })?
            .at_snapshot(choice)
            .await?;
        Ok(Some(Arc::new(pinned)))
    }

    fn register_table(&self, name: String, table: Arc<dyn TableProvider>) -> Result<Option<Arc<dyn TableProvider>>> {
        self.inner.register_table(name, table)
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        self.inner.deregister_table(name)
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
            || parse_time_travel(name).is_some_and(|p| p.is_ok_and(|(base, _)| self.inner.table_exist(base)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_at_a_snapshot() {
        assert!(parse_time_travel("events").is_none());
        let id = parse_time_travel("events@8113270095525607280").unwrap().unwrap();
        assert_eq!(id, ("events", SnapshotChoice::Id(8113270095525607280)));
        let at = parse_time_travel("db.events@2026-11-27T10:00:00Z").unwrap().unwrap();
        assert_eq!(at, ("db.events", SnapshotChoice::AsOf(1_795_773_600_000)));
        let err = parse_time_travel("events@yesterday").unwrap().unwrap_err().to_string();
        assert!(err.contains("snapshot id or a time"), "{err}");
        assert!(parse_time_travel("@5").is_none());
    }
}
