"""Streaming Silt scans into PyTorch tensors (needs torch and numpy).

    from silt.torch import TensorStream, SiltDataset
    scan = silt.connect(url).lazy_scan("lineitem", ["l_quantity", "l_returnflag"], "l_shipdate < '1995-01-01'")
    with TensorStream(scan, batch_rows=65536, device="cuda") as stream:
        for batch in stream:                 # dict: column name -> tensor of exactly batch_rows rows
            ...                              # (the last batch is shorter)
    stream.dictionaries["l_returnflag"]      # pyarrow array: code -> string

**Pipeline.** Two threads per stream: a receiver thread reads the Flight
record batches and hands them to the producer thread through a handoff
bounded by rows (it waits while `batch_rows` rows are pending); the producer
coalesces them into chunks of exactly `batch_rows` rows, converts each
column to a tensor (and pins it when copying to CUDA) and puts the chunk into
a bounded `queue.Queue(queue_depth)`. Receiving and converting overlap (both
spend their time in Arrow's C++ code, outside the GIL). The consumer takes
chunks and copies them to `device` with `non_blocking=True` (a no-op on
CPU). When the queue is full the producer blocks, the handoff fills, the
receiver blocks, so it stops reading from the server (gRPC flow control then
holds the server back): at most `queue_depth + 1` finished chunks exist
besides the one the consumer holds, plus the rest of the received batch being
cut into chunks, less than one chunk of received batches (plus one batch) in
the handoff and one received batch in the receiver's hand — at most
`(queue_depth + 3) x batch_rows + 3 x` (the server's batch) rows, whatever
the consumer's speed and the table's size (`stream.stats` counts it).

**Columns.**
- integers, floats, booleans: `numpy` → `torch.from_numpy`, zero-copy when a
  chunk lies within one received batch and has no nulls (the tensor then
  shares the received Arrow buffer);
- dates, times, timestamps, durations: their integer storage (days,
  units since the epoch) as int32/int64;
- decimals: float64 (`decimals="float64"`, default) or the exact unscaled
  int64 (`decimals="unscaled"`, value x 10^scale, precision <= 18);
- strings, binaries and dictionary-encoded columns: int64 codes. With
  `dictionaries="stream"` (default) codes are stable for the whole stream and
  `stream.dictionaries[col]` (grows as new values arrive; codes already
  handed out never change) maps code → value. With `dictionaries="batch"`
  each batch carries its own dictionary under the key `"<col>.dictionary"`
  (what `SiltDataset` uses: DataLoader workers cannot share a stream's).
  Building codes costs Python work per distinct value per chunk, none per row.
- **Nulls** are explicit: `nulls="error"` (default) raises `ValueError` on
  the first null, naming the column; `nulls="mask"` fills nulls with 0 (code
  -1 for dictionary columns) and adds a boolean tensor `"<col>.valid"` for
  every nullable column (so every batch has the same keys).
"""

import queue
import threading
import warnings
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Union

import pyarrow as pa
import pyarrow.compute as pc

try:
    import numpy as np
    import torch
    import torch.utils.data
except ImportError as err:  # pragma: no cover - depends on the install
    raise ImportError(f"silt.torch needs torch and numpy ({err}): pip install 'silt[torch]'") from err

from .client import Query, Scan, connect, read_batches

Source = Union[Scan, Query, pa.Table, pa.RecordBatchReader, Callable[[], Iterable[pa.RecordBatch]]]

_END = object()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


class _Stopped(Exception):
    pass


class StreamStats:
    """Counters of a stream, for tests and monitoring (read them any time)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.received_batches = 0     # Flight record batches taken from the server
        self.received_rows = 0
        self.received_bytes = 0       # Arrow bytes of the received batches (`RecordBatch.nbytes`)
        self.max_batch_rows = 0       # the largest batch received
        self.produced = 0             # chunks made by the producer
        self.consumed = 0             # chunks taken by the consumer
        self.max_outstanding = 0      # max over time of chunks made and not yet taken
        self.producer_waits = 0       # times the producer found the queue full
        self.queue_full = threading.Event()  # set the first time the producer waits

    def __repr__(self) -> str:
        return (f"StreamStats(received_batches={self.received_batches}, received_rows={self.received_rows}, "
                f"produced={self.produced}, consumed={self.consumed}, max_outstanding={self.max_outstanding}, "
                f"producer_waits={self.producer_waits})")


def _is_stringlike(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_string_view(t) or pa.types.is_binary_view(t))


def _is_coded(t: pa.DataType) -> bool:
    return pa.types.is_dictionary(t) or _is_stringlike(t)


def _from_numpy(values: np.ndarray) -> torch.Tensor:
    with warnings.catch_warnings():
        # Arrow buffers are read-only to numpy; the tensor shares them (zero
        # copy) and nothing else holds them once the chunk is handed out.
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(values)


class _Dictionary:
    """A stream-wide dictionary: value → code, codes never change."""

    def __init__(self, value_type: pa.DataType):
        self.value_type = value_type
        self.codes: Dict[object, int] = {}
        self.values: List[object] = []
        self.lock = threading.Lock()

    def remap(self, dictionary: pa.Array) -> np.ndarray:
        """The global code of each entry of a chunk's dictionary."""
        out = np.empty(len(dictionary), dtype=np.int64)
        with self.lock:
            for i, value in enumerate(dictionary.to_pylist()):
                code = self.codes.get(value)
                if code is None:
                    code = self.codes[value] = len(self.values)
                    self.values.append(value)
                out[i] = code
        return out

    def array(self) -> pa.Array:
        with self.lock:
            return pa.array(self.values, self.value_type)


class _Converter:
    """Arrow chunks → dicts of CPU tensors."""

    def __init__(self, nulls: str, dictionaries: str, decimals: str, pin: bool):
        if nulls not in ("error", "mask"):
            raise ValueError("nulls must be 'error' or 'mask'")
        if dictionaries not in ("stream", "batch"):
            raise ValueError("dictionaries must be 'stream' or 'batch'")
        if decimals not in ("float64", "unscaled"):
            raise ValueError("decimals must be 'float64' or 'unscaled'")
        self.nulls, self.dictionaries, self.decimals, self.pin = nulls, dictionaries, decimals, pin
        self.stream_dicts: Dict[str, _Dictionary] = {}
        self.lock = threading.Lock()

    def stream_dictionary(self, name: str, value_type: pa.DataType) -> _Dictionary:
        with self.lock:
            d = self.stream_dicts.get(name)
            if d is None:
                d = self.stream_dicts[name] = _Dictionary(value_type)
            return d

    def convert(self, table: pa.Table) -> Dict[str, object]:
        out: Dict[str, object] = {}
        for field, column in zip(table.schema, table.columns):
            name = field.name
            array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
            if array.null_count and self.nulls == "error":
                raise ValueError(f"column {name!r} has nulls; pass nulls='mask' for a validity mask, "
                                 "or filter/COALESCE them in the scan")
            values, dictionary = self.values(name, array)
            tensor = _from_numpy(values)
            out[name] = tensor.pin_memory() if self.pin else tensor
            if self.nulls == "mask" and field.nullable:
                valid = (np.ones(len(array), dtype=np.bool_) if not array.null_count
                         else array.is_valid().to_numpy(zero_copy_only=False))
                mask = _from_numpy(valid)
                out[f"{name}.valid"] = mask.pin_memory() if self.pin else mask
            if dictionary is not None:
                out[f"{name}.dictionary"] = dictionary
        return out

    def values(self, name: str, array: pa.Array):
        """The column as a numpy array (nulls filled), and the batch's
        dictionary when `dictionaries="batch"`."""
        t = array.type
        if _is_coded(t):
            if not pa.types.is_dictionary(t):
                array = pc.dictionary_encode(array)
            dictionary = array.dictionary
            if pa.types.is_string_view(dictionary.type) or pa.types.is_binary_view(dictionary.type):
                # Plain string/binary: view types lack kernels users need (take, sort).
                dictionary = dictionary.cast(pa.string() if pa.types.is_string_view(dictionary.type)
                                             else pa.binary())
            indices = array.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            if self.dictionaries == "batch":
                return indices, dictionary
            mapping = self.stream_dictionary(name, dictionary.type).remap(dictionary)
            codes = np.where(indices >= 0, mapping[np.maximum(indices, 0)], -1) if len(mapping) else indices
            return codes, None
        if pa.types.is_decimal(t):
            if self.decimals == "float64":
                return pc.cast(array, pa.float64()).fill_null(0).to_numpy(zero_copy_only=False), None
            if not pa.types.is_decimal128(t) or t.precision > 18:
                raise TypeError(f"column {name!r}: decimals='unscaled' needs decimal128 of precision <= 18, "
                                f"got {t}")
            words = np.frombuffer(array.buffers()[1], dtype=np.int64).reshape(-1, 2)
            low = words[array.offset:array.offset + len(array), 0]   # two's complement: the low word
            if array.null_count:
                return np.where(array.is_valid().to_numpy(zero_copy_only=False), low, 0), None
            return np.ascontiguousarray(low), None
        if pa.types.is_date32(t) or pa.types.is_time32(t):
            array = array.view(pa.int32())
        elif (pa.types.is_date64(t) or pa.types.is_time64(t) or pa.types.is_timestamp(t)
              or pa.types.is_duration(t)):
            array = array.view(pa.int64())
        elif not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
            raise TypeError(f"column {name!r} of type {t} has no tensor form; cast it in SQL "
                            "(silt.Query) or leave it out of `columns`")
        if array.null_count:
            array = array.fill_null(False if pa.types.is_boolean(array.type) else 0)
        if pa.types.is_boolean(array.type):
            return array.to_numpy(zero_copy_only=False), None
        return array.to_numpy(zero_copy_only=True), None


class _Chunker:
    """Coalesces record batches into tables of exactly `rows` rows."""

    def __init__(self, rows: int):
        self.rows = rows
        self.pending: List[pa.RecordBatch] = []
        self.pending_rows = 0

    def push(self, batch: pa.RecordBatch) -> Iterator[pa.Table]:
        if batch.num_rows == 0:
            return
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        while self.pending_rows >= self.rows:
            table = pa.Table.from_batches(self.pending)
            rest = table.slice(self.rows)
            self.pending = rest.to_batches()
            self.pending_rows = rest.num_rows
            yield table.slice(0, self.rows)

    def finish(self) -> Iterator[pa.Table]:
        if self.pending_rows:
            table = pa.Table.from_batches(self.pending)
            self.pending, self.pending_rows = [], 0
            yield table


class _Shared:
    """What the producer thread and the stream share (the thread holds no
    reference to the stream, so an abandoned stream is collected and stops it)."""

    def __init__(self, queue_depth: int):
        self.queue: "queue.Queue" = queue.Queue(maxsize=queue_depth)
        self.stop = threading.Event()
        self.stats = StreamStats()
        self.cancel: Optional[Callable[[], None]] = None

    def put(self, item) -> None:
        while True:
            if self.stop.is_set():
                raise _Stopped()
            try:
                self.queue.put(item, timeout=0.05)
                return
            except queue.Full:
                stats = self.stats
                with stats.lock:
                    stats.producer_waits += 1
                stats.queue_full.set()


def _open_batches(source: Source, columns: Optional[Sequence[str]], shared: _Shared) -> Iterator[pa.RecordBatch]:
    """The source's record batches, opened in the producer thread; registers
    a cancel hook that unblocks a pending read from another thread."""
    if isinstance(source, (Scan, Query)):
        conn = connect(source.servers, source.token, tls_root_certs=source.tls_root_certs)
        reader = None
        try:
            reader = conn.sql_reader(source.to_sql() if isinstance(source, Scan) else source.sql)
            shared.cancel = reader.cancel
            if shared.stop.is_set():  # closed before the hook was there
                return
            yield from read_batches(reader)
        finally:
            shared.cancel = None
            if reader is not None:
                reader.cancel()
            conn.close()
    elif isinstance(source, pa.Table):
        yield from (source.select(list(columns)) if columns else source).to_batches()
    elif isinstance(source, pa.RecordBatchReader):
        yield from source
    elif callable(source):
        yield from source()
    else:
        raise TypeError(f"unsupported source {type(source).__name__}: a silt.Scan, silt.Query, pyarrow "
                        "Table or RecordBatchReader, or a callable returning record batches")


class _Handoff:
    """Received record batches on their way from the receiver thread to the
    converter thread, bounded by rows: `put` waits while `limit` rows or more
    are pending (so at most `limit - 1` rows plus one batch wait here)."""

    def __init__(self, limit: int, shared: _Shared):
        self.limit = limit
        self.shared = shared
        self.items: List[object] = []
        self.rows = 0
        self.closed = False   # the converter is gone: `put` raises _Stopped
        self.cond = threading.Condition()

    def put(self, item, rows: int = 0) -> None:
        with self.cond:
            while self.rows >= self.limit and not self.closed and not self.shared.stop.is_set():
                self.cond.wait(0.05)
            if self.closed or self.shared.stop.is_set():
                raise _Stopped()
            self.items.append((item, rows))
            self.rows += rows
            self.cond.notify_all()

    def get(self):
        with self.cond:
            while not self.items:
                if self.shared.stop.is_set():
                    raise _Stopped()
                self.cond.wait(0.05)
            item, rows = self.items.pop(0)
            self.rows -= rows
            self.cond.notify_all()
            return item

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.items.clear()
            self.rows = 0
            self.cond.notify_all()


def _receive(source: Source, columns, shared: _Shared, handoff: _Handoff) -> None:
    """The receiver thread: opens the source, reads its record batches and
    hands them to the converter thread (which owns this thread's end)."""
    stats = shared.stats
    batches = None
    try:
        batches = _open_batches(source, columns, shared)
        for batch in batches:
            with stats.lock:
                stats.received_batches += 1
                stats.received_rows += batch.num_rows
                stats.received_bytes += batch.nbytes
                stats.max_batch_rows = max(stats.max_batch_rows, batch.num_rows)
            if shared.stop.is_set():
                return
            if columns is not None and not isinstance(source, (Scan, pa.Table)):
                batch = batch.select(list(columns))
            handoff.put(batch, batch.num_rows)
        handoff.put(_END)
    except _Stopped:
        pass
    except BaseException as err:  # noqa: BLE001 - every failure reaches the consumer
        try:
            handoff.put(_Failure(err))
        except _Stopped:
            pass
    finally:
        if batches is not None:
            batches.close()


def _produce(source: Source, columns, batch_rows: int, converter: _Converter, shared: _Shared) -> None:
    """The producer (converter) thread: starts the receiver thread, coalesces
    what it receives into chunks, converts them and queues them. Receiving
    (gRPC, Arrow IPC decoding) and converting run in two threads so they
    overlap: both release the GIL in Arrow's C++ code."""
    stats = shared.stats
    handoff = _Handoff(batch_rows, shared)
    receiver = threading.Thread(target=_receive, args=(source, columns, shared, handoff),
                                name="silt-tensor-receiver", daemon=True)
    receiver.start()
    try:
        chunker = _Chunker(batch_rows)

        def emit(table: pa.Table) -> None:
            item = converter.convert(table)
            with stats.lock:
                stats.produced += 1
                # Made and not yet taken: those queued, and this one. (Not
                # produced - consumed: the consumer counts a chunk just after
                # taking it, so that difference can briefly run one over.)
                stats.max_outstanding = max(stats.max_outstanding, shared.queue.qsize() + 1)
            shared.put(item)

        while True:
            batch = handoff.get()
            if batch is _END:
                break
            if isinstance(batch, _Failure):
                raise batch.error
            for table in chunker.push(batch):
                emit(table)
        for table in chunker.finish():
            emit(table)
        shared.put(_END)
    except _Stopped:
        pass
    except BaseException as err:  # noqa: BLE001 - every failure reaches the consumer
        if not shared.stop.is_set():
            try:
                shared.put(_Failure(err))
            except _Stopped:
                pass
    finally:
        handoff.close()
        if receiver.is_alive() and shared.cancel is not None:
            try:  # unblock a pending read: nobody takes its batches any more
                shared.cancel()
            except Exception:  # noqa: BLE001 - the stream may be finishing
                pass
        receiver.join()


class TensorStream:
    """Streams a Silt scan (or any Arrow source) as dicts of tensors of
    exactly `batch_rows` rows (the last batch shorter), read ahead by a
    receiver and a producer thread into a queue of at most `queue_depth`
    batches.

    `source`: a `silt.Scan` (`conn.lazy_scan(...)`; `columns` narrows its
    projection), a `silt.Query`, a pyarrow `Table` or `RecordBatchReader`,
    or a callable returning record batches. `device`: where the tensors go
    (`"cpu"`, `"cuda"`, `torch.device`). `pin_memory`: pin host tensors
    before the copy (default: when `device` is CUDA and CUDA is available).
    See the module docstring for columns, dictionaries and nulls.

    Iterate it once. Stop early with `close()` or a `with` block (dropping
    the stream also stops it): the producer cancels its Flight stream and its
    thread ends. A producer error (bad SQL, unknown table, a type with no
    tensor form) is raised in the consumer's loop.
    """

    def __init__(self, source: Source, batch_rows: int = 65536, device: Union[str, torch.device] = "cpu",
                 columns: Optional[Sequence[str]] = None, queue_depth: int = 4, nulls: str = "error",
                 dictionaries: str = "stream", decimals: str = "float64", pin_memory: Optional[bool] = None):
        if batch_rows < 1:
            raise ValueError("batch_rows must be at least 1")
        if queue_depth < 1:
            raise ValueError("queue_depth must be at least 1")
        self.device = torch.device(device)
        if pin_memory is None:
            pin_memory = self.device.type == "cuda" and torch.cuda.is_available()
        if columns is not None and isinstance(source, Scan):
            source = Scan(source.servers, source.table, tuple(columns), source.filter, source.token)
        self.batch_rows = batch_rows
        self.queue_depth = queue_depth
        self._converter = _Converter(nulls, dictionaries, decimals, pin_memory)
        self._shared = _Shared(queue_depth)
        self._done = False
        self._thread = threading.Thread(
            target=_produce, args=(source, columns, batch_rows, self._converter, self._shared),
            name="silt-tensor-producer", daemon=True)
        self._thread.start()

    @property
    def stats(self) -> StreamStats:
        return self._shared.stats

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    @property
    def dictionaries(self) -> Dict[str, pa.Array]:
        """Per coded column, the stream's dictionary so far: `dictionaries[c][code]`
        is the value (`dictionaries="stream"` only)."""
        with self._converter.lock:
            items = list(self._converter.stream_dicts.items())
        return {name: d.array() for name, d in items}

    def __iter__(self) -> "TensorStream":
        return self

    def __next__(self) -> Dict[str, object]:
        if self._done:
            raise StopIteration
        shared = self._shared
        while True:
            try:
                item = shared.queue.get(timeout=0.1)
                break
            except queue.Empty:
                if not self._thread.is_alive() and shared.queue.empty():
                    self._done = True
                    raise StopIteration from None
        if item is _END:
            self._done = True
            self._thread.join()
            raise StopIteration
        if isinstance(item, _Failure):
            self._done = True
            self._thread.join()
            raise item.error
        with shared.stats.lock:
            shared.stats.consumed += 1
        # Asynchronous host-to-device copies from pinned memory on CUDA; on CPU
        # the same call returns the tensor itself.
        return {k: (v.to(self.device, non_blocking=True) if isinstance(v, torch.Tensor) else v)
                for k, v in item.items()}

    def close(self) -> None:
        """Stops the producer (cancelling its Flight stream) and waits for its thread."""
        self._done = True
        shared = self._shared
        shared.stop.set()
        cancel = shared.cancel
        if cancel is not None:
            try:
                cancel()
            except Exception:  # noqa: BLE001 - the stream may be finishing
                pass
        while True:  # free the queued batches now
            try:
                shared.queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join()

    def __enter__(self) -> "TensorStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            if not self._done or self._thread.is_alive():
                self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _distributed() -> tuple:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class SiltDataset(torch.utils.data.IterableDataset):
    """A `torch.utils.data.IterableDataset` over a `silt.Scan`, sharded
    across DataLoader workers and distributed ranks.

    Each (rank, worker) reads shard `rank * num_workers + worker` of
    `world_size * num_workers`: the scan with `silt.shard_predicate(shard_by,
    ...)` ANDed to its filter, evaluated by the server (value mod n for
    integer columns, a hash of the value otherwise, NULL in shard 0). The
    shards partition the table, so the union of what all workers of all ranks
    yield is the scan, each row exactly once (while the table does not change
    during the epoch). `shard_by` defaults to the scan's first column; choose
    a key for balanced shards. `rank`/`world_size` default to
    `torch.distributed`'s when it is initialized, else 0/1.

    Yields dicts like `TensorStream` with `dictionaries="batch"` (per-batch
    dictionaries under `"<col>.dictionary"`: workers cannot share a stream's
    dictionary). Use `DataLoader(dataset, batch_size=None, num_workers=k,
    pin_memory=True, multiprocessing_context="spawn")`: batches are already
    made here, tensors stay on CPU in the workers and the DataLoader pins
    them. Workers must be spawned (or started by a forkserver), not forked: a
    process forked after its parent used gRPC (any Flight call) hangs in it
    (`silt.connect` raises a `SiltError` in such a process instead).
    """

    def __init__(self, scan: Scan, batch_rows: int = 65536, shard_by: Optional[str] = None,
                 queue_depth: int = 4, nulls: str = "error", decimals: str = "float64",
                 rank: Optional[int] = None, world_size: Optional[int] = None):
        super().__init__()
        if not isinstance(scan, Scan):
            raise TypeError("SiltDataset needs a silt.Scan (conn.lazy_scan(...))")
        self.scan = scan
        self.batch_rows = batch_rows
        self.shard_by = shard_by
        self.queue_depth = queue_depth
        self.nulls = nulls
        self.decimals = decimals
        self.rank = rank
        self.world_size = world_size

    def shard_of(self, rank: int, world_size: int, worker: int, num_workers: int) -> Scan:
        count = world_size * num_workers
        if count == 1:
            return self.scan
        by = self.shard_by
        schema = self.scan.table_schema()
        if by is None:
            by = self.scan.columns[0] if self.scan.columns else schema.names[0]
        return self.scan.shard(rank * num_workers + worker, count, by, schema.field(by).type)

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        rank, world_size = _distributed()
        rank = self.rank if self.rank is not None else rank
        world_size = self.world_size if self.world_size is not None else world_size
        scan = self.shard_of(rank, world_size, worker, num_workers)
        with TensorStream(scan, self.batch_rows, "cpu", queue_depth=self.queue_depth, nulls=self.nulls,
                          dictionaries="batch", decimals=self.decimals, pin_memory=False) as stream:
            yield from stream
