"""A generic Flight SQL client (ADBC) against a real `silt serve` process.

Silt code plays no part on the client side: this is what any SQL tool sees.
"""

import os
import tempfile
import urllib.request

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import silt_server


@pytest.fixture(scope="module")
def server():
    tmp = tempfile.mkdtemp(prefix="silt-py-")
    path = os.path.join(tmp, "lineitem.parquet")
    n = 50_000
    quantity = pa.array([(i * 7919) % 50 + 1 for i in range(n)], pa.int64())
    table = pa.table({"l_orderkey": pa.array(range(n), pa.int64()), "l_quantity": quantity})
    pq.write_table(table, path, row_group_size=8192)
    expected = pc.sum(pc.less(quantity, 10)).as_py()
    proc, port, admin = silt_server.start(
        ["--table", f"lineitem=file://{path}"], os.path.join(tmp, "cache")
    )
    yield {"port": port, "admin": admin, "expected": expected}
    silt_server.stop(proc)


def query(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


def test_select_and_refusals(server):
    with flight_sql.connect(f"grpc://127.0.0.1:{server['port']}") as conn:
        sql = "SELECT count(*) FROM lineitem WHERE l_quantity < 10"
        assert query(conn, sql) == [(server["expected"],)]
        for bad in [
            "CREATE EXTERNAL TABLE x STORED AS PARQUET LOCATION '/etc/'",
            "COPY (SELECT 1) TO '/tmp/silt-adbc-copy.parquet'",
            "SELECT * FROM '/etc/passwd'",
        ]:
            with pytest.raises(Exception) as err:
                query(conn, bad)
            assert "read-only" in str(err.value) or "unknown table" in str(err.value)
            # The next good query still works.
            assert query(conn, sql) == [(server["expected"],)]


def test_metrics_count_queries(server):
    with flight_sql.connect(f"grpc://127.0.0.1:{server['port']}") as conn:
        query(conn, "SELECT sum(l_quantity) FROM lineitem")
    with urllib.request.urlopen(f"http://127.0.0.1:{server['admin']}/metrics") as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    for name in ["silt_queries_total", "silt_object_store_get_requests_total",
                 "silt_object_store_get_bytes_total", "silt_flight_bytes_sent_total"]:
        assert values.get(name, 0) > 0, name
    assert "silt_query_errors_total" in values
