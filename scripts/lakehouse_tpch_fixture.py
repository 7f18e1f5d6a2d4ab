"""TPC-H as Iceberg or Delta Lake tables, changed in phases, for Silt's server tests.

Usage: lakehouse_tpch_fixture.py FORMAT ROOT TPCH_DIR PHASE

FORMAT is `iceberg` (pyiceberg, SQL catalog on SQLite in ROOT) or `delta`
(deltalake). TPCH_DIR holds the generated tables as Parquet (one folder per
table). `lineitem` and `orders` are cut into three parts by order key; the
other six tables are written once. The phases, in order:

- `create`: every table; `lineitem` and `orders` get parts 1 and 2 as two
  appends (`orders` partitioned by `o_orderpriority`).
- `overwrite`: the `1-URGENT` orders replaced by the same orders with their
  comments upper-cased (an overwrite of one partition, which q13 sees), and
  the lineitems of order keys below 1000 deleted by rewriting the files that
  hold them (copy-on-write).
- `deletes`: merge-on-read deletes of about 5% of both tables. Iceberg:
  position delete files on `lineitem` (every 20th row of each file) and
  equality delete files on `orders` (by `o_orderkey`, one per partition;
  each also names keys of another partition's orders, which survive: a
  delete applies within its partition), written to the spec by
  `iceberg_server_fixture.py` (pyiceberg writes neither). Delta: deletion
  vectors on both (written to the protocol by `delta_server_fixture.py`).
- `compact`: `lineitem` rewritten (Iceberg: its live rows overwrite the
  table, the position deletes leave the snapshot; Delta: optimize).
- `evolve`: a schema change on `lineitem`, then half of part 3 appended.
  Iceberg: `l_comment` renamed `l_remark`, `l_shipinstruct` renamed
  `l_instruct` and its old name given to a new string column (which q19
  filters: older files' `l_shipinstruct` is another column, so their rows
  have none), `l_linenumber` promoted from int to long, a column `l_note`
  added; Delta: `l_note` added (schema merge).
- `respec`: a partition change on `lineitem`, then the rest of part 3, and
  part 3 of `orders`. Iceberg: `month(l_shipdate)` added to the spec (older
  files keep theirs); Delta: the table rewritten partitioned by
  `l_returnflag` (Delta changes partitioning only by an overwrite).

After each phase every table's current rows, as an independent reader
returns them, are written to `ROOT/expected/<phase>/<table>.parquet`:
pyiceberg's scan (which applies position deletes) or, for `orders` once it
has equality deletes (pyiceberg cannot read them; DuckDB's iceberg extension
1.4.4 fails on them), the rows computed here by the spec's rules; for Delta,
DuckDB's delta extension. One JSON object is printed: {"tables": {NAME:
URL}} with the URL to register each table under in Silt.
"""

import json
import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))

TABLES = ["nation", "region", "part", "supplier", "partsupp", "customer", "orders", "lineitem"]
PHASES = ["create", "overwrite", "deletes", "compact", "evolve", "respec"]
ROW_GROUP = 4000


def source(tpch_dir, name):
    """A generated table with plain (nullable) strings, as lake writers take it."""
    table = pq.read_table(Path(tpch_dir) / name)
    fields = [pa.field(f.name, pa.string() if f.type == pa.string_view() else f.type) for f in table.schema]
    return table.cast(pa.schema(fields))


def parts(tpch_dir):
    """`orders` and `lineitem` cut into parts 1, 2, 3a and 3b by order key
    (3a and 3b are `lineitem` only: `orders`' part 3 is both)."""
    orders = source(tpch_dir, "orders").sort_by("o_orderkey")
    lineitem = source(tpch_dir, "lineitem").sort_by([("l_orderkey", "ascending"), ("l_linenumber", "ascending")])
    keys = orders["o_orderkey"]
    cut = [keys[len(keys) // 3].as_py(), keys[2 * len(keys) // 3].as_py(), keys[5 * len(keys) // 6].as_py()]

    def between(table, column, lo, hi):
        mask = pc.greater_equal(table[column], lo) if lo is not None else None
        if hi is not None:
            below = pc.less(table[column], hi)
            mask = below if mask is None else pc.and_(mask, below)
        return table.filter(mask)

    o = [between(orders, "o_orderkey", lo, hi) for lo, hi in [(None, cut[0]), (cut[0], cut[1]), (cut[1], None)]]
    bounds = [(None, cut[0]), (cut[0], cut[1]), (cut[1], cut[2]), (cut[2], None)]
    li = [between(lineitem, "l_orderkey", lo, hi) for lo, hi in bounds]
    return o, li


def urgent_rewritten(rows):
    """The `1-URGENT` rows of `rows`, comments upper-cased."""
    urgent = rows.filter(pc.equal(rows["o_orderpriority"], "1-URGENT"))
    index = urgent.schema.get_field_index("o_comment")
    return urgent.set_column(index, "o_comment", pc.utf8_upper(urgent["o_comment"]))


def with_note(rows):
    """`rows` of `lineitem` with the column `l_note` the `evolve` phase adds."""
    notes = [f"note {k % 13}" if k % 3 else None for k in rows["l_orderkey"].to_pylist()]
    return rows.append_column("l_note", pa.array(notes, pa.string()))


def write_expected(root, phase, name, rows):
    folder = Path(root) / "expected" / phase
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows, folder / f"{name}.parquet")


def previous_expected(root, phase, name):
    return pq.read_table(Path(root) / "expected" / PHASES[PHASES.index(phase) - 1] / f"{name}.parquet")


# ---------------------------------------------------------------- Iceberg


def iceberg(root, tpch_dir, phase):
    from pyiceberg.expressions import EqualTo, LessThan
    from pyiceberg.transforms import MonthTransform
    from pyiceberg.types import LongType, StringType

    import iceberg_server_fixture as fx

    catalog = fx.catalog_of(root)
    o, li = parts(tpch_dir)
    properties = {"write.parquet.row-group-limit": str(ROW_GROUP)}
    computed = {}  # tables whose expected rows are computed here, not scanned

    def load(name):
        return catalog.load_table(f"tpch.{name}")

    if phase == "create":
        catalog.create_namespace("tpch")
        for name in TABLES[:6]:
            rows = source(tpch_dir, name)
            catalog.create_table(f"tpch.{name}", schema=rows.schema, properties=properties).append(rows)
        catalog.create_table("tpch.orders", schema=o[0].schema, properties=properties)
        with load("orders").update_spec() as spec:
            spec.add_identity("o_orderpriority")
        catalog.create_table("tpch.lineitem", schema=li[0].schema, properties=properties)
        for i in range(2):
            load("orders").append(o[i])
            load("lineitem").append(li[i])
    elif phase == "overwrite":
        orders = load("orders")
        orders.overwrite(urgent_rewritten(orders.scan().to_arrow()), overwrite_filter=EqualTo("o_orderpriority", "1-URGENT"))
        load("lineitem").delete(LessThan("l_orderkey", 1000))
    elif phase == "deletes":
        fx.commit_position_deletes(load("lineitem"), 20)
        computed["orders"] = iceberg_equality_deletes(load("orders"), fx)
    elif phase == "compact":
        lineitem = load("lineitem")
        lineitem.overwrite(lineitem.scan().to_arrow())
        computed["orders"] = previous_expected(root, phase, "orders")
    elif phase == "evolve":
        with load("lineitem").update_schema() as update:
            update.rename_column("l_comment", "l_remark")
            update.rename_column("l_shipinstruct", "l_instruct")
            update.update_column("l_linenumber", LongType())
            update.add_column("l_note", StringType())
        with load("lineitem").update_schema() as update:
            update.add_column("l_shipinstruct", StringType())
        load("lineitem").append(evolved(li[2]))
        computed["orders"] = previous_expected(root, phase, "orders")
    elif phase == "respec":
        with load("lineitem").update_spec() as spec:
            spec.add_field("l_shipdate", MonthTransform(), "l_shipmonth")
        load("lineitem").append(evolved(li[3]))
        load("orders").append(o[2])
        computed["orders"] = pa.concat_tables([previous_expected(root, phase, "orders"), o[2]])
    for name in TABLES:
        rows = computed[name] if name in computed else load(name).scan().to_arrow()
        write_expected(root, phase, name, rows)
    return {name: f"iceberg+{load(name).metadata.location}" for name in TABLES}


def evolved(rows):
    """Part of `lineitem` in the schema after `evolve` (the reused name
    `l_shipinstruct` holds the same values as `l_instruct`)."""
    rows = with_note(rows)
    renamed = {"l_comment": "l_remark", "l_shipinstruct": "l_instruct"}
    rows = rows.append_column("l_shipinstruct (new)", rows["l_shipinstruct"])
    rows = rows.rename_columns([renamed.get(n, n).removesuffix(" (new)") for n in rows.column_names])
    index = rows.schema.get_field_index("l_linenumber")
    return rows.set_column(index, "l_linenumber", rows["l_linenumber"].cast(pa.int64()))


def iceberg_equality_deletes(orders, fx):
    """Equality delete files on `orders` by `o_orderkey`: in each partition
    the keys that are 7 mod 20, plus five keys of another partition's orders
    (which survive). The rows left, computed by the spec's rules."""
    parent = orders.scan().to_arrow()
    key_id = orders.schema().find_field("o_orderkey").field_id
    key_schema = fx.with_ids(pa.schema([("o_orderkey", pa.int64())]), [key_id])
    partitions = {}
    for task in orders.scan().plan_files():
        partitions[task.file.partition[0]] = (task.file.partition, task.file.spec_id)
    priorities = sorted(partitions)
    delete_files, deleted = [], None
    for i, priority in enumerate(priorities):
        mine = parent.filter(pc.equal(parent["o_orderpriority"], priority))["o_orderkey"].to_pylist()
        other = parent.filter(pc.equal(parent["o_orderpriority"], priorities[(i + 1) % len(priorities)]))
        named = pa.array([k for k in mine if k % 20 == 7] + other["o_orderkey"].to_pylist()[:5], pa.int64())
        path = fx.write_delete_file(orders, "eq", pa.table({"o_orderkey": named}, schema=key_schema))
        delete_files.append(fx.equality_delete_file(path, len(named), [key_id], *partitions[priority]))
        here = pc.and_(pc.equal(parent["o_orderpriority"], priority), pc.is_in(parent["o_orderkey"], named))
        deleted = here if deleted is None else pc.or_(deleted, here)
    fx.commit_delete_files(orders, delete_files)
    return parent.filter(pc.invert(deleted))


# ---------------------------------------------------------------- Delta


def delta(root, tpch_dir, phase):
    from deltalake import DeltaTable, WriterProperties, write_deltalake

    import delta_server_fixture as fx

    o, li = parts(tpch_dir)
    path = {name: str(Path(root) / name) for name in TABLES}
    props = WriterProperties(max_row_group_size=ROW_GROUP)

    def write(name, rows, **kwargs):
        write_deltalake(path[name], rows, writer_properties=props, **kwargs)

    if phase == "create":
        for name in TABLES[:6]:
            write(name, source(tpch_dir, name))
        write("orders", o[0], partition_by=["o_orderpriority"])
        write("lineitem", li[0])
        write("orders", o[1], mode="append")
        write("lineitem", li[1], mode="append")
    elif phase == "overwrite":
        current = duckdb_rows(path["orders"])
        write("orders", urgent_rewritten(current), mode="overwrite", predicate="o_orderpriority = '1-URGENT'")
        DeltaTable(path["lineitem"]).delete("l_orderkey < 1000")
    elif phase == "deletes":
        for name, offset in [("lineitem", 0), ("orders", 7)]:
            DeltaTable(path[name]).alter.set_table_properties({"delta.enableDeletionVectors": "true"})
            fx.commit_deletion_vectors(path[name], every=20, offset_start=offset)
    elif phase == "compact":
        DeltaTable(path["lineitem"]).optimize.compact()
    elif phase == "evolve":
        write("lineitem", with_note(li[2]), mode="append", schema_mode="merge")
    elif phase == "respec":
        rows = pa.concat_tables([duckdb_rows(path["lineitem"]), with_note(li[3])])
        write("lineitem", rows, mode="overwrite", schema_mode="overwrite", partition_by=["l_returnflag"])
        write("orders", o[2], mode="append")
    for name in TABLES:
        write_expected(root, phase, name, duckdb_rows(path[name]))
    return {name: f"delta+{Path(path[name]).absolute().as_uri()}" for name in TABLES}


_DUCKDB = None


def duckdb_rows(table_path):
    """The table's current rows as DuckDB's delta extension reads them."""
    global _DUCKDB
    if _DUCKDB is None:
        import delta_server_fixture as fx

        _DUCKDB = fx.duckdb_connection()
    return _DUCKDB.execute(f"SELECT * FROM delta_scan('{table_path}')").fetch_arrow_table()


def main():
    fmt, root, tpch_dir, phase = sys.argv[1:5]
    assert phase in PHASES, f"unknown phase {phase}"
    os.makedirs(root, exist_ok=True)
    tables = {"iceberg": iceberg, "delta": delta}[fmt](root, tpch_dir, phase)
    print(json.dumps({"tables": tables}))


if __name__ == "__main__":
    main()
