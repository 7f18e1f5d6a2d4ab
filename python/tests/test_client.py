"""`silt.connect` against a real `silt serve`: tables, SQL, scans, lookups,
errors and token auth, checked against DuckDB and pyarrow on the same
Parquet files."""

import os

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import silt
import silt_server

from conftest import TOKEN


def rows(table):
    """Rows as tuples, sorted (Silt sends string views, which pyarrow cannot sort)."""
    return normal([tuple(r.values()) for r in table.to_pylist()])


def normal(tuples):
    return sorted(tuples, key=repr)


def duck(lake, sql):
    """`sql` run by DuckDB with `items` = the table's Parquet files."""
    con = duckdb.connect()
    con.execute(f"CREATE VIEW items AS SELECT * FROM read_parquet('{lake['root']}/*.parquet')")
    return [tuple(r) for r in con.execute(sql).fetchall()]


def test_tables_and_schema(lake):
    with silt.connect(lake["url"]) as conn:
        assert conn.tables() == ["items"]
        schema = conn.schema("items")
        assert schema.names == lake["table"].schema.names
        assert schema.field("id").type == pa.int64()
        assert schema.field("amount").type == pa.decimal128(12, 2)


@pytest.mark.parametrize("sql", [
    "SELECT name, count(*), sum(qty), sum(amount), min(day), max(id) FROM items GROUP BY name",
    "SELECT count(*) FROM items WHERE qty < 10 AND flag",
    "SELECT id, qty FROM items WHERE id % 997 = 3",
    "SELECT note, count(*) FROM items GROUP BY note",
])
def test_sql_equals_duckdb(lake, sql):
    with silt.connect(lake["url"]) as conn:
        assert rows(conn.sql(sql)) == normal(duck(lake, sql))


def test_sql_batches_stream_the_same_rows(lake):
    with silt.connect(lake["url"]) as conn:
        batches = list(conn.sql_batches("SELECT id, price FROM items"))
        assert len(batches) > 1
        assert all(isinstance(b, pa.RecordBatch) for b in batches)
        got = pa.Table.from_batches(batches)
        assert sorted(got["id"].to_pylist()) == list(range(lake["table"].num_rows))
        # A stream left early is cancelled and the connection still works.
        stream = conn.sql_batches("SELECT * FROM items")
        next(stream)
        stream.close()
        assert conn.sql("SELECT count(*) AS n FROM items")["n"].to_pylist() == [lake["table"].num_rows]


def test_scan_projection_filter_and_quoted_names(lake):
    table = lake["table"]
    with silt.connect(lake["url"]) as conn:
        got = conn.scan("items", ["id", "Mixed Col", "name"], "qty < 5 AND \"Mixed Col\" > -30000")
        assert got.schema.names == ["id", "Mixed Col", "name"]
        mask = pc.and_(pc.less(table["qty"], 5), pc.greater(table["Mixed Col"], -30000))
        assert rows(got) == rows(table.filter(mask).select(["id", "Mixed Col", "name"]))
        assert conn.scan("items", ["id"], "id < 10", limit=3).num_rows == 3
        everything = conn.scan("items")
        assert everything.num_rows == table.num_rows
        assert sorted(everything["id"].to_pylist()) == table["id"].to_pylist()
        assert rows(conn.scan("items", ["qty"], "qty > 1000")) == []
        assert silt.scan_sql('we"ird', ['a"b']) == 'SELECT "a""b" FROM "we""ird"'


def test_to_pandas_and_lookup(lake):
    pandas = pytest.importorskip("pandas")
    with silt.connect(lake["url"]) as conn:
        df = conn.to_pandas("SELECT id, qty FROM items WHERE id < 5 ORDER BY id")
        assert isinstance(df, pandas.DataFrame)
        assert df["id"].tolist() == [0, 1, 2, 3, 4]
        got = conn.lookup("items", "id", [7, 59_999, 123_456], ["id", "qty"])
        assert rows(got) == normal([(7, (7 * 7919) % 50 + 1), (59_999, (59_999 * 7919) % 50 + 1)])


def test_errors_carry_the_servers_message(lake):
    with silt.connect(lake["url"]) as conn:
        with pytest.raises(silt.SiltError, match="unknown table 'nope'"):
            conn.sql("SELECT * FROM nope")
        with pytest.raises(silt.SiltError, match="SQL parse error"):
            conn.sql("SELEC 1")
        with pytest.raises(silt.SiltError, match="No field named nope"):
            conn.scan("items", ["nope"])
        with pytest.raises(silt.SiltError, match="read-only"):
            conn.sql("CREATE VIEW v AS SELECT 1")
        with pytest.raises(silt.SiltError, match="no column 'nope'"):
            conn.lookup("items", "nope", [1])
        with pytest.raises(silt.SiltError, match="unknown table 'nope'"):
            list(conn.sql_batches("SELECT * FROM nope"))
        with pytest.raises(silt.SiltError, match="unknown table"):
            conn.schema("nope")
        # The connection survives its errors.
        assert conn.sql("SELECT count(*) AS n FROM items")["n"].to_pylist() == [lake["table"].num_rows]


def test_a_list_of_servers_uses_the_first_that_answers(lake):
    dead = f"grpc://127.0.0.1:{silt_server.free_port()}"
    with silt.connect([dead, lake["url"]], timeout=5) as conn:
        assert conn.location == lake["url"]
        assert conn.tables() == ["items"]
    with pytest.raises(silt.SiltError, match="no server answered"):
        silt.connect([dead], timeout=2)


def test_token_auth(secured):
    with silt.connect(secured, token=TOKEN) as conn:
        assert conn.tables() == ["items"]
        assert conn.sql("SELECT count(*) AS n FROM items")["n"].to_pylist() == [60_000]
        assert conn.lookup("items", "id", [3], ["id"])["id"].to_pylist() == [3]
    assert silt.Scan(secured, "items", ("id",), "id < 100", token=TOKEN).read_all().num_rows == 100
    for token in (None, "wrong"):
        with pytest.raises(silt.SiltError) as err:
            silt.connect(secured, token=token)
        assert err.value.kind == "FlightUnauthenticatedError", err.value
    # A wrong token is not taken for a dead server: the list stops there.
    with pytest.raises(silt.SiltError):
        silt.connect([secured], token="wrong")


def test_the_installed_wheel_is_this_source_tree():
    """The tests run on the wheel `scripts/python-wheel.sh` built and installed: pip installed it, it declares its
    dependencies and extras, and it holds every module of the source tree, unchanged (a stale install fails here)."""
    import importlib.metadata
    import pathlib
    dist = importlib.metadata.distribution("silt")
    assert (dist.read_text("INSTALLER") or "").strip() == "pip"
    requires = dist.requires or []
    assert "pyarrow>=17" in requires and any('extra == "torch"' in r for r in requires), requires
    installed = pathlib.Path(silt.__file__).resolve().parent
    source = pathlib.Path(__file__).resolve().parent.parent / "silt"
    assert installed != source
    modules = sorted(p.name for p in source.glob("*.py"))
    assert "client.py" in modules and "torch.py" in modules
    for name in modules:
        assert (installed / name).read_bytes() == (source / name).read_bytes(), f"{name} differs from the source tree"
