"""Lakehouse tables vs plain Parquet through a Silt server: TPC-H lineitem/orders.

Usage: bench_lakehouse_tpch.py --format iceberg|delta --silt BIN --tpch DIR
       --warehouse DIR --out DIR [--latency 20ms] [--mbps 200] [--runs 5]

Writes (once) a warehouse of `lineitem` and `orders` from the TPC-H Parquet
files in DIR/{lineitem,orders}/, then deletes 5% of each table's rows (every
20th row of each data file):
- `iceberg`: pyiceberg's SQL catalog (`db.lineitem`, ...; files of at most
  32 MB), deleted by position delete files (`iceberg_server_fixture.py`);
- `delta`: deltalake (files of about 4 MB, as pyiceberg writes them here),
  deleted by deletion vectors (`delta_server_fixture.py`).
Then, for each layout, starts `silt serve` over the throttled store
(`[store] latency`, `mbps`) and runs the TPC-H queries that read only
lineitem and orders (Q1, Q4, Q6, Q12): one cold run, then `--runs` warm runs.

- `plain`: the tables' data folders as plain Parquet tables, `immutable`
  (the same files, the deletes not applied: the baseline for latency);
- the format's own tables, `validation = always`.

Then, on the lakehouse server, a compaction rewrites about 10% of
lineitem's data (an overwrite of its first orderkeys) and the queries run
once more. Reports, per layout and query, the median warm time, and the
store requests and bytes (from the server's /metrics) of a warm pass, the
cold pass and the pass after compaction, as JSON in OUT/results.json and a
table on stdout.
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))

QUERIES = ["q01", "q04", "q06", "q12"]


def write_warehouse(warehouse, tpch):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from iceberg_server_fixture import commit_position_deletes
    from pyiceberg.catalog.sql import SqlCatalog

    os.makedirs(warehouse, exist_ok=True)
    catalog = SqlCatalog("bench", uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}")
    catalog.create_namespace("db")
    for name in ["lineitem", "orders"]:
        data = pq.read_table(os.path.join(tpch, name))
        # Plain strings: pyiceberg's own reads (the compaction) cannot take
        # rows of string views.
        data = data.cast(pa.schema([
            f.with_type(pa.string()) if f.type == pa.string_view() else f for f in data.schema
        ]))
        properties = {"write.target-file-size-bytes": str(32 << 20)}
        table = catalog.create_table(f"db.{name}", schema=data.schema, properties=properties)
        table.append(data)
        commit_position_deletes(catalog.load_table(f"db.{name}"), 20)
    return catalog


def write_delta(warehouse, tpch):
    import pyarrow.parquet as pq
    from delta_server_fixture import commit_deletion_vectors
    from deltalake import DeltaTable, write_deltalake

    for name in ["lineitem", "orders"]:
        path = os.path.join(warehouse, name)
        write_deltalake(path, pq.read_table(os.path.join(tpch, name)), target_file_size=4 << 20)
        DeltaTable(path).alter.set_table_properties({"delta.enableDeletionVectors": "true"})
        commit_deletion_vectors(path, every=20)


def compact_delta(warehouse):
    """Rewrites about a tenth of lineitem: the rows of its lowest orderkeys
    (read as DuckDB's delta extension sees them, deleted rows gone)."""
    from delta_server_fixture import duckdb_connection
    from deltalake import write_deltalake

    path = os.path.join(warehouse, "lineitem")
    con = duckdb_connection()
    cut = con.execute(f"SELECT quantile_disc(l_orderkey, 0.1) FROM delta_scan('{path}')").fetchone()[0]
    rows = con.execute(f"SELECT * FROM delta_scan('{path}') WHERE l_orderkey <= {cut}").fetch_arrow_table()
    write_deltalake(path, rows, mode="overwrite", predicate=f"l_orderkey <= {cut}", target_file_size=4 << 20)


def compact(catalog):
    """Rewrites about a tenth of lineitem: the rows of its lowest orderkeys."""
    from pyiceberg.expressions import LessThanOrEqual

    table = catalog.load_table("db.lineitem")
    keys = table.scan(selected_fields=("l_orderkey",)).to_arrow()["l_orderkey"].to_pylist()
    keys.sort()
    cut = keys[len(keys) // 10]
    rows = table.scan(row_filter=LessThanOrEqual("l_orderkey", cut)).to_arrow()
    table.overwrite(rows, overwrite_filter=LessThanOrEqual("l_orderkey", cut))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(admin):
    text = urllib.request.urlopen(f"http://{admin}/metrics").read().decode()
    out = {}
    for name in ["get_requests", "head_requests", "list_requests", "get_bytes"]:
        series = f"silt_object_store_{name}_total"
        out[name] = sum(float(m.group(1)) for m in re.finditer(rf"^{series}(?:{{[^}}]*}})? (\S+)$", text, re.M))
    out["requests"] = out["get_requests"] + out["head_requests"] + out["list_requests"]
    return out


def delta(after, before):
    return {k: after[k] - before[k] for k in after}


class Server:
    def __init__(self, silt, config, out, name):
        self.flight = free_port()
        self.admin = free_port()
        path = os.path.join(out, f"{name}.toml")
        with open(path, "w") as f:
            f.write(f'listen = "127.0.0.1:{self.flight}"\nadmin = "127.0.0.1:{self.admin}"\n')
            f.write(f'cache_dir = "{os.path.join(out, name + "-cache")}"\n')
            f.write(config)
        self.log = open(os.path.join(out, f"{name}.log"), "w")
        self.proc = subprocess.Popen([silt, "serve", "--config", path], stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/health", timeout=1)
                break
            except Exception:
                time.sleep(0.1)
        import silt

        self.conn = silt.connect(f"grpc://127.0.0.1:{self.flight}")

    def run(self, sql):
        started = time.perf_counter()
        rows = self.conn.sql(sql).num_rows
        return time.perf_counter() - started, rows

    def metrics(self):
        return metrics(f"127.0.0.1:{self.admin}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def passes(server, sqls, runs):
    """Cold pass, then `runs` warm passes: per query the cold time, the warm
    times, and the store traffic of the cold pass and of one warm pass."""
    result = {q: {} for q in sqls}
    before = server.metrics()
    for q, sql in sqls.items():
        result[q]["cold_s"], result[q]["rows"] = server.run(sql)
    cold = delta(server.metrics(), before)
    for q in sqls:
        result[q]["warm_s"] = []
    warm = None
    for i in range(runs):
        before = server.metrics()
        for q, sql in sqls.items():
            result[q]["warm_s"].append(server.run(sql)[0])
        if i == runs - 1:
            warm = delta(server.metrics(), before)
    for q in sqls:
        result[q]["warm_median_s"] = statistics.median(result[q]["warm_s"])
    return {"queries": result, "cold_store": cold, "warm_pass_store": warm}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--format", choices=["iceberg", "delta"], default="iceberg")
    ap.add_argument("--silt", required=True)
    ap.add_argument("--tpch", required=True)
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--latency", default="20ms")
    ap.add_argument("--mbps", default="200")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    shared = os.path.join(HERE, "..", "..", "shared", "bench", "tpch", "queries")
    sqls = {q: open(os.path.join(shared, f"{q}.sql")).read() for q in QUERIES}

    store = f'[store]\nlatency = "{args.latency}"\nmbps = {args.mbps}\n'
    if args.format == "delta":
        if not os.path.exists(os.path.join(args.warehouse, "orders", "_delta_log")):
            write_delta(args.warehouse, args.tpch)
        base = f"file://{args.warehouse}"
        folders = {t: f"{base}/{t}/" for t in ["lineitem", "orders"]}
        lakehouse = {t: f"delta+{base}/{t}" for t in ["lineitem", "orders"]}
        compaction = lambda: compact_delta(args.warehouse)  # noqa: E731
    else:
        if not os.path.exists(os.path.join(args.warehouse, "catalog.db")):
            catalog = write_warehouse(args.warehouse, args.tpch)
        else:
            from pyiceberg.catalog.sql import SqlCatalog

            catalog = SqlCatalog(
                "bench", uri=f"sqlite:///{args.warehouse}/catalog.db", warehouse=f"file://{args.warehouse}"
            )
        base = f"file://{args.warehouse}/db"
        folders = {t: f"{base}/{t}/data/" for t in ["lineitem", "orders"]}
        lakehouse = {t: f"iceberg+{base}/{t}" for t in ["lineitem", "orders"]}
        compaction = lambda: compact(catalog)  # noqa: E731
    fmt = args.format
    layouts = {
        "plain": "".join(f'[tables.{t}]\nurl = "{u}"\nvalidation = "immutable"\n' for t, u in folders.items()),
        fmt: "".join(f'[tables.{t}]\nurl = "{u}"\nvalidation = "always"\n' for t, u in lakehouse.items()),
    }
    results = {"format": fmt, "latency": args.latency, "mbps": args.mbps, "runs": args.runs, "layouts": {}}
    for name, tables in layouts.items():
        server = Server(args.silt, store + tables, args.out, name)
        try:
            results["layouts"][name] = passes(server, sqls, args.runs)
            if name == fmt:
                compaction()
                before = server.metrics()
                after = {q: server.run(sql)[0] for q, sql in sqls.items()}
                results["layouts"][name]["after_compaction"] = {
                    "first_pass_s": after,
                    "store": delta(server.metrics(), before),
                }
        finally:
            server.stop()
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    plain, ice = results["layouts"]["plain"], results["layouts"][fmt]
    print(f"store latency {args.latency}, {args.mbps} MB/s, {args.runs} warm runs (medians)")
    print(f"query  plain_warm_ms  {fmt}_warm_ms  ratio")
    for q in QUERIES:
        p, i = plain["queries"][q]["warm_median_s"], ice["queries"][q]["warm_median_s"]
        print(f"{q}    {p * 1000:10.1f}  {i * 1000:14.1f}  {i / p:5.2f}")
    n = len(QUERIES)
    print(f"warm pass store requests: plain {plain['warm_pass_store']['requests']:.0f}, "
          f"{fmt} {ice['warm_pass_store']['requests']:.0f} ({n} queries x 1-2 tables)")
    cold_bytes = ice["cold_store"]["get_bytes"]
    after = ice["after_compaction"]["store"]["get_bytes"]
    print(f"{fmt} cold pass store bytes {cold_bytes:.0f}; first pass after compaction {after:.0f} "
          f"({after / cold_bytes:.1%} of cold)")


if __name__ == "__main__":
    main()
