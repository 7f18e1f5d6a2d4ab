"""DuckDB on the benchmark's local Parquet files: the `duckdb` mode of `silt bench`.

Reads a JSON job on stdin: {"setup": [SQL...], "queries": [{"id", "sql"}], "warm_runs": N}
and prints one JSON list of results on stdout. Each query gets a fresh in-memory
connection: its first run is "cold" (the OS page cache may still hold the files:
DuckDB reads local disk, not the throttled store), then one untimed warm-up and
N timed warm runs. CPU is this process's (DuckDB's threads included).
"""

import json
import sys
import time


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def timed(con, sql):
    cpu, wall = time.process_time(), time.perf_counter()
    rows = len(con.execute(sql).fetchall())
    return (time.perf_counter() - wall) * 1e3, time.process_time() - cpu, rows


def run_query(duckdb, setup, q, warm_runs):
    con = duckdb.connect()
    try:
        for stmt in setup:
            con.execute(stmt)
        cold_ms, cold_cpu, rows = timed(con, q["sql"])
        con.execute(q["sql"]).fetchall()
        warm = [timed(con, q["sql"]) for _ in range(max(1, warm_runs))]
        return {
            "id": q["id"], "status": "ok", "rows": rows,
            "cold_ms": cold_ms, "cold_cpu_s": cold_cpu,
            "warm_ms": [w[0] for w in warm], "warm_cpu_s": [w[1] for w in warm],
            "rss_bytes": rss_bytes(),
        }
    except Exception as e:  # a query DuckDB cannot run is a result, not a crash
        return {"id": q["id"], "status": "error", "error": f"{type(e).__name__}: {e}"}
    finally:
        con.close()


def main():
    job = json.load(sys.stdin)
    try:
        import duckdb
    except ImportError as e:
        print(json.dumps({"skipped": f"DuckDB's Python package is not installed ({e})"}))
        return
    out = [run_query(duckdb, job["setup"], q, job["warm_runs"]) for q in job["queries"]]
    print(json.dumps({"version": duckdb.__version__, "results": out}))


main()
