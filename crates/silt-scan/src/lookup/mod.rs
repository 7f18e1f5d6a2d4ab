//! Point lookups: the rows of a table whose key column equals one of a few
//! keys, found without planning anything.
//!
//! Per object version and key column the server keeps a [`KeyIndex`]
//! (row-group and page min/max of the key, page row ranges; from the
//! footer and page index in the metadata tier). A lookup lists the table
//! (validating versions as a scan would), pins each file, asks the index
//! which pages may hold a key, and reads just those rows:
//!
//! * from the memory tier, when it holds the row group's decoded columns
//!   (batches a scan or `silt preload --memory` admitted): the key is
//!   compared on the cached key batch's encoded values where the encoding
//!   can ([`silt_liquid::LiquidArray::evaluate`]), and only matching rows of
//!   the projected columns are decoded;
//! * else from the page and disk tiers: the row group's key column, decoded
//!   once per object version and kept ([`PinnedKeys`]), is compared in
//!   memory, and Parquet's reader reads exactly the matching rows of the
//!   other projected columns (their pages located through the offset
//!   index). Nothing is admitted to the memory tier (a lookup must not
//!   decode a whole row group to return one row).
//!
//! Every read of one file goes through one pinned version, so a lookup
//! never mixes versions, and the answer is SQL's `WHERE key IN (keys)`: each
//! matching row once, null keys matching nothing, rows in file order.

mod file_deletes;
mod key_index;
mod pinned_keys;

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::{concat, concat_batches, prep_null_mask_filter, take};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::arrow::arrow_reader::RowSelection;
use datafusion::parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use datafusion::parquet::bloom_filter::Sbbf;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{Column, in_list, lit};
use futures::TryStreamExt;
use object_store::ObjectMeta;
use silt_cache::{BATCH_ROWS, CachedColumn, ValidationGate};
use silt_liquid::shared_dict::{DecodedDictionaries, compact_views};
use silt_liquid::{CmpOp, LiquidPredicate};

pub use key_index::{KeyIndex, is_lookup_type};
pub use pinned_keys::PinnedKeys;

use crate::bloom::column_bloom_filter;
use crate::cached_table::CachedParquetTable;
use crate::column_loader::{FileContext, conform};
use crate::file_reader::CachedFileReader;
use crate::footer::pinned_footer;
use file_deletes::FileDeletes;
use pinned_keys::matching_rows;

/// A lookup: table column indices and the keys.
#[derive(Debug, Clone)]
pub struct KeyLookup {
    /// Table index of the key column.
    pub key_column: usize,
    /// The keys, of any type castable to the key column's.
    pub keys: ArrayRef,
    /// Table indices of the columns to return, in order (at least one).
    pub projection: Vec<usize>,
}

/// Rows a lookup found, and where they came from (for metrics).
#[derive(Debug, Default)]
pub struct LookupOutcome {
    pub batches: Vec<RecordBatch>,
    /// Row groups answered from the memory tier.
    pub memory_row_groups: usize,
    /// Row groups answered by reading pages.
    pub page_row_groups: usize,
    /// Candidate row groups whose bloom filter holds none of the keys.
    pub bloom_skipped_row_groups: usize,
}

/// The [`KeyIndex`]es of recently looked-up object versions, keyed by
/// pinned object version and column, so a new version never meets an old
/// index; indexes of replaced versions age out (least recently used first).
pub struct LookupIndexes {
    cache: moka::sync::Cache<(String, usize), Arc<Option<KeyIndex>>>,
    /// Decoded key columns of the row groups lookups read pages of.
    keys: PinnedKeys,
}

impl LookupIndexes {
    /// At most `budget` bytes of indexes and `keys_budget` bytes of pinned
    /// key columns ([`PinnedKeys`]).
    pub fn new(budget: u64, keys_budget: u64) -> Self {
        LookupIndexes {
            keys: PinnedKeys::new(keys_budget),
            cache: moka::sync::Cache::builder()
                .max_capacity(budget)
                .weigher(|_, v: &Arc<Option<KeyIndex>>| {
                    u32::try_from(v.as_ref().as_ref().map_or(64, KeyIndex::heap_size)).unwrap_or(u32::MAX)
                })
                .build(),
        }
    }

    /// The index of `meta`'s version (pinned now) for table column `column`;
    /// `None` when the file lacks the column.
    async fn get(&self, table: &CachedParquetTable, meta: &ObjectMeta, column: usize) -> Result<Arc<Option<KeyIndex>>> {
        let sources = table.sources();
        let object = sources.store.pin(meta)?;
        let key = (format!("{}@{}", meta.location, object.key.version), column);
        if let Some(index) = self.cache.get(&key) {
            return Ok(index);
        }
        let (object, metadata) = pinned_footer(&sources.store, &sources.metadata_cache, meta).await?;
        let schema = table.schema_ref();
        let file = FileContext::try_new(meta.clone(), object, metadata, &schema)?;
        let index = match file.column_name(column).map(str::to_string) {
            Some(name) => Arc::new(KeyIndex::build(file, column, &name)?),
            None => Arc::new(None),
        };
        self.cache.insert(key, index.clone());
        Ok(index)
    }

    /// Indexes held.
    pub fn len(&self) -> u64 {
        self.cache.entry_count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Runs `lookup` on `table` (listing it through `state` and `gate`, which
/// validate object versions like a scan's listing: see
/// [`CachedParquetTable::list_files_gated`]).
pub async fn lookup(
    table: &CachedParquetTable,
    state: &dyn Session,
    gate: Option<Arc<ValidationGate>>,
    indexes: &LookupIndexes,
    request: &KeyLookup,
) -> Result<LookupOutcome> {
    let schema = table.schema_ref();
    let key_field = schema
        .fields()
        .get(request.key_column)
        .ok_or_else(|| DataFusionError::Plan(format!("key column #{} is not in the table", request.key_column)))?;
    if !is_lookup_type(key_field.data_type()) {
        return Err(DataFusionError::NotImplemented(format!(
            "lookups on a {} key column ({})",
            key_field.data_type(),
            key_field.name()
        )));
    }
    if request.projection.is_empty() {
        return Err(DataFusionError::Plan("a lookup returns at least one column".into()));
    }
    let out_schema = Arc::new(schema.project(&request.projection)?);
    let keys = cast_exact(&request.keys, key_field.data_type())?;
    let mut outcome = LookupOutcome::default();
    if keys.null_count() == keys.len() {
        return Ok(outcome);
    }
    let snapshot = table.table_files_gated(state, gate).await?;
    // A lakehouse table's metadata rules files out before their footers
    // are read (bounds, partitions, buckets of the key column).
    let key_values: Vec<ScalarValue> = match snapshot.bounds.is_empty() {
        true => Vec::new(),
        false => (0..keys.len())
            .filter(|&i| keys.is_valid(i))
            .map(|i| ScalarValue::try_from_array(&keys, i))
            .collect::<Result<_>>()?,
    };
    for meta in snapshot.files.iter() {
        let constants = snapshot.partitions.constants(&meta.location, &schema)?;
        if constants.get(request.key_column).is_some_and(Option::is_some) {
            // Every row of such a file has the one key: a scan, not a lookup.
            return Err(DataFusionError::NotImplemented(format!(
                "lookups by {}, a partition column the table keeps outside its files; run the query as SQL",
                key_field.name()
            )));
        }
        if !snapshot.bounds.is_empty()
            && !snapshot
                .bounds
                .statistics_of(&meta.location, &schema, &constants, |c| c == request.key_column)
                .may_hold(request.key_column, &key_values)
        {
            continue;
        }
        let index = indexes.get(table, meta, request.key_column).await?;
        let Some(index) = index.as_ref() else {
            continue; // the file lacks the key column: no row matches
        };
        // Copied only for a file with values outside it (a lookup is a
        // few hundred microseconds: nothing per file it does not need).
        let file = match constants.is_empty() {
            true => Cow::Borrowed(&index.file),
            false => Cow::Owned(index.file.clone().with_constants(constants)),
        };
        let deletes = FileDeletes::of(&snapshot, &file, &schema)?;
        // Equality deletes need their key columns of the found rows: read
        // after the projection, dropped once the rows are checked.
        let extra: Vec<usize> = deletes
            .value_columns()
            .filter(|c| !request.projection.contains(c))
            .collect();
        let (read, read_schema) = match extra.is_empty() {
            true => (Cow::Borrowed(request), out_schema.clone()),
            false => {
                let mut read = request.clone();
                read.projection.extend(extra);
                let read_schema = Arc::new(schema.project(&read.projection)?);
                (Cow::Owned(read), read_schema)
            }
        };
        // As the file stores the column (an older file of a promoted one:
        // narrower); a key that does not fit matches nothing there.
        let file_keys = match keys.data_type() == index.field.data_type() {
            true => keys.clone(),
            false => datafusion::arrow::compute::cast(&keys, index.field.data_type())?,
        };
        let matcher = KeyMatcher::try_new(index, &file_keys)?;
        let candidates = index.candidates(&file_keys)?;
        let mut found = Vec::new();
        let mut on_pages = Vec::new();
        for (rg, ranges) in candidates {
            if bloom_excludes(table, index, rg, &file_keys).await? {
                outcome.bloom_skipped_row_groups += 1;
                continue;
            }
            let live = deletes.live_positions(rg);
            match read_from_memory(table, &file, &matcher, rg, &ranges, live.as_ref(), &read, &read_schema)? {
                Some(batches) => {
                    outcome.memory_row_groups += 1;
                    found.extend(batches);
                }
                None => on_pages.push((rg, ranges, live)),
            }
        }
        if !on_pages.is_empty() {
            outcome.page_row_groups += on_pages.len();
            let mut groups = Vec::with_capacity(on_pages.len());
            for (rg, ranges, live) in on_pages {
                let keys = indexes.keys.get(table, index, rg).await?;
                let mut positions = matching_rows(&matcher, &keys, &ranges)?;
                if let Some(live) = live {
                    let live_at = |p: u32| (p as usize) < live.len() && live.value(p as usize);
                    positions = positions.iter().flatten().filter(|&p| live_at(p)).collect();
                }
                if !positions.is_empty() {
                    groups.push((rg, keys, positions));
                }
            }
            if !groups.is_empty() {
                found.push(read_rows(table, &file, groups, &read, &read_schema).await?);
            }
        }
        if deletes.by_value() {
            let wanted: Vec<usize> = (0..request.projection.len()).collect();
            for batch in found {
                let live = deletes.values_live(batch, &read.projection)?;
                outcome.batches.push(live.project(&wanted)?);
            }
        } else {
            outcome.batches.extend(found);
        }
    }
    outcome.batches = coalesce(&out_schema, std::mem::take(&mut outcome.batches))?;
    Ok(outcome)
}

/// `batches` without empty ones, and runs of small ones (a row from each
/// of many row groups, for a lookup of many keys) joined up to
/// [`BATCH_ROWS`] rows: each batch is one Flight message, which costs far
/// more to encode and send than a few rows do.
fn coalesce(schema: &SchemaRef, batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    let mut run: Vec<RecordBatch> = Vec::new();
    let mut run_rows = 0;
    let flush = |run: &mut Vec<RecordBatch>, out: &mut Vec<RecordBatch>| -> Result<()> {
        match run.len() {
            0 => {}
            1 => out.append(run),
            _ => out.push(concat_batches(schema, std::mem::take(run).iter())?),
        }
        Ok(())
    };
    for batch in batches.into_iter().filter(|b| b.num_rows() > 0) {
        if run_rows + batch.num_rows() > BATCH_ROWS {
            flush(&mut run, &mut out)?;
            run_rows = 0;
        }
        run_rows += batch.num_rows();
        run.push(batch);
    }
    flush(&mut run, &mut out)?;
    Ok(out)
}

/// Whether a bloom filter may hold key `i` of the keys.
type KeyCheck<'a> = dyn Fn(&Sbbf, usize) -> bool + Send + Sync + 'a;

/// Whether row group `rg`'s bloom filter on the key column (when the file
/// has one, and its Parquet type hashes like `keys`) holds none of `keys`.
/// A filter that cannot be read for another reason than the cache (a
/// malformed one) just skips nothing; a cache error (the object changed) is
/// returned.
async fn bloom_excludes(table: &CachedParquetTable, index: &KeyIndex, rg: usize, keys: &ArrayRef) -> Result<bool> {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::{DataType, Int32Type, Int64Type, UInt32Type, UInt64Type};
    use datafusion::parquet::basic::Type as Physical;
    let file = &index.file;
    let Some(leaf) = file.file_columns[index.column] else {
        return Ok(false);
    };
    let physical = file
        .reader
        .metadata()
        .file_metadata()
        .schema_descr()
        .column(leaf)
        .physical_type();
    let check: Box<KeyCheck<'_>> = match (keys.data_type(), physical) {
        (DataType::Int64, Physical::INT64) => Box::new(|f, i| f.check(&keys.as_primitive::<Int64Type>().value(i))),
        (DataType::UInt64, Physical::INT64) => {
            Box::new(|f, i| f.check(&(keys.as_primitive::<UInt64Type>().value(i) as i64)))
        }
        (DataType::Int32, Physical::INT32) => Box::new(|f, i| f.check(&keys.as_primitive::<Int32Type>().value(i))),
        (DataType::UInt32, Physical::INT32) => {
            Box::new(|f, i| f.check(&(keys.as_primitive::<UInt32Type>().value(i) as i32)))
        }
        (DataType::Utf8, Physical::BYTE_ARRAY) => Box::new(|f, i| f.check(keys.as_string::<i32>().value(i))),
        (DataType::LargeUtf8, Physical::BYTE_ARRAY) => Box::new(|f, i| f.check(keys.as_string::<i64>().value(i))),
        (DataType::Utf8View, Physical::BYTE_ARRAY) => Box::new(|f, i| f.check(keys.as_string_view().value(i))),
        _ => return Ok(false),
    };
    let sources = table.sources();
    let filter = match column_bloom_filter(&sources.store, &sources.metadata_cache, file, rg, leaf).await {
        Ok(Some(filter)) => filter,
        Ok(None) => return Ok(false),
        Err(e) if silt_cache::CacheError::find(&e).is_some() => return Err(e),
        Err(_) => return Ok(false),
    };
    Ok(!(0..keys.len()).any(|i| keys.is_valid(i) && check(&filter, i)))
}

/// `array` as `data_type`, refusing lossy casts (a key that does not fit
/// the column is an error, not a silently different key).
fn cast_exact(array: &ArrayRef, data_type: &datafusion::arrow::datatypes::DataType) -> Result<ArrayRef> {
    conform(array, data_type)
        .map_err(|e| DataFusionError::Plan(format!("lookup keys of type {} as {data_type}: {e}", array.data_type())))
}

/// `key IN (keys)` over a one-column batch of the key, as DataFusion
/// evaluates it (a hash set for many keys), nulls as false; on a liquid key
/// batch, evaluated on the encoded values (no decode of the batch).
#[derive(Clone)]
struct KeyMatcher {
    schema: SchemaRef,
    expr: Arc<dyn PhysicalExpr>,
    /// The same test for a liquid batch: `= key` or `IN (keys)`.
    predicate: LiquidPredicate,
}

impl KeyMatcher {
    fn try_new(index: &KeyIndex, keys: &ArrayRef) -> Result<Self> {
        let schema = Arc::new(Schema::new(vec![index.field.as_ref().clone()]));
        let valid: Vec<usize> = (0..keys.len()).filter(|&i| keys.is_valid(i)).collect();
        let list = valid
            .iter()
            .map(|&i| Ok(lit(ScalarValue::try_from_array(keys, i)?)))
            .collect::<Result<Vec<_>>>()?;
        let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new(index.field.name(), 0));
        let expr = in_list(column, list, &false, &schema)?;
        let indices = UInt32Array::from_iter_values(valid.iter().map(|&i| i as u32));
        let values = take(keys.as_ref(), &indices, None)?;
        let predicate = match values.len() {
            1 => LiquidPredicate::Compare {
                op: CmpOp::Eq,
                literal: values,
            },
            _ => LiquidPredicate::InList { values, negated: false },
        };
        Ok(KeyMatcher {
            schema,
            expr,
            predicate,
        })
    }

    fn matches(&self, key: ArrayRef) -> Result<BooleanArray> {
        let rows = key.len();
        let batch = RecordBatch::try_new(self.schema.clone(), vec![key])?;
        let value = self.expr.evaluate(&batch)?.into_array(rows)?;
        let mask = value
            .as_any()
            .downcast_ref::<BooleanArray>()
            .cloned()
            .ok_or_else(|| DataFusionError::Internal("IN list did not return booleans".into()))?;
        Ok(nulls_as_false(mask))
    }

    /// The rows of a cached key batch that match: on the encoded values
    /// when its encoding can compare them (the type matches and the
    /// encoding evaluates the predicate), else on the decoded batch.
    fn matches_cached(&self, key: &CachedColumn) -> Result<BooleanArray> {
        match key {
            CachedColumn::Liquid { array, .. } => match array.evaluate(&self.predicate) {
                Some(mask) => Ok(nulls_as_false(mask)),
                None => self.matches(array.to_arrow()),
            },
            CachedColumn::Arrow(array) => self.matches(array.clone()),
        }
    }
}

/// A filter mask whose nulls (null keys) select nothing.
fn nulls_as_false(mask: BooleanArray) -> BooleanArray {
    match mask.nulls() {
        Some(_) => prep_null_mask_filter(&mask),
        None => mask,
    }
}

/// The matching rows of row group `rg` from the memory tier, if it holds
/// every needed column of every batch the candidate ranges touch.
#[allow(clippy::too_many_arguments)]
fn read_from_memory(
    table: &CachedParquetTable,
    file: &FileContext,
    matcher: &KeyMatcher,
    rg: usize,
    ranges: &[Range<usize>],
    live: Option<&BooleanBuffer>,
    request: &KeyLookup,
    out_schema: &SchemaRef,
) -> Result<Option<Vec<RecordBatch>>> {
    let batches = &table.sources().batches;
    let mut touched: Vec<usize> = ranges
        .iter()
        .flat_map(|r| r.start / BATCH_ROWS..r.end.div_ceil(BATCH_ROWS))
        .collect();
    touched.dedup();
    let needed = || std::iter::once(request.key_column).chain(request.projection.iter().copied());
    let mut loaded: Vec<Vec<(usize, CachedColumn)>> = Vec::with_capacity(touched.len());
    for &b in &touched {
        let mut columns = Vec::new();
        for c in needed() {
            if file.file_columns[c].is_none() || columns.iter().any(|(x, _)| *x == c) {
                continue;
            }
            match batches.get(&file.batch_key(rg, c, b)) {
                Some(column) => columns.push((c, column)),
                None => return Ok(None),
            }
        }
        loaded.push(columns);
    }
    let mut out = Vec::new();
    let mut decoded = DecodedDictionaries::default();
    for (&b, columns) in touched.iter().zip(loaded) {
        let find = |c: usize| columns.iter().find(|(x, _)| *x == c).map(|(_, col)| col);
        let key = find(request.key_column).ok_or_else(|| DataFusionError::Internal("key column not loaded".into()))?;
        let mut mask = matcher.matches_cached(key)?;
        if let Some(live) = live {
            let start = b * BATCH_ROWS;
            if start + mask.len() > live.len() {
                return Err(DataFusionError::Internal(format!(
                    "{}: row group {rg} holds more rows than its footer says",
                    file.meta.location
                )));
            }
            mask = BooleanArray::from(mask.values() & &live.slice(start, mask.len()));
        }
        let rows = mask.true_count();
        if rows == 0 {
            continue;
        }
        // Only the matching rows of the projected columns are decoded.
        let indices = UInt32Array::from_iter_values(mask.values().set_indices().map(|i| i as u32));
        let arrays = request
            .projection
            .iter()
            .map(|&c| match find(c) {
                Some(col) => Ok(compact_views(col.filter_rows(&mask, &indices, &mut decoded)?)),
                None => file.absent_column(c, table.schema_ref().field(c).data_type(), rows),
            })
            .collect::<Result<Vec<_>>>()?;
        out.push(RecordBatch::try_new(out_schema.clone(), arrays)?);
    }
    Ok(Some(out))
}

/// The rows of `groups` (ascending row groups, each with its pinned keys
/// and the matching rows' positions) from the page and disk tiers: the key
/// column comes from the pinned keys, the other projected columns from
/// Parquet's reader with exactly those rows as its selection (only their
/// pages are read, located through the offset index).
async fn read_rows(
    table: &CachedParquetTable,
    file: &FileContext,
    groups: Vec<(usize, ArrayRef, UInt32Array)>,
    request: &KeyLookup,
    out_schema: &SchemaRef,
) -> Result<RecordBatch> {
    let schema = table.schema_ref();
    let rows: usize = groups.iter().map(|(_, _, positions)| positions.len()).sum();
    let keys = groups
        .iter()
        .map(|(_, keys, positions)| Ok(take(keys.as_ref(), positions, None)?))
        .collect::<Result<Vec<_>>>()?;
    let keys = concat(&keys.iter().map(|k| k.as_ref()).collect::<Vec<_>>())?;
    let roots: Vec<usize> = request
        .projection
        .iter()
        .filter(|&&c| c != request.key_column)
        .filter_map(|&c| file.file_columns[c])
        .collect();
    let read = match roots.is_empty() {
        true => None,
        false => {
            // The selection spans the chosen row groups back to back.
            let mut offset = 0;
            let mut ranges = Vec::with_capacity(rows);
            for (rg, _, positions) in &groups {
                ranges.extend(
                    positions
                        .values()
                        .iter()
                        .map(|&p| offset + p as usize..offset + p as usize + 1),
                );
                offset += file.rows(*rg);
            }
            let selection = RowSelection::from_consecutive_ranges(ranges.into_iter(), offset);
            let row_groups = groups.iter().map(|(rg, _, _)| *rg).collect();
            let batches = read_file_rows(
                table,
                file,
                roots,
                row_groups,
                Some(selection),
                rows,
                "looking up keys in",
            )
            .await?;
            let batch = match batches.as_slice() {
                [one] => one.clone(),
                _ => concat_batches(
                    &batches
                        .first()
                        .map_or_else(|| Arc::new(Schema::empty()), |b| b.schema()),
                    &batches,
                )?,
            };
            if batch.num_rows() != rows {
                return Err(DataFusionError::Internal(format!(
                    "a lookup selected {rows} rows of {} and read {}",
                    file.meta.location,
                    batch.num_rows()
                )));
            }
            Some(batch)
        }
    };
    let arrays = request
        .projection
        .iter()
        .map(|&c| {
            let field = schema.field(c);
            let column = match c == request.key_column {
                true => Some(&keys),
                false => file.column_name(c).and_then(|name| read.as_ref()?.column_by_name(name)),
            };
            match column {
                Some(a) if file.file_columns[c].is_some() => conform(a, field.data_type()).map(compact_views),
                _ => file.absent_column(c, field.data_type(), rows),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(out_schema.clone(), arrays)?)
}

/// Root columns `roots` of `row_groups` of the pinned `file` (only
/// `selection`'s rows, when given), read through the cache tiers in batches
/// of at most `batch_size` rows; errors say `doing` and the file.
async fn read_file_rows(
    table: &CachedParquetTable,
    file: &FileContext,
    roots: Vec<usize>,
    row_groups: Vec<usize>,
    selection: Option<RowSelection>,
    batch_size: usize,
    doing: &str,
) -> Result<Vec<RecordBatch>> {
    let metadata = file.reader.metadata().clone();
    let context = |e: DataFusionError| e.context(format!("{doing} {}", file.meta.location));
    let projection = ProjectionMask::roots(metadata.file_metadata().schema_descr(), roots);
    let reader = CachedFileReader {
        store: table.sources().store.clone(),
        object: file.object.clone(),
        metadata,
    };
    let mut builder = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, file.reader.clone())
        .with_projection(projection)
        .with_row_groups(row_groups)
        .with_batch_size(batch_size.max(1));
    if let Some(selection) = selection {
        builder = builder.with_row_selection(selection);
    }
    let stream = builder.build().map_err(|e| context(e.into()))?;
    stream.try_collect().await.map_err(|e| context(e.into()))
}
