"""Write a Delta Lake table with deltalake (delta-rs), in phases, for Silt's server tests.

Usage: delta_server_fixture.py TABLE_DIR PHASE

PHASE `create` makes the table (`id` long, `cat` string, `v` double;
partitioned by `cat`, whose values are then in the log and not in the
files; small row groups so deletes span several) and commits: two appends, a delete
(deltalake rewrites the files it touches), an overwrite of the rows of
`cat = 'a'` (replaceWhere), and then deletion vectors: deltalake enables
the feature but does not write vectors, so this script writes them to the
Delta protocol ("Deletion Vectors": a `.bin` file of framed, CRC-checked
64-bit roaring bitmaps, and one vector inline in the log) and commits them
as `remove` + `add` of the same file with its vector.
PHASE `more` commits: an added column (schema merge), a checkpoint, more
deletion vectors (on files that already have one: the union replaces it),
a compaction (optimize) and an append. PHASE `append` appends a few rows.
PHASE `appends N` commits N appends of 100 rows and prints nothing.
PHASE `mapping` or `mapping-id` (alone) makes a table with column mapping
(mode `name` or `id`) and renames and reuses a column name (see `mapping`).

After each phase, every version's rows are written to
`TABLE_DIR/../expected/<version>.parquet` as an independent reader returns
them: DuckDB's delta extension (delta-kernel-rs, which applies deletion
vectors; deltalake's pyarrow reader refuses tables with them), checked to
agree on the current version with deltalake's own query engine. One JSON object
is printed: {"table_location": URL, "current_version": N,
"versions": [{"version": N, "timestamp_ms": T, "rows": R}, ...]}.
"""

import json
import os
import struct
import sys
import time
import uuid
import zlib
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, QueryBuilder, WriterProperties, write_deltalake
from pyroaring import BitMap

sys.path.insert(0, str(Path(__file__).parent))
from iceberg_server_fixture import rows  # noqa: E402 (the same rows as the Iceberg tests)


def write(path, table, **kwargs):
    # Small row groups: deletion vectors then fall in many row groups of a file.
    write_deltalake(path, table, writer_properties=WriterProperties(max_row_group_size=400), **kwargs)


def create(path):
    write(path, rows(0, 3000), partition_by=["cat"])
    write(path, rows(3000, 3000), mode="append")
    DeltaTable(path).delete("id < 100")
    replacement = rows(10000, 600)
    replacement = replacement.filter(pa.compute.equal(replacement["cat"], "a"))
    write(path, replacement, mode="overwrite", predicate="cat = 'a'")
    DeltaTable(path).alter.set_table_properties({"delta.enableDeletionVectors": "true"})
    commit_deletion_vectors(path, every=7, inline_first=True)


Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85(data):
    assert len(data) % 4 == 0
    out = []
    for i in range(0, len(data), 4):
        (value,) = struct.unpack(">I", data[i : i + 4])
        chunk = []
        for _ in range(5):
            chunk.append(Z85[value % 85])
            value //= 85
        out.extend(reversed(chunk))
    return "".join(out)


def serialized_vector(positions):
    """The protocol's RoaringBitmapArray: magic, then one 32-bit bitmap per
    high half (all positions here are below 2**32: one, key 0)."""
    bitmap = BitMap(positions).serialize()
    return struct.pack("<I", 1681511377) + struct.pack("<Q", 1) + struct.pack("<I", 0) + bitmap


def commit_deletion_vectors(path, every, inline_first=False, offset_start=0):
    """Deletes every `every`-th row (by position, from `offset_start`) of
    each data file of the current version by a deletion vector: one `.bin`
    file holds all vectors but the first, which (if `inline_first`) is
    inline in the log. A file that already has a vector gets the union."""
    table = DeltaTable(path)
    adds = live_adds(path)
    log = Path(path) / "_delta_log"
    version = table.version() + 1
    now = int(time.time() * 1000)
    bin_uuid = uuid.uuid4()
    bin_data = bytearray(b"\x01")
    lines = [{"commitInfo": {"timestamp": now, "operation": "DELETE", "operationParameters": {}}}]
    for i, add in enumerate(sorted(adds, key=lambda a: a["path"])):
        count = json.loads(add["stats"])["numRecords"]
        positions = set(range(offset_start, count, every))
        old = add.get("deletionVector")
        if old:
            positions |= set(previous_vector(path, old))
        data = serialized_vector(sorted(positions))
        if inline_first and i == 0:
            padded = data + b"\0" * (-len(data) % 4)
            vector = {"storageType": "i", "pathOrInlineDv": z85(padded), "sizeInBytes": len(data), "cardinality": len(positions)}
        else:
            offset = len(bin_data)
            bin_data += struct.pack(">I", len(data)) + data + struct.pack(">I", zlib.crc32(data))
            vector = {
                "storageType": "u",
                "pathOrInlineDv": z85(bin_uuid.bytes),
                "offset": offset,
                "sizeInBytes": len(data),
                "cardinality": len(positions),
            }
        remove = {"path": add["path"], "deletionTimestamp": now, "dataChange": True, "extendedFileMetadata": True,
                  "partitionValues": add["partitionValues"], "size": add["size"]}
        if old:
            remove["deletionVector"] = {k: v for k, v in old.items() if v is not None}
        lines.append({"remove": remove})
        lines.append({"add": {"path": add["path"], "partitionValues": add["partitionValues"], "size": add["size"],
                              "stats": add["stats"],
                              "modificationTime": now, "dataChange": True, "deletionVector": vector}})
    (Path(path) / f"deletion_vector_{bin_uuid}.bin").write_bytes(bytes(bin_data))
    # Create-only, as a Delta writer commits: a version is never replaced.
    with open(log / f"{version:020d}.json", "x") as f:
        f.write("\n".join(json.dumps(line) for line in lines) + "\n")


def live_adds(path):
    """The `add` actions of the current version, by replaying the JSON
    commits (this fixture never removes old commits)."""
    live = {}
    for commit in sorted((Path(path) / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line) if line.strip() else {}
            if "add" in action:
                live[action["add"]["path"]] = action["add"]
            if "remove" in action:
                live.pop(action["remove"]["path"], None)
    return list(live.values())


def previous_vector(path, vector):
    if vector["storageType"] == "i":
        data = z85_decode(vector["pathOrInlineDv"])[: vector["sizeInBytes"]]
    else:
        raw = z85_decode(vector["pathOrInlineDv"][-20:])
        name = f"deletion_vector_{uuid.UUID(bytes=raw)}.bin"
        blob = (Path(path) / name).read_bytes()
        start = vector["offset"] + 4
        data = blob[start : start + vector["sizeInBytes"]]
    return list(BitMap.deserialize(data[4 + 8 + 4 :]))


def z85_decode(text):
    out = bytearray()
    for i in range(0, len(text), 5):
        value = 0
        for c in text[i : i + 5]:
            value = value * 85 + Z85.index(c)
        out += struct.pack(">I", value)
    return bytes(out)


def more(path):
    write(path, rows(20000, 900, extra=True), mode="append", schema_mode="merge")
    DeltaTable(path).create_checkpoint()
    commit_deletion_vectors(path, every=11, offset_start=3)
    DeltaTable(path).optimize.compact()
    write(path, rows(21000, 400, extra=True), mode="append")


def commit_metadata(path, change):
    """Commits the current `metaData` action after `change(fields,
    configuration)` edits its schema's fields and its configuration: a
    schema change deltalake's Python API does not make (renaming a column,
    adding one under column mapping), written to the protocol."""
    log = Path(path) / "_delta_log"
    version = DeltaTable(path).version() + 1
    meta = None
    for commit in sorted(log.glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            meta = action.get("metaData", meta)
    schema = json.loads(meta["schemaString"])
    change(schema["fields"], meta["configuration"])
    meta["schemaString"] = json.dumps(schema)
    lines = [
        {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "CHANGE COLUMN"}},
        {"metaData": meta},
    ]
    (log / f"{version:020}.json").write_text("".join(json.dumps(line) + "\n" for line in lines))


def mapping(path, mode="name"):
    """A table with column mapping (mode `name` or `id`: data files,
    statistics and partition values use physical names; in mode `id` files
    are matched by field id), partitioned by `cat`: two
    appends, `v` renamed to `amount` (its physical name stays), a new
    string column given the name `v` (a new physical name: older files'
    `v` column is not it), and an append that fills both."""
    properties = {"delta.columnMapping.mode": mode, "delta.minReaderVersion": "2", "delta.minWriterVersion": "5"}
    write(path, rows(0, 2000), partition_by=["cat"], configuration=properties)
    write(path, rows(2000, 1000), mode="append")

    def rename(fields, configuration):
        for field in fields:
            if field["name"] == "v":
                field["name"] = "amount"

    def add_v(fields, configuration):
        column_id = int(configuration["delta.columnMapping.maxColumnId"]) + 1
        configuration["delta.columnMapping.maxColumnId"] = str(column_id)
        physical = f"col-{uuid.uuid4()}"
        metadata = {"delta.columnMapping.id": column_id, "delta.columnMapping.physicalName": physical}
        fields.append({"name": "v", "type": "string", "nullable": True, "metadata": metadata})

    commit_metadata(path, rename)
    commit_metadata(path, add_v)
    ids = list(range(5000, 5600))
    appended = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "cat": pa.array(["abc"[i % 3] for i in ids], pa.string()),
            "amount": pa.array([i * 0.25 for i in ids], pa.float64()),
            "v": pa.array([f"x{i % 11}" if i % 5 else None for i in ids], pa.string()),
        }
    )
    write(path, appended, mode="append")


def append(path):
    first = 30000 + 100 * DeltaTable(path).version()
    extra = "note" in DeltaTable(path).schema().to_arrow().names
    write(path, rows(first, 30, extra=extra), mode="append")


def appends(path, count):
    for _ in range(count):
        first = 40000 + 100 * DeltaTable(path).version()
        extra = "note" in DeltaTable(path).schema().to_arrow().names
        write(path, rows(first, 100, extra=extra), mode="append")


def duckdb_connection():
    import duckdb_ext  # the wheel's namespace package: the extension files

    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions = false")
    extensions = Path(list(duckdb_ext.__path__)[0]) / "extensions"
    con.execute(f"SET extension_directory = '{extensions}'")
    con.execute("LOAD delta")
    return con


def duckdb_rows(con, path, version):
    """The version's rows as DuckDB's delta extension reads them."""
    con.execute(f"ATTACH IF NOT EXISTS '{path}' AS v{version} (TYPE delta, VERSION {version})")
    return con.execute(f"SELECT * FROM v{version} ORDER BY id").fetch_arrow_table()


def deltalake_rows(path, version=None):
    """A version's rows (the current one's by default) as deltalake's own
    query engine reads them, strings as plain strings."""
    table = DeltaTable(path) if version is None else DeltaTable(path, version=version)
    result = pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t ORDER BY id").read_all())
    plain = [pa.field(f.name, pa.string() if f.type == pa.string_view() else f.type) for f in result.schema]
    return result.cast(pa.schema(plain))


def describe(path, mapped=False):
    """Every version's rows (module doc). `mapped` (column mapping): the
    expected rows are deltalake's, and DuckDB is checked on every column but
    the partition column: its delta extension (1.4.4) reads a column-mapped
    table's partition values as nulls."""
    expected = Path(path).parent / "expected"
    expected.mkdir(exist_ok=True)
    con = duckdb_connection()
    current = DeltaTable(path)
    versions = []
    for entry in current.history():
        version = entry["version"]
        if mapped:
            result = deltalake_rows(path, version)
            duck = duckdb_rows(con, path, version).drop_columns(["cat"])
            mine = result.drop_columns(["cat"])
            assert duck.to_pylist() == mine.cast(duck.schema).to_pylist(), f"deltalake and DuckDB disagree at {version}"
        else:
            result = duckdb_rows(con, path, version)
        pq.write_table(result, expected / f"{version}.parquet")
        versions.append({"version": version, "timestamp_ms": entry["timestamp"], "rows": result.num_rows})
    if not mapped:
        # A second independent reader agrees on the current version.
        theirs = deltalake_rows(path)
        mine = duckdb_rows(con, path, current.version())
        assert mine.to_pylist() == theirs.cast(mine.schema).to_pylist(), "deltalake and DuckDB disagree"
    return {
        "table_location": Path(path).absolute().as_uri(),
        "current_version": current.version(),
        "versions": sorted(versions, key=lambda v: v["version"]),
    }


def main():
    path, phase = sys.argv[1], sys.argv[2]
    if phase == "appends":
        appends(path, int(sys.argv[3]))
        return
    if phase.startswith("mapping"):
        mapping(path, phase.removeprefix("mapping-") if "-" in phase else "name")
        print(json.dumps(describe(path, mapped=True)))
        return
    {"create": create, "more": more, "append": append}[phase](path)
    print(json.dumps(describe(path)))


if __name__ == "__main__":
    main()
