"""`silt.connect_fleet` against three real `silt serve`s over one folder
table: rendezvous placement per row group (the same owners as the Rust
client), results equal to one server's and to pyarrow's, and failover when
a member stops."""

import os
import re
import shutil
import socket
import tempfile
import urllib.request

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import silt
import silt_server
from silt import _proto
from silt.fleet import TRANSPORT_KINDS, member_name, rendezvous_order, weight

from conftest import lake_table

ROWS = 60_000
# Row groups of 2048 rows: 31 row groups, so each of three members owns some
# whatever ports the servers get (a member owning none of 16 row groups
# would happen in ~0.5% of runs).
ROW_GROUP_ROWS = 2048
COLUMNS = ["id", "qty", "name"]
FILTER = "qty < 10 AND name <> 'n3'"
VIEW = "SELECT id, qty FROM items WHERE qty < 5"


def test_weights_match_the_rust_client():
    assert weight("http://a:1", "x#0") == 11891827647523181874
    assert weight("http://127.0.0.1:50051", "lineitem/part-0.parquet#3") == 14811625242926266543
    assert member_name("grpc://h:1") == "http://h:1"
    assert member_name("grpc+tcp://h:1") == "http://h:1"
    assert member_name("grpc+tls://h:1") == "https://h:1"
    servers = [f"http://10.0.0.{i}:50051" for i in range(5)]
    order = rendezvous_order(servers, "t/a.parquet#3")
    assert sorted(order) == list(range(5))
    assert order == sorted(range(5), key=lambda i: (-weight(servers[i], "t/a.parquet#3"), i))
    # Ties go to the lower index.
    assert rendezvous_order(["http://a:1", "http://a:1"], "x#0") == [0, 1]


def test_scan_request_encoding():
    ticket = _proto.scan_request("t", ["a"], "a < 1", scope=[("p", "v", [1, 300])])
    body = (b"\x0a\x01t" + b"\x12\x03\x0a\x01a"
            + b"\x32\x0d\x0a\x0b\x0a\x01p\x12\x01v\x1a\x03\x01\xac\x02"
            + b"\x4a\x05a < 1")
    assert ticket == _proto.any_message("type.googleapis.com/silt.ScanRequest", body)
    assert _proto.scan_request("t", layout_only=True, limit=5).endswith(b"\x0a\x01t\x20\x05\x38\x01")


def queries_total(admin: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(m.group(1)) for m in re.finditer(r"^silt_queries_total(?:\{[^}]*\})? (\S+)$", text, re.M))


@pytest.fixture(scope="module")
def fleet_lake():
    """Three servers of `items` (two Parquet files, row groups of 2048) and
    the view `small`; `urls` lists the owner of the name "items" (where
    layouts and whole scans go) first."""
    tmp = tempfile.mkdtemp(prefix="silt-py-fleet-")
    root = os.path.join(tmp, "items")
    os.makedirs(root)
    parts = [lake_table(0, 35_000), lake_table(35_000, ROWS - 35_000)]
    for i, part in enumerate(parts):
        pq.write_table(part, os.path.join(root, f"part-{i}.parquet"), row_group_size=ROW_GROUP_ROWS)
    row_groups = sum(pq.ParquetFile(os.path.join(root, f"part-{i}.parquet")).num_row_groups for i in range(2))
    servers = []
    try:
        for i in range(3):
            servers.append(silt_server.start(["--table", f"items=file://{root}/", "--view", f"small={VIEW}"],
                                             os.path.join(tmp, f"cache-{i}")))
        urls = [f"grpc://127.0.0.1:{port}" for _, port, _ in servers]
        first = rendezvous_order([member_name(u) for u in urls], "items")[0]
        servers.insert(0, servers.pop(first))
        yield {"procs": [p for p, _, _ in servers], "urls": [f"grpc://127.0.0.1:{port}" for _, port, _ in servers],
               "admins": [admin for _, _, admin in servers], "table": pa.concat_tables(parts),
               "row_groups": row_groups}
    finally:
        for proc, _, _ in servers:
            if proc.poll() is None:
                silt_server.stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


def by_id(table: pa.Table):
    """Rows as dicts sorted by id (Silt sends string views: compare as Python values)."""
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def expected(table: pa.Table):
    mask = pc.and_(pc.less(table["qty"], 10), pc.not_equal(table["name"], "n3"))
    return by_id(table.filter(mask).select(COLUMNS))


def test_fleet_scan_equals_one_server_and_pyarrow(fleet_lake):
    with silt.connect_fleet(fleet_lake["urls"]) as fleet, silt.connect(fleet_lake["urls"][1]) as one:
        before = [queries_total(a) for a in fleet_lake["admins"]]
        got = fleet.scan("items", COLUMNS, FILTER)
        after = [queries_total(a) for a in fleet_lake["admins"]]
        assert got.schema.names == COLUMNS
        assert by_id(got) == by_id(one.scan("items", COLUMNS, FILTER)) == expected(fleet_lake["table"])
        assert len(got) > 0
        # Every member served scans of its own row groups.
        assert all(a > b for a, b in zip(after, before)), (before, after)
        assert all(a > 0 for a in after)
        # All columns, no filter: every row once.
        everything = fleet.scan("items")
        assert everything.schema.names == fleet_lake["table"].schema.names
        assert sorted(everything["id"].to_pylist()) == list(range(ROWS))
        assert fleet.scan("items", ["id"], "qty > 1000").num_rows == 0


def test_owners_cover_every_row_group(fleet_lake):
    with silt.connect_fleet(fleet_lake["urls"]) as fleet:
        owners = fleet.owners("items")
        assert set(owners) == set(fleet_lake["urls"])
        assert all(n > 0 for n in owners.values()), owners
        assert sum(owners.values()) == fleet_lake["row_groups"]
        layout = fleet.layout("items")
        assert len(layout) == fleet_lake["row_groups"]
        names = [member_name(u) for u in fleet_lake["urls"]]
        for g in layout:
            assert fleet.rendezvous(f"{g.object}#{g.index}") == rendezvous_order(names, f"{g.object}#{g.index}")
        assert sum(g.rows for g in layout) == ROWS


def test_views_and_limits_scan_whole(fleet_lake):
    table = fleet_lake["table"]
    with silt.connect_fleet(fleet_lake["urls"]) as fleet:
        assert fleet.tables() == ["items", "small"]
        assert fleet.owners("small") == {u: 0 for u in fleet_lake["urls"]}
        small = fleet.scan("small", ["id", "qty"])
        assert by_id(small) == by_id(table.filter(pc.less(table["qty"], 5)).select(["id", "qty"]))
        assert fleet.scan("items", ["id"], "id < 100", limit=5).num_rows == 5
        # A stream left early stops its scans; the fleet still works.
        stream = fleet.scan_batches("items", ["id"])
        assert next(stream).num_rows > 0
        stream.close()
        assert fleet.sql("SELECT count(*) AS n FROM items")["n"].to_pylist() == [ROWS]
        batches = list(fleet.sql_batches("SELECT id FROM items"))
        assert sum(b.num_rows for b in batches) == ROWS
        with pytest.raises(ValueError):
            fleet.scan("items", [])


def test_failover_when_a_member_stops(fleet_lake):
    with silt.connect_fleet(fleet_lake["urls"]) as fleet:
        assert by_id(fleet.scan("items", COLUMNS, FILTER)) == expected(fleet_lake["table"])
        # Stop the owner of "items": layouts, whole scans, SQL and its runs fail over.
        silt_server.stop(fleet_lake["procs"][0])
        assert by_id(fleet.scan("items", COLUMNS, FILTER)) == expected(fleet_lake["table"])
        assert fleet.is_down(0) and not fleet.is_down(1) and not fleet.is_down(2)
        # Placed around the member in back-off now.
        assert by_id(fleet.scan("items", COLUMNS, FILTER)) == expected(fleet_lake["table"])
        assert fleet.tables() == ["items", "small"]
        assert fleet.sql("SELECT count(*) AS n FROM items")["n"].to_pylist() == [ROWS]
        assert fleet.scan("small").num_rows > 0
        # Errors of the request raise at once and put no member in back-off.
        with pytest.raises(silt.SiltError) as err:
            fleet.scan("items", ["id"], "no_such_column < 1")
        assert err.value.kind not in TRANSPORT_KINDS
        assert "no_such_column" in str(err.value)
        assert not fleet.is_down(1) and not fleet.is_down(2)
    # A fresh client (no back-off yet) finds the dead member by itself.
    with silt.connect_fleet(fleet_lake["urls"], backoff=60) as fleet:
        assert by_id(fleet.scan("items", COLUMNS, FILTER)) == expected(fleet_lake["table"])
        assert fleet.is_down(0)
    # A member that accepts connections but never answers: it counts as down
    # after `timeout` (gRPC's connect timeout) and its row groups go elsewhere.
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(64)
        urls = fleet_lake["urls"][1:] + [f"grpc://127.0.0.1:{hung.getsockname()[1]}"]
        with silt.connect_fleet(urls, timeout=1) as fleet:
            assert fleet.owners("items")[urls[2]] > 0
            assert by_id(fleet.scan("items", COLUMNS, FILTER)) == expected(fleet_lake["table"])
            assert fleet.is_down(2) and not fleet.is_down(0)
    # An unusable URL is a member that cannot be reached.
    with silt.connect_fleet(fleet_lake["urls"][1:] + ["nonsense"]) as fleet:
        assert by_id(fleet.scan("items", COLUMNS, FILTER)) == expected(fleet_lake["table"])
    # A fleet whose every member is down raises.
    with silt.connect_fleet([fleet_lake["urls"][0]]) as fleet:
        with pytest.raises(silt.SiltError) as err:
            fleet.scan("items")
        assert err.value.kind == "FlightUnavailableError"
