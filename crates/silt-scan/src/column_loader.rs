//! Columns of one row group, as batches of [`BATCH_ROWS`] rows: from the
//! memory tier when it holds them, else decoded from Parquet (bytes read
//! through the page and disk tiers) and admitted.

use std::sync::Arc;

use crate::chunks::column_chunk_ranges;
use crate::file_columns::file_columns;
use crate::file_reader::CachedFileReader;
use datafusion::arrow::array::{Array, ArrayRef, new_empty_array, new_null_array};
use datafusion::arrow::compute::concat;
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, RowSelection};
use datafusion::parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use datafusion::parquet::file::metadata::ParquetMetaData;
use futures::TryStreamExt;
use object_store::ObjectMeta;
use silt_cache::{
    BATCH_ROWS, BatchKey, CachedColumn, CachedStore, ChunkKey, ColumnCache, DecodeClaim, DecodeFlights, PinnedObject,
};
use std::sync::atomic::Ordering;

/// What the scan knows about one file (one object version) it reads.
#[derive(Debug, Clone)]
pub struct FileContext {
    /// The object as the query engine sees it (namespaced path).
    pub meta: ObjectMeta,
    /// The version the scan pinned: every byte and batch is of this version.
    pub object: PinnedObject,
    /// Decoded footer, with the Arrow schema the reader produces.
    pub reader: ArrowReaderMetadata,
    /// For each table column, its root column index in the file (`None`
    /// when the file lacks it: read as its constant, else as nulls), as
    /// [`file_columns`] matches them.
    pub file_columns: Vec<Option<usize>>,
    /// For each table column the file lacks, the value it has throughout
    /// the file, if any (a Delta partition column: [`Self::with_constants`]);
    /// empty when there are none.
    pub constants: Vec<Option<ScalarValue>>,
}

impl FileContext {
    /// Builds the context of a file whose footer is `metadata`. The reader
    /// is asked to produce the table's types directly where Parquet can
    /// (string views, binary read as strings); anything else is cast.
    pub fn try_new(
        meta: ObjectMeta,
        object: PinnedObject,
        metadata: Arc<ParquetMetaData>,
        table_schema: &Schema,
    ) -> Result<Self> {
        let file_columns = file_columns(table_schema, &metadata);
        let plain = ArrowReaderMetadata::try_new(metadata.clone(), ArrowReaderOptions::new())?;
        let hinted: Vec<Arc<Field>> = plain
            .schema()
            .fields()
            .iter()
            .enumerate()
            .map(|(root, f)| match file_columns.iter().position(|&c| c == Some(root)) {
                Some(t) if table_schema.field(t).data_type() != f.data_type() => Arc::new(
                    f.as_ref()
                        .clone()
                        .with_data_type(table_schema.field(t).data_type().clone()),
                ),
                _ => f.clone(),
            })
            .collect();
        let reader = ArrowReaderMetadata::try_new(
            metadata,
            ArrowReaderOptions::new().with_schema(Arc::new(Schema::new(hinted))),
        )
        .unwrap_or(plain);
        Ok(FileContext {
            meta,
            object,
            reader,
            file_columns,
            constants: Vec::new(),
        })
    }

    /// This file with `constants` (per table column, as
    /// [`crate::lakehouse::PartitionValues::constants`] gives them) for
    /// the columns it lacks.
    pub fn with_constants(mut self, constants: Vec<Option<ScalarValue>>) -> Self {
        self.constants = constants;
        self
    }

    /// `rows` values of table column `c`, which the file lacks: its
    /// constant, else nulls of `data_type`.
    pub fn absent_column(&self, c: usize, data_type: &DataType, rows: usize) -> Result<ArrayRef> {
        match self.constants.get(c) {
            Some(Some(value)) => value.to_array_of_size(rows),
            _ => Ok(new_null_array(data_type, rows)),
        }
    }

    /// Rows of row group `rg`.
    pub fn rows(&self, rg: usize) -> usize {
        usize::try_from(self.reader.metadata().row_group(rg).num_rows()).unwrap_or(0)
    }

    /// The position in the file of row group `rg`'s first row.
    pub fn first_row(&self, rg: usize) -> u64 {
        first_row(self.reader.metadata(), rg)
    }

    /// The name the file gives table column `c`, if it has it (a renamed
    /// column's old name, matched by field id: [`file_columns`]).
    pub fn column_name(&self, c: usize) -> Option<&str> {
        let root = self.file_columns.get(c).copied().flatten()?;
        Some(self.reader.schema().field(root).name())
    }

    /// Compressed bytes of the column chunk of root column `root` (a file
    /// column index) in row group `rg`: its leaves summed.
    pub fn chunk_bytes(&self, rg: usize, root: usize) -> u64 {
        self.leaves_summed(rg, root, |chunk| chunk.compressed_size())
    }

    /// Uncompressed bytes of the column chunk of root column `root` in row
    /// group `rg` (what the layout reports, and what decoding it scans).
    pub fn uncompressed_chunk_bytes(&self, rg: usize, root: usize) -> u64 {
        self.leaves_summed(rg, root, |chunk| chunk.uncompressed_size())
    }

    /// `size` of each leaf chunk of root column `root` in row group `rg`, summed.
    fn leaves_summed(
        &self,
        rg: usize,
        root: usize,
        size: impl Fn(&datafusion::parquet::file::metadata::ColumnChunkMetaData) -> i64,
    ) -> u64 {
        let metadata = self.reader.metadata();
        let schema = metadata.file_metadata().schema_descr();
        metadata
            .row_group(rg)
            .columns()
            .iter()
            .enumerate()
            .filter(|(leaf, _)| schema.get_column_root_idx(*leaf) == root)
            .map(|(_, chunk)| size(chunk).max(0) as u64)
            .sum()
    }

    /// The memory-tier key of batch `batch` of table column `column` in row group `rg`.
    pub fn batch_key(&self, rg: usize, column: usize, batch: usize) -> BatchKey {
        self.chunk_key(rg, column).batch(batch as u32)
    }

    /// The column chunk of table column `column` in row group `rg`.
    pub fn chunk_key(&self, rg: usize, column: usize) -> ChunkKey {
        ChunkKey::new(self.object.key.clone(), rg as u32, column as u32)
    }
}

/// The position in the file whose footer is `metadata` of row group `rg`'s
/// first row (what row positions, say a delete's, count from).
pub fn first_row(metadata: &datafusion::parquet::file::metadata::ParquetMetaData, rg: usize) -> u64 {
    metadata.row_groups()[..rg.min(metadata.num_row_groups())]
        .iter()
        .map(|g| g.num_rows().max(0) as u64)
        .sum()
}

/// Reads columns of row groups for one scan.
#[derive(Clone)]
pub struct ColumnLoader {
    pub store: Arc<CachedStore>,
    pub batches: Arc<ColumnCache>,
    pub table_schema: SchemaRef,
    pub admission: Admission,
}

/// Which decoded column chunks a scan admits to the memory tier.
///
/// A query chooses for all its scans by putting one in its session config
/// (`SessionConfig::with_extension`); without one, scans use
/// [`Admission::SecondTouch`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Admission {
    /// While the transcoder is behind, a chunk read for the first time is
    /// used and not admitted; its next read admits it
    /// ([`silt_cache::FirstTouches`]), so a one-off scan does not pay for
    /// encoding what no query reads again.
    #[default]
    SecondTouch,
    /// Every decoded batch is admitted (encoded inline if the transcoder is
    /// behind), and no column is read for the kept rows only: for
    /// `silt preload --memory`, whose whole point is to fill the memory
    /// tier. Under `SecondTouch` a preload larger than the transcoder's
    /// inline threshold left most of the table out of memory, and every
    /// point lookup on it decoded pages (issue 40).
    Every,
}

/// Whether `arrays` are batches of the sizes `lengths` gives.
fn same_lengths(arrays: &[CachedColumn], lengths: &[usize]) -> bool {
    arrays.len() == lengths.len() && arrays.iter().zip(lengths).all(|(a, &n)| a.len() == n)
}

/// Sizes of the batches of a row group of `rows` rows.
pub fn batch_lengths(rows: usize) -> impl Iterator<Item = usize> {
    (0..rows.div_ceil(BATCH_ROWS)).map(move |b| BATCH_ROWS.min(rows - b * BATCH_ROWS))
}

impl ColumnLoader {
    /// Columns `columns` (table indices) of row group `rg`, each as its
    /// batches, in the order asked, in whichever form the memory tier holds
    /// them (fresh decodes are Arrow).
    pub async fn load(&self, file: &FileContext, rg: usize, columns: &[usize]) -> Result<Vec<Vec<CachedColumn>>> {
        let lengths: Vec<usize> = batch_lengths(file.rows(rg)).collect();
        let mut out: Vec<Option<Vec<CachedColumn>>> = vec![None; columns.len()];
        let mut to_decode = Vec::new();
        for (slot, &c) in columns.iter().enumerate() {
            let field = self.table_schema.field(c);
            let data_type = field.data_type();
            if file.file_columns[c].is_none() {
                out[slot] = Some(
                    lengths
                        .iter()
                        .map(|&n| file.absent_column(c, data_type, n).map(CachedColumn::Arrow))
                        .collect::<Result<_>>()?,
                );
                continue;
            }
            match self.cached(file, rg, c, lengths.len()) {
                Some(arrays) => {
                    self.count(file, rg, c, arrays.len() as u64, 0);
                    out[slot] = Some(arrays);
                }
                None => {
                    self.count(file, rg, c, 0, lengths.len() as u64);
                    to_decode.push(slot);
                }
            }
        }
        if !to_decode.is_empty() {
            // One decode per column chunk at a time: columns another scan is
            // decoding now are waited for, and their batches taken from it.
            let flights = self.batches.decodes();
            let (mut mine, mut guards, mut waits) = (Vec::new(), Vec::new(), Vec::new());
            for slot in to_decode {
                match flights.claim(file.chunk_key(rg, columns[slot])) {
                    // A decode that ended between the miss above and this
                    // claim has admitted its batches: take them.
                    DecodeClaim::Decode(guard) => match self.cached(file, rg, columns[slot], lengths.len()) {
                        Some(arrays) => {
                            guard.share(&arrays);
                            out[slot] = Some(arrays);
                        }
                        None => {
                            mine.push(slot);
                            guards.push(guard);
                        }
                    },
                    DecodeClaim::Wait(rx) => waits.push((slot, rx)),
                }
            }
            // Chunks the memory tier squeezed to disk come back from there,
            // with no Parquet to decode and nothing to transcode.
            let restored = self.restore_squeezed(file, rg, columns, &mine, lengths.len()).await;
            let (mut mine_left, mut guards_left) = (Vec::new(), Vec::new());
            for ((slot, guard), arrays) in mine.into_iter().zip(guards).zip(restored) {
                match arrays.filter(|a| same_lengths(a, &lengths)) {
                    Some(arrays) => {
                        guard.share(&arrays);
                        out[slot] = Some(arrays);
                    }
                    None => {
                        mine_left.push(slot);
                        guards_left.push(guard);
                    }
                }
            }
            let (mine, guards) = (mine_left, guards_left);
            self.decode_into(file, rg, columns, &mine, &mut out).await?;
            // Waiters get the batches (admitted or not) once they are decoded.
            for (slot, guard) in mine.into_iter().zip(guards) {
                guard.publish(out[slot].as_deref().unwrap_or_default());
            }
            let mut again = Vec::new();
            for (slot, rx) in waits {
                match DecodeFlights::wait(rx).await {
                    Some(arrays) => out[slot] = Some(arrays),
                    // The decoder failed or was cancelled: decode here.
                    None => again.push(slot),
                }
            }
            self.decode_into(file, rg, columns, &again, &mut out).await?;
        }
        Ok(out.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// Counts a read of column `c` (present in the file) of row group `rg`:
    /// its chunk's bytes, and `hits`/`misses` batches in the memory tier.
    fn count(&self, file: &FileContext, rg: usize, c: usize, hits: u64, misses: u64) {
        let counters = self.store.counters();
        if let Some(root) = file.file_columns[c] {
            counters
                .chunk_bytes
                .fetch_add(file.chunk_bytes(rg, root), Ordering::Relaxed);
        }
        counters.record_column(self.table_schema.field(c).name(), hits, misses);
    }

    /// Whether column `c` of row group `rg` is read for the first time (see
    /// [`silt_cache::FirstTouches`]): present in the file, neither in the
    /// memory tier nor squeezed (a squeezed chunk comes back whole for less
    /// than decoding its kept rows), and not read before while remembered.
    /// Records the touch. Never under [`Admission::Every`].
    pub fn first_touch(&self, file: &FileContext, rg: usize, c: usize) -> bool {
        self.admission == Admission::SecondTouch
            && file.file_columns[c].is_some()
            && !self.batches.contains(&file.batch_key(rg, c, 0))
            && !self.batches.squeezed().is_some_and(|s| s.holds(&file.chunk_key(rg, c)))
            && self.touched(file, rg, c)
    }

    /// Records a read of chunk (`rg`, `c`) of `file`: whether it is the first.
    fn touched(&self, file: &FileContext, rg: usize, c: usize) -> bool {
        self.batches.first_touches().first(&file.chunk_key(rg, c))
    }

    /// The rows `selection` keeps of `columns` (present in the file) of row
    /// group `rg`, one array per column, decoding only the pages that hold
    /// them (counted as memory-tier misses). Admits nothing.
    pub async fn read_rows(
        &self,
        file: &FileContext,
        rg: usize,
        columns: &[usize],
        selection: RowSelection,
    ) -> Result<Vec<ArrayRef>> {
        let batches = batch_lengths(file.rows(rg)).count() as u64;
        for &c in columns {
            self.count(file, rg, c, 0, batches);
        }
        let read = self.read(file, rg, columns, Some(selection)).await?;
        columns
            .iter()
            .zip(read)
            .map(|(&c, mut arrays)| match arrays.len() {
                0 => Ok(new_empty_array(self.table_schema.field(c).data_type())),
                1 => Ok(arrays.swap_remove(0)),
                _ => {
                    let refs: Vec<&dyn Array> = arrays.iter().map(AsRef::as_ref).collect();
                    Ok(concat(&refs)?)
                }
            })
            .collect()
    }

    /// Every batch of column `c` of row group `rg` from the memory tier, or
    /// `None` if one is missing.
    fn cached(&self, file: &FileContext, rg: usize, c: usize, batches: usize) -> Option<Vec<CachedColumn>> {
        (0..batches)
            .map(|b| self.batches.get(&file.batch_key(rg, c, b)))
            .collect()
    }

    /// For each of `slots`, its column chunk read back from the squeeze tier
    /// (and admitted again) if it holds it ([`ColumnCache::restore_squeezed`]):
    /// one blocking task for them all, none when nothing is squeezed.
    async fn restore_squeezed(
        &self,
        file: &FileContext,
        rg: usize,
        columns: &[usize],
        slots: &[usize],
        batches: usize,
    ) -> Vec<Option<Vec<CachedColumn>>> {
        let chunks: Vec<ChunkKey> = slots.iter().map(|&s| file.chunk_key(rg, columns[s])).collect();
        let squeezed = self.batches.squeezed();
        if !chunks.iter().any(|c| squeezed.is_some_and(|s| s.holds(c))) {
            return vec![None; slots.len()];
        }
        let cache = self.batches.clone();
        let restore = move || chunks.iter().map(|c| cache.restore_squeezed(c, batches)).collect();
        tokio::task::spawn_blocking(restore)
            .await
            .unwrap_or_else(|_| vec![None; slots.len()])
    }

    /// Decodes (and admits) the columns of `slots` into `out`.
    async fn decode_into(
        &self,
        file: &FileContext,
        rg: usize,
        columns: &[usize],
        slots: &[usize],
        out: &mut [Option<Vec<CachedColumn>>],
    ) -> Result<()> {
        if slots.is_empty() {
            return Ok(());
        }
        let wanted: Vec<usize> = slots.iter().map(|&s| columns[s]).collect();
        let decoded = self.decode(file, rg, &wanted).await?;
        for (&slot, arrays) in slots.iter().zip(decoded) {
            out[slot] = Some(arrays);
        }
        Ok(())
    }

    /// Reads, in one set of requests, the column chunks of `columns` in row
    /// group `rg` that the memory tier lacks. The scan decodes filter columns
    /// first and projected columns only if rows survive; fetching all their
    /// bytes up front keeps that to one round trip to the object store (the
    /// bytes land in the page buffer and disk tier, where decoding finds them).
    pub async fn prefetch(&self, file: &FileContext, rg: usize, columns: &[usize]) -> Result<()> {
        let ranges = self.missing_chunks(file, rg, columns);
        if !ranges.is_empty() {
            self.store
                .read_pinned(&file.object, &ranges)
                .await
                .map_err(|e| read_error(file, rg, DataFusionError::External(Box::new(e))))?;
        }
        Ok(())
    }

    /// The byte ranges of the column chunks of `columns` in row group `rg`
    /// that the memory tier lacks: what [`Self::prefetch`] reads.
    pub fn missing_chunks(&self, file: &FileContext, rg: usize, columns: &[usize]) -> Vec<std::ops::Range<u64>> {
        let roots: Vec<usize> = self
            .not_in_memory(file, rg, columns)
            .filter_map(|c| file.file_columns[c])
            .collect();
        column_chunk_ranges(file.reader.metadata(), [rg], Some(&roots))
    }

    /// Columns of `columns` whose row group `rg` is not in the memory tier
    /// (judged by its first batch).
    fn not_in_memory<'a>(
        &'a self,
        file: &'a FileContext,
        rg: usize,
        columns: &'a [usize],
    ) -> impl Iterator<Item = usize> + 'a {
        columns
            .iter()
            .copied()
            .filter(move |&c| !self.batches.contains(&file.batch_key(rg, c, 0)))
    }

    /// Whether reading `columns` of row group `rg` needs bytes: some column
    /// present in the file is not in the memory tier.
    pub fn must_fetch(&self, file: &FileContext, rg: usize, columns: &[usize]) -> bool {
        self.not_in_memory(file, rg, columns)
            .any(|c| file.file_columns[c].is_some())
    }

    /// Decodes `columns` (all present in the file) of row group `rg` and
    /// admits each batch to the memory tier, except, under
    /// [`Admission::SecondTouch`], while admission would encode on this
    /// thread (the transcoder is behind a wide cold scan): then a chunk read
    /// for the first time is not admitted, and its next read admits it
    /// ([`silt_cache::FirstTouches`]), so a one-off scan does not pay for
    /// encoding what no query reads again.
    async fn decode(&self, file: &FileContext, rg: usize, columns: &[usize]) -> Result<Vec<Vec<CachedColumn>>> {
        let decoded = self.read(file, rg, columns, None).await?;
        Ok(columns
            .iter()
            .zip(decoded)
            .map(|(&c, arrays)| {
                let admit = self.admission == Admission::Every
                    || !(self.batches.admission_encodes_inline() && self.touched(file, rg, c));
                let count = arrays.len();
                let batches = arrays
                    .into_iter()
                    .enumerate()
                    .map(|(b, array)| {
                        let column = CachedColumn::Arrow(array);
                        if admit {
                            self.batches.insert(file.batch_key(rg, c, b), column)
                        } else {
                            column
                        }
                    })
                    .collect();
                if admit {
                    // Written to the squeeze tier once liquid (with squeezing ahead).
                    self.batches.admitted_whole(&file.chunk_key(rg, c), count);
                }
                batches
            })
            .collect())
    }

    /// Decodes `columns` (table indices; at least one present in the file,
    /// the others read as nulls) of row group `rg`, in the table's types, as
    /// batches of up to [`BATCH_ROWS`] rows, one `Vec` per column in the
    /// order asked. Admits nothing.
    ///
    /// With a `selection`, only the selected rows are decoded and, since the
    /// footer carries the offset index, the Parquet reader fetches only the
    /// pages holding them (plus any dictionary page); the batches then hold
    /// selected rows only, so they are not row-group batches and must not be
    /// cached under [`BatchKey`]s.
    pub async fn read(
        &self,
        file: &FileContext,
        rg: usize,
        columns: &[usize],
        selection: Option<RowSelection>,
    ) -> Result<Vec<Vec<ArrayRef>>> {
        let roots: Vec<usize> = columns.iter().filter_map(|&c| file.file_columns[c]).collect();
        let chunks_read = roots.len() as u64;
        let mask = ProjectionMask::roots(file.reader.metadata().file_metadata().schema_descr(), roots);
        let reader = CachedFileReader {
            store: self.store.clone(),
            object: file.object.clone(),
            metadata: file.reader.metadata().clone(),
        };
        let mut builder = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, file.reader.clone())
            .with_projection(mask)
            .with_row_groups(vec![rg])
            .with_batch_size(BATCH_ROWS);
        if let Some(selection) = selection {
            builder = builder.with_row_selection(selection);
        }
        let stream = builder.build().map_err(|e| read_error(file, rg, e.into()))?;
        let batches: Vec<_> = stream.try_collect().await.map_err(|e| read_error(file, rg, e.into()))?;
        self.store
            .counters()
            .parquet_decodes
            .fetch_add(chunks_read, Ordering::Relaxed);
        let mut out = vec![Vec::with_capacity(batches.len()); columns.len()];
        for batch in &batches {
            for (slot, &c) in columns.iter().enumerate() {
                let field = self.table_schema.field(c);
                let Some(root) = file.file_columns[c] else {
                    out[slot].push(file.absent_column(c, field.data_type(), batch.num_rows())?);
                    continue;
                };
                // By the file's name of the column (a renamed column's
                // differs from the table's).
                let name = file.reader.schema().field(root).name();
                let array = batch.column_by_name(name).ok_or_else(|| {
                    DataFusionError::Internal(format!("column {} missing from decoded batch", field.name()))
                })?;
                let array = conform(array, field.data_type()).map_err(|e| {
                    DataFusionError::Execution(format!(
                        "column {} of {} (row group {rg}): {e}",
                        field.name(),
                        file.meta.location
                    ))
                })?;
                out[slot].push(array);
            }
        }
        Ok(out)
    }
}

/// `array` as `data_type` (the table's type for the column).
pub(crate) fn conform(array: &ArrayRef, data_type: &DataType) -> Result<ArrayRef> {
    if array.data_type() == data_type {
        return Ok(array.clone());
    }
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    Ok(cast_with_options(array, data_type, &options)?)
}

/// `e` with the object and row group it happened in; the error itself (a
/// typed [`silt_cache::CacheError`] inside, when the cache failed) is kept as
/// the source, so the server's edge can still answer by kind.
fn read_error(file: &FileContext, rg: usize, e: DataFusionError) -> DataFusionError {
    e.context(format!("reading {} (row group {rg})", file.meta.location))
}
