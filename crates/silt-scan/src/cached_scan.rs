//! `CachedScanExec`: the server's scan of a Parquet table over the tiers.
//!
//! Work is a list of (file, row group); partition `p` of `n` takes every
//! `n`-th row group that statistics do not prune, then drops those its bloom
//! filters rule out and narrows the rest to the rows the page index allows
//! ([`crate::pruning`]). For each row group it
//! 1. loads the filter's columns (memory tier, else decode and admit),
//! 2. evaluates the filter per batch of [`silt_cache::BATCH_ROWS`] rows,
//!    skipping batches the page index ruled out,
//! 3. only if some row survives, loads the projected columns and keeps the
//!    surviving rows.
//!
//! So a row group the filter rejects never has its projected columns read
//! or decoded (late materialization at row-group granularity). When the
//! filter keeps at most half the rows, a projected column chunk the memory
//! tier lacks and no scan read before decodes only the kept rows and is not
//! admitted; a second read admits it ([`silt_cache::FirstTouches`]: a cold
//! `SELECT *` with a selective filter decodes a fraction of its columns
//! instead of decoding, admitting and encoding all of them).
//!
//! One exception, the *selected-pages path*: when the page index keeps at
//! most half of a row group's rows and the memory tier lacks some column the
//! row group needs, only the selected rows are decoded — the Parquet reader,
//! given the selection and the offset index, fetches only their pages — and
//! the filter runs on them. Those batches are not admitted to the memory
//! tier: they are not whole row-group batches (the tier's keys name batches
//! of a row group), and caching them under other keys would make each
//! selective query fill the tier with a private copy. Their pages stay in the
//! page and disk tiers, so repeating the query reads no object bytes; a
//! scan that needs the whole row group (a less selective filter) decodes and
//! admits it as usual, after which selective scans take the memory tier.

use std::fmt;
use std::sync::Arc;

use tracing::Instrument;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions};
use datafusion::arrow::buffer::{BooleanBuffer, Buffer};
use datafusion::arrow::compute::filter as filter_array;
use datafusion::arrow::compute::kernels::boolean::and;
use datafusion::arrow::compute::prep_null_mask_filter;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Statistics, exec_err, internal_err, plan_err};
use datafusion::datasource::physical_plan::parquet::ParquetFileMetrics;
use datafusion::error::Result;
use datafusion::execution::cache::cache_manager::FileMetadataCache;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::parquet::arrow::arrow_reader::RowSelection;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchReceiverStream;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties};
use object_store::ObjectMeta;
use silt_cache::{CachedColumn, CachedStore, ScanSet};
use silt_liquid::shared_dict::DecodedDictionaries;
use tokio::sync::mpsc::Sender;
use tokio::task::JoinSet;

use crate::column_loader::{Admission, ColumnLoader, FileContext, batch_lengths};
use crate::footer::pinned_footer;
use crate::lakehouse::equality::{concatenated, key_columns};
use crate::lakehouse::{EqualityDeletes, PartitionValues, PositionDeletes};
use crate::pruning::{FilePruner, RowGroupWork};
use crate::scan_filter::ScanFilter;
use crate::scan_metrics::ScanMetrics;
use crate::scope::ScopedRowGroups;

/// Bytes of column chunks a partition fetches ahead of the row group it
/// decodes (PystachIO's lesson: keep the store busy). Row groups are read
/// ahead while the chunks fetched ahead and not yet decoded fit in this (one
/// row group at least, [`READ_AHEAD_MAX_ROW_GROUPS`] at most), so a scan of
/// small row groups keeps many requests going (each costs a round trip, not
/// bandwidth) and one of large row groups holds at most this much per
/// partition. The bytes go to the page buffer and disk tier.
pub const READ_AHEAD_BYTES: u64 = 32 << 20;

/// The most row groups a partition reads ahead.
pub const READ_AHEAD_MAX_ROW_GROUPS: usize = 16;

/// The most row groups a scan with a `LIMIT` reads ahead: it may stop at any
/// row group, and what it fetched beyond is wasted.
pub const READ_AHEAD_ROW_GROUPS_WITH_LIMIT: usize = 2;

/// `rows` cut into one mask per batch of `lengths`.
fn batch_masks(rows: &BooleanBuffer, lengths: &[usize]) -> Vec<BooleanArray> {
    let mut offset = 0;
    lengths
        .iter()
        .map(|&n| {
            let mask = BooleanArray::from(rows.slice(offset, n));
            offset += n;
            mask
        })
        .collect()
}

/// The plan metric (a count) of rows in the row groups a scan read.
pub const ROWS_SCANNED: &str = "rows_scanned";

/// The plan metric (a count) of the uncompressed bytes of the needed column
/// chunks of the row groups a scan read.
pub const BYTES_SCANNED: &str = "uncompressed_bytes_scanned";

/// Everything a scan reads through, shared by all partitions.
#[derive(Clone)]
pub struct ScanSources {
    pub store: Arc<CachedStore>,
    pub batches: Arc<silt_cache::ColumnCache>,
    pub metadata_cache: Arc<FileMetadataCache>,
    /// The server's pruning counters.
    pub metrics: ScanMetrics,
}

/// What to scan: files, columns, filter, limit.
pub struct ScanSpec {
    pub files: Vec<ObjectMeta>,
    pub table_schema: SchemaRef,
    /// Table column indices to return.
    pub projection: Vec<usize>,
    pub filter: Option<ScanFilter>,
    pub limit: Option<usize>,
    /// Statistics of the files, already projected.
    pub statistics: Statistics,
    /// When the scan is scoped ([`crate::scope`]): the row groups to read
    /// of each file (the others are not read), and of a row group the rows
    /// to return when the client asked for some only (the filter, if any,
    /// still applies to them).
    pub row_groups: Option<ScopedRowGroups>,
    /// What the scan registered it will read ([`crate::scan_set`]): each
    /// row group is released as a partition passes it, the rest when the
    /// plan is dropped (finished, failed or cancelled).
    pub scan_set: Option<ScanSet>,
    /// Rows deleted from the files by position (a lakehouse table's position
    /// deletes): never returned, and never seen by the filter, a limit or
    /// anything above the scan.
    pub deletes: PositionDeletes,
    /// Rows deleted from the files by their values (a lakehouse table's
    /// equality deletes): as position deletes.
    pub equality: EqualityDeletes,
    /// Values of columns kept outside the files (Delta partition columns),
    /// filled in where a file lacks the column.
    pub partitions: PartitionValues,
}

/// Table columns a scan reads: projected and filter columns, ascending.
pub fn needed_columns(projection: &[usize], filter: Option<&ScanFilter>) -> Vec<usize> {
    let mut needed: Vec<usize> = projection.to_vec();
    if let Some(f) = filter {
        needed.extend_from_slice(f.columns());
    }
    needed.sort_unstable();
    needed.dedup();
    needed
}

/// Reads a Parquet table through the memory, page and disk tiers.
pub struct CachedScanExec {
    spec: Arc<ScanSpec>,
    sources: ScanSources,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl fmt::Debug for CachedScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedScanExec")
            .field("files", &self.spec.files.len())
            .field("projection", &self.spec.projection)
            .finish()
    }
}

impl CachedScanExec {
    pub fn new(spec: ScanSpec, sources: ScanSources, partitions: usize) -> Result<Self> {
        let schema = Arc::new(spec.table_schema.project(&spec.projection)?);
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(partitions.max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(CachedScanExec {
            spec: Arc::new(spec),
            sources,
            schema,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }
}

impl DisplayAs for CachedScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let names: Vec<&str> = self.schema.fields().iter().map(|f| f.name().as_str()).collect();
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => {
                write!(
                    f,
                    "CachedScanExec: files={} projection=[{}]",
                    self.spec.files.len(),
                    names.join(", ")
                )?;
                if let Some(filter) = &self.spec.filter {
                    write!(f, " filter={}", filter.text())?;
                }
                if let Some(l) = self.spec.limit {
                    write!(f, " limit={l}")?;
                }
                Ok(())
            }
            DisplayFormatType::TreeRender => write!(f, "files={}", self.spec.files.len()),
        }
    }
}

impl ExecutionPlan for CachedScanExec {
    fn name(&self) -> &'static str {
        "CachedScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            exec_err!("CachedScanExec has no children")
        }
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let partitions = self.properties.partitioning.partition_count();
        if partition >= partitions {
            return exec_err!("CachedScanExec has {partitions} partitions, asked for {partition}");
        }
        // Executing means the query has its slot: what it reserved is needed
        // sooner than what queued queries reserved.
        if let Some(set) = &self.spec.scan_set {
            set.started();
        }
        let run = PartitionRun {
            spec: self.spec.clone(),
            sources: self.sources.clone(),
            schema: self.schema.clone(),
            loader: ColumnLoader {
                store: self.sources.store.clone(),
                batches: self.sources.batches.clone(),
                table_schema: self.spec.table_schema.clone(),
                admission: context
                    .session_config()
                    .get_extension::<Admission>()
                    .map_or_else(Admission::default, |a| *a),
            },
            metrics: self.metrics.clone(),
            partition,
            partitions,
        };
        // The row group a partition holds counts against the query's memory
        // limit (`--query-memory-limit`): over it, the query fails alone.
        let mut reservation =
            MemoryConsumer::new(format!("CachedScanExec[{partition}]")).register(context.memory_pool());
        let mut builder = RecordBatchReceiverStream::builder(self.schema.clone(), 2);
        let tx = builder.tx();
        builder.spawn(async move {
            if let Err(e) = run.run(&tx, &mut reservation).await {
                // The receiver may be gone (query cancelled); nothing to do then.
                let _ = tx.send(Err(e)).await;
            }
            Ok(())
        });
        Ok(builder.build())
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        Ok(Arc::new(self.spec.statistics.clone()))
    }
}

/// One partition's work.
struct PartitionRun {
    spec: Arc<ScanSpec>,
    sources: ScanSources,
    schema: SchemaRef,
    loader: ColumnLoader,
    metrics: ExecutionPlanMetricsSet,
    partition: usize,
    partitions: usize,
}

impl PartitionRun {
    /// Scans this partition's row groups into `tx`, holding each row
    /// group's output in `reservation` while it is sent. Work it spawns
    /// (read-ahead) is tied to it: dropping the run (the query is cancelled
    /// or its client went away) aborts it.
    async fn run(&self, tx: &Sender<Result<RecordBatch>>, reservation: &mut MemoryReservation) -> Result<()> {
        let mut ahead = JoinSet::new();
        let mut remaining = self.spec.limit.unwrap_or(usize::MAX);
        let mut index = 0usize;
        // Row groups of the files before this one (whose pruning counts are
        // attributed to partition `(first + rg) % partitions`).
        let mut first = 0usize;
        // Per projected column: dictionaries decoded by earlier batches of this partition.
        let mut decoded: Vec<DecodedDictionaries> = self.spec.projection.iter().map(|_| Default::default()).collect();
        // Name the columns this scan reads for `silt stats` (the cache keys hold indices).
        let store_id = self.sources.store.store_id();
        for c in self.needed_columns() {
            self.loader
                .batches
                .label_column(store_id, c as u32, self.spec.table_schema.field(c).name());
        }
        // What this partition scanned: the rows of the row groups it read
        // and their needed column chunks' uncompressed bytes (a server's
        // scan report: its cost per byte).
        let rows_scanned = MetricBuilder::new(&self.metrics).counter(ROWS_SCANNED, self.partition);
        let bytes_scanned = MetricBuilder::new(&self.metrics).counter(BYTES_SCANNED, self.partition);
        for meta in &self.spec.files {
            let file = Arc::new(self.open(meta).await?);
            self.note_uses(&file);
            let file_metrics = ParquetFileMetrics::new(self.partition, meta.location.as_ref(), &self.metrics);
            let pruner = self.spec.filter.as_ref().map(|filter| FilePruner {
                filter,
                table_schema: &self.spec.table_schema,
                file: &file,
                sources: &self.sources,
                file_metrics: &file_metrics,
            });
            let groups = match &pruner {
                Some(p) => p.statistics(|rg| (first + rg) % self.partitions == self.partition),
                None => (0..file.reader.metadata().num_row_groups()).collect(),
            };
            first += file.reader.metadata().num_row_groups();
            let groups: Vec<usize> = match &self.spec.row_groups {
                None => groups,
                Some(scoped) => {
                    let wanted = scoped.get(&meta.location);
                    groups
                        .into_iter()
                        .filter(|rg| wanted.is_some_and(|w| w.contains_key(rg)))
                        .collect()
                }
            };
            // Row groups are dealt round-robin over the partitions.
            let mine: Vec<usize> = groups
                .into_iter()
                .filter(|_| {
                    index += 1;
                    (index - 1) % self.partitions == self.partition
                })
                .collect();
            let work = match &pruner {
                Some(p) => p.pages(&p.bloom_filters(mine.clone()).await?),
                None => mine.iter().copied().map(RowGroupWork::all).collect(),
            };
            // Row groups the bloom filters or page index pruned are passed.
            for &rg in mine.iter().filter(|&&rg| !work.iter().any(|w| w.rg == rg)) {
                self.passed(&file, rg);
            }
            // Row groups of `work` whose read-ahead has been started, and
            // the bytes it fetches for each.
            let mut started = 0;
            let mut ahead_bytes = vec![0u64; work.len()];
            let most_ahead = match self.spec.limit {
                Some(_) => READ_AHEAD_ROW_GROUPS_WITH_LIMIT,
                None => READ_AHEAD_MAX_ROW_GROUPS,
            };
            for (i, group) in work.iter().enumerate() {
                while ahead.try_join_next().is_some() {}
                started = started.max(i + 1);
                while started < work.len().min(i + 1 + most_ahead) {
                    let in_flight: u64 = ahead_bytes[i + 1..started].iter().sum();
                    let next = self.read_ahead_bytes(&file, &work[started]);
                    if started > i + 1 && in_flight + next > READ_AHEAD_BYTES {
                        break;
                    }
                    if next > 0 {
                        self.read_ahead(&file, &work[started], &mut ahead);
                    }
                    ahead_bytes[started] = next;
                    started += 1;
                }
                rows_scanned.add(file.rows(group.rg));
                let bytes: u64 = self
                    .needed_columns()
                    .iter()
                    .filter_map(|&c| file.file_columns[c])
                    .map(|root| file.uncompressed_chunk_bytes(group.rg, root))
                    .sum();
                bytes_scanned.add(usize::try_from(bytes).unwrap_or(usize::MAX));
                let span = tracing::info_span!("row_group", object = %meta.location, row_group = group.rg);
                let batches = self.row_group(&file, group, &mut decoded).instrument(span).await?;
                let held: usize = batches.iter().map(RecordBatch::get_array_memory_size).sum();
                reservation.try_grow(held)?;
                for batch in batches {
                    if remaining == 0 {
                        return Ok(());
                    }
                    let batch = if batch.num_rows() > remaining {
                        batch.slice(0, remaining)
                    } else {
                        batch
                    };
                    remaining -= batch.num_rows();
                    if tx.send(Ok(batch)).await.is_err() {
                        return Ok(()); // the consumer went away
                    }
                }
                reservation.shrink(held);
                self.passed(&file, group.rg);
                if remaining == 0 {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Table columns a row group's scan reads: projected and filter columns.
    fn needed_columns(&self) -> Vec<usize> {
        needed_columns(&self.spec.projection, self.spec.filter.as_ref())
    }

    /// Tells the memory tier how this scan reads `file`'s columns: those
    /// the filter matches few entries of (`LIKE`, `=`, `IN` only) as
    /// filtered on (the rows taken from them are the ones the filter kept:
    /// few, until a row group shows otherwise, [`Self::note_taken`]), the
    /// others as taken ([`silt_cache::column_uses`]).
    fn note_uses(&self, file: &FileContext) {
        let filtered = self
            .spec
            .filter
            .as_ref()
            .map_or_else(Vec::new, |f| f.matching_columns());
        for c in self.needed_columns() {
            let value_use = match filtered.contains(&c) {
                true => silt_liquid::ValueUse::Filtered,
                false => silt_liquid::ValueUse::Taken,
            };
            self.loader.batches.note_use(&file.object.key, c as u32, value_use);
        }
    }

    /// Tells the memory tier that this scan takes many rows of `file`'s
    /// `columns` (sticky: their later batches stay value by value).
    fn note_taken(&self, file: &FileContext, columns: &[usize]) {
        for &c in columns {
            let taken = silt_liquid::ValueUse::Taken;
            self.loader.batches.note_use(&file.object.key, c as u32, taken);
        }
    }

    /// This partition is done with row group `rg` of `file` (read, or
    /// pruned): its reservations go.
    fn passed(&self, file: &FileContext, rg: usize) {
        if let Some(set) = &self.spec.scan_set {
            set.passed(&file.object.key, rg as u32);
        }
    }

    /// Whether `group` takes the selected-pages path (module doc): the page
    /// index keeps at most half its rows and some needed column is not in
    /// the memory tier.
    fn reads_selected_pages(&self, file: &FileContext, group: &RowGroupWork) -> bool {
        group.is_selective(file.rows(group.rg)) && self.loader.must_fetch(file, group.rg, &self.needed_columns())
    }

    /// The bytes [`Self::read_ahead`] fetches for `group`: its needed column
    /// chunks the memory tier lacks; 0 when it fetches nothing (warm, or a
    /// row group read by selected pages: it needs only a few pages of its
    /// column chunks, not all of them).
    fn read_ahead_bytes(&self, file: &FileContext, group: &RowGroupWork) -> u64 {
        if self.reads_selected_pages(file, group) {
            return 0;
        }
        let ranges = self.loader.missing_chunks(file, group.rg, &self.needed_columns());
        ranges.iter().map(|r| r.end - r.start).sum()
    }

    /// Starts fetching the bytes of row group `group` in the background, so a
    /// cold scan overlaps the next row groups' round trips to the object
    /// store with decoding this one (DataFusion's own reader fetches, then
    /// decodes). Row groups ahead per partition: up to [`READ_AHEAD_BYTES`];
    /// spawned into `tasks` (the partition's: aborted with it); the bytes
    /// land in the page buffer and disk tier, and the row group's own
    /// prefetch then finds them there or joins the request in flight. Errors
    /// are left to that prefetch. Called for row groups whose
    /// [`Self::read_ahead_bytes`] is not 0.
    fn read_ahead(&self, file: &Arc<FileContext>, group: &RowGroupWork, tasks: &mut JoinSet<()>) {
        let needed = self.needed_columns();
        let loader = self.loader.clone();
        let file = file.clone();
        let rg = group.rg;
        tasks.spawn(async move {
            let _ = loader.prefetch(&file, rg, &needed).await;
        });
    }

    /// Pins one listed file to the version its listing validated, with its
    /// footer at that version (metadata tier).
    async fn open(&self, meta: &ObjectMeta) -> Result<FileContext> {
        let (object, metadata) = pinned_footer(&self.sources.store, &self.sources.metadata_cache, meta).await?;
        let constants = self
            .spec
            .partitions
            .constants(&meta.location, &self.spec.table_schema)?;
        Ok(FileContext::try_new(meta.clone(), object, metadata, &self.spec.table_schema)?.with_constants(constants))
    }

    /// The output batches of one row group; `decoded` holds, per projected
    /// column, the dictionaries earlier batches decoded.
    async fn row_group(
        &self,
        file: &FileContext,
        group: &RowGroupWork,
        decoded: &mut [DecodedDictionaries],
    ) -> Result<Vec<RecordBatch>> {
        let requested = self.requested_rows(file, group.rg).await?;
        if let (Some(f), Some(selection), None) = (&self.spec.filter, &group.selection, &requested)
            && self.reads_selected_pages(file, group)
        {
            return self.selected_rows(f, file, group.rg, selection.clone()).await;
        }
        let rg = group.rg;
        let lengths: Vec<usize> = batch_lengths(file.rows(rg)).collect();
        let selected = group.batches_selected(file.rows(rg));
        self.loader.prefetch(file, rg, &self.needed_columns()).await?;
        let (masks, filter_columns) = match &self.spec.filter {
            None => (requested.map(|r| batch_masks(&r, &lengths)), Vec::new()),
            Some(f) => {
                let loaded = self.loader.load(file, rg, f.columns()).await?;
                let masks = lengths
                    .iter()
                    .enumerate()
                    .map(|(b, &n)| {
                        if selected.as_ref().is_some_and(|s| !s[b]) {
                            // The page index ruled out every row of the batch.
                            return Ok(BooleanArray::from(BooleanBuffer::new_unset(n)));
                        }
                        let columns: Vec<CachedColumn> = loaded.iter().map(|c| c[b].clone()).collect();
                        f.evaluate(&columns, n)
                    })
                    .collect::<Result<Vec<BooleanArray>>>()?;
                let masks = match &requested {
                    None => masks,
                    Some(r) => masks
                        .iter()
                        .zip(batch_masks(r, &lengths))
                        .map(|(m, r)| Ok(and(m, &r)?))
                        .collect::<Result<_>>()?,
                };
                if masks.iter().all(|m| m.true_count() == 0) {
                    return Ok(Vec::new());
                }
                (Some(masks), f.columns().iter().copied().zip(loaded).collect())
            }
        };

        // Projected columns the filter did not already load.
        let missing: Vec<usize> = self
            .spec
            .projection
            .iter()
            .copied()
            .filter(|c| !filter_columns.iter().any(|(fc, _)| fc == c))
            .collect();
        // The filter keeps at most half the rows: projected columns read for
        // the first time decode only the kept rows and are not admitted
        // (`silt_cache::FirstTouches`); their next read admits them.
        let kept: usize = masks.iter().flatten().map(BooleanArray::true_count).sum();
        if let Some(f) = &self.spec.filter
            && kept * silt_liquid::segment_memo::MATCHED_FRACTION > file.rows(rg)
        {
            // The filter keeps many rows: the takes of its columns are not of
            // a few entries a predicate matched, so they are taken like any.
            self.note_taken(file, f.columns());
        }
        let late: Vec<usize> = match &masks {
            Some(_) if kept * 2 <= file.rows(rg) => missing
                .iter()
                .copied()
                .filter(|&c| self.loader.first_touch(file, rg, c))
                .collect(),
            _ => Vec::new(),
        };
        let load: Vec<usize> = missing.iter().copied().filter(|c| !late.contains(c)).collect();
        let mut columns: Vec<(usize, Vec<CachedColumn>)> = filter_columns;
        columns.extend(load.iter().copied().zip(self.loader.load(file, rg, &load).await?));
        let late_rows = match (&masks, late.is_empty()) {
            (Some(masks), false) => self.kept_rows(file, rg, &late, masks, kept).await?,
            _ => Vec::new(),
        };
        // Where the current batch's rows start in `late_rows`.
        let mut offset = 0;
        let mut out = Vec::with_capacity(lengths.len());
        for (b, &n) in lengths.iter().enumerate() {
            let mask = masks.as_ref().map(|m| &m[b]);
            let rows = mask.map_or(n, |m| m.true_count());
            if rows == 0 {
                continue;
            }
            let indices = mask.filter(|_| rows < n).map(silt_liquid::selection_to_indices);
            let arrays = self
                .spec
                .projection
                .iter()
                .zip(decoded.iter_mut())
                .map(|(c, decoded)| {
                    if let Some((_, kept)) = late_rows.iter().find(|(lc, _)| lc == c) {
                        return Ok(kept.slice(offset, rows));
                    }
                    let Some((_, batches)) = columns.iter().find(|(fc, _)| fc == c) else {
                        return internal_err!("column {c} was not loaded");
                    };
                    // Only surviving rows are decoded (selective decoding of the liquid form).
                    match (mask, &indices) {
                        (Some(m), Some(indices)) => Ok(batches[b].filter_rows(m, indices, decoded)?),
                        _ => Ok(batches[b].to_arrow()),
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            offset += rows;
            let options = RecordBatchOptions::new().with_row_count(Some(rows));
            out.push(RecordBatch::try_new_with_options(
                self.schema.clone(),
                arrays,
                &options,
            )?);
        }
        Ok(out)
    }

    /// The `kept` rows `masks` (one per batch) keep of columns `columns` of
    /// row group `rg`, decoded from Parquet without admission: one array per
    /// column, in row order.
    async fn kept_rows(
        &self,
        file: &FileContext,
        rg: usize,
        columns: &[usize],
        masks: &[BooleanArray],
        kept: usize,
    ) -> Result<Vec<(usize, ArrayRef)>> {
        // A null in a mask does not keep its row.
        let masks: Vec<BooleanArray> = masks
            .iter()
            .map(|m| match m.null_count() {
                0 => m.clone(),
                _ => prep_null_mask_filter(m),
            })
            .collect();
        let selection = RowSelection::from_filters(&masks);
        let arrays = self.loader.read_rows(file, rg, columns, selection).await?;
        if let Some(a) = arrays.iter().find(|a| a.len() != kept) {
            return internal_err!(
                "reading the {kept} kept rows of row group {rg} of {} gave {}",
                file.meta.location,
                a.len()
            );
        }
        Ok(columns.iter().copied().zip(arrays).collect())
    }

    /// The rows of row group `rg` of `file` the scan may return: those the
    /// client asked for (a scoped scan with a row bitmap) less those deleted
    /// by position or by their values; `None` for all of them. A bitmap that
    /// does not fit the row group's row count is refused.
    async fn requested_rows(&self, file: &FileContext, rg: usize) -> Result<Option<BooleanBuffer>> {
        let scoped = self.scoped_rows(file, rg)?;
        let scoped = match self.positions_live(file, rg) {
            Some(live) => Some(scoped.map_or_else(|| live.clone(), |s| &s & &live)),
            None => scoped,
        };
        Ok(match self.values_live(file, rg).await? {
            Some(live) => Some(scoped.map_or_else(|| live.clone(), |s| &s & &live)),
            None => scoped,
        })
    }

    /// The rows of row group `rg` of `file` that no equality delete removes
    /// (its key columns loaded through the memory tier); `None` when none
    /// applies to the file.
    async fn values_live(&self, file: &FileContext, rg: usize) -> Result<Option<BooleanBuffer>> {
        let mut live: Option<BooleanBuffer> = None;
        for keys in self.spec.equality.of(&file.meta.location) {
            let columns = key_columns(keys, &self.spec.table_schema)?;
            let loaded = self.loader.load(file, rg, &columns).await?;
            let arrays = columns
                .iter()
                .zip(loaded)
                .map(|(&c, batches)| {
                    let arrays: Vec<ArrayRef> = batches.iter().map(CachedColumn::to_arrow).collect();
                    concatenated(&arrays, self.spec.table_schema.field(c).data_type())
                })
                .collect::<Result<Vec<_>>>()?;
            let kept = keys.live(&arrays)?;
            live = Some(match live {
                Some(l) => &l & &kept,
                None => kept,
            });
        }
        Ok(live)
    }

    /// The rows of row group `rg` of `file` that no position delete
    /// removes; `None` when none removes any.
    fn positions_live(&self, file: &FileContext, rg: usize) -> Option<BooleanBuffer> {
        self.spec.deletes.live_rows(file, rg)
    }

    /// The rows of row group `rg` of `file` the client asked for (a scoped
    /// scan with a row bitmap), `None` for all of them.
    fn scoped_rows(&self, file: &FileContext, rg: usize) -> Result<Option<BooleanBuffer>> {
        let Some(bitmap) = self
            .spec
            .row_groups
            .as_ref()
            .and_then(|s| s.get(&file.meta.location))
            .and_then(|groups| groups.get(&rg).cloned().flatten())
        else {
            return Ok(None);
        };
        let rows = file.rows(rg);
        if bitmap.len() != rows.div_ceil(8) {
            return plan_err!(
                "the row selection of row group {rg} of {} has {} bytes; its {rows} rows need {}",
                file.meta.location,
                bitmap.len(),
                rows.div_ceil(8)
            );
        }
        Ok(Some(BooleanBuffer::new(Buffer::from(bitmap.as_slice()), 0, rows)))
    }

    /// The selected-pages path (module doc): decodes only the rows of
    /// row group `rg` that `selection` keeps, for every needed column at once,
    /// evaluates `filter` on them and keeps the projected columns of the rows
    /// that pass. Nothing is admitted to the memory tier.
    async fn selected_rows(
        &self,
        filter: &ScanFilter,
        file: &FileContext,
        rg: usize,
        selection: RowSelection,
    ) -> Result<Vec<RecordBatch>> {
        let needed = self.needed_columns();
        let read = self.loader.read(file, rg, &needed, Some(selection)).await?;
        let slot = |c: usize| needed.iter().position(|&n| n == c).unwrap_or_default();
        let Some(first) = read.first() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (b, n) in first.iter().map(|a| a.len()).enumerate() {
            let columns: Vec<CachedColumn> = filter
                .columns()
                .iter()
                .map(|&c| CachedColumn::Arrow(read[slot(c)][b].clone()))
                .collect();
            let mask = filter.evaluate(&columns, n)?;
            let rows = mask.true_count();
            if rows == 0 {
                continue;
            }
            let arrays = self
                .spec
                .projection
                .iter()
                .map(|&c| {
                    let array = &read[slot(c)][b];
                    if rows == n {
                        Ok(array.clone())
                    } else {
                        Ok(filter_array(array, &mask)?)
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            let options = RecordBatchOptions::new().with_row_count(Some(rows));
            out.push(RecordBatch::try_new_with_options(
                self.schema.clone(),
                arrays,
                &options,
            )?);
        }
        Ok(out)
    }
}
