//! The liquid forms as bytes: what the disk tier keeps of a batch the memory
//! tier squeezes out (issue 43), read back without Parquet decoding or
//! re-encoding.
//!
//! Why a format of our own: a liquid batch is more than Arrow buffers (bit-
//! packed offsets, FSST codes, zstd blocks), and what makes it small is
//! shared between the batches of a column: the FSST symbol table, the zstd
//! dictionary, the shared dictionary's segments. Writing those into every
//! batch would multiply them on disk and, read back, in memory. So a batch is
//! written as its own bytes plus references to **parts**: each shared object
//! is written once, under a [`PartId`], and a batch read back gets the very
//! `Arc` its column's other read-back batches hold ([`PartCatalog`]).
//!
//! The layout is a tag byte per array, then its fields little-endian with
//! lengths before variable data; Arrow arrays kept as they are (plain
//! batches, a dominant batch's values) and data types travel as Arrow IPC.
//! Reading validates every length and width against what the forms
//! require, so bytes that are not a batch give an error, never a panic or an
//! out-of-bounds read (the disk tier's checksums catch damage first; this is
//! the second line).

use std::any::Any;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::io::Cursor;
use std::sync::{Arc, Mutex, Weak};

use arrow::array::{Array, ArrayRef, RecordBatch, new_empty_array};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;

use crate::LiquidArrayRef;
use crate::bitpack::{BitPacked, PackWord};

/// The first byte of each form's bytes.
pub(crate) mod tag {
    pub const FOR: u8 = 1;
    pub const PLAIN: u8 = 2;
    pub const ALP: u8 = 3;
    pub const BITMAP: u8 = 4;
    // Tag 5 was the dominant form with one row per exception (before
    // `DOMINANT_RUNS`): no longer read, so such a batch on disk is dropped
    // and read again from the store.
    pub const BYTES: u8 = 6;
    pub const SHARED_DICT: u8 = 7;
    /// A shared-dictionary batch whose keys are runs (`crate::row_keys`).
    pub const SHARED_DICT_RUNS: u8 = 8;
    /// A dominant-value batch, its exceptions as runs (`crate::dominant`).
    pub const DOMINANT_RUNS: u8 = 9;
}

/// Names a part (an object batches of a column share) within a [`PartCatalog`].
pub type PartId = u64;

/// Bytes that are not a liquid batch (or name a part that cannot be loaded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistError(pub String);

impl fmt::Display for PersistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a liquid batch: {}", self.0)
    }
}

impl std::error::Error for PersistError {}

/// What reading gives.
pub type Result<T> = std::result::Result<T, PersistError>;

pub(crate) fn bad<T>(what: impl Into<String>) -> Result<T> {
    Err(PersistError(what.into()))
}

/// A batch as bytes, with the parts it references.
#[derive(Debug, Default)]
pub struct Persisted {
    /// The batch's own bytes.
    pub bytes: Vec<u8>,
    /// Parts written for the first time by this call, each before any part
    /// that references it: the caller stores them (with the batch) under
    /// their ids.
    pub new_parts: Vec<(PartId, Vec<u8>)>,
    /// Every part the batch needs to be read back (those in `new_parts` and
    /// earlier ones, directly or through another part), so the caller keeps
    /// them while it keeps the batch.
    pub refs: BTreeSet<PartId>,
}

type Shared = Arc<dyn Any + Send + Sync>;
type WeakShared = Weak<dyn Any + Send + Sync>;

/// Which shared objects have been written, under which ids; and which ids
/// have been read back, as which objects.
///
/// One catalog serves any number of columns (ids are unique within it). It
/// holds objects weakly: a part whose last batch in memory is gone is read
/// again from its bytes by the next batch that needs it. The caller owns the
/// bytes; after a restart it starts a catalog past the largest id it kept
/// ([`PartCatalog::starting_at`]).
pub struct PartCatalog {
    inner: Mutex<Catalog>,
    /// Data types as bytes and back: every batch names its type, and Arrow
    /// IPC (which writes them) costs tens of microseconds a time, a second
    /// per thousands of batches read back.
    types: Mutex<TypeMemo>,
}

/// Data types already written or read (a column's batches share theirs).
#[derive(Default)]
struct TypeMemo {
    bytes: HashMap<DataType, Arc<[u8]>>,
    types: HashMap<Arc<[u8]>, DataType>,
}

/// Distinct data types a [`TypeMemo`] keeps before it starts over.
const MAX_TYPES: usize = 1024;

#[derive(Default)]
struct Catalog {
    /// Object address → (the object, its id). The `Weak` keeps the
    /// allocation, so an address is not reused while it is listed here.
    by_address: HashMap<usize, (WeakShared, PartId)>,
    by_id: HashMap<PartId, WeakShared>,
    /// Parts each part references (directly or not).
    deps: HashMap<PartId, Vec<PartId>>,
    next: PartId,
    /// Entries when dead ones were last dropped.
    pruned_at: usize,
}

impl fmt::Debug for PartCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.lock();
        f.debug_struct("PartCatalog")
            .field("known", &c.by_address.len())
            .field("next", &c.next)
            .finish()
    }
}

impl Default for PartCatalog {
    fn default() -> Self {
        Self::starting_at(0)
    }
}

impl PartCatalog {
    /// A catalog whose new parts get ids from `first` on.
    pub fn starting_at(first: PartId) -> Self {
        PartCatalog {
            inner: Mutex::new(Catalog {
                next: first,
                ..Catalog::default()
            }),
            types: Mutex::default(),
        }
    }

    /// The id the next new part gets.
    pub fn next_id(&self) -> PartId {
        self.lock().next
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Catalog> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn type_memo(&self) -> std::sync::MutexGuard<'_, TypeMemo> {
        self.types.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `data_type` as bytes (Arrow IPC of an empty array of it), memoized.
    fn type_bytes(&self, data_type: &DataType) -> Arc<[u8]> {
        if let Some(b) = self.type_memo().bytes.get(data_type) {
            return b.clone();
        }
        let bytes: Arc<[u8]> = ipc_bytes(&new_empty_array(data_type)).into();
        let mut memo = self.type_memo();
        if memo.bytes.len() >= MAX_TYPES {
            memo.bytes.clear();
        }
        memo.bytes.insert(data_type.clone(), bytes.clone());
        bytes
    }

    /// The data type `bytes` ([`PartCatalog::type_bytes`]) hold, memoized.
    fn type_of(&self, bytes: &[u8]) -> Result<DataType> {
        if let Some(t) = self.type_memo().types.get(bytes) {
            return Ok(t.clone());
        }
        let data_type = ipc_array(bytes.to_vec())?.data_type().clone();
        let mut memo = self.type_memo();
        if memo.types.len() >= MAX_TYPES {
            memo.types.clear();
        }
        memo.types.insert(bytes.into(), data_type.clone());
        Ok(data_type)
    }

    /// `array` as bytes, writing the parts it shares that this catalog has
    /// not written (or read) before.
    pub fn write(&self, array: &LiquidArrayRef) -> Persisted {
        let mut w = Writer::new(self);
        array.write(&mut w);
        Persisted {
            bytes: w.out,
            new_parts: w.new_parts,
            refs: w.refs,
        }
    }

    /// The batch `bytes` hold; parts this catalog does not hold in memory
    /// are read with `load` (`None`: the part is gone, an error).
    pub fn read(&self, bytes: &[u8], load: &dyn Fn(PartId) -> Option<Vec<u8>>) -> Result<LiquidArrayRef> {
        let mut r = Reader {
            bytes,
            pos: 0,
            catalog: self,
            load,
            refs: BTreeSet::new(),
        };
        let array = r.array()?;
        r.finish()?;
        Ok(array)
    }

    /// The part `id` if it is in memory.
    fn held(&self, id: PartId) -> Option<Shared> {
        self.lock().by_id.get(&id).and_then(Weak::upgrade)
    }

    /// The id of `object` if it was written or read, with what it references.
    fn known(&self, object: &Shared) -> Option<(PartId, Vec<PartId>)> {
        let c = self.lock();
        let (weak, id) = c.by_address.get(&address(object))?;
        // The same allocation, still alive: the same object.
        (weak.strong_count() > 0).then(|| (*id, c.deps.get(id).cloned().unwrap_or_default()))
    }

    /// A fresh id.
    fn allocate(&self) -> PartId {
        let mut c = self.lock();
        c.next += 1;
        c.next - 1
    }

    /// Records that `object` is part `id`, referencing `deps`.
    fn remember(&self, object: &Shared, id: PartId, deps: Vec<PartId>) {
        let mut c = self.lock();
        c.by_address.insert(address(object), (Arc::downgrade(object), id));
        c.by_id.insert(id, Arc::downgrade(object));
        c.deps.insert(id, deps);
        c.next = c.next.max(id + 1);
        if c.by_address.len() > 2 * c.pruned_at.max(64) {
            c.prune();
        }
    }
}

impl Catalog {
    /// Forgets objects no batch holds any more.
    fn prune(&mut self) {
        self.by_address.retain(|_, (w, _)| w.strong_count() > 0);
        self.by_id.retain(|_, w| w.strong_count() > 0);
        let live: std::collections::HashSet<PartId> = self.by_id.keys().copied().collect();
        self.deps.retain(|id, _| live.contains(id));
        self.pruned_at = self.by_address.len();
    }
}

fn address(object: &Shared) -> usize {
    Arc::as_ptr(object) as *const () as usize
}

/// Writes one batch (and the new parts it shares) as bytes.
pub struct Writer<'a> {
    out: Vec<u8>,
    catalog: &'a PartCatalog,
    new_parts: Vec<(PartId, Vec<u8>)>,
    refs: BTreeSet<PartId>,
}

impl<'a> Writer<'a> {
    fn new(catalog: &'a PartCatalog) -> Self {
        Writer {
            out: Vec::new(),
            catalog,
            new_parts: Vec::new(),
            refs: BTreeSet::new(),
        }
    }

    /// A byte.
    pub fn u8(&mut self, v: u8) {
        self.out.push(v);
    }

    /// A bool as a byte.
    pub fn bool(&mut self, v: bool) {
        self.u8(v as u8);
    }

    /// A `u64`.
    pub fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    /// A length or count.
    pub fn count(&mut self, v: usize) {
        self.u64(v as u64);
    }

    /// An `i128`.
    pub fn i128(&mut self, v: i128) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    /// Bytes, their length first.
    pub fn bytes(&mut self, v: &[u8]) {
        self.count(v.len());
        self.out.extend_from_slice(v);
    }

    /// `u32`s, their count first.
    pub fn u32s(&mut self, v: &[u32]) {
        self.count(v.len());
        for x in v {
            self.out.extend_from_slice(&x.to_le_bytes());
        }
    }

    /// Bits of a boolean buffer (its length, then its bytes from offset 0).
    pub fn bits(&mut self, bits: &BooleanBuffer) {
        self.count(bits.len());
        let packed = bits.sliced();
        self.bytes(&packed.as_slice()[..bits.len().div_ceil(8)]);
    }

    /// An optional null buffer.
    pub fn nulls(&mut self, nulls: Option<&NullBuffer>) {
        self.bool(nulls.is_some());
        if let Some(n) = nulls {
            self.bits(n.inner());
        }
    }

    /// Bit-packed values.
    pub fn packed<T: PackWord>(&mut self, packed: &BitPacked<T>) {
        let (words, width, len) = packed.parts();
        self.u8(width);
        self.count(len);
        self.count(words.len());
        let size = std::mem::size_of::<T>();
        for w in words {
            self.out.extend_from_slice(&w.widen().to_le_bytes()[..size]);
        }
    }

    /// An Arrow array, as Arrow IPC (its type included).
    pub fn arrow(&mut self, array: &ArrayRef) {
        self.bytes(&ipc_bytes(array));
    }

    /// A data type (as an empty Arrow array of it).
    pub fn data_type(&mut self, data_type: &DataType) {
        let bytes = self.catalog.type_bytes(data_type);
        self.bytes(&bytes);
    }

    /// A fixed-width Arrow array (no offsets, no children) as its values'
    /// bytes and its nulls; its type is written by the caller.
    pub fn fixed_width(&mut self, array: &ArrayRef) {
        let data = array.to_data();
        let width = data
            .data_type()
            .primitive_width()
            .expect("invariant: a fixed-width array");
        let start = data.offset() * width;
        self.count(data.len());
        self.bytes(&data.buffers()[0].as_slice()[start..start + data.len() * width]);
        self.nulls(data.nulls());
    }

    /// A nested liquid array.
    pub fn array(&mut self, array: &LiquidArrayRef) {
        array.write(self);
    }

    /// A reference to the shared `object`: its id, and its bytes (written
    /// by `write`) if the catalog has not seen it.
    pub fn part<T: Any + Send + Sync>(&mut self, object: &Arc<T>, write: impl FnOnce(&T, &mut Writer<'_>)) {
        let shared: Shared = object.clone();
        let id = match self.catalog.known(&shared) {
            Some((id, deps)) => {
                self.refs.extend(deps);
                id
            }
            None => {
                let id = self.catalog.allocate();
                let mut sub = Writer::new(self.catalog);
                write(object, &mut sub);
                let deps: Vec<PartId> = sub.refs.iter().copied().collect();
                self.catalog.remember(&shared, id, deps);
                self.refs.extend(sub.refs);
                self.new_parts.extend(sub.new_parts);
                self.new_parts.push((id, sub.out));
                id
            }
        };
        self.refs.insert(id);
        self.u64(id);
    }
}

/// Reads one batch from bytes (and the parts it references).
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    catalog: &'a PartCatalog,
    load: &'a dyn Fn(PartId) -> Option<Vec<u8>>,
    refs: BTreeSet<PartId>,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return bad(format!("{n} bytes wanted at {} of {}", self.pos, self.bytes.len()));
        };
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn finish(&self) -> Result<()> {
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            bad(format!("{} bytes left over", self.bytes.len() - self.pos))
        }
    }

    /// A byte.
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    /// A bool.
    pub fn bool(&mut self) -> Result<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => bad(format!("{b} is not a bool")),
        }
    }

    /// A `u64`.
    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    /// A length or count of things of at least `unit` bytes each still to
    /// come (so a damaged length cannot ask for a huge allocation).
    pub fn len(&mut self, unit: usize) -> Result<usize> {
        let v = self.u64()?;
        let left = (self.bytes.len() - self.pos) as u64;
        if v.saturating_mul(unit as u64) > left {
            return bad(format!("a length of {v} with {left} bytes left"));
        }
        Ok(v as usize)
    }

    /// A count that bytes to come need not back (rows of a constant batch).
    pub fn count(&mut self) -> Result<usize> {
        let v = self.u64()?;
        if v > u32::MAX as u64 {
            return bad(format!("a count of {v}"));
        }
        Ok(v as usize)
    }

    /// An `i128`.
    pub fn i128(&mut self) -> Result<i128> {
        Ok(i128::from_le_bytes(self.take(16)?.try_into().expect("16 bytes")))
    }

    /// Bytes written by [`Writer::bytes`].
    pub fn bytes(&mut self) -> Result<Vec<u8>> {
        let n = self.len(1)?;
        Ok(self.take(n)?.to_vec())
    }

    /// `u32`s written by [`Writer::u32s`].
    pub fn u32s(&mut self) -> Result<Vec<u32>> {
        let n = self.len(4)?;
        let raw = self.take(n * 4)?;
        Ok(raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect())
    }

    /// Bits written by [`Writer::bits`].
    pub fn bits(&mut self) -> Result<BooleanBuffer> {
        let len = self.count()?;
        let bytes = self.bytes()?;
        if bytes.len() != len.div_ceil(8) {
            return bad(format!("{} bytes of bits for {len} bits", bytes.len()));
        }
        Ok(BooleanBuffer::new(Buffer::from_vec(bytes), 0, len))
    }

    /// A null buffer written by [`Writer::nulls`], of `len` rows.
    pub fn nulls(&mut self, len: usize) -> Result<Option<NullBuffer>> {
        if !self.bool()? {
            return Ok(None);
        }
        let bits = self.bits()?;
        if bits.len() != len {
            return bad(format!("{} null bits for {len} rows", bits.len()));
        }
        Ok(Some(NullBuffer::new(bits)))
    }

    /// Bit-packed values written by [`Writer::packed`].
    pub fn packed<T: PackWord>(&mut self) -> Result<BitPacked<T>> {
        let width = self.u8()?;
        let len = self.count()?;
        let size = std::mem::size_of::<T>();
        let n = self.len(size)?;
        let raw = self.take(n * size)?;
        let words = raw
            .chunks_exact(size)
            .map(|c| {
                let mut le = [0u8; 8];
                le[..size].copy_from_slice(c);
                T::narrow(u64::from_le_bytes(le))
            })
            .collect();
        BitPacked::from_parts(words, width, len).ok_or_else(|| {
            PersistError(format!(
                "{n} words of {} bits do not pack {len} values of {width} bits",
                8 * size
            ))
        })
    }

    /// An Arrow array written by [`Writer::arrow`].
    pub fn arrow(&mut self) -> Result<ArrayRef> {
        ipc_array(self.bytes()?)
    }

    /// A data type written by [`Writer::data_type`].
    pub fn data_type(&mut self) -> Result<DataType> {
        let n = self.len(1)?;
        let catalog = self.catalog;
        catalog.type_of(self.take(n)?)
    }

    /// An array of fixed-width `data_type` written by [`Writer::fixed_width`],
    /// validated as Arrow validates arrays it did not build.
    pub fn fixed_width(&mut self, data_type: DataType) -> Result<ArrayRef> {
        let Some(width) = data_type.primitive_width() else {
            return bad(format!("{data_type} is not fixed-width"));
        };
        let len = self.count()?;
        let n = self.len(1)?;
        // Copied into an Arrow-aligned buffer: a `Vec<u8>` is aligned for
        // bytes only (an empty one's pointer is 1), and Arrow refuses
        // values misaligned for their type.
        let values = Buffer::from(self.take(n)?);
        if values.len() != len * width {
            return bad(format!("{} bytes for {len} values of {width}", values.len()));
        }
        let nulls = self.nulls(len)?;
        let data = arrow::array::ArrayData::try_new(
            data_type,
            len,
            nulls.map(|n| n.into_inner().into_inner()),
            0,
            vec![values],
            vec![],
        )
        .map_err(|e| PersistError(format!("a fixed-width array: {e}")))?;
        Ok(arrow::array::make_array(data))
    }

    /// A nested liquid array.
    pub fn array(&mut self) -> Result<LiquidArrayRef> {
        match self.u8()? {
            tag::FOR => crate::integer::read_for(self),
            tag::PLAIN => crate::integer::read_plain(self),
            tag::ALP => crate::float::read_alp(self),
            tag::BITMAP => crate::boolean::read_bitmap(self),
            tag::DOMINANT_RUNS => crate::dominant::read_dominant(self),
            tag::BYTES => crate::bytes::read_bytes(self),
            tag::SHARED_DICT => crate::shared_dict::read_shared_dict(self, false),
            tag::SHARED_DICT_RUNS => crate::shared_dict::read_shared_dict(self, true),
            t => bad(format!("unknown array tag {t}")),
        }
    }

    /// The shared object a [`Writer::part`] wrote: the catalog's if it holds
    /// it, else read from the part's bytes by `read`.
    pub fn part<T: Any + Send + Sync>(&mut self, read: impl FnOnce(&mut Reader<'_>) -> Result<T>) -> Result<Arc<T>> {
        let id = self.u64()?;
        self.refs.insert(id);
        if let Some(held) = self.catalog.held(id) {
            return held
                .downcast::<T>()
                .map_err(|_| PersistError(format!("part {id} is another kind of object")));
        }
        let Some(bytes) = (self.load)(id) else {
            return bad(format!("part {id} is missing"));
        };
        let mut sub = Reader {
            bytes: &bytes,
            pos: 0,
            catalog: self.catalog,
            load: self.load,
            refs: BTreeSet::new(),
        };
        let object = Arc::new(read(&mut sub)?);
        sub.finish()?;
        let shared: Shared = object.clone();
        self.catalog.remember(&shared, id, sub.refs.iter().copied().collect());
        self.refs.extend(sub.refs);
        Ok(object)
    }
}

/// `array` as an Arrow IPC stream of one batch of one nullable column.
fn ipc_bytes(array: &ArrayRef) -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![Field::new("v", array.data_type().clone(), true)]));
    let mut ipc = Vec::new();
    {
        let mut stream =
            StreamWriter::try_new(&mut ipc, &schema).expect("invariant: IPC writes any type the cache holds");
        let batch = RecordBatch::try_new(schema.clone(), vec![array.clone()])
            .expect("invariant: one nullable column of the array's type");
        stream.write(&batch).expect("invariant: writing to memory");
        stream.finish().expect("invariant: writing to memory");
    }
    ipc
}

/// The array [`ipc_bytes`] wrote.
fn ipc_array(ipc: Vec<u8>) -> Result<ArrayRef> {
    let failed = |e: arrow::error::ArrowError| PersistError(format!("an Arrow array: {e}"));
    let mut stream = StreamReader::try_new(Cursor::new(ipc), None).map_err(failed)?;
    let Some(batch) = stream.next().transpose().map_err(failed)? else {
        return bad("an Arrow stream without its batch");
    };
    if batch.num_columns() != 1 {
        return bad(format!("an Arrow batch of {} columns", batch.num_columns()));
    }
    Ok(batch.column(0).clone())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow::array::{Float64Array, Int64Array, StringArray};

    use super::*;
    use crate::ColumnEncoder;
    use crate::bytes::Compaction;

    /// Batches of several forms, two per column (so parts are shared).
    fn columns() -> Vec<Vec<LiquidArrayRef>> {
        let urls = |from: usize| -> ArrayRef {
            Arc::new(StringArray::from_iter((from..from + 3000).map(|i| {
                (i % 11 != 0).then(|| format!("https://example.com/page/{}/{}", i % 97, "q".repeat(i % 7)))
            })))
        };
        let ints = |from: i64| -> ArrayRef {
            Arc::new(Int64Array::from_iter_values(
                (from..from + 3000).map(|i| (i % 301) * 1_000_000_007),
            ))
        };
        // Runs of 40 equal values: the shared dictionary keeps its keys as runs.
        let clustered = |from: i64| -> ArrayRef {
            Arc::new(Int64Array::from_iter(
                (from..from + 3000).map(|i| (i % 9 != 0).then_some((i / 40 % 301) * 1_000_000_007)),
            ))
        };
        let prices = |from: usize| -> ArrayRef {
            Arc::new(Float64Array::from_iter(
                (from..from + 3000).map(|i| (i % 5 != 0).then_some(i as f64 * 0.25)),
            ))
        };
        let mut out = Vec::new();
        for (make, compaction) in [
            (&urls as &dyn Fn(usize) -> ArrayRef, Compaction::Never),
            (&urls, Compaction::Always),
            (&|f| ints(f as i64), Compaction::Never),
            (&|f| clustered(f as i64), Compaction::Never),
            (&prices, Compaction::Never),
        ] {
            let first = make(0);
            let mut encoder = ColumnEncoder::with_compaction(first.data_type(), compaction);
            out.push(
                [first, make(3000)]
                    .iter()
                    .map(|a| encoder.encode(a).expect("a liquid form"))
                    .collect(),
            );
        }
        out
    }

    #[test]
    fn truncated_padded_or_unknown_bytes_are_errors_not_panics() {
        for column in columns() {
            let catalog = PartCatalog::default();
            let mut parts = HashMap::new();
            for array in &column {
                let persisted = catalog.write(array);
                parts.extend(persisted.new_parts);
                let bytes = persisted.bytes;
                let fresh = || PartCatalog::default();
                let load = |id: PartId| parts.get(&id).cloned();
                assert_eq!(&fresh().read(&bytes, &load).unwrap().to_arrow(), &array.to_arrow());
                for cut in 0..bytes.len() {
                    assert!(
                        fresh().read(&bytes[..cut], &load).is_err(),
                        "{} cut at {cut}",
                        array.encoding()
                    );
                }
                let mut padded = bytes.clone();
                padded.push(0);
                assert!(fresh().read(&padded, &load).is_err());
                let mut unknown = bytes.clone();
                unknown[0] = 200;
                assert!(fresh().read(&unknown, &load).is_err());
                // Every part's bytes, cut short, fail the batch too.
                for (&id, part) in &parts {
                    let cut_part = |p: PartId| {
                        parts
                            .get(&p)
                            .map(|b| if p == id { b[..b.len() / 2].to_vec() } else { b.clone() })
                    };
                    let got = fresh().read(&bytes, &cut_part);
                    if persisted.refs.contains(&id) {
                        assert!(got.is_err(), "part {id} of {} bytes cut", part.len());
                    }
                }
            }
        }
    }

    #[test]
    fn a_missing_part_is_named_and_ids_continue_past_a_restart() {
        let column = columns().remove(0);
        let catalog = PartCatalog::default();
        let persisted = catalog.write(&column[0]);
        assert!(!persisted.new_parts.is_empty(), "an FSST batch shares its symbol table");
        let err = PartCatalog::default().read(&persisted.bytes, &|_| None).unwrap_err();
        assert!(err.to_string().contains("is missing"), "{err}");
        // The second batch shares the first's parts: none new, the same refs.
        let second = catalog.write(&column[1]);
        assert!(second.refs.is_superset(&persisted.refs));
        assert!(second.new_parts.iter().all(|(id, _)| !persisted.refs.contains(id)));
        // After a restart the caller starts past the ids it kept.
        let next = catalog.next_id();
        let restarted = PartCatalog::starting_at(next);
        let third = restarted.write(&column[1]);
        assert!(third.new_parts.iter().all(|(id, _)| *id >= next));
    }

    #[test]
    fn batches_read_back_share_their_column_s_parts() {
        let column = columns().remove(2);
        assert_eq!(column[1].encoding(), "shared-dict");
        assert_eq!(columns()[3][1].encoding(), "shared-dict-runs");
        let writer = PartCatalog::default();
        let mut parts = HashMap::new();
        let written: Vec<Persisted> = column.iter().map(|a| writer.write(a)).collect();
        for p in &written {
            parts.extend(p.new_parts.iter().cloned());
        }
        let reads = std::cell::Cell::new(0);
        let load = |id: PartId| {
            reads.set(reads.get() + 1);
            parts.get(&id).cloned()
        };
        let reader = PartCatalog::default();
        let back: Vec<LiquidArrayRef> = written.iter().map(|p| reader.read(&p.bytes, &load).unwrap()).collect();
        // Each part was read from its bytes once, though both batches use the first's segment.
        assert_eq!(reads.get(), parts.len());
        for (b, a) in back.iter().zip(&column) {
            assert_eq!(&b.to_arrow(), &a.to_arrow());
        }
        // Written again, a read-back batch is known by the ids it was read under.
        let again = reader.write(&back[1]);
        assert!(again.new_parts.is_empty());
        assert_eq!(again.refs, written[1].refs);
    }
}
