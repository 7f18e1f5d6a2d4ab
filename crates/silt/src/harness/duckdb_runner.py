"""DuckDB on the benchmark's Parquet files: the `duckdb` and `duckdb-s3` modes of `silt bench`.

Reads a JSON job on stdin: {"httpfs": bool, "setup": [SQL...], "queries": [{"id", "sql"}],
"warm_runs": N} and prints one JSON list of results on stdout. With "httpfs" the
extension is loaded from the `duckdb-ext-httpfs` wheel (DuckDB's own extension
repository is not reached) and the setup reads the throttled object store
(`duckdb-s3`); without it the setup reads the local files (`duckdb`: the OS page
cache may still hold them on the cold run). Each query gets a fresh in-memory
database: its first run is "cold", then one untimed warm-up and N timed warm runs.
CPU is this process's (DuckDB's threads included).
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


def httpfs_directory():
    """The extension directory of the `duckdb-ext-httpfs` wheel (raises ImportError without it)."""
    import duckdb_ext  # the wheel's namespace package: the extension files
    from pathlib import Path

    return Path(list(duckdb_ext.__path__)[0]) / "extensions"


def connect(duckdb, extensions):
    con = duckdb.connect()
    if extensions is not None:
        con.execute("SET autoinstall_known_extensions = false")
        con.execute(f"SET extension_directory = '{extensions}'")
        con.execute("LOAD httpfs")
    return con


def run_query(duckdb, extensions, setup, q, warm_runs):
    con = connect(duckdb, extensions)
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
    extensions = None
    if job.get("httpfs"):
        try:
            extensions = httpfs_directory()
            connect(duckdb, extensions).close()
        except Exception as e:
            print(json.dumps({"skipped": f"DuckDB's httpfs extension cannot be loaded ({type(e).__name__}: {e})"}))
            return
    out = [run_query(duckdb, extensions, job["setup"], q, job["warm_runs"]) for q in job["queries"]]
    print(json.dumps({"version": duckdb.__version__, "results": out}))


main()
