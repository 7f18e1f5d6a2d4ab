"""`silt.lookup` (one DoGet, nothing planned) against a real `silt serve`,
checked against pyarrow's own filtering of the same file."""

import os
import tempfile

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest

import silt
import silt_server


@pytest.fixture(scope="module")
def server():
    tmp = tempfile.mkdtemp(prefix="silt-lookup-")
    path = os.path.join(tmp, "kv.parquet")
    n = 40_000
    table = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "name": pa.array([f"k{i % 1000}" for i in range(n)]),
        "value": pa.array([i * 3 for i in range(n)], pa.int64()),
    })
    pq.write_table(table, path, row_group_size=8192, data_page_size=4096)
    proc, port, _ = silt_server.start(["--table", f"kv=file://{path}"], os.path.join(tmp, "cache"))
    yield {"url": f"grpc://127.0.0.1:{port}", "table": table}
    silt_server.stop(proc)


def expected(table, column, keys, columns):
    mask = pc.is_in(table[column], value_set=pa.array([k for k in keys if k is not None],
                                                       table[column].type))
    return rows(table.filter(mask).select(columns))


def rows(table):
    """Rows as dicts, sorted (pyarrow cannot sort the string views Silt sends)."""
    return sorted(table.to_pylist(), key=lambda r: tuple(r.values()))


def test_integer_keys_present_absent_and_null(server):
    keys = [5, 8191, 8192, 39_999, 123_456, None, 5]
    got = silt.lookup(server["url"], "kv", "id", keys, ["id", "value"])
    assert rows(got) == expected(server["table"], "id", keys, ["id", "value"])
    assert got.num_rows == 4


def test_string_keys_with_many_matches_and_a_reused_client(server):
    client = flight.FlightClient(server["url"])
    for keys in (["k7", "k999"], ["absent"]):
        got = silt.lookup(server["url"], "kv", "name", keys, ["name", "id"], client=client)
        assert rows(got) == expected(server["table"], "name", keys, ["name", "id"])


def test_a_bad_request_is_a_clear_error(server):
    with pytest.raises(pa.ArrowInvalid, match="no column"):
        silt.lookup(server["url"], "kv", "nope", [1])
