//! The lookup path of the server: `LookupRequest` tickets, and SQL of
//! exactly the shape `SELECT cols FROM t WHERE key = literal` (or
//! `key IN (literals)`), answered without planning (see
//! [`silt_scan::lookup`]).
//!
//! The SQL shape is recognized on the parsed statement: the parts are
//! extracted, put back together as canonical text and compared with the
//! whole statement as the parser prints it, so any other clause (DISTINCT,
//! ORDER BY, LIMIT, an alias, a second table...) makes it not a lookup, and
//! the statement takes the general path. So does a literal whose type is not
//! the key column's kind (DataFusion's coercion decides those).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Date32Array, Int64Array, RecordBatch, StringArray, new_null_array};
use datafusion::arrow::buffer::Buffer;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::ipc::reader::StreamDecoder;
use datafusion::common::TableReference;
use datafusion::error::DataFusionError;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, DataType as SqlType, Expr as SqlExpr, Ident, SelectItem, SetExpr, Statement, TableFactor,
    UnaryOperator, Value,
};
use silt_cache::ValidationGate;
use silt_proto::LookupRequest;
use silt_scan::lookup::{KeyLookup, is_lookup_type, lookup};

use crate::engine::{CATALOG, Engine, SCHEMA};
use crate::error::ServerError;

/// A lookup to run: the table, key column, keys and columns, by name.
#[derive(Debug, Clone)]
pub struct LookupQuery {
    pub table: String,
    pub key_column: String,
    pub keys: ArrayRef,
    /// `None`: every column.
    pub projection: Option<Vec<String>>,
}

impl LookupQuery {
    /// Decodes a [`LookupRequest`] (keys as an Arrow IPC stream of one
    /// one-column batch).
    pub fn from_request(request: &LookupRequest) -> Result<Self, ServerError> {
        let bad = |m: String| ServerError::InvalidRequest(format!("lookup on '{}': {m}", request.table));
        let batches =
            decode_ipc_stream(&request.keys).map_err(|e| bad(format!("keys are not an Arrow IPC stream: {e}")))?;
        let mut arrays = Vec::new();
        for batch in batches {
            if batch.num_columns() != 1 {
                return Err(bad(format!("keys must be one column, got {}", batch.num_columns())));
            }
            arrays.push(batch.column(0).clone());
        }
        let keys = match arrays.len() {
            0 => return Err(bad("no keys".into())),
            1 => arrays.pop().unwrap_or_else(|| new_null_array(&DataType::Null, 0)),
            _ => {
                let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
                datafusion::arrow::compute::concat(&refs).map_err(|e| bad(e.to_string()))?
            }
        };
        Ok(LookupQuery {
            table: request.table.clone(),
            key_column: request.key_column.clone(),
            keys,
            projection: request.projection.as_ref().map(|p| p.columns.clone()),
        })
    }
}

/// The batches of an Arrow IPC stream sent by a client, decoded without
/// trusting it: the push decoder allocates only as many bytes as are
/// present (a blocking reader allocates whatever a corrupt length prefix
/// declares: a hostile stream could abort the process), and a panic in a
/// decoder on malformed buffers is an error, not a dead connection.
fn decode_ipc_stream(bytes: &[u8]) -> Result<Vec<RecordBatch>, String> {
    std::panic::catch_unwind(|| {
        let mut decoder = StreamDecoder::new();
        let mut buffer = Buffer::from(bytes);
        let mut batches = Vec::new();
        while !buffer.is_empty() {
            match decoder.decode(&mut buffer).map_err(|e| e.to_string())? {
                Some(batch) => batches.push(batch),
                None if buffer.is_empty() => break,
                None => {}
            }
        }
        decoder.finish().map_err(|e| e.to_string())?;
        Ok(batches)
    })
    .unwrap_or_else(|_| Err("malformed Arrow IPC buffers".into()))
}

impl Engine {
    /// Output schema of `query` (what a `GetFlightInfo` reports), checking
    /// the table and columns exist.
    pub async fn lookup_schema(&self, query: &LookupQuery) -> Result<SchemaRef, ServerError> {
        let table = self.resolve_table(&query.table, "lookups read").await?;
        let schema = table.parquet()?.schema_ref();
        let (_, projection) = resolve(&schema, query)?;
        Ok(Arc::new(schema.project(&projection).map_err(DataFusionError::from)?))
    }

    /// Runs `query`: its schema and rows. A version change in the middle (an
    /// object overwritten between listing and read) restarts it once.
    pub async fn lookup(&self, query: &LookupQuery) -> Result<(SchemaRef, Vec<RecordBatch>), ServerError> {
        self.metrics().lookups.increment(1);
        let resolved = self.resolve_table(&query.table, "lookups read").await?;
        let table = Some(resolved.parquet()?).filter(|t| t.is_cached()).ok_or_else(|| {
            ServerError::InvalidRequest(format!(
                "table '{}' has nested columns; query it with SQL instead",
                query.table
            ))
        })?;
        let schema = table.schema_ref();
        let (key_column, projection) = resolve(&schema, query)?;
        let request = KeyLookup {
            key_column,
            keys: query.keys.clone(),
            projection: projection.clone(),
        };
        let mut restarted = false;
        let outcome = loop {
            // Under `always` the listing may be speculative (the last
            // validated one, its LIST in flight): the rows go out only once
            // the gate confirms it, else the lookup runs again on the new one.
            let gate = ValidationGate::new();
            let attempt = lookup(
                table,
                self.listing_state(),
                Some(gate.clone()),
                self.lookup_indexes(),
                &request,
            )
            .await;
            let confirmed = gate.confirm().await;
            if gate.is_speculative() {
                self.metrics().validations_speculative.increment(1);
            }
            let changed = match (&confirmed, &attempt) {
                (Err(e), _) => {
                    if e.is_changed() {
                        self.metrics().validation_mismatches.increment(1);
                    }
                    e.is_changed()
                }
                (Ok(()), Err(e)) => silt_cache::CacheError::find(e).is_some_and(silt_cache::CacheError::is_changed),
                (Ok(()), Ok(_)) => false,
            };
            if changed && !restarted {
                self.metrics().query_restarts.increment(1);
                restarted = true;
                continue;
            }
            // Rows read on a listing the validation did not confirm never go out.
            if let Err(e) = confirmed {
                return Err(ServerError::reading(
                    &query.table,
                    DataFusionError::External(Box::new(e)),
                ));
            }
            break attempt.map_err(|e| ServerError::reading(&query.table, e))?;
        };
        let m = self.metrics();
        m.lookup_row_groups_memory.increment(outcome.memory_row_groups as u64);
        m.lookup_row_groups_pages.increment(outcome.page_row_groups as u64);
        m.lookup_row_groups_bloom_skipped
            .increment(outcome.bloom_skipped_row_groups as u64);
        Ok((
            Arc::new(schema.project(&projection).map_err(DataFusionError::from)?),
            outcome.batches,
        ))
    }
}

/// Table indices of the key column and the projection.
fn resolve(schema: &SchemaRef, query: &LookupQuery) -> Result<(usize, Vec<usize>), ServerError> {
    let index = |name: &str| {
        schema
            .index_of(name)
            .map_err(|_| ServerError::InvalidRequest(format!("table '{}' has no column '{name}'", query.table)))
    };
    let key = index(&query.key_column)?;
    let key_type = schema.field(key).data_type();
    if !is_lookup_type(key_type) {
        return Err(ServerError::InvalidRequest(format!(
            "lookups need an integer, string or date key column; '{}' is {key_type}",
            query.key_column
        )));
    }
    let projection = match &query.projection {
        None => (0..schema.fields().len()).collect(),
        Some(names) if names.is_empty() => {
            return Err(ServerError::InvalidRequest(
                "a lookup returns at least one column".into(),
            ));
        }
        Some(names) => names.iter().map(|n| index(n)).collect::<Result<_, _>>()?,
    };
    Ok((key, projection))
}

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
        .table_provider(TableReference::bare(table.as_str()))
        .await
        .ok()?;
    let schema = provider.schema();
    let key_column = normalize(key);
    let key_type = schema.field_with_name(&key_column).ok()?.data_type().clone();
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

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;

    fn keys_stream() -> Vec<u8> {
        LookupRequest::encode_keys(Arc::new(Int64Array::from(vec![1, 2, 3]))).unwrap()
    }

    #[test]
    fn hostile_key_streams_are_errors_not_aborts() {
        let good = keys_stream();
        assert_eq!(decode_ipc_stream(&good).unwrap()[0].num_rows(), 3);
        // A length prefix declaring ~2 GiB of metadata (a blocking reader
        // allocates it up front), then a cut stream, then noise.
        let mut huge = good.clone();
        huge[4..8].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
        assert!(decode_ipc_stream(&huge).is_err());
        assert!(decode_ipc_stream(&good[..good.len() / 2]).is_err());
        assert!(decode_ipc_stream(&[0xff; 64]).is_err());
    }
}
