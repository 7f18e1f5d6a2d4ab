"""Bound reports for the tensor paths: how close they run to what the
hardware allows, measured on the same server and the same ranks.

    python -m silt.bench tensor --server grpc://127.0.0.1:50051 --ranks 2 --queries 3,5,12,14 --runs 3
    python -m silt.bench reader --server grpc://127.0.0.1:50051 --runs 3

**tensor** runs TPC-H queries (`silt.tpch`) on `--ranks` gloo ranks on this
machine. Per query, after one warm-up run, each of `--runs` runs measures:

- `achieved`: the query's wall time (barrier to barrier, slowest rank);
- `scanned bytes`: the Arrow bytes (`RecordBatch.nbytes`) of every scan the
  ranks made (`silt.distributed.SCANS`), summed over the ranks;
- `T_scan`: the wall time of a *bare* `pyarrow.flight` read of exactly those
  scans (same SQL, same ranks, concurrently, each rank its scans in order,
  batches received and dropped), so the scan bandwidth is
  `scanned bytes / T_scan` and `scanned bytes / scan bandwidth = T_scan`;
- `shuffled bytes`: the bytes the ranks sent to other ranks
  (`silt.distributed.EXCHANGED["bytes_remote"]`, summed over the ranks);
- `loopback bandwidth`: measured once per launch with `all_to_all_single` of
  `--loopback-mib` MiB per rank on the same gloo group (median of 5; bytes
  sent to other ranks summed over the ranks / wall time), and
  `T_shuffle = shuffled bytes / loopback bandwidth`;
- `T_min = max(T_scan, T_shuffle)` and `ratio = achieved / T_min` (the
  target is <= 1.3);
- `T_exch`: the seconds the slowest rank's consumer thread spent in
  exchanges (`silt.distributed.TIMINGS["exchange_s"]`: the collectives and
  the end-of-data `all_reduce`, waits for the other rank included);
- `scan wait`: the seconds the slowest rank's consumer waited for the next
  scanned chunk (scan time not hidden behind the consumer's work);
- **overlap** `= (T_scan + T_exch - achieved) / min(T_scan, T_exch)`, clamped
  to [0, 1]: the fraction of the shorter of scanning and exchanging that was
  hidden behind the other. 1 means the query took no longer than the longer
  of the two; 0 means it took at least their sum. Conversion, join and
  aggregate time on the consumer count against it (they are in `achieved`
  and in neither term), so it is a lower bound on the true overlap;
- `cpu_s`: CPU seconds the ranks (and with `--server-pid`, the server on
  this machine) used during the query, and `T_cpu_s = cpu_s / cores`: a
  third lower bound, not part of T_min, that shows when the machine's cores
  rather than scan or loopback bandwidth limit the query.

Every number is the median over the runs (each field's own median).

**reader** compares `silt.torch.TensorStream` with a bare `pyarrow.flight`
reader over the same query (default: lineitem's numeric columns), on the
same server: rows per second of each (alternating runs, after a warm-up of
each; medians), this process's CPU seconds for each, and the ratio (target
>= 0.8). Then, each in a fresh process, the peak RSS growth
(`VmHWM` in /proc/self/status after the stream minus before it, after a
warm-up stream) of a TensorStream with a slow consumer (`--delay` s per
batch, so the queue fills and the producer waits) over a small result
(`--small-filter`), the whole query and the query `UNION ALL`-ed
`--huge-copies` times (a result bigger than any table), next to `queue_depth x batch` bytes
(one batch = `batch_rows` rows of the tensors' bytes per row), to the peak of
Arrow's memory pool in that process (`max_memory()`: the Arrow buffers alive
at once, received and converted, without the allocator's and gRPC's slack)
and to a `read_all` of the same result (which grows with the result); medians
of `--rss-runs` processes each.

`--json PATH` writes everything measured (each run and the medians).
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

import pyarrow as pa
import pyarrow.flight as flight

from . import _proto

# -- bare Flight reads ------------------------------------------------------


def _bare_read(client: flight.FlightClient, sql: str, token: Optional[str]) -> Dict[str, int]:
    """One DoGet of `sql`, every batch received and dropped: rows and Arrow bytes."""
    headers = _proto.call_headers(token)
    reader = client.do_get(flight.Ticket(_proto.statement_ticket(sql)), flight.FlightCallOptions(headers=headers))
    rows = nbytes = 0
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        rows += chunk.data.num_rows
        nbytes += chunk.data.nbytes
    return {"rows": rows, "bytes": nbytes}


def _median(values):
    return statistics.median(values) if values else float("nan")


def _medians(runs: List[Dict[str, float]]) -> Dict[str, float]:
    return {k: _median([r[k] for r in runs]) for k in runs[0]}


# -- tensor: the TPC-H queries on ranks ---------------------------------------


def _loopback(mib: float, reps: int = 5) -> Dict[str, float]:
    """gloo `all_to_all_single` of `mib` MiB per rank (equal splits):
    bytes sent to other ranks (all ranks) per second, median of `reps`."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()
    n = max(world, int(mib * 2**20) // 8 // world * world)
    send = torch.arange(n, dtype=torch.int64)
    recv = torch.empty_like(send)
    remote_bytes = n * 8 * (world - 1)  # each rank keeps 1/world of its n values
    dist.all_to_all_single(recv, send)  # warm-up (connections)
    seconds = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_to_all_single(recv, send)
        seconds.append(_max_all(time.perf_counter() - t0))
    s = _median(seconds)
    return {"bytes": remote_bytes, "seconds": s, "bandwidth": remote_bytes / s if s > 0 else float("inf")}


def _max_all(x: float) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _sum_all_f(x: float) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t.item())


def _sum_all(x: int) -> int:
    import torch
    import torch.distributed as dist

    t = torch.tensor([x], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return int(t.item())


def _proc_cpu(pid: Optional[int]) -> float:
    """CPU seconds (user + system) of process `pid` so far, from /proc (0 if unreadable)."""
    if not pid:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _tensor_rank(url: str, queries: List[int], runs: int, batch_rows: int, token: Optional[str],
                 loopback_mib: float, server_pid: Optional[int] = None):
    """On every rank: the loopback bandwidth, then per query a warm-up run and
    `runs` measured runs (query, then the bare replay of its scans)."""
    import torch.distributed as dist

    from . import distributed as d
    from . import tpch

    loop = _loopback(loopback_mib)
    out = {"loopback": loop, "queries": {}}
    for q in queries:
        tpch.QUERIES[q](url, batch_rows, token)  # warm-up: the server's caches, plans, connections
        samples = []
        for _ in range(runs):
            d.reset_stats()
            dist.barrier()
            server0 = _proc_cpu(server_pid)
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            tpch.QUERIES[q](url, batch_rows, token)
            elapsed = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            achieved = _max_all(elapsed)
            server_cpu = _proc_cpu(server_pid) - server0   # after the barrier: both ranks are done
            ranks_cpu = _sum_all_f(cpu)
            scans = [dict(s) for s in d.SCANS]
            exch_s, wait_s = _max_all(d.TIMINGS["exchange_s"]), _max_all(d.TIMINGS["scan_wait_s"])
            shuffled = _sum_all(d.EXCHANGED["bytes_remote"])
            scanned = _sum_all(sum(int(s["bytes"]) for s in scans))
            scanned_rows = _sum_all(sum(int(s["rows"]) for s in scans))
            # The bare replay: the same scans, same ranks, concurrently.
            client = flight.FlightClient(url)
            try:
                dist.barrier()
                t0 = time.perf_counter()
                reads = [_bare_read(client, str(s["sql"]), token) for s in scans]
                t_scan = _max_all(time.perf_counter() - t0)
            finally:
                client.close()
            replayed = _sum_all(sum(r["bytes"] for r in reads))
            replayed_rows = _sum_all(sum(r["rows"] for r in reads))
            t_shuffle = shuffled / loop["bandwidth"]
            t_min = max(t_scan, t_shuffle)
            shorter = min(t_scan, exch_s)
            overlap = (min(1.0, max(0.0, (t_scan + exch_s - achieved) / shorter)) if shorter > 0 else 0.0)
            samples.append({
                "achieved_s": achieved, "scanned_bytes": scanned, "scanned_rows": scanned_rows,
                "replayed_bytes": replayed, "replayed_rows": replayed_rows, "t_scan_s": t_scan,
                "scan_bandwidth": scanned / t_scan if t_scan > 0 else float("inf"),
                "shuffled_bytes": shuffled, "t_shuffle_s": t_shuffle, "t_min_s": t_min,
                "ratio": achieved / t_min if t_min > 0 else float("inf"), "t_exch_s": exch_s,
                "scan_wait_s": wait_s, "overlap": overlap, "scans": len(scans),
                "ranks_cpu_s": ranks_cpu, "server_cpu_s": server_cpu,
                "t_cpu_s": (ranks_cpu + server_cpu) / (os.cpu_count() or 1),
            })
        out["queries"][q] = {"runs": samples, "median": _medians(samples)}
    return out


def _mb(x: float) -> str:
    return f"{x / 1e6:.1f}"


def tensor_report(server: str, ranks: int = 2, queries=(3, 5, 12, 14), runs: int = 3, batch_rows: int = 65536,
                  token: Optional[str] = None, loopback_mib: float = 64.0, target: float = 1.3,
                  timeout: float = 3600.0, server_pid: Optional[int] = None, out=sys.stdout) -> Dict[str, object]:
    from . import distributed as d

    result = d.run_local(_tensor_rank, (server, list(queries), runs, batch_rows, token, loopback_mib, server_pid),
                         world=ranks, timeout=timeout)
    loop = result["loopback"]
    print(f"silt.bench tensor: {server}, {ranks} gloo ranks, batch_rows={batch_rows}, medians of {runs} run(s)",
          file=out)
    print(f"loopback all_to_all ({loopback_mib:g} MiB/rank): {_mb(loop['bandwidth'])} MB/s", file=out)
    head = (f"{'query':>5} {'achieved_s':>10} {'T_min_s':>8} {'bound':>7} {'ratio':>6} {'met':>4} "
            f"{'scan_MB':>8} {'scan_MB/s':>9} {'T_scan_s':>8} {'shuf_MB':>8} {'T_shuf_s':>8} "
            f"{'T_exch_s':>8} {'wait_s':>7} {'overlap':>7} {'cpu_s':>6} {'T_cpu_s':>7}")
    print(head, file=out)
    for q in queries:
        m = result["queries"][q]["median"]
        bound = "scan" if m["t_scan_s"] >= m["t_shuffle_s"] else "shuffle"
        met = "yes" if m["ratio"] <= target else "no"
        m["met"] = met == "yes"
        print(f"{'Q' + str(q):>5} {m['achieved_s']:>10.3f} {m['t_min_s']:>8.3f} {bound:>7} {m['ratio']:>6.2f} "
              f"{met:>4} {_mb(m['scanned_bytes']):>8} {_mb(m['scan_bandwidth']):>9} {m['t_scan_s']:>8.3f} "
              f"{_mb(m['shuffled_bytes']):>8} {m['t_shuffle_s']:>8.3f} {m['t_exch_s']:>8.3f} "
              f"{m['scan_wait_s']:>7.3f} {m['overlap']:>7.2f} {m['ranks_cpu_s'] + m['server_cpu_s']:>6.2f} "
              f"{m['t_cpu_s']:>7.3f}", file=out)
    print(f"cpu_s: CPU seconds of the ranks{' and the server' if server_pid else ''} during the query; "
          f"T_cpu_s = cpu_s / {os.cpu_count()} cores (not part of T_min)", file=out)
    return {"mode": "tensor", "server": server, "ranks": ranks, "batch_rows": batch_rows, "runs": runs,
            "target_ratio": target, **result}


# -- reader: TensorStream vs bare Flight --------------------------------------

LINEITEM_NUMERIC = ["l_orderkey", "l_partkey", "l_suppkey", "l_linenumber", "l_quantity", "l_extendedprice",
                    "l_discount", "l_tax", "l_shipdate", "l_commitdate", "l_receiptdate"]


def _vm(field: str) -> int:
    """A /proc/self/status field in bytes (VmHWM, VmRSS); falls back to
    getrusage's max RSS where /proc is missing."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_hwm() -> bool:
    """Resets VmHWM to the current RSS (Linux: write 5 to clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _tensor_read(server: str, sql: str, batch_rows: int, queue_depth: int, decimals: str, token,
                 delay: float = 0.0) -> Dict[str, float]:
    from .client import Query
    from .torch import TensorStream

    rows = 0
    tensor_bytes = 0
    max_outstanding = 0
    with TensorStream(Query(server, sql, token), batch_rows=batch_rows, queue_depth=queue_depth,
                      decimals=decimals) as stream:
        for batch in stream:
            n = len(next(iter(batch.values())))
            rows += n
            if not tensor_bytes and n:
                tensor_bytes = sum(t.element_size() for t in batch.values() if hasattr(t, "element_size"))
            if delay:
                time.sleep(delay)
        max_outstanding = stream.stats.max_outstanding
        received = stream.stats.received_bytes
    return {"rows": rows, "bytes": received, "row_bytes": tensor_bytes, "max_outstanding": max_outstanding}


def _rss_child(args) -> None:
    """In a fresh process: peak RSS growth of one read (printed as JSON)."""
    from . import torch as _  # noqa: F401 - imports torch before the baseline

    sql = args.sql
    warm = f"SELECT * FROM ({sql}) AS w LIMIT {args.batch_rows * 2}"
    client = flight.FlightClient(args.server)
    if args.how == "tensor":
        _tensor_read(args.server, warm, args.batch_rows, args.queue_depth, args.decimals, args.token)
    else:
        _bare_read(client, warm, args.token)
    reset = _reset_hwm()
    base_rss, base_hwm = _vm("VmRSS"), _vm("VmHWM")
    if args.how == "tensor":
        info = _tensor_read(args.server, sql, args.batch_rows, args.queue_depth, args.decimals, args.token,
                            args.delay)
    else:
        headers = _proto.call_headers(args.token)
        table = client.do_get(flight.Ticket(_proto.statement_ticket(sql)),
                              flight.FlightCallOptions(headers=headers)).read_all()
        info = {"rows": table.num_rows, "bytes": table.nbytes, "row_bytes": 0, "max_outstanding": 0}
    peak = _vm("VmHWM")
    info.update({"growth": peak - (base_rss if reset else base_hwm), "base_rss": base_rss, "peak_hwm": peak,
                 "hwm_reset": reset, "arrow_pool_peak": pa.default_memory_pool().max_memory()})
    print(json.dumps(info))


def _rss(server, sql, how, batch_rows, queue_depth, decimals, token, delay) -> Dict[str, float]:
    cmd = [sys.executable, "-m", "silt.bench", "_rss", "--server", server, "--sql", sql, "--how", how,
           "--batch-rows", str(batch_rows), "--queue-depth", str(queue_depth), "--decimals", decimals,
           "--delay", str(delay)]
    if token:
        cmd += ["--token", token]
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"RSS measurement failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def reader_report(server: str, table: str = "lineitem", columns=None, small_filter: str = "l_orderkey <= 600000",
                  runs: int = 3, batch_rows: int = 65536, queue_depth: int = 4, decimals: str = "float64",
                  delay: float = 0.02, token: Optional[str] = None, target: float = 0.8, huge_copies: int = 3,
                  rss_runs: int = 3, out=sys.stdout) -> Dict[str, object]:
    from .client import quote_ident

    columns = list(columns or LINEITEM_NUMERIC)
    sql = f"SELECT {', '.join(quote_ident(c) for c in columns)} FROM {quote_ident(table)}"
    small_sql = f"{sql} WHERE {small_filter}"
    client = flight.FlightClient(server)
    _bare_read(client, sql, token)  # warm-up: the server's cache
    _tensor_read(server, sql, batch_rows, queue_depth, decimals, token)  # and the first stream's start-up
    samples = []
    for _ in range(runs):
        c0, t0 = time.process_time(), time.perf_counter()
        bare = _bare_read(client, sql, token)
        t_bare, cpu_bare = time.perf_counter() - t0, time.process_time() - c0
        c0, t0 = time.process_time(), time.perf_counter()
        tens = _tensor_read(server, sql, batch_rows, queue_depth, decimals, token)
        t_tensor, cpu_tensor = time.perf_counter() - t0, time.process_time() - c0
        if bare["rows"] != tens["rows"]:
            raise RuntimeError(f"bare read {bare['rows']} rows, TensorStream {tens['rows']}")
        samples.append({"rows": bare["rows"], "bytes": bare["bytes"], "bare_s": t_bare, "tensor_s": t_tensor,
                        "bare_rows_per_s": bare["rows"] / t_bare, "tensor_rows_per_s": tens["rows"] / t_tensor,
                        "ratio": t_bare / t_tensor, "bare_cpu_s": cpu_bare, "tensor_cpu_s": cpu_tensor})
    client.close()
    med = _medians(samples)
    print(f"silt.bench reader: {server}, {sql}", file=out)
    print(f"batch_rows={batch_rows}, queue_depth={queue_depth}, decimals={decimals}, medians of {runs} run(s)",
          file=out)
    print(f"{'reader':>12} {'seconds':>8} {'Mrows/s':>8} {'MB/s':>8} {'client_cpu_s':>12}", file=out)
    print(f"{'bare flight':>12} {med['bare_s']:>8.3f} {med['bare_rows_per_s'] / 1e6:>8.2f} "
          f"{_mb(med['bytes'] / med['bare_s']):>8} {med['bare_cpu_s']:>12.3f}", file=out)
    print(f"{'TensorStream':>12} {med['tensor_s']:>8.3f} {med['tensor_rows_per_s'] / 1e6:>8.2f} "
          f"{_mb(med['bytes'] / med['tensor_s']):>8} {med['tensor_cpu_s']:>12.3f}", file=out)
    met = med["ratio"] >= target
    ratios = sorted(r["ratio"] for r in samples)
    print(f"throughput ratio (TensorStream / bare): {med['ratio']:.2f} (target >= {target}: "
          f"{'met' if met else 'missed'}; runs from {ratios[0]:.2f} to {ratios[-1]:.2f})", file=out)
    sizes = [("small", small_sql), ("large", sql)]
    if huge_copies > 1:
        sizes.append((f"large_x{huge_copies}", " UNION ALL ".join([sql] * huge_copies)))
    rss, rss_all = {}, {}
    for size, q in sizes:
        for how in ("tensor", "read_all"):
            key = f"{size}/{how}"
            rss_all[key] = [_rss(server, q, how, batch_rows, queue_depth, decimals, token,
                                  delay if how == "tensor" else 0.0) for _ in range(rss_runs)]
            rss[key] = dict(rss_all[key][0], **{k: _median([r[k] for r in rss_all[key]])
                                                 for k in ("growth", "arrow_pool_peak", "max_outstanding")})
    row_bytes = rss["large/tensor"]["row_bytes"] or rss["small/tensor"]["row_bytes"]
    batch_bytes = row_bytes * batch_rows
    bound = queue_depth * batch_bytes
    print(f"peak RSS growth (VmHWM, a fresh process each, medians of {rss_runs}; consumer sleeps {delay} s per batch; "
          f"one batch = {batch_rows} rows x {row_bytes} B = {_mb(batch_bytes)} MB; queue_depth x batch = "
          f"{_mb(bound)} MB)", file=out)
    print(f"{'result':>8} {'rows':>10} {'arrow_MB':>9} {'TensorStream_MB':>15} {'in_batches':>10} "
          f"{'arrow_pool_MB':>13} {'read_all_MB':>11}", file=out)
    for size, _ in sizes:
        t, a = rss[f"{size}/tensor"], rss[f"{size}/read_all"]
        print(f"{size:>8} {t['rows']:>10} {_mb(a['bytes']):>9} {_mb(t['growth']):>15} "
              f"{t['growth'] / batch_bytes if batch_bytes else float('nan'):>10.1f} "
              f"{_mb(t['arrow_pool_peak']):>13} {_mb(a['growth']):>11}", file=out)
    return {"mode": "reader", "server": server, "sql": sql, "small_sql": small_sql, "batch_rows": batch_rows,
            "queue_depth": queue_depth, "decimals": decimals, "runs": samples, "median": med,
            "target_ratio": target, "met": met, "rss": rss, "rss_runs": rss_all, "batch_bytes": batch_bytes,
            "queue_bound_bytes": bound}


# -- command line ---------------------------------------------------------------


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m silt.bench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("tensor", help="TPC-H queries on gloo ranks vs T_min")
    r = sub.add_parser("reader", help="TensorStream vs a bare pyarrow.flight reader; peak RSS")
    for p in (t, r):
        p.add_argument("--server", required=True)
        p.add_argument("--token")
        p.add_argument("--runs", type=int, default=3)
        p.add_argument("--batch-rows", type=int, default=65536)
        p.add_argument("--json", help="write the measurements to this file")
    t.add_argument("--ranks", type=int, default=2)
    t.add_argument("--queries", default="3,5,12,14")
    t.add_argument("--loopback-mib", type=float, default=64.0)
    t.add_argument("--timeout", type=float, default=3600.0)
    t.add_argument("--server-pid", type=int, help="the server's process id (same machine): adds its CPU seconds")
    r.add_argument("--table", default="lineitem")
    r.add_argument("--columns", help="comma-separated (default: lineitem's numeric columns)")
    r.add_argument("--small-filter", default="l_orderkey <= 600000",
                   help="SQL filter of the small result of the RSS measurement")
    r.add_argument("--queue-depth", type=int, default=4)
    r.add_argument("--decimals", default="float64", choices=["float64", "unscaled"])
    r.add_argument("--delay", type=float, default=0.02, help="seconds the slow consumer sleeps per batch")
    r.add_argument("--rss-runs", type=int, default=3, help="processes per RSS measurement (medians)")
    r.add_argument("--huge-copies", type=int, default=3,
                   help="the RSS measurement's biggest result: the query UNION ALL-ed this many times (1: none)")
    c = sub.add_parser("_rss")  # internal: one RSS measurement in a fresh process
    for name in ("--server", "--sql", "--how", "--decimals"):
        c.add_argument(name, required=True)
    c.add_argument("--token")
    c.add_argument("--batch-rows", type=int, required=True)
    c.add_argument("--queue-depth", type=int, required=True)
    c.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    if args.mode == "_rss":
        _rss_child(args)
        return
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    if args.mode == "tensor":
        queries = [int(q) for q in args.queries.split(",") if q]
        report = tensor_report(args.server, args.ranks, queries, args.runs, args.batch_rows, args.token,
                               args.loopback_mib, timeout=args.timeout, server_pid=args.server_pid)
    else:
        columns = args.columns.split(",") if args.columns else None
        report = reader_report(args.server, args.table, columns, args.small_filter, args.runs, args.batch_rows,
                               args.queue_depth, args.decimals, args.delay, args.token,
                               huge_copies=args.huge_copies, rss_runs=args.rss_runs)
    report.update({"started": started, "argv": sys.argv if argv is None else ["python", "-m", "silt.bench", *argv],
                   "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                               "python": platform.python_version(), "pyarrow": pa.__version__}})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)


if __name__ == "__main__":
    main()
