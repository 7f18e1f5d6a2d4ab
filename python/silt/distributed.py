"""Distributed relational operators on `torch.distributed` over Silt scans.

Each rank scans its share of a table from Silt (`silt.shard_predicate` ANDed
to the pushed-down filter), as tensors (`silt.torch.TensorStream`), and the
ranks exchange rows by a hash of the join key with `all_to_all_single`. The
probe side is processed chunk by chunk: while one chunk is exchanged and
joined, the stream's producer thread already receives and converts the next
(the scan/exchange overlap). Keys are compared exactly (composite keys are
mapped to dense ids with `torch.unique(dim=0)`, never hashed for equality).

Backends: gloo on CPU (tested); NCCL when the tensors live on GPUs (the
exchange only calls `all_to_all_single`/`all_reduce` on the tensors' device).
"""

import math
import os
import socket
import time
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from .client import Query, shard_predicate
from .torch import TensorStream

Columns = Dict[str, torch.Tensor]

# A multiplicative hash for partitioning (not the shard predicate's modulo,
# so rows really move between ranks): Knuth's constant, keys < 2^31 * 4.
_GOLDEN = 2654435761


def rank_world() -> Tuple[int, int]:
    return dist.get_rank(), dist.get_world_size()


def partition_of(key: torch.Tensor, world: int) -> torch.Tensor:
    """The rank each row goes to: `(key * 2654435761 mod 2^32) mod world`
    (exact integer arithmetic for keys below 3.4e9; larger keys wrap in
    int64, which still sends equal keys to the same rank)."""
    return ((key.to(torch.int64) * _GOLDEN) & 0xFFFFFFFF) % world


# What this process's exchanges sent: rows and bytes kept on this rank and sent
# to other ranks (for checks and the bound report).
EXCHANGED = {"rounds": 0, "rows_local": 0, "rows_remote": 0, "bytes_remote": 0}

# What this process's scans and exchanges cost, for the bound report
# (`silt.bench`): every `scan_chunks` call's SQL with the Arrow bytes and rows
# it received, the seconds the consumer spent in exchanges (every round's
# collectives, the last empty round included, and waits for the other ranks) and the seconds it waited for the next scanned chunk (the
# scan time not hidden behind the consumer's work).
SCANS: List[Dict[str, object]] = []
TIMINGS = {"exchange_s": 0.0, "scan_wait_s": 0.0}


def reset_stats() -> None:
    """Zeroes `EXCHANGED` and `TIMINGS` and empties `SCANS`."""
    for k in EXCHANGED:
        EXCHANGED[k] = 0
    for k in TIMINGS:
        TIMINGS[k] = 0.0
    SCANS.clear()


def exchange(columns: Columns, dest: torch.Tensor, world: int) -> Columns:
    """Sends row i of every column to rank `dest[i]` (one `all_to_all_single`
    for the counts, one for all the columns packed row-wise as bytes);
    returns the rows this rank got."""
    return _timed_exchange(columns, dest, world, True)[0]


def _timed_exchange(columns: Columns, dest: torch.Tensor, world: int, more: bool) -> Tuple[Columns, bool]:
    started = time.perf_counter()
    try:
        return _exchange(columns, dest, world, more)
    finally:
        TIMINGS["exchange_s"] += time.perf_counter() - started


def _row_bytes(column: torch.Tensor) -> int:
    return column.element_size() * math.prod(column.shape[1:])


def _exchange(columns: Columns, dest: torch.Tensor, world: int, more: bool) -> Tuple[Columns, bool]:
    """One round: a header all_to_all (to each rank: the rows it gets from
    this one, and whether this rank still had data), then every column's
    bytes packed into one `[rows, row bytes]` uint8 matrix, sent with one
    `all_to_all_single` and cut back into columns. Collectives cost a loopback
    round trip each, so a round costs two whatever the number of columns.
    Returns the rows received and whether any rank had data this round."""
    order = torch.argsort(dest, stable=True)
    send_counts = torch.bincount(dest, minlength=world).to(torch.int64)
    header = torch.stack([send_counts, torch.full((world,), int(more), dtype=torch.int64)], dim=1)
    received_header = torch.empty_like(header)
    dist.all_to_all_single(received_header, header)
    recv_counts = received_header[:, 0]
    if not bool(received_header[:, 1].any()):
        return {name: c.new_empty((0,) + tuple(c.shape[1:])) for name, c in columns.items()}, False
    rank = dist.get_rank()
    local = int(send_counts[rank])
    remote = int(send_counts.sum()) - local
    EXCHANGED["rounds"] += 1
    EXCHANGED["rows_local"] += local
    EXCHANGED["rows_remote"] += remote
    EXCHANGED["bytes_remote"] += remote * sum(_row_bytes(c) for c in columns.values())
    send_splits, recv_splits = send_counts.tolist(), recv_counts.tolist()
    n, m = dest.numel(), sum(recv_splits)
    widths = [_row_bytes(c) for c in columns.values()]
    if not columns or sum(widths) == 0:
        return {name: c.new_empty((m,) + tuple(c.shape[1:])) for name, c in columns.items()}, True
    packed = torch.cat([c[order].contiguous().view(torch.uint8).reshape(n, w)
                        for c, w in zip(columns.values(), widths)], dim=1)
    received = packed.new_empty((m, sum(widths)))
    dist.all_to_all_single(received, packed, recv_splits, send_splits)
    out, offset = {}, 0
    for (name, column), w in zip(columns.items(), widths):
        part = received[:, offset:offset + w].contiguous()
        out[name] = part.view(column.dtype).reshape((m,) + tuple(column.shape[1:]))
        offset += w
    return out, True


def empty_like_spec(spec: Dict[str, object]) -> Columns:
    return {name: torch.empty(0, dtype=dtype) for name, dtype in dtypes(spec).items()}


def recode(codes: torch.Tensor, dictionary, vocabulary: Sequence[str]) -> torch.Tensor:
    """Per-batch dictionary codes → positions in a fixed `vocabulary` (-1 when
    absent): one lookup per dictionary entry, a gather per row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    positions = pc.index_in(dictionary, value_set=pa.array(list(vocabulary), dictionary.type))
    mapping = torch.tensor(positions.fill_null(-1).to_pylist() + [-1], dtype=torch.int64)
    return mapping[codes.clamp(min=-1)]  # code -1 (null) picks the trailing -1


def scan_chunks(url: str, sql_select: str, table: str, where: Optional[str], shard_by: Optional[str],
                spec: Dict[str, object], batch_rows: int, token: Optional[str] = None,
                queue_depth: int = 4) -> Iterator[Columns]:
    """This rank's share of `SELECT <sql_select> FROM table WHERE <where>`,
    as chunks of tensors (decimals as exact unscaled int64, dates as int32
    days). The share is `shard_predicate(shard_by)` for (rank, world), on an
    integer column; `shard_by=None` reads everything (a broadcast of a small
    table by scanning it on every rank). `spec` maps each column to its dtype,
    or for a string column to a vocabulary (list of values: int64 positions)."""
    import pyarrow as pa

    rank, world = rank_world()
    predicate = shard_predicate(shard_by, pa.int64(), rank, world) if shard_by else None
    conditions = " AND ".join(f"({c})" for c in (where, predicate) if c) or "TRUE"
    query = Query(url, f"SELECT {sql_select} FROM {table} WHERE {conditions}", token)
    record: Dict[str, object] = {"sql": query.sql, "bytes": 0, "rows": 0}
    SCANS.append(record)
    with TensorStream(query, batch_rows=batch_rows, queue_depth=queue_depth, decimals="unscaled",
                      dictionaries="batch") as stream:
        while True:
            started = time.perf_counter()
            chunk = next(stream, None)
            TIMINGS["scan_wait_s"] += time.perf_counter() - started
            record["bytes"], record["rows"] = stream.stats.received_bytes, stream.stats.received_rows
            if chunk is None:
                break
            out = {}
            for name, kind in spec.items():
                if isinstance(kind, torch.dtype):
                    out[name] = chunk[name].to(kind)
                else:
                    out[name] = recode(chunk[name], chunk[f"{name}.dictionary"], kind)
            yield out


def dtypes(spec: Dict[str, object]) -> Dict[str, torch.dtype]:
    return {name: kind if isinstance(kind, torch.dtype) else torch.int64 for name, kind in spec.items()}


def shuffled(chunks: Iterator[Columns], key: str, spec: Dict[str, torch.dtype]) -> Iterator[Columns]:
    """Each chunk of `chunks`, hash-partitioned on `key` across the ranks:
    yields what this rank receives, chunk by chunk. Every rank takes part in
    every round (a rank out of data sends nothing) until all are done."""
    rank, world = rank_world()
    it = iter(chunks)
    while True:
        chunk = next(it, None)
        more = chunk is not None
        if chunk is None:
            chunk = empty_like_spec(spec)
        # The round's header says whether any rank still had data: the last
        # round is the one where none had (nothing else is sent in it).
        received, any_more = _timed_exchange(chunk, partition_of(chunk[key], world), world, more)
        if not any_more:
            return
        yield received


def concat(chunks: Iterator[Columns], spec: Dict[str, torch.dtype]) -> Columns:
    parts = list(chunks)
    if not parts:
        return empty_like_spec(spec)
    return {name: torch.cat([p[name] for p in parts]) for name in spec}


def dense_ids(*keys: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Exact ids of composite keys: rows with equal key tuples get equal ids
    (`torch.unique(dim=0)` on the stacked columns); returns (unique keys, ids)."""
    stacked = torch.stack([k.to(torch.int64) for k in keys], dim=1)
    unique, ids = torch.unique(stacked, dim=0, return_inverse=True)
    return unique, ids


def join_unique(build_key: torch.Tensor, probe_key: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Equi-join on a key unique on the build side (a primary key): returns
    (probe rows, their build rows) of the matching pairs."""
    if build_key.numel() == 0 or probe_key.numel() == 0:
        empty = torch.empty(0, dtype=torch.int64)
        return empty, empty
    sorted_keys, order = torch.sort(build_key)
    pos = torch.searchsorted(sorted_keys, probe_key).clamp_(max=sorted_keys.numel() - 1)
    hit = sorted_keys[pos] == probe_key
    probe_rows = torch.nonzero(hit, as_tuple=True)[0]
    return probe_rows, order[pos[probe_rows]]


def take(columns: Columns, rows: torch.Tensor) -> Columns:
    return {name: column[rows] for name, column in columns.items()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def intra_op_threads(world: int) -> int:
    """Torch's intra-op threads per rank when `world` ranks share this
    machine: the cores split between the ranks (at least 1), unless
    OMP_NUM_THREADS says otherwise. With every rank on all cores, OpenMP
    workers of one rank spin while the other rank, the producer threads and
    the server need the cores: on 2 cores and 2 ranks a 65536-row argsort took
    40 ms instead of 1 ms and TPC-H Q12 at SF1 4x longer."""
    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()
    return max(1, (os.cpu_count() or 1) // world)


def _worker(rank: int, world: int, port: int, fn, args, results) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(intra_op_threads(world))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        out = fn(*args)
        if rank == 0:
            results.put(("ok", out))
    except BaseException as err:  # noqa: BLE001 - reported to the launcher
        results.put(("error", f"rank {rank}: {type(err).__name__}: {err}"))
        raise
    finally:
        dist.destroy_process_group()


def run_local(fn, args: Sequence = (), world: int = 2, timeout: float = 600.0):
    """Runs `fn(*args)` on `world` gloo ranks on this machine (spawned
    processes on loopback) and returns rank 0's result."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, fn, tuple(args), results), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    import queue
    import time

    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                status, value = results.get(timeout=0.5)
                break
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"rank process exited with code {dead[0].exitcode} before answering")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no answer from the ranks within {timeout} s")
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    if status != "ok":
        raise RuntimeError(value)
    return value


def all_sum(t: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def gather_rows(columns: Columns, spec: Dict[str, torch.dtype]) -> Columns:
    """Every rank's rows, on every rank (sizes first, then padded all_gather)."""
    rank, world = rank_world()
    n = next(iter(columns.values())).numel() if columns else 0
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([n], dtype=torch.int64))
    sizes_ = [int(s.item()) for s in sizes]
    most = max(sizes_)
    out: Columns = {}
    for name, dtype in spec.items():
        padded = torch.zeros(most, dtype=dtype)
        padded[:n] = columns[name]
        parts = [torch.empty(most, dtype=dtype) for _ in range(world)]
        dist.all_gather(parts, padded)
        out[name] = torch.cat([p[:s] for p, s in zip(parts, sizes_)])
    return out


__all__: List[str] = ["reset_stats", "recode", "dtypes", "exchange", "partition_of", "scan_chunks", "shuffled", "concat", "dense_ids", "join_unique",
                      "take", "run_local", "all_sum", "gather_rows", "rank_world"]
