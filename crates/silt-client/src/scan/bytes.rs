//! Fetching a row group's column chunks as stored (compressed Parquet) and
//! decoding them here, when the link is the bottleneck: the *bytes* path,
//! a helper of the hybrid route, not a route of its own (a whole scan
//! never goes as bytes: [`super`]).
//!
//! The "fetch" path of [`super::hybrid`] gets a row group's needed columns
//! whole. As Arrow over Flight they travel about uncompressed; as stored
//! they are the compressed Parquet the server's tiers already hold. Per row
//! group ([`prefers_compressed`]) the client fetches them as stored when
//! the link time that saves exceeds the time to decode them here:
//!
//! ```text
//! (arrow_bytes − stored_bytes) / link_bytes_per_second  >  arrow_bytes × decode_seconds_per_byte
//! ```
//!
//! `arrow_bytes` is the layout's uncompressed size of the needed column
//! chunks (what the Arrow fetch moves, about), `stored_bytes` the coalesced
//! byte ranges of those chunks plus, when this object version's footer is
//! not known here yet, the tail read for it ([`FOOTER_TAIL_BYTES`]);
//! `link_bytes_per_second` is the link the server's
//! [`Calibration`](crate::path_cost::Calibration) has learned (its prior:
//! `SiltTableOptions::link_bytes_per_second`) and `decode_seconds_per_byte` is learned from this process's
//! own decodes (a moving average from a prior of 1 ns per byte,
//! [`DECODE_SECONDS_PER_BYTE_PRIOR`]). At the default 10 Gbit/s link it
//! never pays; on a link of a few hundred Mbit/s it does for anything that
//! compresses. Nothing is a global switch: every row group is decided on
//! its own sizes.
//!
//! **The bytes** come in one [`RangesRequest`] per row group: the needed
//! chunks' byte ranges from the layout (`layout::CHUNK_OFFSET`,
//! `CHUNK_LENGTH`), adjacent ones merged, named by the layout's object and
//! version. The server reads them through its tiers at exactly that
//! version and refuses (`ABORTED`) if the object is no longer at it, which
//! restarts the scan from a new layout like a scoped scan's refusal.
//!
//! **The metadata** is read by the client through the same ranges: the
//! first request for an object version also asks for the object's last
//! [`FOOTER_TAIL_BYTES`] (its size is not needed: the tail's offset gives
//! it); the last 8 bytes give the footer's length, and a footer longer than
//! the tail costs one more request for the rest. The decoded
//! [`ArrowReaderMetadata`] is kept per (server, table, object, version) in a
//! bounded process-wide cache ([`FOOTERS_KEPT`], [`FOOTER_BYTES_KEPT`]), so
//! later row groups of the same version fetch only their chunks (row groups
//! of a version fetched at the same time wait for the one reading its
//! footer, so the tail is read once). The footer
//! thus comes from the same pinned version as the chunks, through the same
//! checks, and the server needs no second encoding of Parquet metadata.
//!
//! **Decoding** is parquet-rs's synchronous Arrow reader over the fetched
//! ranges ([`FetchedRanges`], a `ChunkReader` that refuses any byte it was
//! not sent), restricted to the row group and a `ProjectionMask` of the
//! needed root columns, on a blocking thread. The arrays are then put in
//! the order and types of the schema the scan was planned with: the
//! server adapts its batches to the table's schema, so a column whose file
//! type differs is cast only when the cast is exact ([`exact_cast`]: string
//! and binary layouts, dictionaries to their values, integer widening);
//! anything else (or a decode failure, or an older server) falls back to
//! the Arrow fetch for that row group.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Instant;

use bytes::{Buf, Bytes};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::compute::{cast, concat};
use datafusion::arrow::datatypes::{DataType, UInt64Type};
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use datafusion::parquet::errors::ParquetError;
use datafusion::parquet::file::metadata::ParquetMetaDataReader;
use datafusion::parquet::file::reader::{ChunkReader, Length};
use silt_proto::{ByteRange, RangesRequest, ScanRequest};

use super::layout::RowGroup;
use super::local_plan::LocalPlan;
use super::metrics::PathCounters;
use crate::client::{ClientError, SiltClient};

/// The tail of an object read for its footer on the first fetch of a
/// version (a TPC-H footer of 100 row groups is ~40 KiB).
pub const FOOTER_TAIL_BYTES: u64 = 64 << 10;
/// Footers (decoded, per object version) kept, and their bytes at most.
pub const FOOTERS_KEPT: usize = 1024;
pub const FOOTER_BYTES_KEPT: usize = 64 << 20;
/// What decoding a byte of Parquet (uncompressed size) costs until this
/// process measured its own decodes.
pub const DECODE_SECONDS_PER_BYTE_PRIOR: f64 = 1.0 / 1.0e9;

/// Whether to fetch `arrow_bytes` of Arrow as `stored_bytes` of Parquet
/// and decode them here (module docs).
pub fn prefers_compressed(
    arrow_bytes: u64,
    stored_bytes: u64,
    link_bytes_per_second: f64,
    decode_seconds_per_byte: f64,
) -> bool {
    if !(link_bytes_per_second.is_finite() && link_bytes_per_second > 0.0) {
        return false;
    }
    let saved = (arrow_bytes as f64 - stored_bytes as f64) / link_bytes_per_second;
    saved > arrow_bytes as f64 * decode_seconds_per_byte
}

/// This process's decode cost per uncompressed byte: a moving average of
/// measured decodes, from [`DECODE_SECONDS_PER_BYTE_PRIOR`].
static DECODE_RATE: AtomicU64 = AtomicU64::new(0);

/// Decodes smaller than this are not measured (fixed costs dominate).
const MEASURED_FROM_BYTES: u64 = 256 << 10;

pub fn decode_seconds_per_byte() -> f64 {
    match DECODE_RATE.load(Ordering::Relaxed) {
        0 => DECODE_SECONDS_PER_BYTE_PRIOR,
        bits => f64::from_bits(bits),
    }
}

fn observe_decode(bytes: u64, seconds: f64) {
    if bytes < MEASURED_FROM_BYTES {
        return;
    }
    let observed = seconds / bytes as f64;
    let blended = 0.8 * decode_seconds_per_byte() + 0.2 * observed;
    if blended.is_finite() && blended > 0.0 {
        DECODE_RATE.store(blended.to_bits(), Ordering::Relaxed);
    }
}

/// Footers by (server, table, object, version), bounded (module docs).
#[derive(Default)]
struct Footers {
    entries: HashMap<FooterKey, (ArrowReaderMetadata, usize)>,
    order: VecDeque<FooterKey>,
    bytes: usize,
}

type FooterKey = (String, String, String, String);

static FOOTERS: LazyLock<Mutex<Footers>> = LazyLock::new(Mutex::default);

/// Per object version whose footer is being read, the turn to read it.
static FOOTER_TURNS: LazyLock<Mutex<HashMap<FooterKey, Arc<tokio::sync::Mutex<()>>>>> = LazyLock::new(Mutex::default);

fn footers() -> std::sync::MutexGuard<'static, Footers> {
    FOOTERS.lock().unwrap_or_else(|p| p.into_inner())
}

impl Footers {
    fn get(&self, key: &FooterKey) -> Option<ArrowReaderMetadata> {
        self.entries.get(key).map(|(m, _)| m.clone())
    }

    fn insert(&mut self, key: FooterKey, metadata: ArrowReaderMetadata) {
        let size = metadata.metadata().memory_size();
        if size > FOOTER_BYTES_KEPT || self.entries.contains_key(&key) {
            return;
        }
        while self.entries.len() >= FOOTERS_KEPT || self.bytes + size > FOOTER_BYTES_KEPT {
            let Some(old) = self.order.pop_front() else { break };
            if let Some((_, s)) = self.entries.remove(&old) {
                self.bytes -= s;
            }
        }
        self.bytes += size;
        self.order.push_back(key.clone());
        self.entries.insert(key, (metadata, size));
    }
}

/// Sorted, disjoint byte ranges of one object version and their bytes: a
/// Parquet `ChunkReader` that serves only what was fetched.
#[derive(Debug, Default, Clone)]
pub struct FetchedRanges {
    /// `(offset, bytes)` by offset, none overlapping.
    pieces: Vec<(u64, Bytes)>,
    /// The object's size (0 when no tail was fetched: not needed then).
    size: u64,
    /// Bytes received (overlaps counted twice).
    received: u64,
}

impl FetchedRanges {
    /// The answer to a [`RangesRequest`], its contiguous pieces joined.
    pub fn from_answer(batches: &[RecordBatch]) -> Result<Self, String> {
        let mut pieces: Vec<(u64, Bytes)> = Vec::new();
        for batch in batches {
            let offsets = batch
                .column_by_name(silt_proto::ranges::OFFSET)
                .and_then(|c| c.as_primitive_opt::<UInt64Type>())
                .ok_or("the answer lacks its offsets")?;
            let data = batch
                .column_by_name(silt_proto::ranges::DATA)
                .and_then(|c| c.as_binary_opt::<i32>())
                .ok_or("the answer lacks its bytes")?;
            for i in 0..batch.num_rows() {
                pieces.push((offsets.value(i), Bytes::copy_from_slice(data.value(i))));
            }
        }
        let received = pieces.iter().map(|(_, b)| b.len() as u64).sum();
        pieces.sort_by_key(|(o, _)| *o);
        let mut joined: Vec<(u64, Vec<u8>)> = Vec::new();
        for (offset, bytes) in pieces {
            match joined.last_mut() {
                Some((o, b)) if *o + b.len() as u64 == offset => b.extend_from_slice(&bytes),
                Some((o, b)) if *o + b.len() as u64 > offset => {
                    // The tail may overlap a chunk: keep what is new.
                    let end = offset + bytes.len() as u64;
                    let have = *o + b.len() as u64;
                    if end > have {
                        b.extend_from_slice(&bytes[(have - offset) as usize..]);
                    }
                }
                _ => joined.push((offset, bytes.to_vec())),
            }
        }
        Ok(FetchedRanges {
            pieces: joined.into_iter().map(|(o, b)| (o, Bytes::from(b))).collect(),
            size: 0,
            received,
        })
    }

    fn end(&self) -> u64 {
        self.pieces.last().map_or(0, |(o, b)| o + b.len() as u64)
    }

    /// The piece holding `start..start + length`, and the offset in it.
    fn find(&self, start: u64, length: u64) -> Option<(&Bytes, usize)> {
        let i = self.pieces.partition_point(|(o, _)| *o <= start).checked_sub(1)?;
        let (offset, bytes) = &self.pieces[i];
        let at = start - offset;
        (at + length <= bytes.len() as u64).then_some((bytes, at as usize))
    }

    fn bytes(&self, start: u64, length: u64) -> Option<Bytes> {
        let (bytes, at) = self.find(start, length)?;
        Some(bytes.slice(at..at + length as usize))
    }

    fn merge(&mut self, other: FetchedRanges) {
        self.received += other.received;
        self.pieces.extend(other.pieces);
        self.pieces.sort_by_key(|(o, _)| *o);
    }
}

impl Length for FetchedRanges {
    fn len(&self) -> u64 {
        self.size.max(self.end())
    }
}

impl ChunkReader for FetchedRanges {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> Result<Self::T, ParquetError> {
        let (bytes, at) = self
            .find(start, 0)
            .ok_or_else(|| ParquetError::General(format!("byte {start} was not fetched")))?;
        Ok(bytes.slice(at..).reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> Result<Bytes, ParquetError> {
        self.bytes(start, length as u64)
            .ok_or_else(|| ParquetError::General(format!("bytes {start}+{length} were not fetched")))
    }
}

/// `spans` sorted, overlapping and adjacent ones merged.
pub fn coalesce(mut spans: Vec<(u64, u64)>) -> Vec<ByteRange> {
    spans.sort_unstable();
    let mut out: Vec<ByteRange> = Vec::new();
    for (offset, length) in spans {
        match out.last_mut() {
            Some(last) if last.offset + last.length >= offset => {
                let end = (offset + length).max(last.offset + last.length);
                last.length = end - last.offset;
            }
            _ => out.push(ByteRange { offset, length }),
        }
    }
    out
}

/// Whether `from` cast to `to` changes no value (module docs).
pub fn exact_cast(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    if from == to {
        return true;
    }
    match (from, to) {
        (Utf8 | LargeUtf8 | Utf8View, Utf8 | LargeUtf8 | Utf8View) => true,
        (Binary | LargeBinary | BinaryView, Binary | LargeBinary | BinaryView) => true,
        (Dictionary(_, values), to) => exact_cast(values, to),
        (Int8, Int16 | Int32 | Int64) | (Int16, Int32 | Int64) | (Int32, Int64) => true,
        (UInt8, UInt16 | UInt32 | UInt64) | (UInt16, UInt32 | UInt64) | (UInt32, UInt64) => true,
        _ => false,
    }
}

/// Why a row group was not fetched as stored after all.
enum Skip {
    /// The server refused or failed: a changed version restarts the scan.
    Server(ClientError),
    /// Anything else: the Arrow fetch answers instead.
    Fallback(String),
}

impl From<ClientError> for Skip {
    fn from(e: ClientError) -> Self {
        Skip::Server(e)
    }
}

/// The needed columns of `group` as stored, decoded here, when that beats
/// the Arrow fetch ([`prefers_compressed`]); `None` to fetch them as Arrow
/// (also when the file's types cannot be cast exactly to the planned ones,
/// or decoding failed). Errors are the server's: a changed version
/// restarts the scan.
pub(crate) async fn fetch(
    client: &SiltClient,
    scan: &ScanRequest,
    plan: &LocalPlan,
    group: &RowGroup,
    counters: &PathCounters,
) -> Result<Option<(Vec<ArrayRef>, u64)>, ClientError> {
    let Some(spans) = plan
        .needed
        .iter()
        .map(|c| group.chunks.get(c).map(|s| (s.offset, s.length)))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None); // an older server: no chunk ranges in the layout
    };
    if group.rows == 0 {
        return Ok(None);
    }
    let ranges = coalesce(spans);
    let asked = ranges.iter().map(|r| r.length).sum::<u64>() + FOOTER_TAIL_BYTES;
    if ranges.len() > silt_proto::MAX_RANGES || asked > silt_proto::MAX_RANGES_BYTES {
        return Ok(None); // more than one request may ask for
    }
    let key: FooterKey = (
        client.url().to_string(),
        scan.table.clone(),
        group.object.to_string(),
        group.version.to_string(),
    );
    let known = footers().get(&key);
    if let Some(metadata) = &known
        && !compatible(metadata, plan)
    {
        return Ok(None);
    }
    let arrow_bytes = arrow_bytes(plan, group);
    let tail = if known.is_some() { 0 } else { FOOTER_TAIL_BYTES };
    let stored_bytes = ranges.iter().map(|r| r.length).sum::<u64>() + tail;
    // The link as the client's calibration has learned it (its prior:
    // `SiltTableOptions::link_bytes_per_second`).
    let link = 1.0 / client.calibration().estimates().link_seconds_per_byte.max(1e-15);
    if !prefers_compressed(arrow_bytes, stored_bytes, link, decode_seconds_per_byte()) {
        return Ok(None);
    }
    // One fetch per object version reads its footer; the row groups of it
    // fetched at the same time wait for that, then fetch only their chunks.
    let (mut known, mut tail, mut turn) = (known, tail, None);
    if known.is_none() {
        let lock = FOOTER_TURNS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.clone())
            .or_default()
            .clone();
        let guard = lock.lock_owned().await;
        known = footers().get(&key);
        match &known {
            Some(_) => tail = 0,
            None => turn = Some(guard),
        }
    }
    let fetched = fetch_stored(client, scan, plan, group, ranges, tail, key.clone(), known).await;
    if turn.take().is_some() {
        FOOTER_TURNS.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
    }
    match fetched {
        Ok((arrays, fetched)) => {
            counters.fetched_compressed.add(1);
            counters.bytes_fetched_compressed.add(fetched as usize);
            Ok(Some((arrays, fetched)))
        }
        Err(Skip::Server(e)) if e.is_changed() => Err(e),
        Err(Skip::Server(e)) => {
            tracing::warn!(object = %group.object, error = %e, "fetching column chunks as stored failed; fetching Arrow");
            Ok(None)
        }
        Err(Skip::Fallback(why)) => {
            tracing::debug!(object = %group.object, %why, "column chunks not decoded here; fetching Arrow");
            Ok(None)
        }
    }
}

/// The layout's uncompressed size of `group`'s needed column chunks: about
/// what their Arrow fetch moves.
fn arrow_bytes(plan: &LocalPlan, group: &RowGroup) -> u64 {
    plan.needed
        .iter()
        .map(|c| group.bytes.get(c).copied().unwrap_or(0) as u64)
        .sum()
}

/// Whether every needed column of the file casts exactly to its planned type.
fn compatible(metadata: &ArrowReaderMetadata, plan: &LocalPlan) -> bool {
    let schema = metadata.schema();
    plan.needed.iter().enumerate().all(|(i, name)| {
        schema
            .field_with_name(name)
            .is_ok_and(|f| exact_cast(f.data_type(), plan.wide_schema.field(i).data_type()))
    })
}

/// Fetches `ranges` (and `tail` bytes for the footer when `known` is
/// `None`), decodes the row group, and returns its arrays with the bytes
/// fetched.
#[allow(clippy::too_many_arguments)]
async fn fetch_stored(
    client: &SiltClient,
    scan: &ScanRequest,
    plan: &LocalPlan,
    group: &RowGroup,
    ranges: Vec<ByteRange>,
    tail: u64,
    key: FooterKey,
    known: Option<ArrowReaderMetadata>,
) -> Result<(Vec<ArrayRef>, u64), Skip> {
    let request = RangesRequest {
        table: scan.table.clone(),
        path: group.object.to_string(),
        version: group.version.to_string(),
        ranges,
        tail,
        query: scan.query.clone(),
    };
    let answer = client.ranges(&request).await?;
    let mut fetched = FetchedRanges::from_answer(&answer).map_err(Skip::Fallback)?;
    let metadata = match known {
        Some(metadata) => metadata,
        None => {
            let metadata = read_footer(client, &request, &mut fetched).await?;
            footers().insert(key, metadata.clone());
            metadata
        }
    };
    let moved = fetched.received;
    if !compatible(&metadata, plan) {
        return Err(Skip::Fallback("the file's types differ from the table's".into()));
    }
    let (needed, wide) = (plan.needed.clone(), plan.wide_schema.clone());
    let (index, rows) = (group.index as usize, group.rows);
    let arrow_bytes = arrow_bytes(plan, group);
    let decoded = tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        let arrays = decode(fetched, metadata, index, rows, &needed, &wide);
        if arrays.is_ok() {
            observe_decode(arrow_bytes, start.elapsed().as_secs_f64());
        }
        arrays
    })
    .await
    .map_err(|e| Skip::Fallback(format!("decoding panicked: {e}")))?
    .map_err(Skip::Fallback)?;
    Ok((decoded, moved))
}

/// The footer of the object `request` read, from the tail it fetched (one
/// more request, merged into `fetched`, when the footer is longer).
async fn read_footer(
    client: &SiltClient,
    request: &RangesRequest,
    fetched: &mut FetchedRanges,
) -> Result<ArrowReaderMetadata, Skip> {
    let size = fetched.end();
    fetched.size = size;
    let bad = |why: &str| Skip::Fallback(format!("footer of {}: {why}", request.path));
    let last = fetched
        .bytes(size.saturating_sub(8), 8)
        .filter(|_| size >= 8)
        .ok_or_else(|| bad("no tail"))?;
    if &last[4..] != b"PAR1" {
        return Err(bad("not a plain Parquet footer"));
    }
    let length = u64::from(u32::from_le_bytes([last[0], last[1], last[2], last[3]]));
    let start = size
        .checked_sub(8 + length)
        .ok_or_else(|| bad("longer than the object"))?;
    let footer = match fetched.bytes(start, length) {
        Some(footer) => footer,
        None => {
            let more = RangesRequest {
                ranges: vec![ByteRange { offset: start, length }],
                tail: 0,
                ..request.clone()
            };
            let answer = client.ranges(&more).await?;
            let extra = FetchedRanges::from_answer(&answer).map_err(Skip::Fallback)?;
            fetched.merge(extra);
            fetched.bytes(start, length).ok_or_else(|| bad("not sent"))?
        }
    };
    let metadata = ParquetMetaDataReader::decode_metadata(&footer).map_err(|e| bad(&e.to_string()))?;
    let metadata =
        ArrowReaderMetadata::try_new(Arc::new(metadata), ArrowReaderOptions::new()).map_err(|e| bad(&e.to_string()))?;
    Ok(metadata)
}

/// Row group `index` (`rows` rows) of `fetched`: the `needed` columns in
/// that order, cast to the types of `wide` (whose fields they are).
fn decode(
    fetched: FetchedRanges,
    metadata: ArrowReaderMetadata,
    index: usize,
    rows: usize,
    needed: &[String],
    wide: &datafusion::arrow::datatypes::Schema,
) -> Result<Vec<ArrayRef>, String> {
    let schema = metadata.schema().clone();
    let roots: Vec<usize> = needed
        .iter()
        .map(|n| schema.index_of(n).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let mask = ProjectionMask::roots(metadata.parquet_schema(), roots.iter().copied());
    let groups = metadata.metadata().num_row_groups();
    if index >= groups {
        return Err(format!("row group {index} of {groups}"));
    }
    let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(fetched, metadata)
        .with_projection(mask)
        .with_row_groups(vec![index])
        .with_batch_size(rows.max(1))
        .build()
        .map_err(|e| e.to_string())?;
    let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    let got: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if got != rows {
        return Err(format!("decoded {got} of {rows} rows"));
    }
    needed
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let parts: Vec<&dyn Array> = batches
                .iter()
                .map(|b| {
                    b.column_by_name(name)
                        .map(|c| c.as_ref())
                        .ok_or("a column was not decoded")
                })
                .collect::<Result<_, _>>()?;
            let array = match parts.as_slice() {
                [one] => one.slice(0, one.len()),
                _ => concat(&parts).map_err(|e| e.to_string())?,
            };
            let target = wide.field(i).data_type();
            if array.data_type() == target {
                Ok(array)
            } else {
                cast(&array, target).map_err(|e| e.to_string())
            }
        })
        .collect()
}

/// Reads all of `reader` (the tests' helper for [`FetchedRanges`]).
#[cfg(test)]
fn read_all(mut reader: impl std::io::Read) -> Vec<u8> {
    let mut out = Vec::new();
    reader.read_to_end(&mut out).unwrap();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, StringArray, UInt64Array};

    #[test]
    fn compressed_pays_only_when_the_link_time_saved_beats_decoding() {
        let d = DECODE_SECONDS_PER_BYTE_PRIOR;
        // 100 MB that compress to 30 MB.
        let (arrow, stored) = (100_000_000, 30_000_000);
        assert!(
            !prefers_compressed(arrow, stored, 1.25e9, d),
            "10 Gbit/s: decoding costs more"
        );
        assert!(
            prefers_compressed(arrow, stored, 12.5e6, d),
            "100 Mbit/s: 5.6 s saved for 0.1 s"
        );
        // Break-even: (U - C) / link = U d  <=>  link = (U - C) / (U d) = 7e8.
        assert!(prefers_compressed(arrow, stored, 6.9e8, d));
        assert!(!prefers_compressed(arrow, stored, 7.1e8, d));
        assert!(!prefers_compressed(arrow, arrow, 1.0, d), "nothing saved");
        assert!(!prefers_compressed(arrow, stored, 0.0, d));
        assert!(!prefers_compressed(arrow, stored, f64::NAN, d));
    }

    #[test]
    fn ranges_coalesce_when_they_touch() {
        let got = coalesce(vec![(100, 50), (0, 10), (10, 5), (140, 20), (300, 1)]);
        let pairs: Vec<(u64, u64)> = got.iter().map(|r| (r.offset, r.length)).collect();
        assert_eq!(pairs, vec![(0, 15), (100, 60), (300, 1)]);
    }

    fn answer(pieces: &[(u64, &[u8])]) -> Vec<RecordBatch> {
        pieces
            .iter()
            .map(|(o, b)| {
                RecordBatch::try_new(
                    silt_proto::ranges_schema(),
                    vec![
                        Arc::new(UInt64Array::from(vec![*o])),
                        Arc::new(datafusion::arrow::array::BinaryArray::from(vec![*b])),
                    ],
                )
                .unwrap()
            })
            .collect()
    }

    #[test]
    fn fetched_ranges_serve_what_was_sent_and_nothing_else() {
        // Two pieces of one range, one other range, a tail overlapping it.
        let fetched =
            FetchedRanges::from_answer(&answer(&[(10, b"abc"), (13, b"de"), (20, b"xyz"), (21, b"yzw")])).unwrap();
        assert_eq!(fetched.pieces.len(), 2);
        assert_eq!(fetched.get_bytes(11, 4).unwrap(), Bytes::from_static(b"bcde"));
        assert_eq!(fetched.get_bytes(20, 4).unwrap(), Bytes::from_static(b"xyzw"));
        assert_eq!(read_all(fetched.get_read(12).unwrap()), b"cde");
        assert_eq!(fetched.len(), 24);
        assert!(fetched.get_bytes(14, 2).is_err(), "past a piece");
        assert!(fetched.get_bytes(0, 1).is_err(), "before any");
        assert!(fetched.get_read(16).is_err(), "between pieces");
    }

    #[test]
    fn only_value_preserving_casts_are_exact() {
        use DataType::*;
        assert!(exact_cast(&Utf8, &Utf8View));
        assert!(exact_cast(&Dictionary(Box::new(Int32), Box::new(Utf8)), &Utf8View));
        assert!(exact_cast(&Int32, &Int64));
        assert!(!exact_cast(&Int64, &Int32));
        assert!(!exact_cast(&Utf8, &Binary));
        assert!(!exact_cast(&Decimal128(15, 2), &Decimal128(16, 2)));
    }

    /// A Parquet file decoded from just its footer and the needed chunks
    /// gives the columns plain reading gives, in the planned order and types.
    #[test]
    fn a_row_group_decodes_from_its_chunks_and_footer_alone() {
        use datafusion::arrow::datatypes::{Field, Schema};
        use datafusion::parquet::arrow::ArrowWriter;
        use datafusion::parquet::file::properties::WriterProperties;
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int32, false),
            Field::new("s", DataType::Utf8, true),
            Field::new("b", DataType::Int32, false),
        ]));
        let batch = |from: i32| {
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int32Array::from_iter_values(from..from + 100)),
                    Arc::new(StringArray::from_iter(
                        (from..from + 100).map(|i| (i % 7 != 0).then(|| format!("v{i}"))),
                    )),
                    Arc::new(Int32Array::from_iter_values((from..from + 100).map(|i| i * 2))),
                ],
            )
            .unwrap()
        };
        let mut file = Vec::new();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(100))
            .build();
        let mut writer = ArrowWriter::try_new(&mut file, schema.clone(), Some(props)).unwrap();
        writer.write(&batch(0)).unwrap();
        writer.write(&batch(100)).unwrap();
        writer.close().unwrap();
        let file = Bytes::from(file);
        let metadata = ParquetMetaDataReader::new().parse_and_finish(&file).unwrap();
        let group = metadata.row_group(1);
        // Row group 1's chunks of `s` and `a`, and the footer.
        let spans: Vec<(u64, u64)> = [1, 0]
            .iter()
            .map(|&c| {
                let (o, l) = group.column(c).byte_range();
                (o, l)
            })
            .collect();
        let tail = 4096.min(file.len() as u64);
        let mut pieces: Vec<(u64, &[u8])> = coalesce(spans)
            .iter()
            .map(|r| (r.offset, &file[r.offset as usize..(r.offset + r.length) as usize]))
            .collect();
        let size = file.len() as u64;
        pieces.push((size - tail, &file[(size - tail) as usize..]));
        let mut fetched = FetchedRanges::from_answer(&answer(&pieces)).unwrap();
        fetched.size = size;
        let footer_len = u32::from_le_bytes(file[file.len() - 8..file.len() - 4].try_into().unwrap()) as u64;
        let footer = fetched.bytes(size - 8 - footer_len, footer_len).unwrap();
        let decoded = ParquetMetaDataReader::decode_metadata(&footer).unwrap();
        let metadata = ArrowReaderMetadata::try_new(Arc::new(decoded), ArrowReaderOptions::new()).unwrap();
        let wide = Schema::new(vec![
            Field::new("s", DataType::Utf8View, true),
            Field::new("a", DataType::Int64, false),
        ]);
        let needed = vec!["s".to_string(), "a".to_string()];
        let arrays = decode(fetched, metadata, 1, 100, &needed, &wide).unwrap();
        let expected = batch(100);
        assert_eq!(
            arrays[0].as_ref(),
            cast(expected.column(1), &DataType::Utf8View).unwrap().as_ref()
        );
        assert_eq!(
            arrays[1].as_ref(),
            cast(expected.column(0), &DataType::Int64).unwrap().as_ref()
        );
    }
}
